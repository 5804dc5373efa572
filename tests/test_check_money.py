"""``gpuledger check``'s money invariants (issue 41): the what-if against the same ledger repriced in SQL, and no
negative money (gpuledger/cli/commands/check.py ``money_invariants``, analytics/whatif_audit.py)."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analytics.whatif_audit import negative_money
from gpuledger.ledger.prices import PriceBook
from tests.conftest import gpuledger
from tests.test_price_in_force import WHATIF_JOBS, WHATIF_PRICES, ledger, price

EXTRA = [  # an A100 job across both price rows, and a job on a cluster with its own A100 rows
    "c,carol,cv,edge,A100,2,2026-11-19T14:00:00,2026-11-22T10:00:00,COMPLETED",
    "d,dave,nlp,cloud,A100,1,2026-11-20T20:00:00,2026-11-21T04:00:00,FAILED",
]


def check(db: str, settings: str) -> tuple[int, dict]:
    done = gpuledger("check", "--json", "--db", db, "--settings", settings)
    return done.returncode, json.loads(done.stdout)


def test_the_whatif_agrees_with_the_ledger_repriced_in_sql(tmp_path: Path) -> None:
    db, settings = ledger(tmp_path, [*WHATIF_JOBS, *EXTRA], *WHATIF_PRICES, price("L4", 0.3, "2026-11-21"))
    rc, out = check(db, settings)
    assert (rc, out["money"]) == (0, [])


def test_a_whatif_that_prices_every_day_at_the_latest_row_is_caught(tmp_path: Path, monkeypatch) -> None:
    db, settings = ledger(tmp_path, [*WHATIF_JOBS, *EXTRA], *WHATIF_PRICES)

    def latest(self, model, tier, cluster, start, end, *, fallback=True):  # the what-if before issue 41
        rate = self.rate(model, tier, cluster) if fallback else self.offered(model, tier, cluster)
        return None if rate is None else rate * (end - start).total_seconds() / 3600

    monkeypatch.setattr(PriceBook, "usd", latest)
    rc, out = check(db, settings)
    assert rc == 1
    # team nlp's job a: the latest spot row prices its 20 GPU-h at $2.50 = $50, no saving; the ledger repriced
    # in SQL: 10 × $1.50 + 10 × $2.50 = $40, $10 saved. Job d (A100-40GB, no dated row) saves the same both ways.
    line = next(m for m in out["money"] if m.startswith("team nlp on spot"))
    got, want = (float(x.split("$")[1].replace(",", "")) for x in line.split(", "))
    assert want - got == pytest.approx(10.0)


def test_negative_money_is_named_row_by_row() -> None:
    summary = {"spend_usd": 5.0, "gpu_hours": 1.0, "waste": {"productive_usd": 7.0, "unallocated_usd": -2.0}}
    jobs = pl.DataFrame({"job_id": ["a", "b"], "cost_usd": [3.0, -2.0], "gpu_hours": [1.0, -0.5]})
    assert negative_money(summary, jobs) == [
        "summary: unallocated_usd is -2.00",
        "job b: cost_usd is -2.00",
        "job b: gpu_hours is -0.50",
    ]
    assert negative_money({**summary, "waste": {"productive_usd": 5.0}}, jobs.head(1)) == []


@pytest.mark.parametrize("team", ["nlp", "cv"])
def test_spot_saving_in_sql_by_hand(tmp_path: Path, team: str) -> None:
    """analytics.whatif_audit.spot_saving_sql on the reproduction: nlp's job a $50 → $40 (cloud: 10 GPU-h at
    $1.50 and 10 at $2.50), cv's job b $50 → $30 (edge's own spot rows, $1.00 and $2.00)."""
    from analytics.whatif_audit import spot_saving_sql
    from gpuledger.ledger.db import reader
    from gpuledger.ledger.settings import load_settings

    db, settings = ledger(tmp_path, WHATIF_JOBS, *WHATIF_PRICES)
    with reader(db) as con:
        got = spot_saving_sql(
            con, team, load_settings(settings), __import__("analytics.filters").filters.Filters()
        )
    assert got == pytest.approx({"nlp": 10.0, "cv": 20.0}[team])
