"""The one write path: every source (a file, the demo fleet, a live collector) lands through here.

A parser only *stages*: inside the caller's transaction it creates TEMP tables named ``stage_<table>``
holding canonical columns (any subset of the target table's columns; see gpuledger/ledger/schema.py) and raises
``FormatError(path, line, reason)`` for anything it cannot read. :func:`land` then merges the stage into the
ledger with the same rules for every source:

- samples: one row per (gpu_id, ts); a sample already in the ledger is not a second row, so overlapping
  files never double count, but it fills that row's NULL columns (a second series for the same GPU and
  times adds its columns); ``interval_s`` is derived when the parser leaves it NULL;
- gpus: upserted, keeping known fields and widening first/last seen; every GPU a sample names exists;
- jobs and training runs: upserted by ``job_id`` (a newer record of the same job replaces the older one);
  a job's allocations and train log are replaced with the job's newer ones;
- samples are attributed to the job that held their GPU at that time, once, here;
- the per-GPU-minute rollup is refreshed for the span the ingest touched.

:func:`ingest_file` wraps a parser and :func:`land` in one transaction with provenance: the content hash
makes re-ingesting the same bytes a no-op, ``replace=True`` first removes what an earlier version of the same
source brought in. Any error rolls the whole file back.

Removing an ingest never removes what another ingest still holds. A row has one ``ingest_id``, its owner;
``held_rows`` names the other ingests that hold it (a sample found already in the ledger, a job whose record
another ingest sent too), ``ingest_sources`` the other files found to be an ingest's bytes ("already
ingested"), ``checkpoint_placements`` the checkpoints a training log set on a job. :func:`delete_ingests`
hands a held row to its latest other holder and takes a withdrawn log's checkpoints back;
:func:`withdraw_source` (``--replace``) keeps an ingest another file holds. A fresh ingest with nothing
already in the ledger writes none of these.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import duckdb

from collectors.array_tasks import unify_array_tasks
from collectors.checkpoints import withdraw
from collectors.common import MERGE_KEPT
from collectors.gpu_facts import GpuFacts
from collectors.interleave import extend_merged, settle_interleaved
from collectors.names import neutralize_names
from gpuledger.ledger.errors import FormatError, UnknownFormatError
from gpuledger.ledger.job_states import OPEN_STATES, PENDING
from gpuledger.ledger.sample_time import cadence_sql, interval_sql, reach_sql
from gpuledger.ledger.schema import INGESTED_TABLES
from gpuledger.ledger.sql import quote, sql_list

if TYPE_CHECKING:
    from gpuledger.ledger.settings import Settings

HEAD_BYTES = 64 * 1024
# staged rows per UPDATE of their intervals (_land_samples, rows already in time order)
LAND_CHUNK = 1_000_000
_CADENCE = cadence_sql()


@dataclass(frozen=True)
class IngestOptions:
    cluster: str | None = None  # cluster name for sources that do not carry one
    tz: str | None = None  # IANA zone of naive local timestamps; None = this machine's zone
    job_id: str | None = None  # tie a training log to this job
    host: str | None = None  # host name for sources that carry none (nvidia-smi CSV: HOST:INDEX)
    quiet: bool = False  # no progress bar (it shows only on a terminal, for files of PROGRESS_MIN_BYTES+)
    columns: tuple[str, ...] | None = None  # field names for header-less files (nvidia-smi noheader)
    replace: bool = False  # drop what an earlier version of this source brought in
    source_key: str | None = None  # what --replace matches on; default the absolute path
    default_tier: str = "on_demand"
    cluster_tiers: tuple[tuple[str, str], ...] = ()  # (cluster, tier) from settings
    idle_util_pct: float = 5.0  # for the rollup's idle seconds
    idle_min_minutes: float = 30.0  # for the rollup's idle stretches (settings thresholds.idle_min_minutes)
    target_util_pct: float = 60.0  # for the rollup's under-used seconds (settings thresholds.target_util_pct)
    skip_bad_rows: bool = False  # land the plausible rows, record the others in rejected_rows (validate.py)
    max_job_days: float = 365.0  # a longer job is implausible (settings thresholds.max_job_days)
    max_gzip_ratio: float = 250.0  # a .gz inflating past this is refused (settings ingest.max_gzip_ratio)
    # nvidia-smi CSV: the header line comes back later in the file (True), or not (False); None: the parser
    # finds out, reading past the file's head only when its reader fails (collectors/nvidia_smi_csv.py)
    header_repeats: bool | None = None
    gpu: GpuFacts | None = None  # --gpu-model/--gpu-count: what ran the jobs that name no GPU (gpu_facts.py)
    # Kubernetes pods (collectors/kubernetes.py): a pod's team is its label team_label, else its namespace's
    # entry here, else the namespace (settings [kubernetes])
    team_label: str | None = None
    namespace_teams: tuple[tuple[str, str], ...] = ()

    @classmethod
    def from_settings(cls, settings: Settings, **source: Any) -> IngestOptions:
        """Options for one source (``source``: cluster, tz, host, ...) with everything the settings decide —
        pricing tiers and the rollup's thresholds — taken from ``settings``, the same way for every writer
        (CLI ingest, demo, upload page, live collectors), so a rollup never mixes thresholds."""
        return cls(
            default_tier=settings.default_tier,
            cluster_tiers=tuple((c, s.tier) for c, s in settings.clusters.items() if s.tier),
            idle_util_pct=settings.idle_util_pct,
            idle_min_minutes=settings.idle_min_minutes,
            target_util_pct=settings.target_util_pct,
            max_job_days=getattr(settings, "max_job_days", 365.0),
            max_gzip_ratio=getattr(settings, "max_gzip_ratio", 250.0),
            team_label=getattr(settings, "kubernetes_team_label", None),
            namespace_teams=tuple(sorted(getattr(settings, "kubernetes_namespace_teams", {}).items())),
            **source,
        )


@dataclass(frozen=True)
class Sniff:
    """How sure a parser is that it reads a file (0 = not mine, 1 = certain), and why not when it is not."""

    score: float
    complaint: str = ""


class Parser(Protocol):
    name: str  # the --format value
    description: str  # one line for --help and the README

    def sniff(self, path: Path, head: str) -> Sniff: ...

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        """Create TEMP ``stage_*`` tables; return rows skipped on purpose, by reason."""
        ...


@dataclass
class IngestReport:
    path: str
    format: str
    ingest_id: int | None
    rows: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    already: bool = False  # same content was ingested before: nothing written
    replaced: list[int] = field(default_factory=list)  # earlier ingests removed by --replace
    seconds: float = 0.0
    rejected: list[dict[str, object]] = field(default_factory=list)  # --skip-bad-rows: rows left out, why
    priced: str | None = None  # --gpu-model: what the jobs that name no GPU were priced as, in words
    unpriced: list[str] = field(default_factory=list)  # its jobs that still name no GPU model or count
    bytes_read: int = 0  # of the file, every one (collectors/source_file.py): its size

    def as_dict(self) -> dict[str, object]:
        return {
            "path": self.path,
            "format": self.format,
            "ingest_id": self.ingest_id,
            "rows": self.rows,
            "skipped": self.skipped,
            "already_ingested": self.already,
            "replaced_ingests": self.replaced,
            "seconds": round(self.seconds, 3),
            "rejected_rows": self.rejected,
            "priced_as": self.priced,
            "jobs_without_gpu": self.unpriced,
            "bytes_read": self.bytes_read,
        }


def sha256_file(path: Path) -> str:
    """The file's SHA-256. ``hashlib.file_digest`` reads into one reused buffer and hashes without the GIL: a
    287 MB file alone in 0.20 s against 0.28 s for a loop of 1 MiB ``read`` calls (within noise for a whole
    ingest, where it runs beside DuckDB's stage)."""
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def read_head(path: Path) -> str:
    with path.open("rb") as fh:
        raw = fh.read(HEAD_BYTES)
    if raw.startswith(b"\x1f\x8b"):
        import gzip

        with gzip.open(path, "rb") as gz:
            raw = gz.read(HEAD_BYTES)
    return raw.decode("utf-8", errors="replace")


def choose_parser(path: Path, fmt: str, parsers: dict[str, Parser]) -> Parser:
    if fmt != "auto":
        if fmt not in parsers:
            raise UnknownFormatError(
                path, None, f"unknown format {fmt!r}; known: {', '.join(sorted(parsers))}"
            )
        return parsers[fmt]
    if not path.exists():
        raise FormatError(path, None, "no such file")
    if path.stat().st_size == 0:
        raise FormatError(path, None, "the file is empty")
    head = read_head(path)
    scored = [(p.sniff(path, head), p) for p in parsers.values()]
    scored.sort(key=lambda sp: sp[0].score, reverse=True)
    best_sniff, best = scored[0]
    if best_sniff.score > 0:
        return best
    closest = next((s for s, _ in scored if s.complaint), None)
    hint = f"; closest: {closest.complaint}" if closest else ""
    raise UnknownFormatError(
        path, None, f"no parser recognises this file (tried {', '.join(sorted(parsers))}){hint}"
    )


def _temp_tables(con: duckdb.DuckDBPyConnection) -> set[str]:
    rows = con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE temporary AND table_name LIKE 'stage_%'"
    ).fetchall()
    return {r[0] for r in rows}


