"""One problem, one action: the recommendations list holds each problem once, with the better action for it.

The advice steps of analytics/recommend.py each look at the view on their own, so one job can be told to
use a MIG slice and to raise its batch (opposite cures for one under-used GPU), a notebook family gets
"release idle GPUs", "use a smaller GPU" and "use a MIG slice", and a cluster's unheld hours get both a
release and an off-peak scale-down. Here (docs/recommendations.md, "One problem, one action"):

- **a problem** is a connected set of items: two items are the same problem when they have the same target
  or concern one of the same jobs (``job_ids``; a capacity item's pseudo-job ``capacity:<cluster>:<model>`` is the cluster's unheld
  hours, so release and off-peak on one cluster and model are one problem). The problem keeps its best item
  (largest saving in the view, then the surer confidence, then the list's order) and names the others as
  ``alternatives`` ("Use a MIG slice: $25.67/week"); they are not added. Problems share no job, so the
  weekly total is the sum of the problems' $/week;
- **spot or another GPU model** (``use_spot``, ``right_size_gpu``) saves money only where capacity is
  elastic: a cluster whose settings say ``billing = "per_job"`` (capacity nobody holds is not paid for,
  analytics.waste). On a cluster paid for whether used or not, the job's cheaper hours come back as
  unallocated capacity, so such an item stays only next to a capacity item (``release_capacity`` or
  ``offpeak_capacity``) for the cluster and GPU model it frees, and its action says to release it; else it
  is left out;
- **owner**: who acts. ``owner_type`` "operators" for a cluster's items (capacity, an idle cluster), with
  ``owner`` "operators of <cluster>"; else "team" with ``owner`` the team (or the user when the job names no
  team).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from analytics.advice_common import Recommendation
from gpuledger.ledger.settings import Settings

PRICE_MOVES = ("use_spot", "right_size_gpu")
CAPACITY_KINDS = ("release_capacity", "offpeak_capacity")  # a cluster and model's unheld hours
CONFIDENCE_RANK = {"high": 0, "medium": 1, "low": 2}
OPERATORS = "operators"


def elastic(settings: Settings, cluster: str | None) -> bool:
    """True when capacity on ``cluster`` nobody holds is not paid for (settings ``[clusters.X] billing =
    "per_job"``): only there does moving work to a cheaper GPU or tier save money by itself."""
    body = settings.clusters.get(cluster or "")
    return body is not None and body.billing == "per_job"


def where_paid_for(
    items: Sequence[Recommendation], view: pl.DataFrame, settings: Settings
) -> list[Recommendation]:
    """``items`` without the spot and GPU-model moves that cannot save: on a cluster that is not elastic
    such a move is kept only where a capacity item releases the model it frees (its action then says so)."""
    released = {it.target for it in items if it.kind in CAPACITY_KINDS}
    moves = [it for it in items if it.kind in PRICE_MOVES]
    if not moves:
        return list(items)
    wanted = {j for it in moves for j in it.job_ids}
    placed = view.filter(pl.col("job_id").is_in(list(wanted))).select("job_id", "cluster", "gpu_model")
    where = {r[0]: (r[1], r[2]) for r in placed.iter_rows()}
    out = []
    for it in items:
        if it.kind not in PRICE_MOVES:
            out.append(it)
            continue
        pairs = {where.get(j, (None, None)) for j in it.job_ids}
        paid = sorted({(c, m) for c, m in pairs if not elastic(settings, c)}, key=str)
        if not paid:
            out.append(it)
        elif all(f"{c}/{m}" in released for c, m in paid):
            freed = ", ".join(f"{m} on {c}" for c, m in paid)
            out.append(
                it.but(
                    action=f"{it.action} Then release (or scale down) the {freed} it frees, as the capacity "
                    "item for it says: that capacity is paid for whether held or not, so the move saves only with "
                    "the release."
                )
            )
    return out


def _components(items: Sequence[Recommendation]) -> list[list[int]]:
    """Indices of ``items`` grouped by a shared job or the same target (union-find), each group in the
    list's order."""
    parent = list(range(len(items)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    first: dict[object, int] = {}
    for i, it in enumerate(items):
        for job in (*it.job_ids, (it.target_type, it.target)):
            if job in first:
                a, b = root(first[job]), root(i)
                if a != b:
                    parent[max(a, b)] = min(a, b)
            else:
                first[job] = i
    groups: dict[int, list[int]] = {}
    for i in range(len(items)):
        groups.setdefault(root(i), []).append(i)
    return list(groups.values())


def _better(it: Recommendation) -> tuple[float, int]:
    return (-float(it.saving_usd or 0.0), CONFIDENCE_RANK.get(it.confidence, 3))


def _per_week(it: Recommendation) -> str:
    usd = it.usd_per_week
    return f"${usd:,.2f}/week" if usd is not None else f"one-off ${float(it.saving_usd or 0):,.2f}"


def one_per_problem(items: Sequence[Recommendation], labels: Mapping[str, str]) -> list[Recommendation]:
    """The best item of each problem (items sharing a job), its ``alternatives`` the others' label and $."""
    out = []
    for group in _components(items):
        ranked = sorted(group, key=lambda i: (*_better(items[i]), i))
        best, rest = items[ranked[0]], [items[i] for i in ranked[1:]]
        alternatives = tuple(f"{labels.get(r.kind, r.kind)}: {_per_week(r)}" for r in rest)
        out.append(best.but(alternatives=alternatives))
    return out


def owner_of(
    target_type: str | None, target: str | None, team: str | None, user: str | None
) -> tuple[str, str]:
    """(owner_type, owner) of an item: operators for a cluster's items (``target`` "cluster/model"), else
    the team (the user when the job names no team)."""
    if target_type == "cluster":
        cluster = (target or "").split("/")[0]
        return OPERATORS, f"operators of {cluster}" if cluster else OPERATORS
    return "team", str(team or user or "n/a")


TEAM_PLACES = 2  # of a short list of top actions, at least this many are a team's own (when there are any)


def top_actions(recs: pl.DataFrame, n: int) -> pl.DataFrame:
    """The ``n`` items a short list shows (the report's top actions): the largest $ first, but with at
    least ``TEAM_PLACES`` a team owns next to the operators' (capacity items are the largest dollars of most
    fleets and would fill the list, leaving a team lead nothing of their own). ``recs`` is one item per
    problem (:func:`one_per_problem`), so the list holds ``n`` distinct problems; kept in ``recs``' order."""
    if recs.height <= n or "owner_type" not in recs.columns:
        return recs.head(n)
    order = recs.with_row_index("_row")
    team = order.filter(pl.col("owner_type") == "team").head(min(TEAM_PLACES, n))
    rest = order.filter(~pl.col("_row").is_in(team["_row"].to_list())).head(n - team.height)
    return pl.concat([team, rest]).sort("_row").drop("_row")
