"""The price in force: which $/GPU-hour a (GPU model, cluster, tier, date) pays, one rule for every figure.

The rule (docs/metrics.md, "Prices"):

1. **Origin.** Rows of the same (model, tier, cluster, date) from several origins: the user's settings win over a
   price a source declared at ingest (the demo's on-prem rate), which wins over the shipped sheet.
2. **Tier.** The asked tier when the model has a price for it (generic, or for the cluster), else on_demand
   (``offered`` instead answers None: a what-if or an advice that moves work to spot needs a spot price).
3. **Cluster.** A cluster's own rows for the model and tier replace the generic ones there.
4. **Date.** A row is in force from its date until the next row of the same model, tier and cluster; the earliest
   row also covers earlier dates.

Two forms of the same rule: SQL (:data:`PRICE_PERIODS_CTE`, :func:`price_tier_sql`, :func:`price_cluster_sql`)
for the costs of millions of job-hours inside one query (analytics/cost.py, waste.py), and :class:`PriceBook` for
the few lookups of a page, a what-if or an advice. Both read the ledger's ``prices`` table, which
gpuledger/ledger/reference.py fills from the sheet and the settings and the ingests add to. Before, the Fleet
page priced idle GPUs from the sheet and the settings only, generic rows only (borealis's A100 idle hours at the
sheet's $1.79 where its own rows, and every other page, say $1.10), and the advice ignored origin and cluster.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

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

# Each row's period [p_from, p_to) (rule 4), for joins on time.
PRICE_PERIODS_CTE = f"""
    periods AS (
        SELECT gpu_model, tier, cluster, usd_per_gpu_hour,
               CASE WHEN row_number() OVER w = 1 THEN TIMESTAMP '0001-01-01'
                    ELSE effective_from::TIMESTAMP END AS p_from,
               coalesce(lead(effective_from::TIMESTAMP) OVER w, TIMESTAMP '9999-12-31') AS p_to
        FROM ({WINNING_ROWS_SQL})
        WINDOW w AS (PARTITION BY gpu_model, tier, cluster ORDER BY effective_from)
    )"""


def price_tier_sql(alias: str, tier: str) -> str:
    """SQL, rule 2: the tier whose price applies to row ``alias`` (gpu_model, cluster) asking for ``tier``."""
    return f"""(CASE WHEN EXISTS (SELECT 1 FROM prices p WHERE p.gpu_model = {alias}.gpu_model
                                  AND p.tier = {tier}
                                  AND (p.cluster IS NULL OR p.cluster = {alias}.cluster))
                     THEN {tier} ELSE '{ON_DEMAND}' END)"""


def price_cluster_sql(alias: str, tier: str) -> str:
    """SQL, rule 3: the row's cluster when that cluster has its own rows for the model and tier, else NULL
    (the generic rows)."""
    return f"""(CASE WHEN EXISTS (SELECT 1 FROM prices p WHERE p.gpu_model = {alias}.gpu_model
                                  AND p.tier = {tier} AND p.cluster = {alias}.cluster)
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


@dataclass(frozen=True)
class PriceBook:
    """The ledger's prices after rule 1, answering rules 2-4 in Python."""

    rows: tuple[BookRow, ...]

    def _series(self, model: str, tier: str, cluster: str | None) -> list[BookRow]:
        return sorted(
            (r for r in self.rows if r.gpu_model == model and r.tier == tier and r.cluster == cluster),
            key=lambda r: r.effective_from,
        )

    def offered(
        self, model: str | None, tier: str, cluster: str | None = None, on: dt.date | None = None
    ) -> float | None:
        """$/GPU-hour of ``model`` at exactly ``tier`` on ``cluster`` (its own rows, else the generic ones) in
        force ``on`` (default: the latest row); None when the model has no price at that tier there."""
        if model is None:
            return None
        series = (self._series(model, tier, cluster) if cluster is not None else []) or self._series(
            model, tier, None
        )
        if not series:
            return None
        if on is None:
            return series[-1].usd_per_gpu_hour
        in_force = [r for r in series if r.effective_from <= on]
        return (in_force[-1] if in_force else series[0]).usd_per_gpu_hour

    def rate(
        self, model: str | None, tier: str, cluster: str | None = None, on: dt.date | None = None
    ) -> float | None:
        """$/GPU-hour a job of ``model`` on ``cluster`` asking for ``tier`` pays ``on`` (rules 2-4: the tier,
        else on_demand); None when the model has neither."""
        price = self.offered(model, tier, cluster, on)
        return price if price is not None else self.offered(model, ON_DEMAND, cluster, on)

    def held_usd(
        self,
        model: str | None,
        tier: str,
        cluster: str | None,
        gpus: float,
        start: dt.datetime,
        end: dt.datetime,
    ) -> float | None:
        """$ of ``gpus`` GPUs held from ``start`` to ``end`` (naive UTC): each UTC day's part at :meth:`rate` in
        force that day (rule 4: a row is in force from a date); 0 for an empty span, None when the model has
        no price."""
        total = 0.0
        while start < end:
            cut = min(end, dt.datetime.combine(start.date() + dt.timedelta(days=1), dt.time()))
            rate = self.rate(model, tier, cluster, start.date())
            if rate is None:
                return None
            total += gpus * (cut - start).total_seconds() / 3600.0 * rate
            start = cut
        return total


def price_book(con: duckdb.DuckDBPyConnection) -> PriceBook:
    """The ledger's price rows in force (rule 1), ordered by model, tier, cluster and date."""
    rows = con.execute(
        f"""SELECT gpu_model, tier, cluster, effective_from, usd_per_gpu_hour, source, source_date, origin
            FROM ({WINNING_ROWS_SQL}) ORDER BY gpu_model, tier, cluster NULLS FIRST, effective_from"""
    ).fetchall()
    return PriceBook(tuple(BookRow(*r) for r in rows))
