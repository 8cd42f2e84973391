"""The memory budget through the real entry point, against the stand-in on this machine:
a launch that cannot fit is refused before anything starts (``--force`` launches anyway), and a
READY server's logged memory figures are shown beside the prediction by ``up``,
``diff-effective`` (from the prediction kept with the run) and ``status`` (``/v1/loads``).

No NVML here: the GPU's size comes from ``gpu.type``; the stand-in model's index says 51.10 GiB
of weights (standin/models/Qwen3.6-27B/model.safetensors.index.json)."""

from __future__ import annotations

import json

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace

pytestmark = pytest.mark.e2e


def test_a_model_larger_than_the_gpu_is_refused_before_start_and_force_launches(
    local_workspace: Workspace,
) -> None:
    name = local_workspace.profile("small-gpu", "gpu:\n  type: L40S\n")

    planned = local_workspace.orch("plan", name, "--json")
    assert planned.code == ExitCode.PLAN_REFUSED, planned.err
    budget = planned.json()["memory"]
    assert budget["verdict"] == "will fail"
    assert "CUDA out of memory while loading weights: 51.10 GiB per GPU" in budget["failure"]

    refused = local_workspace.orch("up", name)
    assert refused.code == ExitCode.PLAN_REFUSED, refused.err
    assert "the memory plan says SGLang will fail" in refused.err
    assert "--force launches anyway" in refused.err
    assert not (local_workspace.deployment_dir(name) / "state.json").exists()

    forced = local_workspace.orch("up", name, "--force")
    try:
        assert forced.code == ExitCode.OK, forced.err
        assert "(--force: launching anyway)" in forced.err
    finally:
        assert local_workspace.orch("down", name).code == ExitCode.OK


def test_a_ready_server_shows_its_memory_beside_the_prediction(
    local_workspace: Workspace,
) -> None:
    name = local_workspace.profile("h200", "gpu:\n  type: H200\n")
    planned = local_workspace.orch("plan", name, "--json").json()["memory"]
    assert planned["verdict"] in ("fits", "tight")
    up = local_workspace.orch("up", name)
    try:
        assert up.code == ExitCode.OK, up.err
        # up's one line: the plan's verdict and the term that decides it
        assert f"  memory: {planned['verdict']} on NVIDIA H200" in up.out
        assert planned["deciding"] in up.out
        assert "memory, predicted vs measured" in up.out
        assert "weights                 51.10 GiB   51.10 GiB   +0.0%" in up.out
        assert "measured by orch's SGLang stand-in, NOT SGLang" in up.out

        diff = local_workspace.orch("diff-effective", name, "--json")
        assert diff.code == ExitCode.OK, diff.err
        rows = {row["figure"]: row for row in diff.json()["memory"]["comparisons"]}
        assert rows["weights"]["predicted"] == pytest.approx(51.1)
        assert rows["weights"]["measured"] == pytest.approx(51.1)
        assert rows["KV tokens"]["predicted"] is not None
        assert rows["KV tokens"]["measured"] is not None
        text = local_workspace.orch("diff-effective", name).out
        assert "predicted at launch vs as SGLang logged it" in text

        (row,) = local_workspace.orch("status", name, "--json").json()
        (load,) = row["memory_loads"]
        assert load["weight_gib"] == pytest.approx(51.1)
        assert load["token_capacity"] == rows["KV tokens"]["measured"]
        assert "memory: weights 51.1 GiB" in local_workspace.orch("status", name).out
    finally:
        assert local_workspace.orch("down", name).code == ExitCode.OK


def test_without_a_plan_the_logged_memory_is_shown_alone(local_workspace: Workspace) -> None:
    name = local_workspace.profile("unplanned")
    up = local_workspace.orch("up", name, "--no-plan")
    try:
        assert up.code == ExitCode.OK, up.err
        assert "memory as SGLang logged it:" in up.out
        diff = local_workspace.orch("diff-effective", name).out
        assert "no prediction kept" in diff
        memory = json.loads(local_workspace.orch("diff-effective", name, "--json").out)["memory"]
        assert memory["measured"][0]["weights_gib"] == pytest.approx(51.1)
    finally:
        assert local_workspace.orch("down", name).code == ExitCode.OK


def test_plan_fit_runs_through_the_entry_point_and_each_edit_is_planned(
    local_workspace: Workspace,
) -> None:
    """``plan --fit`` against the stand-in (orch's, NOT SGLang): the weights cannot fit one
    L40S; the edits come back as dotted profile keys, each planned through the probe's batch."""
    name = local_workspace.profile("small-gpu-fit", "gpu:\n  type: L40S\n")
    fitted = local_workspace.orch("plan", name, "--fit", "--json")
    document = fitted.json()
    assert document["as_is"]["verdict"] == "will fail"
    assert document["planned"] >= 1
    assert fitted.code == ExitCode.OK, fitted.err
    assert document["standin"] is True
    assert document["suggestions"]
    for suggestion in document["suggestions"]:
        assert suggestion["predicted"]["verdict"] != "will fail"
        assert "args.tp_size" in suggestion["profile_changes"]  # 51.1 GiB needs two GPUs
        assert all(key.startswith("args.") for key in suggestion["profile_changes"])
    text = local_workspace.orch("plan", name, "--fit")
    assert text.code == fitted.code
    assert "searched" in text.out
    assert "through SGLang's own resolution" in text.out
