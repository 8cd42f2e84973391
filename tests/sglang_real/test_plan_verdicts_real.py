"""Issue 28's facts, with SGLang's real resolution (0.5.11 and 0.5.23 CPU venvs, the GPU simulated
from gpu.type) and a model directory whose safetensors index says 51.1 GiB, as the seeds' model:

- what decides the 0.5.11 draft worker's pool is SGLang's own code, read here from the venv: ONE
  KV layer for a hybrid model's draft worker, speculative states allocated for the capped
  requests only (so the seeds' single-GPU launch is not a deterministic failure: its verdict names
  what decides it, and docs/memory.md says so);
- a launch whose weights do not fit fails the plan with exit 15 and names the term;
- the team's working pivot (TP 4 over four RTX PRO 6000, 0.5.23) is not ``will fail``;
- no shipped Qwen3.6 profile plans ``fits``/``tight`` with a negative exact headroom or an expected
  headroom below -10 % of its GPU."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_examples
from tests.sglang_real.local_plan import local_plan
from tests.sglang_real.test_memory_real import FIXTURE, MODEL_CONFIG

WEIGHTS = int(51.1 * (1 << 30))
SEEDS_SINGLE_GPU = """\
extends: qwen36-mtp-b200
description: the seeds' launch on one 96 GB RTX PRO 6000 (0.5.11)
host: rtxpro-1
gpu:
  type: RTX PRO 6000
  devices: [0]
"""
ON_48_GB = """\
extends: qwen36-mtp-b200
description: the same launch on one 48 GB RTX 6000 Ada, where the weights alone do not fit
host: rtxpro-1
gpu:
  type: RTX 6000 Ada
  devices: [0]
"""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    model = tmp_path_factory.mktemp("qwen36-model")
    (model / "config.json").write_text(MODEL_CONFIG.read_text())
    index = {"metadata": {"total_size": WEIGHTS}, "weight_map": {}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    return model


@pytest.fixture(scope="module")
def profiles(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = copy_examples(tmp_path_factory.mktemp("verdicts") / "profiles")
    (root / "seeds-1gpu.yaml").write_text(SEEDS_SINGLE_GPU)
    (root / "seeds-48gb.yaml").write_text(ON_48_GB)
    return root


def _plan(root: Path, profile: str, python: Path, model: Path) -> tuple[int, dict[str, Any]]:
    code, document, _ = local_plan(
        root, python, "plan", profile, model_config=model / "config.json"
    )
    return code, document


DRAFT_POOL_PROBE = """
import inspect, json
from sglang.srt.model_executor.model_runner_kv_cache_mixin import ModelRunnerKVCacheMixin as M
pools = inspect.getsource(M._init_pools)
print(json.dumps({"init_pools": pools, "reserve": inspect.getsource(M.handle_max_mamba_cache)}))
"""


def test_0511_sizes_the_hybrid_draft_pool_and_the_spec_states_as_the_plan_does(
    request: pytest.FixtureRequest,
) -> None:
    python: Path = request.getfixturevalue(FIXTURE["0.5.11"])
    found = subprocess.run(
        [str(python), "-c", DRAFT_POOL_PROBE], capture_output=True, text=True, check=True
    )
    source = json.loads(found.stdout)
    flat = " ".join(source["init_pools"].split())
    # the draft worker's HybridLinearKVPool: one attention layer, the target's token count
    assert "full_attention_layer_ids=( [0] if self.is_draft_worker" in flat
    # the intermediate states: sized by the (capped) max_running_requests ...
    assert "mamba_spec_state_size=max_num_reqs" in flat
    assert "max_num_reqs = self.max_running_requests" in flat
    # ... while the reserve was subtracted for every resolved request
    reserve = " ".join(source["reserve"].split())
    assert "* max_running_requests * server_args.speculative_num_draft_tokens" in reserve


def test_the_seeds_single_gpu_launch_names_what_decides_it(
    request: pytest.FixtureRequest, profiles: Path, model_dir: Path
) -> None:
    python: Path = request.getfixturevalue(FIXTURE["0.5.11"])
    code, document = _plan(profiles, "seeds-1gpu", python, model_dir)
    budget = document["memory"]
    assert budget["gpu_name"] == "NVIDIA RTX PRO 6000"
    # one KV layer of 16 for the draft worker, not the 64-layer pool the earlier plan counted
    assert budget["draft_in_slack_gib"] == pytest.approx(budget["kv_gib"] / 16, rel=0.01)
    # 48 resolved requests x 4 drafts reserved, 4 + 1 allocated
    assert budget["mamba"]["spec_reserve_gib"] > 5 * budget["spec_allocated_gib"]
    assert budget["left_for_estimates_gib"] > 0
    assert budget["deciding"]
    assert budget["verdict"] in ("fits", "tight")
    assert code == 0
    for term in budget["terms"]:
        assert term["basis"] in ("sglang-code", "checkpoint", "estimate")
    range_ = budget["headroom_range_gib"]
    assert range_["worst"] <= range_["expected"] <= range_["best"]


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_weights_larger_than_the_gpu_will_fail_with_exit_15(
    request: pytest.FixtureRequest, profiles: Path, model_dir: Path, version: str
) -> None:
    python: Path = request.getfixturevalue(FIXTURE[version])
    name = f"seeds-48gb-{version.replace('.', '')}"
    (profiles / f"{name}.yaml").write_text(f'extends: seeds-48gb\nsglang: "{version}"\n')
    code, document = _plan(profiles, name, python, model_dir)
    budget = document["memory"]
    assert budget["verdict"] == "will fail"
    assert "CUDA out of memory while loading weights" in budget["deciding"]
    assert code == 15


def test_the_tp4_pivot_is_not_will_fail(
    request: pytest.FixtureRequest, profiles: Path, model_dir: Path
) -> None:
    python: Path = request.getfixturevalue(FIXTURE["0.5.23"])
    code, document = _plan(profiles, "qwen36-mtp-rtxpro6000-tp4", python, model_dir)
    budget = document["memory"]
    assert budget["verdict"] != "will fail", budget["deciding"]
    assert budget["weights_gib"] == pytest.approx(51.1 / 4, abs=0.01)
    assert code == 0


SHIPPED = {
    "qwen36-mtp-b200": "0.5.11",
    "qwen36-mtp-h200": "0.5.11",
    "qwen36-mtp-rtxpro6000-tp4": "0.5.23",
}


@pytest.mark.parametrize("profile", sorted(SHIPPED))
def test_no_shipped_profile_fits_with_a_negative_headroom(
    request: pytest.FixtureRequest, profiles: Path, model_dir: Path, profile: str
) -> None:
    python: Path = request.getfixturevalue(FIXTURE[SHIPPED[profile]])
    _, document = _plan(profiles, profile, python, model_dir)
    budget = document["memory"]
    assert budget["verdict"] in ("fits", "tight"), budget["deciding"]  # each runs somewhere
    assert budget["left_for_estimates_gib"] >= 0
    assert budget["headroom_gib"] >= -0.10 * budget["total_gib"], budget["deciding"]
