"""Weights & Biases run files: ``wandb-events.jsonl`` system metrics → ``samples``; ``wandb-metadata.json`` → the
run's job and its GPUs.

- GPU keys come as ``system.gpu.0.gpu`` (legacy SDK files) or ``system/gpu.0.gpu`` (current API exports); each
  GPU index becomes ``gpu_id = wandb:<host>:<i>`` (host from ``wandb-metadata.json`` beside the file, else the
  run directory's name). ``i`` is CUDA's number among the devices the run could see, not the host's index, so
  such a GPU is a second view of one of the host's cards: once the host's own telemetry is in the ledger it
  adds no card and no evidence of which card the job had (collectors/attribute.py, "W&B series"). Per-GPU
  keys: ``gpu`` → util_pct, ``memory`` → mem_util_pct (memory controller busy, like nvidia-smi
  utilization.memory), ``memoryAllocatedBytes`` → mem_used_mib, ``temp`` → temp_c, ``powerWatts`` →
  power_w, ``smClock`` → sm_clock_mhz. ``memoryAllocated`` (a % of the card) is not stored: without the
  card's size it is not MiB. ``_timestamp`` (epoch seconds) is the time.
- the run is the job ``wandb:<run>`` (run = directory name; ``files/`` is skipped) unless ``--job`` names
  one; samples carry that job id. Without ``--job`` the job row has kind ``training``, the metadata's GPU
  model and count (else the number of GPU indices seen), user, project and name, and spans ``startedAt`` to
  ``heartbeatAt`` (else the first to the last sample).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import duckdb

from collectors.attribute import VIEW_PREFIX
from collectors.base import IngestOptions, Sniff, quote
from collectors.json_lines import json_lines
from collectors.lines import file_lines
from collectors.row_checks import Check, first_violation
from collectors.sql_text import epoch_ts, sql_path
from collectors.training_logs import _duckdb_failure
from collectors.validate import MAX_GPU_COUNT, name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.job_states import WANDB_STATES, mapped_state_sql
from gpuledger.ledger.reference import normalize_model

METRICS = {
    "gpu": "util_pct",
    "memory": "mem_util_pct",
    "temp": "temp_c",
    "powerWatts": "power_w",
    "smClock": "sm_clock_mhz",
}


def run_dir(path: Path) -> Path:
    return path.parent.parent if path.parent.name == "files" else path.parent


def metadata_path(path: Path, *, own: bool = False) -> Path:
    """The metadata file for ``path``: the file itself when it is one (``own``: recognised by its content,
    so a copy saved as ``wandb-metadata (1).json`` is read too), else ``wandb-metadata.json`` beside it."""
    return path if own or path.name == "wandb-metadata.json" else path.with_name("wandb-metadata.json")


def read_metadata(path: Path, *, own: bool = False) -> dict[str, object]:
    meta = metadata_path(path, own=own)
    if not meta.is_file():
        return {}
    try:
        data = json.loads(meta.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise FormatError(
            meta, exc.lineno if hasattr(exc, "lineno") else None, f"not valid JSON: {exc}"
        ) from None
    if not isinstance(data, dict):
        raise FormatError(meta, 1, "not a W&B metadata object")
    return data


def gpu_count_of(path: Path, meta: dict[str, object], *, own: bool = False) -> float | None:
    """The metadata's ``gpu_count``, checked before any work: an absurd count (``1000000000``) would
    otherwise stage a GPU row per count (minutes, gigabytes)."""
    count = meta.get("gpu_count")
    if count is None:
        return None
    meta_path = metadata_path(path, own=own)
    if isinstance(count, bool) or not isinstance(count, int | float):
        raise FormatError(
            meta_path, _key_line(meta_path, "gpu_count"), f'"gpu_count" is not a number: {count!r}'
        )
    if not 0 <= count <= MAX_GPU_COUNT:  # also NaN, ±inf (json reads 1e999 as inf)
        raise FormatError(
            meta_path,
            _key_line(meta_path, "gpu_count"),
            f'"gpu_count" is {count:g}, outside 0 … {MAX_GPU_COUNT:,} (no fleet has more GPUs)',
        )
    return float(count)


def _key_line(path: Path, key: str) -> int | None:
    """The line of a JSON file where ``"key"`` first appears (for messages)."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            for i, line in enumerate(fh, start=1):
                if f'"{key}"' in line:
                    return i
    except OSError:
        return None
    return None


