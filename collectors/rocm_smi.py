"""AMD GPU telemetry: ``rocm-smi … --csv`` and ``amd-smi metric --csv`` logs.

What the tools write (read from their source, ROCm/rocm_smi_lib ``python_smi_tools/rocm_smi.py`` formatCsv and
ROCm/amdsmi ``amdsmi_cli/amdsmi_logger.py``):

- ``rocm-smi --showuse --showmemuse --showpower [--showmeminfo vram] [--showproductname] --csv`` prints a header
  ``device,<field>,…`` then one ``cardN,…`` row per card, then a blank line; ``N/A`` where a card lacks a
  reading (``N/A (Secondary die)`` for an MI250X's second die's power). Commas inside values are removed, so
  a row splits on every comma. Before the header it may print a ``WARNING: AMD GPU device(s) is/are in a
  low-power state …`` line and a blank one.
- ``amd-smi metric [-u -p -t -m] --csv`` prints ``gpu,<field>,…`` then one row per GPU (``gpu`` = index);
  with ``--watch N`` a ``timestamp`` column (epoch seconds) comes first, after a ``'CTRL' + 'C' to stop
  watching output:`` line. List values (per-engine activity) are quoted and hold commas: they are skipped.

Time. rocm-smi's CSV holds no time, so a log gets it from its wrapper, in one of the shapes found in public
logging scripts (docs/formats-telemetry.md cites them):

- a time line before each block: ``date -Is`` / ``date +%s`` / ``timestamp=2025-03-01T10:00:00.123456789Z``
  / ``=== 2025-03-01T10:00:00Z ===`` (``while :; do date -Is; rocm-smi … --csv; sleep 30; done >> log``);
  every row after it, up to the next time line, is taken at that time;
- a time column the wrapper prefixes to each row (``sed "s/^/$(date +%s),/"`` under a header
  ``epoch,device,…``; ``timestamp``/``time``/``date``/``utc_epoch_s`` name it too), or amd-smi's own;
- neither: a file of ONE block is one poll taken at the file's modification time (said in the report);
  several blocks without a time are refused, as their polls cannot be told apart.

ISO times with an offset (``Z``, ``+02:00``) are exact; naive ones are read in ``--tz`` (default: this
machine's zone); numbers are epoch seconds (UTC).

Fields (matched by name, any order and subset, per block: each block's own header is used):
``GPU use (%)`` / amd-smi ``gfx_activity`` → util_pct; ``GPU memory use (%)`` (rocm-smi before 6.1.2) /
``GPU Memory Read/Write Activity (%)`` / ``umc_activity`` → mem_util_pct: memory-controller busy time, the
reading NVIDIA calls utilization.memory, not memory held (ROCm/rocm_smi_lib b86f922 renamed the first to the
second, "GPU memory use" being ``rsmi_dev_memory_busy_percent_get``); ``VRAM Total Memory (B)`` /
``VRAM Total Used Memory (B)`` (bytes) and amd-smi ``total_vram`` / ``used_vram`` (MiB) → mem_total_mib /
mem_used_mib; ``GPU Memory Allocated (VRAM%)`` (memory held, floored to a whole %) → mem_used_mib =
% × the card's total / 100 only when the file gives that card's total (a partitioned MI300X's share of
HBM is not the catalog's 192 GB), else NULL; ``Average Graphics Package Power (W)`` / ``Current Socket
Graphics Package Power (W)`` / ``socket_power`` → power_w; ``Temperature (Sensor edge) (C)`` / ``edge``,
else the junction (``hotspot``) sensor → temp_c (MI300 reports no edge sensor); ``sclk clock speed:``
(``(1900Mhz)``) / ``gfx_0_clk`` → sm_clock_mhz; ``Accumulated Energy (uJ)`` / 1e6 → energy_j;
``Card Series`` / ``Device Name`` / ``market_name`` → the GPU model (``AMD Instinct MI300X`` → MI300X);
``PCI Bus``; a ``hostname``/``host`` column a wrapper adds. Other fields are counted in the report.

Older amd-smi names, one alias table (:data:`FIELDS`) read from ROCm/amdsmi ``amdsmi_cli/amdsmi_commands.py``
at aa70b77 (CLI 0.0.1, 2023-03) and 6dcfd4a (2023-09), where ``metric --csv`` wrote ``gfx_usage`` (=
``gfx_activity``), ``mem_usage`` (= ``umc_activity``: memory-controller busy %, not memory held),
``mm_usage_list``, ``fb_total`` / ``fb_used`` (= ``vram_total`` / ``vram_used``, MB as the library reports
them, stored as MiB), ``power`` (0.0.1: the average socket power), ``current_power`` / ``average_power`` /
``average_socket_power`` / ``current_socket_power`` (W) and ``edge_temperature`` / ``hotspot_temperature``.
When a header names one reading twice (``current_power`` N/A beside ``average_socket_power`` 61), a row's
value is the first of them that holds one.

GPU identity: ``HOST:BUS`` when the row has a PCI bus, else ``HOST:INDEX`` (the ``cardN`` / ``gpu`` index),
HOST the ``hostname`` column, else ``--host``, else ``localhost``: rocm-smi does not say which machine
wrote it. A card twice at one time is refused with its line.

The whole file is read by DuckDB (``read_text``, split into lines, each line classified by a pattern); a
row's header and time are the nearest header and time line above it (two window maxima), so the parse is
a few set operations whatever the file's length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from collectors.base import IngestOptions, Sniff, quote
from collectors.nvidia_smi_csv import file_time_utc
from collectors.sql_text import NULL_TOKENS, sql_path, ts_utc
from collectors.time_zones import local_zone, session_zone
from collectors.validate import name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.reference import model_sql_case

MIB = 1024.0 * 1024.0

# field name as written, lower-cased with runs of spaces as one → what it is
FIELDS: dict[str, str] = {
    "device": "card",
    "gpu": "card",
    "timestamp": "time",
    "time": "time",
    "date": "time",
    "epoch": "time",
    "utc_epoch_s": "time",
    "hostname": "host",
    "host": "host",
    "gpu use (%)": "util",
    "gfx_activity": "util",
    "gfx_usage": "util",
    "gpu memory use (%)": "mem_util",
    "gpu memory read/write activity (%)": "mem_util",
    "umc_activity": "mem_util",
    "mem_usage": "mem_util",
    "gpu memory allocated (vram%)": "vram_pct",
    "vram total memory (b)": "total_b",
    "vram total used memory (b)": "used_b",
    "total_vram": "total_mib",
    "used_vram": "used_mib",
    "fb_total": "total_mib",
    "fb_used": "used_mib",
    "vram_total": "total_mib",
    "vram_used": "used_mib",
    "average graphics package power (w)": "power",
    "current socket graphics package power (w)": "power",
    "socket_power": "power",
    "current_socket_power": "power",
    "current_power": "power",
    "average_socket_power": "power",
    "average_power": "power",
    "power": "power",
    "temperature (sensor edge) (c)": "temp_edge",
    "edge": "temp_edge",
    "edge_temperature": "temp_edge",
    "temperature (sensor junction) (c)": "temp_junction",
    "hotspot": "temp_junction",
    "hotspot_temperature": "temp_junction",
    "sclk clock speed:": "sclk",
    "gfx_0_clk": "sclk",
    "accumulated energy (uj)": "energy_uj",
    "pci bus": "bus",
    "card series": "name",
    "device name": "name",
    "market_name": "name",
}
NUMERIC = ("util", "mem_util", "vram_pct", "total_b", "used_b", "total_mib", "used_mib", "power")
NUMERIC += ("temp_edge", "temp_junction", "sclk", "energy_uj")
TEXT = ("card", "time", "host", "bus", "name")
# the sample column each reading lands in (its source name goes into plausibility messages)
COLUMN_OF = {
    "util": "util_pct",
    "mem_util": "mem_util_pct",
    "used_b": "mem_used_mib",
    "used_mib": "mem_used_mib",
    "vram_pct": "mem_used_mib",
    "total_b": "mem_total_mib",
    "total_mib": "mem_total_mib",
    "power": "power_w",
    "temp_edge": "temp_c",
    "temp_junction": "temp_c",
    "sclk": "sm_clock_mhz",
    "energy_uj": "energy_j",
    "time": "ts",
}

# A header names the card column (rocm-smi ``device``, amd-smi ``gpu``) as one of its fields.
HEADER_RE = r"(^|,)\s*(device|gpu)\s*(,|$)"
# Lines the tools print around the tables: log messages, banners, amd-smi's watch prompt.
NOTE_RE = r"^(WARNING|ERROR|INFO|DEBUG|CRITICAL)\b|^=+\s*$|^=+[^0-9]*=+$|^\*+|^'CTRL'|end of rocm smi log"
# A wrapper's time line (no comma): ISO-8601 or epoch seconds, optionally ``timestamp=`` / ``=== … ===``.
TIME_LINE_RE = (
    r"^[#=\s]*(?:(?:timestamp|time|date|ts)\s*[=:]\s*)?"
    r"([0-9]{4}-[0-9]{2}-[0-9]{2}[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:[.,][0-9]+)?)?"
    r"(?:\s*Z|\s*[+-][0-9]{2}(?::?[0-9]{2})?)?|[0-9]{9,11}(?:\.[0-9]+)?)[=\s]*$"
)
_NULLS = ", ".join(quote(t) for t in (*NULL_TOKENS, "Unsupported"))


def field_key(name: str) -> str:
    return re.sub(r"\s+", " ", name.strip().strip('"').lower())


def split_fields(line: str) -> list[str]:
    """A line's fields as :func:`_fields_sql` splits them (quoted values, amd-smi's lists, emptied)."""
    return [f.strip() for f in re.sub(r'"[^"]*"', '""', line).split(",")]


def _fields_sql(col: str) -> str:
    return f"""list_transform(string_split(regexp_replace({col}, '"[^"]*"', '""', 'g'), ','), lambda x: trim(x))"""


@dataclass(frozen=True)
class Header:
    """Where each known field sits in one header (1-based positions), and the fields not stored."""

    text: str
    n: int
    pos: dict[str, int]
    names: dict[str, str]  # kind → the field name as written
    ignored: tuple[str, ...]
    every: dict[str, tuple[int, ...]] = field(default_factory=dict)  # kind → each field naming it, in order


def read_header(text: str) -> Header:
    pos: dict[str, int] = {}
    names: dict[str, str] = {}
    every: dict[str, tuple[int, ...]] = {}
    ignored = []
    fields = split_fields(text)
    for i, name in enumerate(fields, start=1):
        kind = FIELDS.get(field_key(name))
        if kind is None:
            ignored.append(name)
            continue
        every[kind] = (*every.get(kind, ()), i)
        if kind not in pos:  # the first of two spellings in one header names it in messages
            pos[kind] = i
            names[kind] = name
    return Header(text, len(fields), pos, names, tuple(ignored), every)


def _value(kind: str) -> str:
    """SQL: a row's reading of ``kind``: the first of the header's fields naming it that holds one (older
    amd-smi writes ``current_power`` N/A beside ``average_socket_power`` 61), NULL when none does."""
    return f"list_filter(list_transform(p_{kind}, lambda i: v[i]), lambda x: NOT {_is_null('x')})[1]"


def _number(v: str) -> str:
    """SQL: a reading → DOUBLE; NULL for the N/A spellings (``N/A (Secondary die)`` too) and unreadable text
    (which :meth:`RocmSmiCsv._first_unreadable` reports first)."""
    return f"(CASE WHEN {_is_null(v)} THEN NULL ELSE TRY_CAST({v} AS DOUBLE) END)"


def _is_null(v: str) -> str:
    return f"({v} IS NULL OR {v} IN ({_NULLS}) OR upper({v}) LIKE 'N/A%')"


def _reading(kind: str, v: str) -> str:
    if kind == "sclk":  # rocm-smi writes the current level's clock as "(1900Mhz)"
        v = f"regexp_replace({v}, '^\\((.*)\\s*[Mm][Hh][Zz]\\)$|^(.*)\\s*[Mm][Hh][Zz]$', '\\1\\2')"
    return _number(v)


class RocmSmiCsv:
    name = "rocm_smi"
    description = "AMD rocm-smi --showuse --showmemuse --showpower --csv log (amd-smi metric --csv too)"

    def sniff(self, path: Path, head: str) -> Sniff:
        for line in head.lstrip("\ufeff").splitlines()[:40]:
            s = line.strip()
            if s and re.search(HEADER_RE, s.lower()):
                header = read_header(s)
                if "card" in header.pos and set(header.pos) & {
                    "util",
                    "mem_util",
                    "power",
                    "vram_pct",
                    "used_b",
                    "used_mib",
                }:
                    return Sniff(0.9)
                if "card" in header.pos:
                    return Sniff(0, "rocm_smi: a device/gpu header without GPU use, memory or power fields")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        con.execute(
            f"""CREATE TEMP TABLE rs_lines AS
                SELECT line_no, s, CASE
                    WHEN s = '' THEN 'blank'
                    WHEN regexp_matches(s, {quote(NOTE_RE)}, 'i') THEN 'note'
                    WHEN NOT contains(s, ',') AND regexp_matches(s, {quote(TIME_LINE_RE)}, 'i') THEN 'time'
                    WHEN regexp_matches(lower(s), {quote(HEADER_RE)}) THEN 'header'
                    ELSE 'row' END AS kind
                FROM (SELECT generate_subscripts(parts, 1) AS line_no,
                             trim(ltrim(rtrim(unnest(parts), chr(13)), chr(65279))) AS s
                      FROM (SELECT string_split(content, chr(10)) AS parts FROM read_text({sql_path(path)})))"""
        )
        con.execute(
            """CREATE TEMP TABLE rs_marked AS
               SELECT line_no, s, kind,
                      max(CASE WHEN kind = 'header' THEN line_no END) OVER w AS hdr_line,
                      max(CASE WHEN kind = 'time' THEN line_no END) OVER w AS time_line
               FROM rs_lines WINDOW w AS (ORDER BY line_no ROWS UNBOUNDED PRECEDING)"""
        )
        orphan = con.execute(
            "SELECT min(line_no) FROM rs_marked WHERE kind = 'row' AND hdr_line IS NULL"
        ).fetchall()[0][0]
        if orphan is not None:
            raise FormatError(
                path, int(orphan), "a data line before any header (rocm-smi 'device,…' or amd-smi 'gpu,…')"
            )
        texts = [
            r[0] for r in con.execute("SELECT DISTINCT s FROM rs_lines WHERE kind = 'header'").fetchall()
        ]
        if not texts:
            raise FormatError(path, None, "no rocm-smi or amd-smi CSV header (device,… or gpu,…)")
        headers = [read_header(t) for t in texts]
        kinds = sorted({k for h in headers for k in h.pos})
        con.execute(
            "CREATE TEMP TABLE rs_hdr (hdr_text VARCHAR, n INTEGER, "
            + ", ".join(f"p_{k} INTEGER[]" for k in kinds)
            + ")"
        )
        con.executemany(
            f"INSERT INTO rs_hdr VALUES ({', '.join('?' * (2 + len(kinds)))})",
            [[h.text, h.n, *(list(h.every[k]) if k in h.every else None for k in kinds)] for h in headers],
        )
        con.execute(
            f"""CREATE TEMP TABLE rs_rows AS
                SELECT r.line_no, r.hdr_line, h.*, t.s AS time_text, {_fields_sql("r.s")} AS v
                FROM rs_marked r JOIN rs_lines hl ON hl.line_no = r.hdr_line
                JOIN rs_hdr h ON h.hdr_text = hl.s LEFT JOIN rs_lines t ON t.line_no = r.time_line
                WHERE r.kind = 'row'"""
        )
        rows = int(con.execute("SELECT count(*) FROM rs_rows").fetchall()[0][0])
        if rows == 0:
            raise FormatError(path, None, "a header but no card rows (a truncated log?)")
        short = con.execute(
            "SELECT line_no, hdr_line, n, len(v) FROM rs_rows WHERE len(v) <> n ORDER BY line_no LIMIT 1"
        ).fetchall()
        if short:
            line, hdr, n, got = short[0]
            raise FormatError(
                path, int(line), f"the header at line {hdr} names {n} fields but this line has {got} values"
            )
        self._check_values(con, path, kinds, headers)
        ts, by_mtime = self._time_sql(con, path, kinds)
        zone = opts.tz or local_zone()
        with session_zone(con, zone):
            self._stage_samples(con, path, opts, kinds, ts)
        self._stage_gpus(con, opts, kinds)
        names: dict[str, str] = {}
        for h in headers:
            for kind, name in h.names.items():
                if kind in COLUMN_OF:
                    names.setdefault(COLUMN_OF[kind], name)
        name_columns(con, "samples", names)
        for t in ("rs_rows", "rs_marked", "rs_hdr", "rs_lines"):
            con.execute(f"DROP TABLE temp.{t}")
        notes = self._notes(headers, rows)
        if by_mtime:  # stored, timed by the file: not a skip (docs/formats-telemetry.md says so)
            notes["rows timed by the file's modification time (no time in the log)"] = rows
        return notes

    @staticmethod
    def _v(kind: str, kinds: list[str]) -> str:
        return _value(kind) if kind in kinds else "NULL::VARCHAR"

    def _check_values(
        self, con: duckdb.DuckDBPyConnection, path: Path, kinds: list[str], headers: list[Header]
    ) -> None:
        """The first reading that is neither a number nor an N/A spelling, and the first card that is no
        ``cardN`` / index, are errors naming their line."""
        if "card" not in kinds:
            raise FormatError(path, None, "no device/gpu column")
        # (the position of the first bad field of a row, what is wrong with it)
        checks = [
            (
                "CASE WHEN regexp_extract(v[p_card[1]], '^(?:card)?([0-9]{1,5})$', 1) = '' THEN p_card[1] END",
                "the card is {value!r}, not cardN or a GPU index",
            )
        ]
        checks += [
            (
                f"list_filter(p_{k}, lambda i: NOT {_is_null('v[i]')} AND {_reading(k, 'v[i]')} IS NULL)[1]",
                "{name} is {value!r}, not a number",
            )
            for k in kinds
            if k in NUMERIC
        ]
        for bad, reason in checks:
            hit = con.execute(
                f"SELECT line_no, hdr_text, pos, v[pos] FROM (SELECT *, {bad} AS pos FROM rs_rows) "
                "WHERE pos IS NOT NULL ORDER BY line_no LIMIT 1"
            ).fetchall()
            if hit:
                line, text, p, value = hit[0]
                name = split_fields(text)[int(p) - 1]
                raise FormatError(path, int(line), reason.format(name=name, value=value))

    def _time_sql(self, con: duckdb.DuckDBPyConnection, path: Path, kinds: list[str]) -> tuple[str, bool]:
        """SQL for a row's time (its time column, else the time line above it), or the file's modification
        time for a file of one untimed block; several untimed blocks are refused."""
        col = f"nullif(trim({self._v('time', kinds)}), '')"
        line = f"replace(regexp_extract(time_text, {quote(TIME_LINE_RE)}, 1, 'i'), ',', '.')"
        timed = con.execute(
            f"SELECT count(*) FILTER ({col} IS NOT NULL OR time_text IS NOT NULL) FROM rs_rows"
        ).fetchall()[0][0]
        if timed == 0:
            second = con.execute(
                "SELECT line_no FROM rs_lines WHERE kind = 'header' ORDER BY line_no LIMIT 1 OFFSET 1"
            ).fetchall()
            if second:
                raise FormatError(
                    path,
                    int(second[0][0]),
                    "a second rocm-smi block, but the log holds no time (rocm-smi's CSV has none): write one "
                    "before each block (while :; do date -Is; rocm-smi … --csv; sleep 30; done) or prefix "
                    "each row with one (epoch,device,… header)",
                )
            return file_time_utc(path), True
        return f"coalesce({ts_utc(col)}, {ts_utc(line)})", False

    def _stage_samples(
        self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions, kinds: list[str], ts: str
    ) -> None:
        def num(kind: str) -> str:
            return _reading(kind, _value(kind)) if kind in kinds else "NULL::DOUBLE"

        host = f"coalesce(nullif({self._v('host', kinds)}, ''), {quote(opts.host or 'localhost')})"
        bus = f"CASE WHEN NOT {_is_null(self._v('bus', kinds))} THEN {self._v('bus', kinds)} END"
        index = "CAST(regexp_extract(v[p_card[1]], '^(?:card)?([0-9]{1,5})$', 1) AS INTEGER)"
        con.execute(
            f"""CREATE TEMP TABLE rs_read AS
                SELECT line_no, {ts} AS ts, {host} AS host, {index} AS gpu_index, {bus} AS bus,
                       CASE WHEN NOT {_is_null(self._v("name", kinds))} THEN {self._v("name", kinds)} END AS name,
                       {num("util")} AS util, {num("mem_util")} AS mem_util, {num("vram_pct")} AS vram_pct,
                       coalesce({num("total_b")} / {MIB}, {num("total_mib")}) AS total,
                       coalesce({num("used_b")} / {MIB}, {num("used_mib")}) AS used,
                       {num("power")} AS power, coalesce({num("temp_edge")}, {num("temp_junction")}) AS temp,
                       {num("sclk")} AS sclk, {num("energy_uj")} / 1e6 AS energy
                FROM rs_rows"""
        )
        untimed = con.execute("SELECT min(line_no) FROM rs_read WHERE ts IS NULL").fetchall()[0][0]
        if untimed is not None:
            raise FormatError(
                path,
                int(untimed),
                "no time for this row: its time column is unreadable or empty, and no time line (date -Is) "
                "comes before its block",
            )
        con.execute(
            """CREATE TEMP TABLE stage_samples AS
                SELECT ts, gpu_id,
                       util::DOUBLE AS util_pct, mem_util::DOUBLE AS mem_util_pct,
                       -- memory held: bytes or MiB as reported, else VRAM% of the card's own total
                       coalesce(used, vram_pct / 100.0 * card_total)::DOUBLE AS mem_used_mib,
                       total::DOUBLE AS mem_total_mib, power::DOUBLE AS power_w, energy::DOUBLE AS energy_j,
                       temp::DOUBLE AS temp_c, sclk::DOUBLE AS sm_clock_mhz, line_no,
                       host, gpu_index, name
                FROM (SELECT *, max(total) OVER (PARTITION BY gpu_id) AS card_total
                      FROM (SELECT *, host || ':' || coalesce(bus, CAST(gpu_index AS VARCHAR)) AS gpu_id
                            FROM rs_read))
                ORDER BY line_no"""
        )
        con.execute("DROP TABLE temp.rs_read")
        dup = con.execute(
            """SELECT line_no, gpu_id, ts FROM (
                   SELECT line_no, gpu_id, ts, row_number() OVER (PARTITION BY gpu_id, ts ORDER BY line_no) AS k
                   FROM stage_samples) WHERE k > 1 ORDER BY line_no LIMIT 1"""
        ).fetchall()
        if dup:
            line, gpu, at = dup[0]
            raise FormatError(
                path,
                int(line),
                f"card {gpu} a second time at {at} UTC: two blocks share one time (a time line missing?)",
            )

    @staticmethod
    def _stage_gpus(con: duckdb.DuckDBPyConnection, opts: IngestOptions, kinds: list[str]) -> None:
        """One row per card: its latest host and index, the name most of its rows give, its largest total."""
        cluster = quote(opts.cluster) if opts.cluster else "NULL"
        con.execute(
            f"""CREATE TEMP TABLE stage_gpus AS
                SELECT gpu_id, NULL::VARCHAR AS uuid, host, gpu_index, {model_sql_case("model_raw")} AS model,
                       model_raw, memory_total_mib, {cluster}::VARCHAR AS cluster, first_seen, last_seen
                FROM (SELECT gpu_id, arg_max(host, ts) AS host, arg_max(gpu_index, ts) AS gpu_index,
                             mode(name) AS model_raw, max(mem_total_mib)::DOUBLE AS memory_total_mib,
                             min(ts) AS first_seen, max(ts) AS last_seen
                      FROM stage_samples GROUP BY gpu_id)"""
        )
        for col in ("host", "gpu_index", "name"):
            con.execute(f"ALTER TABLE stage_samples DROP COLUMN {col}")

    @staticmethod
    def _notes(headers: list[Header], rows: int) -> dict[str, int]:
        ignored = sorted({name for h in headers for name in h.ignored})
        if not ignored:
            return {}
        shown = ", ".join(ignored[:8]) + (f" and {len(ignored) - 8} more" if len(ignored) > 8 else "")
        return {f"fields not stored: {shown}": rows}
