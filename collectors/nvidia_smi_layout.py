"""The layout of an nvidia-smi CSV log: which line is a header, what each column names (``--query-gpu`` and
``--query-compute-apps`` fields, any spelling, units from the header), the delimiter, and whether the header
comes back later in the file (``nvidia-smi ... >> log`` in a shell loop). The readers that stage the values
are in collectors/nvidia_smi_csv.py; this module reads no value.

A header is a first line that names at least one known field and holds no value, whatever the share of
names gpuledger does not read (a log of every ``--query-gpu`` field); those columns are counted in the report.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import duckdb

from collectors.base import HEAD_BYTES, quote, read_head
from collectors.sql_text import sql_path
from gpuledger.ledger.errors import FormatError

SCAN_BLOCK = 8 * 2**20  # bytes read at a time when a file is searched for its header again (_repeats_in)

SMI_TS = re.compile(r"^\d{4}/\d{2}/\d{2} \d{2}:\d{2}:\d{2}(\.\d+)?$")
SMI_TS_FORMAT = "%Y/%m/%d %H:%M:%S.%g"


@dataclass(frozen=True)
class Field:
    """One accepted input field: where it goes and which units it may carry (unit → factor to canonical)."""

    target: str
    units: dict[str, float] | None = None  # None: not a number


PCT = {"%": 1.0}
MIB = {"MiB": 1.0, "GiB": 1024.0}
WATT = {"W": 1.0}
MHZ = {"MHz": 1.0}
CELSIUS = {"C": 1.0, "°C": 1.0}

# Keys are field names lower-cased with '.', '_', '-' and spaces removed, so ``gpu_utilization``,
# ``utilization.gpu`` and ``Utilization GPU`` all find their field.
GPU_FIELDS: dict[str, Field] = {
    "timestamp": Field("ts"),
    "index": Field("gpu_index"),
    "gpuindex": Field("gpu_index"),
    "uuid": Field("uuid"),
    "gpuuuid": Field("uuid"),
    "name": Field("name"),
    "gpuname": Field("name"),
    "pcibusid": Field("bus_id"),
    "hostname": Field("host"),
    "host": Field("host"),
    "utilizationgpu": Field("util_pct", PCT),
    "gpuutilization": Field("util_pct", PCT),
    "gpuutil": Field("util_pct", PCT),
    "utilizationmemory": Field("mem_util_pct", PCT),
    "memoryutilization": Field("mem_util_pct", PCT),
    "memoryused": Field("mem_used_mib", MIB),
    "memorytotal": Field("mem_total_mib", MIB),
    "memoryfree": Field("mem_free_mib", MIB),
    "powerdraw": Field("power_draw_w", WATT),
    "powerdrawaverage": Field("power_avg_w", WATT),
    "powerdrawinstant": Field("power_inst_w", WATT),
    "temperaturegpu": Field("temp_c", CELSIUS),
    "temperature": Field("temp_c", CELSIUS),
    "gputemp": Field("temp_c", CELSIUS),
    "clockssm": Field("sm_clock_mhz", MHZ),
    "clockscurrentsm": Field("sm_clock_mhz", MHZ),
    "clockseventreasonsactive": Field("throttle_reasons"),
    "clocksthrottlereasonsactive": Field("throttle_reasons"),
    "totalenergyconsumption": Field("energy_j", {"mJ": 0.001, "J": 1.0}),
}

APP_FIELDS: dict[str, Field] = {
    "timestamp": Field("ts"),
    "gpuuuid": Field("gpu_uuid"),
    "gpuname": Field("gpu_name"),
    "gpubusid": Field("bus_id"),
    "gpuserial": Field("serial"),
    "pid": Field("pid"),
    "processname": Field("process_name"),
    "name": Field("process_name"),
    "usedgpumemory": Field("used_mem_mib", MIB),
    "usedmemory": Field("used_mem_mib", MIB),
}


def field_key(name: str) -> str:
    return re.sub(r"[._\- ]", "", name.strip().lower())


def split_header(name: str) -> tuple[str, str | None]:
    """``utilization.gpu [%]`` → (``utilization.gpu``, ``%``); ``gpu_utilization[%]`` works too."""
    # str methods, not ``^\s*(.*?)\s*(?:\[([^\]]*)\])?\s*$``: its lazy group against the spaces after it
    # takes time growing with the square of a header name's length
    text = name.strip()
    if not text.endswith("]"):
        return text, None
    inner = text[:-1]
    opening = inner.find("[", inner.rfind("]") + 1)  # the unit's "[": none of its own "]" after it
    if opening < 0:
        return text, None
    return inner[:opening].rstrip(), (inner[opening + 1 :] or None)


@dataclass(frozen=True)
class Layout:
    """How a file is laid out: field names, units from the header, delimiter, and lines before the data."""

    names: tuple[str, ...]
    units: tuple[str | None, ...]
    delim: str
    header_lines: int
    smi_ts: bool  # the timestamp is nvidia-smi's YYYY/MM/DD form: let the reader type it
    # The header comes back later in the file (``nvidia-smi --format=csv >> log`` in a shell loop writes it
    # before every poll): such lines are dropped by ``header_first``, the header's first field as written.
    repeated_header: bool = False
    header_first: str = ""
    header_line: str = ""  # the header line as written (stripped); "" when there is none


def _first_lines(head: str, n: int = 2) -> list[str]:
    return [ln for ln in head.lstrip("\ufeff").splitlines() if ln.strip()][:n]


_VALUE = re.compile(r"^\s*(\[[^\]]*\]|[-+]?\d[\d.:/T+-]*( \S+)?|0x[0-9A-Fa-f]+)\s*$")


def _looks_like_header(line: str, fields: dict[str, Field]) -> bool:
    """A header names at least one field gpuledger knows and holds no value (a number, a time, ``[N/A]``).

    Not a share of known names: ``--query-gpu`` of every field (212 on driver 590) names eight the ledger
    stores among two hundred it does not, and a share rule refused that header as data."""
    cells = line.split(",")
    if any(_VALUE.match(c) for c in cells):
        return False
    return any(field_key(split_header(c)[0]) in fields for c in cells)


def read_layout(
    path: Path, fields: dict[str, Field], columns: tuple[str, ...] | None, *, past_head: bool = True
) -> Layout:
    """The file's layout from its head. ``past_head=False``: whether the header comes back is judged from the
    head alone (the caller looks further when it has to, :func:`_header_repeats`)."""
    lines = _first_lines(read_head(path))
    if not lines:
        raise FormatError(path, None, "the file is empty")
    has_header = _looks_like_header(lines[0], fields)
    if columns:
        parts = [split_header(c) for c in columns]
    elif has_header:
        parts = [split_header(c) for c in lines[0].split(",")]
    else:
        raise FormatError(
            path, 1, "no header line: pass --columns with the fields given to --query-gpu (noheader output)"
        )
    data = lines[1] if has_header and len(lines) > 1 else (lines[0] if not has_header else "")
    if has_header and not data:
        raise FormatError(path, 2, "no data after the header (a truncated file?)")
    n_values = data.count(",") + 1
    if n_values != len(parts):
        where = "--columns names" if columns else "the header names"
        raise FormatError(
            path, 2 if has_header else 1, f"{where} {len(parts)} fields but the line has {n_values} values"
        )
    delim = ", " if data.count(", ") == data.count(",") else ","
    keys = [field_key(n) for n, _ in parts]
    ts_pos = keys.index("timestamp") if "timestamp" in keys else None
    first_ts = data.split(",")[ts_pos].strip() if ts_pos is not None else ""
    header = lines[0].strip() if has_header else ""
    repeated = bool(header) and _header_repeats(path, header, past_head=past_head)
    return Layout(
        names=tuple(n for n, _ in parts),
        units=tuple(u for _, u in parts),
        delim=delim,
        header_lines=1 if has_header else 0,
        smi_ts=bool(SMI_TS.match(first_ts)) and delim == ", ",
        repeated_header=repeated,
        header_first=header.split(",")[0].strip(),
        header_line=header,
    )


def _header_repeats(path: Path, header: str, *, past_head: bool = True) -> bool:
    """Does the header line come back later in the file (a shell loop of ``nvidia-smi ... >> log``)?

    The head usually tells; past it (``past_head``) a plain file is searched block by block
    (:func:`_repeats_in`, no parse), a compressed one by a text scan of DuckDB's reader."""
    head = read_head(path)
    if sum(ln.strip() == header for ln in head.splitlines()) > 1:
        return True
    if not past_head:
        return False
    with path.open("rb") as fh:
        if fh.read(2) == b"\x1f\x8b":
            # a head of fewer than HEAD_BYTES / 4 characters is the whole file (UTF-8: <= 4 bytes each)
            return len(head) >= HEAD_BYTES // 4 and _header_in_compressed(path, header)
    if path.stat().st_size <= HEAD_BYTES:
        return False
    with path.open("rb") as fh:
        return _repeats_in(fh, header.encode())


