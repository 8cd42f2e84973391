"""One rank's memory budget, step by step as SGLang's code does it (``plan_budget``), for a
plan's probe answer (``budget_for``), with its verdict (``verdict.decide``): fits, tight, or will
fail with SGLang's own error, and the term that decides it.  [pure]"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.sglang.memory.pools import MambaPool, mamba_pool, max_running_requests, mib
from orchestrator.sglang.memory.rules import BudgetInputs, inputs_from, rules_for
from orchestrator.sglang.memory.shapes import (
    GIB,
    GpuMemory,
    MemoryAnswer,
    ModelMemory,
    mirrored_model,
)
from orchestrator.sglang.memory.verdict import (
    CHECKPOINT,
    ESTIMATE,
    FAILS,
    FITS,
    SGLANG_CODE,
    TIGHT,
    Decision,
    EstimateRange,
    Term,
    decide,
    estimate_range,
    reserve_terms,
    spec_allocated_gib,
)

# A CUDA context plus NCCL's buffers are taken before SGLang measures its free memory ``P``:
# an estimate (the stand-in's figure for an idle H200 is 0.6 GiB below NVML's free).
CUDA_CONTEXT_GIB = 0.6
# Post-sizing multimodal allocations 0.5.23 reserves out of the KV budget
# (SGLANG_VLM_CACHE_SIZE_MB default): mm_runtime_reservation_gb.
VLM_CACHE_MIB = 100

__all__ = ["FAILS", "FITS", "TIGHT", "Budget", "budget_for", "plan_budget"]


@dataclass(frozen=True)
class Budget:
    """One rank's predicted pools (ranks of one TP group are sized alike: SGLang takes the
    smallest free memory of them all)."""

    family: str  # the first release of the rules followed (``Rules.release``)
    source: str
    gpu_name: str
    total_gib: float
    free_gib: float  # NVML's free (or nominal) on the tightest GPU
    gpu_basis: str
    pre_load_gib: float  # P: free when SGLang measures, after its CUDA context
    weights_gib: float | None
    weights_basis: str
    after_weights_gib: float
    mem_fraction_static: float
    slack_gib: float  # P * (1 - mem_fraction_static): graphs and activations live here
    default_mem_fraction_static: float | None
    default_slack_gib: float | None
    multimodal_reserve_gib: float
    mamba: MambaPool | None
    kv_cell_bytes: int
    kv_tokens: int
    kv_gib: float
    max_running_requests: int
    limited_by: str
    graphs_gib: float  # estimate, SGLang's own reserve heuristic
    activations_gib: float  # estimate, same basis
    draft_in_slack_gib: float  # 0.5.11: the draft worker's KV pool comes out of the slack
    headroom_gib: float  # expected: what is left outside the pools - graphs and activations
    verdict: str
    failure: str | None  # SGLang's own error, predicted
    warnings: tuple[str, ...]
    hints: tuple[str, ...]
    estimates: tuple[str, ...]  # what is estimated, and its basis
    gpus: tuple[GpuMemory, ...] = ()  # every GPU of the ranks, for one bar each
    deciding: str = ""  # the term that decides the verdict, in a sentence
    # what the pools leave unused: 0.5.11's reserve for requests the mamba cap never admits,
    # the KV budget --max-total-tokens leaves, page rounding
    spec_allocated_gib: float = 0.0  # the intermediate states SGLang really allocates
    unused_in_pools_gib: float = 0.0
    draft_weights_in_slack_gib: float = 0.0  # 0.5.11-0.5.13: a separate draft checkpoint's
    left_for_estimates_gib: float = 0.0  # slack + unused - what SGLang's code puts in the slack
    estimate: EstimateRange | None = None
    headroom_worst_gib: float = 0.0  # left - SGLang's own reserve (the high estimate)
    headroom_best_gib: float = 0.0  # left - the low estimate
    terms: tuple[Term, ...] = ()
    max_running_requests_argument: int | None = None  # SGLang's resolved server argument

    @property
    def refusal(self) -> str | None:
        """The one line ``plan`` and ``up`` refuse with (None when SGLang would not fail)."""
        return f"the memory plan says SGLang will fail: {self.failure}" if self.failure else None

    @property
    def headroom_range(self) -> dict[str, float]:
        """The headroom for the estimate's high, expected and low ends, in GiB."""
        return {
            "worst": round(self.headroom_worst_gib, 3),
            "expected": round(self.headroom_gib, 3),
            "best": round(self.headroom_best_gib, 3),
        }

    @property
    def segments(self) -> tuple[tuple[str, float], ...]:
        """The tightest GPU's split for the picture: in GiB, summing to ``total_gib``."""
        return self.segments_on(self.total_gib, self.pre_load_gib)

    def segments_for(self, gpu: GpuMemory) -> tuple[tuple[str, float], ...]:
        """One GPU's split: its own size and what others use on it, the ranks' pools alike."""
        return self.segments_on(
            gpu.total_bytes / GIB, max(0.0, gpu.free_bytes / GIB - CUDA_CONTEXT_GIB)
        )

    def segments_on(self, total_gib: float, pre_load_gib: float) -> tuple[tuple[str, float], ...]:
        used_before = max(0.0, total_gib - pre_load_gib)
        mamba = self.mamba.pool_gib if self.mamba else 0.0
        wanted = [
            ("other", used_before),
            ("weights", self.weights_gib or 0.0),
            ("mamba", mamba),
            ("spec", self.spec_allocated_gib),
            ("kv", self.kv_gib),
            ("draft", self.draft_in_slack_gib + self.draft_weights_in_slack_gib),
            ("graphs", self.graphs_gib + self.activations_gib),
        ]
        parts: list[tuple[str, float]] = []
        left = total_gib
        for name, part in wanted:  # what does not fit is cut: headroom_gib says by how much
            taken = min(max(0.0, part), max(0.0, left))
            parts.append((name, taken))
            left -= taken
        return (*parts, ("free", max(0.0, left)))


