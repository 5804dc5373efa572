"""Public cluster traces from Alibaba, so a user can load a production-scale fleet.

- **PAI GPU 2020** (``cluster-trace-gpu-v2020``), header-less CSVs with the published headers:
  ``pai_machine_spec`` (machine,gpu_type,cap_cpu,cap_mem,cap_gpu) → ``capacity`` per GPU model;
  ``pai_task_table`` (job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type)
  → one job per task, ``gpu_count = inst_num × plan_gpu / 100`` (plan_gpu is % of one GPU per instance).
  Trace times are seconds from an undisclosed origin; they are anchored at :data:`PAI2020_EPOCH`.
  The other tables (job, instance, sensor, machine_metric, group_tag) are recognised and refused with a
  sentence: they carry no GPU count or no time series gpuledger could store.
- **GPU 2023** (``cluster-trace-gpu-v2023``, "openb"): the pod list → jobs, ``gpu_count = gpu_milli / 1000`` for
  a one-GPU pod (a shared fraction) else ``num_gpu``; the node list → ``capacity`` per model. Times are
  seconds from trace start, anchored at :data:`OPENB2023_EPOCH`.
- **GenAI 2026** (``cluster-trace-v2026-GenAI``): per-pod GPU duty cycle (%) and memory used (BYTES → MiB)
  series → ``samples`` with ``gpu_id = genai:<container_ip>``; the anonymised epoch seconds are kept as they
  are. The ``.tar.gz`` archives are read by streaming their one CSV member to a temporary file.

``cluster`` is ``--cluster`` when given, else the trace's name (``alibaba-pai-2020``, ``alibaba-openb-2023``).
"""

from __future__ import annotations

import datetime as dt
import re
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, quote
from collectors.row_checks import Check, first_violation, screen_rows
from collectors.sql_text import epoch_ts, sql_path
from collectors.validate import name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.job_states import PAI_STATUSES, POD_PHASES, mapped_state_sql
from gpuledger.ledger.reference import model_sql_case

PAI2020_EPOCH = dt.datetime(2020, 7, 1)  # the trace covers Jul–Aug 2020; its own origin is not published
OPENB2023_EPOCH = dt.datetime(2023, 1, 1)  # the trace does not publish its start date

PAI_TABLES = {
    "pai_machine_spec": "machine,gpu_type,cap_cpu,cap_mem,cap_gpu",
    "pai_task_table": "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type",
    "pai_job_table": "job_name,inst_id,user,status,start_time,end_time",
    "pai_instance_table": "job_name,task_name,inst_name,worker_name,inst_id,status,start_time,end_time,machine",
    "pai_sensor_table": "job_name,task_name,worker_name,inst_id,machine,gpu_name,cpu_usage,gpu_wrk_util,avg_mem,"
    "max_mem,avg_gpu_wrk_mem,max_gpu_wrk_mem,read,write,read_count,write_count",
}
PAI_STATUS = mapped_state_sql("status", PAI_STATUSES)
_MACHINE_LINE = re.compile(r"^[0-9a-f]{16,32},[A-Za-z0-9]+,\d+(\.\d+)?,\d+(\.\d+)?,\d+(\.\d+)?\s*$")
_TASK_LINE = re.compile(r"^[0-9a-f]{16,32},[^,]*,[\d.]*,(Terminated|Failed|Running|Waiting|Interrupted),")
_JOB_LINE = re.compile(
    r"^[0-9a-f]{16,32},[0-9a-f]{16,64},[0-9a-f]*,(Terminated|Failed|Running|Waiting|Interrupted),"
)


def _model(v: str) -> str:
    return f"coalesce({model_sql_case(v)}, {v})"


def _read_csv(
    con: duckdb.DuckDBPyConnection, path: Path, table: str, columns: list[str], *, header: bool
) -> None:
    """All fields as VARCHAR with their line numbers; a malformed line is a FormatError naming it."""
    src = sql_path(path)[1:-1]
    spec = ", ".join(f"'{c}': 'VARCHAR'" for c in columns)
    try:
        con.execute(
            f"""CREATE TEMP TABLE {table} AS SELECT row_number() OVER () + {int(header)} AS line_no, *
                FROM read_csv('{src}', header={str(header).lower()}, auto_detect=false, delim=',', quote='"',
                              columns={{{spec}}}, strict_mode=true, null_padding=false)"""
        )
    except duckdb.Error as exc:
        text = str(exc).split("\n")[0]
        m = re.search(r"[Ll]ine:? (\d+)", text)
        found = re.search(r"found (\d+) columns", str(exc)) or re.search(
            r"(\d+) columns? [^\n]{0,200}found", str(exc)
        )
        reason = f"expected {len(columns)} fields" + (
            f", found {found.group(1)}" if found else f": {text[:200]}"
        )
        raise FormatError(path, int(m.group(1)) if m else None, reason) from None


