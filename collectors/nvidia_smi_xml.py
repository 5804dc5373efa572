"""``nvidia-smi -q -x`` snapshots (DTD nvsmi_device v11–v13): GPU inventory, one sample per GPU, processes.

A snapshot is tens of KB, so Python's ``xml.etree`` reads it; a file may hold several snapshots back to back
(``nvidia-smi -q -x -l 30 >> log.xml`` repeats the ``<?xml …?>`` prolog), each read at its own
``<timestamp>`` — the host's local time, read in ``--tz`` (default: this machine's zone), stored as UTC.

Per GPU: ``uuid`` (gpu_id), ``minor_number`` (gpu_index), ``product_name``, ``fb_memory_usage`` total/used
(MiB), ``utilization`` gpu_util/memory_util (%), power from ``gpu_power_readings``/``power_readings``
(``power_draw``, else v13's ``average_power_draw`` then ``instant_power_draw``, W), ``temperature/gpu_temp``
(C), ``clocks/sm_clock`` (MHz), and the ``clocks_event_reasons`` (v12+) / ``clocks_throttle_reasons`` list
folded into NVML's bitmask. MIG instances (``mig_devices``) become GPUs ``<parent uuid>/<gpu_instance_id>``
with ``mig_profile`` (``1g.20gb``: slices from the SM count, memory rounded up to GB) and their own memory
sample; a process with a ``gpu_instance_id`` is charged to its MIG instance.

Identity inside one snapshot is unique. A UUID that two ``<gpu>`` elements of one snapshot share (masked by
whoever shared the file: ``GPU-XXXXXXXX-…`` twice) names neither: each of those GPUs is ``HOST:<PCI bus id>``
(the ``<gpu id="…">`` attribute, else ``pci/pci_bus_id``), else ``HOST:<minor_number>``, HOST being ``--host``
or ``localhost``; the report counts their readings ("readings of GPUs sharing one UUID in a snapshot, told
apart by …").
"""

from __future__ import annotations

import datetime as dt
import math
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import duckdb

from collectors.base import IngestOptions, Sniff
from collectors.sql_text import NULL_TOKENS
from collectors.stage_rows import temp_table
from collectors.time_zones import LocalClock, local_zone
from gpuledger.ledger.errors import FormatError
from gpuledger.ledger.reference import normalize_model

# NVML clocks-event reason bits (nvml.h nvmlClocksEventReason*), keyed by the XML element's suffix.
REASON_BITS = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clocks_setting": 0x100,
}
# SMs per MIG compute slice, by architecture (A100/A30: 14; H100/H200: 16 for 1g, see NVIDIA MIG user guide).
SM_SLICES = {
    "Ampere": {14: 1, 28: 2, 42: 3, 56: 4, 98: 7},
    "Hopper": {16: 1, 26: 2, 32: 2, 60: 3, 64: 4, 132: 7},
}

