"""The planning probe's memory section with SGLang's real classes (0.5.11 and 0.5.23, CPU venvs,
an H200 simulated), on the shipped Qwen3.6-27B config.json (a Qwen3.5-style hybrid): the bytes
per mamba slot and per KV token it reports are what SGLang's own classes compute when a script
of this test calls them directly in the same venv (its own way into them: ``ModelConfig`` built
by hand, the parallel state patched where SGLang reads it); the checkpoint's bytes (safetensors
files written by hand) are what the venv's ``safetensors`` package reads in them. Each probe
imports SGLang (~15 s): a version's probes and its reference script run at once, once per
module."""

from __future__ import annotations

import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.fleet.protocol.plan import decode_plan_answer
from tests.conftest import REPO
from tests.standin.sglang_plugin import run_probe
from tests.standin.test_probe_answers import write_safetensors

FIXTURE = {"0.5.11": "sglang_0511", "0.5.23": "sglang_0523"}
MODEL = "/models/Qwen3.6-27B"  # not on this machine: its config.json goes with the request
MODEL_CONFIG = REPO / "standin" / "models" / "Qwen3.6-27B" / "config.json"  # the real one's copy
CONTEXT = ["--context-length", "8192"]

# SGLang's own classes, called directly: per attention TP and SSM dtype, mamba_cache_per_req of
# the model's mamba-ish config and DefaultPoolConfigurator._compute_cell_size; and the bytes of
# the checkpoint's tensors as the safetensors package reads them.
REFERENCE = """\
import json, os, sys, types

model_dir, version, shards = sys.argv[1], sys.argv[2], sys.argv[3:]
import torch
from safetensors import safe_open
from sglang.srt.configs.model_config import ModelConfig

out = {"bytes": 0}
for shard in shards:
    with safe_open(shard, framework="pt") as tensors:
        for name in tensors.keys():
            tensor = tensors.get_tensor(name)
            out["bytes"] += tensor.numel() * tensor.element_size()
for tp in (1, 2):
    for ssm in (None, "bfloat16"):
        if ssm is None:
            os.environ.pop("SGLANG_MAMBA_SSM_DTYPE", None)
        else:
            os.environ["SGLANG_MAMBA_SSM_DTYPE"] = ssm
        config = ModelConfig(model_path=model_dir, context_length=8192)
        if version == "0.5.23":
            from sglang.srt.configs.hybrid_arch import mambaish_config
            from sglang.srt.model_executor.pool_configurator import DefaultPoolConfigurator
            from sglang.srt.runtime_context import get_parallel

            scope = get_parallel().override(
                tp_size=tp, attn_tp_size=tp, attn_dcp_size=1, enable_cp_tp_group_sharing=False,
                enable_dsa_cache_layer_split=False,
            )
            mambaish = mambaish_config(config)
        else:
            import contextlib
            # ModelRunner imports einops at the top, which a CPU venv lacks; nothing used here
            sys.modules.setdefault("einops", types.ModuleType("einops"))
            import sglang.srt.layers.dp_attention as dp_attention
            import sglang.srt.model_executor.pool_configurator as pools
            from sglang.srt.model_executor.model_runner import ModelRunner

            dp_attention.get_attention_tp_size = lambda: tp
            pools.get_attention_tp_size = lambda: tp
            DefaultPoolConfigurator = pools.DefaultPoolConfigurator
            runner = object.__new__(ModelRunner)
            runner.model_config, runner.is_draft_worker = config, False
            mambaish = runner.mambaish_config
            scope = contextlib.nullcontext()
        with scope:
            params = mambaish.mamba2_cache_params
            layers = len(mambaish.full_attention_layer_ids)
            kvc = types.SimpleNamespace(
                model_config=config, kv_cache_dtype=config.dtype, use_mla_backend=False,
                server_args=types.SimpleNamespace(enable_hisparse=False), is_draft_worker=False,
            )
            configurator = object.__new__(DefaultPoolConfigurator)
            configurator.kv_cache_dtype_str = "auto"
            cell = configurator._compute_cell_size(kvc, layers)
            formula = (config.get_num_kv_heads(tp) * (config.head_dim + config.v_head_dim)
                       * layers * config.dtype.itemsize)
        out[f"{tp}/{ssm}"] = {
            "slot": int(params.mamba_cache_per_req), "cell": int(cell), "formula": formula,
            "ssm_dtype": str(params.dtype.temporal).removeprefix("torch."),
            "mamba_layers": len(params.layers), "full_layers": layers,
        }
print(json.dumps(out))
"""


