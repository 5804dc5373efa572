"""nvidia-smi ``--query-gpu`` and ``--query-compute-apps`` CSV logs.

What ``nvidia-smi --query-gpu=FIELDS --format=csv[,noheader][,nounits] -l N`` writes: a header naming the
fields (with units in brackets, ``utilization.gpu [%]``) unless ``noheader``, then one line per GPU per poll,
values separated by ``", "``, with units (``96 %``, ``17959 MiB``, ``305.81 W``) unless ``nounits``, and
``[N/A]`` / ``[Not Supported]`` where a GPU lacks a sensor. Timestamps are the host's local time
(``2026/01/03 15:36:53.507``) unless a wrapper script wrote ISO-8601 with an offset.

Fields read (any order, any subset; ``--columns`` names them for a header-less file and overrides a header
that does not match its values): timestamp, index, uuid, name, pci.bus_id, hostname (not an nvidia-smi field:
wrapper scripts add it), utilization.gpu → util_pct, utilization.memory → mem_util_pct, memory.used →
mem_used_mib, memory.total → mem_total_mib (else used + memory.free), power.draw / power.draw.average /
power.draw.instant → power_w (first present, in that order), temperature.gpu → temp_c, clocks.sm → sm_clock_mhz,
clocks_event_reasons.active / clocks_throttle_reasons.active → throttle_reasons, total_energy_consumption
(mJ) → energy_j. Other fields are ignored and named in the report.

GPU identity: ``uuid`` when the file has it; else ``HOST:INDEX`` where HOST is the ``hostname`` column, else
``--host`` (a CSV does not say which machine wrote it, so two machines' ``localhost:0`` would be one GPU),
else ``localhost``; else ``HOST:BUS`` from ``pci.bus_id``; a file with none of the three is one GPU, ``HOST:0``,
and is refused when its rows show several cards (two rows at one time, or rows that come in bursts of a
poll, :func:`_interleaved`).

A header is a first line that names at least one known field and holds no value, whatever the share of
names gpuledger does not read (a log of every ``--query-gpu`` field); those columns are counted in the report. Naive times are read in
``--tz`` (default: this machine's zone) and stored as UTC.

Speed (docs/PERF-NOTES): DuckDB's reader splits on the two-byte delimiter ``", "`` and types the timestamp and
the index; units are stripped with ``replace`` inside ``TRY_CAST``; everything lands in one
``CREATE TABLE … AS SELECT``. Values that are neither numbers nor N/A tokens are found by a second, pure-parse
pass that only runs when the typed columns hold NULLs. What is one value per GPU stays out of the staged rows
(a name is a one-byte code, a row's line is its rowid plus a base), and a header repeated past the file's head
(``nvidia-smi … >> log`` in a shell loop) is looked for in the whole file only when the typed read fails on one
or nothing is typed.
"""

from __future__ import annotations

import datetime as dt
import re
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

import duckdb

from collectors.base import HEAD_BYTES, IngestOptions, Sniff, quote, read_head
from collectors.nvidia_smi_layout import (
    APP_FIELDS,
    GPU_FIELDS,
    SMI_TS,
    SMI_TS_FORMAT,
    Field,
    Layout,
    _first_lines,
    _header_repeats,
    _raw_name,
    field_key,
    header_again,
    ignored_notes,
    map_fields,
    read_layout,
    split_header,
)
from collectors.reader_errors import Restage
from collectors.sql_text import NULL_TOKENS, sql_path
from collectors.time_zones import local_zone, resolve_fall_back
from collectors.validate import line_sql, lines_by_rowid, name_columns
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.reference import model_sql_case

_NULLS = ", ".join(quote(t) for t in NULL_TOKENS)


# Sample columns computed from several fields, in priority order.
_COALESCE = {"power_w": ("power_draw_w", "power_avg_w", "power_inst_w")}


NAME_NULL = 255  # the name_code of a row whose name is NULL (an N/A token, in a padded file)
MAX_NAME_CODES = 250