def _columns(con: duckdb.DuckDBPyConnection, table: str, *, temp: bool = False) -> list[str]:
    """The columns of a ledger table (or, with ``temp``, of a stage table), in order. Read from the relation,
    not from ``duckdb_columns()``, which lists every column of every table: 0.5 ms a call against 1.7 ms, and
    an ingest asks about twenty times."""
    return list(con.table(f"{'temp' if temp else 'main'}.{table}").columns)


def drop_stage(con: duckdb.DuckDBPyConnection) -> None:
    for t in _temp_tables(con):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")


def _count(con: duckdb.DuckDBPyConnection, sql: str, params: list[object] | None = None) -> int:
    return int(con.execute(sql, params or []).fetchall()[0][0])


def _insert_from_stage(
    con: duckdb.DuckDBPyConnection, table: str, ingest_id: int, defaults: dict[str, str] | None = None
) -> list[str]:
    """INSERT the stage's columns into ``table``; absent columns take ``defaults`` (SQL) or NULL."""
    target = _columns(con, table)
    staged = set(_columns(con, f"stage_{table}", temp=True))
    defaults = defaults or {}
    exprs = []
    for col in target:
        if col == "ingest_id":
            exprs.append(str(ingest_id))
        elif col in staged and col in defaults:
            exprs.append(f"coalesce(s.{col}, {defaults[col]})")
        elif col in staged:
            exprs.append(f"s.{col}")
        else:
            exprs.append(defaults.get(col, "NULL"))
    return exprs


def _tier_case(opts: IngestOptions) -> str:
    arms = " ".join(f"WHEN {quote(cluster)} THEN {quote(tier)}" for cluster, tier in opts.cluster_tiers)
    default = quote(opts.default_tier)
    return f"(CASE s.cluster {arms} ELSE {default} END)" if arms else default