def _repeats_in(fh: BinaryIO, header: bytes) -> bool:
    """Is there a line starting with ``header`` after its first occurrence? Read SCAN_BLOCK bytes at a time,
    each block searched with the last ``len(needle) - 1`` bytes of the one before (a header across two blocks
    is found whole). Not ``mmap``: every page of a mapped file counts in the process's RSS, so a 1.4 GB log
    raised the ingest's peak RSS to 1.5 GiB before a row was read."""
    needle = b"\n" + header
    keep = len(needle) - 1
    buf, pos, first = b"", 0, -1  # pos: the file offset of buf[0]
    while block := fh.read(SCAN_BLOCK):
        tail = buf[-keep:]
        pos += len(buf) - len(tail)
        buf = tail + block
        if first < 0:
            first = buf.find(header)
            if first < 0:
                continue
            first += pos
        if buf.find(needle, max(0, first + len(header) - pos)) >= 0:
            return True
    return False


def _header_in_compressed(path: Path, header: str) -> bool:
    con = duckdb.connect()
    try:
        found = con.execute(
            f"SELECT count(*) FROM (SELECT 1 FROM read_csv({sql_path(path)}, columns={{'line': 'VARCHAR'}}, "
            "delim='\x01', header=false, quote='', escape='', auto_detect=false) WHERE trim(line) = ? LIMIT 2)",
            [header],
        ).fetchall()[0][0]
    finally:
        con.close()
    return found > 1


