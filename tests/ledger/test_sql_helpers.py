"""gpuledger/ledger/sql.py: quoting, IN-lists and the pseudo-job of unclaimed telemetry, checked in DuckDB."""

from __future__ import annotations

import duckdb

from gpuledger.ledger.sql import PSEUDO_PREFIX, pseudo_job_sql, quote, sql_list


def test_a_quote_in_a_name_stays_in_the_literal():
    name = "it's"
    assert duckdb.sql("SELECT " + quote(name)).fetchall() == [("it's",)]
    assert duckdb.sql("SELECT 'b''s' IN (" + sql_list(["a", "b's"]) + ")").fetchall() == [(True,)]


def test_unclaimed_telemetry_belongs_to_its_cards_pseudo_job():
    sql = f"""SELECT {pseudo_job_sql("t", "s.job_id")} FROM (VALUES ('g0', 'j1'), ('g1', NULL)) s(gpu_id, job_id)
              LEFT JOIN (VALUES ('g1', 'ws:0')) t(gpu_id, card) USING (gpu_id) ORDER BY s.gpu_id"""
    assert duckdb.sql(sql).fetchall() == [("j1",), (PSEUDO_PREFIX + "ws:0",)]
    assert PSEUDO_PREFIX + "ws:0" == "unattributed:ws:0"  # the id the jobs table and the reports show