def _host(path: Path, meta: dict[str, object]) -> str:
    return str(meta.get("host") or run_dir(path).name)


def _meta_time(meta_path: Path, meta: dict[str, object], key: str) -> dt.datetime | None:
    """``startedAt``/``heartbeatAt`` as naive UTC. Legacy SDKs write naive UTC (``2020-02-19T00:08:41.123456``),
    current ones end it with Z (``2025-07-17T11:27:27.220480Z``); an offset is honoured. A value that is
    no time is an error naming the file: left out, the job would silently lose its start."""
    value = meta.get(key)
    if value is None or value == "":
        return None
    if isinstance(value, str):
        try:
            t = dt.datetime.fromisoformat(value.strip())
            return t.astimezone(dt.UTC).replace(tzinfo=None) if t.tzinfo else t
        except (ValueError, OverflowError):  # OverflowError: an offset past year 1 or 9999
            pass
    raise FormatError(meta_path, _key_line(meta_path, key), f'"{key}" is not a time: {value!r}')


def _stage_job(
    con: duckdb.DuckDBPyConnection,
    job_id: str,
    meta_path: Path,
    meta: dict[str, object],
    gpus_seen: int,
    span_sql: str,
) -> None:
    model_raw = meta.get("gpu")
    count = meta.get("gpu_count")
    started, heartbeat = _meta_time(meta_path, meta, "startedAt"), _meta_time(meta_path, meta, "heartbeatAt")
    con.execute(
        f"""CREATE TEMP TABLE stage_jobs AS
            SELECT ? AS job_id, 'wandb' AS source, 'training' AS kind, ? AS user_name, ? AS project, ? AS name,
                   coalesce(?, ?) AS gpu_model, ?::DOUBLE AS gpu_count,
                   coalesce(?::TIMESTAMP, lo) AS start_ts, coalesce(?::TIMESTAMP, hi) AS end_ts,
                   {mapped_state_sql("?", WANDB_STATES, "'UNKNOWN'")} AS state
            FROM ({span_sql})""",
        [
            job_id,
            meta.get("username"),
            meta.get("project"),
            meta.get("name"),
            normalize_model(str(model_raw)) if model_raw else None,
            model_raw,
            float(count) if isinstance(count, int | float) else float(gpus_seen),
            started,
            heartbeat,
            meta.get("state"),
        ],
    )


