"""GPU memory budget: what SGLang will carve out of each GPU, predicted before launch.  [pure]

SGLang sizes its pools at startup, per rank, in this order (docs/memory.md has the sources):
free memory before loading ``P`` -> weights -> ``rest = avail_after_weights - P*(1 - mfs)``
-> (hybrid models) the mamba state pool and its speculative reserve -> the KV pool from what
is left -> ``max_running_requests``, capped by the KV tokens and by the mamba slots. CUDA
graphs and activations must then fit in the slack ``P*(1 - mfs)``. The arithmetic mirrors
SGLang's own code release by release (``rules_for``); the model's shapes (bytes per mamba
slot, per KV token) come from SGLang's own config classes where the probe could import them.

Values here are plain numbers in bytes unless a name says ``_gib`` (SGLang's "GB" is GiB).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class ModelMemory:
    """The model's memory shapes for one rank, as the probe found them on the host.

    ``basis`` names where the shapes came from: SGLang's own classes (``ModelConfig``,
    ``mamba2_cache_params``) or orch's mirror of them over ``config.json`` when SGLang's could
    not be imported (the stand-in)."""

    basis: str
    architecture: str | None
    context_len: int | None
    attention_tp: int  # the TP size the per-rank shapes were computed for
    full_attention_layers: int
    kv_cell_bytes: int  # bytes per KV token on one rank, all full-attention layers, K and V
    kv_dtype: str  # torch dtype name, e.g. "bfloat16"
    hybrid: bool  # a mamba / linear-attention hybrid
    mamba_layers: int = 0
    mamba_slot_bytes: int = 0  # mamba_cache_per_req: conv + SSM state of one slot, one rank
    mamba_conv_bytes: int = 0  # of which conv state
    mamba_ssm_bytes: int = 0  # of which SSM (temporal) state
    mamba_conv_dtype: str | None = None
    mamba_ssm_dtype: str | None = None
    weights_bytes: int | None = None  # the whole checkpoint, every rank's share together
    weights_basis: str | None = None  # "model.safetensors.index.json", "safetensors headers" ...
    draft_weights_bytes: int | None = None
    # KV layers SGLang 0.5.14+ adds to every target KV token for an EAGLE/MTP draft (with a draft
    # path its layers; without one the TARGET config's num_nextn_predict_layers, often none)
    draft_kv_layers: int | None = None
    draft_worker_layers: int | None = None  # the draft worker's own KV layers (draft-mode config)
    multimodal: bool = False  # SGLang's model_config.is_multimodal: 0.5.23 reserves its cache
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory as the plan uses it: measured by NVML on the host, or nominal."""

    name: str
    total_bytes: int
    free_bytes: int
    basis: str  # "NVML on <host>" or "nominal for gpu.type H200"
    index: int | None = None


@dataclass(frozen=True)
class MemoryAnswer:
    """The probe's ``memory`` section, decoded (``protocol.decode_plan_answer``): what the host
    knows about the model and its GPUs. ``model`` is None when SGLang's classes could not
    compute the shapes (``shapes_error`` says why); ``text_config`` then lets orch mirror them."""

    model: ModelMemory | None
    shapes_error: str | None = None
    text_config: Mapping[str, Any] | None = None
    weights_bytes: int | None = None
    weights_basis: str | None = None
    weights_error: str | None = None
    gpus: tuple[GpuMemory, ...] = ()
    gpu_error: str | None = None
    default_mem_fraction_static: float | None = None
    default_error: str | None = None
    draft_weights_bytes: int | None = None  # --speculative-draft-model-path's checkpoint
    draft_weights_basis: str | None = None
    draft_weights_error: str | None = None
    # SGLANG_MAMBA_SSM_DTYPE / SGLANG_MAMBA_CONV_DTYPE as SGLang read them after resolving
    # (--mamba-ssm-dtype is written there); only those with a value
    env: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None  # the probe could not build the section at all


