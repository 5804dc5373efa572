"""``gpuledger check [--fix]``: find (and remove) ledger rows outside their physical range.

Ingest rejects such rows since the plausibility checks (collectors/validate.py); a ledger written before them,
or by a tool that bypassed them, may still hold one — a sample dated 2099, a job ending at ``infinity`` —
and one such row turns into phantom GPU-hours and money. ``check`` lists each with the rule it breaks;
``--fix`` removes them all in one transaction (a removed job takes its allocations, training run and train
log with it; a GPU keeps its row, the implausible value becomes unknown) and re-rolls the GPU-minutes the
removed samples touched.
"""

from __future__ import annotations

import argparse
from collections import Counter

import duckdb
import polars as pl

from analytics.model_mismatch import describe as describe_mismatch
from analytics.time_sliced import describe as describe_time_sliced
from analytics.time_sliced import time_sliced_hosts
from collectors.validate import JOB_CHILDREN, Violation, ledger_violations
from gpuledger.cli.commands._common import add_db_options, print_json
from gpuledger.ledger.db import reader, writer
from gpuledger.ledger.sample_time import reach_sql
from gpuledger.ledger.settings import Settings, load_settings


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "check",
        help="list ledger rows outside their physical range; --fix removes them",
        description="List every ledger row that breaks a plausibility rule (utilization 0-100 %, power up to "
        "2 x TDP, times between 2000 and tomorrow, finite numbers, ...: docs/metrics.md). Exit 0 when "
        "none, 1 when some remain.",
    )
    p.add_argument(
        "--fix", action="store_true", help="remove them (one transaction) and re-roll what they touched"
    )
    p.add_argument("--json", action="store_true", help="print a JSON object: rows and removed counts")
    p.add_argument("--limit", type=int, default=50, help="list at most N rows (default 50; all are fixed)")
    p.add_argument(
        "--no-money",
        action="store_true",
        help="skip the money invariants (the what-if against the ledger repriced in SQL, no negative money)",
    )
    add_db_options(p)
    p.set_defaults(func=run)


def _max_job_days(settings: object) -> float:
    return float(getattr(settings, "max_job_days", 365.0))


def run(args: argparse.Namespace) -> int:
    settings = load_settings(args.settings)
    days = _max_job_days(settings)
    removed: dict[str, int] = {}
    if args.fix:
        with writer(args.db) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                found = ledger_violations(con, max_job_days=days)
                removed = fix(con, found, settings)
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
    else:
        with reader(args.db) as con:
            found = ledger_violations(con, max_job_days=days)
    # the money invariants read figures: on a ledger that still holds rows outside their range (a job ending at
    # infinity) they would measure those rows, not the rules
    money = [] if (args.no_money or (found and not args.fix)) else money_invariants(args.db, settings)
    mismatches: list[dict[str, object]] = []
    sliced: list[dict[str, object]] = []
    if not (args.no_money or (found and not args.fix)):
        with reader(args.db) as con:  # read after money_invariants synced the reference
            allocation, mismatches = allocation_findings(con, settings)
            sliced = time_sliced_hosts(con).to_dicts()
        money += allocation
    if args.json:
        print_json(
            {
                "rows": [_as_dict(v) for v in found],
                "removed": removed,
                "money": money,
                "model_mismatches": mismatches,
                "time_sliced_hosts": sliced,
            }
        )
        return 0 if ((not found or args.fix) and not money) else 1
    for m in money:
        print(f"money: {m}")
    for mm in mismatches:
        print(f"note: {describe_mismatch(mm)}")
    for ts in sliced:
        print(f"note: {describe_time_sliced(ts)}")
    for v in found[: args.limit]:
        print(describe(v))
    if len(found) > args.limit:
        print(f"... and {len(found) - args.limit:,} more")
    if not found:
        print("no rows outside their physical range")
    elif removed:
        parts = ", ".join(f"{n:,} {t}" for t, n in removed.items())
        print(f"removed {sum(removed.values()):,} row(s) in one transaction: {parts}")
    else:
        print(f"{len(found):,} row(s) outside their physical range: gpuledger check --fix removes them")
    return 0 if ((not found or args.fix) and not money) else 1