class WandbEvents:
    name = "wandb_events"
    description = "W&B wandb-events.jsonl system metrics (system.gpu.N.* or system/gpu.N.* keys)"

    def sniff(self, path: Path, head: str) -> Sniff:
        first = head.lstrip("\ufeff").lstrip().split("\n", 1)[0]
        if first.startswith("{") and ('"system.gpu.' in first or '"system/gpu.' in first):
            return Sniff(0.95)
        if first.startswith("{") and '"_wandb"' in first and '"system.' in first:
            return Sniff(0.6, "wandb_events: no GPU keys (system.gpu.N.*)")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        src = sql_path(path)[1:-1]
        try:
            con.execute(
                f"""CREATE TEMP TABLE wb_raw AS SELECT row_number() OVER () AS line_no, json AS e
                    FROM read_json_objects('{src}', format='newline_delimited')"""
            )
        except duckdb.Error as exc:
            raise _duckdb_failure(path, exc, "JSON Lines") from None
        file_lines(path, csv=False).renumber(con, "wb_raw")
        first_violation(
            con,
            path,
            "wb_raw",
            [
                Check(
                    "TRY_CAST(json_extract_string(e, '$._timestamp') AS DOUBLE) IS NULL",
                    'no numeric "_timestamp": "{value}"',
                    "json_extract_string(e, '$._timestamp')",
                )
            ],
        )
        meta = read_metadata(path)
        gpu_count_of(path, meta)
        host = _host(path, meta)
        job_id = opts.job_id or f"wandb:{run_dir(path).name}"
        pivots = ", ".join(
            f"max(CASE WHEN metric = {quote(k)} THEN v END) AS {col}" for k, col in METRICS.items()
        )
        con.execute(
            f"""
            CREATE TEMP TABLE wb_long AS
            SELECT line_no, {epoch_ts("TRY_CAST(json_extract_string(e, '$._timestamp') AS DOUBLE)")} AS ts,
                   TRY_CAST(regexp_extract(k, '^system[./]gpu\\.(\\d+)\\.', 1) AS INTEGER) AS gpu_index,
                   regexp_extract(k, '^system[./]gpu\\.\\d+\\.(.+)$', 1) AS metric,
                   TRY_CAST(json_extract_string(e, '$."' || k || '"') AS DOUBLE) AS v
            FROM (SELECT line_no, e, unnest(json_keys(e)) AS k FROM wb_raw)
            WHERE regexp_matches(k, '^system[./]gpu\\.\\d+\\.')
            """
        )
        con.execute(
            f"""
            CREATE TEMP TABLE stage_samples AS
            SELECT ts, {quote(VIEW_PREFIX)} || {quote(host)} || ':' || gpu_index AS gpu_id, {pivots},
                   max(CASE WHEN metric = 'memoryAllocatedBytes' THEN v / 1048576 END) AS mem_used_mib,
                   {quote(job_id)} AS job_id, min(line_no) AS line_no
            FROM wb_long GROUP BY ts, gpu_index ORDER BY ts, gpu_index
            """
        )
        name_columns(
            con,
            "samples",
            {col: f"system.gpu.N.{k}" for k, col in METRICS.items()}
            | {"mem_used_mib": "system.gpu.N.memoryAllocatedBytes", "ts": "_timestamp"},
        )
        con.execute(
            f"""CREATE TEMP TABLE stage_gpus AS
                SELECT DISTINCT {quote(VIEW_PREFIX)} || {quote(host)} || ':' || gpu_index AS gpu_id,
                       {quote(host)} AS host, gpu_index, ? AS model, ? AS model_raw
                FROM wb_long""",
            [normalize_model(str(meta["gpu"])) if meta.get("gpu") else None, meta.get("gpu")],
        )
        no_gpu = con.execute(
            "SELECT count(*) FROM wb_raw WHERE line_no NOT IN (SELECT line_no FROM wb_long)"
        ).fetchall()[0][0]
        if not opts.job_id:
            seen = con.execute("SELECT count(DISTINCT gpu_index) FROM wb_long").fetchall()[0][0]
            span = "SELECT min(ts) AS lo, max(ts) AS hi FROM stage_samples"
            _stage_job(con, job_id, metadata_path(path), meta, int(seen), span)
        con.execute("DROP TABLE temp.wb_long")
        con.execute("DROP TABLE temp.wb_raw")
        return {"lines without GPU metrics": int(no_gpu)} if no_gpu else {}


class WandbMetadata:
    name = "wandb_metadata"
    description = "W&B wandb-metadata.json (host, GPU model and count, startedAt)"

    def sniff(self, path: Path, head: str) -> Sniff:
        text = head.lstrip("\ufeff").lstrip()
        if text.startswith("{") and '"startedAt"' in text and ('"gpu"' in text or '"host"' in text):
            return Sniff(0.9)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        meta = read_metadata(path, own=True)
        if not meta.get("startedAt"):
            raise FormatError(path, None, 'no "startedAt": not a W&B wandb-metadata.json')
        host = _host(path, meta)
        count = gpu_count_of(path, meta, own=True)
        n = int(count) if count is not None else 0
        model_raw = meta.get("gpu")
        con.execute(
            """CREATE TEMP TABLE stage_gpus AS
               SELECT ? || ? || ':' || i AS gpu_id, ? AS host, i::INTEGER AS gpu_index, ? AS model,
                      ? AS model_raw FROM range(?) t(i)""",
            [VIEW_PREFIX, host, host, normalize_model(str(model_raw)) if model_raw else None, model_raw, n],
        )
        if not opts.job_id:
            _stage_job(
                con,
                f"wandb:{run_dir(path).name}",
                metadata_path(path, own=True),
                meta,
                n,
                "SELECT NULL::TIMESTAMP AS lo, NULL::TIMESTAMP AS hi",
            )
            # the job's times and count come from this file's keys: their lines, for the messages
            found = json_lines(path, "")
            keys = found.keys if found else {}
            con.execute(
                """CREATE OR REPLACE TEMP TABLE stage_jobs AS
                   SELECT *, ?::BIGINT AS line_no__start_ts, ?::BIGINT AS line_no__end_ts,
                          ?::BIGINT AS line_no__gpu_count FROM stage_jobs""",
                [keys.get("startedAt"), keys.get("heartbeatAt"), keys.get("gpu_count")],
            )
            name_columns(con, "jobs", {"start_ts": "startedAt", "end_ts": "heartbeatAt"})
        return {}