@dataclass(frozen=True)
class MeasuredMemory:
    """What one rank's SGLang logged about memory at startup (``observe.memory_figures``).
    GiB as SGLang printed them ("GB" in its lines); None where the line was not (yet) seen."""

    rank: str | None  # "TP0", "DP1 TP3" ...; None for an unprefixed single-GPU log
    avail_before_load_gib: float | None = None  # Load weight begin. avail mem=
    weights_gib: float | None = None  # Load weight end ... mem usage=
    avail_after_load_gib: float | None = None  # Load weight end ... avail mem=
    kv_tokens: int | None = None  # KV Cache is allocated. #tokens:
    kv_gib: float | None = None  # K size + V size (or KV size)
    mamba_slots: int | None = None  # Mamba Cache is allocated. max_mamba_cache_size:
    mamba_gib: float | None = None  # conv_state + ssm_state (+ intermediate) sizes
    mamba_intermediate_gib: float | None = None  # intermediate_ssm + intermediate_conv
    avail_after_pools_gib: float | None = None  # Memory pool end. avail mem=
    graphs_gib: float | None = None  # ... CUDA graph end ... mem usage=
    avail_after_graphs_gib: float | None = None  # ... CUDA graph end ... avail mem=
    max_total_num_tokens: int | None = None  # the max_total_num_tokens= summary line
    max_running_requests: int | None = None
    available_gpu_mem_gib: float | None = None  # the summary's available_gpu_mem=
    capped_by_mamba: int | None = None  # 0.5.23's "max_running_requests is capped to N ..."
    prefill_graphs_gib: float | None = None  # 0.5.11 piecewise / 0.5.23 target prefill graphs
    draft_graphs_gib: float | None = None  # every "Capture draft ... graph end", summed


# -- the arithmetic -------------------------------------------------------------------------------
# SGLang changed its sizing code release by release (docs/memory.md has the table, read from the
# released wheels 0.5.11 ... 0.5.23 and the commits that changed it): ``rules_for`` names what a
# release does, and ``plan_budget`` follows those rules step by step.


@dataclass(frozen=True)
class Rules:
    """What one range of SGLang releases does when it sizes its pools."""

    since: tuple[int, ...]  # the first release with these rules
    source: str  # where SGLang does it
    joint_solve: str | None  # None: reserve first, then split; "first": K = budget // (per *
    #                          (1 + D/S)); "final": K = (budget - per*(1+D)) // (per*(1+D/S))
    capped_reserve: bool  # the speculative reserve covers min(requests, K // S), not requests
    padding_slot: bool  # each mamba pool has one more (padding) slot, counted in the budget
    cap_logged: bool  # the mamba cap on max_running_requests is logged (silent before)
    weights_error: bool  # "Loaded weights leave no GPU memory for the KV cache ..." (ValueError)
    hybrid_errors: bool  # "Not enough GPU memory for hybrid ... state cache" (RuntimeError)
    requests_by_kv: bool  # a user max_running_requests is bounded by tokens // 2 (else by
    #                       SGLang's estimate)
    requests_floor_one: bool  # max(1, user // attn_dp)
    requests_per_attn_dp: bool  # divided by the attention-DP size (else by dp_size)
    lazy_buffer: bool  # the extra_buffer_lazy strategy holds 1 tracking slot
    skip_decode_lock: bool  # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK lowers the base by one
    draft_kv_in_pool: bool  # an EAGLE/MTP draft's KV layers are part of every KV token
    multimodal_reserve: bool  # multimodal models reserve SGLANG_VLM_CACHE_SIZE_MB from the KV

    @property
    def release(self) -> str:
        return ".".join(str(part) for part in self.since)


_MIXIN = (
    "model_executor/model_runner_kv_cache_mixin.py (handle_max_mamba_cache, _resolve_max_num_reqs)"
)
_CONFIGURATOR = (
    "mem_cache/kv_cache_configurator.py (_profile_available_bytes, _handle_max_mamba_cache, "
    "resolve_max_num_reqs)"
)
RULES = (
    Rules((0, 5, 11), _MIXIN, None, False, False, False, False, False, False, False, False,
          False, False, False, False),
    Rules((0, 5, 13), _MIXIN, "first", True, False, False, False, True, False, False, False,
          True, False, False, False),
    # 0.5.14 (#23862, #28855): draft weights and the draft's KV counted in the budget
    Rules((0, 5, 14), _MIXIN, "first", True, False, False, True, True, True, False, False,
          True, False, True, False),
    Rules((0, 5, 16), _CONFIGURATOR, "first", True, False, False, True, True, True, False, True,
          True, False, True, False),
    # 0.5.17 (#32184, #32228, #32541): the final solve, the padding slot, the logged cap
    Rules((0, 5, 17), _CONFIGURATOR, "final", True, True, True, True, True, True, False, True,
          True, True, True, False),
    Rules((0, 5, 23), _CONFIGURATOR, "final", True, True, True, True, True, True, True, True,
          True, True, True, True),
)  # fmt: skip
LEGACY = "0.5.11"  # reserve for every request, then K from the ratio; the cap is silent
JOINT = "0.5.23"  # K solved jointly, the reserve for the capped requests, the cap logged