def _name_codes(path: Path, layout: Layout, col: Columns) -> list[str] | None:
    """The distinct GPU names of the file's head, as the stage reads them, for a one-byte ``name_code``.

    A node's nvidia-smi log names a handful of models, and the head shows them all; a name it does not show
    (files of several nodes one after the other) gets code 0 and goes in as read (``name_other``), so a wrong
    guess costs a few bytes on those rows, never a name. None when the head shows none, or too many to code."""
    idx = col.fields["name"][0]
    head = read_head(path)
    lines = head.lstrip("\ufeff").splitlines()[layout.header_lines :]
    if len(head) >= HEAD_BYTES // 4:
        lines = lines[:-1]  # the head may end inside a line
    names: dict[str, None] = {}
    for line in lines:
        values = line.split(layout.delim)
        if len(values) != len(layout.names):
            continue
        value = values[idx]
        if col.padded:
            value = value.strip(" ")
            if value in NULL_TOKENS:
                continue
        names[value] = None
    return list(names) if 0 < len(names) <= MAX_NAME_CODES else None


def _read_csv_sql(path: Path, layout: Layout, types: dict[int, str], *, keep_headers: bool = False) -> str:
    """DuckDB's reader over the file: columns c0..cN, typed where ``types`` says, else VARCHAR.

    When the header repeats (``repeated_header``; every column is then VARCHAR, as a header line is no
    number), the repeated header lines are dropped and ``__line`` gives each row its line in the file,
    unless ``keep_headers`` (first_bad counts them itself)."""
    cols = ", ".join(f"'{_raw_name(i)}': '{types.get(i, 'VARCHAR')}'" for i in range(len(layout.names)))
    fmt = f", timestampformat='{SMI_TS_FORMAT}'" if any(t == "TIMESTAMP" for t in types.values()) else ""
    reader = (
        f"read_csv({sql_path(path)}, delim={quote(layout.delim)}, header={layout.header_lines == 1}, "
        f"auto_detect=false, columns={{{cols}}}, quote='', escape='', strict_mode=true, "
        f"null_padding=false{fmt})"
    )
    if not layout.repeated_header or keep_headers:
        return reader
    return (
        f"(SELECT * FROM (SELECT row_number() OVER () + {layout.header_lines} AS __line, * FROM {reader}) "
        f"WHERE NOT {header_again(layout)})"
    )


def number_lines(con: duckdb.DuckDBPyConnection, table: str, layout: Layout) -> None:
    """Give each staged row of ``table`` its line in the file.

    A repeated header drops lines, so its rows carry the ``__line`` the reader numbered (renamed
    ``line_no``). Otherwise the rows are the file's lines in order: a ``CREATE TABLE AS`` keeps the reader's
    order (``preserve_insertion_order``, DuckDB's default) and numbers a new table's rows consecutively, so
    a row's line is its ``rowid`` plus a base (collectors/validate.py ``lines_by_rowid``). A column of line
    numbers cost an UPDATE of every row (2 M rows: 0.15 s) and memory the stage then spilled;
    ``row_number() OVER ()`` inside the statement made DuckDB read the file on one thread (4.6 s against 2.1 s).
    """
    if layout.repeated_header:
        con.execute(f"ALTER TABLE {table} RENAME COLUMN __line TO line_no")
        return
    lines_by_rowid(con, table, 1 + layout.header_lines)


