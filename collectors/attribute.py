"""Tie telemetry samples to the jobs that held their GPUs: by GPU id, and by host for allocations naming none.

Two paths, both run by :func:`attribute_samples` at the end of every :func:`collectors.landing.land`:

- **by GPU id**: an allocation that names its GPU (the demo, jobs CSVs with GPU ids, NVML processes) stamps
  the samples of that GPU inside its span;
- **by host** (``sacct``, any scheduler record that names only nodes): for each host, the allocations that
  name no GPU are turned into per-GPU *ties* (table ``host_attribution``), then stamped the same way. Which
  of the host's GPUs a job had is decided with the best evidence there is, in this order:

  1. the GPU indices the scheduler names (``sacct --json`` ``gres_detail`` ``gpu:a100:4(IDX:0-3)``, or
     ``scontrol show job -d`` through the Slurm collector; stored in ``allocations.gpu_index``) — ``exact``,
     evidence ``gres_idx``; or GPUs another allocation row of the same job names by id (the NVML sampler
     adds them beside sacct's host row) — ``exact``, ``gpu_id``;
  2. processes the job ran on a GPU (``processes.job_id``: NVML's SLURM_JOB_ID / cgroup) — ``exact``,
     ``process``;
  3. samples a source already labelled with the job (dcgm ``hpc_job``) — ``exact``, ``sample_label``;
  4. the job holds every GPU the host reports — ``exact``, ``whole_host``;
  5. the GPUs still free over the job's span are exactly as many as it still needs (every other GPU is
     held by jobs tied exactly) — ``exact``, ``remainder``;
  6. otherwise the host's GPU-time is split in proportion to the GPUs each job holds: each job is dealt
     as many of the host's free GPUs as it holds, lowest index first, jobs in start order (Slurm's
     ``select/cons_tres`` hands out the lowest free indices too) — ``by_share``, ``dealt``. The host's
     totals are then exact; which job had which card is inferred, so per-job utilization is an estimate.

  3b. a fraction of a card no evidence placed (``gres/gpu:a100_3g.40gb=1``: 3/7) on a host whose MIG instances
     report: free instances of its size, as many as it holds (:func:`_deal_instances`) — ``exact``,
     ``remainder`` where exactly those are free, else ``by_share``, ``dealt``. Each tie then holds its
     allocation's fraction of the card (gpuledger/ledger/shares.py ``HOST_TIES_SQL``), not a whole card.

Rules 4–6 never tie a GPU-second to two jobs: a GPU already held by an allocation that names it, or tied to
an overlapping job, is not dealt again.

  7. a job that fits the host on its own (it holds no more GPUs than the host reports) but finds the cards
     held by overlapping jobs time-slices them: it is tied to the cards least held over its span, lowest
     index first — ``by_share``, ``shared`` — and the shared-GPU rule (analytics/cost.py) splits each
     card-second among its holders, so a card is billed once (two 1-GPU jobs on a 1-card host for an hour:
     ½ card-hour each). What a job holds beyond the host's reported cards stays unmeasured (the other cards
     may exist without telemetry). Only evidence (rules 1–3) can put two jobs on one card at once — time-slicing, MPS — and then
both ties are kept (the shared-GPU rule splits that card's cost) while each sample goes to one job, the
smallest job id, so the stamping is the same on every run (gpuledger/ledger/shares.py stamps the samples of
any shared stretch so, allocations that name the card too, and counts each for every holder by its share). Fractional GPU counts are dealt as whole cards (rounded, at least 1); splitting one card among
several jobs is the shared-GPU rule's business, not this one's.

Each job then gets ``jobs.attribution`` (gpuledger/ledger/shares.py ``attribution_update_sql``, also run when a
card's split changes): ``none`` when no sample is tied to it (a sample inside a stretch of a card it shares is
its too, stamped with the stretch's first holder), ``by_share`` when any of its
GPUs were dealt by share, else ``exact``. A job whose tied GPUs all report one catalog model of the same
family as the job's model (``A100-40GB`` from a bare ``gres/gpu:a100`` on cards reporting "NVIDIA
A100-SXM4-80GB") — or that has no model — takes the telemetry's model, so it is priced as the card it ran on.

Hosts match on their short, lower-case name (``node01.cluster.local`` is ``node01``).

**W&B series** (``wandb:<host>:<i>``, collectors/wandb.py) are a second view of cards, not cards: W&B reports
the GPUs its run could see, numbered as CUDA numbers them, on the host its metadata names. Where that host's
real cards are in the ledger (a GPU a telemetry source named there), :func:`link_views` makes W&B GPU ``i``
a view of the host's ``i``-th card, lowest index first (``gpus.parent_gpu_id``, so capacity counts the card
once, as for a MIG instance), and then:

- a view is not one of the host's cards: it is never dealt, and the job label its samples carry (``--job``)
  is no evidence of which card the job had (W&B's GPU 0 is the job's first visible device, not the host's
  index 0): the job is tied to the real cards by rules 1-6 as if W&B had not reported;
- :func:`settle_views`: a view sample labelled with a job is that job's only while none of the job's own
  cards reports: where the job's ``i``-th tied card (lowest index first) has a sample covering that moment,
  the view sample loses its job and the card's reading counts. So a job is judged from one series at every
  moment: its cards' telemetry where there is some, W&B's where they are silent;
- with no real card of the host in the ledger, a W&B GPU is a card of that host as any other (a view ``i``
  beyond the host's real cards too): dealt, and its labels are ``sample_label`` evidence.

Tie and label changes re-roll the views' time (``merged_windows``), whichever order the files arrive in.

Per-process utilization (``processes`` rows with an ``interval_s``: nvidia-smi pmon) names pids, not jobs:
before the ties are made, :func:`resolve_process_jobs` gives each such row the job another source saw running
that pid on the same host while the job ran (NVML's SLURM_JOB_ID / cgroup, a pmon log ingested with
``--job``), so those rows are ``process`` evidence too; :func:`refresh_process_shares` then sums them per GPU,
poll and job into ``process_shares``, which the shared-GPU rule of analytics/cost.py splits a GPU-second by.
"""