def _num_checks(cols: list[str], kinds: str = "DOUBLE") -> list[Check]:
    return [
        Check(
            f'nullif("{c}", \'\') IS NOT NULL AND TRY_CAST("{c}" AS {kinds}) IS NULL',
            f'column "{c}" is not a number: "{{value}}"',
            f'"{c}"',
        )
        for c in cols
    ]


class PaiTrace2020:
    name = "alibaba_pai2020"
    description = "Alibaba PAI GPU 2020 trace tables (pai_machine_spec, pai_task_table; header-less CSV)"

    def _table(self, path: Path, head: str) -> str | None:
        first = head.lstrip("\ufeff").split("\n", 1)[0].strip()
        if _MACHINE_LINE.match(first):
            return "pai_machine_spec"
        if _TASK_LINE.match(first):
            return "pai_task_table"
        if _JOB_LINE.match(first):
            return "pai_job_table"
        for table in PAI_TABLES:
            if path.name.startswith(table):
                return table
        return None

    def sniff(self, path: Path, head: str) -> Sniff:
        return Sniff(0.8) if self._table(path, head) else Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        from collectors.base import read_head

        table = self._table(path, read_head(path))
        if table not in ("pai_machine_spec", "pai_task_table"):
            raise FormatError(
                path,
                None,
                f"PAI 2020 table {table or '?'} is not loaded: gpuledger reads pai_machine_spec (capacity) and "
                "pai_task_table (jobs with plan_gpu); the others carry no GPU count or time series",
            )
        cols = PAI_TABLES[table].split(",")
        _read_csv(con, path, "pai_raw", cols, header=False)
        cluster = quote(opts.cluster or "alibaba-pai-2020")
        epoch = quote(PAI2020_EPOCH.isoformat(sep=" "))
        if table == "pai_machine_spec":
            first_violation(con, path, "pai_raw", _num_checks(["cap_gpu", "cap_cpu", "cap_mem"]))
            cpu = con.execute(
                "SELECT count(*) FROM pai_raw WHERE TRY_CAST(cap_gpu AS DOUBLE) = 0"
            ).fetchall()[0][0]
            con.execute(
                f"""CREATE TEMP TABLE stage_capacity AS
                    SELECT {cluster} AS cluster, {_model("gpu_type")} AS gpu_model,
                           sum(TRY_CAST(cap_gpu AS DOUBLE)) AS gpu_count, {epoch}::TIMESTAMP AS start_ts
                    FROM pai_raw WHERE TRY_CAST(cap_gpu AS DOUBLE) > 0 GROUP BY ALL ORDER BY gpu_model"""
            )
            con.execute("DROP TABLE temp.pai_raw")
            return {"machines without GPUs": int(cpu)} if cpu else {}
        checks = _num_checks(["inst_num", "start_time", "end_time", "plan_gpu"])
        checks.append(
            Check(f"({PAI_STATUS}) IS NULL", 'column "status" is not a PAI task status: "{value}"', "status")
        )
        screen_rows(con, path, "pai_raw", checks, skip_bad_rows=opts.skip_bad_rows)

        def at(col: str) -> str:
            return epoch_ts(f"TRY_CAST(nullif({col}, '') AS DOUBLE)", f"{epoch}::TIMESTAMP")

        con.execute(
            f"""CREATE TEMP TABLE stage_jobs AS
                SELECT 'pai2020/' || job_name || '/' || task_name AS job_id, 'alibaba_pai2020' AS source,
                       {cluster} AS cluster, job_name AS name, 'other' AS kind,
                       CASE WHEN nullif(gpu_type, '') IS NOT NULL THEN {_model("gpu_type")} END AS gpu_model,
                       coalesce(TRY_CAST(inst_num AS DOUBLE), 1) * coalesce(TRY_CAST(plan_gpu AS DOUBLE), 0) / 100
                           AS gpu_count,
                       {at("start_time")} AS start_ts, {at("end_time")} AS end_ts, {PAI_STATUS} AS state,
                       line_no
                FROM pai_raw ORDER BY line_no"""
        )
        name_columns(con, "jobs", {"start_ts": "start_time", "end_ts": "end_time", "gpu_count": "plan_gpu"})
        con.execute("DROP TABLE temp.pai_raw")
        return {}


