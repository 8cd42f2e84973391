"""The host's NVIDIA GPUs as NVML reports them: one reader for every pushed program.

``read`` answers one shape (``GpuReading``) whatever goes wrong: no ``pynvml`` (nvidia-ml-py),
no driver, a call that fails half way (the GPUs read so far, and why it stopped). Only the
devices ``CUDA_VISIBLE_DEVICES`` leaves visible are answered, in the order CUDA would number them,
so that what a program reports is what a server started with the same environment would see.
Each program writes the reading in its own answer's shape (the probe's ``memory.gpus``).
"""

from __future__ import annotations

import contextlib
import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class GpuProcess:
    """A process holding memory on a GPU (NVML's compute processes)."""

    pid: int
    used_bytes: int | None  # None where NVML cannot tell (some drivers, other containers)


@dataclass(frozen=True)
class Gpu:
    index: int  # NVML's index (PCI bus order), whatever CUDA_VISIBLE_DEVICES renumbers
    name: str
    uuid: str
    total_bytes: int
    free_bytes: int
    compute_capability: tuple[int, int] | None  # None where the driver cannot say
    processes: tuple[GpuProcess, ...] = ()  # read only when asked (``read(processes=True)``)


@dataclass(frozen=True)
class GpuReading:
    gpus: tuple[Gpu, ...]  # the visible ones, in CUDA's order
    error: str | None  # why there are none, or not all: None when every device was read
    driver: str | None = None  # the driver's version, when NVML could be asked


def read(visible_devices: str | None, *, processes: bool = False) -> GpuReading:
    """Every GPU that ``visible_devices`` (the value of ``CUDA_VISIBLE_DEVICES`` in the
    environment that matters; None: unset, all of them) leaves visible. ``processes``: also
    each GPU's compute processes."""
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError as exc:
        return GpuReading((), f"pynvml (nvidia-ml-py) not importable: {exc}")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded ...
        return GpuReading((), f"NVML: {_describe(exc)}")
    gpus: list[Gpu] = []
    driver: str | None = None
    try:
        with contextlib.suppress(Exception):  # an old pynvml, a driver that will not say
            driver = _text(nvml.nvmlSystemGetDriverVersion())
        for index in range(int(nvml.nvmlDeviceGetCount())):
            gpus.append(_device(nvml, index, processes))
    except Exception as exc:  # noqa: BLE001 - a device NVML cannot read: the others stand
        return GpuReading(tuple(visible(gpus, visible_devices)), f"NVML: {_describe(exc)}", driver)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    shown = visible(gpus, visible_devices)
    if gpus and not shown:
        why = f"CUDA_VISIBLE_DEVICES={visible_devices!r} leaves no GPU visible"
        return GpuReading((), why, driver)
    return GpuReading(tuple(shown), None, driver)


def visible(gpus: list[Gpu], visible_devices: str | None) -> list[Gpu]:
    """The devices CUDA would show, in its order: each entry an index or (a prefix of) a UUID;
    CUDA stops at the first entry it cannot find."""
    if visible_devices is None:
        return list(gpus)
    chosen: list[Gpu] = []
    for token in (t.strip() for t in visible_devices.split(",")):
        if not token:
            continue
        if token.isdigit():
            found = [gpu for gpu in gpus if gpu.index == int(token)]
        else:
            found = [gpu for gpu in gpus if gpu.uuid.startswith(token)]
        if not found:
            break
        chosen.append(found[0])
    return chosen


def _device(nvml: Any, index: int, processes: bool) -> Gpu:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = nvml.nvmlDeviceGetMemoryInfo(handle)
    capability: tuple[int, int] | None = None
    with contextlib.suppress(Exception):  # NVML before 11 has no such call
        major, minor = nvml.nvmlDeviceGetCudaComputeCapability(handle)
        capability = (int(major), int(minor))
    held: tuple[GpuProcess, ...] = ()
    if processes:
        held = tuple(
            GpuProcess(int(proc.pid), _bytes(getattr(proc, "usedGpuMemory", None)))
            for proc in nvml.nvmlDeviceGetComputeRunningProcesses(handle)
        )
    return Gpu(
        index=index,
        name=_text(nvml.nvmlDeviceGetName(handle)),
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        total_bytes=int(memory.total),
        free_bytes=int(memory.free),
        compute_capability=capability,
        processes=held,
    )


def _bytes(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