def header_again(layout: Layout) -> str:
    """SQL: true for a line of the file that repeats the header (only with ``repeated_header``)."""
    if not layout.repeated_header:
        return "false"
    return f"(trim({_raw_name(0)}) IS NOT DISTINCT FROM {quote(layout.header_first)})"


def _raw_name(i: int) -> str:
    return f"c{i}"


def map_fields(
    layout: Layout, known: dict[str, Field]
) -> tuple[dict[str, tuple[int, Field, str | None]], list[str]]:
    """Target → (position, field, header unit); plus the names of columns nothing reads."""
    fields: dict[str, tuple[int, Field, str | None]] = {}
    ignored: list[str] = []
    for i, (name, unit) in enumerate(zip(layout.names, layout.units, strict=True)):
        field = known.get(field_key(name))
        if field is None or field.target in fields:
            ignored.append(name)
        else:
            fields[field.target] = (i, field, unit)
    return fields, ignored


IGNORED_NAMED = 5  # up to this many unread columns are one report line each; more are one line counting them


def ignored_notes(ignored: list[str], rows: int) -> dict[str, int]:
    """The report lines for the columns nothing reads (each of ``rows`` rows loses them).

    A log of every ``--query-gpu`` field has some 200: one line counts them and names the first few."""
    if len(ignored) <= IGNORED_NAMED:
        return {f"column {name!r} not stored (no ledger column)": rows for name in ignored}
    shown = ", ".join(ignored[:IGNORED_NAMED])
    return {f"{len(ignored)} columns not stored (no ledger column): {shown}, ...": rows}