class Columns:
    """SQL for each field of one file: text, numbers with units stripped, times in UTC, and bad-value tests."""

    def __init__(self, path: Path, layout: Layout, fields: dict[str, tuple[int, Field, str | None]]):
        self.path = path
        self.layout = layout
        self.fields = fields
        self.padded = layout.delim == ","  # values may carry leading spaces
        self.types: dict[int, str] = {}
        if layout.repeated_header:
            return  # a repeated header line is text in every column: the reader types nothing
        if layout.smi_ts and "ts" in fields:
            self.types[fields["ts"][0]] = "TIMESTAMP"
        if "gpu_index" in fields and not self.padded:
            self.types[fields["gpu_index"][0]] = "INTEGER"

    def raw(self, target: str) -> str:
        return _raw_name(self.fields[target][0])

    def name(self, target: str) -> str:
        return self.layout.names[self.fields[target][0]]

    def text(self, target: str) -> str:
        if target not in self.fields:
            return "NULL::VARCHAR"
        r = self.raw(target)
        return f"(CASE WHEN trim({r}) IN ({_NULLS}) THEN NULL ELSE trim({r}) END)"

    def integer(self, target: str) -> str:
        if target not in self.fields:
            return "NULL::INTEGER"
        if self.fields[target][0] in self.types:
            return self.raw(target)
        return f"TRY_CAST(trim({self.raw(target)}) AS INTEGER)"

    def number(self, target: str) -> str:
        """A unit-stripping TRY_CAST; the factor converts to the canonical unit."""
        _, field, unit = self.fields[target]
        val = f"trim({self.raw(target)})" if self.padded else self.raw(target)
        if field.units is None:  # a hex bitmask such as 0x0000000000000004
            return f"TRY_CAST({val} AS UBIGINT)"
        if unit is not None and unit not in field.units:
            raise FormatError(
                self.path,
                1,
                f"column {self.name(target)!r} is in {unit!r}; expected one of {', '.join(field.units)}",
            )
        suffix = unit or next(iter(field.units))
        factor = field.units[suffix]
        expr = f"TRY_CAST(replace({val}, {quote(' ' + suffix)}, '') AS DOUBLE)"
        return expr if factor == 1.0 else f"({expr} * {factor})"

    def ts(self, zone: str) -> str:
        """The time as naive UTC: naive local times are read in ``zone``, ISO offsets win over it.

        The zone is applied with ``timezone(zone, ts)`` rather than the session's TimeZone setting, so
        nothing is left to reset when a bad file aborts the transaction.
        """
        r = self.raw("ts")
        z = quote(zone)
        if self.fields["ts"][0] in self.types:
            return r if zone == "UTC" else f"timezone('UTC', timezone({z}, {r}))"
        return self.ts_text(zone)

    def has_offset(self) -> str:
        """SQL: the time as written carries its own UTC offset (ISO ``Z``, ``+08:00``, ``-0500``)."""
        return (
            f"regexp_matches(replace(trim({self.raw('ts')}), '/', '-'), '(Z|[+-][0-9]{{2}}(:?[0-9]{{2}})?)$')"
        )

    def ts_text(self, zone: str) -> str:
        r = self.raw("ts")
        z = quote(zone)
        v = f"replace(trim({r}), '/', '-')"
        return f"""(CASE WHEN {self.has_offset()}
                    THEN timezone('UTC', TRY_CAST({v} AS TIMESTAMPTZ))
                    ELSE timezone('UTC', timezone({z}, TRY_CAST({v} AS TIMESTAMP))) END)"""

    def bad(self, target: str) -> str:
        """True for a raw text value that cannot be read (the all-VARCHAR pass); N/A tokens are fine
        except for the timestamp, which every row needs."""
        r = self.raw(target)
        missing = f"{r} IS NULL OR trim({r}) IN ({_NULLS})"
        if target == "ts":
            return f"({missing} OR {self.ts_text('UTC')} IS NULL)"
        if target == "pid":
            return f"({missing} OR TRY_CAST(trim({r}) AS BIGINT) IS NULL)"
        if self.fields[target][1].units is None and target != "throttle_reasons":
            return f"({missing})"  # a required text field
        plain = Columns(self.path, self.layout, self.fields)
        plain.types = {}
        return f"(trim({r}) NOT IN ({_NULLS}) AND {plain.number(target)} IS NULL)"


def check_zone(con: duckdb.DuckDBPyConnection, zone: str) -> None:
    try:
        con.execute("SELECT timezone(?, TIMESTAMP '2000-01-01')", [zone]).fetchall()
    except duckdb.Error as exc:
        raise FormatError("--tz", None, f"unknown time zone {zone!r}") from exc


def null_counts(con: duckdb.DuckDBPyConnection, table: str, cols: list[str]) -> dict[str, int]:
    """NULLs per column of ``table``, and its rows under ``"*"``."""
    sql = ", ".join(["count(*)", *(f"count(*) - count({c})" for c in cols)])
    row = con.execute(f"SELECT {sql} FROM {table}").fetchall()[0]
    return {c: int(n) for c, n in zip(["*", *cols], row, strict=True)}


