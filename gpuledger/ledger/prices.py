"""The price in force: which $/GPU-hour a (GPU model, cluster, tier, date) pays, one rule for every figure.

The rule (docs/metrics.md, "Prices"):

1. **Origin.** Rows of the same (model, tier, cluster, date) from several origins: the user's settings win over a
   price a source declared at ingest (the demo's on-prem rate), which wins over the shipped sheet.
2. **Candidates.** A job of ``model`` on ``cluster`` asking for ``tier`` may pay four series of rows, in this
   order of preference: the cluster's own rows of the tier, the generic rows of the tier, the cluster's own
   on_demand rows, the generic on_demand rows (``offered`` instead takes the tier's two series only: a what-if
   or an advice that moves work to spot needs a spot price).
3. **Date.** A row is in force from its ``effective_from`` (00:00 UTC) on, never before, until the next row of
   its own series. On a day, the most preferred series with a row in force gives the price. Only before the
   first row of all the candidates (no row of any of them in force yet) are the days priced as on that first
   row's day: the earliest row covers earlier days only where no other row does, so a row dated after the data
   changes nothing in it, and a cluster's own row replaces the generic ones from its date on, not before.

Two forms of the same rule: SQL (:data:`PRICE_PERIODS_CTE`, :func:`price_tier_sql`, :func:`price_cluster_sql`)
for the costs of millions of job-hours inside one query (analytics/cost.py, waste.py), and :class:`PriceBook` for
the few lookups of a page, a what-if or an advice. Both read the ledger's ``prices`` table, which
gpuledger/ledger/reference.py fills from the sheet and the settings and the ingests add to
(tests/test_prices.py holds them to each other). Before, a cluster's only row counted as its earliest and
covered every earlier day: a per-cluster H100 row dated 2026-12-01 repriced that cluster's November jobs, and one
dated 2099 the whole past.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import duckdb

ON_DEMAND = "on_demand"
# The order origins win in (rule 1).
ORIGIN_RANK_SQL = "CASE origin WHEN 'settings' THEN 0 WHEN 'ingest' THEN 1 ELSE 2 END"
# The ledger's price rows after rule 1: one per (model, tier, cluster, date).
WINNING_ROWS_SQL = f"""SELECT * FROM prices
              QUALIFY row_number() OVER (
                  PARTITION BY gpu_model, tier, cluster, effective_from
                  ORDER BY {ORIGIN_RANK_SQL},
                           ingest_id DESC NULLS LAST) = 1"""

# Rules 2 and 3 as periods [p_from, p_to) with the price in force, per key (gpu_model, tier, cluster): ``tier``
# is what :func:`price_tier_sql` answers for a job, ``cluster`` what :func:`price_cluster_sql` answers (the
# job's cluster where it has rows of its own for the model, else NULL: the generic rows only). A key's periods
# start at each date a candidate row takes effect; the first reaches back to the beginning of time (rule 3's
# earliest row). ``used_tier``: the tier of the row in force. Join on p.gpu_model, p.tier, p.cluster IS NOT
# DISTINCT FROM, and p_from < end AND p_to > start.
PRICE_PERIODS_CTE = f"""
    price_won AS ({WINNING_ROWS_SQL}),
    price_keys AS (
        SELECT t.gpu_model, t.tier, c.cluster
        FROM (SELECT DISTINCT gpu_model, tier FROM price_won
              UNION SELECT DISTINCT gpu_model, '{ON_DEMAND}' FROM price_won) t
        JOIN (SELECT DISTINCT gpu_model, cluster FROM price_won
              UNION SELECT DISTINCT gpu_model, NULL::VARCHAR FROM price_won) c USING (gpu_model)
    ),
    price_cand AS (
        SELECT k.gpu_model, k.tier, k.cluster, r.effective_from, r.usd_per_gpu_hour, r.tier AS used_tier,
               (CASE WHEN r.tier = k.tier THEN 0 ELSE 2 END) + (CASE WHEN r.cluster IS NULL THEN 1 ELSE 0 END)
                   AS pref
        FROM price_keys k JOIN price_won r
          ON r.gpu_model = k.gpu_model AND r.tier IN (k.tier, '{ON_DEMAND}')
         AND (r.cluster IS NULL OR r.cluster = k.cluster)
    ),
    price_pick AS (
        SELECT b.gpu_model, b.tier, b.cluster, b.effective_from AS b, c.usd_per_gpu_hour, c.used_tier
        FROM (SELECT DISTINCT gpu_model, tier, cluster, effective_from FROM price_cand) b
        JOIN price_cand c
          ON c.gpu_model = b.gpu_model AND c.tier = b.tier AND c.cluster IS NOT DISTINCT FROM b.cluster
         AND c.effective_from <= b.effective_from
        QUALIFY row_number() OVER (
            PARTITION BY b.gpu_model, b.tier, b.cluster, b.effective_from
            ORDER BY c.pref, c.effective_from DESC) = 1
    ),
    periods AS (
        SELECT gpu_model, tier, cluster, usd_per_gpu_hour, used_tier,
               CASE WHEN row_number() OVER w = 1 THEN TIMESTAMP '0001-01-01' ELSE b::TIMESTAMP END AS p_from,
               coalesce(lead(b::TIMESTAMP) OVER w, TIMESTAMP '9999-12-31') AS p_to
        FROM price_pick
        WINDOW w AS (PARTITION BY gpu_model, tier, cluster ORDER BY b)
    )"""


def price_tier_sql(alias: str, tier: str) -> str:
    """SQL: the key tier of row ``alias`` (gpu_model, cluster) asking for ``tier``: ``tier`` when the model has
    rows of it (generic, or the cluster's own) at any date, else on_demand. Which tier's row is in force on a
    day is then the periods' (rule 3: before the tier's first row, the on_demand row in force)."""
    return f"""(CASE WHEN EXISTS (SELECT 1 FROM prices p WHERE p.gpu_model = {alias}.gpu_model
                                  AND p.tier = {tier}
                                  AND (p.cluster IS NULL OR p.cluster = {alias}.cluster))
                     THEN {tier} ELSE '{ON_DEMAND}' END)"""


def price_cluster_sql(alias: str, tier: str) -> str:
    """SQL: the key cluster of row ``alias`` (gpu_model, cluster) at key tier ``tier``: the row's cluster when
    that cluster has rows of its own for the model at the tier or on_demand (rule 2's candidates), else NULL
    (the generic rows only)."""
    return f"""(CASE WHEN EXISTS (SELECT 1 FROM prices p WHERE p.gpu_model = {alias}.gpu_model
                                  AND p.tier IN ({tier}, '{ON_DEMAND}') AND p.cluster = {alias}.cluster)
                     THEN {alias}.cluster END)"""


@dataclass(frozen=True)
class BookRow:
    """One row in force (after rule 1)."""

    gpu_model: str
    tier: str
    cluster: str | None
    effective_from: dt.date
    usd_per_gpu_hour: float
    source: str
    source_date: dt.date
    origin: str  # sheet | settings | ingest


Period = tuple[dt.datetime | None, dt.datetime | None, BookRow]  # [from, to) (None: open), the row in force


def _midnight(day: dt.date) -> dt.datetime:
    return dt.datetime(day.year, day.month, day.day)


@dataclass(frozen=True)
class PriceBook:
    """The ledger's prices after rule 1, answering rules 2 and 3 in Python (the SQL's twin)."""

    rows: tuple[BookRow, ...]
    # each key's periods, worked out once per book (a what-if asks for them once per job)
    _memo: dict[tuple[str | None, str, str | None, bool], list[Period]] = field(
        default_factory=dict, compare=False, hash=False, repr=False
    )

    def periods(
        self, model: str | None, tier: str, cluster: str | None = None, *, fallback: bool = True
    ) -> list[Period]:
        """The rows in force for a job of ``model`` on ``cluster`` asking for ``tier``, as periods: each
        [from, to) with its row, the first open to the past, the last to the future (rules 2-3). Without
        ``fallback``, the tier's own series only. Empty when no candidate row exists."""
        key = (model, tier, cluster, fallback)
        if key not in self._memo:
            self._memo[key] = _periods(self.rows, model, tier, cluster, fallback)
        return self._memo[key]

    def _at(
        self, model: str | None, tier: str, cluster: str | None, on: dt.date | None, fallback: bool
    ) -> float | None:
        ps = self.periods(model, tier, cluster, fallback=fallback)
        if not ps:
            return None
        if on is None:
            return ps[-1][2].usd_per_gpu_hour
        t = _midnight(on)
        for lo, hi, row in ps:
            if (lo is None or lo <= t) and (hi is None or t < hi):
                return row.usd_per_gpu_hour
        return ps[-1][2].usd_per_gpu_hour  # pragma: no cover - the periods cover all time

    def offered(
        self, model: str | None, tier: str, cluster: str | None = None, on: dt.date | None = None
    ) -> float | None:
        """$/GPU-hour of ``model`` at exactly ``tier`` on ``cluster`` (its own rows in force, else the generic
        ones) in force ``on`` (default: the latest); None when the model has no price at that tier there."""
        return self._at(model, tier, cluster, on, False)

    def rate(
        self, model: str | None, tier: str, cluster: str | None = None, on: dt.date | None = None
    ) -> float | None:
        """$/GPU-hour a job of ``model`` on ``cluster`` asking for ``tier`` pays ``on`` (rules 2-3: the tier,
        else on_demand, whichever is in force); None when the model has neither."""
        return self._at(model, tier, cluster, on, True)

    def usd(
        self,
        model: str | None,
        tier: str,
        cluster: str | None,
        start: dt.datetime,
        end: dt.datetime,
        *,
        fallback: bool = True,
    ) -> float | None:
        """Dollars of one GPU of ``model`` held on ``cluster`` over [start, end) asking for ``tier``, each moment
        at the price in force then (:meth:`rate`; :meth:`offered` without ``fallback``); None when unpriced."""
        ps = self.periods(model, tier, cluster, fallback=fallback)
        if not ps:
            return None
        total = 0.0
        for lo, hi, row in ps:
            a = start if lo is None else max(start, lo)
            b = end if hi is None else min(end, hi)
            if b > a:
                total += (b - a).total_seconds() / 3600.0 * row.usd_per_gpu_hour
        return total