# SGLang's constants: slots per request = 3 (+2 extra_buffer with overlap, +1 without or lazy;
# 1 with --disable-radix-cache).
MAMBA_BASE_SLOTS = 3
# A CUDA context plus NCCL's buffers are taken before SGLang measures its free memory ``P``:
# an estimate (the stand-in's figure for an idle H200 is 0.6 GiB below NVML's free).
CUDA_CONTEXT_GIB = 0.6
# Post-sizing multimodal allocations 0.5.23 reserves out of the KV budget
# (SGLANG_VLM_CACHE_SIZE_MB default): mm_runtime_reservation_gb.
VLM_CACHE_MIB = 100

FITS, TIGHT, FAILS = "fits", "tight", "will fail"
NO_DRAFT_KV = ("NGRAM",)  # speculative algorithms without a draft model (BudgetInputs.draft_kv)
EXPLICIT_SLOTS = "--max-mamba-cache-size"
SLOTS_FROM_REQUESTS = "max_running_requests (radix cache off)"


def rules_for(version: tuple[int, ...] | None) -> Rules:
    """The rules of the newest release at or before ``version`` (the newest for None)."""
    if version is None:
        return RULES[-1]
    chosen = RULES[0]
    for rules in RULES:
        if tuple(version[:3]) >= rules.since:
            chosen = rules
    return chosen


@dataclass(frozen=True)
class BudgetInputs:
    """The resolved server arguments the pools depend on (``inputs_from``)."""

    mem_fraction_static: float
    tp_size: int = 1
    pp_size: int = 1
    dp_size: int = 1
    enable_dp_attention: bool = False
    max_running_requests: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float = 0.9
    disable_radix_cache: bool = False
    extra_buffer: bool = False
    lazy_buffer: bool = False  # the extra_buffer_lazy strategy (0.5.13+)
    disable_overlap_schedule: bool = False
    speculative: bool = False
    speculative_algorithm: str | None = None  # as resolved ("EAGLE", "NGRAM" ...); None: unknown
    speculative_num_draft_tokens: int | None = None
    page_size: int = 1
    max_total_tokens: int | None = None
    context_len: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs: int | None = None
    disable_cuda_graph: bool = False
    skip_decode_lock: bool = False  # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK (0.5.23)
    multimodal_transport: str | None = None

    @property
    def attn_dp(self) -> int:
        return self.dp_size if self.enable_dp_attention else 1

    @property
    def ranks(self) -> int:
        return self.tp_size * self.pp_size

    @property
    def draft_kv(self) -> bool:
        """A draft model writes KV of its own (EAGLE/MTP; an unknown name counts as one). NGRAM
        has none: SGLang 0.5.23's DefaultPoolConfigurator scales the KV cell by the draft's
        layers only when ``spec_algorithm.is_eagle() or is_standalone()``
        (model_executor/pool_configurator.py), and 0.5.11 starts no draft worker for it."""
        name = (self.speculative_algorithm or "").upper()
        return self.speculative and name not in NO_DRAFT_KV


def _number(values: Mapping[str, Any], name: str) -> float | None:
    value = values.get(name)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _integer(values: Mapping[str, Any], name: str) -> int | None:
    value = _number(values, name)
    return None if value is None else int(value)


def _graph_max_bs(values: Mapping[str, Any]) -> int | None:
    config = values.get("cuda_graph_config")
    if isinstance(config, Mapping):  # 0.5.14+: {"decode": {"max_bs": ...}, ...}
        decode = config.get("decode")
        if isinstance(decode, Mapping):
            return _integer(decode, "max_bs")
    return _integer(values, "cuda_graph_max_bs")