def land(con: duckdb.DuckDBPyConnection, ingest_id: int, opts: IngestOptions) -> dict[str, int]:
    """Merge the ``stage_*`` tables into the ledger; the caller owns the transaction. Returns rows written."""
    staged = _temp_tables(con)
    neutralize_names(con, staged)  # no control or bidi character in a stored name (collectors/names.py)
    rows: dict[str, int] = {}
    if "stage_samples" in staged:
        rows.update(_land_samples(con, ingest_id))
        if inside := settle_interleaved(con, ingest_id):  # another series of the same GPUs' times
            rows["samples"] -= inside
            rows["samples_interleaved"] = inside
        rows["samples"] += extend_merged(con, ingest_id)
    if "stage_gpus" in staged or "stage_samples" in staged:
        rows["gpus"] = _land_gpus(con, staged)
    if "stage_samples" in staged:
        # landed: give its memory (~2 GB for 10 M rows) to attribution and the rollup, which run next
        con.execute("DROP TABLE temp.stage_samples")
    if "stage_jobs" in staged:
        rows["jobs"] = _land_jobs(con, ingest_id, opts)
        # records _land_jobs kept out as older than the ledger's: their jobs keep the allocations they have
        if "stage_allocations" in staged:
            con.execute(
                """DELETE FROM stage_allocations WHERE job_id IN (SELECT job_id FROM older_job_records)
                     AND job_id NOT IN (SELECT job_id FROM stage_jobs)"""
            )
        if older := _count(con, "SELECT count(*) FROM older_job_records"):
            rows["jobs_older"] = older  # a note of the report (SAMPLE_NOTES), not rows written
        con.execute("DROP TABLE temp.older_job_records")
    if "stage_allocations" in staged:
        con.execute("DELETE FROM allocations WHERE job_id IN (SELECT DISTINCT job_id FROM stage_allocations)")
        exprs = _insert_from_stage(con, "allocations", ingest_id, {"gpu_count": "1"})
        con.execute(f"INSERT INTO allocations SELECT {', '.join(exprs)} FROM stage_allocations s")
        rows["allocations"] = _count(con, "SELECT count(*) FROM stage_allocations")
    if "stage_training_runs" in staged:
        con.execute("DELETE FROM training_runs WHERE job_id IN (SELECT job_id FROM stage_training_runs)")
        exprs = _insert_from_stage(con, "training_runs", ingest_id, {"source": "'unknown'"})
        con.execute(f"INSERT INTO training_runs SELECT {', '.join(exprs)} FROM stage_training_runs s")
        rows["training_runs"] = _count(con, "SELECT count(*) FROM stage_training_runs")
    if "stage_train_log" in staged:
        con.execute("DELETE FROM train_log WHERE job_id IN (SELECT DISTINCT job_id FROM stage_train_log)")
        exprs = _insert_from_stage(con, "train_log", ingest_id)
        con.execute(f"INSERT INTO train_log SELECT {', '.join(exprs)} FROM stage_train_log s")
        rows["train_log"] = _count(con, "SELECT count(*) FROM stage_train_log")
    if "stage_prices" in staged:
        # A source that declares its own price (an on-prem amortized rate) brings dated rows like the sheet's;
        # they belong to this ingest (removed with it) and rank between the sheet and the user's settings.
        exprs = _insert_from_stage(con, "prices", ingest_id, {"origin": "'ingest'"})
        con.execute(f"INSERT INTO prices SELECT {', '.join(exprs)} FROM stage_prices s")
        rows["prices"] = _count(con, "SELECT count(*) FROM stage_prices")
    for table in ("processes", "gpu_events", "capacity"):
        if f"stage_{table}" in staged:
            exprs = _insert_from_stage(con, table, ingest_id)
            con.execute(f"INSERT INTO {table} SELECT {', '.join(exprs)} FROM stage_{table} s")
            rows[table] = _count(con, f"SELECT count(*) FROM stage_{table}")
    attribute_samples(con, ingest_id)
    from gpuledger.ledger.rollup import refresh_rollup

    refresh_rollup(
        con,
        ingest_id,
        idle_util_pct=opts.idle_util_pct,
        idle_min_minutes=opts.idle_min_minutes,
        target_util_pct=opts.target_util_pct,
    )
    _refresh_merged(con, opts)
    return rows


def _refresh_merged(con: duckdb.DuckDBPyConnection, opts: IngestOptions) -> None:
    """Re-roll the GPU-times whose ledger samples got values from this ingest's overlapping samples.

    Those rows keep their earlier ingest_id, so the ingest's own refresh window does not name them.
    """
    if not con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE temporary AND table_name = 'merged_windows'"
    ).fetchall()[0][0]:
        return
    from gpuledger.ledger.rollup import refresh_windows, thresholds

    refresh_windows(
        con,
        "SELECT * FROM merged_windows",
        [],
        thresholds(opts.idle_util_pct, opts.idle_min_minutes, opts.target_util_pct),
    )
    con.execute("DROP TABLE temp.merged_windows")


