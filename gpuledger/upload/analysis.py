"""One uploaded file, analysed on its own: an in-memory ledger, the CLI's ingest, the Overview's analyses.

The fleet's ledger is never touched. The copy keeps the uploaded name (parsers sniff by it too). A file the
ingest refuses gives the CLI's ``FILE:LINE: reason`` with the uploaded name instead of the copy's path.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import polars as pl

from analytics.filters import Filters
from analytics.jobs import jobs_table
from analytics.query import frame
from analytics.recommend import recommendations
from analytics.summary import summary
from analytics.timeline import gpu_groups, gpu_timeline, group_sizes, group_timeline, view_groups
from analytics.unit_costs import job_unit_costs
from collectors.base import IngestOptions
from collectors.gpu_facts import GpuFacts
from collectors.ingest import ingest_file
from gpuledger.ledger.db import memory_ledger
from gpuledger.ledger.errors import FormatError, LedgerError
from gpuledger.ledger.filenames import inside
from gpuledger.ledger.reference import sync_reference_in
from gpuledger.ledger.settings import Settings
from gpuledger.upload.naming import RunIdentity, run_identity

LINES_PAST = (
    60  # more GPUs (or hosts) than this: one line per host, the rest pooled (pages/_data.FLEET_GROUP_PAST)
)
LOG_POINTS = 5000  # a training log longer than this is drawn from every k-th entry (the last one kept)


@dataclass(frozen=True)
class UploadResult:
    """What the Upload page shows for one file: the ingest report and the analyses, or the error sentence
    (with ``what_next``: what to do about it, when the page's own advice for a bad line does not fit)."""

    name: str
    error: str | None = None
    what_next: str | None = None
    ingest: dict[str, object] | None = None
    summary: dict[str, object] | None = None
    jobs: pl.DataFrame | None = None
    timeline: pl.DataFrame | None = None
    # past LINES_PAST GPUs on several hosts: one line per host, and each GPU's host (key)
    timeline_groups: pl.DataFrame | None = None
    gpu_groups: pl.DataFrame | None = None
    # a host of more than LINES_PAST GPUs: its GPUs' lines, pooled past that
    group_gpus: dict[str | None, pl.DataFrame] | None = None
    recommendations: pl.DataFrame | None = None
    needs_gpu: tuple[str, ...] = ()  # jobs (training logs) that name no GPU model or count: ask for them
    gpu_assumed: str | None = None  # what was assumed for them, in words (ingest --gpu-model)
    run: RunIdentity | None = None  # the run's name, model and output folder from inside the file
    train_log: pl.DataFrame | None = None  # the logged steps (loss, learning rate, time), at most LOG_POINTS
    training_runs: pl.DataFrame | None = None  # the runs' summaries (runtime, samples/s, total_flos, …)
    unit_costs: pl.DataFrame | None = None  # analytics.unit_costs.job_unit_costs ($/epoch, MFU and its basis)


def error_sentence(exc: LedgerError, tmp_path: str, name: str) -> str:
    """The CLI's ``FILE:LINE: reason`` with the uploaded file's own name instead of the temp copy's path."""
    if isinstance(exc, FormatError):
        return f"{name}:{exc.line}: {exc.reason}" if exc.line is not None else f"{name}: {exc.reason}"
    return str(exc).replace(tmp_path, name)


def limit_upload_memory(con: duckdb.DuckDBPyConnection, s: Settings, spill_dir: str) -> None:
    """Past ``dashboard.upload_memory_mb`` DuckDB spills into the upload's own temp folder (removed with it)
    or fails with an out-of-memory error, shown as a sentence."""
    con.execute(f"SET memory_limit = '{int(s.upload_memory_mb)}MB'")  # an int: nothing to inject
    con.execute("SET temp_directory = ?", [spill_dir])


def analyse_file(
    path: str, name: str, s: Settings, cluster: str | None, tz: str | None, gpu: GpuFacts | None
) -> UploadResult:
    """Ingest ``path`` (a copy of the upload named ``name``) into an in-memory ledger with the ingest options
    the page gave (``gpu``: ``--gpu-model``/``--gpu-count``) and run the Overview's analyses on it."""
    opts = IngestOptions.from_settings(s, cluster=cluster, tz=tz, gpu=gpu)
    run = run_identity(name, Path(path).read_bytes())
    path = named_copy(path, run)
    con = memory_ledger()
    try:
        limit_upload_memory(con, s, str(Path(path).parent))
        sync_reference_in(con, s)  # the settings' prices, catalog and rollup thresholds
        try:
            report = ingest_file(con, path, opts=opts)
        except LedgerError as exc:
            return UploadResult(name, error=error_sentence(exc, path, name))
        except duckdb.OutOfMemoryException:
            return UploadResult(
                name,
                error=f"{name}: reading it needs more than the upload's memory limit "
                f"({int(s.upload_memory_mb):,} MB, dashboard.upload_memory_mb in the settings)",
            )
        filters = Filters()
        return UploadResult(
            name,
            run=run,
            train_log=train_log(con),
            training_runs=frame(con, "SELECT * FROM training_runs ORDER BY job_id"),
            unit_costs=job_unit_costs(con, filters=filters),
            ingest=report.as_dict() | {"path": name},
            summary=summary(con, filters=filters, settings=s),
            jobs=jobs_table(con, filters=filters, settings=s),
            recommendations=recommendations(con, filters=filters, settings=s),
            needs_gpu=()
            if report.priced
            else tuple(j for j in report.unpriced if j not in report.held_no_gpu),
            gpu_assumed=report.priced,
            **timelines(con, filters),
        )
    finally:
        con.close()


def named_copy(path: str, run: RunIdentity) -> str:
    """The upload's copy moved into a folder named after its run (inside the same temp folder), so that a log
    with its tool's own file name gets the run's name as the ingest gives it: ``hf:<run>``."""
    src = Path(path)
    dst = inside(inside(src.parent.parent, run.folder, fallback="run"), src.name, fallback="upload")
    if dst != src:
        dst.parent.mkdir(exist_ok=True)
        src.rename(dst)
    return str(dst)


def train_log(con: duckdb.DuckDBPyConnection) -> pl.DataFrame:
    """The logged steps in order (job_id, step, epoch, ts, elapsed_s, loss, eval_loss, learning_rate,
    tokens_seen); past LOG_POINTS entries every k-th of each run and its last, enough to draw."""
    n = con.execute("SELECT count(*) FROM train_log").fetchall()[0][0]
    k = max(1, -(-n // LOG_POINTS))
    return frame(
        con,
        """SELECT job_id, step, epoch, ts, elapsed_s, loss, eval_loss, learning_rate, tokens_seen FROM (
               SELECT *, row_number() OVER (PARTITION BY job_id ORDER BY step, ts) AS i,
                      count(*) OVER (PARTITION BY job_id) AS n
               FROM train_log)
           WHERE (i - 1) % ? = 0 OR i = n OR eval_loss IS NOT NULL
           ORDER BY job_id, step, ts""",
        [k],
    )


def timelines(con: duckdb.DuckDBPyConnection, filters: Filters) -> dict[str, object]:
    """The Upload page's timelines, each computed once: per GPU (``timeline``) up to LINES_PAST GPUs, or when
    they all sit on one host (pooled past that: one line for the only host says nothing); else also per host
    (``timeline_groups``, at most LINES_PAST lines, the hosts with the most unused GPU-hours and one line for
    the rest), which host each GPU is on (``gpu_groups``, the drill-down), and the pooled GPU lines of each
    host of more GPUs than that (``group_gpus``)."""
    n = view_groups(con, filters=filters)
    if n["gpus"] <= LINES_PAST or n["hosts"] == 1:
        return {"timeline": gpu_timeline(con, filters=filters, max_gpus=LINES_PAST)}
    sizes = group_sizes(con, by="host", filters=filters)  # GPUs with telemetry in the view, per host
    big = sizes.filter(pl.col("gpus") > LINES_PAST)["key"].to_list()
    return {
        "timeline": gpu_timeline(con, filters=filters),
        "timeline_groups": group_timeline(con, by="host", filters=filters, max_groups=LINES_PAST),
        "gpu_groups": gpu_groups(con, by="host"),
        "group_gpus": {
            key: gpu_timeline(con, filters=filters, within=("host", key), max_gpus=LINES_PAST) for key in big
        },
    }