def inputs_from(effective: Mapping[str, Any], env: Mapping[str, str]) -> BudgetInputs:
    """The budget's inputs from SGLang's resolved values (plan.effective)."""
    strategy = effective.get(
        "mamba_radix_cache_strategy", effective.get("mamba_scheduler_strategy")
    )  # 0.5.14 renamed it
    fraction = _number(effective, "mem_fraction_static")
    return BudgetInputs(
        mem_fraction_static=fraction if fraction is not None else 0.88,
        tp_size=_integer(effective, "tp_size") or 1,
        pp_size=_integer(effective, "pp_size") or 1,
        dp_size=_integer(effective, "dp_size") or 1,
        enable_dp_attention=effective.get("enable_dp_attention") is True,
        max_running_requests=_integer(effective, "max_running_requests"),
        max_mamba_cache_size=_integer(effective, "max_mamba_cache_size"),
        mamba_full_memory_ratio=_number(effective, "mamba_full_memory_ratio") or 0.9,
        disable_radix_cache=effective.get("disable_radix_cache") is True,
        extra_buffer=strategy in ("extra_buffer", "extra_buffer_lazy"),
        lazy_buffer=strategy == "extra_buffer_lazy",
        disable_overlap_schedule=effective.get("disable_overlap_schedule") is True,
        speculative=effective.get("speculative_algorithm") not in (None, "", "NONE"),
        speculative_algorithm=str(effective.get("speculative_algorithm") or "") or None,
        speculative_num_draft_tokens=_integer(effective, "speculative_num_draft_tokens"),
        page_size=_integer(effective, "page_size") or 1,
        max_total_tokens=_integer(effective, "max_total_tokens"),
        context_len=_integer(effective, "context_length"),
        chunked_prefill_size=_integer(effective, "chunked_prefill_size"),
        cuda_graph_max_bs=_graph_max_bs(effective),
        disable_cuda_graph=effective.get("disable_cuda_graph") is True,
        skip_decode_lock=env.get("SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK", "").lower()
        in ("1", "true", "yes"),
        multimodal_transport=str(effective.get("mm_feature_transport") or "") or None,
    )


def slots_per_request(rules: Rules, inputs: BudgetInputs) -> int:
    """_calculate_mamba_ratio: mamba slots one running request holds."""
    if inputs.disable_radix_cache:
        return 1
    base = MAMBA_BASE_SLOTS
    if rules.skip_decode_lock and inputs.skip_decode_lock:
        base -= 1
        if not inputs.extra_buffer:
            return base + 1  # no_buffer under skip: SGLang adds the drop back
    if not inputs.extra_buffer:
        return base
    if rules.lazy_buffer and inputs.lazy_buffer:
        return base + 1
    return base + (1 if inputs.disable_overlap_schedule else 2)


@dataclass(frozen=True)
class MambaPool:
    slot_bytes: int
    slots: int  # max_mamba_cache_size, per DP shard
    sized_by: str  # how K was chosen, in SGLang's terms
    pool_gib: float  # the slots (and 0.5.23's padding slot)
    spec_reserve_gib: float  # intermediate states for speculative verification
    slots_per_request: int


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
    draft_in_slack_gib: float  # 0.5.11: the draft's KV pool comes out of the slack
    headroom_gib: float  # slack - (graphs + activations + draft_in_slack)
    verdict: str
    failure: str | None  # SGLang's own error, predicted
    warnings: tuple[str, ...]
    hints: tuple[str, ...]
    estimates: tuple[str, ...]  # what is estimated, and its basis
    gpus: tuple[GpuMemory, ...] = ()  # every GPU of the ranks, for one bar each

    @property
    def refusal(self) -> str | None:
        """The one line ``plan`` and ``up`` refuse with (None when SGLang would not fail)."""
        return f"the memory plan says SGLang will fail: {self.failure}" if self.failure else None

    @property
    def segments(self) -> tuple[tuple[str, float], ...]:
        """The tightest GPU's split for the picture: in GiB, summing to ``total_gib``."""
        return self.segments_on(self.total_gib, self.pre_load_gib)

    def segments_for(self, gpu: GpuMemory) -> tuple[tuple[str, float], ...]:
        """One GPU's split: its own size and what others use on it, the ranks' pools alike."""
        return self.segments_on(gpu.total_bytes / GIB, max(0.0, gpu.free_bytes / GIB
                                                            - CUDA_CONTEXT_GIB))  # fmt: skip

    def segments_on(self, total_gib: float, pre_load_gib: float) -> tuple[tuple[str, float], ...]:
        used_before = max(0.0, total_gib - pre_load_gib)
        mamba = self.mamba.pool_gib if self.mamba else 0.0
        spec = self.mamba.spec_reserve_gib if self.mamba else 0.0
        wanted = [
            ("other", used_before),
            ("weights", self.weights_gib or 0.0),
            ("mamba", mamba),
            ("spec", spec),
            ("kv", self.kv_gib),
            ("graphs", self.graphs_gib + self.activations_gib + self.draft_in_slack_gib),
        ]
        parts: list[tuple[str, float]] = []
        left = total_gib
        for name, part in wanted:  # what does not fit is cut: headroom_gib says by how much
            taken = min(max(0.0, part), max(0.0, left))
            parts.append((name, taken))
            left -= taken
        return (*parts, ("free", max(0.0, left)))