OPENB_POD = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time"
OPENB_NODE = "sn,cpu_milli,memory_mib,gpu,model"


class OpenbTrace2023:
    name = "alibaba_openb2023"
    description = "Alibaba GPU 2023 (openb) pod list → jobs, node list → capacity"

    def sniff(self, path: Path, head: str) -> Sniff:
        first = head.lstrip("\ufeff").split("\n", 1)[0].strip()
        return Sniff(0.95) if first in (OPENB_POD, OPENB_NODE) else Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        from collectors.base import read_head

        first = read_head(path).lstrip("\ufeff").split("\n", 1)[0].strip()
        cluster = quote(opts.cluster or "alibaba-openb-2023")
        epoch = quote(OPENB2023_EPOCH.isoformat(sep=" "))
        if first == OPENB_NODE:
            _read_csv(con, path, "ob_raw", OPENB_NODE.split(","), header=True)
            first_violation(con, path, "ob_raw", _num_checks(["gpu"]))
            cpu = con.execute("SELECT count(*) FROM ob_raw WHERE TRY_CAST(gpu AS DOUBLE) = 0").fetchall()[0][
                0
            ]
            con.execute(
                f"""CREATE TEMP TABLE stage_capacity AS
                    SELECT {cluster} AS cluster, {_model("model")} AS gpu_model,
                           sum(TRY_CAST(gpu AS DOUBLE)) AS gpu_count, {epoch}::TIMESTAMP AS start_ts
                    FROM ob_raw WHERE TRY_CAST(gpu AS DOUBLE) > 0 GROUP BY ALL ORDER BY gpu_model"""
            )
            con.execute("DROP TABLE temp.ob_raw")
            return {"nodes without GPUs": int(cpu)} if cpu else {}
        if first != OPENB_POD:
            raise FormatError(path, 1, f"not an openb pod or node list header: expected {OPENB_POD!r}")
        _read_csv(con, path, "ob_raw", OPENB_POD.split(","), header=True)
        checks = _num_checks(["num_gpu", "gpu_milli", "creation_time", "deletion_time", "scheduled_time"])
        checks.append(
            Check(
                "TRY_CAST(gpu_milli AS DOUBLE) NOT BETWEEN 0 AND 1000",
                'column "gpu_milli" is not 0–1000: "{value}"',
                "gpu_milli",
            )
        )
        screen_rows(con, path, "ob_raw", checks, skip_bad_rows=opts.skip_bad_rows)

        def at(col: str) -> str:
            return epoch_ts(f"TRY_CAST(nullif({col}, '') AS DOUBLE)", f"{epoch}::TIMESTAMP")

        con.execute(
            f"""CREATE TEMP TABLE stage_jobs AS
                SELECT 'openb/' || name AS job_id, 'alibaba_openb2023' AS source, {cluster} AS cluster,
                       name, 'other' AS kind,
                       -- one model named: that model; a '|' list means "any of these": unknown
                       CASE WHEN nullif(gpu_spec, '') IS NOT NULL AND NOT contains(gpu_spec, '|')
                            THEN {_model("gpu_spec")} END AS gpu_model,
                       CASE WHEN TRY_CAST(num_gpu AS DOUBLE) = 1 THEN TRY_CAST(gpu_milli AS DOUBLE) / 1000
                            ELSE TRY_CAST(num_gpu AS DOUBLE) END AS gpu_count,
                       {at("creation_time")} AS submit_ts,
                       CASE WHEN pod_phase <> 'Pending' THEN {at("scheduled_time")} END AS start_ts,
                       CASE WHEN pod_phase <> 'Pending' THEN {at("deletion_time")} END AS end_ts,
                       {mapped_state_sql("pod_phase", POD_PHASES, "upper(pod_phase)")}
                           AS state,
                       line_no
                FROM ob_raw ORDER BY line_no"""
        )
        name_columns(
            con,
            "jobs",
            {
                "submit_ts": "creation_time",
                "start_ts": "scheduled_time",
                "end_ts": "deletion_time",
                "gpu_count": "num_gpu",
            },
        )
        con.execute("DROP TABLE temp.ob_raw")
        return {}


