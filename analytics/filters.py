"""The filters every view shares (date range, team, cluster, user), turned into bound SQL."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb


@dataclass(frozen=True)
class Filters:
    """A view of the ledger. Dates are UTC days, both ends included; empty tuples mean "all"."""

    since: dt.date | None = None
    until: dt.date | None = None
    teams: tuple[str, ...] = ()
    clusters: tuple[str, ...] = ()
    users: tuple[str, ...] = ()

    @property
    def lo(self) -> dt.datetime | None:
        return dt.datetime.combine(self.since, dt.time()) if self.since else None

    @property
    def hi(self) -> dt.datetime | None:
        """Exclusive upper bound: midnight after ``until``."""
        return dt.datetime.combine(self.until + dt.timedelta(days=1), dt.time()) if self.until else None

    def job_where(self, alias: str = "j") -> tuple[str, list[object]]:
        """SQL predicate (and parameters) selecting the jobs of this view by team/cluster/user."""
        # a stored infinite time (a ledger from before the plausibility checks: gpuledger check --fix) is no
        # job of any view, rather than a "Cannot subtract infinite timestamps" failure
        parts: list[str] = [
            f"isfinite(coalesce({alias}.start_ts, TIMESTAMP '2000-01-01'))",
            f"isfinite(coalesce({alias}.end_ts, TIMESTAMP '2000-01-01'))",
        ]
        params: list[object] = []
        for column, values in (("team", self.teams), ("cluster", self.clusters), ("user_name", self.users)):
            if values:
                parts.append(f"{alias}.{column} IN ({', '.join('?' for _ in values)})")
                params.extend(values)
        return " AND ".join(parts), params


def horizon(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    """The latest moment the ledger has data for (the end of its last sample, or the latest job time): running
    jobs are costed up to here.

    Using the data's own horizon (not the wall clock) keeps every figure reproducible: the dashboard, the
    CLI and a report computed a minute apart agree to the cent. Asked once per sharing block
    (analytics/shared.py): nearly every analytics function asks for it, 5-15 ms a time on the 28-day demo.
    """
    from analytics.shared import memo  # analytics.shared imports this module lazily too

    return memo(con, "horizon", lambda: _horizon(con))  # type: ignore[no-any-return]


def _horizon(con: duckdb.DuckDBPyConnection) -> dt.datetime | None:
    row = con.execute(
        """SELECT greatest(
               -- the end of the last sample (ts + interval_s), not its start: a running job holds its card
               -- through its last sample's interval, which is billed to it, not lost (per-day rollup: a few
               -- rows per GPU-day; isfinite as a range, which zone maps answer)
               (SELECT max(max_end_ts) FROM samples_day
                WHERE max_end_ts > '-infinity'::TIMESTAMP AND max_end_ts < 'infinity'::TIMESTAMP),
               (SELECT max(greatest(coalesce(end_ts, start_ts), start_ts)) FROM jobs
                WHERE isfinite(coalesce(end_ts, start_ts)) AND isfinite(start_ts)),
               (SELECT max(coalesce(end_ts, start_ts)) FROM allocations WHERE isfinite(coalesce(end_ts, start_ts))))"""
    ).fetchall()
    return row[0][0]
