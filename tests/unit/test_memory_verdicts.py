"""Verdicts that follow from their numbers (orchestrator/sglang/memory/verdict.py): what SGLang's
code sizes exactly decides ``will fail`` on its own; the estimated part (CUDA graphs and
activations) decides only between its low end and SGLang's own reserve. Round numbers, worked by
hand in the comments: P = 100 GiB (a 100.6 GiB GPU less the 0.6 GiB CUDA context)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.sglang.memory.budget import FAILS, FITS, TIGHT, plan_budget
from orchestrator.sglang.memory.rules import BudgetInputs
from orchestrator.sglang.memory.shapes import GIB, GpuMemory, ModelMemory
from orchestrator.sglang.memory.verdict import CHECKPOINT, ESTIMATE, SGLANG_CODE

pytestmark = pytest.mark.unit

CELL = 64 * 1024
QUARTER = GIB // 4


def _gpu(total_gib: float = 100.6) -> GpuMemory:
    return GpuMemory("NVIDIA TEST", int(total_gib * GIB), int(total_gib * GIB), "test")


def _dense(weights_gib: float = 40, draft_layers: int | None = None) -> ModelMemory:
    return ModelMemory(
        basis="test",
        architecture="T",
        context_len=8192,
        attention_tp=1,
        full_attention_layers=16,
        kv_cell_bytes=CELL,
        kv_dtype="bfloat16",
        hybrid=False,
        weights_bytes=int(weights_gib * GIB),
        weights_basis="test",
        draft_worker_layers=draft_layers,
    )


def _hybrid(draft_layers: int | None = 1) -> ModelMemory:
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
        weights_bytes=40 * GIB,
        weights_basis="test",
        draft_worker_layers=draft_layers,
    )


PLAIN = BudgetInputs(mem_fraction_static=0.9, chunked_prefill_size=8192, cuda_graph_max_bs=256)
EAGLE = BudgetInputs(
    mem_fraction_static=0.9,
    speculative=True,
    speculative_algorithm="EAGLE",
    speculative_num_draft_tokens=4,
    max_running_requests=48,
    max_mamba_cache_size=24,
    extra_buffer=True,
    chunked_prefill_size=8192,
    cuda_graph_max_bs=256,
)


def test_a_draft_pool_larger_than_the_slack_will_fail_and_is_named() -> None:
    # 0.5.11, a separate 16-layer draft: its own KV pool has the target's 50 GiB of tokens,
    # after the target's pools, in a 10 GiB slack. Exact, whatever the estimate.
    budget = plan_budget(
        _dense(draft_layers=16),
        (_gpu(),),
        EAGLE,
        version=(0, 5, 11),
        default_mem_fraction_static=0.8,
    )
    assert budget.verdict == FAILS
    assert budget.draft_in_slack_gib == pytest.approx(50.0, abs=0.01)
    assert budget.deciding.startswith("the draft worker's KV pool, 50.0 GiB, exceeds the 10.0 GiB")
    assert budget.refusal is not None
    assert "the draft worker's KV pool" in budget.refusal
    assert budget.left_for_estimates_gib < 0


def test_a_hybrid_draft_worker_in_0511_holds_one_kv_layer() -> None:
    # model_runner_kv_cache_mixin._init_pools: full_attention_layer_ids=[0] for the draft worker
    budget = plan_budget(_hybrid(draft_layers=64), (_gpu(),), EAGLE, version=(0, 5, 11))
    assert budget.draft_in_slack_gib == pytest.approx(budget.kv_gib / 16, rel=1e-6)


def test_0511_counts_the_reserve_it_never_allocates_as_left_outside_the_pools() -> None:
    # reserve 0.25 x 48 x 4 = 48 GiB subtracted; allocated 0.25 x (4 capped + 1) x 4 = 5 GiB
    budget = plan_budget(_hybrid(), (_gpu(),), EAGLE, version=(0, 5, 11))
    assert budget.mamba is not None
    assert budget.mamba.spec_reserve_gib == pytest.approx(48.0)
    assert budget.spec_allocated_gib == pytest.approx(5.0)
    assert budget.unused_in_pools_gib == pytest.approx(43.0, abs=0.01)
    assert any("43.0 GiB of the pools' budget stays unused" in w for w in budget.warnings)


def test_even_the_low_estimate_not_fitting_will_fail() -> None:
    # mem_fraction_static 0.996: slack 0.4 GiB < the fixed 512 MiB + 1/8 GiB
    inputs = BudgetInputs(**{**PLAIN.__dict__, "mem_fraction_static": 0.996})
    budget = plan_budget(_dense(), (_gpu(),), inputs, version=(0, 5, 23))
    assert budget.estimate is not None
    assert budget.estimate.low_gib == pytest.approx(0.625)
    assert budget.verdict == FAILS
    assert budget.deciding.startswith("even the low estimate of CUDA graphs and activations")


def test_between_the_low_estimate_and_sglangs_reserve_is_tight() -> None:
    # slack 10 GiB; SGLang's default 0.85 on 100.6 GiB reserves 15.1 GiB
    budget = plan_budget(
        _dense(), (_gpu(),), PLAIN, version=(0, 5, 23), default_mem_fraction_static=0.85
    )
    assert budget.verdict == TIGHT
    assert "less than SGLang's own reserve (15.1 GiB)" in budget.deciding


def test_covering_sglangs_own_reserve_fits() -> None:
    # chunked 2048: expected 0.5 + 0.5 + 3 + 0.125 GiB; SGLang's 0.92 reserves 8.0 of 100.6
    inputs = BudgetInputs(**{**PLAIN.__dict__, "chunked_prefill_size": 2048})
    budget = plan_budget(
        _dense(), (_gpu(),), inputs, version=(0, 5, 23), default_mem_fraction_static=0.92
    )
    assert budget.verdict == FITS
    assert "covers SGLang's own reserve (8.0 GiB)" in budget.deciding


def test_without_sglangs_default_the_high_end_is_its_floor_and_draft_addition() -> None:
    budget = plan_budget(_hybrid(), (_gpu(),), EAGLE, version=(0, 5, 23))
    assert budget.estimate is not None
    # expected: 256 x 2 MiB + 512 MiB + 8192 x 1.5 MiB + 1/8 GiB = 13.125 GiB (above the
    # 10 GiB floor), + 4 GiB for the EAGLE draft and its graphs
    assert budget.estimate.high_gib == pytest.approx(13.125 + 4.0)


def test_every_term_carries_its_basis() -> None:
    inputs = BudgetInputs(**{**EAGLE.__dict__, "max_running_requests": 8})
    budget = plan_budget(_hybrid(), (_gpu(),), inputs, version=(0, 5, 11))
    bases = {term.name: term.basis for term in budget.terms}
    assert bases["weights"] == CHECKPOINT
    assert bases["the KV pool"] == SGLANG_CODE
    assert bases["the mamba state pool"] == SGLANG_CODE
    assert bases["the draft worker's KV pool"] == SGLANG_CODE
    assert bases["CUDA graphs and activations (expected)"] == ESTIMATE
    assert budget.headroom_range["worst"] <= budget.headroom_range["expected"]
    assert budget.headroom_range["expected"] <= budget.headroom_range["best"]


@settings(max_examples=300, deadline=None)
@given(
    fraction=st.floats(0.5, 0.999),
    total=st.floats(20, 200),
    weights=st.floats(1, 120),
    requests=st.integers(1, 512),
    slots=st.one_of(st.none(), st.integers(1, 400)),
    drafts=st.integers(1, 8),
    draft_layers=st.integers(1, 64),
    hybrid=st.booleans(),
    version=st.sampled_from([(0, 5, 11), (0, 5, 13), (0, 5, 17), (0, 5, 23)]),
    default=st.one_of(st.none(), st.floats(0.6, 0.95)),
)
def test_no_verdict_but_will_fail_has_a_negative_exact_headroom(
    fraction: float,
    total: float,
    weights: float,
    requests: int,
    slots: int | None,
    drafts: int,
    draft_layers: int,
    hybrid: bool,
    version: tuple[int, int, int],
    default: float | None,
) -> None:
    model = _hybrid(draft_layers) if hybrid else _dense(weights, draft_layers)
    inputs = BudgetInputs(
        **{
            **EAGLE.__dict__,
            "mem_fraction_static": fraction,
            "max_running_requests": requests,
            "max_mamba_cache_size": slots,
            "speculative_num_draft_tokens": drafts,
        }
    )
    budget = plan_budget(
        model, (_gpu(total),), inputs, version=version, default_mem_fraction_static=default
    )
    assert budget.deciding
    if budget.verdict != FAILS:
        assert budget.left_for_estimates_gib >= 0
        assert budget.left_for_estimates_gib >= budget.estimate.low_gib  # type: ignore[union-attr]
        assert budget.failure is None
    else:
        assert budget.refusal is not None


def test_a_failure_sglang_raises_itself_is_not_blamed_on_the_graphs() -> None:
    # weights larger than the GPU: SGLang's own OOM while loading decides, with its own hint
    budget = plan_budget(_dense(weights_gib=120), (_gpu(),), PLAIN, version=(0, 5, 23))
    assert budget.verdict == FAILS
    assert budget.deciding.startswith("torch.OutOfMemoryError: CUDA out of memory while loading")
    assert not any("--cuda-graph-max-bs" in hint for hint in budget.hints)
    assert any("--tp-size" in hint for hint in budget.hints)