SAMPLE_COLS = {
    "ts": "TIMESTAMP",
    "gpu_id": "VARCHAR",
    "util_pct": "DOUBLE",
    "mem_util_pct": "DOUBLE",
    "mem_used_mib": "DOUBLE",
    "mem_total_mib": "DOUBLE",
    "power_w": "DOUBLE",
    "temp_c": "DOUBLE",
    "sm_clock_mhz": "DOUBLE",
    "throttle_reasons": "UBIGINT",
}
# Where each sample column's value sits in a <gpu> (or <mig_device>) element: (enclosing element, element),
# in the order _power prefers; for the line a range error names (collectors/validate.py ``line_no__<column>``).
VALUE_ELEMENTS = {
    "util_pct": (("utilization", "gpu_util"),),
    "mem_util_pct": (("utilization", "memory_util"),),
    "mem_used_mib": (("fb_memory_usage", "used"),),
    "mem_total_mib": (("fb_memory_usage", "total"),),
    "power_w": tuple(
        (block, tag)
        for block in ("gpu_power_readings", "power_readings")
        for tag in ("power_draw", "average_power_draw", "instant_power_draw")
    ),
    "temp_c": (("temperature", "gpu_temp"),),
    "sm_clock_mhz": (("clocks", "sm_clock"),),
}
_DEVICE_OPEN = re.compile(r"<(?:gpu|mig_device)[\s>]")
GPU_COLS = {
    "gpu_id": "VARCHAR",
    "uuid": "VARCHAR",
    "host": "VARCHAR",
    "gpu_index": "INTEGER",
    "model": "VARCHAR",
    "model_raw": "VARCHAR",
    "memory_total_mib": "DOUBLE",
    "cluster": "VARCHAR",
    "mig_profile": "VARCHAR",
    "parent_gpu_id": "VARCHAR",
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


def number(el: ET.Element | None, path: str) -> float | None:
    """``"19968 MiB"`` → 19968.0; N/A tokens → None; anything else unreadable raises ValueError."""
    if el is None:
        return None
    node = el.find(path)
    if node is None or node.text is None:
        return None
    text = node.text.strip()
    if text in NULL_TOKENS or text.startswith(("Requested functionality", "Unknown")):
        return None
    m = re.match(r"^(-?[0-9]+(?:\.[0-9]+)?)(?:\s*\S+)?$", text)
    if not m:
        raise ValueError(f"<{path}> is not a number: {text!r}")
    return float(m.group(1))


def text_of(el: ET.Element, path: str) -> str | None:
    node = el.find(path)
    if node is None or node.text is None or node.text.strip() in NULL_TOKENS:
        return None
    return node.text.strip()


def mig_profile(arch: str | None, sm_count: float | None, mem_mib: float | None) -> str | None:
    if mem_mib is None:
        return None
    gb = math.ceil(mem_mib / 1024)
    slices = SM_SLICES.get(arch or "", {}).get(int(sm_count)) if sm_count else None
    return f"{slices if slices else '?'}g.{gb}gb"


def throttle_mask(gpu: ET.Element) -> int | None:
    block = gpu.find("clocks_event_reasons")
    prefix = "clocks_event_reason_"
    if block is None:
        block = gpu.find("clocks_throttle_reasons")
        prefix = "clocks_throttle_reason_"
    if block is None:
        return None
    mask, seen = 0, False
    for child in block:
        bit = REASON_BITS.get(child.tag.removeprefix(prefix))
        state = (child.text or "").strip()
        if bit is None or state not in ("Active", "Not Active"):
            continue
        seen = True
        if state == "Active":
            mask |= bit
    return mask if seen else None


def _power(gpu: ET.Element) -> float | None:
    for block in ("gpu_power_readings", "power_readings"):
        el = gpu.find(block)
        for tag in ("power_draw", "average_power_draw", "instant_power_draw"):
            value = number(el, tag)
            if value is not None:
                return value
    return None


def _snapshot_time(root: ET.Element, clock: LocalClock) -> dt.datetime:
    raw = text_of(root, "timestamp")
    if raw is None:
        raise ValueError("no <timestamp>")
    return clock.utc(dt.datetime.strptime(" ".join(raw.split()), "%a %b %d %H:%M:%S %Y"))


def _sample_lines(doc: str, first_line: int) -> list[tuple[object, ...]]:
    """For each sample a snapshot gives, in the order :meth:`NvidiaSmiXml._read_snapshot` appends them (each
    <gpu>, then its <mig_device>s: document order), the line of its element and of each value in
    :data:`VALUE_ELEMENTS` that holds a number (None where none does). ElementTree keeps no line numbers,
    so the opening tags are found in the text."""
    starts = [m.start() for m in _DEVICE_OPEN.finditer(doc)]
    out: list[tuple[object, ...]] = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(doc)
        block = doc[start:end]
        base = first_line + doc.count("\n", 0, start)
        lines: list[object] = [base]
        for places in VALUE_ELEMENTS.values():
            found = None
            for outer, tag in places:
                m = re.search(rf"<{outer}>.*?<{tag}>\s*-?[0-9]", block, re.S)
                if m:
                    found = base + block.count("\n", 0, m.end())
                    break
            lines.append(found)
        out.append(tuple(lines))
    return out


def _snapshots(text: str) -> list[tuple[int, str]]:
    """(first line, document) for each ``<?xml`` document in the file."""
    starts = [m.start() for m in re.finditer(r"<\?xml", text)] or [0]
    out = []
    for i, start in enumerate(starts):
        end = starts[i + 1] if i + 1 < len(starts) else len(text)
        out.append((text.count("\n", 0, start) + 1, text[start:end]))
    return out


class NvidiaSmiXml:
    name = "nvidia_smi_xml"
    description = "nvidia-smi -q -x (XML snapshot; several appended snapshots allowed)"

    def sniff(self, path: Path, head: str) -> Sniff:
        if "<nvidia_smi_log" in head:
            return Sniff(0.95)
        if head.lstrip().startswith("<?xml"):
            return Sniff(0, "nvidia_smi_xml: an XML file without <nvidia_smi_log>")
        return Sniff(0)

    def stage(self, con: duckdb.DuckDBPyConnection, path: Path, opts: IngestOptions) -> dict[str, int]:
        try:
            zone = ZoneInfo(opts.tz or local_zone())
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise FormatError("--tz", None, f"unknown time zone {opts.tz!r}") from exc
        samples: list[tuple[object, ...]] = []
        gpus: dict[str, tuple[object, ...]] = {}
        processes: list[tuple[object, ...]] = []
        text = path.read_text(encoding="utf-8", errors="replace")
        clock = LocalClock(zone)  # the snapshots' local times, in file order
        lines: list[tuple[object, ...]] = []
        notes: dict[str, int] = {}
        for first_line, doc in _snapshots(text):
            lines += _sample_lines(doc, first_line)
            try:
                root = ET.fromstring(doc)
            except ET.ParseError as exc:
                line = first_line + exc.position[0] - 1
                raise FormatError(path, line, f"not well-formed XML ({exc.msg}; a truncated file?)") from None
            if root.tag != "nvidia_smi_log":
                raise FormatError(path, first_line, f"expected <nvidia_smi_log>, found <{root.tag}>")
            try:
                ts = _snapshot_time(root, clock)
                self._read_snapshot(root, ts, opts, samples, gpus, processes, notes)
            except ValueError as exc:
                raise FormatError(path, first_line, f"snapshot: {exc}") from None
        if not samples:
            raise FormatError(path, None, "no <gpu> element in any snapshot")
        if len(lines) == len(samples):  # else a <gpu> outside the shape read: messages name no line
            cols = {
                **SAMPLE_COLS,
                "line_no": "INTEGER",
                **{f"line_no__{c}": "INTEGER" for c in VALUE_ELEMENTS},
            }
            temp_table(con, "stage_samples", cols, [(*s, *ln) for s, ln in zip(samples, lines, strict=True)])
        else:
            temp_table(con, "stage_samples", SAMPLE_COLS, samples)
        temp_table(con, "stage_gpus", GPU_COLS, list(gpus.values()))
        if processes:
            temp_table(con, "stage_processes", PROCESS_COLS, processes)
        return notes

    @staticmethod
    def _read_snapshot(
        root: ET.Element,
        ts: dt.datetime,
        opts: IngestOptions,
        samples: list[tuple[object, ...]],
        gpus: dict[str, tuple[object, ...]],
        processes: list[tuple[object, ...]],
        notes: dict[str, int],
    ) -> None:
        elements = root.findall("gpu")
        shared = _shared_uuids(elements)
        for gpu in elements:
            uuid = text_of(gpu, "uuid")
            minor = number(gpu, "minor_number")
            index = int(minor) if minor is not None else None
            shared_by = uuid is not None and uuid in shared
            if shared_by:
                gpu_id, by = _fallback_id(gpu, index, opts.host or "localhost")
                key = f"readings of GPUs sharing one UUID in a snapshot, told apart by {by} (UUID {uuid} masked?)"
                notes[key] = notes.get(key, 0) + 1
                uuid = None
            else:
                gpu_id = uuid or f"localhost:{index if index is not None else gpu.get('id')}"
            name = text_of(gpu, "product_name")
            fb = gpu.find("fb_memory_usage")
            total = number(fb, "total")
            util = gpu.find("utilization")
            samples.append(
                (
                    ts,
                    gpu_id,
                    number(util, "gpu_util"),
                    number(util, "memory_util"),
                    number(fb, "used"),
                    total,
                    _power(gpu),
                    number(gpu.find("temperature"), "gpu_temp"),
                    number(gpu.find("clocks"), "sm_clock"),
                    throttle_mask(gpu),
                )
            )
            host = None if uuid else (opts.host or "localhost") if shared_by else "localhost"
            model = normalize_model(name)
            gpus[gpu_id] = (gpu_id, uuid, host, index, model, name, total, opts.cluster, None, None, ts, ts)
            arch = text_of(gpu, "product_architecture")
            for mig in gpu.findall("mig_devices/mig_device"):
                gi = text_of(mig, "gpu_instance_id")
                mig_id = f"{gpu_id}/{gi}"
                mfb = mig.find("fb_memory_usage")
                mtotal = number(mfb, "total")
                sms = number(mig.find("device_attributes/shared"), "multiprocessor_count")
                samples.append((ts, mig_id, None, None, number(mfb, "used"), mtotal, None, None, None, None))
                profile = mig_profile(arch, sms, mtotal)
                gpus[mig_id] = (
                    mig_id,
                    None,
                    None,
                    None,
                    model,
                    name,
                    mtotal,
                    opts.cluster,
                    profile,
                    gpu_id,
                    ts,
                    ts,
                )
            for proc in gpu.findall("processes/process_info"):
                gi = text_of(proc, "gpu_instance_id")
                pid = number(proc, "pid")
                processes.append(
                    (
                        ts,
                        f"{gpu_id}/{gi}" if gi is not None else gpu_id,
                        int(pid) if pid is not None else None,
                        text_of(proc, "process_name"),
                        number(proc, "used_memory"),
                    )
                )


def _shared_uuids(elements: list[ET.Element]) -> set[str]:
    """UUIDs that more than one ``<gpu>`` of one snapshot carries."""
    seen: dict[str, int] = {}
    for gpu in elements:
        uuid = text_of(gpu, "uuid")
        if uuid is not None:
            seen[uuid] = seen.get(uuid, 0) + 1
    return {u for u, n in seen.items() if n > 1}


def _fallback_id(gpu: ET.Element, index: int | None, host: str) -> tuple[str, str]:
    """(gpu_id, what it was told by) for a GPU whose UUID is not its own: its PCI bus id, else its minor
    number; a GPU with neither keeps its position among the snapshot's ``<gpu>`` elements' ``id``."""
    bus = gpu.get("id") or text_of(gpu, "pci/pci_bus_id")
    if bus:
        return f"{host}:{bus}", "PCI bus id"
    if index is not None:
        return f"{host}:{index}", "minor number"
    raise ValueError("two <gpu> elements share a UUID and neither has a PCI bus id or minor number")
