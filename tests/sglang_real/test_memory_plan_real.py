"""Issue 12's acceptance, with SGLang's real classes and resolution (0.5.11 and 0.5.23 CPU
venvs, the GPU simulated from gpu.type): ``orch plan`` of the shipped incident profile
(qwen36-mtp-b200) and its H200 variant reports the bytes per mamba slot and per KV token that
SGLang's own classes compute (called by this test's own script in the same venv), the cap on
max_running_requests with its cause, and the headroom warning for mem_fraction_static 0.92
against the default SGLang's resolution picks for that GPU."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import copy_examples
from tests.sglang_real.local_plan import local_plan
from tests.sglang_real.test_memory_real import FIXTURE, MODEL_CONFIG, REFERENCE, _venv_json

PROFILES = ("qwen36-mtp-b200", "qwen36-mtp-h200")


def _plan(root: Path, profile: str, python: Path) -> tuple[int, dict[str, Any]]:
    code, document, _ = local_plan(root, python, "plan", profile)
    return code, document


@pytest.fixture(scope="module", params=["0.5.11", "0.5.23"])
def planned(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, dict[str, dict[str, Any]], dict[str, Any]]:
    version: str = request.param
    python: Path = request.getfixturevalue(FIXTURE[version])
    root = copy_examples(tmp_path_factory.mktemp(f"plans-{version}") / "profiles")
    names = []
    for profile in PROFILES:  # the shipped profiles, retargeted when planning for 0.5.23
        name = f"{profile}-{version.replace('.', '')}"
        (root / f"{name}.yaml").write_text(f'extends: {profile}\nsglang: "{version}"\n')
        names.append(name)
    model = tmp_path_factory.mktemp(f"model-{version}")
    (model / "config.json").write_text(MODEL_CONFIG.read_text())
    with ThreadPoolExecutor(max_workers=len(names) + 1) as pool:
        reference = pool.submit(_venv_json, python, REFERENCE, str(model), version)
        plans = dict(
            zip(PROFILES, pool.map(lambda n: _plan(root, n, python)[1], names), strict=True)
        )
    return version, plans, reference.result()


@pytest.mark.parametrize("profile", PROFILES)
def test_the_plan_reports_sglangs_own_bytes_per_slot_and_per_token(
    planned: tuple[str, dict[str, dict[str, Any]], dict[str, Any]], profile: str
) -> None:
    version, plans, reference = planned
    document = plans[profile]
    assert document["ok"], document["error"]
    assert document["sglang_version"] == version
    budget = document["memory"]
    assert not any("mirror" in note for note in budget["notes"])  # SGLang's classes answered
    assert budget["mamba"]["slot_bytes"] == reference["1/None"]["slot"]
    # 0.5.14+ adds an EAGLE draft's KV layers to the cell, but for a path-less MTP head only the
    # TARGET config's num_nextn_predict_layers, which Qwen3.6's config has not: SGLang's own cell
    assert budget["kv_cell_bytes"] == reference["1/None"]["cell"]
    assert budget["gpu_name"] == ("NVIDIA B200" if profile.endswith("b200") else "NVIDIA H200")


@pytest.mark.parametrize("profile", PROFILES)
def test_the_plan_names_the_mamba_cap_on_requests_and_what_decides_the_verdict(
    planned: tuple[str, dict[str, dict[str, Any]], dict[str, Any]], profile: str
) -> None:
    version, plans, _ = planned
    budget = plans[profile]["memory"]
    # --max-mamba-cache-size 24, extra_buffer with the overlap schedule: 5 slots per request
    assert budget["mamba"]["slots"] == 24
    assert budget["mamba"]["slots_per_request"] == 5
    assert budget["max_running_requests"] == 24 // 5
    assert budget["limited_by"].startswith("mamba slots: max_mamba_cache_size 24 // 5")
    cap = [w for w in budget["warnings"] if "capped to 4 by the mamba state cache" in w]
    assert cap, budget["warnings"]
    assert ("silently" in cap[0]) == (version == "0.5.11")
    default = budget["default_mem_fraction_static"]
    assert default is not None  # SGLang's own choice for this GPU
    assert default < 0.92
    # 0.92 leaves less slack than SGLang's own default would; whether that matters is what the
    # verdict says: tight exactly when what is left outside the pools (0.5.11: with the
    # speculative reserve it never allocates) is short of SGLang's own reserve
    left = budget["left_for_estimates_gib"]
    high = budget["estimate"]["high_gib"]
    assert left >= budget["estimate"]["low_gib"]
    warned = any(
        w.startswith("mem_fraction_static 0.92 leaves") and f"({default:g}) would leave" in w
        for w in budget["warnings"]
    )
    if left < high:
        assert budget["verdict"] == "tight"
        assert warned, budget["warnings"]
        assert "less than SGLang's own reserve" in budget["deciding"]
    else:
        assert budget["verdict"] == "fits"
        assert "covers SGLang's own reserve" in budget["deciding"]