def _mib(value: float) -> float:
    return value / 1024


def sglang_reserve_terms(inputs: BudgetInputs) -> tuple[float, float]:
    """(CUDA graphs, activations) in GiB from the terms of SGLang's own ``reserved_mem``
    heuristic (_handle_gpu_memory_settings: 512 MiB + max(chunked, 2048) * 1.5 MiB +
    cuda_graph_max_bs * 2 MiB + tp*pp/8 GiB): an estimate, not a measurement."""
    graphs = 0.0 if inputs.disable_cuda_graph else _mib((inputs.cuda_graph_max_bs or 0) * 2.0)
    chunked = max(inputs.chunked_prefill_size or 0, 2048)
    activations = _mib(512 + chunked * 1.5 + inputs.ranks / 8 * 1024)
    return graphs, activations


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
        reserve = _mib(VLM_CACHE_MIB)
    rest = after_weights - slack - reserve

    if weights is not None and weights >= pre_load:
        failure = (
            f"torch.OutOfMemoryError: CUDA out of memory while loading weights: "
            f"{weights:.2f} GiB per GPU, {pre_load:.2f} GiB free"
        )
        hints.append("raise --tp-size (or pp_size) to shard the weights, or use a larger GPU")

    mamba: MambaPool | None = None
    if model.hybrid and model.mamba_slot_bytes > 0:
        mamba, rest = _mamba_pool(rules, model.mamba_slot_bytes, inputs, rest)
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

    requests, limited_by = _max_running_requests(rules, inputs, model, tokens, mamba)
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

    graphs, activations = sglang_reserve_terms(inputs)
    draft_in_slack = 0.0
    drafted = model.draft_worker_layers
    if not rules.draft_kv_in_pool and inputs.draft_kv and drafted and tokens > 0:
        layers = max(1, model.full_attention_layers)
        draft_in_slack = tokens * int(model.kv_cell_bytes * drafted / layers) / GIB
        estimates.append(
            "0.5.11's draft worker sizes its KV pool from the target's token count after the "
            "target's pools (inferred from init_memory_pool): it comes out of the slack"
        )
    estimates.append(
        "CUDA graphs and activations: the terms of SGLang's own reserved_mem heuristic "
        "(cuda_graph_max_bs x 2 MiB; 512 MiB + chunked_prefill_size x 1.5 MiB + tp*pp/8 GiB)"
    )
    headroom = slack - graphs - activations - draft_in_slack
    if default_slack is not None and slack < default_slack - 1e-6:
        warnings.append(
            f"mem_fraction_static {mfs:g} leaves {slack:.1f} GiB for CUDA graphs and "
            f"activations; SGLang's own default ({default_mem_fraction_static:g}) would leave "
            f"{default_slack:.1f} GiB on this GPU"
        )
    if failure is not None:
        verdict = FAILS
    elif headroom < 0 or (default_slack is not None and slack < default_slack - 1e-6):
        verdict = TIGHT
        if headroom < 0:
            hints.append(
                "lower --mem-fraction-static, --cuda-graph-max-bs or --chunked-prefill-size "
                "(SGLang's advice for OOM in graph capture or prefill)"
            )
    else:
        verdict = FITS
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
        warnings=tuple(warnings),
        hints=tuple(dict.fromkeys(hints)),
        estimates=tuple(estimates),
    )