def first_bad(con: duckdb.DuckDBPyConnection, cols: Columns, targets: list[str]) -> None:
    """Raise for the first value (in file order) that is neither readable nor an N/A token.

    A pure parse of the file with every column as text; it runs only when the typed stage holds NULLs,
    so a clean file never pays for it.
    """
    arms = [cols.bad(t) for t in targets]
    cases = " ".join(f"WHEN {a} THEN {i}" for i, a in enumerate(arms))
    cases = f"WHEN {header_again(cols.layout)} THEN NULL {cases}"
    source = _read_csv_sql(cols.path, cols.layout, {}, keep_headers=True)
    found = con.execute(
        f"""SELECT rn, which, val FROM (
                SELECT rn, CASE {cases} END AS which,
                       [{", ".join(cols.raw(t) for t in targets)}][which + 1] AS val
                FROM (SELECT row_number() OVER () AS rn, * FROM {source}))
            WHERE which IS NOT NULL ORDER BY rn LIMIT 1"""
    ).fetchall()
    if found:
        rn, which, val = found[0]
        target = targets[int(which)]
        what = {"ts": "a time", "gpu_uuid": "a GPU UUID"}.get(target, "a number")
        shown = "" if val is None else val.strip()
        raise FormatError(
            cols.path,
            int(rn) + cols.layout.header_lines,
            f"column {cols.name(target)!r} is not {what}: {shown!r}",
        )


def _reader_error(path: Path, exc: duckdb.Error) -> FormatError:
    """DuckDB's reader message → FILE:LINE: one sentence."""
    text = str(exc)
    m = re.search(r"Line: (\d+)", text)
    line = int(m.group(1)) if m else None
    found = re.search(r"Expected Number of Columns: (\d+) Found: (\d+)", text)
    if found:
        return FormatError(
            path,
            line,
            f"expected {found.group(1)} values, found {found.group(2)} (a truncated or mixed file?)",
        )
    col = re.search(r'converting column "c(\d+)"', text)
    value = re.search(r'Could not convert string "([^"]*)"', text)
    if col and value:
        return FormatError(path, line, f"column {int(col.group(1)) + 1} is not valid: {value.group(1)!r}")
    return FormatError(path, line, text.split("\n")[0][:300])


def _sample_col(target: str) -> str:
    """The sample column a field feeds (several power fields feed one column)."""
    return {
        "power_draw_w": "power_w",
        "power_avg_w": "power_w",
        "power_inst_w": "power_w",
        "mem_free_mib": "mem_total_mib",
    }.get(target, target)


BURST_RATIO = 20  # a gap this many times shorter than the one beside it is a row of the same poll
BURST_SHARE = 0.1  # of a GPU's gaps: 2 of every k in a poll of k GPUs (k = 16: 0.125); pauses are rarer


def _interleaved(con: duckdb.DuckDBPyConnection, line: str) -> tuple[int, float, float] | None:
    """(line, short gap ms, long gap s) where one GPU's rows alternate between gaps at least BURST_RATIO
    apart in at least BURST_SHARE of its gaps (and twice), else None.

    One card polled at a steady cadence has gaps alike, save a pause now and then; several cards in one
    log without an identity column read as one card whose rows come k in a burst, then the interval."""
    found = con.execute(
        f"""WITH g AS (SELECT gpu_id, ts, {line} AS line, epoch(ts - lag(ts) OVER w) AS gap
                       FROM stage_samples WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)),
                 p AS (SELECT gpu_id, line, gap, lead(gap) OVER w AS after, lag(gap) OVER w AS before
                       FROM g WHERE gap IS NOT NULL WINDOW w AS (PARTITION BY gpu_id ORDER BY ts)),
                 j AS (SELECT gpu_id, line, gap, greatest(after, before) AS beside,
                              greatest(after, before) >= {BURST_RATIO} * gap AS burst FROM p)
            SELECT arg_min(line, line) FILTER (WHERE burst), arg_min(gap, line) FILTER (WHERE burst),
                   arg_min(beside, line) FILTER (WHERE burst)
            FROM j GROUP BY gpu_id
            HAVING count(*) FILTER (WHERE burst) >= greatest(2, {BURST_SHARE} * count(*))
            ORDER BY 1 LIMIT 1"""
    ).fetchall()
    if not found:
        return None
    line_no, gap, beside = found[0]
    return int(line_no), round(gap * 1000, 3), round(beside, 3)


def _count(con: duckdb.DuckDBPyConnection, sql: str) -> int:
    return int(con.execute(sql).fetchall()[0][0])