def _land_samples(con: duckdb.DuckDBPyConnection, ingest_id: int) -> dict[str, int]:
    """Insert the staged samples: one per (gpu_id, ts), interval_s derived; merge those already there.

    Cadence per GPU = median spacing in this batch; a sample stands for the time to the next one, capped at
    GAP_FACTOR × cadence (the last one, and one before a longer silence, get the cadence). Built for speed
    on tens of millions of rows: the window runs over a narrow (rowid, gpu_id, ts) projection joined back
    by rowid, and duplicates (a zero gap) are removed, and the gaps recomputed, only when there are some.

    A staged sample whose (gpu_id, ts) is already in the ledger is never a second row (that would double
    count its interval): it fills the ledger row's NULL columns instead (``coalesce(old, new)``, column by
    column; ``interval_s`` and ``ingest_id`` stay), so a second series for the same GPU and times — GenAI
    duty cycle then memory, or dcgm then nvidia-smi — adds its columns. Returns rows written
    (``samples``), staged samples that filled something (``samples_merged``, only when some did; their
    (gpu_id, min ts, max ts) left in TEMP ``merged_windows`` for the rollup) and the rest
    (``samples_duplicate``: exact repeats, samples with nothing to add, a (gpu_id, ts) twice in the batch).
    """
    staged_cols = set(_columns(con, "stage_samples", temp=True))
    if "interval_s" not in staged_cols:
        con.execute("ALTER TABLE stage_samples ADD COLUMN interval_s FLOAT")
    if "job_id" not in staged_cols:
        con.execute("ALTER TABLE stage_samples ADD COLUMN job_id VARCHAR")
    total, lo, hi, n_gpus = con.execute(
        "SELECT count(*), min(ts), max(ts), count(DISTINCT gpu_id) FROM stage_samples"
    ).fetchall()[0]
    # whole polls hold n_gpus rows each: any other count (a GPU missing from a poll) needs no check
    if total and total % n_gpus == 0 and _polls_in_order(con, n_gpus, total):
        return _land_polls(con, ingest_id, n_gpus, total, lo, hi)
    source = "stage_samples"
    gaps_sql = """CREATE OR REPLACE TEMP TABLE stage_gaps AS
        SELECT rowid AS rid, gpu_id, epoch(lead(ts) OVER (PARTITION BY gpu_id ORDER BY ts) - ts) AS gap_s
        FROM {source}"""
    con.execute(gaps_sql.format(source=source))
    if _count(con, "SELECT count(*) FROM stage_gaps WHERE gap_s = 0"):
        # a (gpu_id, ts) occurs twice: keep its first row in stage order, then space the rest again
        con.execute(
            """CREATE TEMP TABLE stage_samples_uniq AS SELECT * FROM stage_samples
               QUALIFY row_number() OVER (PARTITION BY gpu_id, ts ORDER BY rowid) = 1"""
        )
        source = "stage_samples_uniq"
        con.execute(gaps_sql.format(source=source))
    overlap, merged = _merge_overlap(con, source, lo, hi, ingest_id)
    # only samples not in the ledger are inserted; without overlap there is nothing to exclude
    fresh_only = "WHERE NOT EXISTS (SELECT 1 FROM stage_overlap v WHERE v.rid = sp.rowid)" if overlap else ""
    exprs = _insert_from_stage(con, "samples", ingest_id)
    if not overlap and _in_time_order(con, source):
        # already in time order (polls with a GPU missing from some, like the demo's exporter outage): the
        # intervals go into the stage and the rows land as they are, with no sort of every column (the
        # 28-day demo, 4.5 M samples: 6.2 s for the sorted INSERT). One UPDATE per LAND_CHUNK rows, so the
        # join's build side stays a chunk's (10 M rows in one UPDATE overran the writer's memory limit).
        con.execute(
            f"CREATE TEMP TABLE stage_cad AS SELECT gpu_id, {_CADENCE} AS cad_s FROM stage_gaps GROUP BY gpu_id"
        )
        first, last = con.execute(f"SELECT min(rowid), max(rowid) FROM {source}").fetchall()[0]
        for a in range(first, last + 1, LAND_CHUNK) if first is not None else ():  # no rows: nothing to time
            b = a + LAND_CHUNK
            con.execute(
                f"""UPDATE {source} SET interval_s =
                        {interval_sql("g.gap_s", "g.cad_s")}
                    FROM (SELECT g.rid, g.gap_s, c.cad_s FROM stage_gaps g JOIN stage_cad c ON c.gpu_id = g.gpu_id
                          WHERE g.rid >= {a} AND g.rid < {b}) g
                    WHERE g.rid = {source}.rowid AND {source}.rowid >= {a} AND {source}.rowid < {b}
                      AND {source}.interval_s IS NULL"""
            )
        written = _count(con, f"INSERT INTO samples SELECT {', '.join(exprs)} FROM {source} s")
        for t in ("stage_gaps", "stage_cad", "stage_samples_uniq"):
            con.execute(f"DROP TABLE IF EXISTS temp.{t}")
        return {"samples": written, "samples_duplicate": total - written}
    written = _count(
        con,
        f"""
        INSERT INTO samples
        WITH cadence AS (
            SELECT gpu_id, {_CADENCE} AS cad_s FROM stage_gaps GROUP BY gpu_id
        ),
        fresh AS (
            SELECT sp.* REPLACE (
                coalesce(sp.interval_s,
                         {interval_sql("g.gap_s", "c.cad_s")}) AS interval_s)
            FROM {source} sp JOIN stage_gaps g ON g.rid = sp.rowid JOIN cadence c ON c.gpu_id = g.gpu_id
            {fresh_only}
        )
        SELECT {", ".join(exprs)} FROM fresh s ORDER BY s.ts, s.gpu_id
        """,
    )
    for t in ("stage_gaps", "stage_samples_uniq", "stage_overlap"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    counts = {"samples": written, "samples_duplicate": total - written - merged}
    return counts | ({"samples_merged": merged} if merged else {})


def _in_time_order(con: duckdb.DuckDBPyConnection, table: str) -> bool:
    """Are the rows of ``table`` in time order as stored (one streaming pass, no sort)?"""
    return not _count(
        con, f"SELECT count(*) FILTER (ts < prev) FROM (SELECT ts, lag(ts) OVER () AS prev FROM {table})"
    )


def _polls_in_order(con: duckdb.DuckDBPyConnection, n_gpus: int, total: int) -> bool:
    """Is the stage a sequence of polls that each list the same ``n_gpus`` GPUs in the same order, in time
    order (what ``nvidia-smi -l``, a dcgm scrape loop or the demo write)? Then each sample's next sample of
    its GPU is the row ``n_gpus`` further on, and the gaps need no sort: one streaming pass over the stage
    (``lead(ts, n_gpus) OVER ()``) checks it and leaves TEMP ``stage_cadence`` (pos: the GPU's place in a
    poll, gpu_id, cad_s: the median gap) for :func:`_land_polls`. A GPU missing from a poll, a sample out
    of order or a (gpu_id, ts) twice answers False, and the general path sorts.

    The check groups by place in the poll (rowid % n_gpus, an integer) rather than by GPU id: each place
    must hold one GPU, every GPU one place, and the rowids must be ``total`` consecutive numbers (no row
    removed), so the row ``n_gpus`` on is the same GPU's next poll."""
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE stage_cadence AS
            SELECT pos, min(gpu_id) AS gpu_id, {_CADENCE} AS cad_s,
                   count(*) FILTER (gap_s <= 0) + (min(gpu_id) IS DISTINCT FROM max(gpu_id))::INTEGER AS off,
                   min(rid) AS first_rid, max(rid) AS last_rid
            FROM (SELECT rowid AS rid, rowid % {n_gpus} AS pos, gpu_id,
                         epoch(lead(ts, {n_gpus}) OVER () - ts) AS gap_s
                  FROM stage_samples)
            GROUP BY pos"""
    )
    off, places, gpus, span = con.execute(
        "SELECT coalesce(sum(off), 0), count(*), count(DISTINCT gpu_id), max(last_rid) - min(first_rid) + 1 "
        "FROM stage_cadence"
    ).fetchall()[0]
    if off or places != n_gpus or gpus != n_gpus or span != total:
        con.execute("DROP TABLE temp.stage_cadence")
        return False
    return True


def _land_polls(
    con: duckdb.DuckDBPyConnection, ingest_id: int, n_gpus: int, total: int, lo: object, hi: object
) -> dict[str, int]:
    """:func:`_land_samples` for a stage of whole polls in order (:func:`_polls_in_order`): the same
    interval_s, overlap and merge rules, in two streaming statements that keep the stage's (time) order."""
    overlap, merged = _merge_overlap(con, "stage_samples", lo, hi, ingest_id)
    fresh_only = "WHERE NOT EXISTS (SELECT 1 FROM stage_overlap v WHERE v.rid = s.rid)" if overlap else ""
    exprs = _insert_from_stage(con, "samples", ingest_id)
    # Only the columns that land pass through the window, which runs on one thread and copies every column
    # it is given (the stage's name, index and line number too, with ``sp.*``); the GPU id, one per place in
    # the poll, comes from stage_cadence (a join after the window keeps its order; before it, or in the
    # INSERT, a join would not).
    landed = [c for c in _columns(con, "samples") if c != "gpu_id"]
    carried = ", ".join(f"sp.{c}" for c in _columns(con, "stage_samples", temp=True) if c in landed)
    # The window (and the join after it) run on one thread; the landed rows are first written in that
    # order into a TEMP table in memory, then copied into the ledger by a plain scan, which DuckDB writes
    # on every thread and in order (a batch insert). 2 M rows: 1.17 s for the INSERT with the window in
    # it (most of it compressing the ledger's columns on one thread), 0.44 + 0.53 s so.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE stage_landing AS
        WITH seq AS (
            SELECT {carried}, sp.rowid AS rid, epoch(lead(sp.ts, {n_gpus}) OVER () - sp.ts) AS gap_s
            FROM stage_samples sp
        )
        SELECT s.* EXCLUDE (gap_s) REPLACE (
                   coalesce(s.interval_s,
                            {interval_sql("s.gap_s", "c.cad_s")}) AS interval_s),
               c.gpu_id
        FROM seq s JOIN stage_cadence c ON c.pos = s.rid % {n_gpus}
        """
    )
    written = _count(
        con,
        f"""
        INSERT INTO samples
        SELECT {", ".join(exprs)} FROM (SELECT * EXCLUDE (rid) FROM stage_landing s {fresh_only}) s
        """,
    )
    con.execute("DROP TABLE temp.stage_landing")
    if not overlap:
        # every staged row landed, in poll order: the rollup can read them back without a sort
        # (gpuledger/ledger/rollup.py _sequence_polls); dropped with the other stage_* tables
        con.execute(
            "CREATE OR REPLACE TEMP TABLE stage_landed_polls AS SELECT ?::BIGINT AS ingest_id, gpu_id FROM stage_cadence",
            [ingest_id],
        )
    for t in ("stage_cadence", "stage_overlap"):
        con.execute(f"DROP TABLE IF EXISTS temp.{t}")
    counts = {"samples": written, "samples_duplicate": total - written - merged}
    return counts | ({"samples_merged": merged} if merged else {})


def _merge_overlap(
    con: duckdb.DuckDBPyConnection, source: str, lo: object, hi: object, ingest_id: int
) -> tuple[int, int]:
    """Find staged samples already in the ledger and fill the ledger rows' NULLs from them.

    Leaves TEMP ``stage_overlap`` (rid: the staged row, fills: it adds a value) when there is any overlap,
    and ``merged_windows`` (gpu_id, lo, hi) when something was filled. Returns (overlapping, filling)
    sample counts. The join reads only ledger samples inside the batch's time span (zone maps skip the
    rest), so a batch of new times costs one empty probe.

    Each overlapping sample is held by this ingest too: one ``held_rows`` row (samples, gpu_id, ts,
    ingest_id), so that removing the ingest that owns the ledger row hands it to this one
    (:func:`delete_ingests`). A batch with no overlap writes none.
    """
    con.execute("DROP TABLE IF EXISTS temp.merged_windows")
    cols = set(_columns(con, source, temp=True))
    merge = [c for c in _columns(con, "samples") if c in cols and c not in MERGE_KEPT]
    fills = " OR ".join(f"(o.{c} IS NULL AND sp.{c} IS NOT NULL)" for c in merge) or "false"
    con.execute(
        f"""CREATE TEMP TABLE stage_overlap AS
            SELECT sp.rowid AS rid, sp.gpu_id, sp.ts, ({fills}) AS fills
            FROM {source} sp JOIN samples o ON o.gpu_id = sp.gpu_id AND o.ts = sp.ts
            WHERE o.ts BETWEEN ?::TIMESTAMP AND ?::TIMESTAMP""",
        [lo, hi],
    )
    overlap, merged = con.execute("SELECT count(*), count(*) FILTER (fills) FROM stage_overlap").fetchall()[0]
    if overlap:
        con.execute(
            "INSERT INTO held_rows SELECT 'samples', gpu_id, ts, ?::BIGINT FROM stage_overlap", [ingest_id]
        )
    if merged:
        sets = ", ".join(f"{c} = coalesce(samples.{c}, n.{c})" for c in merge)
        con.execute(
            f"""UPDATE samples SET {sets}
                FROM (SELECT sp.* FROM {source} sp JOIN stage_overlap v ON v.rid = sp.rowid WHERE v.fills) n
                WHERE samples.gpu_id = n.gpu_id AND samples.ts = n.ts
                  AND samples.ts BETWEEN ?::TIMESTAMP AND ?::TIMESTAMP""",
            [lo, hi],
        )
        con.execute(
            """CREATE TEMP TABLE merged_windows AS
               SELECT gpu_id, min(ts) AS lo, max(ts) AS hi FROM stage_overlap WHERE fills GROUP BY gpu_id"""
        )
    return int(overlap), int(merged)


def _land_gpus(con: duckdb.DuckDBPyConnection, staged: set[str]) -> int:
    before = _count(con, "SELECT count(*) FROM gpus")
    if "stage_gpus" in staged:
        cols = set(_columns(con, "stage_gpus", temp=True))
        target = _columns(con, "gpus")
        sel = ", ".join(f"s.{c}" if c in cols else f"NULL::{_type(con, 'gpus', c)} AS {c}" for c in target)
        updates = ", ".join(
            f"{c} = coalesce(excluded.{c}, gpus.{c})"
            for c in target
            if c not in ("gpu_id", "first_seen", "last_seen")
        )
        con.execute(
            f"""
            INSERT INTO gpus SELECT {sel} FROM (SELECT * FROM stage_gpus QUALIFY row_number() OVER (PARTITION BY gpu_id) = 1) s
            ON CONFLICT (gpu_id) DO UPDATE SET {updates},
                first_seen = least(excluded.first_seen, gpus.first_seen),
                last_seen = greatest(excluded.last_seen, gpus.last_seen)
            """
        )
    if "stage_samples" in staged:
        con.execute(
            """
            INSERT INTO gpus (gpu_id, first_seen, last_seen)
            SELECT gpu_id, min(ts), max(ts) FROM stage_samples GROUP BY gpu_id
            ON CONFLICT (gpu_id) DO UPDATE SET
                first_seen = least(excluded.first_seen, coalesce(gpus.first_seen, excluded.first_seen)),
                last_seen = greatest(excluded.last_seen, coalesce(gpus.last_seen, excluded.last_seen))
            """
        )
    return _count(con, "SELECT count(*) FROM gpus") - before


def _type(con: duckdb.DuckDBPyConnection, table: str, column: str) -> str:
    """The SQL type of a ledger table's column, as DuckDB spells it (``TIMESTAMP``, ``DOUBLE``)."""
    rel = con.table(f"main.{table}")
    return str(dict(zip(rel.columns, rel.types, strict=True))[column])


