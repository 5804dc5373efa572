"""``nvidia-smi pmon`` logs: per-process SM, memory, encoder and decoder utilization of each GPU, per poll.

What ``nvidia-smi pmon -s um -o DT -d N`` writes (one line per process per GPU per poll, columns aligned
with spaces, ``-`` where there is no value; a GPU with no process gets one line of ``-``)::

    #Date       Time        gpu         pid   type     sm    mem    enc    dec    jpg    ofa     fb   ccpm    command
    #YYYYMMDD   HH:MM:SS    Idx           #    C/G      %      %      %      %      %      %     MB     MB    name
     20260301   10:00:00      0      412345     C     60     21      -      -      -      -  30210      0    python
     20260301   10:00:00      1           -     -      -      -      -      -      -      -      -      -    -

The layout is read from the header, whatever its columns and their order: drivers before R525 have no
``jpg``/``ofa``, older ones print ``fb`` before ``sm`` with ``-s mu``, ``-s u`` has no ``fb``, ``-s m`` no
utilization, and the header is printed again every few screens (and by every run of a ``-c 1 >> log``
loop). ``command`` is the last column and may hold spaces (``renderD128 --us``). Read:

- ``Date`` (``YYYYMMDD``) and ``Time`` (``HH:MM:SS``), the host's local time: read in ``--tz`` (default this
  machine's zone) and stored as UTC. pmon prints them only with ``-o DT``; a log without them has no time
  and is rejected (``-o T`` alone has no date: also rejected), saying which option to add;
- ``gpu`` (the NVML index on the host) → the GPU the ledger already knows at that host and index (a uuid from
  an nvidia-smi CSV or XML of the same node, ingested first), else ``HOST:INDEX`` with ``--host`` (else
  ``localhost``). Record pmon on the node itself, not inside a job: inside a job's cgroup nvidia-smi numbers
  the job's GPUs from 0;
- ``pid`` → pid, ``sm`` → sm_pct, ``mem`` → mem_util_pct (memory-controller busy), ``enc``/``dec`` →
  enc_pct/dec_pct, ``fb`` (MB as pmon labels it; NVML's MiB) → used_mem_mib, ``command`` → process_name;
  ``type``, ``jpg``, ``ofa``, ``ccpm`` and columns of later drivers are not stored (named in the report);
- ``-`` is NULL: a process with ``-`` in ``sm`` had no SM sample in that poll. Lines of a GPU with no process
  (pid ``-``) are no rows, but their times still count as polls.

Each row's ``interval_s`` is the time its poll stands for: to the GPU's next poll, at most
``gpuledger.ledger.sample_time.GAP_FACTOR`` × the GPU's median spacing and at most a day (the last poll, and one before a
longer silence, get the median; a single poll, or polls a median of more than a day apart, pmon's default
1 s). A pid twice on one GPU in one poll (a process with both a compute and a graphics context) is one row
with the larger values.

Rows land in ``processes`` (with ``job_id`` from ``--job`` when the log belongs to one job; otherwise
collectors/attribute.py ties each pid to its job from the process → job maps already in the ledger). A log
without ``--job`` is the node's: it lists every process, so its polls (staged as ``stage_pmon_polls``, kept in
``process_shares`` with no job) also say that a job absent from one had no process there. The shared-GPU cost
rule (analytics/cost.py) splits a GPU-second several jobs hold by these SM readings.
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import TYPE_CHECKING
from zoneinfo import ZoneInfo

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.time_zones import LocalClock, local_zone
from collectors.validate import name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.sample_time import cadence_sql, interval_sql

if TYPE_CHECKING:
    import polars as pl

# header name (lower case) → processes column; None: recognised, not stored
COLUMNS: dict[str, str | None] = {
    "date": None,
    "time": None,
    "gpu": None,
    "pid": "pid",
    "sm": "sm_pct",
    "mem": "mem_util_pct",
    "enc": "enc_pct",
    "dec": "dec_pct",
    "fb": "used_mem_mib",
    "command": "process_name",
    "type": None,
    "jpg": None,
    "ofa": None,
    "ccpm": None,
}
NUMERIC = ("sm_pct", "mem_util_pct", "enc_pct", "dec_pct", "used_mem_mib")
DEFAULT_DELAY_S = 1.0  # pmon's default -d
SECOND_PASS = "#2"  # marks a poll time met on the second pass through an hour the clocks repeat
# The samples' rule (gpuledger/ledger/sample_time.py): a median gap above a day is no cadence (``pmon -c 1`` run by a
# daily cron), so each such poll stands for pmon's default delay, and no gap over a day is one poll's time.
_CADENCE = cadence_sql(default_s=DEFAULT_DELAY_S)
_INTERVAL = interval_sql("p.gap_s", "c.cad_s")
_DATE = re.compile(r"^\d{8}$")
_TIME = re.compile(r"^\d{2}:\d{2}:\d{2}$")


def _header(line: str) -> list[str] | None:
    """The column names of a header line (``# gpu pid type sm ...`` or ``#Date Time gpu pid ...``), else None."""
    if not line.startswith("#"):
        return None
    names = [n.lower() for n in line[1:].split()]
    return names if "gpu" in names and "pid" in names else None


def _units(line: str) -> bool:
    """The second header line (``# Idx # C/G % ...``)."""
    return line.startswith("#") and "idx" in line[1:].lower().split()


def _readable(text: str) -> bool:
    if text == "-":
        return True
    try:
        float(text)
    except ValueError:
        return False
    return True


class _Layout:
    """Where each column sits in a value line of one header's layout."""

    def __init__(self, names: list[str], line: int) -> None:
        self.names, self.line = names, line
        pos = {c: i for i, c in enumerate(names)}
        self.date, self.time, self.gpu, self.pid = pos["date"], pos["time"], pos["gpu"], pos["pid"]
        self.command = pos.get("command")
        # command (last) keeps its spaces: split the rest only
        self.maxsplit = len(names) - 1 if self.command is not None else 0
        self.needed = len(names) - 1 if self.command is not None else len(names)
        self.numeric = [(pos[c], t) for c, t in COLUMNS.items() if t in NUMERIC and c in pos]
        self.absent = [t for t in NUMERIC if t not in {x for _, x in self.numeric}]


class _Passes:
    """Each poll's time text as the key its rows share, with :data:`SECOND_PASS` on a time met on the second
    pass through an hour the clocks repeat (a DST end; collectors.time_zones.LocalClock). Rows of one poll come
    together, so the clock reads each poll's time once."""

    def __init__(self, clock: LocalClock) -> None:
        self.clock = clock
        self._last, self._key = "", ""

    def key(self, local: str) -> str:
        if local != self._last:
            try:
                second = self.clock.fold(dt.datetime.strptime(local, "%Y%m%d %H:%M:%S"))
            except ValueError:  # no time: _utc says so, with its line
                second = 0
            self._last, self._key = local, local + SECOND_PASS if second else local
        return self._key


class NvidiaSmiPmon:
    """``nvidia-smi pmon -s um -o DT`` logs → processes with per-process utilization."""

    name = "nvidia_smi_pmon"
    description = "nvidia-smi pmon -s um -o DT -d N (per-process SM / memory utilization per GPU)"

    def sniff(self, path: Path, head: str) -> Sniff:
        for line in head.splitlines()[:20]:
            names = _header(line.strip())
            if names is not None:
                return Sniff(0.95 if "command" in names else 0.8)
            if line.startswith("#") and "gpu" in line.lower().split() and "pwr" in line.lower().split():
                return Sniff(0, "nvidia_smi_pmon: this is nvidia-smi dmon (per-GPU) output; record pmon")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        zone_name = opts.tz or local_zone()
        try:
            zone = ZoneInfo(zone_name)
        except (ValueError, KeyError, OSError):
            raise FormatError("--tz", None, f"unknown time zone {zone_name!r}") from None
        cols: dict[str, list[object]] = {
            "line_no": [],
            "local": [],
            "gpu_index": [],
            **{c: [] for c in ("pid", *NUMERIC, "process_name")},
        }
        polls: dict[tuple[str, int], int] = {}  # (local time text, gpu index) → first line
        passes = _Passes(LocalClock(zone))  # a time the clocks repeat (DST end) read on its pass
        names: list[str] | None = None
        lay: _Layout | None = None
        header_line = 0
        checked: set[str] = set()
        ignored: set[str] = set()
        with path.open(encoding="utf-8", errors="replace") as fh:
            for n, raw in enumerate(fh, start=1):
                line = raw.strip()
                if not line:
                    continue
                found = _header(line)
                if found is not None:
                    names, header_line = found, n
                    self._check_header(path, n, names)
                    lay = _Layout(names, n)
                    ignored |= {
                        c for c in names if COLUMNS.get(c) is None and c not in ("date", "time", "gpu")
                    }
                    continue
                if line.startswith("#") or _units(line):
                    continue
                if lay is None:
                    raise FormatError(path, n, "a value line before any '# gpu pid ...' header")
                self._row(path, n, line, lay, cols, polls, checked, passes)
        if names is None:
            raise FormatError(path, 1, "no '# gpu pid ...' header: not nvidia-smi pmon output")
        if not polls:
            raise FormatError(path, header_line, "no poll lines under the header")
        first_line = {}
        for (t, _), n in polls.items():
            first_line.setdefault(t, n)
        times = {t: self._utc(path, n, t, zone) for t, n in first_line.items()}
        import polars as pl  # here, not at the top: every CLI run imports the registry (polars costs 0.12 s)

        frame = pl.DataFrame(
            {
                "line_no": pl.Series(cols["line_no"], dtype=pl.Int64),
                "ts": pl.Series([times[t] for t in cols["local"]], dtype=pl.Datetime("us")),
                "gpu_index": pl.Series(cols["gpu_index"], dtype=pl.Int64),
                "pid": pl.Series(cols["pid"], dtype=pl.Int64),
                **{c: pl.Series(cols[c], dtype=pl.Float64) for c in NUMERIC},
                "process_name": pl.Series(cols["process_name"], dtype=pl.Utf8),
            }
        )
        poll_frame = pl.DataFrame(
            {
                "ts": pl.Series([times[t] for t, _ in polls], dtype=pl.Datetime("us")),
                "gpu_index": pl.Series([i for _, i in polls], dtype=pl.Int64),
            }
        )
        self._land_stage(con, frame, poll_frame, opts)
        name_columns(
            con,
            "processes",
            {"ts": "Date/Time", "pid": "pid", "sm_pct": "sm", "mem_util_pct": "mem", "enc_pct": "enc",
             "dec_pct": "dec", "used_mem_mib": "fb", "interval_s": "poll interval"},
        )  # fmt: skip
        rows = int(con.execute("SELECT count(*) FROM stage_processes").fetchall()[0][0])
        notes: dict[str, int] = {}
        doubled = frame.height - rows
        if doubled:
            notes["lines of a pid already listed on that GPU in that poll (larger values kept)"] = doubled
        idle = (
            len(polls)
            - poll_frame.join(frame.select("ts", "gpu_index").unique(), on=["ts", "gpu_index"]).height
        )
        if idle:
            notes["polls of a GPU with no process (no row; the poll still counts for the intervals)"] = idle
        for c in sorted(ignored):
            notes[f"column {c!r} not stored (no ledger column)"] = rows
        if "sm" not in names:
            notes["no 'sm' column (-s u not given): no per-process utilization, memory only"] = rows
        return notes

    @staticmethod
    def _check_header(path: Path, n: int, names: list[str]) -> None:
        if "command" in names and names[-1] != "command":
            raise FormatError(
                path, n, "'command' is not the last column: not a pmon header this parser knows"
            )
        if "date" in names and "time" not in names:
            raise FormatError(
                path, n, "the lines carry a date but no time (-o D): record with nvidia-smi pmon -o DT"
            )
        if "time" in names and "date" not in names:
            raise FormatError(
                path, n, "the lines carry a time but no date (-o T): record with nvidia-smi pmon -o DT"
            )
        if "date" not in names:
            raise FormatError(
                path,
                n,
                "the lines carry no date and time: record with nvidia-smi pmon -s um -o DT (each line then "
                "says when it was sampled)",
            )

    @staticmethod
    def _row(
        path: Path,
        n: int,
        line: str,
        lay: _Layout,
        cols: dict[str, list[object]],
        polls: dict[tuple[str, int], int],
        checked: set[str],
        passes: _Passes,
    ) -> None:
        parts = line.split(None, lay.maxsplit) if lay.maxsplit else line.split()
        if len(parts) < lay.needed or (not lay.maxsplit and len(parts) != len(lay.names)):
            raise FormatError(
                path, n, f"{len(parts)} values, the header at line {lay.line} names {len(lay.names)} columns"
            )
        local = parts[lay.date] + " " + parts[lay.time]
        if local not in checked:  # each poll's time is checked once
            if not _DATE.match(parts[lay.date]) or not _TIME.match(parts[lay.time]):
                raise FormatError(path, n, f"Date/Time is {local}, not YYYYMMDD HH:MM:SS")
            checked.add(local)
        local = passes.key(local)
        try:
            gpu = int(parts[lay.gpu])
        except ValueError:
            raise FormatError(path, n, f"gpu is {parts[lay.gpu]!r}, not a GPU index") from None
        polls.setdefault((local, gpu), n)
        pid_text = parts[lay.pid]
        if pid_text == "-":  # a GPU with no process in this poll
            return
        try:
            pid = int(pid_text)
            values = [None if parts[i] == "-" else float(parts[i]) for i, _ in lay.numeric]
        except ValueError:
            bad = next(
                (lay.names[i], parts[i])
                for i in (lay.pid, *(i for i, _ in lay.numeric))
                if not _readable(parts[i])
            )
            what = "not a process id" if bad[0] == "pid" else "not a number or '-'"
            raise FormatError(path, n, f"{bad[0]} is {bad[1]!r}, {what}") from None
        cols["line_no"].append(n)
        cols["local"].append(local)
        cols["gpu_index"].append(gpu)
        cols["pid"].append(pid)
        for (_, target), v in zip(lay.numeric, values, strict=True):
            cols[target].append(v)
        for target in lay.absent:
            cols[target].append(None)
        command = parts[lay.command].strip() if lay.command is not None and len(parts) > lay.command else None
        cols["process_name"].append(None if command in (None, "", "-") else command)

    @staticmethod
    def _utc(path: Path, n: int, local: str, zone: ZoneInfo) -> dt.datetime:
        text, second = local.removesuffix(SECOND_PASS), local.endswith(SECOND_PASS)
        try:
            naive = dt.datetime.strptime(text, "%Y%m%d %H:%M:%S")
        except ValueError:
            raise FormatError(path, n, f"Date/Time is {text}, not a time") from None
        return naive.replace(tzinfo=zone, fold=int(second)).astimezone(dt.UTC).replace(tzinfo=None)

    @staticmethod
    def _land_stage(
        con: duckdb.DuckDBPyConnection, frame: pl.DataFrame, polls: pl.DataFrame, opts: IngestOptions
    ) -> None:
        """``stage_processes`` (one row per GPU, poll and pid; interval_s from the GPU's poll times) and
        ``stage_gpus`` for GPUs the ledger does not know at that host and index yet."""
        host = opts.host or "localhost"
        con.register("pmon_rows", frame)
        con.register("pmon_polls", polls)
        try:
            # the GPU at this host and index the ledger already knows (its uuid), else HOST:INDEX
            con.execute(
                """CREATE OR REPLACE TEMP TABLE pmon_gpus AS
                   SELECT i.gpu_index, coalesce(
                              (SELECT min(g.gpu_id) FROM gpus g
                               WHERE lower(split_part(g.host, '.', 1)) = lower(split_part(?, '.', 1))
                                 AND g.gpu_index = i.gpu_index AND g.parent_gpu_id IS NULL),
                              ? || ':' || i.gpu_index) AS gpu_id,
                          EXISTS (SELECT 1 FROM gpus g
                                  WHERE lower(split_part(g.host, '.', 1)) = lower(split_part(?, '.', 1))
                                    AND g.gpu_index = i.gpu_index AND g.parent_gpu_id IS NULL) AS known
                   FROM (SELECT DISTINCT gpu_index FROM pmon_polls) i""",
                [host, host, host],
            )
            con.execute(
                """CREATE TEMP TABLE pmon_gaps AS
                    SELECT gpu_index, ts, epoch(lead(ts) OVER (PARTITION BY gpu_index ORDER BY ts) - ts) AS gap_s
                    FROM (SELECT DISTINCT gpu_index, ts FROM pmon_polls)"""
            )
            con.execute(
                f"""CREATE TEMP TABLE stage_processes AS
                    WITH cadence AS (SELECT gpu_index, {_CADENCE} AS cad_s FROM pmon_gaps GROUP BY gpu_index),
                    iv AS (
                        SELECT p.gpu_index, p.ts, {_INTERVAL} AS interval_s
                        FROM pmon_gaps p JOIN cadence c USING (gpu_index)
                    )
                    SELECT r.ts, g.gpu_id, r.pid, arg_max(r.process_name, coalesce(r.sm_pct, -1)) AS process_name,
                           max(r.used_mem_mib) AS used_mem_mib, ?::VARCHAR AS job_id,
                           max(r.sm_pct)::DOUBLE AS sm_pct, max(r.mem_util_pct)::DOUBLE AS mem_util_pct,
                           max(r.enc_pct)::DOUBLE AS enc_pct, max(r.dec_pct)::DOUBLE AS dec_pct,
                           any_value(iv.interval_s)::DOUBLE AS interval_s, min(r.line_no) AS line_no
                    FROM pmon_rows r JOIN pmon_gpus g USING (gpu_index)
                         JOIN iv ON iv.gpu_index = r.gpu_index AND iv.ts = r.ts
                    GROUP BY r.ts, g.gpu_id, r.pid
                    ORDER BY r.ts, g.gpu_id, r.pid""",
                [opts.job_id],
            )
            if opts.job_id is None:
                # a node-level log lists every process on each GPU: its polls say "no other process" too
                con.execute(
                    f"""CREATE TEMP TABLE stage_pmon_polls AS
                        WITH cadence AS (SELECT gpu_index, {_CADENCE} AS cad_s FROM pmon_gaps GROUP BY gpu_index)
                        SELECT g.gpu_id, p.ts, CAST({_INTERVAL} AS DOUBLE) AS interval_s
                        FROM pmon_gaps p JOIN cadence c USING (gpu_index) JOIN pmon_gpus g USING (gpu_index)"""
                )
            cluster = opts.cluster
            con.execute(
                """CREATE TEMP TABLE stage_gpus AS
                   SELECT g.gpu_id, ?::VARCHAR AS host, g.gpu_index::INTEGER AS gpu_index, ?::VARCHAR AS cluster,
                          min(p.ts) AS first_seen, max(p.ts) AS last_seen
                   FROM pmon_gpus g JOIN pmon_polls p USING (gpu_index)
                   WHERE NOT g.known
                   GROUP BY g.gpu_id, g.gpu_index""",
                [host, cluster],
            )
        finally:
            con.unregister("pmon_rows")
            con.unregister("pmon_polls")
            con.execute("DROP TABLE IF EXISTS temp.pmon_gpus")
            con.execute("DROP TABLE IF EXISTS temp.pmon_gaps")