class NvidiaSmiCsv:
    """``nvidia-smi --query-gpu=... --format=csv`` logs → samples and GPUs."""

    name = "nvidia_smi_csv"
    description = "nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits] -l N (GPU telemetry log)"

    def sniff(self, path: Path, head: str) -> Sniff:
        lines = _first_lines(head)
        if not lines:
            return Sniff(0)
        names = [field_key(split_header(c)[0]) for c in lines[0].split(",")]
        known = [n for n in names if n in GPU_FIELDS]
        telemetry = [n for n in known if GPU_FIELDS[n].units is not None]
        if "timestamp" in names and telemetry and not {"pid", "usedgpumemory", "usedmemory"} & set(names):
            return Sniff(0.9 if len(known) == len(names) else 0.7)
        if SMI_TS.match(lines[0].split(", ")[0].strip()):
            return Sniff(0.6)  # header-less nvidia-smi output; needs --columns
        if telemetry:
            return Sniff(0, "nvidia_smi_csv: header has GPU fields but no timestamp column")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        # Whether the header comes back past the head is a scan of the whole file (2 M rows: 0.28 s). When the
        # reader types the timestamp or the index, a header line there fails the read, so the scan runs only
        # then (and the file is staged again, :class:`Restage`); a reader that types nothing would read a
        # header line as values, so then it runs first.
        layout = read_layout(path, GPU_FIELDS, opts.columns, past_head=False)
        if opts.header_repeats is not None and layout.header_lines:
            layout = replace(layout, repeated_header=opts.header_repeats or layout.repeated_header)
        fields, ignored = map_fields(layout, GPU_FIELDS)
        if "ts" not in fields:
            raise FormatError(path, 1, "no timestamp column: add timestamp to --query-gpu")
        numeric = [t for t, (_, f, _) in fields.items() if f.units is not None or t == "throttle_reasons"]
        if not numeric:
            raise FormatError(path, 1, "no telemetry column (utilization, memory, power, ...)")
        col = Columns(path, layout, fields)
        look_later = layout.header_lines and not layout.repeated_header and opts.header_repeats is None
        if look_later and not col.types:
            layout = replace(layout, repeated_header=_header_repeats(path, layout.header_line))
            col = Columns(path, layout, fields)
            look_later = False
        typed = {t: col.number(t) for t in numeric}
        zone = opts.tz or local_zone()
        host_sql = f"coalesce({col.text('host')}, {quote(opts.host or 'localhost')})"
        gpu_id = f"{host_sql} || ':' || coalesce({col.integer('gpu_index')}, 0)"
        if "gpu_index" not in fields and "bus_id" in fields:
            # no uuid and no index: the PCI bus id tells a node's cards apart (HOST:00000000:3B:00.0)
            gpu_id = f"{host_sql} || ':' || coalesce({col.text('bus_id')}, '0')"
        if "uuid" in fields:
            gpu_id = f"coalesce({col.text('uuid')}, {gpu_id})"
            # a value as nvidia-smi writes it (GPU-…, nothing to trim, no N/A token) is taken as read:
            # trimming and testing 2 M ids against the N/A tokens was ~8 % of the stage's CPU
            raw = col.raw("uuid")
            gpu_id = f"(CASE WHEN starts_with({raw}, 'GPU-') AND NOT ends_with({raw}, ' ') THEN {raw} ELSE {gpu_id} END)"
        mem_total = typed.get("mem_total_mib", "NULL")
        if "mem_free_mib" in typed and "mem_used_mib" in typed:
            mem_total = f"coalesce({mem_total}, {typed['mem_used_mib']} + {typed['mem_free_mib']})"
        power = [typed[c] for c in _COALESCE["power_w"] if c in typed]
        select = {
            "ts": col.ts(zone),
            "gpu_id": gpu_id,
            "util_pct": typed.get("util_pct", "NULL"),
            "mem_util_pct": typed.get("mem_util_pct", "NULL"),
            "mem_used_mib": typed.get("mem_used_mib", "NULL"),
            "mem_total_mib": mem_total,
            "power_w": f"coalesce({', '.join(power)})" if power else "NULL",
            "energy_j": typed.get("energy_j", "NULL"),
            "temp_c": typed.get("temp_c", "NULL"),
            "sm_clock_mhz": typed.get("sm_clock_mhz", "NULL"),
            "throttle_reasons": typed.get("throttle_reasons", "NULL"),
        }
        # a column the file does not have is not staged (the landing writes NULL for it): 2 M rows of two
        # NULL columns were 32 MB more for the stage to hold, or to spill under the writer's memory limit
        select = {c: v for c, v in select.items() if v != "NULL"}
        casts = {"ts": "TIMESTAMP", "gpu_id": "VARCHAR", "throttle_reasons": "UBIGINT"}
        body = ", ".join(f"CAST({sql} AS {casts.get(c, 'DOUBLE')}) AS {c}" for c, sql in select.items())
        # What is one value per GPU is not copied into every staged row: the name goes in as a one-byte code
        # (the names the file's head shows, _name_codes; a name it did not show goes in as read, in
        # name_other, NULL on every other row: one read of the file whatever the head shows), the uuid is the
        # gpu_id, a host that is no column is a constant; all three are taken per GPU in _stage_gpus (2 M rows:
        # about 1 CPU-second and 60 bytes a row less than trimming each row's name and uuid; the name as
        # read was another 37 bytes a row, which the stage spilled under the writer's memory limit).
        name_sql = (col.text("name") if col.padded else col.raw("name")) if "name" in fields else "NULL"
        codes = _name_codes(path, layout, col) if "name" in fields else None

        per_row = [f"{col.integer('gpu_index')} AS gpu_index"]
        if col.fields["ts"][0] not in col.types:
            per_row.append(f"NOT {col.has_offset()} AS ts_naive")  # for resolve_fall_back
        if layout.repeated_header:
            per_row.append("__line")
        if codes is not None:
            arms = " ".join(f"WHEN {quote(n)} THEN {k}" for k, n in enumerate(codes, start=1))
            coded = (
                f"CASE {name_sql} {arms} ELSE (CASE WHEN {name_sql} IS NULL THEN {NAME_NULL} ELSE 0 END) END"
            )
            per_row.append(f"({coded})::UTINYINT AS name_code")
            per_row.append(f"CASE WHEN name_code = 0 THEN {name_sql} END AS name_other")
        elif "name" in fields:
            per_row.append(f"{name_sql} AS name")
        if "host" in fields:
            per_row.append(f"{host_sql} AS host")
        extras = ", ".join(per_row)
        check_zone(con, zone)
        try:
            con.execute(
                f"CREATE TEMP TABLE stage_samples AS SELECT {body}, {extras} "
                f"FROM {_read_csv_sql(path, layout, col.types)}"
            )
        except duckdb.Error as exc:
            if look_later and _header_repeats(path, layout.header_line):
                raise Restage(header_repeats=True) from None
            raise _reader_error(path, exc) from None
        number_lines(con, "stage_samples", layout)
        # before anything reads the times: a repeated hour read as one would look like two rows per GPU
        # (times as text may carry their own offset, row by row: those stay as they are)
        naive = None if col.fields["ts"][0] in col.types else "ts_naive"
        repeated = resolve_fall_back(con, "stage_samples", zone, "gpu_id", naive=naive)
        names: dict[str, str] = {}
        for t in ["ts", *(n for n in numeric if n != "mem_free_mib")]:
            names.setdefault(_sample_col(t), split_header(col.name(t))[0].strip())
        name_columns(con, "samples", names)
        counted = null_counts(con, "stage_samples", [c for c in select if c != "gpu_id"])
        rows = counted["*"]
        nulls = defaultdict(lambda: rows, counted)  # a column not staged is NULL in every row
        suspects = [t for t in ["ts", *numeric] if nulls[_sample_col(t)]]
        if suspects:
            first_bad(con, col, suspects)
        if "uuid" not in fields:
            ident = next((fields[t][0] for t in ("gpu_index", "bus_id") if t in fields), None)
            self._check_identity(con, path, layout, ident)
        self._stage_gpus(con, opts, fields, codes)
        notes = {
            f"{layout.names[i]}: [N/A] stored as NULL": nulls[_sample_col(t)]
            for t, (i, _, _) in fields.items()
            if t in numeric and nulls[_sample_col(t)]
        }
        notes.update(ignored_notes(ignored, rows))
        if repeated:
            notes[
                f"local times in the hour the clocks went back ({zone}): put on its two passes by file order"
            ] = repeated
        return notes

    @staticmethod
    def _check_identity(con: duckdb.DuckDBPyConnection, path: Path, layout: Layout, idx: int | None) -> None:
        """Refuse a file whose rows cannot be told apart per GPU.

        Two rows for one GPU at one time mean the identity column (``idx``: index, else pci.bus_id) does not
        say which GPU a row is. Without any identity column, a log of several GPUs shows as one GPU whose
        rows come in bursts: nvidia-smi writes one row per GPU milliseconds apart, then waits its interval
        (``_interleaved``). Read as one GPU, each sample would last the few ms to the next card's row."""
        line = line_sql(con, "stage_samples", "stage_samples")
        dup = con.execute(
            f"""SELECT gpu_id, ts, max({line}) FROM stage_samples GROUP BY gpu_id, ts HAVING count(*) > 1
               ORDER BY 3 LIMIT 1"""
        ).fetchall()
        advice = "add uuid (or index, pci.bus_id) to --query-gpu"
        if dup and idx is None:
            raise FormatError(
                path,
                int(dup[0][2]) if dup[0][2] is not None else None,  # the second row of that time
                f"several rows at {dup[0][1]} UTC but no uuid, index or pci.bus_id column says which GPU "
                f"each is: {advice}",
            )
        if dup:
            raise FormatError(
                path,
                1 if layout.header_lines else None,
                f"column {layout.names[idx]!r} should tell GPUs apart but repeats within one timestamp "
                f"({dup[0][1]} UTC): the header does not match the values; pass --columns with the fields "
                "in --query-gpu order",
            )
        if idx is None:
            burst = _interleaved(con, line)
            if burst is not None:
                raise FormatError(
                    path,
                    burst[0],
                    f"rows {burst[1]:g} ms apart, then {burst[2]:g} s apart: one poll of several GPUs, but "
                    f"no uuid, index or pci.bus_id column says which GPU each row is: {advice}",
                )

    @staticmethod
    def _stage_gpus(
        con: duckdb.DuckDBPyConnection,
        opts: IngestOptions,
        fields: dict[str, object],
        codes: list[str] | None,
    ) -> None:
        """One row per GPU. Its uuid is its gpu_id unless that is the HOST:INDEX a row without a uuid
        got; its name the one most of its rows give that is not an N/A token (``codes``: the names the stage
        holds as ``name_code``); its host and index those of its latest row (an index can change at a reboot).
        Each a single answer, whatever the order DuckDB's threads meet the rows in.

        Grouped twice: by (gpu_id, name) over the rows, then by gpu_id over those few groups, so the name's
        trim and N/A test run once per distinct name, not per row (2 M rows: 0.15 s against 0.03 s)."""
        cluster = quote(opts.cluster) if opts.cluster else "NULL"
        host = "arg_max(host, ts)" if "host" in fields else f"{quote(opts.host or 'localhost')}::VARCHAR"
        # the name columns the rows are grouped by, and the name they give
        keys, name = ("name", "name") if "name" in fields else ("NULL::VARCHAR AS name", "name")
        if codes is not None:
            arms = " ".join(f"WHEN {k} THEN {quote(n)}" for k, n in enumerate(codes, start=1))
            keys, name = "name_code, name_other", f"coalesce(name_other, CASE name_code {arms} END)"
        staged = set(con.table("temp.stage_samples").columns)
        mem_total = "max(mem_total_mib)" if "mem_total_mib" in staged else "NULL"
        uuid = (
            "CASE WHEN gpu_id = host || ':' || coalesce(gpu_index, 0) THEN NULL ELSE gpu_id END"
            if "uuid" in fields
            else "NULL::VARCHAR"
        )
        con.execute(
            f"""CREATE TEMP TABLE stage_gpus AS
                SELECT gpu_id, {uuid} AS uuid, host, gpu_index, {model_sql_case("model_raw")} AS model,
                       model_raw, memory_total_mib, {cluster}::VARCHAR AS cluster, first_seen, last_seen
                FROM (SELECT gpu_id, arg_max(host, last_seen) AS host, arg_max(gpu_index, last_seen) AS gpu_index,
                             trim(first({name} ORDER BY n DESC, {name})
                                  FILTER (WHERE trim({name}) NOT IN ({_NULLS}))) AS model_raw,
                             max(memory_total_mib) AS memory_total_mib,
                             min(first_seen) AS first_seen, max(last_seen) AS last_seen
                      FROM (SELECT gpu_id, {keys}, {host} AS host, count(*) AS n,
                                   arg_max(gpu_index, ts) AS gpu_index,
                                   {mem_total}::DOUBLE AS memory_total_mib,
                                   min(ts) AS first_seen, max(ts) AS last_seen
                            FROM stage_samples GROUP BY ALL)
                      GROUP BY gpu_id)"""
        )