from __future__ import annotations

import bisect
import datetime as dt
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

import duckdb

from gpuledger.ledger.job_states import HELD_STATES
from gpuledger.ledger.mig import GPU_SLICES_SQL
from gpuledger.ledger.sample_time import MAX_REACH, sample_end_sql
from gpuledger.ledger.shares import attribution_update_sql
from gpuledger.ledger.sql import sql_list

FOREVER = dt.datetime.max
# how a host name is compared: sacct's NodeList has short names, a hostname column may be an FQDN
HOST_KEY = "lower(split_part({}, '.', 1))"
METHODS = ("exact", "by_share", "none")
# GPU ids of W&B system metrics (collectors/wandb.py): a second view of a card of their host, not a card
VIEW_PREFIX = "wandb:"


def host_key(col: str) -> str:
    return HOST_KEY.format(col)


@dataclass(frozen=True)
class HostAlloc:
    """One job's hold on one host, as the scheduler recorded it (no GPU ids)."""

    job_id: str
    start: dt.datetime
    end: dt.datetime | None  # None: still running
    gpus: float  # GPUs held on this host
    indices: tuple[int, ...] = ()  # GPU indices the scheduler named (gres_detail IDX)


@dataclass(frozen=True)
class Tie:
    """A job held this GPU over [start, end): its samples there are the job's."""

    job_id: str
    gpu_id: str
    start: dt.datetime
    end: dt.datetime | None
    method: str  # exact | by_share
    evidence: str  # gres_idx | gpu_id | process | sample_label | whole_host | remainder | dealt | shared


