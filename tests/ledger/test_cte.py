"""gpuledger/ledger/cte.py: a statement's parameters follow its CTEs' marks, whatever order they are built in."""

from __future__ import annotations

import datetime as dt

import duckdb

from gpuledger.ledger.cte import Cte, with_ctes


def test_each_ctes_values_bind_to_its_own_marks_in_the_order_written():
    sql, params = with_ctes(
        [
            Cte("a", "SELECT ?::INTEGER AS x, ?::VARCHAR AS y", (1, "one")),
            "b AS (SELECT x * 10 AS x10 FROM a)",  # a definition without parameters, as text
            Cte("c", "SELECT x10 + ?::INTEGER AS z FROM b", (5,), materialized=True),
        ],
        "SELECT y, z, ?::DATE AS d FROM a, c",
        [dt.date(2026, 11, 20)],
    )
    assert params == [1, "one", 5, dt.date(2026, 11, 20)]
    assert "c AS MATERIALIZED (" in sql
    # 1 × 10 + 5 = 15: each value reached the mark of the CTE that carried it
    assert duckdb.connect().execute(sql, params).fetchall() == [("one", 15, dt.date(2026, 11, 20))]


def test_a_cte_without_values_adds_none():
    sql, params = with_ctes([Cte("a", "SELECT 2 AS x")], "SELECT x FROM a")
    assert params == []
    assert duckdb.connect().execute(sql).fetchall() == [(2,)]