def plan_budget(
    model: ModelMemory,
    gpus: tuple[GpuMemory, ...],
    inputs: BudgetInputs,
    *,
    version: tuple[int, ...] | None,
    default_mem_fraction_static: float | None = None,
) -> Budget:
    """SGLang's pool sizing for this launch, step by step as its code does it."""
    rules = rules_for(version)
    tightest = min(gpus, key=lambda gpu: gpu.free_bytes)
    total = tightest.total_bytes / GIB
    free = tightest.free_bytes / GIB
    pre_load = max(0.0, free - CUDA_CONTEXT_GIB)
    estimates = [
        f"P = the GPU's free memory - {CUDA_CONTEXT_GIB} GiB for the CUDA context (SGLang "
        "measures P after it initialises CUDA and NCCL)"
    ]
    warnings: list[str] = []
    hints: list[str] = []
    failure: str | None = None
    mfs = inputs.mem_fraction_static

    ranks = max(1, inputs.ranks)
    if model.weights_bytes is not None:
        weights: float | None = model.weights_bytes / ranks / GIB
        weights_basis = f"{model.weights_basis or 'checkpoint'} / {ranks} rank(s)"
    else:
        weights = None
        weights_basis = "unknown: the checkpoint's safetensors were not readable"
        estimates.append("weights unknown: the pools are computed as if they took no memory")
    after_weights = pre_load - (weights or 0.0)
    slack = pre_load * (1 - mfs)
    default_slack = (
        pre_load * (1 - default_mem_fraction_static)
        if default_mem_fraction_static is not None
        else None
    )
    reserve = 0.0
    if rules.multimodal_reserve and model.multimodal:
        reserve = mib(VLM_CACHE_MIB)
    rest = after_weights - slack - reserve

    if weights is not None and weights >= pre_load:
        failure = (
            f"torch.OutOfMemoryError: CUDA out of memory while loading weights: "
            f"{weights:.2f} GiB per GPU, {pre_load:.2f} GiB free"
        )
        hints.append("raise --tp-size (or pp_size) to shard the weights, or use a larger GPU")

    mamba: MambaPool | None = None
    if model.hybrid and model.mamba_slot_bytes > 0:
        mamba, rest = mamba_pool(rules, model.mamba_slot_bytes, inputs, rest)
        if mamba.slots <= 0 and failure is None and rules.hybrid_errors:
            failure = (
                "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state "
                f"cache. Computed max_mamba_cache_size={mamba.slots}"
            )
            hints.append(
                "reduce --max-running-requests, increase --mem-fraction-static, reduce "
                "--speculative-num-draft-tokens, or use GPUs with more memory"
            )
    if rules.weights_error and rest <= 0 and failure is None and pre_load > 0:
        minimum = 1 - after_weights / pre_load
        failure = (
            "ValueError: Loaded weights leave no GPU memory for the KV cache under "
            f"--mem-fraction-static={mfs}. Raise --mem-fraction-static above "
            f"{math.ceil(minimum * 1000) / 1000:.3f}"
        )

    cell = model.kv_cell_bytes
    if rules.draft_kv_in_pool and inputs.draft_kv and model.draft_kv_layers:
        layers = max(1, model.full_attention_layers)
        cell += int(cell * model.draft_kv_layers / layers)  # the draft's KV shares the pool
    available = int(rest * GIB) if rest > 0 else 0
    tokens = available // cell if cell > 0 else 0
    tokens = tokens // inputs.page_size * inputs.page_size
    if inputs.max_total_tokens is not None:
        # _apply_token_constraints caps the profiled count, then
        # calculate_pool_sizes_from_max_tokens aligns the cap to the page again
        # (model_executor/pool_configurator.py, both families)
        tokens = min(tokens, inputs.max_total_tokens) // inputs.page_size * inputs.page_size
    kv_gib = tokens * cell / GIB
    if tokens <= 0 and failure is None:
        failure = (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            f"Current value: mem_fraction_static={mfs}"
        )
        hints.append("raise --mem-fraction-static, or shard the model over more GPUs")

    requests, limited_by = max_running_requests(rules, inputs, model, tokens, mamba)
    if requests <= 0 and failure is None and mamba is not None and rules.hybrid_errors:
        failure = (
            "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve "
            f"any requests. max_mamba_cache_size={mamba.slots}"
        )
    elif requests <= 0 and failure is None:
        # before the hybrid checks, nothing refuses 0 slots until the worker starts:
        # managers/tp_worker.py ``assert self.max_running_requests > 0``
        failure = "AssertionError: max_running_request is zero"
        hints.append("raise --mem-fraction-static or --mamba-full-memory-ratio, or use larger GPUs")
    if mamba is not None and limited_by.startswith("mamba"):
        warnings.append(
            f"max_running_requests is capped to {requests} by the mamba state cache "
            f"(max_mamba_cache_size={mamba.slots}, {mamba.slots_per_request} state slots per "
            "request)" + ("" if rules.cap_logged else ": SGLang before 0.5.17 does this silently")
        )
        hints.append(
            "to raise it: increase --mamba-full-memory-ratio or --max-mamba-cache-size, or "
            "halve the state size with --mamba-ssm-dtype bfloat16"
        )

    graphs, activations = reserve_terms(inputs)
    draft_in_slack = 0.0
    drafted = _draft_worker_kv_layers(model)
    if not rules.draft_kv_in_pool and inputs.draft_kv and drafted and tokens > 0:
        layers = max(1, model.full_attention_layers)
        draft_in_slack = tokens * int(model.kv_cell_bytes * drafted / layers) / GIB
    draft_weights = 0.0
    if not rules.draft_kv_in_pool and inputs.draft_kv and model.draft_weights_bytes:
        # before 0.5.14 a separate draft checkpoint loads after the target's pools are sized
        draft_weights = model.draft_weights_bytes / ranks / GIB
    spec_reserved = mamba.spec_reserve_gib if mamba is not None else 0.0
    spec_allocated = spec_reserved
    if mamba is not None and spec_reserved > 0:
        drafts = inputs.speculative_num_draft_tokens or 0
        spec_allocated = min(spec_reserved, spec_allocated_gib(mamba.slot_bytes, requests, drafts))
    unused = (spec_reserved - spec_allocated) + max(0.0, max(0.0, rest) - kv_gib)
    left = slack + unused - draft_in_slack - draft_weights
    estimate = estimate_range(
        inputs, total_gib=total, default_mem_fraction_static=default_mem_fraction_static
    )
    estimates.append(
        "CUDA graphs and activations: low = the fixed terms of SGLang's reserved_mem heuristic "
        "(512 MiB + tp*pp/8 GiB); expected = its terms (+ cuda_graph_max_bs x 2 MiB + "
        f"max(chunked_prefill_size, 2048) x 1.5 MiB); high = {estimate.high_basis}"
    )
    terms = _terms(
        model,
        weights,
        mamba,
        spec_allocated,
        kv_gib,
        draft_in_slack,
        draft_weights,
        estimate,
        reserve,
    )
    # the slack decides only where none of SGLang's own pool errors did already
    slack_decides = failure is None
    if failure is not None:
        decision = Decision(FAILS, failure, failure)
    else:
        decision = decide(
            slack_gib=slack,
            left_gib=left,
            slack_takers=tuple(
                term for term in terms if term.basis != ESTIMATE and term.within == "slack"
            ),
            estimate=estimate,
            mem_fraction_static=mfs,
        )
        failure = decision.failure
    if spec_reserved - spec_allocated > 0.05:
        warnings.append(
            f"SGLang {rules.release} subtracts a speculative reserve of {spec_reserved:.1f} GiB "
            f"for every resolved request but allocates {spec_allocated:.1f} GiB for the "
            f"{requests} the mamba cap admits: {spec_reserved - spec_allocated:.1f} GiB of the "
            "pools' budget stays unused (the KV pool is that much smaller)"
        )
    if default_slack is not None and left < estimate.high_gib and slack < default_slack - 1e-6:
        warnings.append(
            f"mem_fraction_static {mfs:g} leaves {slack:.1f} GiB for CUDA graphs and "
            f"activations; SGLang's own default ({default_mem_fraction_static:g}) would leave "
            f"{default_slack:.1f} GiB on this GPU"
        )
    if slack_decides and decision.verdict != FITS:
        hints.append(
            "lower --mem-fraction-static, --cuda-graph-max-bs or --chunked-prefill-size "
            "(SGLang's advice for OOM in graph capture or prefill); orch plan --fit searches"
        )
    verdict = decision.verdict
    headroom = left - estimate.expected_gib
    return Budget(
        family=rules.release,
        source=rules.source,
        gpu_name=tightest.name,
        gpus=gpus,
        total_gib=total,
        free_gib=free,
        gpu_basis=tightest.basis,
        pre_load_gib=pre_load,
        weights_gib=weights,
        weights_basis=weights_basis,
        after_weights_gib=after_weights,
        mem_fraction_static=mfs,
        slack_gib=slack,
        default_mem_fraction_static=default_mem_fraction_static,
        default_slack_gib=default_slack,
        multimodal_reserve_gib=reserve,
        mamba=mamba,
        kv_cell_bytes=cell,
        kv_tokens=max(0, tokens),
        kv_gib=max(0.0, kv_gib),
        max_running_requests=requests,
        limited_by=limited_by,
        graphs_gib=graphs,
        activations_gib=activations,
        draft_in_slack_gib=draft_in_slack,
        headroom_gib=headroom,
        verdict=verdict,
        failure=failure,
        deciding=decision.deciding,
        spec_allocated_gib=spec_allocated,
        unused_in_pools_gib=unused,
        draft_weights_in_slack_gib=draft_weights,
        left_for_estimates_gib=left,
        estimate=estimate,
        headroom_worst_gib=left - estimate.high_gib,
        headroom_best_gib=left - estimate.low_gib,
        terms=terms,
        max_running_requests_argument=inputs.max_running_requests,
        warnings=tuple(warnings),
        hints=tuple(dict.fromkeys(hints)),
        estimates=tuple(estimates),
    )