def _land_jobs(con: duckdb.DuckDBPyConnection, ingest_id: int, opts: IngestOptions) -> int:
    defaults = {
        "source": "'unknown'",
        "kind": "'other'",
        "state": "'COMPLETED'",
        "gpu_count": "0",
        "pricing_tier": _tier_case(opts),
        "cluster": quote(opts.cluster) if opts.cluster else "NULL",
    }
    staged_cols = set(_columns(con, "stage_jobs", temp=True))
    if "cluster" not in staged_cols:
        con.execute("ALTER TABLE stage_jobs ADD COLUMN cluster VARCHAR")
        if opts.cluster:
            con.execute("UPDATE stage_jobs SET cluster = ?", [opts.cluster])
    unify_array_tasks(con)  # 301 and 300_1 are one array task (collectors/array_tasks.py)
    # An older scheduler record never undoes a newer one, whatever order the dumps are ingested in: a record
    # of a job still pending or running (an open state) that started no later than the ledger's record of the
    # same job ended (end_ts and a final state) is what the scheduler said before the job finished. It stays
    # out, and land() keeps the job's stored allocations with it (temp.older_job_records, counted in the
    # report). A record that starts after that end is a new attempt (a requeue) and replaces it as before.
    open_states = sql_list(OPEN_STATES)
    staged_cols = set(_columns(con, "stage_jobs", temp=True))

    def staged(col: str) -> str:
        return f"s.{col}" if col in staged_cols else f"NULL::{_type(con, 'jobs', col)}"

    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE older_job_records AS
            SELECT s.rowid AS rid, s.job_id FROM stage_jobs s JOIN jobs j ON j.job_id = s.job_id
            WHERE j.end_ts IS NOT NULL AND j.state NOT IN ({open_states}, 'UNKNOWN')
              AND coalesce({staged("state")}, {defaults["state"]}) IN ({open_states})
              AND coalesce({staged("start_ts")}, {staged("submit_ts")}, j.end_ts) <= j.end_ts"""
    )
    con.execute("DELETE FROM stage_jobs WHERE rowid IN (SELECT rid FROM older_job_records)")
    # Both records stay held: this ingest holds a job it sent an older record of, and the ingest whose record
    # a newer one replaces (below) still holds that job, so removing one of them never removes a job the
    # other still lists (delete_ingests hands it over). The row keeps the newest record's values.
    con.execute(
        """INSERT INTO held_rows SELECT DISTINCT 'jobs', job_id, NULL::TIMESTAMP, ?::BIGINT FROM older_job_records""",
        [ingest_id],
    )
    if "state" in staged_cols:
        # A pending job holds no GPU, whatever start its source shows (sacct prints the time the scheduler
        # expects it to start): it lands with no start or end and no allocation, so it costs nothing.
        pending = f"SELECT job_id FROM stage_jobs WHERE state = '{PENDING}'"
        times = [c for c in ("start_ts", "end_ts") if c in staged_cols]
        if times:
            con.execute(
                f"UPDATE stage_jobs SET {', '.join(f'{c} = NULL' for c in times)} WHERE state = '{PENDING}'"
            )
        if "stage_allocations" in _temp_tables(con):
            con.execute(f"DELETE FROM stage_allocations WHERE job_id IN ({pending})")
        con.execute(f"DELETE FROM allocations WHERE job_id IN ({pending})")
    # A newer record of a job that names no checkpoint (the next sacct export or Slurm poll) keeps the one
    # the ledger has (from a jobs table, or placed from a training log, collectors/checkpoints.py): a scheduler
    # never says "no checkpoint", it just does not know. A --replace of that record's own ingest has already
    # removed its row, so nothing is carried from a record that is being withdrawn.
    con.execute(
        """CREATE OR REPLACE TEMP TABLE kept_checkpoints AS
           SELECT job_id, last_checkpoint_ts FROM jobs
           WHERE last_checkpoint_ts IS NOT NULL AND job_id IN (SELECT job_id FROM stage_jobs)"""
    )
    exprs = _insert_from_stage(con, "jobs", ingest_id, defaults)
    con.execute(
        """INSERT INTO held_rows
           SELECT DISTINCT 'jobs', j.job_id, NULL::TIMESTAMP, j.ingest_id FROM jobs j
           WHERE j.job_id IN (SELECT job_id FROM stage_jobs) AND j.ingest_id <> ?
             AND NOT EXISTS (SELECT 1 FROM held_rows h
                             WHERE h.table_name = 'jobs' AND h.row_key = j.job_id AND h.ingest_id = j.ingest_id)""",
        [ingest_id],
    )
    con.execute("DELETE FROM jobs WHERE job_id IN (SELECT job_id FROM stage_jobs)")
    con.execute(
        f"""INSERT INTO jobs SELECT {", ".join(exprs)}
            FROM (SELECT * FROM stage_jobs QUALIFY row_number() OVER (PARTITION BY job_id ORDER BY end_ts DESC NULLS FIRST) = 1) s"""
    )
    con.execute(
        """UPDATE jobs SET last_checkpoint_ts = k.last_checkpoint_ts FROM kept_checkpoints k
           WHERE jobs.job_id = k.job_id AND jobs.ingest_id = ? AND jobs.last_checkpoint_ts IS NULL""",
        [ingest_id],
    )
    con.execute("DROP TABLE temp.kept_checkpoints")
    return _count(con, "SELECT count(*) FROM jobs WHERE ingest_id = ?", [ingest_id])


SAMPLE_NOTES = {
    "samples_merged": "samples merged into existing rows (their empty columns filled)",
    "samples_duplicate": "samples already in the ledger",
    "samples_interleaved": "samples inside the time of another series of the same GPU (counted once)",
    "jobs_older": "older records of jobs that have finished since (pending or running here; kept the finished record)",
}


def split_sample_notes(rows: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """Split :func:`land`'s counts into rows written and the notes about samples it did not add as rows."""
    written = {k: v for k, v in rows.items() if k not in SAMPLE_NOTES}
    notes = {SAMPLE_NOTES[k]: v for k, v in rows.items() if k in SAMPLE_NOTES and v}
    return written, notes


