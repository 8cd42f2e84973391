"""The host's one NVML reader (remote/host/gpus.py), shared by the pushed programs: the devices
CUDA_VISIBLE_DEVICES leaves visible (indices or UUID prefixes, in CUDA's order, up to the first
it cannot find), one answer shape whatever fails. NVML is nvidia-ml-py's ``pynvml`` on a host;
here a stand-in module of the same calls (no GPU on this machine), and the real one without a
driver."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.remote.host import gpus

NVML = """\
class _Memory:
    def __init__(self, total, free):
        self.total, self.free = total, free

class _Process:
    def __init__(self, pid, used):
        self.pid, self.usedGpuMemory = pid, used

GPUS = [("NVIDIA H200", "GPU-aaaa1111", 150 << 30, 140 << 30, (9, 0)),
        ("NVIDIA H200", "GPU-bbbb2222", 150 << 30, 20 << 30, (9, 0)),
        ("NVIDIA B200", "GPU-cccc3333", 180 << 30, 170 << 30, (10, 0))]
FAIL_AT = {fail_at}

def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlSystemGetDriverVersion(): return b"580.95.05"
def nvmlDeviceGetCount(): return len(GPUS)
def nvmlDeviceGetHandleByIndex(index):
    if index == FAIL_AT:
        raise RuntimeError("NVML_ERROR_GPU_IS_LOST")
    return index
def nvmlDeviceGetName(handle): return GPUS[handle][0].encode()
def nvmlDeviceGetUUID(handle): return GPUS[handle][1]
def nvmlDeviceGetMemoryInfo(handle): return _Memory(GPUS[handle][2], GPUS[handle][3])
def nvmlDeviceGetCudaComputeCapability(handle): return GPUS[handle][4]
def nvmlDeviceGetComputeRunningProcesses(handle):
    return [_Process(4242, 7 << 30), _Process(4343, None)] if handle == 1 else []
"""


@pytest.fixture
def nvml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A ``pynvml`` of three GPUs, first on sys.path (the real one set aside, then back)."""
    real = sys.modules.pop("pynvml", None)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "pynvml.py").write_text(NVML.format(fail_at=None))
    yield tmp_path / "pynvml.py"
    sys.modules.pop("pynvml", None)
    if real is not None:
        sys.modules["pynvml"] = real


def _uuids(reading: gpus.GpuReading) -> list[str]:
    return [gpu.uuid for gpu in reading.gpus]


def test_every_gpu_without_cuda_visible_devices(nvml: Path) -> None:
    reading = gpus.read(None)
    assert (reading.error, reading.driver) == (None, "580.95.05")
    first = reading.gpus[0]
    assert (first.index, first.name, first.total_bytes, first.free_bytes) == (
        0,
        "NVIDIA H200",
        150 << 30,
        140 << 30,
    )
    assert [gpu.compute_capability for gpu in reading.gpus] == [(9, 0), (9, 0), (10, 0)]
    assert all(gpu.processes == () for gpu in reading.gpus)  # read only when asked


@pytest.mark.parametrize(
    ("visible", "shown", "error"),
    [
        ("2,0", [2, 0], None),  # in CUDA's order, each with NVML's index
        ("GPU-bbbb", [1], None),  # a UUID's prefix
        (" 1 , GPU-cccc3333", [1, 2], None),
        ("1,7,0", [1], None),  # CUDA stops at the first it cannot find
        ("", [], "CUDA_VISIBLE_DEVICES='' leaves no GPU visible"),
        ("-1", [], "CUDA_VISIBLE_DEVICES='-1' leaves no GPU visible"),
    ],
)
def test_only_the_devices_cuda_visible_devices_leaves_visible(
    nvml: Path, visible: str, shown: list[int], error: str | None
) -> None:
    reading = gpus.read(visible)
    assert ([gpu.index for gpu in reading.gpus], reading.error) == (shown, error)
    assert _uuids(reading) == [("GPU-aaaa1111", "GPU-bbbb2222", "GPU-cccc3333")[i] for i in shown]


def test_the_processes_on_each_gpu_when_asked(nvml: Path) -> None:
    reading = gpus.read(None, processes=True)
    assert reading.gpus[1].processes == (
        gpus.GpuProcess(4242, 7 << 30),
        gpus.GpuProcess(4343, None),  # NVML could not tell
    )


def test_a_device_nvml_cannot_read_leaves_the_others_and_says_why(nvml: Path) -> None:
    nvml.write_text(NVML.format(fail_at=2))
    reading = gpus.read("1,2")
    assert _uuids(reading) == ["GPU-bbbb2222"]
    assert reading.error == "NVML: RuntimeError: NVML_ERROR_GPU_IS_LOST"


def test_an_older_nvml_without_capability_or_driver_calls(nvml: Path) -> None:
    old = textwrap.dedent(NVML.format(fail_at=None))
    old = old.replace("def nvmlSystemGetDriverVersion", "def _gone1")
    old = old.replace("def nvmlDeviceGetCudaComputeCapability", "def _gone2")
    nvml.write_text(old)
    reading = gpus.read(None)
    assert (reading.error, reading.driver) == (None, None)
    assert [gpu.compute_capability for gpu in reading.gpus] == [None, None, None]


def test_no_pynvml_is_a_reading_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # what `import pynvml` then raises
    reading = gpus.read(None)
    assert reading.gpus == ()
    assert reading.error is not None
    assert reading.error.startswith("pynvml (nvidia-ml-py) not importable: ")


def test_the_real_pynvml_without_a_driver_says_so() -> None:
    pytest.importorskip("pynvml")
    reading = gpus.read(None)
    if reading.gpus:
        pytest.skip("this machine has an NVIDIA driver and GPUs")
    assert reading.error is not None
    assert reading.error.startswith("NVML: NVMLError")


def test_the_agents_probe_reads_the_gpus_the_servers_environment_leaves_visible(
    nvml: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one NVML reader for both pushed programs: the agent's preflight facts now honour the
    # server's CUDA_VISIBLE_DEVICES as the planning probe does (it listed every GPU before)
    from orchestrator.fleet.protocol.probe import decode_probe
    from orchestrator.remote.agent.cmd_probe import cmd_probe

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-aaaa")
    facts = decode_probe(cmd_probe(1, None, "127.0.0.1", None))
    assert facts.gpus.available
    assert [(d.index, d.name, d.compute_capability) for d in facts.gpus.devices] == [
        (2, "NVIDIA B200", (10, 0)),
        (0, "NVIDIA H200", (9, 0)),
    ]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    (device,) = decode_probe(cmd_probe(1, None, "127.0.0.1", None)).gpus.devices
    assert [(p.pid, p.used_bytes) for p in device.processes] == [(4242, 7 << 30), (4343, 0)]