MAX_MEMBER_BYTES = 4 * 2**30  # the real GenAI archives unpack to ~10 MB
GENAI_DUTY = "value,timestamp_anon,container_ip"
GENAI_MEM = "timestamp_anon,value,container_ip"


@contextmanager
def csv_member(path: Path) -> Iterator[Path]:
    """The CSV inside a ``.tar.gz`` streamed to a temporary file (memory stays flat), or the path itself."""
    if not tarfile.is_tarfile(path):
        yield path
        return
    with tarfile.open(path, "r:*") as tar:
        member = next((m for m in tar if m.isfile() and m.name.endswith(".csv")), None)
        if member is None:
            raise FormatError(path, None, "the archive holds no .csv file")
        if member.size > MAX_MEMBER_BYTES:  # decided before unpacking a byte (an archive bomb)
            raise FormatError(
                path,
                None,
                f"{member.name} unpacks to {member.size / 2**30:,.1f} GiB, over the {MAX_MEMBER_BYTES // 2**30} GiB "
                "gpuledger unpacks: extract it and ingest the CSV",
            )
        src = tar.extractfile(member)
        assert src is not None
        with tempfile.NamedTemporaryFile(suffix=".csv") as tmp:
            shutil.copyfileobj(src, tmp, 1 << 20)
            tmp.flush()
            yield Path(tmp.name)


class GenaiSeries2026:
    """Duty cycle (``value,timestamp_anon,container_ip``) or memory bytes (``timestamp_anon,value,...``)."""

    name = "alibaba_genai2026"
    description = "Alibaba GenAI 2026 per-pod GPU duty cycle / memory-used series (CSV or the .tar.gz)"

    @staticmethod
    def _metric(path: Path, head: str) -> str | None:
        m = re.search(r"(value,timestamp_anon,container_ip|timestamp_anon,value,container_ip)", head)
        if not m:
            return None
        name = path.name.lower()
        if "memory" in name:
            return "memory"
        if "duty" in name:
            return "duty"
        return "duty" if m.group(1) == GENAI_DUTY else "memory"

    def sniff(self, path: Path, head: str) -> Sniff:
        return Sniff(0.95) if self._metric(path, head) else Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        from collectors.base import read_head

        metric = self._metric(path, read_head(path))
        with csv_member(path) as csv_path:
            with csv_path.open("r", encoding="utf-8", errors="replace") as fh:
                header = fh.readline().strip()
            if header not in (GENAI_DUTY, GENAI_MEM):
                raise FormatError(path, 1, f"expected the header {GENAI_DUTY!r} or {GENAI_MEM!r}")
            _read_csv(con, csv_path, "ga_raw", header.split(","), header=True)
        first_violation(
            con,
            path,
            "ga_raw",
            [
                *_num_checks(["value", "timestamp_anon"]),
                Check("nullif(container_ip, '') IS NULL", "container_ip is empty"),
                *(
                    [
                        Check(
                            "TRY_CAST(value AS DOUBLE) NOT BETWEEN 0 AND 100",
                            'a duty cycle is 0–100 %: "{value}" (the memory series? use its file name)',
                            "value",
                        )
                    ]
                    if metric == "duty"
                    else []
                ),
            ],
        )
        col = "util_pct" if metric == "duty" else "mem_used_mib"
        scale = "" if metric == "duty" else " / 1048576"  # bytes → MiB
        con.execute(
            f"""CREATE TEMP TABLE stage_samples AS
                SELECT {epoch_ts("TRY_CAST(timestamp_anon AS DOUBLE)")} AS ts,
                       'genai:' || container_ip AS gpu_id, TRY_CAST(value AS DOUBLE){scale} AS {col}, line_no
                FROM ga_raw ORDER BY ts, gpu_id"""
        )
        name_columns(con, "samples", {"ts": "timestamp_anon", col: "value"})
        con.execute("DROP TABLE temp.ga_raw")
        return {}