def attribute_samples(con: duckdb.DuckDBPyConnection, ingest_id: int) -> None:
    """Stamp each sample with the job that held its GPU at that time: collectors/attribute.py."""
    from collectors.attribute import attribute_samples as attribute

    attribute(con, ingest_id)


def delete_ingests(
    con: duckdb.DuckDBPyConnection,
    ingest_ids: list[int],
    *,
    idle_util_pct: float,
    idle_min_minutes: float = 30.0,
    target_util_pct: float = 60.0,
) -> None:
    """Remove everything these ingests brought in that no other ingest holds, and re-roll the GPU-minutes
    their removed samples touched.

    A row another ingest also holds (``held_rows``: a sample it found already in the ledger, a job it sent a
    record of) is not removed: it is handed to the latest such ingest, with the values it has, and a job's
    allocations and training rows from the same record go with it. A checkpoint a removed training log placed
    on a job is taken back (collectors/checkpoints.py :func:`~collectors.checkpoints.withdraw`)."""
    if not ingest_ids:
        return
    from gpuledger.ledger.rollup import refresh_windows, thresholds

    placeholders = ", ".join("?" for _ in ingest_ids)
    withdraw(con, ingest_ids)
    _hand_over(con, ingest_ids)
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE replaced_windows AS
            SELECT gpu_id, min(ts) AS lo,
                   max({reach_sql("ts", "interval_s::DOUBLE")}) AS hi
            FROM samples WHERE ingest_id IN ({placeholders}) GROUP BY gpu_id""",
        ingest_ids,
    )
    for table in INGESTED_TABLES:
        con.execute(f"DELETE FROM {table} WHERE ingest_id IN ({placeholders})", ingest_ids)
    con.execute(f"DELETE FROM ingests WHERE ingest_id IN ({placeholders})", ingest_ids)
    # hi reaches past the last removed sample: the sample after it lost its predecessor (pairs, idle runs)
    refresh_windows(
        con,
        "SELECT * FROM replaced_windows",
        [],
        thresholds(idle_util_pct, idle_min_minutes, target_util_pct),
    )
    con.execute("DROP TABLE IF EXISTS temp.replaced_windows")


# Rows of a job's record besides the jobs row itself (land() replaces them with the job's newer record):
# handed over with the job.
JOB_RECORD_TABLES = ("allocations", "training_runs", "train_log")


def _hand_over(con: duckdb.DuckDBPyConnection, ingest_ids: list[int]) -> None:
    """Give each row these ingests own that a surviving ingest also holds to the latest such ingest (its
    ``ingest_id`` changes, nothing else), and drop that ingest's ``held_rows`` row: it owns the row now.
    Costs one probe of ``held_rows`` when no other ingest holds anything."""
    con.execute(
        "CREATE OR REPLACE TEMP TABLE removed_ingests AS SELECT unnest(?::BIGINT[]) AS ingest_id",
        [ingest_ids],
    )
    others = "h.ingest_id NOT IN (SELECT ingest_id FROM removed_ingests)"
    removed = "IN (SELECT ingest_id FROM removed_ingests)"
    if not con.execute(f"SELECT EXISTS (SELECT 1 FROM held_rows h WHERE {others})").fetchall()[0][0]:
        con.execute("DROP TABLE temp.removed_ingests")
        return
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE handed_samples AS
            SELECT h.row_key AS gpu_id, h.ts, max(h.ingest_id) AS to_id
            FROM held_rows h JOIN samples s ON s.gpu_id = h.row_key AND s.ts = h.ts
            WHERE h.table_name = 'samples' AND {others} AND s.ingest_id {removed}
            GROUP BY h.row_key, h.ts"""
    )
    lo, hi = con.execute("SELECT min(ts), max(ts) FROM handed_samples").fetchall()[0]
    if lo is not None:
        con.execute(
            f"""UPDATE samples SET ingest_id = t.to_id FROM handed_samples t
                WHERE samples.gpu_id = t.gpu_id AND samples.ts = t.ts AND samples.ingest_id {removed}
                  AND samples.ts BETWEEN ?::TIMESTAMP AND ?::TIMESTAMP""",
            [lo, hi],
        )
        con.execute(
            """DELETE FROM held_rows h USING handed_samples t
               WHERE h.table_name = 'samples' AND h.row_key = t.gpu_id AND h.ts = t.ts AND h.ingest_id = t.to_id"""
        )
    con.execute(
        f"""CREATE OR REPLACE TEMP TABLE handed_jobs AS
            SELECT j.job_id, j.ingest_id AS from_id, max(h.ingest_id) AS to_id
            FROM jobs j JOIN held_rows h ON h.table_name = 'jobs' AND h.row_key = j.job_id
            WHERE {others} AND j.ingest_id {removed}
            GROUP BY j.job_id, j.ingest_id"""
    )
    for table in ("jobs", *JOB_RECORD_TABLES):
        con.execute(
            f"""UPDATE {table} SET ingest_id = t.to_id FROM handed_jobs t
                WHERE {table}.job_id = t.job_id AND {table}.ingest_id = t.from_id"""
        )
    con.execute(
        """DELETE FROM held_rows h USING handed_jobs t
           WHERE h.table_name = 'jobs' AND h.row_key = t.job_id AND h.ingest_id = t.to_id"""
    )
    for t in ("removed_ingests", "handed_samples", "handed_jobs"):
        con.execute(f"DROP TABLE temp.{t}")


