"""Generated cluster shapes for the money properties (tests/analytics/test_money_properties.py, bench/money_properties.py).

A shape is 1–3 clusters of hosts with one or two H100 cards each, over two UTC days. A card reports one
sample every CADENCE_MIN minutes over one or two stretches separated by at least GAP_MIN minutes (longer than
the capacity gap, so its observed capacity is exactly its samples' time), or not at all. About one card in
four is in MIG mode: two GPU rows ``<card>/1`` (3g.40gb) and ``<card>/2`` (4g.40gb) with ``parent_gpu_id`` the
card, reporting at every scrape together, and no row of the card itself. Jobs hold:

- a card by id (GPU-level), inside one of its stretches, whole or with a declared fraction;
- a MIG instance by id, with its share of the card (3/7 or 4/7, as sacct counts ``gres/gpu:3g.40gb=1``);
- a one-card host by name (host-level, as sacct), inside its card's stretch: two such jobs overlapping
  time-slice the card;
- a host with no telemetry (unmeasured: billed by allocation);
- the last stretch of a card reporting to the data's end, still RUNNING;
- (issue 41) the MIG instances of a one-card host by host-level allocations: a pod per instance labelled in
  the instance's series, two pods time-sharing the 3g instance (the series naming each in turn), or Slurm MIG
  gres jobs whose instance series carry no label (dealt by size); a second node with no telemetry beside a
  job's card (a multi-node job with a silent node); a card held by id across the silence between its two
  stretches; a host-level job of 2 GPUs on a one-card host (GPUs beyond what the host reports); a job booked as
  another model (BOOKED_OTHER, priced as the H100 so the oracle's card-hours × price still holds).

A job is COMPLETED or FAILED (with or without a checkpoint inside its run), or RUNNING. About one in four is
requeued, as collectors/sacct.py lands ``sacct -D``: an earlier attempt ``<id>#1`` (attempt 1, attempt_of
``<id>``, ended REQUEUED, PREEMPTED or NODE_FAIL, with or without a checkpoint), then the job's own row
(attempt 2) on a place of the same cluster that reports after the first attempt ends.

The samples land as two telemetry files meeting at a drawn moment (``split_at``); in about half the shapes
the second first lands as a draft (its earliest samples, with other readings) that ``--replace`` of the whole
file then withdraws (collectors/provenance.py), as a cron job re-ingesting a growing log does.

Jobs lie inside their card's stretches (but the silent-stretch jobs, alone on their card), so every dollar has an
independent answer: a claimed card costs its
samples' time (a MIG card's instances report together, so each scrape's time once), an unclaimed one (no job
names it, one of its instances or its host) its first sample to its last sample's end, a host without
telemetry its jobs' held time, each minute at the price in force (an optional price change at the second
day's midnight). :func:`oracle` computes that from the raw tables.

Generated again since their fixes: a silence of an unclaimed card across midnight (its pseudo-job is held from
its first sample in the ledger to its last one's end and each day takes its part, analytics/cost.py
``pseudo_cards_sql``; the days' views left such a silence out); two jobs sharing a card across midnight and a job across midnight on a MIG
instance (a shared card's samples count for each holder by its share, docs/metrics.md "Additivity on shared
cards"); two jobs holding one MIG instance at once (a GPU row's split caps at its share of the card,
gpuledger/ledger/mig.py; :func:`instance_held_twice_example`); a file holding a single sample of a GPU
(collectors/lone_samples.py times it from the ledger's series; :func:`lone_sample_example`).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

import duckdb
import polars as pl
from hypothesis import strategies as st

from collectors.contract import IngestOptions, IngestReport
from collectors.landing import land_and_record, run_in_transaction
from collectors.provenance import next_ingest_id, withdraw_source
from tests.analytics.build import H100, T0

CADENCE_MIN = 5  # one sample every 5 minutes
GAP_MIN = 60  # silences between stretches: longer than thresholds.capacity_gap_minutes (30)
SLOT_MIN = 30  # stretches and jobs start and end on half hours
DAY_SLOTS = 48
TEAMS = ("nlp", "cv")
PRICE_1, PRICE_2 = 4.0, 6.0  # $/GPU-h; PRICE_2 from the second day's midnight when the price changes


@dataclass
class Shape:
    """Rows to land, and what the oracle needs that the rows do not say."""

    jobs: list[dict[str, Any]] = field(default_factory=list)
    allocations: list[dict[str, Any]] = field(default_factory=list)
    samples: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    price_change: bool = False
    split_at: dt.datetime = T0  # the samples land in two files meeting here: a.csv before, b.csv from here
    draft: list[dict[str, Any]] = field(default_factory=list)  # b.csv as it first landed, before --replace
    b_first: bool = False  # b.csv lands before a.csv (a folder ingested in name order is not time order)


def at(slot: int) -> dt.datetime:
    return T0 + dt.timedelta(minutes=SLOT_MIN * slot)


@dataclass
class Place:
    """Where a job can run: a card (or one MIG instance, or a one-card host by name) over one stretch of its
    telemetry [lo, hi) in slots, or a host with no telemetry over the whole two days."""

    cluster: str
    host: str
    gpu_id: str | None  # None: a host without telemetry, named by its jobs
    lo: int
    hi: int
    share: float = 1.0  # the card's share an allocation declares: an instance's slices of 7, or 1
    one_card: bool = (
        False  # the host's only card: a job may name the host instead (sacct without gres detail)
    )
    reserved: bool = False  # held by a job of its own (a silent stretch, more GPUs than the host): no others


def _stretches(draw: st.DrawFn, to_end: bool) -> list[tuple[int, int]]:
    """One or two stretches [a, b) of whole slots, GAP_MIN apart; the last may run to the data's end."""
    a = draw(st.integers(0, 2 * DAY_SLOTS - 4))
    b = draw(st.integers(a + 1, min(a + 30, 2 * DAY_SLOTS)))
    out = [(a, b)]
    if b + 3 < 2 * DAY_SLOTS and draw(st.booleans()):
        second = min(b + 2 + draw(st.integers(0, 4)), 2 * DAY_SLOTS - 1)
        out.append((second, 2 * DAY_SLOTS))
    if to_end:
        out[-1] = (out[-1][0], 2 * DAY_SLOTS)  # the data's end is a sample's end
    return out