def _draft_worker_kv_layers(model: ModelMemory) -> int | None:
    """The KV layers 0.5.11's draft worker allocates for itself: ONE for a hybrid model
    (model_runner_kv_cache_mixin._init_pools builds its HybridLinearKVPool with
    ``full_attention_layer_ids=[0] if self.is_draft_worker``), else the draft config's own
    layers (its MTP layers, or all of a separate draft's)."""
    if model.hybrid:
        return 1 if model.draft_worker_layers else None
    return model.draft_worker_layers


def _terms(
    model: ModelMemory,
    weights: float | None,
    mamba: MambaPool | None,
    spec_allocated: float,
    kv_gib: float,
    draft_kv: float,
    draft_weights: float,
    estimate: EstimateRange,
    multimodal_reserve: float,
) -> tuple[Term, ...]:
    """Every part the plan counts, with its basis: SGLang's code, the checkpoint, or an
    estimate."""
    terms = [Term("weights", weights or 0.0, CHECKPOINT, "pools")]
    if mamba is not None:
        terms.append(Term("the mamba state pool", mamba.pool_gib, SGLANG_CODE, "pools"))
        if spec_allocated:
            terms.append(
                Term("the speculative intermediate states", spec_allocated, SGLANG_CODE, "pools")
            )
    if multimodal_reserve:
        terms.append(Term("the multimodal cache", multimodal_reserve, SGLANG_CODE, "pools"))
    terms.append(Term("the KV pool", kv_gib, SGLANG_CODE, "pools"))
    if draft_kv:
        terms.append(Term("the draft worker's KV pool", draft_kv, SGLANG_CODE, "slack"))
    if draft_weights:
        terms.append(Term("the draft checkpoint's weights", draft_weights, CHECKPOINT, "slack"))
    terms.append(
        Term("CUDA graphs and activations (expected)", estimate.expected_gib, ESTIMATE, "slack")
    )
    return tuple(terms)