def file_time_utc(path: Path) -> str:
    """The file's modification time as a naive-UTC SQL literal (for sources that carry no time)."""
    stamp = dt.datetime.fromtimestamp(path.stat().st_mtime, dt.UTC).replace(tzinfo=None)
    return f"TIMESTAMP '{stamp.isoformat(sep=' ')}'"


class NvidiaSmiAppsCsv:
    """``nvidia-smi --query-compute-apps=...`` → processes (which process held how much memory on which GPU).

    Needs ``gpu_uuid`` (the process list names GPUs by UUID or bus id only; a bus id cannot be tied to the
    GPUs other files name). Without a ``timestamp`` column the file's modification time is the snapshot time.
    """

    name = "nvidia_smi_apps_csv"
    description = (
        "nvidia-smi --query-compute-apps=timestamp,gpu_uuid,pid,process_name,used_memory --format=csv"
    )

    def sniff(self, path: Path, head: str) -> Sniff:
        lines = _first_lines(head)
        if not lines:
            return Sniff(0)
        names = {field_key(split_header(c)[0]) for c in lines[0].split(",")}
        if "pid" in names and names & {"usedgpumemory", "usedmemory", "processname"}:
            if "gpuuuid" in names:
                return Sniff(0.9)
            return Sniff(0, "nvidia_smi_apps_csv: add gpu_uuid to --query-compute-apps")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        layout = read_layout(path, APP_FIELDS, opts.columns)
        fields, ignored = map_fields(layout, APP_FIELDS)
        if "gpu_uuid" not in fields:
            raise FormatError(path, 1, "no gpu_uuid column: add gpu_uuid to --query-compute-apps")
        col = Columns(path, layout, fields)
        zone = opts.tz or local_zone()
        ts = col.ts(zone) if "ts" in fields else file_time_utc(path)
        mem = col.number("used_mem_mib") if "used_mem_mib" in fields else "NULL"
        pid = f"TRY_CAST(trim({col.raw('pid')}) AS BIGINT)" if "pid" in fields else "NULL"
        check_zone(con, zone)
        try:
            con.execute(
                f"""CREATE TEMP TABLE stage_processes AS
                    SELECT CAST({ts} AS TIMESTAMP) AS ts, {col.text("gpu_uuid")} AS gpu_id,
                           CAST({pid} AS BIGINT) AS pid, {col.text("process_name")} AS process_name,
                           CAST({mem} AS DOUBLE) AS used_mem_mib, {col.text("gpu_name")} AS gpu_name
                    FROM {_read_csv_sql(path, layout, col.types)}"""
            )
        except duckdb.Error as exc:
            raise _reader_error(path, exc) from None
        nulls = null_counts(con, "stage_processes", ["ts", "gpu_id", "pid", "used_mem_mib"])
        column_of = {"ts": "ts", "gpu_uuid": "gpu_id", "pid": "pid", "used_mem_mib": "used_mem_mib"}
        suspects = [t for t, c in column_of.items() if t in fields and nulls[c]]
        if suspects:
            first_bad(con, col, suspects)
        con.execute(
            f"""CREATE TEMP TABLE stage_gpus AS
                SELECT gpu_id, gpu_id AS uuid, {model_sql_case("model_raw")} AS model, model_raw,
                       first_seen, last_seen
                FROM (SELECT gpu_id, any_value(gpu_name) AS model_raw, min(ts) AS first_seen,
                             max(ts) AS last_seen
                      FROM stage_processes GROUP BY gpu_id)"""
        )
        rows = _count(con, "SELECT count(*) FROM stage_processes")
        notes = ignored_notes(ignored, rows)
        if "ts" not in fields:
            notes["rows timed by the file's modification time (no timestamp column)"] = rows
        return notes