def withdraw_source(con: duckdb.DuckDBPyConnection, key: str, opts: IngestOptions) -> list[int]:
    """What ``--replace`` removes before the source ``key`` lands again: the ingests that only this source
    holds. Returns their ids.

    An ingest whose bytes another source also holds (``ingest_sources``: that file was reported as already
    ingested) stays, now that source's (its ``path`` and ``source_key``); a record that this source held
    another ingest's bytes is dropped. An ingest with the same bytes under another key is that source's and
    stays: the file lands again beside it, its rows already in the ledger held by both."""
    con.execute("DELETE FROM ingest_sources WHERE source_key = ?", [key])
    earlier = [
        int(r[0]) for r in con.execute("SELECT ingest_id FROM ingests WHERE source_key = ?", [key]).fetchall()
    ]
    kept = con.execute(
        """SELECT ingest_id, arg_min(path, seen_at), arg_min(source_key, seen_at) FROM ingest_sources
           WHERE ingest_id IN (SELECT unnest(?::BIGINT[])) GROUP BY ingest_id""",
        [earlier],
    ).fetchall()
    for ingest_id, path, source_key in kept:
        con.execute(
            "UPDATE ingests SET path = ?, source_key = ? WHERE ingest_id = ?", [path, source_key, ingest_id]
        )
        con.execute(
            "DELETE FROM ingest_sources WHERE ingest_id = ? AND source_key = ?", [ingest_id, source_key]
        )
    removed = [i for i in earlier if i not in {int(k[0]) for k in kept}]
    delete_ingests(
        con,
        removed,
        idle_util_pct=opts.idle_util_pct,
        idle_min_minutes=opts.idle_min_minutes,
        target_util_pct=opts.target_util_pct,
    )
    return removed


