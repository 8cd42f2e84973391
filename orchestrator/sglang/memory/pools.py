"""The pool arithmetic of SGLang's sizing code, release by release: the mamba state pool and its
speculative reserve, ``max_running_requests`` and the bound that decided it, and the terms of
SGLang's own reserve heuristic for CUDA graphs and activations.  [pure]"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sglang.memory.rules import BudgetInputs, Rules
from orchestrator.sglang.memory.shapes import GIB, ModelMemory

# SGLang's constants: slots per request = 3 (+2 extra_buffer with overlap, +1 without or lazy;
# 1 with --disable-radix-cache).
MAMBA_BASE_SLOTS = 3
EXPLICIT_SLOTS = "--max-mamba-cache-size"
SLOTS_FROM_REQUESTS = "max_running_requests (radix cache off)"


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


def mib(value: float) -> float:
    return value / 1024


def mamba_pool(
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


def max_running_requests(
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
