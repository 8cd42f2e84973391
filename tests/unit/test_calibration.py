"""The memory calibration's pure parts: the plan's terms beside a real SGLang capture's, the
section of bench/results.md they become, and which profiles one box can host.

The measured side is read by orch's own reader from real startup logs (tests/fixtures/sglang/
memory-logs, pasted into public GitHub threads); the predicted side is a plan's ``memory`` object
in the shape ``orch plan --json`` prints (its figures made up here: these captures carry none of
the inputs a prediction needs)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.show import calibration as show
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang.memory.calibration import (
    Calibration,
    GpuFacts,
    ProfileRun,
    compare_plan,
    gpus_needed,
    measured_terms,
    predicted_terms,
    startup_complete,
    why_not_here,
)
from orchestrator.sglang.memory.measured import MeasuredMemory
from orchestrator.sglang.observe import memory_figures
from tests.conftest import REPO, SHIPPED_PROFILES

MEMORY_LOGS = REPO / "tests" / "fixtures" / "sglang" / "memory-logs"

# A plan's memory object, as `orch plan --json` prints it (the keys the comparison reads).
PLAN_MEMORY: dict[str, Any] = {
    "pre_load_gib": 22.5,
    "weights_gib": 3.5,
    "mamba": {"slots": 80, "pool_gib": 7.0, "spec_reserve_gib": 0.0, "slots_per_request": 1},
    "kv_tokens": 600_000,
    "kv_gib": 8.0,
    "max_running_requests": 2,
    "slack_gib": 4.25,
    "graphs_gib": 0.5,
    "draft_in_slack_gib": 0.25,
    "activations_gib": 0.0,
    "unused_in_pools_gib": 0.0,
    "spec_allocated_gib": 0.0,
    "left_for_estimates_gib": 4.0,  # the slack less the draft worker's pool
    "verdict": "tight",
}


def _capture(name: str) -> tuple[MeasuredMemory, ...]:
    return memory_figures((MEMORY_LOGS / name).read_text().splitlines())


def test_calibration_compares_each_term_of_the_plan_with_a_real_hybrid_capture() -> None:
    measured = _capture("ktransformers-1870-qwen35-moe-tp2.log")
    assert startup_complete(measured)  # TP0 logged the summary line
    rows = {row.figure: row for row in compare_plan(PLAN_MEMORY, measured[0])}
    # what the capture's TP0 logged: Load weight end, the mamba and KV lines, the summary
    assert rows["weights"].measured == 3.76
    assert rows["mamba slots"].measured == 82
    assert rows["mamba pool"].measured == pytest.approx(0.13 + 7.29)
    assert rows["KV tokens"].measured == 580_364
    assert rows["KV pool"].measured == pytest.approx(4.15 + 4.15)
    assert rows["max_running_requests"].measured == 1
    assert rows["free after the pools"].measured == 4.02
    assert rows["free after CUDA graphs"].measured == 3.63  # the summary's available_gpu_mem
    # the plan's side, and its error against the log
    assert rows["free after CUDA graphs"].predicted == pytest.approx(4.25 - 0.5 - 0.25)
    assert rows["KV tokens"].error_pct == pytest.approx((600_000 - 580_364) / 580_364 * 100)
    assert rows["max_running_requests"].error_pct == pytest.approx(100.0)
    # the capture has no Load weight begin line and the plan no speculative states: a row
    # with one side only stays (the plan's figure, unmeasured), a term neither has is left out
    assert rows["free before loading"].measured is None
    assert rows["free before loading"].predicted == 22.5
    assert "speculative mamba states" in rows  # the plan's 0.0
    assert next(row.figure for row in compare_plan({}, measured[0])) == "weights"


def test_calibration_sums_the_target_and_draft_graphs_and_keeps_the_speculative_states_apart() -> (
    None
):
    target, draft = _capture("sglang-10088-target-and-draft-graphs.log")  # TP0's, TP6's lines
    assert measured_terms(target)["CUDA graphs"] == 0.54
    assert measured_terms(draft)["CUDA graphs"] == 0.21  # "Capture draft cuda graph end"
    both = MeasuredMemory(
        rank="TP0", graphs_gib=0.54, prefill_graphs_gib=0.5, draft_graphs_gib=0.21
    )
    assert measured_terms(both)["CUDA graphs"] == 1.25
    spec = MeasuredMemory(rank=None, mamba_gib=10.5, mamba_intermediate_gib=3.25, mamba_slots=24)
    assert measured_terms(spec)["mamba pool"] == 7.25
    assert measured_terms(spec)["speculative mamba states"] == 3.25


def test_a_plan_without_a_budget_predicts_nothing_and_a_log_without_a_summary_is_incomplete() -> (
    None
):
    assert set(predicted_terms(None).values()) == {None}
    assert set(predicted_terms({"verdict": None, "notes": ["no GPU"]}).values()) == {None}
    graphs_only = _capture("sglang-pr12978-graph-end-tp2.log")
    assert graphs_only
    assert not startup_complete(graphs_only)
    assert not startup_complete(())


def _calibration(runs: tuple[ProfileRun, ...]) -> Calibration:
    return Calibration(
        date="2026-12-05 07:00:00 UTC",
        command="scripts/calibrate-memory --only demo",
        gpus=(GpuFacts(0, "NVIDIA H100 80GB HBM3", 79.19, 78.6),) * 2,
        gpu_basis="NVML",
        sglang_version="0.5.23",
        sglang_python="/opt/venvs/sglang/bin/python",
        standin=False,
        runs=runs,
    )


def test_the_results_section_replaces_only_its_own_part_of_bench_results(tmp_path: Path) -> None:
    results = tmp_path / "results.md"
    shutil.copyfile(REPO / "bench" / "results.md", results)
    before = results.read_text()
    assert "No GPU calibration has been run yet" in before  # the shipped file says so
    measured = _capture("ktransformers-1870-qwen35-moe-tp2.log")
    run = ProfileRun(
        "qwen36-mtp-h200",
        "measured",
        plan_verdict="tight",
        rank=measured[0].rank,
        rows=compare_plan(PLAN_MEMORY, measured[0]),
        log="bench/calibration-logs/qwen36-mtp-h200-20261205T070000Z.log",
    )
    skipped = ProfileRun("qwen35-397b-2x8-h200", "not run", "a 2-node launch group")
    section = show.results_section(_calibration((run, skipped)))
    after = show.replace_section(before, section)
    assert "No GPU calibration has been run yet" not in after
    assert "| KV tokens | 600,000 | 580,364 | +3.4 % |" in after
    assert "| weights | 3.50 GiB | 3.76 GiB | -6.9 % |" in after
    assert "| free before loading | 22.50 GiB | - | - |" in after
    assert "### qwen36-mtp-h200: measured (plan: tight)" in after
    assert "log: `bench/calibration-logs/qwen36-mtp-h200-20261205T070000Z.log`, rank TP0" in after
    assert "### qwen35-397b-2x8-h200: not run\n\na 2-node launch group" in after
    assert "- GPU: 2 x NVIDIA H100 80GB HBM3 (79.2 GiB each); NVML" in after
    # every other section is untouched, and a second run replaces the first
    start, end = before.index(show.BEGIN), before.index(show.END) + len(show.END)
    assert after.startswith(before[:start])
    assert after.endswith(before[end:])
    assert show.replace_section(after, section) == after
    assert show.section_of(after) == section
    # a file without the section gets it at its end
    assert show.replace_section("# orch benchmarks\n", section).endswith(section + "\n")
    assert show.section_of("# orch benchmarks\n") is None


def test_the_json_record_carries_each_term_with_its_error() -> None:
    measured = _capture("ktransformers-1870-qwen35-moe-tp2.log")[0]
    run = ProfileRun("p", "measured", rows=compare_plan(PLAN_MEMORY, measured), rank="TP0")
    document = show.as_json(_calibration((run,)))
    assert document["format"] == show.JSON_FORMAT
    assert document["gpus"][0] == {
        "index": 0,
        "name": "NVIDIA H100 80GB HBM3",
        "total_gib": 79.19,
        "free_gib": 78.6,
    }
    terms = {term["term"]: term for term in document["runs"][0]["terms"]}
    assert terms["KV tokens"] == {
        "term": "KV tokens",
        "unit": "",
        "predicted": 600_000.0,
        "measured": 580_364.0,
        "error_pct": 3.38,
    }


def test_a_standin_section_says_it_is_not_a_calibration() -> None:
    calibration = _calibration(())
    standin = Calibration(**{**calibration.__dict__, "standin": True})
    assert "NOT SGLang" in show.results_section(standin)
    assert "NOT SGLang" not in show.results_section(calibration)


def test_which_shipped_profiles_one_box_can_host() -> None:
    store = ProfileStore(SHIPPED_PROFILES)
    tp4 = store.load("qwen36-mtp-rtxpro6000-tp4").profile
    h200 = store.load("qwen36-mtp-h200").profile
    group = store.load("qwen35-397b-2x8-h200").profile
    assert gpus_needed(tp4) == 4
    assert gpus_needed(h200) == 1
    assert why_not_here(tp4, 1, "Qwen/Qwen3.6-27B", False) == "needs 4 GPUs, this box has 1"
    assert why_not_here(tp4, 4, "Qwen/Qwen3.6-27B", False) is None  # a Hub id
    assert why_not_here(h200, 8, "/models/Qwen3.6-27B", True) is None
    missing = why_not_here(h200, 8, "/models/Qwen3.6-27B", False)
    assert missing is not None
    assert missing.startswith("model.path /models/Qwen3.6-27B is not on this box: give --model")
    assert why_not_here(group, 16, "/models/x", True) == (
        "a 2-node launch group: one box cannot host it"
    )