@dataclass
class _Book:
    """Which GPU is held by whom, when (half-open spans); ``exact`` says whether the holder is known.

    Each GPU's spans are kept sorted by start; while they do not overlap each other (the rules only take a
    free GPU; conflicting evidence can overlap) their ends are sorted too, so a lookup is a bisection.
    """

    spans: dict[str, list[tuple[dt.datetime, dt.datetime, bool]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    messy: set[str] = field(default_factory=set)  # GPUs with overlapping spans: scanned in full

    def _overlapping(
        self, gpu: str, lo: dt.datetime, hi: dt.datetime
    ) -> list[tuple[dt.datetime, dt.datetime, bool]]:
        sp = self.spans[gpu]
        if gpu in self.messy:
            return [x for x in sp if x[0] < hi and lo < x[1]]
        out = []
        j = bisect.bisect_left(sp, (hi,)) - 1  # the last span starting before hi, then earlier ones
        while j >= 0 and sp[j][1] > lo:
            out.append(sp[j])
            j -= 1
        return out

    def free(self, gpu: str, lo: dt.datetime, hi: dt.datetime) -> bool:
        return not self._overlapping(gpu, lo, hi)

    def overlapping_exact(self, gpus: Iterable[str], lo: dt.datetime, hi: dt.datetime) -> bool:
        """Every hold overlapping [lo, hi) on these GPUs is known exactly."""
        return all(x for g in gpus for _, _, x in self._overlapping(g, lo, hi))

    def take(self, gpu: str, lo: dt.datetime, hi: dt.datetime, exact: bool) -> None:
        if gpu not in self.messy and not self.free(gpu, lo, hi):
            self.messy.add(gpu)
        bisect.insort(self.spans[gpu], (lo, hi, exact))


def deal(
    gpus: list[tuple[str, int | None]],
    allocs: list[HostAlloc],
    *,
    held: Iterable[tuple[str, dt.datetime, dt.datetime | None]] = (),
    seen: dict[tuple[str, dt.datetime], dict[str, str]] | None = None,
    instances: Iterable[tuple[str, float]] = (),
) -> list[Tie]:
    """Tie one host's GPU-less allocations to its GPUs (rules 1–6 of the module docstring).

    ``gpus``: the host's GPUs as (gpu_id, index); ``held``: (gpu_id, start, end) of allocations that name
    their GPU; ``seen``: per allocation (job_id, start), GPUs observed running the job → evidence
    (``process`` / ``sample_label``); ``instances``: the host's MIG instances as (gpu_id, share of the card),
    dealt to fractional allocations of their size (rule 3b). Returns the ties: rules 1-6 tie at most one job
    per GPU-second; rule 7 adds ``shared`` ties where jobs hold more of the host than it has.
    """
    seen = seen or {}
    order = sorted(gpus, key=lambda g: (g[1] is None, g[1] if g[1] is not None else 0, g[0]))
    by_index = {idx: gid for gid, idx in gpus if idx is not None}
    book = _Book()
    for gid, lo, hi in held:
        book.take(gid, lo, hi or FOREVER, True)
    ties: list[Tie] = []
    need: dict[int, int] = {}
    mine: dict[int, set[str]] = defaultdict(set)
    allocs = sorted(allocs, key=lambda a: (a.start, a.job_id))
    # rules 1-3: GPUs named by the scheduler or observed running the job
    for i, a in enumerate(allocs):
        hi = a.end or FOREVER
        pinned: dict[str, str] = {by_index[x]: "gres_idx" for x in a.indices if x in by_index}
        for gid, how in seen.get((a.job_id, a.start), {}).items():
            pinned.setdefault(gid, how)
        for gid in sorted(pinned):
            book.take(gid, a.start, hi, True)
            mine[i].add(gid)
            ties.append(Tie(a.job_id, gid, a.start, a.end, "exact", pinned[gid]))
        need[i] = max(1, round(a.gpus)) - len(pinned) if a.gpus > 0 else 0
    _deal_instances(allocs, need, mine, book, ties, sorted(instances))
    # rule 4: the job holds every GPU the host reports
    for i, a in enumerate(allocs):
        if need[i] > 0 and not mine[i] and round(a.gpus) >= len(order) > 0:
            hi = a.end or FOREVER
            for gid, _ in order:
                if book.free(gid, a.start, hi):
                    book.take(gid, a.start, hi, True)
                    mine[i].add(gid)
                    ties.append(Tie(a.job_id, gid, a.start, a.end, "exact", "whole_host"))
            # the host's cards, as many as it reports: what others already hold over the span is shared
            # (rule 7), what it holds beyond them has no telemetry
            need[i] = len(order) - len(mine[i]) if round(a.gpus) == len(order) else 0
    # rules 5-6: the rest, in start order, lowest free index first
    short: dict[int, int] = defaultdict(int)
    for i, a in enumerate(allocs):
        if need[i] <= 0:
            continue
        hi = a.end or FOREVER
        free = [gid for gid, _ in order if gid not in mine[i] and book.free(gid, a.start, hi)]
        chosen = free[: need[i]]
        others = [gid for gid, _ in order if gid not in free and gid not in mine[i]]
        exact = len(free) == need[i] and book.overlapping_exact(others, a.start, hi)
        short[i] = need[i] - len(chosen)
        for gid in chosen:
            book.take(gid, a.start, hi, exact)
            mine[i].add(gid)
            ties.append(
                Tie(
                    a.job_id,
                    gid,
                    a.start,
                    a.end,
                    "exact" if exact else "by_share",
                    "remainder" if exact else "dealt",
                )
            )
    # rule 7: a job that fits the host on its own but finds its cards held by overlapping jobs time-slices
    # them (Slurm's shared GRES, an overscheduled node): it is tied to the cards least held over its span,
    # lowest index first, and the shared-GPU rule (analytics/cost.py) splits each card-second among the
    # holders, so one card is billed once. A job holding more GPUs than the host reports stays unmeasured
    # for the rest: the host's other cards may exist without telemetry.
    for i, a in enumerate(allocs):
        if short[i] <= 0 or round(a.gpus) > len(order):
            continue
        hi = a.end or FOREVER
        rest = sorted(
            (gid for gid, _ in order if gid not in mine[i]),
            key=lambda g, lo=a.start, hi=hi: len(book._overlapping(g, lo, hi)),  # stable: index order kept
        )
        for gid in rest[: short[i]]:
            book.take(gid, a.start, hi, False)
            ties.append(Tie(a.job_id, gid, a.start, a.end, "by_share", "shared"))
    return ties


def _deal_instances(
    allocs: list[HostAlloc],
    need: dict[int, int],
    mine: dict[int, set[str]],
    book: _Book,
    ties: list[Tie],
    instances: list[tuple[str, float]],
) -> None:
    """Rule 3b: an allocation of a fraction of a card that no evidence placed (a Slurm
    ``gres/gpu:a100_3g.40gb=1``, 3/7; a pod's ``nvidia.com/mig-3g.40gb``) on a host whose MIG instances
    report is dealt free instances of its size: the first size whose whole multiple it is (3/7 = one 3g.40gb
    of an A100; 6/7 two of them) with that many instances free over its span, lowest id first. ``exact``
    (``remainder``) where exactly that many of that size are free and every other hold on them is known,
    else ``by_share`` (``dealt``). Where no size has enough free, the job time-slices the instances of its
    size least held over its span (``by_share``, ``shared``, as rule 7 does cards): the shared-GPU rule
    splits each instance's slices among its holders. A whole-card allocation is left to rules 4-7."""
    if not instances:
        return
    sizes = sorted({share for _, share in instances}, reverse=True)
    for i, a in enumerate(allocs):
        if need[i] <= 0 or mine[i] or a.gpus <= 0 or abs(a.gpus - round(a.gpus)) < 1e-9:
            continue
        hi = a.end or FOREVER
        for size in sizes:
            n = round(a.gpus / size)
            if n < 1 or abs(n * size - a.gpus) > 1e-6:
                continue
            same = [gid for gid, share in instances if abs(share - size) < 1e-9]
            free = [gid for gid in same if book.free(gid, a.start, hi)]
            if len(free) < n:
                continue
            exact = len(free) == n and book.overlapping_exact([g for g in same if g not in free], a.start, hi)
            for gid in free[:n]:
                book.take(gid, a.start, hi, exact)
                mine[i].add(gid)
                ties.append(
                    Tie(a.job_id, gid, a.start, a.end, "exact" if exact else "by_share",
                        "remainder" if exact else "dealt")
                )  # fmt: skip
            need[i] = 0
            break
        else:
            for size in sizes:
                n = round(a.gpus / size)
                same = [gid for gid, share in instances if abs(share - size) < 1e-9]
                if n < 1 or abs(n * size - a.gpus) > 1e-6 or len(same) < n:
                    continue
                least = sorted(same, key=lambda g, lo=a.start, hi=hi: len(book._overlapping(g, lo, hi)))
                for gid in least[:n]:
                    book.take(gid, a.start, hi, False)
                    mine[i].add(gid)
                    ties.append(Tie(a.job_id, gid, a.start, a.end, "by_share", "shared"))
                need[i] = 0
                break


def attribute_samples(con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
    """Stamp each sample with the job whose allocation covers its GPU and time (see the module docstring).

    Runs for the samples this ingest brought and for the samples under the allocations it brought, so the
    order in which telemetry and job records arrive does not matter. Samples a source already tied to a job
    (a dcgm ``hpc_job`` label, an NVML process) keep that job. GPU-times whose job changed are left in TEMP
    ``merged_windows`` (gpu_id, lo, hi), which land() re-rolls.
    """
    con.execute(
        """
        UPDATE samples SET job_id = a.job_id
        FROM allocations a
        WHERE samples.job_id IS NULL
          AND a.gpu_id IS NOT NULL AND samples.gpu_id = a.gpu_id
          AND samples.ts >= a.start_ts AND (a.end_ts IS NULL OR samples.ts < a.end_ts)
          AND (samples.ingest_id = ? OR a.ingest_id = ?)
        """,
        [ingest_id, ingest_id],
    )
    linked_hosts = link_views(con, ingest_id)
    resolved_hosts, resolved_ingests = resolve_process_jobs(con, ingest_id)
    hosts = sorted(set(_affected_hosts(con, ingest_id)) | set(resolved_hosts) | set(linked_hosts))
    if hosts:
        attribute_hosts(con, hosts, ingest_id)
    _record_methods(con, ingest_id, hosts)
    refresh_process_shares(con, sorted({ingest_id, *resolved_ingests}))
    if con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'stage_pmon_polls'"
    ).fetchall()[0][0]:
        # a node-level log's polls (collectors/nvidia_smi_pmon.py): a job with no process in one had none
        con.execute(
            "INSERT INTO process_shares SELECT gpu_id, ts, interval_s, NULL, NULL, ? FROM stage_pmon_polls",
            [ingest_id],
        )


def link_views(con: duckdb.DuckDBPyConnection, ingest_id: int) -> list[str]:
    """Make each W&B GPU (``wandb:<host>:<i>``) of the hosts this ingest brought GPUs or samples to a view of
    the host's ``i``-th real card, lowest index first (``gpus.parent_gpu_id``), or of none when the host has
    fewer real cards in the ledger (then it stands for a card itself). A real card is a GPU of the host that
    is no view and no MIG instance. A view takes its card's spelling of the host (W&B writes the machine's
    hostname, ``g01.cluster.local`` where the scheduler and nvidia-smi say ``g01``): analytics match hosts
    exactly, and the view sits where its card does. Returns the hosts (short lower-case names) where a view
    changed card: their ties are made again (a view is dealt only while it is no card's)."""
    if not con.execute(
        "SELECT count(*) FROM (SELECT 1 FROM gpus WHERE starts_with(gpu_id, ?) LIMIT 1)", [VIEW_PREFIX]
    ).fetchall()[0][0]:
        return []
    staged = (
        con.execute(
            "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'stage_gpus'"
        ).fetchall()[0][0]
        and "host" in con.table("temp.stage_gpus").columns
    )
    hk = host_key("host")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE view_hosts AS
            SELECT DISTINCT {hk} AS hk FROM gpus
            WHERE host IS NOT NULL AND gpu_id IN (SELECT DISTINCT gpu_id FROM samples WHERE ingest_id = ?)
            {f"UNION SELECT {hk} FROM stage_gpus WHERE host IS NOT NULL" if staged else ""}""",
        [ingest_id],
    )
    changed = con.execute(
        f"""WITH cards AS (
                SELECT gpu_id, host, {hk} AS hk,
                       row_number() OVER (PARTITION BY {hk} ORDER BY gpu_index NULLS LAST, gpu_id) - 1 AS rank
                FROM gpus
                WHERE parent_gpu_id IS NULL AND NOT starts_with(gpu_id, $prefix)
                  AND {hk} IN (SELECT hk FROM view_hosts)
            )
            SELECT v.gpu_id, c.gpu_id, coalesce(c.host, v.host), v.parent_gpu_id IS DISTINCT FROM c.gpu_id,
                   {host_key("v.host")}
            FROM gpus v LEFT JOIN cards c ON c.hk = {host_key("v.host")} AND c.rank = v.gpu_index
            WHERE starts_with(v.gpu_id, $prefix) AND {host_key("v.host")} IN (SELECT hk FROM view_hosts)
              AND (v.parent_gpu_id IS DISTINCT FROM c.gpu_id OR v.host IS DISTINCT FROM coalesce(c.host, v.host))""",
        {"prefix": VIEW_PREFIX},
    ).fetchall()
    for gid, card, host, _, _ in changed:
        con.execute("UPDATE gpus SET parent_gpu_id = ?, host = ? WHERE gpu_id = ?", [card, host, gid])
    con.execute("DROP TABLE temp.view_hosts")
    return sorted({hk for *_, moved, hk in changed if moved})


def settle_views(con: duckdb.DuckDBPyConnection) -> None:
    """Take a job's label off the W&B view samples (of the hosts in TEMP ``attr_hosts``) taken while the job's
    own card reported: view ``i`` of a job's host stands for the job's ``i``-th tied card there (lowest index
    first, as CUDA numbers the devices a job can see); where that card has a sample covering the view
    sample's time, the card's reading is the job's and the view's is no one's. Where the card is silent
    the view sample keeps its job. A view whose host no host allocation spells as it does (its card's
    ``G01`` beside sacct's ``g01``) keeps its labels: unlabelled, analytics (which match hosts exactly) would
    find it claimed by no job and bill it as a card of its own. The changed GPU-times are left in
    ``merged_windows`` for the rollup."""
    if not con.execute(
        f"""SELECT count(*) FROM (
                SELECT 1 FROM gpus WHERE starts_with(gpu_id, ?) AND parent_gpu_id IS NOT NULL
                  AND {host_key("host")} IN (SELECT hk FROM attr_hosts) LIMIT 1)""",
        [VIEW_PREFIX],
    ).fetchall()[0][0]:
        return
    con.execute(
        """CREATE OR REPLACE TEMP TABLE view_cards AS
            SELECT h.job_id, h.host AS hk, h.start_ts, h.end_ts, h.gpu_id AS card,
                   row_number() OVER (PARTITION BY h.job_id, h.host, h.start_ts
                                      ORDER BY g.gpu_index NULLS LAST, h.gpu_id) - 1 AS rank
            FROM host_attribution h JOIN gpus g USING (gpu_id)
            WHERE h.host IN (SELECT hk FROM attr_hosts) AND g.parent_gpu_id IS NULL
              AND NOT starts_with(h.gpu_id, ?)""",
        [VIEW_PREFIX],
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE view_candidates AS
            SELECT s.rowid AS rid, s.gpu_id, s.ts, c.card
            FROM samples s JOIN gpus v ON v.gpu_id = s.gpu_id
                 JOIN view_cards c ON c.job_id = s.job_id AND c.hk = {host_key("v.host")}
                  AND c.rank = v.gpu_index AND s.ts >= c.start_ts AND (c.end_ts IS NULL OR s.ts < c.end_ts)
            WHERE starts_with(s.gpu_id, ?) AND v.parent_gpu_id IS NOT NULL
              AND EXISTS (SELECT 1 FROM allocations a WHERE a.gpu_id IS NULL AND a.host = v.host)""",
        [VIEW_PREFIX],
    )
    # the card's latest sample at or before each view sample (ASOF), read only around the candidates' times
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE view_covered AS
            SELECT v.rid, v.gpu_id, v.ts FROM view_candidates v
            ASOF JOIN (SELECT gpu_id, ts, interval_s FROM samples
                       WHERE gpu_id IN (SELECT DISTINCT card FROM view_candidates)
                         AND ts >= (SELECT min(ts) FROM view_candidates) - {MAX_REACH}
                         AND ts <= (SELECT max(ts) FROM view_candidates)) r
              ON r.gpu_id = v.card AND r.ts <= v.ts
            WHERE v.ts < {sample_end_sql("r.ts", "r.interval_s")}"""
    )
    con.execute("UPDATE samples SET job_id = NULL FROM view_covered c WHERE samples.rowid = c.rid")
    con.execute("CREATE TEMP TABLE IF NOT EXISTS merged_windows (gpu_id VARCHAR, lo TIMESTAMP, hi TIMESTAMP)")
    con.execute(
        "INSERT INTO merged_windows SELECT gpu_id, min(ts), max(ts) FROM view_covered GROUP BY gpu_id"
    )
    for t in ("view_cards", "view_candidates", "view_covered"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")


def resolve_process_jobs(con: duckdb.DuckDBPyConnection, ingest_id: int) -> tuple[list[str], list[int]]:
    """Tie per-process utilization rows (``processes`` with an ``interval_s``: nvidia-smi pmon) that name no
    job to the job another source saw running that pid on the same host (NVML's SLURM_JOB_ID or cgroup, a
    pmon log ingested with ``--job``), when that job's span covers the row's time (a pid reused later by
    another job is not mistaken for it). A bare scheduler id (``123``) finds the ledger's ``<cluster>/123``.
    A pid two such jobs claim at one time stays unknown. Runs when ingest ``ingest_id`` brought processes or
    jobs (what a tie depends on). Returns the hosts and ingests whose rows got a job.
    """
    pending = con.execute(
        """SELECT (SELECT count(*) FROM (SELECT 1 FROM processes
                   WHERE job_id IS NULL AND interval_s IS NOT NULL AND pid IS NOT NULL LIMIT 1))
                * (SELECT count(*) FROM (SELECT 1 FROM processes WHERE ingest_id = ? UNION ALL
                                         SELECT 1 FROM jobs WHERE ingest_id = ? LIMIT 1))""",
        [ingest_id, ingest_id],
    ).fetchall()[0][0]
    if not pending:
        return [], []
    hk = host_key("g.host")
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attr_pid_jobs AS
            WITH seen AS (
                SELECT DISTINCT {hk} AS hk, m.pid, m.job_id FROM processes m JOIN gpus g USING (gpu_id)
                WHERE m.job_id IS NOT NULL AND m.pid IS NOT NULL AND g.host IS NOT NULL
            )
            SELECT s.hk, s.pid, j.job_id, j.start_ts, j.end_ts FROM seen s JOIN jobs j ON j.job_id = s.job_id
            UNION
            SELECT s.hk, s.pid, j.job_id, j.start_ts, j.end_ts FROM seen s JOIN jobs j
              ON suffix(j.job_id, '/' || s.job_id) AND NOT contains(s.job_id, '/')"""
    )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attr_pid_rows AS
            SELECT p.rowid AS rid, any_value(p.ingest_id) AS ingest_id, any_value({hk}) AS hk,
                   min(m.job_id) AS job_id
            FROM processes p JOIN gpus g USING (gpu_id)
                 JOIN attr_pid_jobs m ON m.hk = {hk} AND m.pid = p.pid
                  AND p.ts >= m.start_ts AND (m.end_ts IS NULL OR p.ts < m.end_ts)
            WHERE p.job_id IS NULL AND p.interval_s IS NOT NULL AND p.pid IS NOT NULL
            GROUP BY p.rowid
            HAVING count(DISTINCT m.job_id) = 1"""
    )
    con.execute("UPDATE processes SET job_id = r.job_id FROM attr_pid_rows r WHERE processes.rowid = r.rid")
    hosts = [r[0] for r in con.execute("SELECT DISTINCT hk FROM attr_pid_rows ORDER BY 1").fetchall()]
    ingests = [int(r[0]) for r in con.execute("SELECT DISTINCT ingest_id FROM attr_pid_rows").fetchall()]
    for t in ("attr_pid_jobs", "attr_pid_rows"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    return hosts, ingests


def refresh_process_shares(con: duckdb.DuckDBPyConnection, ingest_ids: list[int]) -> None:
    """Rebuild the job rows of ``process_shares`` for the processes rows of these ingests: per GPU, poll and
    job, the sum of its processes' SM utilization (NULL when none of them had an SM sample in that poll).
    Rows whose job is unknown are left out; the shared-GPU rule (analytics/cost.py) reads only the jobs
    holding the GPU. The poll rows (job NULL) of a node-level log are written once, when it lands."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE attr_share_ingests AS SELECT unnest(?::BIGINT[]) AS i", [ingest_ids]
    )
    con.execute(
        "DELETE FROM process_shares WHERE ingest_id IN (SELECT i FROM attr_share_ingests) AND job_id IS NOT NULL"
    )
    con.execute(
        """INSERT INTO process_shares
           SELECT gpu_id, ts, max(interval_s), job_id, sum(sm_pct), ingest_id FROM processes
           WHERE ingest_id IN (SELECT i FROM attr_share_ingests) AND interval_s IS NOT NULL AND job_id IS NOT NULL
           GROUP BY gpu_id, ts, job_id, ingest_id"""
    )
    con.execute("DROP TABLE IF EXISTS temp.attr_share_ingests")


