"""``orch diff --local-sglang`` on a change to the shipped profiles, with SGLang's real parsing
and resolution of each side's release (this tier's CPU venvs, the GPU simulated from gpu.type):
an explicit default is no change, a resolution side effect shows with SGLang's own step, a
release bump is a replace whose renames read as renames, and the memory plans of both sides."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ExitCode
from tests.conftest import copy_examples
from tests.sglang_real.test_memory_real import MODEL_CONFIG
from tests.unit.review.repo import ProfilesRepo, by_name

MTP_0523 = """\
extends: qwen36-27b
description: Qwen3.6-27B + MTP on one B200, SGLang 0.5.23
sglang: "0.5.23"
host: b200-1
gpu:
  type: B200
  devices: [0]
spec_decode:
  algorithm: EAGLE
  num_steps: 3
  eagle_topk: 1
  num_draft_tokens: 4
args:
  mamba_radix_cache_strategy: extra_buffer
  max_mamba_cache_size: 24
  mem_fraction_static: 0.9
"""


@pytest.fixture
def shipped(
    tmp_path: Path, sglang_0511: Path, sglang_0523: Path, monkeypatch: pytest.MonkeyPatch
) -> ProfilesRepo:
    # `--local-sglang` without a python takes each side's release from the venv cache: this
    # tier's venvs
    assert sglang_0511.parent.parent.parent == sglang_0523.parent.parent.parent
    monkeypatch.setenv("ORCH_SGLANG_VENV_CACHE", str(sglang_0523.parent.parent.parent))
    repo = ProfilesRepo(tmp_path / "team")
    copy_examples(repo.profiles)
    repo.write("mtp23.yaml", MTP_0523)
    repo.commit("the shipped profiles")
    return repo


def _diff(repo: ProfilesRepo, *argv: str) -> tuple[int, dict[str, dict[str, Any]]]:
    code, report = repo.diff_json(
        "HEAD~1..HEAD", *argv, "--local-sglang", "--model-config", str(MODEL_CONFIG)
    )
    return code, by_name(report)


def test_a_side_effect_shows_with_sglangs_step_and_an_explicit_default_does_not(
    shipped: ProfilesRepo,
) -> None:
    shipped.edit("mtp23.yaml", "num_steps: 3", "num_steps: 4")  # draft tokens left at 4
    shipped.edit(
        "mtp23.yaml",
        "mem_fraction_static: 0.9",
        "mem_fraction_static: 0.9\n  max_prefill_tokens: 16384",
    )
    shipped.commit("one more step")
    code, deployments = _diff(shipped, "mtp23")
    assert code == ExitCode.CHANGES
    item = deployments["mtp23"]
    assert item["action"] == "restart"
    changes = {c["field"]: c for c in item["changes"]}
    assert "max_prefill_tokens" not in changes  # 16384 is 0.5.23's default: no change
    assert (
        changes["speculative_num_steps"]["before"],
        changes["speculative_num_steps"]["after"],
    ) == (3, 4)
    drafted = changes["speculative_num_draft_tokens"]
    assert (drafted["before"], drafted["after"]) == (4, 5)  # SGLang's steps + 1, not the 4 asked
    assert drafted["basis"] == "sglang"
    assert "as the profile asks" not in drafted["how"].split("->")[-1]  # SGLang's step, named
    memory = item["memory"]
    for side in ("before", "after"):
        assert memory[side]["verdict"] in ("fits", "tight", "will fail")
        assert memory[side]["max_running_requests"] > 0
    assert any("planned by local" in note for note in item["notes"])


def test_a_release_bump_is_a_replace_with_renames_and_both_plans(shipped: ProfilesRepo) -> None:
    shipped.edit("qwen36-mtp-b200.yaml", 'sglang: "0.5.11"', 'sglang: "0.5.23"')
    shipped.commit("to 0.5.23")
    code, deployments = _diff(shipped, "qwen36-mtp-b200")
    assert code == ExitCode.CHANGES
    item = deployments["qwen36-mtp-b200"]
    assert item["action"] == "replace"
    assert item["forced_by"] == ["sglang"]
    changes = {c["field"]: c for c in item["changes"]}
    renamed = changes["mamba_radix_cache_strategy"]
    assert renamed["renamed_from"] == "mamba_scheduler_strategy"
    assert "mamba_scheduler_strategy" not in changes
    planned = [c for c in item["changes"] if c["basis"] == "sglang"]
    assert planned  # SGLang's own resolution of each release compared
    memory = item["memory"]
    for side in ("before", "after"):
        assert memory[side]["verdict"] in ("fits", "tight", "will fail")


def test_a_python_of_one_release_plans_only_the_side_of_that_release(
    shipped: ProfilesRepo, sglang_0523: Path
) -> None:
    shipped.edit("qwen36-mtp-b200.yaml", 'sglang: "0.5.11"', 'sglang: "0.5.23"')
    shipped.commit("to 0.5.23")
    code, report = shipped.diff_json(
        "HEAD~1..HEAD",
        "qwen36-mtp-b200",
        "--local-sglang",
        str(sglang_0523),
        "--model-config",
        str(MODEL_CONFIG),
    )
    assert code == ExitCode.CHANGES
    item = by_name(report)["qwen36-mtp-b200"]
    assert any("has SGLang 0.5.23, the profile asks for 0.5.11" in n for n in item["notes"])
    assert item["memory"]["before"]["verdict"] is None  # no plan of the 0.5.11 side
    assert item["memory"]["after"]["verdict"] in ("fits", "tight", "will fail")
    # without both plans, the argument tables compare: the rename still reads as one
    renamed = {c["field"]: c for c in item["changes"]}["mamba_radix_cache_strategy"]
    assert renamed["renamed_from"] == "mamba_scheduler_strategy"
