"""An :class:`~collectors.nvml_api.NvmlApi` that replays telemetry recorded from a real GPU.

The recording is an ``nvidia-smi --query-gpu=... --format=csv`` log (with or without units and header
units such as ``utilization.gpu [%]``, or ``noheader``/``nounits`` rows under a header a wrapper script
wrote; ``columns`` renames a mislabelled header). Each GPU (the ``index`` column, else GPU 0) replays its own rows in file order, one row per
``read()``; values are handed back in NVML's units (MiB → bytes, W → mW) so the sampler's conversions are
exercised. Fields the log lacks read as "not supported" (None), as on a GPU without that sensor.

``clock()`` gives a clock that reports the recorded timestamps, so a test can replay a whole file at full
speed and find the file's own times and values in the ledger. ``loop=True`` starts over at the end (for
live demos with the wall clock); otherwise an exhausted GPU reads as lost.

Processes are not in nvidia-smi query logs: pass ``processes={gpu_index: [ProcessReading, ...]}`` to put
fixed ones on GPUs, and ``xids=[(round, gpu_index, xid)]`` to raise XID events in given rounds.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path

import duckdb

from collectors.nvml_api import DeviceInfo, DeviceLost, DeviceReading, NvmlUnavailable, ProcessReading
from collectors.sql_text import nullif_tokens, ts_utc
from gpuledger.ledger.errors import FormatError

MIB = 1024 * 1024
# nvidia-smi query field (and the spellings wrapper scripts use) → replay column
FIELDS = {
    "timestamp": "ts",
    "index": "gpu_index",
    "name": "name",
    "uuid": "uuid",
    "utilization.gpu": "util_gpu_pct",
    "gpu_utilization": "util_gpu_pct",
    "utilization.memory": "util_mem_pct",
    "memory.used": "mem_used_mib",
    "memory.total": "mem_total_mib",
    "power.draw": "power_w",
    "power.draw.instant": "power_w",
    "temperature.gpu": "temp_c",
    "temperature": "temp_c",
    "clocks.sm": "sm_clock_mhz",
    "clocks.current.sm": "sm_clock_mhz",
    "clocks_event_reasons.active": "reasons",
    "clocks_throttle_reasons.active": "reasons",
}
NUMERIC = (
    "util_gpu_pct",
    "util_mem_pct",
    "mem_used_mib",
    "mem_total_mib",
    "power_w",
    "temp_c",
    "sm_clock_mhz",
)


def _field(header: str) -> str:
    """``' utilization.gpu [%]'`` / ``'temperature[°C]'`` → the query field name."""
    from collectors.nvidia_smi_csv import split_header

    return split_header(header)[0].lower()


class ReplayNvml:
    def __init__(
        self,
        path: str | Path,
        *,
        columns: Sequence[str] | None = None,
        tz: str = "UTC",
        loop: bool = False,
        processes: dict[int, list[ProcessReading]] | None = None,
        xids: Sequence[tuple[int, int, int]] = (),
    ) -> None:
        self.path = Path(path)
        self.loop = loop
        self._procs = processes or {}
        self._xids = list(xids)
        self._rows = self._load(columns, tz)
        self._cursor = dict.fromkeys(self._rows, 0)
        self._reads = 0
        self._round = 0

    def _load(self, columns: Sequence[str] | None, tz: str) -> dict[int, list[dict[str, object]]]:
        if not self.path.exists():
            raise FormatError(self.path, None, "no such file")
        con = duckdb.connect()
        try:
            src = str(self.path).replace("'", "''")
            con.execute(
                f"CREATE TABLE raw AS SELECT row_number() OVER () AS line_no, * FROM read_csv('{src}', "
                "all_varchar=true, header=true, delim=',', auto_detect=true)"
            )
            cols = [r[0] for r in con.execute("DESCRIBE raw").fetchall() if r[0] != "line_no"]
            names = [_field(c) for c in (columns or cols)]
            if len(names) != len(cols):
                raise FormatError(self.path, None, f"{len(names)} column names for {len(cols)} columns")
            mapped = {FIELDS[n]: c for n, c in zip(names, cols, strict=True) if n in FIELDS}
            if "ts" not in mapped:
                raise FormatError(self.path, 1, "no timestamp column to replay")

            def num(key: str) -> str:
                if key not in mapped:
                    return "NULL::DOUBLE"
                v = nullif_tokens(f'"{mapped[key]}"')
                return f"TRY_CAST(regexp_extract({v}, '-?[0-9]+(\\.[0-9]+)?') AS DOUBLE)"

            def text(key: str) -> str:
                return nullif_tokens(f'"{mapped[key]}"') if key in mapped else "NULL"

            con.execute(f"SET TimeZone = '{tz.replace(chr(39), '')}'")
            rows = con.execute(
                f"""SELECT coalesce(TRY_CAST({text("gpu_index")} AS INTEGER), 0) AS gpu_index,
                           {ts_utc(f'"{mapped["ts"]}"')} AS ts, {text("name")} AS name, {text("uuid")} AS uuid,
                           {", ".join(f"{num(k)} AS {k}" for k in NUMERIC)},
                           replace(lower({text("reasons")}), '0x', '') AS reasons
                    FROM raw ORDER BY line_no"""
            ).fetchall()
            desc = ["gpu_index", "ts", "name", "uuid", *NUMERIC, "reasons"]
        finally:
            con.close()
        by_gpu: dict[int, list[dict[str, object]]] = {}
        for row in rows:
            rec = dict(zip(desc, row, strict=True))
            by_gpu.setdefault(int(rec["gpu_index"]), []).append(rec)  # type: ignore[call-overload]
        if not by_gpu:
            raise FormatError(self.path, None, "no rows to replay")
        return by_gpu

    # ---- NvmlApi -------------------------------------------------------------------------------------
    def start(self) -> None:
        if not self._rows:
            raise NvmlUnavailable(f"{self.path}: nothing to replay")

    def stop(self) -> None:
        pass

    def devices(self) -> list[DeviceInfo]:
        out = []
        for index, rows in sorted(self._rows.items()):
            first = rows[0]
            total = first["mem_total_mib"]
            out.append(
                DeviceInfo(
                    index=index,
                    uuid=first["uuid"],  # type: ignore[arg-type]
                    name=first["name"],  # type: ignore[arg-type]
                    memory_total_bytes=int(total * MIB) if total is not None else None,  # type: ignore[operator]
                )
            )
        return out

    def _current(self, index: int) -> dict[str, object]:
        rows = self._rows[index]
        pos = self._cursor[index]
        if pos >= len(rows):
            if not self.loop:
                raise DeviceLost(f"replay of GPU {index} exhausted")
            pos = self._cursor[index] = 0
        return rows[pos]

    def read(self, index: int) -> DeviceReading:
        rec = self._current(index)
        self._cursor[index] += 1

        def whole(key: str, factor: float) -> int | None:
            v = rec[key]
            return round(v * factor) if v is not None else None  # type: ignore[operator]

        reasons = rec["reasons"]
        return DeviceReading(
            util_gpu_pct=rec["util_gpu_pct"],  # type: ignore[arg-type]
            util_mem_pct=rec["util_mem_pct"],  # type: ignore[arg-type]
            mem_used_bytes=whole("mem_used_mib", MIB),
            mem_total_bytes=whole("mem_total_mib", MIB),
            power_mw=whole("power_w", 1000),
            temp_c=rec["temp_c"],  # type: ignore[arg-type]
            sm_clock_mhz=rec["sm_clock_mhz"],  # type: ignore[arg-type]
            clocks_event_reasons=int(str(reasons), 16) if reasons else None,
        )

    def processes(self, index: int) -> list[ProcessReading]:
        return list(self._procs.get(index, []))

    def xid_events(self) -> list[tuple[int, int]]:
        events = [(gpu, xid) for rnd, gpu, xid in self._xids if rnd == self._round]
        self._round += 1
        return events

    def clock(self) -> ReplayClock:
        return ReplayClock(self)

    def next_ts(self) -> dt.datetime | None:
        """The recorded time of the next row any GPU will replay."""
        pending = [
            rows[self._cursor[i]]["ts"] for i, rows in self._rows.items() if self._cursor[i] < len(rows)
        ]
        return min(pending) if pending else None  # type: ignore[type-var, return-value]


class ReplayClock:
    """Recorded time: ``now()`` is the timestamp of the next row to replay; ``wait()`` returns at once."""

    def __init__(self, replay: ReplayNvml) -> None:
        self.replay = replay
        self._last = dt.datetime(1970, 1, 1)

    def now(self) -> dt.datetime:
        ts = self.replay.next_ts()
        if ts is not None:
            self._last = ts
        return self._last

    def wait(self, seconds: float) -> None:
        pass