def _series(draw: st.DrawFn, gid: str, lo: int, hi: int) -> list[dict[str, Any]]:
    """A sample every CADENCE_MIN minutes over [lo, hi): one reading, then from a drawn sample on another."""
    utils = st.sampled_from([0.0, 2.0, 30.0, 90.0])
    u, u2 = draw(utils), draw(utils)
    n = (hi - lo) * SLOT_MIN // CADENCE_MIN
    flip = draw(st.integers(0, n))
    return [
        {
            "ts": at(lo) + dt.timedelta(minutes=CADENCE_MIN * i),
            "gpu_id": gid,
            "util_pct": u if i < flip else u2,
        }
        for i in range(n)
    ]


def shapes() -> st.SearchStrategy[Shape]:
    """The generated shapes: every fault the generator found is fixed and generated again (module
    docstring)."""
    return _shapes()


@st.composite
def _shapes(draw: st.DrawFn) -> Shape:
    shape = Shape(price_change=draw(st.booleans()))
    places: list[Place] = []
    # one-card hosts whose MIG instances host-level jobs hold: (cluster, host, card, stretches, mode, series)
    mig_hosts: list[tuple[str, str, str, list[tuple[int, int]], str, dict[str, list[dict[str, Any]]]]] = []
    for c in range(draw(st.integers(1, 3))):
        cluster = f"c{c}"
        for h in range(draw(st.integers(1, 2))):
            host = f"{cluster}h{h}"
            first = c == 0 and h == 0  # at least one card reports, to the data's end
            cards = draw(st.integers(1, 2))
            if not (draw(st.booleans()) or first):  # no GPU row either: a host known only from job records
                places.append(Place(cluster, host, None, 0, 2 * DAY_SLOTS))
                continue
            for k in range(cards):
                gid = f"{host}:{k}"
                stretches = _stretches(draw, to_end=first and k == 0)
                if draw(st.integers(0, 3)) == 0:  # a card in MIG mode: two instances, 3 and 4 of its 7 slices
                    # on a one-card host, the instances may be held by host-level allocations instead of by id
                    mode = draw(st.sampled_from(MIG_HOST_MODES)) if cards == 1 else "by_id"
                    series: dict[str, list[dict[str, Any]]] = {}
                    for gi, slices in ((1, 3), (2, 4)):
                        iid = f"{gid}/{gi}"
                        shape.gpus.append(
                            {"gpu_id": iid, "host": host, "model": H100, "cluster": cluster,
                             "parent_gpu_id": gid, "mig_profile": f"{slices}g.{slices * 10}gb"}
                        )  # fmt: skip
                        for lo, hi in stretches:  # every scrape reports both instances
                            rows = _series(draw, iid, lo, hi)
                            series.setdefault(iid, []).extend(rows)
                            shape.samples += rows
                            if mode == "by_id":
                                places.append(Place(cluster, host, iid, lo, hi, slices / 7))
                    if mode != "by_id":
                        mig_hosts.append((cluster, host, gid, stretches, mode, series))
                    continue
                shape.gpus.append({"gpu_id": gid, "host": host, "model": H100, "cluster": cluster})
                for lo, hi in stretches:
                    shape.samples += _series(draw, gid, lo, hi)
                    places.append(Place(cluster, host, gid, lo, hi, one_card=cards == 1))
    jobs = _reserved_jobs(draw, shape, places)
    jobs = _mig_host_jobs(draw, shape, mig_hosts, jobs)
    silent = {p.cluster: p.host for p in places if p.gpu_id is None}  # a host without telemetry per cluster
    running_done = False
    for place in places:
        if place.reserved:
            continue
        for _ in range(draw(st.integers(0, 2))):
            ja = draw(st.integers(place.lo, place.hi - 1))
            jb = draw(st.integers(ja + 1, place.hi))
            jid, jobs = f"j{jobs}", jobs + 1
            team = draw(st.sampled_from(TEAMS))
            # a requeued job (sacct -D): an earlier attempt <id>#1, disrupted, then the job's own row on a
            # place of its cluster that reports after that attempt ends
            later = [p for p in places if p.cluster == place.cluster and p.hi > jb and not p.reserved]
            if later and draw(st.integers(0, 3)) == 0:
                frac, gid = _holds(draw, place)
                cp = draw(st.one_of(st.none(), st.integers(ja, jb)))
                shape.jobs.append(
                    _job(f"{jid}#1", place, ja, jb, frac, team, draw(st.sampled_from(REQUEUED)), cp, 1, jid)
                )
                shape.allocations.append(_alloc(f"{jid}#1", place, gid, ja, jb, frac))
                place, attempt = draw(st.sampled_from(later)), 2
                ja = draw(st.integers(max(place.lo, jb), place.hi - 1))
                jb = draw(st.integers(ja + 1, place.hi))
            else:
                attempt = None
            running = not running_done and jb == place.hi == 2 * DAY_SLOTS and draw(st.booleans())
            running_done = running_done or running
            state = "RUNNING" if running else draw(st.sampled_from(["COMPLETED", "COMPLETED", "FAILED"]))
            cp = draw(st.one_of(st.none(), st.integers(ja, jb))) if state == "FAILED" else None
            frac, gid = _holds(draw, place)
            end = None if running else jb
            row = _job(jid, place, ja, end, frac, team, state, cp, attempt, jid if attempt else None)
            if draw(st.integers(0, 7)) == 0:  # booked as another model than its card reports
                row["gpu_model"] = BOOKED_OTHER
            shape.allocations.append(_alloc(jid, place, gid, ja, end, frac))
            other = silent.get(place.cluster)
            if other and gid is not None and attempt is None and draw(st.integers(0, 4)) == 0:
                # a multi-node job whose second node reports nothing: one more GPU there, same span
                shape.allocations.append(
                    _alloc(jid, Place(place.cluster, other, None, 0, 0), None, ja, end, 1.0)
                )
                row["gpu_count"] = frac + 1.0
            shape.jobs.append(row)
    shape.split_at = at(draw(st.integers(1, 2 * DAY_SLOTS - 1))) + dt.timedelta(
        minutes=draw(st.integers(0, 29))
    )
    if draw(st.booleans()):  # b.csv first lands as a draft: its first samples in time, other readings
        b = sorted(
            (s for s in shape.samples if s["ts"] >= shape.split_at), key=lambda s: (s["ts"], s["gpu_id"])
        )
        cut = draw(st.integers(1, max(1, len(b))))
        shape.draft = [{**s, "util_pct": 100.0 - s["util_pct"]} for s in b[:cut]]
    shape.b_first = draw(st.booleans())
    return shape


