"""The planning probe run by this machine's Python on orch's stand-in (NOT SGLang): its memory
section decodes (the checkpoint's bytes, the visible GPUs from NVML), and a refusal that quotes a
secret reaches the user redacted. Moved from the unit tier: each runs the probe in a process."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from orchestrator.fleet.protocol.plan import decode_plan_answer
from orchestrator.sglang.memory.shapes import GIB
from tests.conftest import REPO, ProfileDir
from tests.standin.sglang_plugin import run_probe

STANDIN = REPO / "standin"


MODEL_CONFIG = STANDIN / "models" / "Qwen3.6-27B" / "config.json"


SPEC_ARGS = [
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]


# A stand-in for NVML (nvidia-ml-py's pynvml) on the probe's path: two GPUs, one of them busy.
FAKE_NVML = """\
class _Memory:
    def __init__(self, total, free):
        self.total, self.free = total, free

_GPUS = [("NVIDIA H200", "GPU-aaaa", 150 << 30, 140 << 30),
         ("NVIDIA H200", "GPU-bbbb", 150 << 30, 20 << 30)]

def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return len(_GPUS)
def nvmlDeviceGetHandleByIndex(index): return index
def nvmlDeviceGetName(handle): return _GPUS[handle][0].encode()
def nvmlDeviceGetUUID(handle): return _GPUS[handle][1]
def nvmlDeviceGetMemoryInfo(handle): return _Memory(_GPUS[handle][2], _GPUS[handle][3])
"""


SAFETENSORS_DTYPES = {"BF16": 2, "F16": 2, "F32": 4}


def write_safetensors(path: Path, tensors: dict[str, tuple[str, list[int]]]) -> int:
    """A safetensors file written by hand (the format: an 8-byte little-endian header length,
    the JSON header, the data); the bytes of its tensors."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = SAFETENSORS_DTYPES[dtype]
        for n in shape:
            size *= n
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + bytes(offset))
    return offset


def _standin_answer(
    tmp_path: Path, args: list[str], env: dict[str, str], *, simulate: bool
) -> dict[str, Any]:
    environment = {"PYTHONPATH": str(STANDIN), "ORCH_STANDIN_VERSION": "0.5.23", **env}
    return run_probe(sys.executable, tmp_path, args, environment, simulate_h200=simulate)


def test_this_probes_memory_section_on_the_standin_decodes(tmp_path: Path) -> None:
    """The stand-in has none of SGLang's classes: no shapes, the text config to mirror them;
    the checkpoint's bytes from its headers (the model) and its index (the draft)."""
    model = tmp_path / "Qwen3.6-27B"
    model.mkdir()
    (model / "config.json").write_text(MODEL_CONFIG.read_text())
    weights = write_safetensors(
        model / "model-00001-of-00002.safetensors", {"a": ("BF16", [3, 5]), "b": ("F32", [7])}
    )
    weights += write_safetensors(model / "model-00002-of-00002.safetensors", {"c": ("F16", [2, 2])})
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 123456}, "weight_map": {}})
    )
    args = [
        "--model-path",
        str(model),
        "--mem-fraction-static",
        "0.92",
        *SPEC_ARGS,
        "--speculative-draft-model-path",
        str(draft),
    ]
    answer = decode_plan_answer(_standin_answer(tmp_path, args, {}, simulate=True))
    assert answer.ok
    assert answer.standin
    memory = answer.memory
    assert memory is not None
    assert memory.error is None
    assert memory.model is None
    assert memory.shapes_error == "ModuleNotFoundError: No module named 'sglang.srt.configs'"
    assert memory.text_config is not None
    assert memory.text_config == json.loads(MODEL_CONFIG.read_text())["text_config"]
    assert (memory.weights_bytes, memory.weights_basis) == (
        weights,
        "safetensors headers of 2 file(s)",
    )
    assert (memory.draft_weights_bytes, memory.draft_weights_basis) == (
        123456,
        "model.safetensors.index.json total_size",
    )
    (gpu,) = memory.gpus
    assert (gpu.name, gpu.index, gpu.total_bytes) == ("NVIDIA H200", 0, 144384 << 20)
    assert gpu.free_bytes == gpu.total_bytes  # simulated: nominal, all free
    assert gpu.basis.startswith("simulated NVIDIA H200")
    # the stand-in computes no mem_fraction_static of its own: reported, not fatal
    assert memory.default_mem_fraction_static is None
    assert memory.default_error == "the resolution left it at None"
    assert memory.env == {}


def test_this_probes_memory_section_reads_the_visible_gpus_from_nvml(tmp_path: Path) -> None:
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    (nvml / "pynvml.py").write_text(FAKE_NVML)
    args = ["--model-path", "Qwen/Qwen3-8B"]  # a Hub id: nothing of it on this machine
    env = {
        "PYTHONPATH": f"{STANDIN}:{nvml}",
        "CUDA_VISIBLE_DEVICES": "GPU-bbbb",
        "SGLANG_MAMBA_SSM_DTYPE": "bfloat16",
    }
    answer = decode_plan_answer(_standin_answer(tmp_path, args, env, simulate=False))
    memory = answer.memory
    assert memory is not None
    (gpu,) = memory.gpus  # CUDA_VISIBLE_DEVICES leaves the second one, by its UUID
    assert (gpu.index, gpu.name, gpu.total_bytes, gpu.free_bytes) == (
        1,
        "NVIDIA H200",
        150 * GIB,
        20 * GIB,
    )
    assert gpu.basis.startswith("NVML on ")
    assert memory.gpu_error is None
    assert memory.weights_bytes is None
    assert memory.weights_error == "a Hub id: the checkpoint is not a directory on this host"
    assert memory.text_config is None  # no config.json here: nothing to mirror either
    assert memory.env == {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"}
    # the command line sets no mem_fraction_static: the resolved one is the default
    assert memory.default_error is None


# -- a refusal quoting a secret ---------------------------------------------------------------


def test_a_secret_in_an_error_is_redacted(
    profile_dir: ProfileDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang's own argparse error quotes the bad value; orch's refusal carries it, and the error
    goes through the same stream as everything else (the stand-in's parser, run by the probe)."""
    monkeypatch.setenv("TP", "s3cr3t-tp-value")
    profile_dir.write(
        "leaky",
        f"""\
        host: gpu-1
        model: {{path: /models/Qwen3.6-27B}}
        sglang: '0.5.23'
        gpu: {{type: H200}}
        env: {{PYTHONPATH: {STANDIN}, ORCH_STANDIN_VERSION: '0.5.23'}}
        args: {{tp_size: {{from_env: TP}}}}
        """,
    )
    out, err = io.StringIO(), io.StringIO()
    argv = [
        "--profiles",
        str(profile_dir.root),
        "plan",
        "leaky",
        "--local-sglang",
        sys.executable,
        "--model-config",
        str(STANDIN / "models/Qwen3.6-27B/config.json"),
    ]
    code = main(argv, out=out, err=err)
    assert code == ExitCode.PLAN_REFUSED, err.getvalue()
    assert "invalid int value" in err.getvalue()
    assert "<redacted: from_env TP>" in err.getvalue()
    assert "s3cr3t-tp-value" not in out.getvalue() + err.getvalue()
