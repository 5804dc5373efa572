"""Which price a job pays: per-cluster rows, tier fallback, and prices a source declares vs the user's settings."""

from __future__ import annotations

import datetime as dt

from analytics.cost import job_costs
from collectors.base import IngestOptions, land, next_ingest_id, record_ingest, run_in_transaction
from gpuledger.ledger.reference import load_reference
from gpuledger.ledger.settings import PriceRow, Settings

JOBS = """CREATE TEMP TABLE stage_jobs AS SELECT * FROM (VALUES
    ('onprem-job', 'borealis', 'A100-80GB', 2.0, 'on_prem', TIMESTAMP '2026-01-10 00:00', TIMESTAMP '2026-01-10 10:00'),
    ('other-onprem', 'elsewhere', 'A100-80GB', 1.0, 'on_prem', TIMESTAMP '2026-01-10 00:00', TIMESTAMP '2026-01-10 10:00'),
    ('cloud-job', 'borealis', 'T4', 1.0, 'on_demand', TIMESTAMP '2026-01-10 00:00', TIMESTAMP '2026-01-10 10:00')
) v(job_id, cluster, gpu_model, gpu_count, pricing_tier, start_ts, end_ts)"""

DECLARED = """CREATE TEMP TABLE stage_prices AS SELECT * FROM (VALUES
    ('A100-80GB', 'on_prem', 'borealis', DATE '2025-01-01', 1.10, 'amortized', DATE '2026-01-15')
) v(gpu_model, tier, cluster, effective_from, usd_per_gpu_hour, source, source_date)"""


def _ingest(con, *stage_sql: str) -> int:
    def work():
        ingest_id = next_ingest_id(con)
        for sql in stage_sql:
            con.execute(sql)
        rows = land(con, ingest_id, IngestOptions())
        record_ingest(
            con, ingest_id, path="t://", source_key="t", sha256=str(ingest_id), fmt="t", rows=rows, skipped={}
        )
        return ingest_id

    return run_in_transaction(con, work)


def _costs(con) -> dict[str, tuple[str, float]]:
    df = job_costs(con)
    return {r["job_id"]: (r["price_tier"], round(r["cost_usd"], 6)) for r in df.iter_rows(named=True)}


def test_cluster_rows_apply_only_to_their_cluster_and_tier_falls_back_to_on_demand(ledger):
    _ingest(ledger, JOBS, DECLARED)
    costs = _costs(ledger)
    # borealis's declared on-prem rate: 2 GPUs × 10 h × $1.10
    assert costs["onprem-job"] == ("on_prem", 22.0)
    # another cluster has no on_prem A100 price of its own and there is no generic one: on_demand $1.79 × 10 h
    assert costs["other-onprem"] == ("on_demand", 17.9)
    # T4 on borealis: no borealis T4 rows, the generic on-demand sheet row $0.526 × 10 h
    assert costs["cloud-job"] == ("on_demand", 5.26)


def test_declared_prices_survive_a_settings_change_and_settings_win_on_the_same_key(ledger):
    _ingest(ledger, JOBS, DECLARED)
    override = PriceRow(
        "A100-80GB", "on_prem", 0.90, dt.date(2025, 1, 1), "ours", dt.date(2026, 2, 1), "borealis"
    )
    ledger.execute("BEGIN")
    load_reference(ledger, Settings(prices=(override,)))
    ledger.execute("COMMIT")
    assert ledger.execute(
        "SELECT origin, count(*) FROM prices WHERE cluster = 'borealis' GROUP BY 1 ORDER BY 1"
    ).fetchall() == [
        ("ingest", 1),
        ("settings", 1),
    ]
    assert _costs(ledger)["onprem-job"] == ("on_prem", 18.0)  # 2 × 10 h × $0.90: settings beat the source
    ledger.execute("BEGIN")
    load_reference(ledger, Settings())
    ledger.execute("COMMIT")
    assert _costs(ledger)["onprem-job"] == ("on_prem", 22.0)  # the source's own rate is still there


def test_declared_prices_leave_with_their_ingest(ledger):
    from collectors.base import delete_ingests

    ingest_id = _ingest(ledger, JOBS, DECLARED)
    ledger.execute("BEGIN")
    delete_ingests(ledger, [ingest_id], idle_util_pct=5.0)
    ledger.execute("COMMIT")
    assert ledger.execute("SELECT count(*) FROM prices WHERE origin = 'ingest'").fetchall() == [(0,)]


def test_the_price_book_answers_what_the_job_costs_answer(ledger):
    """gpuledger.ledger.prices.PriceBook: the pages', the what-if's and the advice's lookup. Each figure by hand
    from the rows above and the shipped sheet (A100-80GB on_demand $1.79, T4 on_demand $0.526)."""
    from gpuledger.ledger.prices import price_book

    _ingest(ledger, JOBS, DECLARED)
    book = price_book(ledger)
    assert book.rate("A100-80GB", "on_prem", "borealis") == 1.10  # the cluster's declared row
    assert book.rate("A100-80GB", "on_prem", "elsewhere") == 1.79  # no on_prem price there: on_demand
    assert book.offered("A100-80GB", "on_prem", "elsewhere") is None
    assert book.rate("T4", "on_demand", "borealis") == 0.526
    ledger.execute("BEGIN")
    load_reference(
        ledger,
        Settings(
            prices=(
                PriceRow(
                    "A100-80GB", "on_prem", 0.90, dt.date(2025, 1, 1), "ours", dt.date(2026, 2, 1), "borealis"
                ),
            )
        ),
    )
    ledger.execute("COMMIT")
    assert price_book(ledger).rate("A100-80GB", "on_prem", "borealis") == 0.90  # settings beat the source
    # the rows in force: one per key, the declared borealis row shown (Settings' "prices in force")
    rows = {(r.cluster, r.tier, r.origin) for r in price_book(ledger).rows if r.gpu_model == "A100-80GB"}
    assert ("borealis", "on_prem", "settings") in rows and ("borealis", "on_prem", "ingest") not in rows


def test_the_price_book_keeps_each_rows_period(ledger):
    # two generic spot rows for a model: $2.00 from 2025-01-01, $1.50 from 2025-06-01
    ledger.execute("DELETE FROM prices WHERE gpu_model = 'L4' AND tier = 'spot'")
    ledger.execute(
        """INSERT INTO prices VALUES ('L4', 'spot', NULL, DATE '2025-01-01', 2.00, 't', DATE '2025-01-01', 'settings', NULL),
                                     ('L4', 'spot', NULL, DATE '2025-06-01', 1.50, 't', DATE '2025-06-01', 'settings', NULL)"""
    )
    from gpuledger.ledger.prices import price_book

    book = price_book(ledger)
    assert book.offered("L4", "spot", on=dt.date(2024, 1, 1)) == 2.00  # the first row covers earlier dates
    assert book.offered("L4", "spot", on=dt.date(2025, 5, 31)) == 2.00
    assert book.offered("L4", "spot", on=dt.date(2025, 6, 1)) == 1.50
    assert book.offered("L4", "spot") == 1.50