REQUEUED = ("REQUEUED", "PREEMPTED", "NODE_FAIL")  # how sacct -D ends an attempt that was requeued
BOOKED_OTHER = "A100-80GB"  # a model a scheduler may book for an H100 card; priced as the H100 (set_prices)
# how a one-card host's MIG instances are held: by id (Place per instance), by pods labelled in the dcgm series
# (one per instance), by two pods time-sharing the 3g instance (the series labelled with each in turn), or by
# Slurm MIG gres jobs whose instance series carry no label (collectors/attribute.py rule 3b)
MIG_HOST_MODES = ("by_id", "pods", "shared_pods", "slurm")


def _span(draw: st.DrawFn, lo: int, hi: int) -> tuple[int, int]:
    a = draw(st.integers(lo, hi - 1))
    return a, draw(st.integers(a + 1, hi))


def _label(rows: list[dict[str, Any]], jid: str, a: int, b: int, every: int = 1, first: int = 0) -> None:
    """Label the samples of ``rows`` inside [a, b) slots with job ``jid`` (every ``every``-th from ``first``),
    as dcgm-exporter's pod or hpc_job label does."""
    inside = [r for r in rows if at(a) <= r["ts"] < at(b)]
    for r in inside[first::every]:
        r["job_id"] = jid


def _reserved_jobs(draw: st.DrawFn, shape: Shape, places: list[Place]) -> int:
    """Jobs that hold a card alone: by id across a silence between two stretches of a whole card (held time
    on a card that does not report: unseen), and host-level jobs of 2 GPUs on a one-card host (one GPU beyond
    what the host reports). Their places are reserved: no other job holds them. Returns the jobs made."""
    n = 0
    by_card: dict[str, list[Place]] = {}
    for p in places:
        if p.gpu_id is not None and p.share == 1.0:
            by_card.setdefault(p.gpu_id, []).append(p)
    for gid, ps in by_card.items():
        if len(ps) == 2 and draw(st.integers(0, 2)) == 0:
            first, second = ps
            ja = draw(st.integers(first.lo, first.hi - 1))
            jb = draw(st.integers(second.lo + 1, second.hi))
            jid, n = f"s{n}", n + 1
            shape.jobs.append(_job(jid, first, ja, jb, 1.0, TEAMS[0], "COMPLETED", None, None, None))
            shape.allocations.append(_alloc(jid, first, gid, ja, jb, 1.0))
            first.reserved = second.reserved = True
        elif ps[0].one_card and draw(st.integers(0, 4)) == 0:
            place = draw(st.sampled_from(ps))
            ja, jb = _span(draw, place.lo, place.hi)
            jid, n = f"s{n}", n + 1
            shape.jobs.append(_job(jid, place, ja, jb, 2.0, TEAMS[1], "COMPLETED", None, None, None))
            shape.allocations.append(_alloc(jid, place, None, ja, jb, 2.0))
            for p in ps:
                p.reserved = True
    return n


