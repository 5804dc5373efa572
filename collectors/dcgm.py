"""dcgm-exporter ``/metrics`` saved to a file (Prometheus text exposition), one or many scrapes.

``curl -s http://HOST:9400/metrics >> dcgm.prom`` (or a federate dump with sample timestamps) holds lines
``NAME{LABELS} VALUE [TIMESTAMP_MS]`` between ``# HELP`` / ``# TYPE`` / other comment lines. The whole file is
read by DuckDB (``read_text`` split into lines, ``regexp_extract`` per line), then pivoted long → wide, one
sample per (GPU, time), in SQL. :func:`stage_long` is shared with the Prometheus API JSON reader.

Metrics stored (current ``DCGM_FI_*`` names, lower-cased relabelled names, and legacy ``dcgm_*`` names):
GPU_UTIL → util_pct (else PROF_GR_ENGINE_ACTIVE × 100: MIG instances report no GPU_UTIL), MEM_COPY_UTIL →
mem_util_pct, FB_USED → mem_used_mib, FB_TOTAL (else FB_USED + FB_FREE) → mem_total_mib, POWER_USAGE →
power_w, TOTAL_ENERGY_CONSUMPTION (mJ) → energy_j, GPU_TEMP → temp_c, SM_CLOCK → sm_clock_mhz,
CLOCK_THROTTLE_REASONS / CLOCKS_EVENT_REASONS → throttle_reasons, PROF_SM_ACTIVE and PROF_PIPE_TENSOR_ACTIVE
(ratios 0–1) × 100 → sm_active_pct / tensor_active_pct, XID_ERRORS → gpu_events (kind ``xid``) when the
last XID changes to a non-zero value. DCGM's blank sentinels (values ≥ 9.2e18) and NaN are NULL.

Labels: ``UUID``/``uuid`` (gpu_id; a MIG instance with ``GPU_I_ID`` is ``<uuid>/<GPU_I_ID>`` with
``mig_profile`` from ``GPU_I_PROFILE`` and its parent GPU), else ``Hostname``/``hostname`` + ``gpu``
(``HOST:INDEX``); ``modelName`` → model; ``hpc_job`` → the sample's job_id. When the series of several jobs
report one GPU at one time (time-slicing, MPS, pods sharing a card), the sample belongs to none of them
alone: its job_id stays NULL (the job records' allocations then split the GPU, analytics/cost.py) and each
job on the card is kept as a ``processes`` row (no pid) for that time. Samples with no GPU label at
all are skipped and counted. ``pod``/``namespace``/``container`` (and ``exported_*``) name Kubernetes
workloads: a series with no ``hpc_job`` but a pod belongs to job ``namespace/pod``. With ``--cluster C`` job
ids are prefixed ``C/``, as the sacct parser and the live Prometheus collector write them.

Time: a sample's own timestamp when it has one; a file without timestamps is ONE scrape taken at the file's
modification time (stated in the report); a series that repeats in such a file is an error, since the
scrapes cannot be told apart.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, quote
from collectors.nvidia_smi_csv import file_time_utc
from collectors.sql_text import sql_path
from collectors.validate import name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.reference import model_sql_case

SENTINEL = 9.2e18  # DCGM_FT_*_BLANK and friends start at 2^63 - 2^10; nothing real comes near
# NAME{LABELS} VALUE [TIMESTAMP] [# {EXEMPLAR LABELS} VALUE [TIMESTAMP]]: a label value may hold } and #, so
# the braces are matched over quoted strings; an OpenMetrics exemplar is read past (nothing stores it).
_QUOTED_OR_OTHER = r'(?:[^"}]|"(?:[^"\\]|\\.)*")*'
LINE_RE = (
    r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(" + _QUOTED_OR_OTHER + r")\})?[ \t]+(\S+)"
    r"(?:[ \t]+([-+]?[0-9][0-9.eE+-]*))?"
    r"(?:[ \t]+#[ \t]+\{" + _QUOTED_OR_OTHER + r"\}[ \t]+\S+(?:[ \t]+\S+)?)?[ \t]*$"
)
LABEL_RE = r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"'
# A label value's escapes (the exposition format: \\ \" \n) undone in one left-to-right pass: escaped
# backslashes first become chr(0), so "\\n" stays a backslash and an n.
UNESCAPE_SQL = r"""replace(replace(replace(regexp_replace(v, '\\\\', chr(0), 'g'), '\"', '"'), '\n', chr(10)), chr(0), '\')"""

# lower-cased metric name → measure; the legacy gpu-monitoring-tools names map to the same measures
METRICS: dict[str, str] = {
    "dcgm_fi_dev_gpu_util": "util",
    "dcgm_gpu_utilization": "util",
    "dcgm_fi_dev_mem_copy_util": "mem_util",
    "dcgm_mem_copy_utilization": "mem_util",
    "dcgm_fi_dev_fb_used": "fb_used",
    "dcgm_fb_used": "fb_used",
    "dcgm_fi_dev_fb_free": "fb_free",
    "dcgm_fb_free": "fb_free",
    "dcgm_fi_dev_fb_total": "fb_total",
    "dcgm_fi_dev_power_usage": "power",
    "dcgm_power_usage": "power",
    "dcgm_fi_dev_total_energy_consumption": "energy_mj",
    "dcgm_total_energy_consumption": "energy_mj",
    "dcgm_fi_dev_gpu_temp": "temp",
    "dcgm_gpu_temp": "temp",
    "dcgm_fi_dev_sm_clock": "sm_clock",
    "dcgm_sm_clock": "sm_clock",
    "dcgm_fi_dev_clock_throttle_reasons": "throttle",
    "dcgm_fi_dev_clocks_event_reasons": "throttle",
    "dcgm_fi_prof_gr_engine_active": "gr_active",
    "dcgm_fi_prof_sm_active": "sm_active",
    "dcgm_fi_prof_pipe_tensor_active": "tensor_active",
    "dcgm_fi_dev_xid_errors": "xid",
    "dcgm_xid_errors": "xid",
}


def _label(*names: str) -> str:
    """The first non-empty of several spellings of one label (``UUID`` / ``uuid``)."""
    return "coalesce(" + ", ".join(f"nullif(labels[{quote(n)}], '')" for n in names) + ")"


def _job_id_sql(opts: IngestOptions, job_prefix: str | None = None) -> str:
    """The job a series belongs to: ``hpc_job`` (a Slurm job id), else ``namespace/pod`` (Kubernetes).

    Prefixed ``<cluster>/`` when a cluster is given, the same ids the sacct parser and the live Prometheus
    collector write, so samples from a file and job records from the scheduler meet.
    """
    if job_prefix is None:
        job_prefix = f"{opts.cluster}/" if opts.cluster else ""
    prefix = quote(job_prefix)
    pod = _label("exported_pod", "pod")
    namespace = _label("exported_namespace", "namespace")
    return f"""(CASE WHEN {_label("hpc_job")} IS NOT NULL THEN {prefix} || {_label("hpc_job")}
                     WHEN {pod} IS NOT NULL THEN {prefix} || coalesce({namespace} || '/', '') || {pod} END)"""


def stage_long(
    con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions, *, job_prefix: str | None = None
) -> dict[str, int]:
    """Pivot TEMP ``prom_long(line_no, metric, labels MAP, ts TIMESTAMP, value DOUBLE)`` into stage tables.

    ``job_prefix`` goes before job ids (default ``<cluster>/`` when a cluster is given); a caller whose
    ``hpc_job`` labels already carry their final id passes "".

    Creates stage_samples, stage_gpus and (when an XID appears) stage_gpu_events; returns notes by reason.
    """
    arms = " ".join(f"WHEN {quote(k)} THEN {quote(v)}" for k, v in METRICS.items())
    gi = _label("GPU_I_ID", "gpu_i_id")
    uuid = _label("UUID", "uuid")
    host = _label("Hostname", "hostname")
    index = f"TRY_CAST({_label('gpu')} AS INTEGER)"
    con.execute(
        f"""CREATE TEMP TABLE prom_norm AS
            SELECT line_no, ts, CASE lower(metric) {arms} END AS measure,
                   CASE WHEN isnan(value) OR abs(value) >= {SENTINEL} THEN NULL ELSE value END AS value,
                   {uuid} AS uuid, {gi} AS gi, {host} AS host, {index} AS gpu_index,
                   {_label("modelName", "modelname")} AS model_raw,
                   {_label("GPU_I_PROFILE", "gpu_i_profile")} AS mig_profile,
                   {_job_id_sql(opts, job_prefix)} AS job_id,
                   CASE WHEN {uuid} IS NOT NULL THEN {uuid} || coalesce('/' || {gi}, '')
                        WHEN {index} IS NOT NULL THEN coalesce({host}, 'localhost') || ':' || {index}
                   END AS gpu_id
            FROM prom_long"""
    )
    counts = con.execute(
        """SELECT count_if(measure IS NULL), count_if(measure IS NOT NULL AND gpu_id IS NULL),
                  count_if(measure IS NOT NULL AND gpu_id IS NOT NULL AND value IS NULL),
                  count_if(measure IS NOT NULL AND gpu_id IS NOT NULL)
           FROM prom_norm"""
    ).fetchall()[0]
    not_stored, no_gpu, _blank, kept = (int(c or 0) for c in counts)
    if kept == 0:
        raise FormatError(path, None, "no DCGM GPU metric with a GPU label (UUID or gpu) in the file")
    pct = "100.0 * "
    con.execute(
        f"""CREATE TEMP TABLE stage_samples AS
            SELECT ts, gpu_id,
                coalesce(max(value) FILTER (measure = 'util'), {pct}max(value) FILTER (measure = 'gr_active'))::DOUBLE
                    AS util_pct,
                max(value) FILTER (measure = 'mem_util')::DOUBLE AS mem_util_pct,
                max(value) FILTER (measure = 'fb_used')::DOUBLE AS mem_used_mib,
                coalesce(max(value) FILTER (measure = 'fb_total'),
                         max(value) FILTER (measure = 'fb_used') + max(value) FILTER (measure = 'fb_free'))::DOUBLE
                    AS mem_total_mib,
                max(value) FILTER (measure = 'power')::DOUBLE AS power_w,
                (max(value) FILTER (measure = 'energy_mj') / 1000.0)::DOUBLE AS energy_j,
                max(value) FILTER (measure = 'temp')::DOUBLE AS temp_c,
                ({pct}max(value) FILTER (measure = 'sm_active'))::DOUBLE AS sm_active_pct,
                ({pct}max(value) FILTER (measure = 'tensor_active'))::DOUBLE AS tensor_active_pct,
                max(value) FILTER (measure = 'sm_clock')::DOUBLE AS sm_clock_mhz,
                max(value) FILTER (measure = 'throttle')::UBIGINT AS throttle_reasons,
                -- several jobs' series on one GPU at one time (time-slicing, MPS, shared pods): the sample
                -- is no one job's; the jobs are kept in stage_processes below
                CASE WHEN count(DISTINCT job_id) = 1 THEN max(job_id) END AS job_id,
                count(DISTINCT job_id) AS n_jobs,
                max(value) FILTER (measure = 'xid') AS xid,
                min(line_no) AS line_no, {_line_columns()}
            FROM prom_norm WHERE measure IS NOT NULL AND gpu_id IS NOT NULL
            GROUP BY ts, gpu_id ORDER BY ts, gpu_id"""
    )
    name_columns(con, "samples", _FIELD_NAMES)
    cluster = quote(opts.cluster) if opts.cluster else "NULL"
    con.execute(
        f"""CREATE TEMP TABLE stage_gpus AS
            SELECT gpu_id, CASE WHEN gi IS NULL THEN uuid END AS uuid, host,
                   CASE WHEN gi IS NULL THEN gpu_index END AS gpu_index,
                   {model_sql_case("model_raw")} AS model, model_raw, mem_total::DOUBLE AS memory_total_mib,
                   {cluster}::VARCHAR AS cluster, CASE WHEN gi IS NOT NULL THEN mig_profile END AS mig_profile,
                   CASE WHEN gi IS NOT NULL THEN uuid END AS parent_gpu_id, first_seen, last_seen
            FROM (SELECT n.gpu_id, any_value(uuid) AS uuid, any_value(gi) AS gi, any_value(host) AS host,
                         any_value(gpu_index) AS gpu_index, any_value(model_raw) AS model_raw,
                         any_value(mig_profile) AS mig_profile, max(s.mem_total_mib) AS mem_total,
                         min(n.ts) AS first_seen, max(n.ts) AS last_seen
                  FROM prom_norm n LEFT JOIN stage_samples s ON s.gpu_id = n.gpu_id AND s.ts = n.ts
                  WHERE n.gpu_id IS NOT NULL AND n.measure IS NOT NULL GROUP BY n.gpu_id)"""
    )
    xids = int(con.execute("SELECT count(*) FROM stage_samples WHERE xid > 0").fetchall()[0][0])
    if xids:
        con.execute(
            """CREATE TEMP TABLE stage_gpu_events AS
               SELECT ts, gpu_id, 'xid' AS kind, CAST(CAST(xid AS BIGINT) AS VARCHAR) AS value FROM (
                   SELECT ts, gpu_id, xid, lag(xid) OVER (PARTITION BY gpu_id ORDER BY ts) AS before
                   FROM stage_samples WHERE xid IS NOT NULL)
               WHERE xid > 0 AND before IS DISTINCT FROM xid"""
        )
    shared = int(con.execute("SELECT count(*) FROM stage_samples WHERE n_jobs > 1").fetchall()[0][0])
    if shared:
        # one row per (time, GPU, job) of the shared samples: which jobs were on the card (no pid)
        con.execute(
            """CREATE TEMP TABLE stage_processes AS
               SELECT DISTINCT n.ts, n.gpu_id, NULL::BIGINT AS pid, NULL::VARCHAR AS process_name,
                      NULL::DOUBLE AS used_mem_mib, n.job_id
               FROM prom_norm n JOIN stage_samples s ON s.gpu_id = n.gpu_id AND s.ts = n.ts
               WHERE s.n_jobs > 1 AND n.job_id IS NOT NULL
               ORDER BY n.ts, n.gpu_id"""
        )
    con.execute("ALTER TABLE stage_samples DROP COLUMN xid")
    con.execute("ALTER TABLE stage_samples DROP COLUMN n_jobs")
    if not int(con.execute("SELECT count(job_id) FROM stage_samples").fetchall()[0][0]):
        con.execute("ALTER TABLE stage_samples DROP COLUMN job_id")
    con.execute("DROP TABLE temp.prom_norm")
    con.execute("DROP TABLE temp.prom_long")
    notes = {}
    if not_stored:
        notes["values of metrics the ledger does not store"] = not_stored
    if no_gpu:
        notes["values without a GPU label (UUID or gpu)"] = no_gpu
    # blank values (DCGM sentinels, NaN) are stored as NULL like any missing reading: not a skip
    return notes


# The measure each sample column comes from: its line is the one a plausibility message names.
_LINE_OF = {
    "util_pct": "util",
    "mem_util_pct": "mem_util",
    "mem_used_mib": "fb_used",
    "mem_total_mib": "fb_total",
    "power_w": "power",
    "energy_j": "energy_mj",
    "temp_c": "temp",
    "sm_active_pct": "sm_active",
    "tensor_active_pct": "tensor_active",
    "sm_clock_mhz": "sm_clock",
}


_FIELD_NAMES = {
    "util_pct": "DCGM_FI_DEV_GPU_UTIL",
    "mem_util_pct": "DCGM_FI_DEV_MEM_COPY_UTIL",
    "mem_used_mib": "DCGM_FI_DEV_FB_USED",
    "mem_total_mib": "DCGM_FI_DEV_FB_TOTAL",
    "power_w": "DCGM_FI_DEV_POWER_USAGE",
    "energy_j": "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "temp_c": "DCGM_FI_DEV_GPU_TEMP",
    "sm_active_pct": "DCGM_FI_PROF_SM_ACTIVE",
    "tensor_active_pct": "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
    "sm_clock_mhz": "DCGM_FI_DEV_SM_CLOCK",
}


def _line_columns() -> str:
    """``line_no__<column>``: the line of the value each sample column took (collectors/validate.py)."""
    return ", ".join(
        f"arg_max(line_no, value) FILTER (measure = {quote(m)}) AS line_no__{c}" for c, m in _LINE_OF.items()
    )


class DcgmText:
    name = "dcgm"
    description = "dcgm-exporter /metrics (Prometheus text exposition), one or many scrapes"

    def sniff(self, path: Path, head: str) -> Sniff:
        lines = [ln.strip() for ln in head.splitlines() if ln.strip()]
        samples = [ln for ln in lines if not ln.startswith("#")]
        dcgm = [ln for ln in samples if ln.lower().startswith("dcgm_")]
        if dcgm and len(dcgm) >= len(samples) // 2:
            return Sniff(0.9)
        if any(ln.startswith(("# HELP ", "# TYPE ")) for ln in lines):
            return Sniff(0, "dcgm: Prometheus text without DCGM_FI_* or dcgm_* metrics")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        notes = read_exposition(con, path)
        _refuse_infinite(con, path)
        return {**notes, **stage_long(con, path, opts)}


def read_exposition(con: duckdb.DuckDBPyConnection, path: Path) -> dict[str, int]:
    """The Prometheus text exposition (or OpenMetrics) in ``path`` as TEMP ``prom_long(line_no, metric,
    labels MAP, ts TIMESTAMP, value DOUBLE)``, one row per sample line; notes by reason.

    Values are Go's floats as Prometheus writes them (``1``, ``-2.5e3``, ``NaN``, ``+Inf``, ``-Inf``).
    Timestamps: integer milliseconds since 1970 in Prometheus text; seconds, with a fraction or not, in an
    OpenMetrics file (one with a ``# EOF`` line, as OpenMetrics ends every exposition). Exemplars
    (``# {trace_id="…"} 1.0``) are read past. Tested against prometheus_client's two parsers on generated
    expositions (tests/collectors/test_prometheus_text.py)."""
    con.execute(
        f"""CREATE TEMP TABLE prom_lines AS
            SELECT generate_subscripts(parts, 1) AS line_no, rtrim(unnest(parts), chr(13)) AS line
            FROM (SELECT string_split(content, chr(10)) AS parts FROM read_text({sql_path(path)}))"""
    )
    con.execute(
        f"""CREATE TEMP TABLE prom_parsed AS
            SELECT line_no, line, regexp_extract(line, {quote(LINE_RE)},
                                                 ['metric', 'braces', 'labels', 'value', 'ts']) AS p
            FROM prom_lines WHERE trim(line) <> '' AND NOT starts_with(ltrim(line), '#')"""
    )
    bad = con.execute(
        """SELECT line_no, line FROM prom_parsed
           WHERE p.metric = '' OR TRY_CAST(p.value AS DOUBLE) IS NULL
           ORDER BY line_no LIMIT 1"""
    ).fetchall()
    if bad:
        line_no, line = bad[0]
        raise FormatError(path, int(line_no), f"not a Prometheus sample line: {line[:120]!r}")
    with_ts, total, seconds = con.execute(
        """SELECT count_if(p.ts <> ''), count(*),
                  (SELECT count(*) > 0 FROM prom_lines WHERE trim(line) = '# EOF')
           FROM prom_parsed"""
    ).fetchall()[0]
    if total == 0:
        raise FormatError(path, None, "no sample lines (only comments)")
    notes: dict[str, int] = {}
    if with_ts == 0:
        repeat = con.execute(
            """SELECT max(line_no) FROM prom_parsed GROUP BY p.metric, p.labels HAVING count(*) > 1
               ORDER BY 1 LIMIT 1"""
        ).fetchall()
        if repeat:
            raise FormatError(
                path,
                int(repeat[0][0]),
                "a series repeats but the samples carry no timestamps, so the scrapes cannot be told "
                "apart: ingest one scrape per file, or save samples with timestamps",
            )
        # the values are stored, timed by the file: not a skip (docs/formats-telemetry.md says so)
        ts_sql = file_time_utc(path)
    elif with_ts < total:
        missing = con.execute("SELECT min(line_no) FROM prom_parsed WHERE p.ts = ''").fetchall()[0][0]
        raise FormatError(path, int(missing), "this sample has no timestamp but others in the file do")
    elif seconds:  # OpenMetrics: seconds since 1970, a fraction allowed
        odd = con.execute(
            """SELECT line_no, p.ts FROM prom_parsed
               WHERE NOT abs(coalesce(TRY_CAST(p.ts AS DOUBLE), 1e300)) < 1e11 ORDER BY line_no LIMIT 1"""
        ).fetchall()
        if odd:  # 1e11 s is the year 5138
            raise FormatError(
                path,
                int(odd[0][0]),
                f"the timestamp is not seconds since 1970 (an OpenMetrics file, it ends with # EOF): {odd[0][1]!r}",
            )
        ts_sql = "make_timestamp(CAST(round(CAST(p.ts AS DOUBLE) * 1e6) AS BIGINT))"
    else:
        odd = con.execute(
            """SELECT line_no, p.ts FROM prom_parsed
               WHERE NOT regexp_full_match(p.ts, '[-+]?[0-9]+')
                      OR NOT abs(coalesce(TRY_CAST(p.ts AS DOUBLE), 1e300)) < 1e14 ORDER BY line_no LIMIT 1"""
        ).fetchall()
        if odd:  # Prometheus timestamps are milliseconds since 1970: 1e14 is the year 5138
            raise FormatError(
                path,
                int(odd[0][0]),
                f"the timestamp is not milliseconds since 1970: {odd[0][1]!r}"
                + (
                    " (seconds with a fraction are OpenMetrics, whose files end with # EOF)"
                    if "." in odd[0][1]
                    else ""
                ),
            )
        ts_sql = "make_timestamp(CAST(p.ts AS BIGINT) * 1000)"
    dup = con.execute(
        f"""SELECT line_no, names FROM (
                SELECT line_no, regexp_extract_all(p.labels, {quote(LABEL_RE)}, 1) AS names FROM prom_parsed)
            WHERE len(names) <> len(list_distinct(names)) ORDER BY line_no LIMIT 1"""
    ).fetchall()
    if dup:
        line_no, names = dup[0]
        twice = next(n for n in names if names.count(n) > 1)
        raise FormatError(
            path, int(line_no), f'the label "{twice}" appears twice in one series (duplicate labels)'
        )
    con.execute(
        f"""CREATE TEMP TABLE prom_long AS
            SELECT line_no, p.metric AS metric,
                   map(regexp_extract_all(p.labels, {quote(LABEL_RE)}, 1),
                       list_transform(regexp_extract_all(p.labels, {quote(LABEL_RE)}, 2),
                                      lambda v: {UNESCAPE_SQL})) AS labels,
                   CAST({ts_sql} AS TIMESTAMP) AS ts, CAST(p.value AS DOUBLE) AS value
            FROM prom_parsed"""
    )
    con.execute("DROP TABLE temp.prom_lines")
    con.execute("DROP TABLE temp.prom_parsed")
    return notes


def _refuse_infinite(con: duckdb.DuckDBPyConnection, path: Path) -> None:
    """+Inf or -Inf as the value of a metric the ledger stores is refused with its line: no GPU reading is
    infinite, and a DCGM blank is a finite sentinel (NaN, DCGM's other blank, stays a missing reading: NULL).
    An infinite value of a metric not stored is counted with the other values not stored."""
    names = ", ".join(quote(k) for k in METRICS)
    bad = con.execute(
        f"""SELECT line_no, metric, value FROM prom_long
            WHERE isinf(value) AND lower(metric) IN ({names}) ORDER BY line_no LIMIT 1"""
    ).fetchall()
    if bad:
        line_no, metric, value = bad[0]
        raise FormatError(
            path, int(line_no), f"{metric} is {'+' if value > 0 else '-'}Inf: no GPU reading is infinite"
        )
