"""``gpustat --json`` (wookayin/gpustat): one JSON document per poll, one sample per GPU, its processes.

``while :; do gpustat --json; sleep 30; done >> gpus.json`` appends documents one after another; each is read
at its ``query_time`` (the host's naive local time, ``datetime.now().isoformat()``, read in ``--tz``, default
this machine's zone; an offset, where one is written, is exact). Per GPU (gpustat's NVML calls, its units):
``uuid`` (gpu_id), ``index`` (gpu_index), ``name``, ``utilization.gpu`` (%), ``memory.used`` and
``memory.total`` (MiB: gpustat divides bytes by 1024²), ``power.draw`` (W), ``temperature.gpu`` (°C);
``null`` (not supported) is NULL. ``hostname`` is the host (``--host`` overrides). Processes (``pid``,
``command``, ``gpu_memory_usage`` MiB) become ``processes`` rows.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.stage_rows import temp_table
from collectors.time_zones import LocalClock, local_zone
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.reference import normalize_model

# sample column → gpustat's key in a GPU entry
VALUES = {
    "util_pct": "utilization.gpu",
    "mem_used_mib": "memory.used",
    "mem_total_mib": "memory.total",
    "power_w": "power.draw",
    "temp_c": "temperature.gpu",
}
SAMPLE_COLS = {
    "ts": "TIMESTAMP",
    "gpu_id": "VARCHAR",
    **dict.fromkeys(VALUES, "DOUBLE"),
    "line_no": "INTEGER",
    **{f"line_no__{c}": "INTEGER" for c in VALUES},
}
GPU_COLS = {
    "gpu_id": "VARCHAR",
    "uuid": "VARCHAR",
    "host": "VARCHAR",
    "gpu_index": "INTEGER",
    "model": "VARCHAR",
    "model_raw": "VARCHAR",
    "memory_total_mib": "DOUBLE",
    "cluster": "VARCHAR",
    "first_seen": "TIMESTAMP",
    "last_seen": "TIMESTAMP",
}
PROCESS_COLS = {
    "ts": "TIMESTAMP",
    "gpu_id": "VARCHAR",
    "pid": "BIGINT",
    "process_name": "VARCHAR",
    "used_mem_mib": "DOUBLE",
}


_NON_SPACE = re.compile(r"\S")


def _documents(text: str) -> list[tuple[int, int, dict]]:
    """(first line, start offset, document) of each JSON document in the file, in order."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while (m := _NON_SPACE.search(text, at)) is not None:
        line = text.count("\n", 0, m.start()) + 1
        try:
            doc, end = decoder.raw_decode(text, m.start())
        except json.JSONDecodeError as exc:
            raise FormatError("", text.count("\n", 0, exc.pos) + 1, f"not valid JSON ({exc.msg})") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("gpus"), list):
            raise FormatError("", line, 'expected a gpustat --json document: an object with a "gpus" list')
        out.append((line, m.start(), doc))
        at = end
    return out


def _key_lines(text: str, start: int, end: int, key: str) -> list[int]:
    """The line of each ``"key":`` between ``start`` and ``end``, in order (each GPU entry has one)."""
    pattern = re.compile(re.escape(json.dumps(key)) + r"\s*:")
    return [text.count("\n", 0, m.start()) + 1 for m in pattern.finditer(text, start, end)]


def _number(gpu: dict, key: str, line: int) -> float | None:
    value = gpu.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FormatError("", line, f'"{key}" is not a number: {value!r}')
    return float(value)


class GpustatJson:
    name = "gpustat_json"
    description = "gpustat --json (one document per poll; appended polls allowed)"

    def sniff(self, path: Path, head: str) -> Sniff:
        if head.lstrip().startswith("{") and '"query_time"' in head and '"gpus"' in head:
            return Sniff(0.95)
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        try:
            zone = ZoneInfo(opts.tz or local_zone())
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise FormatError("--tz", None, f"unknown time zone {opts.tz!r}") from exc
        text = path.read_text(encoding="utf-8")
        clock = LocalClock(zone)
        samples, gpus, processes = [], {}, []
        try:
            docs = _documents(text)
            for n, (line, start, doc) in enumerate(docs):
                end = docs[n + 1][1] if n + 1 < len(docs) else len(text)
                ts = self._time(doc, clock, line)
                entry_lines = _key_lines(text, start, end, "uuid")
                lines = {c: _key_lines(text, start, end, k) for c, k in VALUES.items()}
                for i, gpu in enumerate(doc["gpus"]):
                    at = entry_lines[i] if i < len(entry_lines) else line
                    uuid = gpu.get("uuid")
                    index = gpu.get("index")
                    gpu_id = uuid or f"{opts.host or doc.get('hostname') or 'localhost'}:{index}"
                    values = [_number(gpu, k, at) for k in VALUES.values()]
                    value_lines = [lines[c][i] if i < len(lines[c]) else None for c in VALUES]
                    samples.append((ts, gpu_id, *values, at, *value_lines))
                    host = opts.host or doc.get("hostname")
                    first = gpus[gpu_id][8] if gpu_id in gpus else ts  # first_seen
                    name = gpu.get("name")
                    gpus[gpu_id] = (
                        gpu_id,
                        uuid,
                        host,
                        index,
                        normalize_model(name),
                        name,
                        values[2],
                        opts.cluster,
                        first,
                        ts,
                    )
                    for proc in gpu.get("processes") or []:
                        processes.append(
                            (
                                ts,
                                gpu_id,
                                proc.get("pid"),
                                proc.get("command"),
                                _number(proc, "gpu_memory_usage", at),
                            )
                        )
        except FormatError as exc:
            raise FormatError(path, exc.line, exc.reason) from None
        if not samples:
            raise FormatError(path, None, 'no GPU in any document (an empty "gpus" list)')
        temp_table(con, "stage_samples", SAMPLE_COLS, samples)
        temp_table(con, "stage_gpus", GPU_COLS, list(gpus.values()))
        if processes:
            temp_table(con, "stage_processes", PROCESS_COLS, processes)
        return {}

    @staticmethod
    def _time(doc: dict, clock: LocalClock, line: int) -> dt.datetime:
        raw = doc.get("query_time")
        try:
            when = dt.datetime.fromisoformat(str(raw))
        except ValueError:
            raise FormatError("", line, f'"query_time" is not an ISO time: {raw!r}') from None
        if when.tzinfo is not None:
            return when.astimezone(dt.UTC).replace(tzinfo=None)
        return clock.utc(when)