def _mig_host_jobs(
    draw: st.DrawFn,
    shape: Shape,
    mig_hosts: list[tuple[str, str, str, list[tuple[int, int]], str, dict[str, list[dict[str, Any]]]]],
    n: int,
) -> int:
    """Host-level jobs on the MIG instances of one-card hosts (MIG_HOST_MODES), inside each stretch: a pod or
    a Slurm job per instance, or two pods time-sharing the 3g instance (and maybe a pod on the 4g one).
    Returns the jobs made so far."""
    for cluster, host, gid, stretches, mode, series in mig_hosts:
        for lo, hi in stretches:
            place = Place(cluster, host, None, lo, hi)
            holds: list[tuple[str, float]] = []  # (instance, share) per job
            if mode == "shared_pods":
                holds = [(f"{gid}/1", 3 / 7), (f"{gid}/1", 3 / 7)]
                holds += [(f"{gid}/2", 4 / 7)] if draw(st.booleans()) else []
            else:
                holds = [(f"{gid}/{gi}", k / 7) for gi, k in ((1, 3), (2, 4)) if draw(st.booleans())]
            spans = []
            for iid, share in holds:
                ja, jb = _span(draw, lo, hi)
                jid, n = f"m{n}", n + 1
                shape.jobs.append(
                    _job(
                        jid, place, ja, jb, share, draw(st.sampled_from(TEAMS)), "COMPLETED", None, None, None
                    )
                )
                shape.allocations.append(_alloc(jid, place, None, ja, jb, share))
                spans.append((jid, iid, ja, jb))
            if mode == "pods":
                for jid, iid, ja, jb in spans:
                    _label(series[iid], jid, ja, jb)
            elif mode == "shared_pods":
                (p, iid, pa, pb), (q, _, qa, qb) = spans[:2]
                # each pod's own stretch labelled with it; where both run, the series names each in turn
                _label(series[iid], p, pa, pb)
                _label(series[iid], q, qa, qb)
                lo2, hi2 = max(pa, qa), min(pb, qb)
                if hi2 > lo2:
                    _label(series[iid], p, lo2, hi2, every=2)
                    _label(series[iid], q, lo2, hi2, every=2, first=1)
                for jid, iid4, ja, jb in spans[2:]:
                    _label(series[iid4], jid, ja, jb)
    return n