def budget_for(
    answer: MemoryAnswer | None,
    effective: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    version: tuple[int, ...] | None,
    devices: tuple[str, ...] = (),
    nominal: GpuMemory | None = None,
) -> tuple[Budget | None, tuple[str, ...]]:
    """The budget for a plan's answer, or None and why not; with notes on what it rests on."""
    if answer is None:
        return None, ("no memory budget: the probe answered no memory section",)
    inputs = inputs_from(effective, env)
    notes: list[str] = []
    model = answer.model
    if model is None and answer.text_config is not None:
        attention_tp = max(1, inputs.tp_size // inputs.attn_dp)
        # the dtypes as SGLang read them on the host, then the flag that overrides them
        seen = {**env, **{name: value for name, value in answer.env.items() if value}}
        if isinstance(effective.get("mamba_ssm_dtype"), str):
            seen["SGLANG_MAMBA_SSM_DTYPE"] = effective["mamba_ssm_dtype"]
        model = mirrored_model(
            answer.text_config,
            attention_tp=attention_tp,
            kv_dtype=str(effective.get("kv_cache_dtype") or "auto"),
            env=seen,
        )
        if model is not None:
            why = answer.shapes_error or ""
            if not why or why.startswith(("ModuleNotFoundError", "ImportError")):
                why = "SGLang's model classes are not importable where the plan ran"
            notes.append(f"model shapes from orch's mirror of SGLang's code ({why})")
    if model is None:
        why = answer.shapes_error or "the model's config.json was not readable"
        return None, (f"no memory budget: no model shapes ({why})",)
    if answer.weights_bytes is not None:
        model = replace(
            model, weights_bytes=answer.weights_bytes, weights_basis=answer.weights_basis
        )
    elif answer.weights_error:
        notes.append(f"weights unknown: {answer.weights_error}")
    gpus = answer.gpus
    if gpus and devices:
        chosen = tuple(gpu for gpu in gpus if str(gpu.index) in devices)
        gpus = chosen or gpus
    if gpus:
        gpus = gpus[: max(1, inputs.ranks)]
    elif nominal is not None:
        gpus = (nominal,)
        if answer.gpu_error:
            notes.append(f"GPU memory nominal: {answer.gpu_error}")
    else:
        why = answer.gpu_error or "no GPU answered"
        return None, (f"no memory budget: no GPU memory known ({why}); set gpu.type",)
    if answer.default_error:
        notes.append(f"SGLang's default mem_fraction_static unknown: {answer.default_error}")
    budget = plan_budget(
        model,
        gpus,
        inputs,
        version=version,
        default_mem_fraction_static=answer.default_mem_fraction_static,
    )
    if len(gpus) > 1:
        most = max(gpu.free_bytes for gpu in gpus)
        least = min(gpu.free_bytes for gpu in gpus)
        if least < 0.9 * most:
            notes.append(
                "The memory capacity is unbalanced (SGLang's warning): every rank is sized by "
                f"the GPU with the least free memory ({least / GIB:.1f} of {most / GIB:.1f} GiB)"
            )
    return budget, tuple(notes)