def _affected_hosts(con: duckdb.DuckDBPyConnection, ingest_id: int) -> list[str]:
    """Hosts whose ties may change with this ingest: new host allocations, telemetry or processes there,
    or ties left by allocations that are gone (a --replace)."""
    if (
        not con.execute(
            "SELECT count(*) FROM (SELECT 1 FROM allocations WHERE gpu_id IS NULL AND host IS NOT NULL LIMIT 1)"
        ).fetchall()[0][0]
        and not con.execute("SELECT count(*) FROM host_attribution").fetchall()[0][0]
    ):
        return []
    rows = con.execute(
        f"""
        SELECT DISTINCT hk FROM (
            SELECT {host_key("host")} AS hk FROM allocations
            WHERE ingest_id = ? AND gpu_id IS NULL AND host IS NOT NULL
            UNION ALL
            SELECT {host_key("g.host")} FROM gpus g
            WHERE g.host IS NOT NULL
              AND g.gpu_id IN (SELECT DISTINCT gpu_id FROM samples WHERE ingest_id = ?
                               UNION SELECT gpu_id FROM processes WHERE ingest_id = ?)
            UNION ALL
            SELECT h.host FROM host_attribution h
            WHERE NOT EXISTS (SELECT 1 FROM allocations a WHERE a.job_id = h.job_id AND a.gpu_id IS NULL
                              AND {host_key("a.host")} = h.host)
        )
        WHERE hk IN (SELECT {host_key("host")} FROM allocations WHERE gpu_id IS NULL AND host IS NOT NULL)
           OR hk IN (SELECT host FROM host_attribution)
        ORDER BY hk
        """,
        [ingest_id, ingest_id, ingest_id],
    ).fetchall()
    return [r[0] for r in rows]