def _holds(draw: st.DrawFn, place: Place) -> tuple[float, str | None]:
    """What an allocation at ``place`` declares: (share of a card, GPU id or None for the host). An instance:
    its slices; a card: whole or half (time-slicing); a host by name: one card (two such jobs overlapping
    time-slice it)."""
    if place.gpu_id is None or (place.one_card and draw(st.booleans())):
        return 1.0, None
    if place.share < 1.0:
        return place.share, place.gpu_id
    return draw(st.sampled_from([1.0, 1.0, 0.5])), place.gpu_id


def _alloc(jid: str, place: Place, gpu_id: str | None, a: int, b: int | None, frac: float) -> dict[str, Any]:
    return {
        "job_id": jid,
        "host": place.host,
        "gpu_id": gpu_id,
        "gpu_count": frac,
        "start_ts": at(a),
        "end_ts": at(b) if b is not None else None,
    }


def _job(
    jid: str,
    place: Place,
    a: int,
    b: int | None,
    frac: float,
    team: str,
    state: str,
    checkpoint: int | None,
    attempt: int | None,
    attempt_of: str | None,
) -> dict[str, Any]:
    return {
        "job_id": jid,
        "source": "test",
        "cluster": place.cluster,
        "user_name": "u",
        "team": team,
        "name": jid,
        "kind": "training",
        "gpu_model": H100,
        "gpu_count": frac,
        "pricing_tier": "on_demand",
        "start_ts": at(a),
        "end_ts": at(b) if b is not None else None,
        "state": state,
        "last_checkpoint_ts": at(checkpoint) if checkpoint is not None else None,
        "attempt": attempt,
        "attempt_of": attempt_of,
    }