def money_invariants(db: str, settings: Settings) -> list[str]:
    """The what-if and price invariants over the whole ledger (issue 41), one line per breach: no negative
    dollar or GPU-hour in the summary or a job; the what-if's "now" is the summary and with no change its
    figures are "now"; moving each team to spot, and each GPU model to another priced one, saves what the same
    ledger repriced in SQL saves (analytics/whatif_audit.py: the SQL form of the price in force against the
    what-if's Python form)."""
    from analytics.filters import Filters
    from analytics.shared import sharing
    from analytics.summary import summary
    from analytics.whatif import what_if, whatif_jobs
    from analytics.whatif_audit import TOLERANCE_USD, model_saving_sql, negative_money, spot_saving_sql
    from gpuledger.ledger.db import sync_reference
    from gpuledger.ledger.prices import price_book

    sync_reference(db, settings)
    out: list[str] = []
    view = Filters()
    with reader(db) as con, sharing(con):
        now = summary(con, filters=view, settings=settings)
        jobs = whatif_jobs(con, filters=view, settings=settings)
        out += negative_money(now, jobs)
        book = price_book(con)
        nothing = what_if(now, jobs, pl.DataFrame(), book, settings)
        if nothing.after != now:
            out.append("what-if with no change differs from the summary")
        teams = sorted(t for t in jobs["team"].drop_nulls().unique().to_list()) if jobs.height else []
        for team in teams:
            got = what_if(now, jobs, pl.DataFrame(), book, settings, spot=(team,)).changes[0].saving_usd
            want = spot_saving_sql(con, team, settings, view)
            if abs(got - want) > TOLERANCE_USD:
                out.append(
                    f"team {team} on spot: the what-if saves ${got:,.2f}, the ledger repriced ${want:,.2f}"
                )
        models = sorted(m for m in jobs["gpu_model"].drop_nulls().unique().to_list()) if jobs.height else []
        priced = sorted({r.gpu_model for r in book.rows})
        for old in models:
            new = next((m for m in priced if m > old), None) or next((m for m in priced if m != old), None)
            if new is None:
                continue
            got = (
                what_if(now, jobs, pl.DataFrame(), book, settings, models=((old, new),)).changes[0].saving_usd
            )
            want = model_saving_sql(con, old, new, view)
            if abs(got - (want or 0.0)) > TOLERANCE_USD:
                out.append(
                    f"{new} instead of {old}: the what-if saves ${got:,.2f}, the ledger repriced ${want or 0:,.2f}"
                )
    return out


def allocation_findings(
    con: duckdb.DuckDBPyConnection, settings: Settings
) -> tuple[list[str], list[dict[str, object]]]:
    """(the money invariants the ledger breaks, one sentence each: analytics/money_checks.py; the jobs booked as
    another GPU model than their cards report: analytics/model_mismatch.py). A broken invariant makes check
    exit 1 (no --fix removes it: it is a fault to report); a mismatch is a note: such a job is priced as
    booked and its card counted once."""
    from analytics.model_mismatch import model_mismatches
    from analytics.money_checks import money_problems

    return money_problems(con, settings), model_mismatches(con).to_dicts()


def describe(v: Violation) -> str:
    origin = f" (ingest #{v.ingest_id})" if v.ingest_id is not None else ""
    return f"{v.table}: {v.key}{origin}: {v.reason}"


def _as_dict(v: Violation) -> dict[str, object]:
    return {
        "table": v.table,
        "row": v.key,
        "ingest_id": v.ingest_id,
        "column": v.column,
        "value": v.value,
        "reason": v.reason,
    }


