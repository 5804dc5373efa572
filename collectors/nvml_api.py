"""The one seam between the NVML sampler and the driver: a small Protocol and the real pynvml-backed one.

The sampler never calls ``pynvml`` itself. It talks to an :class:`NvmlApi`, which returns readings in
NVML's own units (bytes, milliwatts, millijoules, MHz, percent); the sampler converts them once, in SQL,
at flush time. Tests drive the sampler with a replay of recorded telemetry (collectors/nvml_replay.py)
through the same Protocol, so everything but the driver calls themselves is exercised without a GPU.

A metric a GPU does not support is ``None`` (stored as NULL), never 0 and never a crash.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from gpuledger.ledger.errors import CollectorError

T = TypeVar("T")


class NvmlUnavailable(CollectorError):
    """No driver, no library or no GPU: the CLI prints ``error: NVML not available: <reason>``."""

    def __init__(self, reason: str) -> None:
        super().__init__(f"NVML not available: {reason}")


class DeviceLost(CollectorError):
    """One GPU could not be read this round (fell off the bus, reset, replay ran out): skip it, go on."""


@dataclass(frozen=True)
class DeviceInfo:
    """What identifies a GPU: ``nvmlDeviceGetUUID`` / ``GetName`` / ``GetMemoryInfo().total``."""

    index: int
    uuid: str | None
    name: str | None
    memory_total_bytes: int | None


@dataclass(frozen=True)
class DeviceReading:
    """One poll of one GPU, in NVML units; ``None`` = not supported or not readable.

    nvidia-smi equivalents: utilization.gpu, utilization.memory, memory.used, memory.total, power.draw,
    temperature.gpu, clocks.sm, clocks_event_reasons.active; ECC counters are ecc.errors.{corrected,
    uncorrected}.volatile.total; GPM SM/tensor activity match DCGM_FI_PROF_SM_ACTIVE / PIPE_TENSOR_ACTIVE.
    """

    util_gpu_pct: float | None = None  # nvmlDeviceGetUtilizationRates().gpu
    util_mem_pct: float | None = None  # nvmlDeviceGetUtilizationRates().memory
    mem_used_bytes: int | None = None  # nvmlDeviceGetMemoryInfo().used
    mem_total_bytes: int | None = None  # nvmlDeviceGetMemoryInfo().total
    power_mw: int | None = None  # nvmlDeviceGetPowerUsage
    energy_mj: int | None = None  # nvmlDeviceGetTotalEnergyConsumption (since driver load)
    temp_c: float | None = None  # nvmlDeviceGetTemperature(NVML_TEMPERATURE_GPU)
    sm_clock_mhz: float | None = None  # nvmlDeviceGetClockInfo(NVML_CLOCK_SM)
    clocks_event_reasons: int | None = None  # nvmlDeviceGetCurrentClocksEventReasons bitmask
    ecc_corrected_total: int | None = None  # nvmlDeviceGetTotalEccErrors(CORRECTED, VOLATILE)
    ecc_uncorrected_total: int | None = None  # nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)
    sm_active_pct: float | None = None  # GPM NVML_GPM_METRIC_SM_UTIL between two polls (Hopper+)
    tensor_active_pct: float | None = None  # GPM NVML_GPM_METRIC_ANY_TENSOR_UTIL (Hopper+)


@dataclass(frozen=True)
class ProcessReading:
    """A compute process on a GPU: ``nvmlDeviceGetComputeRunningProcesses`` (pid, usedGpuMemory)."""

    pid: int
    used_mem_bytes: int | None


class NvmlApi(Protocol):
    """The handful of NVML calls the sampler uses."""

    def start(self) -> None:
        """Initialise; raise :class:`NvmlUnavailable` when there is no driver or no GPU."""
        ...

    def stop(self) -> None: ...

    def devices(self) -> list[DeviceInfo]: ...

    def read(self, index: int) -> DeviceReading:
        """Poll one GPU; raise :class:`DeviceLost` when it cannot be read this round."""
        ...

    def processes(self, index: int) -> list[ProcessReading]: ...

    def xid_events(self) -> list[tuple[int, int]]:
        """(GPU index, XID) pairs that arrived since the last call; never blocks."""
        ...


def _optional(call: Callable[[], T]) -> T | None:
    """A value, or None when this GPU/driver does not support the call (N/A is data, not an error)."""
    import pynvml

    try:
        return call()
    except pynvml.NVMLError as exc:
        if isinstance(exc, pynvml.NVMLError_GpuIsLost):
            raise DeviceLost(str(exc)) from exc
        return None


class PynvmlApi:
    """The real driver through nvidia-ml-py (imported as ``pynvml``)."""

    def __init__(self) -> None:
        self._handles: list[Any] = []
        self._gpm: dict[int, Any] = {}  # index -> previous GPM sample (Hopper+ with driver support)
        self._events: Any = None

    def start(self) -> None:
        try:
            import pynvml
        except ImportError as exc:  # the package is a dependency; say so if it is missing anyway
            raise NvmlUnavailable(f"the nvidia-ml-py package is not installed ({exc})") from exc
        try:
            pynvml.nvmlInit()
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            raise NvmlUnavailable(str(exc)) from exc
        if count == 0:
            pynvml.nvmlShutdown()
            raise NvmlUnavailable("the driver reports no GPU")
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        self._start_gpm(pynvml)
        self._start_events(pynvml)

    def _start_gpm(self, pynvml: Any) -> None:
        for i, h in enumerate(self._handles):
            support = _optional(lambda h=h: pynvml.nvmlGpmQueryDeviceSupport(h))
            if support is None or not support.isSupportedDevice:
                continue
            sample = self._gpm_sample(pynvml, h)
            if sample is not None:
                self._gpm[i] = sample

    @staticmethod
    def _gpm_sample(pynvml: Any, handle: Any) -> Any:
        """A fresh GPM sample of ``handle``, or None (its buffer freed again) when the driver refuses."""
        buffer = _optional(pynvml.nvmlGpmSampleAlloc)
        if buffer is None:
            return None
        try:
            return pynvml.nvmlGpmSampleGet(handle, buffer)
        except pynvml.NVMLError:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlGpmSampleFree(buffer)
            return None

    def _start_events(self, pynvml: Any) -> None:
        event_set = _optional(pynvml.nvmlEventSetCreate)
        if event_set is None:
            return
        registered = False
        for h in self._handles:
            try:
                pynvml.nvmlDeviceRegisterEvents(h, pynvml.nvmlEventTypeXidCriticalError, event_set)
                registered = True
            except pynvml.NVMLError:  # not supported on this GPU (e.g. some consumer cards)
                continue
        if registered:
            self._events = event_set
        else:
            with contextlib.suppress(pynvml.NVMLError):
                pynvml.nvmlEventSetFree(event_set)

    def stop(self) -> None:
        import pynvml

        with contextlib.suppress(pynvml.NVMLError):
            for sample in self._gpm.values():
                pynvml.nvmlGpmSampleFree(sample)
            if self._events is not None:
                pynvml.nvmlEventSetFree(self._events)
            pynvml.nvmlShutdown()

    def devices(self) -> list[DeviceInfo]:
        import pynvml

        out = []
        for i, h in enumerate(self._handles):
            mem = _optional(lambda h=h: pynvml.nvmlDeviceGetMemoryInfo(h))
            out.append(
                DeviceInfo(
                    index=i,
                    uuid=_optional(lambda h=h: pynvml.nvmlDeviceGetUUID(h)),
                    name=_optional(lambda h=h: pynvml.nvmlDeviceGetName(h)),
                    memory_total_bytes=int(mem.total) if mem is not None else None,
                )
            )
        return out

    def read(self, index: int) -> DeviceReading:
        import pynvml

        h = self._handles[index]
        util = _optional(lambda: pynvml.nvmlDeviceGetUtilizationRates(h))
        mem = _optional(lambda: pynvml.nvmlDeviceGetMemoryInfo(h))
        sm_active, tensor_active = self._gpm_metrics(pynvml, index)
        return DeviceReading(
            util_gpu_pct=float(util.gpu) if util is not None else None,
            util_mem_pct=float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            power_mw=_optional(lambda: pynvml.nvmlDeviceGetPowerUsage(h)),
            energy_mj=_optional(lambda: pynvml.nvmlDeviceGetTotalEnergyConsumption(h)),
            temp_c=_optional(lambda: pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)),
            sm_clock_mhz=_optional(lambda: pynvml.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)),
            clocks_event_reasons=_optional(lambda: pynvml.nvmlDeviceGetCurrentClocksEventReasons(h)),
            ecc_corrected_total=_optional(
                lambda: pynvml.nvmlDeviceGetTotalEccErrors(
                    h, pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC
                )
            ),
            ecc_uncorrected_total=_optional(
                lambda: pynvml.nvmlDeviceGetTotalEccErrors(
                    h, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC
                )
            ),
            sm_active_pct=sm_active,
            tensor_active_pct=tensor_active,
        )

    def _gpm_metrics(self, pynvml: Any, index: int) -> tuple[float | None, float | None]:
        """GPM metrics are rates between two samples: this poll's sample against the previous one."""
        previous = self._gpm.get(index)
        if previous is None:
            return None, None
        h = self._handles[index]
        current = self._gpm_sample(pynvml, h)
        if current is None:
            return None, None
        request = pynvml.c_nvmlGpmMetricsGet_t()
        request.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = 2
        request.sample1 = previous
        request.sample2 = current
        request.metrics[0].metricId = pynvml.NVML_GPM_METRIC_SM_UTIL
        request.metrics[1].metricId = pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL
        result = _optional(lambda: pynvml.nvmlGpmMetricsGet(request))
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlGpmSampleFree(previous)
        self._gpm[index] = current
        if result is None:
            return None, None
        values = [float(m.value) if m.nvmlReturn == pynvml.NVML_SUCCESS else None for m in result.metrics[:2]]
        return values[0], values[1]

    def processes(self, index: int) -> list[ProcessReading]:
        import pynvml

        procs = _optional(lambda: pynvml.nvmlDeviceGetComputeRunningProcesses(self._handles[index])) or []
        out = []
        for p in procs:
            used = p.usedGpuMemory
            # NVML reports "not available" (no permission, WDDM) as an all-ones sentinel
            out.append(ProcessReading(int(p.pid), int(used) if used is not None and used < 2**63 else None))
        return out

    def xid_events(self) -> list[tuple[int, int]]:
        import pynvml

        if self._events is None:
            return []
        events: list[tuple[int, int]] = []
        for _ in range(64):  # bounded: a storm of XIDs must not stall the sampling loop
            try:
                data = pynvml.nvmlEventSetWait_v2(self._events, 0)
            except pynvml.NVMLError:  # NVML_ERROR_TIMEOUT: nothing pending
                break
            index = _optional(lambda data=data: pynvml.nvmlDeviceGetIndex(data.device))
            if index is not None:
                events.append((int(index), int(data.eventData)))
        return events