def known_limit() -> Shape:
    """The former known limit of docs/metrics.md ("Additivity on shared cards"), built by hand: one card reporting
    from 20:00 to the second day's end (at 90 %, then 2 %, then 30 %), held whole by j0 from 22:00 to 09:30
    the next day and by j1 from 23:00 to 06:00, both by id."""
    gid, (lo, hi) = "c0h0:0", (40, 2 * DAY_SLOTS)
    place = Place("c0", "c0h0", gid, lo, hi)
    n = (hi - lo) * SLOT_MIN // CADENCE_MIN
    shape = Shape(
        gpus=[{"gpu_id": gid, "host": "c0h0", "model": H100, "cluster": "c0"}],
        samples=[
            {
                "ts": at(lo) + dt.timedelta(minutes=CADENCE_MIN * i),
                "gpu_id": gid,
                "util_pct": (90.0, 2.0, 30.0)[3 * i // n],
            }
            for i in range(n)
        ],
        split_at=at(70),
    )
    for jid, a, b in (("j0", 44, 67), ("j1", 46, 60)):
        shape.jobs.append(_job(jid, place, a, b, 1.0, TEAMS[0], "COMPLETED", None, None, None))
        shape.allocations.append(_alloc(jid, place, gid, a, b, 1.0))
    return shape


def instance_held_twice_example() -> Shape:
    """A MIG card (3g and 4g instances) reporting from 10:00 to 11:00 at 50 %: j0 and j1 each hold the 3g
    instance (3/7 of the card) and j2 the 4g one (4/7), all for the hour. The card costs one card-hour, $4;
    the jobs are billed 10/7 of it, $5.71, and the card's 3/7 GPU-h beyond it is reported oversubscribed, not
    cut from the jobs (a shared GPU's shares are cut only where one GPU id's declared shares pass 1, and
    3/7 + 3/7 does not)."""
    gpus = [
        {"gpu_id": f"c0h0:0/{gi}", "host": "c0h0", "model": H100, "cluster": "c0", "parent_gpu_id": "c0h0:0",
         "mig_profile": f"{k}g.{k * 10}gb"}
        for gi, k in ((1, 3), (2, 4))
    ]  # fmt: skip
    lo, hi = 20, 22
    n = (hi - lo) * SLOT_MIN // CADENCE_MIN
    shape = Shape(
        gpus=gpus,
        samples=[
            {"ts": at(lo) + dt.timedelta(minutes=CADENCE_MIN * i), "gpu_id": g["gpu_id"], "util_pct": 50.0}
            for g in gpus
            for i in range(n)
        ],
        split_at=at(21),
    )
    for jid, gid, share in (("j0", "c0h0:0/1", 3 / 7), ("j1", "c0h0:0/1", 3 / 7), ("j2", "c0h0:0/2", 4 / 7)):
        place = Place("c0", "c0h0", gid, lo, hi, share)
        shape.jobs.append(_job(jid, place, lo, hi, share, TEAMS[0], "COMPLETED", None, None, None))
        shape.allocations.append(_alloc(jid, place, gid, lo, hi, share))
    return shape


def lone_sample_example() -> Shape:
    """One card no job claims, reporting every 5 minutes from 10:00 to 12:00; b.csv holds only its 11:55
    sample and lands first. That sample stands for 1 s, so the card's pseudo-job ends at 11:55:01 ($7.6678);
    landing all the samples again makes it stand for 300 s, to 12:00 ($8.00)."""
    gid, lo, hi = "c0h0:0", 20, 24
    n = (hi - lo) * SLOT_MIN // CADENCE_MIN
    return Shape(
        gpus=[{"gpu_id": gid, "host": "c0h0", "model": H100, "cluster": "c0"}],
        samples=[
            {"ts": at(lo) + dt.timedelta(minutes=CADENCE_MIN * i), "gpu_id": gid, "util_pct": 50.0}
            for i in range(n)
        ],
        split_at=at(hi) - dt.timedelta(minutes=CADENCE_MIN),
        b_first=True,
    )


def land_file(
    con: duckdb.DuckDBPyConnection, key: str, samples: list[dict[str, Any]], *, replace: bool = False
) -> None:
    """Land ``samples`` as ``gpuledger ingest [--replace]`` lands a telemetry file of source ``key``
    (collectors/ingest.py): in one transaction, withdraw what the source brought in before (--replace), stage,
    land and record the provenance (collectors/landing.land_and_record)."""
    opts = IngestOptions(replace=replace, source_key=key)

    def work() -> IngestReport:
        if replace:
            withdraw_source(con, key, opts)
        iid = next_ingest_id(con)
        con.register("stage_df", pl.DataFrame(samples, infer_schema_length=None))
        con.execute("CREATE TEMP TABLE stage_samples AS SELECT * FROM stage_df")
        con.unregister("stage_df")
        rows = land_and_record(
            con, iid, opts, source=key, source_key=key, sha256=f"{key}#{iid}", fmt="test", skipped={}
        )
        return IngestReport(key, "test", iid, rows)

    run_in_transaction(con, work)


def set_prices(con: duckdb.DuckDBPyConnection, change: bool) -> None:
    con.execute("DELETE FROM prices")
    rows = [(dt.date(2025, 1, 1), PRICE_1)]
    if change:
        rows.append(((T0 + dt.timedelta(days=1)).date(), PRICE_2))
    for model in (H100, BOOKED_OTHER):  # a job booked as another model is priced as its card would be
        for day, usd in rows:
            con.execute(
                "INSERT INTO prices VALUES (?, 'on_demand', NULL, ?, ?, 'test price', ?, 'sheet', NULL)",
                [model, day, usd, day],
            )


def _priced_hours(lo: dt.datetime, hi: dt.datetime, change: bool) -> float:
    """Dollars of one GPU over [lo, hi) at the price in force each moment."""
    midnight = T0 + dt.timedelta(days=1)
    if not change or hi <= midnight:
        return (hi - lo).total_seconds() / 3600 * (PRICE_1 if not change or hi <= midnight else PRICE_2)
    if lo >= midnight:
        return (hi - lo).total_seconds() / 3600 * PRICE_2
    return (midnight - lo).total_seconds() / 3600 * PRICE_1 + (hi - midnight).total_seconds() / 3600 * PRICE_2


def oracle(con: duckdb.DuckDBPyConnection, change: bool) -> tuple[float, float]:
    """(spend, card-hours billed) from the raw tables in plain SQL, by the rules of the module docstring:
    a claimed card costs its samples' time (a MIG card's instances report together: each scrape once); an
    unclaimed card its first sample to its last sample's end; a host with no telemetry its jobs' held time
    (running jobs to the data's end); a card's silence inside a job holding it by id, and the GPUs a
    host-level job holds beyond its host's cards, their held time (unseen held time is billed by allocation
    and takes nothing from the reporting cards' free time)."""
    horizon = con.execute(
        "SELECT max(ts + to_microseconds(CAST(interval_s * 1e6 AS BIGINT))) FROM samples"
    ).fetchall()[0][0]
    card = "coalesce(g.parent_gpu_id, g.gpu_id)"
    claimed = {
        r[0]
        for r in con.execute(
            f"""SELECT {card} FROM gpus g
                WHERE g.gpu_id IN (SELECT gpu_id FROM allocations WHERE gpu_id IS NOT NULL)
                   OR g.host IN (SELECT host FROM allocations WHERE gpu_id IS NULL)"""
        ).fetchall()
    }
    usd = hours = 0.0
    for c, ts, iv in con.execute(
        f"SELECT DISTINCT {card}, s.ts, s.interval_s FROM samples s JOIN gpus g USING (gpu_id)"
    ).fetchall():
        if c in claimed:
            usd += _priced_hours(ts, ts + dt.timedelta(seconds=iv), change)
            hours += iv / 3600
    for c, lo, hi in con.execute(
        f"""SELECT {card}, min(s.ts), max(s.ts + to_microseconds(CAST(s.interval_s * 1e6 AS BIGINT)))
            FROM samples s JOIN gpus g USING (gpu_id) GROUP BY 1"""
    ).fetchall():
        if c not in claimed:
            usd += _priced_hours(lo, hi, change)
            hours += (hi - lo).total_seconds() / 3600
    for lo, hi, n in con.execute(
        """SELECT a.start_ts, coalesce(a.end_ts, ?), a.gpu_count FROM allocations a
           WHERE a.gpu_id IS NULL AND a.host NOT IN (SELECT g.host FROM gpus g JOIN samples s USING (gpu_id))""",
        [horizon],
    ).fetchall():
        usd += n * _priced_hours(lo, hi, change)
        hours += n * (hi - lo).total_seconds() / 3600
    # held time on a card while it does not report (a job across a silence): billed by allocation
    for gid, lo, hi, n in con.execute(
        "SELECT gpu_id, start_ts, coalesce(end_ts, ?), gpu_count FROM allocations WHERE gpu_id IS NOT NULL",
        [horizon],
    ).fetchall():
        t = lo
        for ts, iv in con.execute(
            "SELECT ts, interval_s FROM samples WHERE gpu_id = ? AND ts < ? ORDER BY ts", [gid, hi]
        ).fetchall():
            end = ts + dt.timedelta(seconds=iv)
            if end <= t:
                continue
            if ts > t:
                usd += n * _priced_hours(t, ts, change)
                hours += n * (ts - t).total_seconds() / 3600
            t = max(t, end)
        if t < hi:
            usd += n * _priced_hours(t, hi, change)
            hours += n * (hi - t).total_seconds() / 3600
    # GPUs a host-level job holds beyond the cards its (reporting) host has: billed by allocation
    for lo, hi, extra in con.execute(
        f"""SELECT a.start_ts, coalesce(a.end_ts, ?), a.gpu_count - c.cards FROM allocations a
            JOIN (SELECT g.host, count(DISTINCT {card}) AS cards FROM gpus g GROUP BY g.host) c ON c.host = a.host
            WHERE a.gpu_id IS NULL AND a.gpu_count > c.cards""",
        [horizon],
    ).fetchall():
        usd += extra * _priced_hours(lo, hi, change)
        hours += extra * (hi - lo).total_seconds() / 3600
    return usd, hours


# -- dated price rows inside a what-if (issue 41; tests/analytics/test_whatif_properties.py) -----------------

A100 = "A100-80GB"  # the model a what-if moves the H100 jobs to
PRICE_CLUSTERS = (None, "c0", "c1")  # generic rows, and rows of two of the generated clusters
ON_DEMAND_USD = (2.0, 3.0, 4.0)  # every generic on-demand row dearer than every spot row
SPOT_USD = (0.5, 1.0, 1.5)
# a cluster's own on-demand row may undercut every spot row (a negotiated rate): spot is then dearer there
# from its date, so a what-if moves a job to spot only on the days before (analytics.whatif.cheaper_pieces)
CLUSTER_ON_DEMAND_USD = (*ON_DEMAND_USD, 0.25)


def price_days() -> tuple[dt.date, ...]:
    """Where a drawn row takes effect: long before the data, its first midnight, the midnight inside it (the
    second day), and after it (a row dated after the data must change nothing in it)."""
    return (
        (T0 - dt.timedelta(days=30)).date(),
        T0.date(),
        (T0 + dt.timedelta(days=1)).date(),
        (T0 + dt.timedelta(days=5)).date(),
    )


@st.composite
def dated_prices(draw: st.DrawFn) -> list[tuple[str, str, str | None, dt.date, float]]:
    """Price rows (model, tier, cluster, effective_from, $/GPU-h) for H100 and A100, on-demand and spot, generic
    and per cluster, each series 0-2 rows on :func:`price_days`; H100's generic on-demand row from before the
    data is always there, so every generated job is priced."""
    days = price_days()
    rows = [(H100, "on_demand", None, days[0], draw(st.sampled_from(ON_DEMAND_USD)))]
    for model in (H100, A100):
        for tier, usd in (("on_demand", ON_DEMAND_USD), ("spot", SPOT_USD)):
            for cluster in PRICE_CLUSTERS:
                choices = CLUSTER_ON_DEMAND_USD if (tier, cluster is not None) == ("on_demand", True) else usd
                for day in draw(st.lists(st.sampled_from(days), max_size=2, unique=True)):
                    if (model, tier, cluster, day) not in {r[:4] for r in rows}:
                        rows.append((model, tier, cluster, day, draw(st.sampled_from(choices))))
    return rows


def put_prices(
    con: duckdb.DuckDBPyConnection, rows: list[tuple[str, str, str | None, dt.date, float]]
) -> None:
    """The ledger's prices become ``rows`` (the shipped sheet's origin: nothing else competes with them)."""
    con.execute("DELETE FROM prices")
    for model, tier, cluster, day, usd in rows:
        con.execute(
            "INSERT INTO prices VALUES (?, ?, ?, ?, ?, 'test price', ?, 'sheet', NULL)",
            [model, tier, cluster, day, usd, day],
        )


def hand_rate(
    rows: list[tuple[str, str, str | None, dt.date, float]],
    model: str,
    tier: str,
    cluster: str | None,
    day: dt.date,
    *,
    fallback: bool = True,
) -> float | None:
    """docs/metrics.md "Cost", read literally: the candidates (the cluster's rows of the tier, the generic ones
    of the tier, then the same two of on_demand), the most preferred with a row in force on ``day`` (its latest
    such row); before every candidate row, as on the earliest one's day."""
    order = [(tier, cluster), (tier, None)] + (
        [("on_demand", cluster), ("on_demand", None)] if fallback else []
    )
    cands = [r for r in rows if r[0] == model and (r[1], r[2]) in order and (r[2] is None or r[2] == cluster)]
    if not cands:
        return None
    if all(r[3] > day for r in cands):
        day = min(r[3] for r in cands)
    for key in order:
        if key[1] is None or key[1] == cluster:
            live = [r for r in cands if (r[1], r[2]) == key and r[3] <= day]
            if live:
                return max(live, key=lambda r: r[3])[4]
    return None  # pragma: no cover - the earliest row is in force on its own day


def hand_usd(
    rows: list[tuple[str, str, str | None, dt.date, float]],
    model: str,
    tier: str,
    cluster: str | None,
    start: dt.datetime,
    end: dt.datetime,
    *,
    fallback: bool = True,
) -> float | None:
    """One GPU over [start, end), cut at each midnight, each day at :func:`hand_rate`."""
    total, t = 0.0, start
    while t < end:
        nxt = min(end, dt.datetime.combine(t.date() + dt.timedelta(days=1), dt.time()))
        rate = hand_rate(rows, model, tier, cluster, t.date(), fallback=fallback)
        if rate is None:
            return None
        total += (nxt - t).total_seconds() / 3600 * rate
        t = nxt
    return total