@dataclass(frozen=True)
class Probed:
    version: str
    answers: dict[str, dict[str, Any]]  # the probe's answers by case
    reference: dict[str, dict[str, Any]]  # SGLang's classes, by "tp/ssm dtype"
    checkpoint_bytes: int  # what the safetensors package wrote


def _venv_json(python: Path, script: str, *args: str) -> Any:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    done = subprocess.run(
        [str(python), "-c", script, *args],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module", params=["0.5.11", "0.5.23"])
def probed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Probed:
    version: str = request.param
    python: Path = request.getfixturevalue(FIXTURE[version])
    root = tmp_path_factory.mktemp(f"memory-{version}")
    plain, indexed = _checkpoint(root / "plain"), _checkpoint(root / "indexed")
    shards = sorted(str(path) for path in plain.glob("*.safetensors"))
    total = json.loads((indexed / "model.safetensors.index.json").read_text())
    cases: dict[str, tuple[list[str], dict[str, str], bool]] = {
        # attention TP 1, the checkpoint's bare safetensors files
        "tp1": (["--model-path", str(plain), "--tp-size", "1", *CONTEXT], {}, False),
        # TP 2, SSM state in bf16 by the flag, mem_fraction_static given; the indexed checkpoint
        "tp2-flag": (
            [
                "--model-path",
                str(indexed),
                "--tp-size",
                "2",
                *CONTEXT,
                "--mamba-ssm-dtype",
                "bfloat16",
                "--mem-fraction-static",
                "0.92",
            ],
            {},
            False,
        ),
        # TP 2, SSM state in bf16 by SGLang's environment variable; the model not on this host
        "tp2-env": (
            ["--model-path", MODEL, "--tp-size", "2", *CONTEXT],
            {"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"},
            True,
        ),
    }

    def probe(case: str) -> dict[str, Any]:
        args, env, remote = cases[case]
        directory = root / case
        directory.mkdir()
        return run_probe(
            python,
            directory,
            args,
            env,
            simulate_h200=True,
            model_config=(MODEL, MODEL_CONFIG) if remote else None,
        )

    with ThreadPoolExecutor(max_workers=len(cases) + 1) as pool:
        reference = pool.submit(_venv_json, python, REFERENCE, str(plain), version, *shards)
        answers = dict(zip(cases, pool.map(probe, cases), strict=True))
    expected = reference.result()
    assert expected.pop("bytes") == total["metadata"]["total_size"]  # safetensors reads ours
    return Probed(version, answers, expected, total["metadata"]["total_size"])


def _checkpoint(directory: Path) -> Path:
    """A model directory: the config.json and two safetensors files of tiny tensors, with an
    index (its total_size) when named "indexed"."""
    directory.mkdir()
    (directory / "config.json").write_text(MODEL_CONFIG.read_text())
    shards = {
        "model-00001-of-00002.safetensors": {"embed": ("BF16", [11, 7]), "norm": ("F32", [5])},
        "model-00002-of-00002.safetensors": {"head": ("F16", [3, 2, 2])},
    }
    total = sum(write_safetensors(directory / name, tensors) for name, tensors in shards.items())
    if directory.name == "indexed":
        weight_map = {tensor: name for name, tensors in shards.items() for tensor in tensors}
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def _shapes(answer: dict[str, Any]) -> dict[str, Any]:
    assert answer["ok"] is True, answer.get("error")
    memory = answer["memory"]
    assert memory["basis"] == "sglang", memory.get("shapes_error")
    shapes: dict[str, Any] = memory["shapes"]
    return shapes


@pytest.mark.parametrize(
    ("case", "expected"), [("tp1", "1/None"), ("tp2-flag", "2/bfloat16"), ("tp2-env", "2/bfloat16")]
)
def test_the_probes_shapes_are_sglangs_own(probed: Probed, case: str, expected: str) -> None:
    answer = probed.answers[case]
    assert answer["sglang_version"] == probed.version
    shapes = _shapes(answer)
    reference = probed.reference[expected]
    assert reference["cell"] == reference["formula"]  # SGLang's function is the MHA formula here
    assert shapes["mamba"]["slot_bytes"] == reference["slot"]
    assert shapes["kv_cell_bytes"] == reference["cell"]
    assert shapes["kv_cell_source"] == "DefaultPoolConfigurator._compute_cell_size"
    assert shapes["mamba"]["ssm_dtype"] == reference["ssm_dtype"]
    assert shapes["mamba"]["layers"] == reference["mamba_layers"]
    assert shapes["full_attention_layers"] == reference["full_layers"]
    assert shapes["attn_tp_size"] == int(expected.split("/")[0])
    assert shapes["context_len"] == 8192
    assert shapes["architecture"] == "Qwen3_5ForConditionalGeneration"
    mamba = shapes["mamba"]
    assert mamba["conv_bytes"] + mamba["ssm_bytes"] == mamba["slot_bytes"]
    # decoded, the same numbers reach orch's budget
    memory = decode_plan_answer(answer).memory
    assert memory is not None
    model = memory.model
    assert model is not None
    assert (model.mamba_slot_bytes, model.kv_cell_bytes, model.attention_tp) == (
        reference["slot"],
        reference["cell"],
        int(expected.split("/")[0]),
    )
    assert model.mamba_ssm_dtype == reference["ssm_dtype"]


def test_the_ssm_dtype_overrides_are_reported_as_sglang_reads_them(probed: Probed) -> None:
    env = {case: answer["memory"]["env"] for case, answer in probed.answers.items()}
    assert env["tp1"] == {"SGLANG_MAMBA_SSM_DTYPE": None, "SGLANG_MAMBA_CONV_DTYPE": "bfloat16"}
    # --mamba-ssm-dtype is written to SGLang's envs by the resolution; the variable directly
    assert env["tp2-flag"]["SGLANG_MAMBA_SSM_DTYPE"] == "bfloat16"
    assert env["tp2-env"]["SGLANG_MAMBA_SSM_DTYPE"] == "bfloat16"


def test_the_checkpoints_bytes_are_read_from_its_headers_or_its_index(probed: Probed) -> None:
    plain = probed.answers["tp1"]["memory"]["weights"]
    assert (plain["bytes"], plain["basis"]) == (
        probed.checkpoint_bytes,
        "safetensors headers of 2 file(s)",
    )
    indexed = probed.answers["tp2-flag"]["memory"]["weights"]
    assert (indexed["bytes"], indexed["basis"]) == (
        probed.checkpoint_bytes,
        "model.safetensors.index.json total_size",
    )
    elsewhere = probed.answers["tp2-env"]["memory"]["weights"]
    assert (elsewhere["path"], elsewhere["bytes"]) == (MODEL, None)
    assert elsewhere["error"] == "not a directory on this host"


def test_sglangs_default_mem_fraction_static_is_reported(probed: Probed) -> None:
    given = probed.answers["tp2-flag"]
    assert given["effective"]["mem_fraction_static"] == 0.92
    memory = given["memory"]
    assert memory["default_mem_fraction_static_basis"] == (
        "resolved again without --mem-fraction-static"
    )
    # the same launch without the flag (the variable in its place) resolves to that default
    unset = probed.answers["tp2-env"]
    assert memory["default_mem_fraction_static"] == unset["effective"]["mem_fraction_static"]
    assert unset["memory"]["default_mem_fraction_static_basis"] == (
        "resolved: the command line sets none"
    )
    assert (
        unset["memory"]["default_mem_fraction_static"]
        == (unset["effective"]["mem_fraction_static"])
    )
    assert 0.5 < memory["default_mem_fraction_static"] < 0.92
    gpus = memory["gpus"]
    assert [(g["name"], g["total_bytes"], g["basis"]) for g in gpus] == [
        ("NVIDIA H200", 144384 << 20, "simulated")
    ]


def test_the_memory_section_is_cheap(probed: Probed) -> None:
    for case, answer in probed.answers.items():
        assert answer["memory"]["elapsed_s"] < 10, case