def attribute_hosts(con: duckdb.DuckDBPyConnection, hosts: list[str], ingest_id: int | None = None) -> None:
    """Recompute the ties of these hosts (short lower-case names) and re-stamp the samples they cover.

    Samples under ties that did not change are stamped only where they came with ``ingest_id`` (the rest
    were stamped when the tie was made), so a live collector's flush does not re-read a host's history.
    ``ingest_id`` None re-stamps every unstamped sample under every tie."""
    con.execute("CREATE OR REPLACE TEMP TABLE attr_hosts AS SELECT unnest(?::VARCHAR[]) AS hk", [hosts])
    gpus: dict[str, list[tuple[str, int | None]]] = defaultdict(list)
    for hk, gid, idx in con.execute(
        f"""SELECT {host_key("host")}, gpu_id, gpu_index FROM gpus
            WHERE parent_gpu_id IS NULL AND {host_key("host")} IN (SELECT hk FROM attr_hosts)"""
    ).fetchall():
        gpus[hk].append((gid, idx))
    # the hosts' MIG instances with their share of the card (gpuledger/ledger/mig.py sizes them): rule 3b
    instances: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for hk, gid, share in con.execute(
        f"""SELECT {host_key("g.host")}, z.gpu_id, z.slice_units / z.slices
            FROM ({GPU_SLICES_SQL}) z JOIN gpus g USING (gpu_id)
            WHERE z.instance AND {host_key("g.host")} IN (SELECT hk FROM attr_hosts)"""
    ).fetchall():
        instances[hk].append((gid, float(share)))
    # the host allocations, with a running job's span left open (its end is what sacct measured so far)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attr_allocs AS
            SELECT a.job_id, {host_key("a.host")} AS hk, a.start_ts,
                   CASE WHEN j.end_ts IS NULL AND j.state IN ({sql_list(HELD_STATES)})
                        THEN NULL ELSE a.end_ts END AS end_ts,
                   sum(a.gpu_count) AS gpus,
                   list(a.gpu_index ORDER BY a.gpu_index) FILTER (WHERE a.gpu_index IS NOT NULL) AS indices
            FROM allocations a LEFT JOIN jobs j USING (job_id)
            WHERE a.gpu_id IS NULL AND a.host IS NOT NULL AND {host_key("a.host")} IN (SELECT hk FROM attr_hosts)
            GROUP BY ALL"""
    )
    allocs: dict[str, list[HostAlloc]] = defaultdict(list)
    for job, hk, lo, hi, n, idx in con.execute("SELECT * FROM attr_allocs").fetchall():
        allocs[hk].append(HostAlloc(job, lo, hi, float(n), tuple(idx or ())))
    held: dict[str, list[tuple[str, dt.datetime, dt.datetime | None]]] = defaultdict(list)
    for hk, gid, lo, hi in con.execute(
        f"""SELECT {host_key("g.host")}, a.gpu_id, a.start_ts, a.end_ts
            FROM allocations a JOIN gpus g USING (gpu_id)
            WHERE {host_key("g.host")} IN (SELECT hk FROM attr_hosts)
              -- a GPU the job's own host row also covers (NVML named it) is the job's, not another's
              AND NOT EXISTS (SELECT 1 FROM attr_allocs h WHERE h.job_id = a.job_id AND h.hk = {host_key("g.host")})"""
    ).fetchall():
        held[hk].append((gid, lo, hi))
    seen: dict[str, dict[tuple[str, dt.datetime], dict[str, str]]] = defaultdict(lambda: defaultdict(dict))
    # GPUs another row of the job names by id first, then its processes, then source labels
    for how, sql in (
        (
            "gpu_id",
            """SELECT DISTINCT h.hk, h.job_id, h.start_ts, a.gpu_id FROM allocations a
               JOIN gpus g ON g.gpu_id = a.gpu_id
               JOIN attr_allocs h ON h.job_id = a.job_id AND h.hk = {hk}
                AND a.start_ts < coalesce(h.end_ts, TIMESTAMP '9999-12-31')
                AND h.start_ts < coalesce(a.end_ts, TIMESTAMP '9999-12-31')""",
        ),
        (
            "process",
            """SELECT DISTINCT a.hk, a.job_id, a.start_ts, p.gpu_id FROM processes p
               JOIN attr_allocs a ON (p.job_id = a.job_id OR a.job_id LIKE '%/' || p.job_id)
                AND p.ts >= a.start_ts AND (a.end_ts IS NULL OR p.ts < a.end_ts)
               JOIN gpus g ON g.gpu_id = p.gpu_id AND {hk} = a.hk
               WHERE p.job_id IS NOT NULL""",
        ),
        (
            "sample_label",
            # samples a source labelled with the job (not those this module stamped from an earlier tie)
            """SELECT DISTINCT a.hk, a.job_id, a.start_ts, s.gpu_id FROM samples s
               JOIN attr_allocs a ON s.job_id = a.job_id
                AND s.ts >= a.start_ts AND (a.end_ts IS NULL OR s.ts < a.end_ts)
               JOIN gpus g ON g.gpu_id = s.gpu_id AND {hk} = a.hk
               -- a W&B view of a card: its label says the job ran on the host, not on which card
               WHERE NOT (starts_with(g.gpu_id, '{view}') AND g.parent_gpu_id IS NOT NULL)
                 AND NOT EXISTS (SELECT 1 FROM host_attribution h WHERE h.gpu_id = s.gpu_id
                                 AND h.job_id = s.job_id AND s.ts >= h.start_ts
                                 AND (h.end_ts IS NULL OR s.ts < h.end_ts) AND h.evidence <> 'sample_label')""",
        ),
    ):
        for hk, job, lo, gid in con.execute(sql.format(hk=host_key("g.host"), view=VIEW_PREFIX)).fetchall():
            seen[hk][(job, lo)].setdefault(gid, how)
    ties = [
        (hk, t.job_id, t.gpu_id, t.start, t.end, t.method, t.evidence)
        for hk in hosts
        for t in deal(
            gpus.get(hk, []),
            allocs.get(hk, []),
            held=held.get(hk, ()),
            seen=seen.get(hk),
            instances=instances.get(hk, ()),
        )
    ]
    con.execute(
        """CREATE OR REPLACE TEMP TABLE attr_new (host VARCHAR, job_id VARCHAR, gpu_id VARCHAR,
           start_ts TIMESTAMP, end_ts TIMESTAMP, method VARCHAR, evidence VARCHAR)"""
    )
    if ties:  # through Arrow: executemany is a round trip per row, bound lists convert datetimes one by one
        import polars as pl  # only here: a CLI ingest that shares no GPU never pays its 0.12 s import

        frame = pl.DataFrame(
            ties,
            schema=[("host", pl.Utf8), ("job_id", pl.Utf8), ("gpu_id", pl.Utf8), ("start_ts", pl.Datetime("us")),
                    ("end_ts", pl.Datetime("us")), ("method", pl.Utf8), ("evidence", pl.Utf8)],
            orient="row",
        )  # fmt: skip
        con.register("attr_frame", frame)
        con.execute("INSERT INTO attr_new SELECT * FROM attr_frame")
        con.unregister("attr_frame")
    # ties that went away: their samples lose the job (unless a new tie gives it back below); ties that are
    # new: every sample under them is stamped; ties kept: only this ingest's samples can be unstamped there
    key = "job_id, gpu_id, start_ts, end_ts"
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE attr_old AS
            SELECT {key} FROM host_attribution WHERE host IN (SELECT hk FROM attr_hosts)"""
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE attr_gone AS SELECT * FROM attr_old EXCEPT SELECT {key} FROM attr_new"
    )
    con.execute(
        f"CREATE OR REPLACE TEMP TABLE attr_fresh AS SELECT {key} FROM attr_new EXCEPT SELECT * FROM attr_old"
    )
    # a W&B view's labels are its source's (--job), not a tie's stamp: they outlive the tie (settle_views
    # takes off those a card of the job reported beside)
    con.execute(
        """UPDATE samples SET job_id = NULL FROM attr_gone o
           WHERE samples.gpu_id = o.gpu_id AND samples.job_id = o.job_id
             AND samples.ts >= o.start_ts AND (o.end_ts IS NULL OR samples.ts < o.end_ts)
             AND NOT (starts_with(o.gpu_id, ?) AND EXISTS (
                 SELECT 1 FROM host_attribution h WHERE h.host IN (SELECT hk FROM attr_hosts)
                   AND h.job_id = o.job_id AND h.gpu_id = o.gpu_id AND h.start_ts = o.start_ts
                   AND h.evidence = 'sample_label'))""",
        [VIEW_PREFIX],
    )
    con.execute("DELETE FROM host_attribution WHERE host IN (SELECT hk FROM attr_hosts)")
    con.execute("INSERT INTO host_attribution SELECT * FROM attr_new")
    overlapping = con.execute(
        """SELECT count(*) FROM attr_new a JOIN attr_new b ON a.gpu_id = b.gpu_id AND a.job_id < b.job_id
           AND a.start_ts < coalesce(b.end_ts, TIMESTAMP '9999-12-31')
           AND b.start_ts < coalesce(a.end_ts, TIMESTAMP '9999-12-31')"""
    ).fetchall()[0][0]
    if overlapping:
        # evidence put two jobs on one card at once (a shared GPU: the shared-GPU rule splits its cost);
        # its samples go to one of them, the same one every time: the smallest job id
        stamp = """UPDATE samples SET job_id = m.job_id FROM (
                       SELECT s.rowid AS rid, min(n.job_id) AS job_id FROM samples s JOIN {ties} n
                         ON s.gpu_id = n.gpu_id AND s.ts >= n.start_ts AND (n.end_ts IS NULL OR s.ts < n.end_ts)
                       WHERE s.job_id IS NULL {only} GROUP BY s.rowid) m
                   WHERE samples.rowid = m.rid"""
    else:
        stamp = """UPDATE samples SET job_id = n.job_id FROM {ties} n
                   WHERE samples.job_id IS NULL AND samples.gpu_id = n.gpu_id
                     AND samples.ts >= n.start_ts AND (n.end_ts IS NULL OR samples.ts < n.end_ts)
                     {only}"""
    if ingest_id is None:
        con.execute(stamp.format(ties="attr_new", only=""))
    else:
        con.execute(stamp.format(ties="attr_fresh", only=""))
        only = "AND s.ingest_id = ?" if overlapping else "AND samples.ingest_id = ?"
        con.execute(stamp.format(ties="attr_new", only=only), [ingest_id])
    settle_views(con)
    # the GPU-times whose job changed outside this ingest's own samples: land() re-rolls them
    con.execute("CREATE TEMP TABLE IF NOT EXISTS merged_windows (gpu_id VARCHAR, lo TIMESTAMP, hi TIMESTAMP)")
    con.execute(
        """INSERT INTO merged_windows
           SELECT w.gpu_id, greatest(w.lo, s.lo), least(w.hi, s.hi)
           FROM (SELECT gpu_id, min(start_ts) AS lo, max(coalesce(end_ts, TIMESTAMP '9999-12-31')) AS hi
                 FROM (SELECT * FROM attr_gone UNION ALL SELECT * FROM attr_fresh) GROUP BY gpu_id) w
           JOIN (SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM samples
                 WHERE gpu_id IN (SELECT gpu_id FROM attr_fresh UNION SELECT gpu_id FROM attr_gone)
                 GROUP BY gpu_id) s USING (gpu_id)
           WHERE greatest(w.lo, s.lo) <= least(w.hi, s.hi)"""
    )
    for t in ("attr_hosts", "attr_allocs", "attr_new", "attr_old", "attr_gone", "attr_fresh"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")


def _record_methods(con: duckdb.DuckDBPyConnection, ingest_id: int, hosts: list[str]) -> None:
    """Set ``jobs.attribution`` (and refine ``gpu_model`` from telemetry) for the jobs this ingest touched."""
    con.execute(
        """CREATE OR REPLACE TEMP TABLE attr_jobs AS
           SELECT job_id FROM jobs WHERE ingest_id = ? OR attribution IS NULL
           UNION SELECT DISTINCT job_id FROM samples WHERE ingest_id = ? AND job_id IS NOT NULL
           UNION SELECT job_id FROM host_attribution WHERE host IN (SELECT unnest(?::VARCHAR[]))""",
        [ingest_id, ingest_id, hosts],
    )
    con.execute(attribution_update_sql("temp.attr_jobs"))
    # telemetry names the card; a scheduler's gres type often only the family (a100 → A100-40GB)
    family = "regexp_extract({}, '^(RTX-)?[A-Za-z]+[0-9]+')"
    con.execute(
        f"""UPDATE jobs SET gpu_model = t.model
            FROM (SELECT h.job_id, min(g.model) AS model FROM host_attribution h JOIN gpus g USING (gpu_id)
                  WHERE h.job_id IN (SELECT job_id FROM attr_jobs)
                  GROUP BY h.job_id HAVING count(DISTINCT g.model) = 1 AND count(g.model) = count(*)) t
            WHERE jobs.job_id = t.job_id AND jobs.gpu_model IS DISTINCT FROM t.model
              AND (jobs.gpu_model IS NULL OR {family.format("jobs.gpu_model")} = {family.format("t.model")})"""
    )
    con.execute("DROP TABLE IF EXISTS temp.attr_jobs")
