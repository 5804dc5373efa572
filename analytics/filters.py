"""The filters every view shares (date range, team, cluster, user), turned into bound SQL.

``horizon`` (the latest moment the ledger has data for) lives in analytics/shared.py, beside the memo that
asks it once per sharing block, and is re-exported here where the analytics have always imported it: shared.py
needs it to fill an omitted ``as_of``, so defining it here made the two modules import each other."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import duckdb

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


# The pseudo-rows a team or user filter may name although no job carries them (analytics.waste's
# "unallocated" capacity, analytics.cost's "unattributed" telemetry-only cards).
PSEUDO_NAMES = ("unallocated", "unattributed")
# (what a filter names, its Filters field, the SQL listing what the ledger holds)
_NAMED = (
    ("team", "teams", "SELECT DISTINCT team FROM jobs WHERE team IS NOT NULL"),
    (
        "cluster",
        "clusters",
        """SELECT DISTINCT cluster FROM (SELECT cluster FROM jobs UNION ALL SELECT cluster FROM gpus
                                          UNION ALL SELECT cluster FROM capacity) WHERE cluster IS NOT NULL""",
    ),
    ("user", "users", "SELECT DISTINCT user_name FROM jobs WHERE user_name IS NOT NULL"),
)
NAMES_LISTED = 20  # a message lists at most this many of the names that exist (users can be thousands)


@dataclass(frozen=True)
class UnknownName:
    """A filter value the ledger has no row for: ``what`` (team, cluster or user), the value, and the names
    of that kind the ledger does hold (sorted)."""

    what: str
    value: str
    known: tuple[str, ...]

    @property
    def message(self) -> str:
        """``no team 'nlp' in the ledger (teams: a, b, c)``, with a close match first when there is one."""
        import difflib

        shown = ", ".join(self.known[:NAMES_LISTED]) or "none"
        if len(self.known) > NAMES_LISTED:
            shown += f", … {len(self.known) - NAMES_LISTED:,} more"
        close = difflib.get_close_matches(self.value, self.known, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        return f"no {self.what} '{self.value}' in the ledger ({self.what}s: {shown}){hint}"


_COLUMN = {"team": "team", "cluster": "cluster", "user": "user_name"}


def known_names(
    con: duckdb.DuckDBPyConnection, what: str, *, within_teams: tuple[str, ...] | None = None
) -> tuple[str, ...]:
    """The ledger's teams, clusters or users (``what``: team | cluster | user), sorted: the one list the
    sidebar offers and :func:`unknown_names` checks a filter against (clusters: of jobs, GPUs and declared
    capacity).

    ``within_teams``: a lead's scope (pages/_scope.py). Then only the names of those teams' jobs exist: their
    teams, the clusters and users their jobs ran on and under. A name outside the scope is then answered
    exactly as a name the ledger lacks (issue 43: "No jobs in this view" for another team's user, "no user
    'zzz'" for an unknown one, told a lead which users existed elsewhere)."""
    if within_teams is not None:
        if not within_teams:
            return ()
        marks = ", ".join("?" for _ in within_teams)
        column = _COLUMN[what]
        rows = con.execute(
            f"SELECT DISTINCT {column} FROM jobs WHERE team IN ({marks}) AND {column} IS NOT NULL",
            list(within_teams),
        ).fetchall()
        return tuple(sorted(r[0] for r in rows))
    sql = next(q for w, _, q in _NAMED if w == what)
    return tuple(sorted(r[0] for r in con.execute(sql).fetchall()))


def unknown_names(
    con: duckdb.DuckDBPyConnection, filters: Filters, *, within_teams: tuple[str, ...] | None = None
) -> list[UnknownName]:
    """The team, cluster and user values of ``filters`` that name nothing in the ledger, each with what
    exists: a filter on a name that is not there selects nothing, and a view of nothing reads as "$0.00
    spent", so the CLI stops on it (exit 2) and the dashboard warns, instead of dropping it silently.

    Teams and users are those of the jobs (and the pseudo-rows unallocated/unattributed); clusters those of
    the jobs, GPUs and declared capacity. With ``within_teams`` (a lead's scope), only the names of those
    teams' jobs exist (:func:`known_names`), and the pseudo-rows, which are no team's, do not."""
    out: list[UnknownName] = []
    for what, field_name, _ in _NAMED:
        asked: tuple[str, ...] = getattr(filters, field_name)
        if not asked:
            continue
        held = set(known_names(con, what, within_teams=within_teams))
        pseudo = set(PSEUDO_NAMES) if what != "cluster" and within_teams is None else set()
        out += [
            UnknownName(what, value, tuple(sorted(held)))
            for value in dict.fromkeys(asked)
            if value not in held and value not in pseudo
        ]
    return out