def fix(con: duckdb.DuckDBPyConnection, found: list[Violation], settings: object) -> dict[str, int]:
    """Remove the rows of ``found`` inside the caller's transaction; returns rows removed per table."""
    from gpuledger.ledger.rollup import refresh_windows, thresholds

    removed: Counter[str] = Counter()
    by_table: dict[str, list[int]] = {}
    for v in found:
        if v.rid is not None:
            by_table.setdefault(v.table, []).append(v.rid)
    con.execute("CREATE OR REPLACE TEMP TABLE check_rids (tbl VARCHAR, rid BIGINT)")
    con.executemany(
        "INSERT INTO check_rids VALUES (?, ?)", [[t, r] for t, rids in by_table.items() for r in set(rids)]
    )
    if "jobs" in by_table:
        con.execute(
            """CREATE OR REPLACE TEMP TABLE check_jobs AS
               SELECT job_id FROM jobs WHERE rowid IN (SELECT rid FROM check_rids WHERE tbl = 'jobs')"""
        )
    touched = "samples" in by_table or "jobs" in by_table
    if touched:
        # the minutes the removed samples, and the samples of removed jobs, stood for: re-rolled after
        of_jobs = "OR job_id IN (SELECT job_id FROM check_jobs)" if "jobs" in by_table else ""
        con.execute(
            f"""CREATE OR REPLACE TEMP TABLE check_windows AS
               SELECT gpu_id, min(ts) AS lo,
                      max({reach_sql("ts", "interval_s::DOUBLE")}) AS hi
               FROM samples
               WHERE (rowid IN (SELECT rid FROM check_rids WHERE tbl = 'samples') {of_jobs})
                 AND isfinite(ts) AND ts BETWEEN TIMESTAMP '1970-01-01' AND TIMESTAMP '2200-01-01'
                 AND isfinite(interval_s) AND interval_s BETWEEN 0 AND 86400
               GROUP BY gpu_id"""
        )
    for table, _ in by_table.items():
        if table == "gpus":
            continue
        n = con.execute(
            f"DELETE FROM {table} WHERE rowid IN (SELECT rid FROM check_rids WHERE tbl = ?)", [table]
        ).fetchall()[0][0]
        removed[table] += int(n)
    if "jobs" in by_table:
        for child in JOB_CHILDREN:
            n = con.execute(
                f"DELETE FROM {child} WHERE job_id IN (SELECT job_id FROM check_jobs)"
            ).fetchall()[0][0]
            removed[child] += int(n)
        # samples attributed to a removed job are no longer that job's
        con.execute("UPDATE samples SET job_id = NULL WHERE job_id IN (SELECT job_id FROM check_jobs)")
    if "gpus" in by_table:
        for v in found:
            if v.table == "gpus" and v.column in ("memory_total_mib", "first_seen", "last_seen"):
                con.execute(f"UPDATE gpus SET {v.column} = NULL WHERE rowid = ?", [v.rid])
                removed["gpus (value cleared)"] += 1
    if "samples" in by_table or "gpus" in by_table:
        con.execute(
            """UPDATE gpus SET first_seen = m.lo, last_seen = m.hi
               FROM (SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM samples GROUP BY gpu_id) m
               WHERE m.gpu_id = gpus.gpu_id"""
        )
    if touched:
        # rollup rows of a time that cannot be (an infinite minute) go; the rest is re-rolled
        for table, col in (
            ("samples_minute", "minute"),
            ("samples_day", "day"),
            ("samples_hour", "hour"),
            ("samples_util_hist", "day"),
        ):
            con.execute(f"DELETE FROM {table} WHERE NOT isfinite({col})")
        con.execute("DELETE FROM idle_runs WHERE NOT isfinite(run_start) OR NOT isfinite(end_ts)")
        th = thresholds(
            getattr(settings, "idle_util_pct", 5.0),
            getattr(settings, "idle_min_minutes", 30.0),
            getattr(settings, "target_util_pct", 60.0),
        )
        refresh_windows(con, "SELECT * FROM check_windows", [], th)
    for t in ("check_rids", "check_windows", "check_jobs"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    return {t: n for t, n in removed.items() if n}