def _mamba_pool(
    rules: Rules, per: int, inputs: BudgetInputs, rest: float
) -> tuple[MambaPool, float]:
    """(the pool, rest after it) as SGLang's handle_max_mamba_cache (0.5.11-0.5.15) or
    _handle_max_mamba_cache (0.5.16+) under ``rules``."""
    ratio = slots_per_request(rules, inputs)
    drafts = inputs.speculative_num_draft_tokens or 0
    spec = inputs.speculative and drafts > 0 and inputs.max_running_requests is not None
    requests = inputs.max_running_requests or 0
    ratio_share = inputs.mamba_full_memory_ratio / (1 + inputs.mamba_full_memory_ratio)
    by_ratio = f"mamba_full_memory_ratio {inputs.mamba_full_memory_ratio:g}"
    padding = 1 if rules.padding_slot else 0
    reserve = 0.0
    if rules.joint_solve is None:  # the reserve for every request first, then the split
        if spec:
            reserve = per * (requests // inputs.attn_dp) * drafts / GIB
            rest -= reserve
        if inputs.max_mamba_cache_size is not None:
            slots, sized_by = inputs.max_mamba_cache_size // inputs.attn_dp, EXPLICIT_SLOTS
        elif inputs.disable_radix_cache and inputs.max_running_requests is not None:
            slots, sized_by = requests // inputs.attn_dp, SLOTS_FROM_REQUESTS
        else:
            share = rest * ratio_share
            slots, sized_by = (int(share * GIB // per) if share > 0 else 0), by_ratio
        pool = slots * per / GIB
        return MambaPool(per, slots, sized_by, pool, reserve, ratio), rest - pool
    per_worker = requests // inputs.attn_dp
    if rules.requests_floor_one:
        per_worker = max(1, per_worker)
    if inputs.max_mamba_cache_size is not None:
        slots, sized_by = inputs.max_mamba_cache_size // inputs.attn_dp, EXPLICIT_SLOTS
        if spec:
            reserve = per * (min(per_worker, slots // ratio) + padding) * drafts / GIB
    elif inputs.disable_radix_cache and inputs.max_running_requests is not None:
        slots, sized_by = requests // inputs.attn_dp, SLOTS_FROM_REQUESTS
        if rules.requests_floor_one:
            slots = max(1, slots)
        if spec:
            reserve = per * (slots + padding) * drafts / GIB
    else:
        budget = rest * ratio_share * GIB
        sized_by = by_ratio
        if spec:
            if rules.joint_solve == "final":
                slots = int((budget - per * (1 + drafts)) // (per * (1 + drafts / ratio)))
            else:
                slots = int(budget // (per * (1 + drafts / ratio)))
            reserve = per * (min(per_worker, slots // ratio) + padding) * drafts / GIB
            sized_by += " (solved jointly with the speculative reserve)"
        else:
            slots = int((budget - per * padding) // per)
    rest -= reserve
    pool = (slots + padding) * per / GIB  # (+1: each pool's padding slot, 0.5.17+)
    return MambaPool(per, slots, sized_by, pool, reserve, ratio), rest - pool


def _max_running_requests(
    rules: Rules,
    inputs: BudgetInputs,
    model: ModelMemory,
    tokens: int,
    mamba: MambaPool | None,
) -> tuple[int, str]:
    """resolve_max_num_reqs / _resolve_max_num_reqs, and which bound decided it."""
    context = inputs.context_len or model.context_len or 1
    estimated = max(min(int(tokens / context * 512), 4096), 2048)
    requested = inputs.max_running_requests
    kv_bound = f"the KV pool ({tokens:,} tokens // 2)"
    estimate = f"SGLang's estimate from the KV tokens ({estimated})"
    if requested is not None:
        per_worker = requested // (inputs.attn_dp if rules.requests_per_attn_dp else inputs.dp_size)
        if rules.requests_floor_one:
            per_worker = max(1, per_worker)
        bound, why = (tokens // 2, kv_bound) if rules.requests_by_kv else (estimated, estimate)
        value = min(per_worker, bound)
        limited_by = "max_running_requests as resolved" if value == per_worker else why
    else:
        value = min(estimated, tokens // 2)
        limited_by = estimate if value == estimated else kv_bound
    if mamba is not None:
        cap = mamba.slots // mamba.slots_per_request
        if cap < value:
            value = cap
            limited_by = (
                f"mamba slots: max_mamba_cache_size {mamba.slots} // "
                f"{mamba.slots_per_request} slots per request"
            )
    return value, limited_by


# -- orch's mirror of SGLang's shapes, for when its classes cannot be imported -------------------
# configs/qwen3_next.py (mamba2_cache_params), configs/mamba_utils.py (Mamba2StateShape.create,
# mamba2_state_dtype, mamba_cache_per_req) and pool_configurator._compute_cell_size, for the
# Qwen3-Next / Qwen3.5 family of hybrids (linear_* keys, full_attention_interval) and for plain
# MHA models. Tests check it against SGLang's own classes in the real-SGLang tier.

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _count(config: Mapping[str, Any], name: str) -> int | None:
    value = config.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mirrored_model(
    config: Mapping[str, Any],
    *,
    attention_tp: int,
    kv_dtype: str | None = None,
    env: Mapping[str, str] | None = None,
    basis: str = "orch's mirror of SGLang's shape code over config.json",
) -> ModelMemory | None:
    """The shapes SGLang would compute for ``config`` (a config.json, or its text_config),
    or None for a family orch does not mirror."""
    text = config.get("text_config")
    top = config
    if isinstance(text, Mapping):
        config = text
    env = env or {}
    layers = _count(config, "num_hidden_layers")
    heads = _count(config, "num_attention_heads")
    if layers is None or heads is None:
        return None
    kv_heads = _count(config, "num_key_value_heads") or heads
    hidden = _count(config, "hidden_size") or 0
    head_dim = _count(config, "head_dim") or (hidden // heads if heads else 0)
    model_dtype = str(config.get("dtype") or config.get("torch_dtype") or top.get("torch_dtype")
                      or "bfloat16")  # fmt: skip
    kv = model_dtype if kv_dtype in (None, "auto") else str(kv_dtype)
    kv_bytes = DTYPE_BYTES.get(kv.removeprefix("torch."), 2)
    kv_per_rank = max(1, kv_heads // attention_tp) if kv_heads >= attention_tp else 1
    interval = _count(config, "full_attention_interval")
    architectures = top.get("architectures")
    architecture = (
        str(architectures[0]) if isinstance(architectures, list) and architectures else None
    )
    context = _count(config, "max_position_embeddings")
    # SGLang 0.5.23 adds the TARGET config's num_nextn_predict_layers to a path-less MTP draft's
    # KV cell (none for Qwen3.5, whose MTP layers are mtp_num_hidden_layers); the draft worker
    # itself runs the MTP layers (spec_aux_hidden_state.py, ModelConfig(is_draft_model=True))
    draft = _count(config, "num_nextn_predict_layers")
    worker = _count(config, "mtp_num_hidden_layers") or draft
    multimodal = isinstance(top.get("vision_config"), Mapping)
    if interval is None or _count(config, "linear_num_value_heads") is None:
        return ModelMemory(
            basis=basis, architecture=architecture, context_len=context,
            attention_tp=attention_tp, full_attention_layers=layers,
            kv_cell_bytes=kv_per_rank * head_dim * 2 * layers * kv_bytes, kv_dtype=kv,
            hybrid=False, draft_kv_layers=draft, draft_worker_layers=worker,
            multimodal=multimodal,
        )  # fmt: skip
    full = [i for i in range(layers) if (i + 1) % interval == 0]
    linear = layers - len(full)
    key_heads = _count(config, "linear_num_key_heads") or 0
    value_heads = _count(config, "linear_num_value_heads") or 0
    key_dim = _count(config, "linear_key_head_dim") or 0
    value_dim = _count(config, "linear_value_head_dim") or 0
    kernel = _count(config, "linear_conv_kernel_dim") or 1
    conv_dim = value_dim * value_heads + 2 * key_heads * key_dim
    conv_dtype = env.get("SGLANG_MAMBA_CONV_DTYPE") or "bfloat16"
    ssm_dtype = str(config.get("mamba_ssm_dtype") or "float32")
    ssm_dtype = env.get("SGLANG_MAMBA_SSM_DTYPE") or ssm_dtype
    conv = conv_dim // attention_tp * (kernel - 1) * DTYPE_BYTES.get(conv_dtype, 2)
    ssm = value_heads // attention_tp * value_dim * key_dim * DTYPE_BYTES.get(ssm_dtype, 4)
    return ModelMemory(
        basis=basis,
        architecture=architecture,
        context_len=context,
        attention_tp=attention_tp,
        full_attention_layers=len(full),
        kv_cell_bytes=kv_per_rank * head_dim * 2 * len(full) * kv_bytes,
        kv_dtype=kv,
        hybrid=True,
        mamba_layers=linear,
        mamba_slot_bytes=(conv + ssm) * linear,
        mamba_conv_bytes=conv * linear,
        mamba_ssm_bytes=ssm * linear,
        mamba_conv_dtype=conv_dtype,
        mamba_ssm_dtype=ssm_dtype,
        draft_kv_layers=draft,
        draft_worker_layers=worker,
        multimodal=multimodal,
    )


def nominal_gpu(name: str, memory_gb: int) -> GpuMemory:
    """A GPU known only by its type: the size the plan's simulated GPU tells SGLang, all free."""
    total = memory_gb * GIB
    return GpuMemory(
        name=f"NVIDIA {name}", total_bytes=total, free_bytes=total,
        basis=f"nominal size of gpu.type {name}, all free: no NVML here",
    )  # fmt: skip


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
            notes.append(
                "model shapes from orch's mirror of SGLang's code "
                f"({answer.shapes_error or 'SGLang classes unavailable'})"
            )
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
        model, gpus, inputs, version=version,
        default_mem_fraction_static=answer.default_mem_fraction_static,
    )  # fmt: skip
    if len(gpus) > 1:
        most = max(gpu.free_bytes for gpu in gpus)
        least = min(gpu.free_bytes for gpu in gpus)
        if least < 0.9 * most:
            notes.append(
                "The memory capacity is unbalanced (SGLang's warning): every rank is sized by "
                f"the GPU with the least free memory ({least / GIB:.1f} of {most / GIB:.1f} GiB)"
            )
    return budget, tuple(notes)


# -- predicted against measured -------------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    figure: str
    unit: str  # "GiB" or "" for counts
    predicted: float | None
    measured: float | None

    @property
    def error_pct(self) -> float | None:
        """(predicted - measured) / measured, in percent; None without both or for a zero."""
        if self.predicted is None or self.measured is None or self.measured == 0:
            return None
        return (self.predicted - self.measured) / abs(self.measured) * 100


# The figures compared, in order, with their units ("" for counts).
FIGURES = (
    ("free before loading", "GiB"),
    ("weights", "GiB"),
    ("mamba slots", ""),
    ("KV tokens", ""),
    ("max_running_requests", ""),
    ("free after the pools", "GiB"),
    ("free after CUDA graphs", "GiB"),
)


def predicted_figures(budget: Budget) -> dict[str, float | None]:
    """The budget's figures that SGLang logs too: what ``up`` keeps with the run (its agent's
    state) so that ``diff-effective`` compares with the prediction made at launch."""
    after_pools = budget.slack_gib  # what the pools leave: the slack (rounding aside)
    return {
        "free before loading": round(budget.pre_load_gib, 3),
        "weights": None if budget.weights_gib is None else round(budget.weights_gib, 3),
        "mamba slots": float(budget.mamba.slots) if budget.mamba else None,
        "KV tokens": float(budget.kv_tokens),
        "max_running_requests": float(budget.max_running_requests),
        "free after the pools": round(after_pools, 3),
        "free after CUDA graphs": round(
            after_pools - budget.graphs_gib - budget.draft_in_slack_gib, 3
        ),
    }


def measured_figures(measured: MeasuredMemory) -> dict[str, float | None]:
    def count(value: int | None) -> float | None:
        return None if value is None else float(value)

    tokens = measured.kv_tokens if measured.kv_tokens is not None else measured.max_total_num_tokens
    final = measured.available_gpu_mem_gib
    return {
        "free before loading": measured.avail_before_load_gib,
        "weights": measured.weights_gib,
        "mamba slots": count(measured.mamba_slots),
        "KV tokens": count(tokens),
        "max_running_requests": count(measured.max_running_requests),
        "free after the pools": measured.avail_after_pools_gib,
        "free after CUDA graphs": final if final is not None else measured.avail_after_graphs_gib,
    }


def compare_figures(
    predicted: Mapping[str, Any], measured: MeasuredMemory
) -> tuple[Comparison, ...]:
    """Predicted (``predicted_figures``, or the record of it a run kept) beside what SGLang
    logged; rows where neither side has a figure are left out."""
    logged = measured_figures(measured)
    rows = []
    for name, unit in FIGURES:
        value = predicted.get(name)
        guess = (
            float(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool)
            else None
        )
        if guess is None and logged[name] is None:
            continue
        rows.append(Comparison(name, unit, guess, logged[name]))
    return tuple(rows)


def compare(budget: Budget, measured: MeasuredMemory) -> tuple[Comparison, ...]:
    """The figures SGLang logged beside the plan's, for the rank the budget sized."""
    return compare_figures(predicted_figures(budget), measured)