def _periods(
    rows: tuple[BookRow, ...], model: str | None, tier: str, cluster: str | None, fallback: bool
) -> list[Period]:
    if model is None:
        return []
    cand: list[tuple[int, BookRow]] = []
    for r in rows:
        if r.gpu_model != model or not (r.cluster is None or r.cluster == cluster):
            continue
        if r.tier == tier:
            cand.append((0 if r.cluster is not None else 1, r))
        elif fallback and r.tier == ON_DEMAND:
            cand.append((2 if r.cluster is not None else 3, r))
    if not cand:
        return []
    bounds = sorted({r.effective_from for _, r in cand})
    out: list[Period] = []
    for i, b in enumerate(bounds):
        _pref, row = min(
            ((p, r) for p, r in cand if r.effective_from <= b),
            key=lambda pr: (pr[0], -pr[1].effective_from.toordinal()),
        )
        lo = None if i == 0 else _midnight(b)
        hi = _midnight(bounds[i + 1]) if i + 1 < len(bounds) else None
        out.append((lo, hi, row))
    return out


def price_book(con: duckdb.DuckDBPyConnection) -> PriceBook:
    """The ledger's price rows in force (rule 1), ordered by model, tier, cluster and date."""
    rows = con.execute(
        f"""SELECT gpu_model, tier, cluster, effective_from, usd_per_gpu_hour, source, source_date, origin
            FROM ({WINNING_ROWS_SQL}) ORDER BY gpu_model, tier, cluster NULLS FIRST, effective_from"""
    ).fetchall()
    return PriceBook(tuple(BookRow(*r) for r in rows))
