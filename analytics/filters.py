"""The filters every view shares (date range, team, cluster, user), turned into bound SQL.

``horizon`` (the latest moment the ledger has data for) lives in analytics/shared.py, beside the memo that
asks it once per sharing block, and is re-exported here where the analytics have always imported it: shared.py
needs it to fill an omitted ``as_of``, so defining it here made the two modules import each other."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

from analytics.shared import horizon

__all__ = ["Filters", "horizon"]


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
