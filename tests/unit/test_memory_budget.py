"""The memory budget's arithmetic (orchestrator/sglang/memory/), on round numbers worked by hand.

Each scenario's expected figures are derived in its comments from SGLang's code as quoted in
docs/memory.md; the real-SGLang tier (tests/sglang_real/test_memory_sglang.py) runs SGLang's own
functions on the same inputs and compares.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.sglang.memory.budget import FAILS, TIGHT, budget_for, plan_budget
from orchestrator.sglang.memory.measured import MeasuredMemory, compare
from orchestrator.sglang.memory.pools import slots_per_request
from orchestrator.sglang.memory.rules import JOINT, LEGACY, BudgetInputs, rules_for
from orchestrator.sglang.memory.shapes import (
    GIB,
    GpuMemory,
    MemoryAnswer,
    ModelMemory,
    mirrored_model,
    nominal_gpu,
)

pytestmark = pytest.mark.unit

STANDIN_CONFIG = Path(__file__).resolve().parents[2] / "standin/models/Qwen3.6-27B/config.json"
QUARTER = GIB // 4  # a mamba slot of 0.25 GiB keeps the sums exact
CELL = 64 * 1024  # bytes per KV token


def _gpu(free_gib: float, total_gib: float = 100.6) -> GpuMemory:
    return GpuMemory("NVIDIA TEST", int(total_gib * GIB), int(free_gib * GIB), "test")


def _hybrid(weights_gib: float = 40, draft_layers: int | None = None) -> ModelMemory:
    return ModelMemory(
        basis="test",
        architecture="T",
        context_len=8192,
        attention_tp=1,
        full_attention_layers=16,
        kv_cell_bytes=CELL,
        kv_dtype="bfloat16",
        hybrid=True,
        mamba_layers=48,
        mamba_slot_bytes=QUARTER,
        weights_bytes=int(weights_gib * GIB),
        weights_basis="test",
        draft_kv_layers=draft_layers,
    )


# P = 100.6 - 0.6 (CUDA context) = 100 GiB; weights 40 -> 60 free after them;
# mem_fraction_static 0.9 -> slack 10 GiB, rest 50 GiB.
SPEC = BudgetInputs(
    mem_fraction_static=0.9,
    max_running_requests=48,
    max_mamba_cache_size=24,
    extra_buffer=True,
    speculative=True,
    speculative_num_draft_tokens=4,
    context_len=8192,
    chunked_prefill_size=8192,
    cuda_graph_max_bs=256,
)


def test_0511_reserves_speculative_state_for_every_request_and_runs_out() -> None:
    # 0.5.11: rest -= 0.25 x 48 requests x 4 drafts = 48 GiB -> 2; 24 slots x 0.25 = 6 -> -4:
    # no KV token fits, MemoryPoolConfig raises "Not enough memory".
    budget = plan_budget(_hybrid(), (_gpu(100.6),), SPEC, version=(0, 5, 11))
    assert budget.family == LEGACY
    assert budget.pre_load_gib == pytest.approx(100.0)
    assert budget.slack_gib == pytest.approx(10.0)
    assert budget.mamba is not None
    assert budget.mamba.spec_reserve_gib == pytest.approx(48.0)
    assert budget.mamba.slots == 24
    assert budget.mamba.pool_gib == pytest.approx(6.0)
    assert budget.kv_tokens == 0
    assert budget.verdict == FAILS
    assert budget.failure is not None
    assert "Not enough memory. Please try to increase --mem-fraction-static" in budget.failure


def test_0523_reserves_only_for_the_capped_requests_and_fits() -> None:
    # 0.5.23: 5 slots per request (extra_buffer + overlap); capped = min(48, 24 // 5) = 4;
    # reserve 0.25 x (4 + 1) x 4 = 5 GiB -> 45; pool (24 + 1) x 0.25 = 6.25 -> 38.75 GiB of KV.
    budget = plan_budget(_hybrid(), (_gpu(100.6),), SPEC, version=(0, 5, 23))
    assert budget.family == JOINT
    assert budget.mamba is not None
    assert budget.mamba.slots_per_request == 5
    assert budget.mamba.spec_reserve_gib == pytest.approx(5.0)
    assert budget.mamba.pool_gib == pytest.approx(6.25)
    assert budget.kv_tokens == pytest.approx(int(38.75 * GIB) // CELL, abs=1)  # float GiB
    # max_running_requests: 48 asked, the KV pool allows far more, the mamba pool 24 // 5 = 4
    assert budget.max_running_requests == 4
    assert budget.limited_by.startswith("mamba slots")
    assert any("capped to 4 by the mamba state cache" in w for w in budget.warnings)
    assert budget.failure is None


def test_0523_counts_the_mtp_draft_layers_in_every_kv_token() -> None:
    # One draft layer beside 16 full-attention layers: the cell grows by 64 KiB x 1/16.
    budget = plan_budget(_hybrid(draft_layers=1), (_gpu(100.6),), SPEC, version=(0, 5, 23))
    assert budget.kv_cell_bytes == CELL + CELL // 16
    assert budget.kv_tokens == pytest.approx(int(38.75 * GIB) // (CELL + CELL // 16), abs=1)


def test_0523_solves_the_slot_count_jointly_from_the_memory_ratio() -> None:
    # No explicit size: budget = 50 x 0.4 / 1.4 GiB; with D = 4 drafts and 5 slots/request:
    # K = (budget - per x 5) // (per x (1 + 4/5)).
    inputs = BudgetInputs(
        **{**SPEC.__dict__, "max_mamba_cache_size": None, "mamba_full_memory_ratio": 0.4}
    )
    budget = plan_budget(_hybrid(), (_gpu(100.6),), inputs, version=(0, 5, 23))
    share = 50 * 0.4 / 1.4 * GIB
    expected = int((share - QUARTER * 5) // (QUARTER * 1.8))
    assert budget.mamba is not None
    assert budget.mamba.slots == expected
    assert "solved jointly" in budget.mamba.sized_by
    capped = min(48, expected // 5)
    assert budget.mamba.spec_reserve_gib == pytest.approx(0.25 * (capped + 1) * 4)


def test_0511_sizes_the_slots_from_the_ratio_after_the_reserve() -> None:
    inputs = BudgetInputs(
        **{
            **SPEC.__dict__,
            "max_mamba_cache_size": None,
            "max_running_requests": 8,
            "mamba_full_memory_ratio": 0.9,
        }
    )
    # reserve 0.25 x 8 x 4 = 8 -> rest 42; K = int(42 x 0.9 / 1.9 GiB // 0.25 GiB)
    budget = plan_budget(_hybrid(), (_gpu(100.6),), inputs, version=(0, 5, 11))
    assert budget.mamba is not None
    assert budget.mamba.slots == int(42 * 0.9 / 1.9 * GIB // QUARTER)


def test_weights_that_leave_nothing_are_sglang_0523s_valueerror_with_the_minimum() -> None:
    # 95 GiB of weights: 5 left, slack 10 -> rest -5 before the pools.
    plain = ModelMemory(
        basis="t",
        architecture=None,
        context_len=8192,
        attention_tp=1,
        full_attention_layers=32,
        kv_cell_bytes=CELL,
        kv_dtype="bfloat16",
        hybrid=False,
        weights_bytes=95 * GIB,
    )
    inputs = BudgetInputs(mem_fraction_static=0.9, context_len=8192)
    budget = plan_budget(plain, (_gpu(100.6),), inputs, version=(0, 5, 23))
    assert budget.verdict == FAILS
    assert budget.failure is not None
    # minimum = 1 - 5 / 100 = 0.95 (rounded up at the third decimal, as SGLang prints it)
    assert "Raise --mem-fraction-static above 0.95" in budget.failure


def test_weights_larger_than_the_gpu_fail_while_loading() -> None:
    plain = ModelMemory(
        basis="t",
        architecture=None,
        context_len=8192,
        attention_tp=1,
        full_attention_layers=32,
        kv_cell_bytes=CELL,
        kv_dtype="bfloat16",
        hybrid=False,
        weights_bytes=51 * GIB,
    )
    budget = plan_budget(
        plain, (_gpu(44.6, 44.6),), BudgetInputs(mem_fraction_static=0.9), version=(0, 5, 23)
    )
    assert budget.verdict == FAILS
    assert budget.failure is not None
    assert "CUDA out of memory while loading weights" in budget.failure
    assert any("--tp-size" in hint for hint in budget.hints)


def test_weights_are_shared_by_the_ranks() -> None:
    budget = plan_budget(
        _hybrid(weights_gib=80),
        (_gpu(100.6), _gpu(100.6)),
        BudgetInputs(**{**SPEC.__dict__, "tp_size": 2}),
        version=(0, 5, 23),
    )
    assert budget.weights_gib == pytest.approx(40.0)


def test_a_fraction_above_sglangs_default_leaves_less_slack_and_is_tight() -> None:
    budget = plan_budget(
        _hybrid(), (_gpu(100.6),), SPEC, version=(0, 5, 23), default_mem_fraction_static=0.8
    )
    assert budget.default_slack_gib == pytest.approx(20.0)
    assert budget.verdict == TIGHT
    assert any(
        "0.9 leaves 10.0 GiB" in w and "(0.8) would leave 20.0 GiB" in w for w in budget.warnings
    )


@pytest.mark.parametrize(
    ("family", "changes", "slots"),
    [
        (LEGACY, {}, 3),
        (LEGACY, {"extra_buffer": True}, 5),
        (LEGACY, {"extra_buffer": True, "disable_overlap_schedule": True}, 4),
        (LEGACY, {"extra_buffer": True, "disable_radix_cache": True}, 1),
        (JOINT, {"extra_buffer": True, "skip_decode_lock": True}, 4),
        (JOINT, {"skip_decode_lock": True}, 3),
        (LEGACY, {"skip_decode_lock": True}, 3),  # 0.5.11 has no such switch
    ],
)
def test_slots_per_request_follow_calculate_mamba_ratio(
    family: str, changes: dict[str, bool], slots: int
) -> None:
    inputs = BudgetInputs(mem_fraction_static=0.9, **changes)  # type: ignore[arg-type]
    assert slots_per_request(rules_for(tuple(int(p) for p in family.split("."))), inputs) == slots


def test_the_mirror_computes_the_standin_models_shapes() -> None:
    # Qwen3.5-style: 64 layers, every 4th full attention -> 16 full, 48 linear.
    # conv: (128 x 48 + 2 x 16 x 128) x (4 - 1) x 2 bytes = 61440 per layer;
    # ssm: 48 x 128 x 128 x 4 bytes (float32) = 3145728 per layer.
    # KV: 4 heads x (256 + 256) x 16 layers x 2 bytes = 65536 per token.
    config = json.loads(STANDIN_CONFIG.read_text())
    model = mirrored_model(config, attention_tp=1)
    assert model is not None
    assert model.hybrid
    assert (model.mamba_layers, model.full_attention_layers) == (48, 16)
    assert model.mamba_slot_bytes == (61440 + 3145728) * 48
    assert model.kv_cell_bytes == 65536
    # the MTP layer: run by the draft worker (mtp_num_hidden_layers), but not added to the
    # target's KV cell by 0.5.23 (it reads the target config's num_nextn_predict_layers: none)
    assert (model.draft_worker_layers, model.draft_kv_layers) == (1, None)
    halved = mirrored_model(config, attention_tp=2, env={"SGLANG_MAMBA_SSM_DTYPE": "bfloat16"})
    assert halved is not None
    assert halved.mamba_slot_bytes == (61440 // 2 + 3145728 // 4) * 48
    assert halved.kv_cell_bytes == 65536 // 2


def test_a_budget_from_a_standin_answer_uses_the_mirror_and_the_nominal_gpu() -> None:
    config = json.loads(STANDIN_CONFIG.read_text())
    answer = MemoryAnswer(
        model=None,
        shapes_error="sglang.srt.configs is not importable",
        text_config=config,
        weights_bytes=50 * GIB,
        weights_basis="index",
        gpu_error="no NVIDIA driver",
    )
    effective = {
        "mem_fraction_static": 0.85,
        "tp_size": 1,
        "context_length": 8192,
        "mamba_radix_cache_strategy": "extra_buffer",
        "max_running_requests": 48,
        "speculative_algorithm": "EAGLE",
        "speculative_num_draft_tokens": 4,
    }
    budget, notes = budget_for(
        answer, effective, {}, version=(0, 5, 23), nominal=nominal_gpu("H200", 141)
    )
    assert budget is not None
    assert budget.total_gib == pytest.approx(141)
    assert budget.weights_gib == pytest.approx(50)
    assert budget.mamba is not None
    assert budget.mamba.slot_bytes == (61440 + 3145728) * 48
    assert any("orch's mirror" in note for note in notes)
    assert any("nominal" in note for note in notes)


def test_no_gpu_and_no_type_is_no_budget_with_the_reason() -> None:
    answer = MemoryAnswer(model=_hybrid(), gpu_error="no NVIDIA driver")
    budget, notes = budget_for(answer, {"mem_fraction_static": 0.9}, {}, version=None)
    assert budget is None
    assert "no NVIDIA driver" in notes[0]
    assert "gpu.type" in notes[0]


def test_unbalanced_gpus_are_sized_by_the_tightest() -> None:
    answer = MemoryAnswer(
        model=_hybrid(weights_gib=80),
        gpus=(
            GpuMemory("A", 100 * GIB, 99 * GIB, "nvml", 0),
            GpuMemory("A", 100 * GIB, 60 * GIB, "nvml", 1),
        ),
    )
    budget, notes = budget_for(
        answer, {"mem_fraction_static": 0.9, "tp_size": 2}, {}, version=(0, 5, 23)
    )
    assert budget is not None
    assert budget.free_gib == pytest.approx(60)
    assert any("unbalanced" in note for note in notes)


def test_the_comparison_gives_the_error_against_what_sglang_logged() -> None:
    budget = plan_budget(_hybrid(), (_gpu(100.6),), SPEC, version=(0, 5, 23))
    measured = MeasuredMemory(
        rank="TP0",
        avail_before_load_gib=99.5,
        weights_gib=40.0,
        mamba_slots=24,
        kv_tokens=600_000,
        max_running_requests=4,
    )
    rows = {row.figure: row for row in compare(budget, measured)}
    assert rows["weights"].error_pct == pytest.approx(0.0)
    assert rows["free before loading"].error_pct == pytest.approx((100 - 99.5) / 99.5 * 100)
    assert rows["KV tokens"].error_pct == pytest.approx((budget.kv_tokens - 600_000) / 6000)
    assert rows["max_running_requests"].error_pct == 0
    assert rows["free after the pools"].measured is None
    assert rows["free after the pools"].error_pct is None


def test_the_segments_add_up_to_the_gpu() -> None:
    budget = plan_budget(_hybrid(), (_gpu(100.6),), SPEC, version=(0, 5, 23))
    assert sum(size for _, size in budget.segments) == pytest.approx(budget.total_gib)


@pytest.mark.parametrize(
    ("version", "since"),
    [
        ((0, 5, 11), (0, 5, 11)),
        ((0, 5, 12), (0, 5, 11)),
        ((0, 5, 13, 1), (0, 5, 13)),
        ((0, 5, 15), (0, 5, 14)),
        ((0, 5, 16), (0, 5, 16)),
        ((0, 5, 20), (0, 5, 17)),
        ((0, 5, 23), (0, 5, 23)),
        ((0, 6, 0), (0, 5, 23)),
        ((0, 4, 9), (0, 5, 11)),
        (None, (0, 5, 23)),
    ],
)
def test_each_release_gets_the_rules_of_the_newest_release_at_or_before_it(
    version: tuple[int, ...] | None, since: tuple[int, ...]
) -> None:
    assert rules_for(version).since == since


def test_0513_first_joint_solve_has_no_padding_slot() -> None:
    # 0.5.13-0.5.16: K = budget // (per x (1 + D/S)), reserve per x min(48, K // 5) x D, no +1.
    inputs = BudgetInputs(
        **{**SPEC.__dict__, "max_mamba_cache_size": None, "mamba_full_memory_ratio": 0.4}
    )
    budget = plan_budget(_hybrid(), (_gpu(100.6),), inputs, version=(0, 5, 13))
    share = 50 * 0.4 / 1.4 * GIB
    slots = int(share // (QUARTER * 1.8))
    assert budget.mamba is not None
    assert budget.mamba.slots == slots
    assert budget.mamba.spec_reserve_gib == pytest.approx(0.25 * min(48, slots // 5) * 4)
    assert budget.mamba.pool_gib == pytest.approx(slots * 0.25)


def test_a_user_request_count_is_bounded_by_the_estimate_before_0514_and_the_kv_after() -> None:
    # 10 GiB of KV at 64 KiB a token = 163840 tokens; context 8192 -> estimate clamp(10240) =
    # 4096; 5000 requested: 0.5.11 gives min(5000, 4096), 0.5.14 min(5000, 163840 // 2).
    plain = ModelMemory(
        basis="t",
        architecture=None,
        context_len=8192,
        attention_tp=1,
        full_attention_layers=32,
        kv_cell_bytes=CELL,
        kv_dtype="bfloat16",
        hybrid=False,
        weights_bytes=40 * GIB,
    )
    inputs = BudgetInputs(mem_fraction_static=0.5, max_running_requests=5000, context_len=8192)
    # P 100, weights 40, slack 50 -> 10 GiB of KV
    old = plan_budget(plain, (_gpu(100.6),), inputs, version=(0, 5, 11))
    new = plan_budget(plain, (_gpu(100.6),), inputs, version=(0, 5, 14))
    assert old.kv_tokens == pytest.approx(163840, abs=1)
    assert old.max_running_requests == 4096
    assert "estimate" in old.limited_by
    assert new.max_running_requests == 5000
    assert new.limited_by == "max_running_requests as resolved"