def record_source(con: duckdb.DuckDBPyConnection, ingest_id: int, path: str, key: str) -> None:
    """Record that the file ``path`` (source ``key``) holds the bytes of ingest ``ingest_id`` (it was
    reported as already ingested), unless that source holds them already; see :func:`withdraw_source`.
    Runs in the caller's transaction, or on its own."""
    con.execute(
        """INSERT INTO ingest_sources
           SELECT $id, $path, $key, $now
           WHERE NOT EXISTS (SELECT 1 FROM ingests WHERE source_key = $key
                               AND content_sha256 = (SELECT content_sha256 FROM ingests WHERE ingest_id = $id))
             AND NOT EXISTS (SELECT 1 FROM ingest_sources WHERE ingest_id = $id AND source_key = $key)""",
        {"id": ingest_id, "path": path, "key": key, "now": dt.datetime.now(dt.UTC).replace(tzinfo=None)},
    )


def record_ingest(
    con: duckdb.DuckDBPyConnection,
    ingest_id: int,
    *,
    path: str,
    source_key: str,
    sha256: str,
    fmt: str,
    rows: dict[str, int],
    skipped: dict[str, int],
) -> None:
    """Record the ingest's provenance (after :func:`land`, in its transaction), and drop what it makes
    redundant in ``held_rows`` (:func:`_prune_held`)."""
    con.execute(
        "INSERT INTO ingests VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            ingest_id,
            path,
            source_key,
            sha256,
            fmt,
            json.dumps(rows, sort_keys=True),
            json.dumps(skipped, sort_keys=True),
            dt.datetime.now(dt.UTC).replace(tzinfo=None),
        ],
    )
    _prune_held(con, ingest_id, source_key)


def _prune_held(con: duckdb.DuckDBPyConnection, ingest_id: int, source_key: str) -> None:
    """One holder per source is enough: an earlier ingest of the same source key no longer holds the rows
    this one holds or owns. ``--replace`` removes a source's ingests together, so its claim added nothing,
    and without this a log re-ingested as it grows (or a Slurm poll re-sending its running jobs) would add
    a ``held_rows`` row per sample (job) at every run. An ingest another file holds the bytes of
    (``ingest_sources``) keeps its claims: ``--replace`` of the key leaves it to that file. Costs one probe
    when no earlier ingest of the source holds anything (a new file, a collector's flushes)."""
    earlier = """SELECT ingest_id FROM ingests WHERE source_key = $key AND ingest_id <> $id
                   AND ingest_id NOT IN (SELECT ingest_id FROM ingest_sources)"""
    params = {"key": source_key, "id": ingest_id}
    if not con.execute(
        f"SELECT EXISTS (SELECT 1 FROM held_rows WHERE ingest_id IN ({earlier}))", params
    ).fetchall()[0][0]:
        return
    con.execute(
        f"""DELETE FROM held_rows WHERE table_name = 'jobs' AND ingest_id IN ({earlier})
              AND (row_key IN (SELECT job_id FROM jobs WHERE ingest_id = $id)
                   OR row_key IN (SELECT row_key FROM held_rows WHERE table_name = 'jobs' AND ingest_id = $id))""",
        params,
    )
    con.execute(
        f"""DELETE FROM held_rows h WHERE h.table_name = 'samples' AND h.ingest_id IN ({earlier})
              AND EXISTS (SELECT 1 FROM held_rows c WHERE c.ingest_id = $id AND c.table_name = 'samples'
                            AND c.row_key = h.row_key AND c.ts = h.ts)""",
        params,
    )


def next_ingest_id(con: duckdb.DuckDBPyConnection) -> int:
    return int(con.execute("SELECT nextval('ingest_seq')").fetchall()[0][0])


def run_in_transaction(con: duckdb.DuckDBPyConnection, work: Callable[[], IngestReport]) -> IngestReport:
    con.execute("BEGIN TRANSACTION")
    try:
        report = work()
        con.execute("COMMIT")
        return report
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        drop_stage(con)
