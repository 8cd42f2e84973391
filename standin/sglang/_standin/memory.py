"""The figures a scheduler reports at startup: GPU memory, the mamba and KV pools, request limits.

ILLUSTRATIVE, NOT MEASURED. The stand-in loads no model and touches no GPU: every number here is
made up for an H200 (139.81 GiB, 139.20 free before loading) and the shipped 27B hybrid model
(standin/models/Qwen3.6-27B/config.json). The arithmetic follows SGLang's outline so that flags
move the figures the way they move the real ones (pool budget = free after weights - total * (1 -
mem_fraction_static); a hybrid model's mamba state pool takes its share of the budget first, the
KV pool the rest; max_running_requests is capped by the mamba slots), but it is the stand-in's
own, simpler than SGLang's and independent of orch's prediction (orchestrator/sglang/memory/).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sglang._standin.model import ModelFacts

GIB = 1 << 30
ACCELERATOR = "NVIDIA H200"  # what /v1/loads names (SGLang: torch.cuda.get_device_name())
TOTAL_GB = 139.81
FREE_AT_START_GB = 139.20
WEIGHTS_GB = 51.10  # the whole model; each TP rank holds its share
KV_BYTES_PER_TOKEN = 65536  # 16 full-attention layers x K,V x 4 heads x 256 dims x bf16
KV_DTYPE = "torch.bfloat16"
GRAPH_GB = 1.26
# The mamba (linear-attention) state of one request slot, the model's 48 linear layers, TP 1:
# conv: (48 value heads x 128 + 2 x 16 key heads x 128) channels x (kernel 4 - 1) x bf16 = 61,440 B
# a layer; SSM: 48 value heads x 128 x 128 x fp32 = 3,145,728 B a layer.
MAMBA_CONV_BYTES_PER_SLOT = 61_440 * 48
MAMBA_SSM_BYTES_PER_SLOT = 3_145_728 * 48
MAMBA_FULL_MEMORY_RATIO = 0.9  # --mamba-full-memory-ratio's default


@dataclass(frozen=True)
class Figures:
    avail_start_gb: float
    weights_gb: float
    avail_after_load_gb: float
    kv_gb: float
    avail_after_pool_gb: float
    graph_gb: float
    avail_after_graph_gb: float
    max_total_num_tokens: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    max_running_requests: int  # the scheduler's, after every cap
    context_len: int
    max_req_input_len: int
    graphs: bool
    speculative: bool = False
    draft_tokens: int = 0  # speculative_num_draft_tokens, with speculation
    mamba_slots: int = 0  # max_mamba_cache_size; 0 for a model without mamba state
    mamba_conv_gb: float = 0.0
    mamba_ssm_gb: float = 0.0
    mamba_intermediate_ssm_gb: float = 0.0  # speculative decoding's per-draft-token states
    mamba_intermediate_conv_gb: float = 0.0
    mamba_slots_per_request: int = 0  # slots one running request holds
    capped_by_mamba: int | None = None  # the cap, when the mamba slots lowered the requests

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figures:
        return cls(**data)

    @property
    def mamba_gb(self) -> float:
        return (
            self.mamba_conv_gb
            + self.mamba_ssm_gb
            + self.mamba_intermediate_ssm_gb
            + self.mamba_intermediate_conv_gb
        )


@dataclass(frozen=True)
class _MambaPool:
    slots: int = 0
    conv_gb: float = 0.0
    ssm_gb: float = 0.0
    intermediate_ssm_gb: float = 0.0
    intermediate_conv_gb: float = 0.0
    slots_per_request: int = 1

    @property
    def total_gb(self) -> float:
        return self.conv_gb + self.ssm_gb + self.intermediate_ssm_gb + self.intermediate_conv_gb


def _slots_per_request(values: dict[str, Any]) -> int:
    """Mamba slots one running request holds (SGLang's ``_calculate_mamba_ratio``, in outline):
    1 without the radix cache, else 3, plus 2 for extra_buffer with the overlap scheduler (1
    without it)."""
    if values.get("disable_radix_cache"):
        return 1
    strategy = values.get("mamba_radix_cache_strategy") or values.get("mamba_scheduler_strategy")
    if strategy != "extra_buffer":
        return 3
    return 5 if not values.get("disable_overlap_schedule") else 4


def _mamba_pool(
    values: dict[str, Any], budget_gb: float, tp: int, requests: int, draft_tokens: int
) -> _MambaPool:
    conv = MAMBA_CONV_BYTES_PER_SLOT / tp
    ssm = MAMBA_SSM_BYTES_PER_SLOT / tp
    per_slot_gb = (conv + ssm) / GIB
    # Speculation: intermediate states for every draft token of every request (+1 padding slot),
    # reserved before the pool is sized.
    spec_slots = (requests + 1) * draft_tokens if draft_tokens else 0
    left_gb = budget_gb - spec_slots * per_slot_gb
    ratio = float(values.get("mamba_full_memory_ratio") or MAMBA_FULL_MEMORY_RATIO)
    if values.get("max_mamba_cache_size"):
        slots = int(values["max_mamba_cache_size"])
    elif values.get("disable_radix_cache") and requests:
        slots = requests
    else:
        slots = int(left_gb * ratio / (1 + ratio) / per_slot_gb)
    slots = max(1, slots)
    return _MambaPool(
        slots=slots,
        conv_gb=(slots + 1) * conv / GIB,  # the pool's padding slot 0 as well
        ssm_gb=(slots + 1) * ssm / GIB,
        intermediate_ssm_gb=spec_slots * ssm / GIB,
        intermediate_conv_gb=spec_slots * conv / GIB,
        slots_per_request=_slots_per_request(values),
    )


def startup_figures(values: dict[str, Any], model: ModelFacts, graphs: bool) -> Figures:
    tp = max(1, int(values.get("tp_size") or 1))
    fraction = float(values.get("mem_fraction_static") or 0.88)
    weights = WEIGHTS_GB / tp
    after_load = FREE_AT_START_GB - weights
    budget = after_load - TOTAL_GB * (1 - fraction)
    requested = int(values.get("max_running_requests") or 0)
    speculative = bool(values.get("speculative_algorithm"))
    draft_tokens = int(values.get("speculative_num_draft_tokens") or 0) if speculative else 0
    mamba = (
        _mamba_pool(values, budget, tp, requested, draft_tokens) if model.hybrid else _MambaPool()
    )
    kv_gb = max(1.0, budget - mamba.total_gb)
    tokens = int(kv_gb * GIB / (KV_BYTES_PER_TOKEN / tp))
    if values.get("max_total_tokens"):
        tokens = min(tokens, int(values["max_total_tokens"]))
    after_pool = after_load - mamba.total_gb - kv_gb
    graph_gb = GRAPH_GB if graphs else 0.0
    context_len = int(values.get("context_length") or model.context_len)
    running = requested or min(tokens // 2, 4096)
    capped = None
    if mamba.slots and mamba.slots // mamba.slots_per_request < running:
        capped = running = mamba.slots // mamba.slots_per_request
    return Figures(
        avail_start_gb=FREE_AT_START_GB,
        weights_gb=weights,
        avail_after_load_gb=after_load,
        kv_gb=kv_gb,
        avail_after_pool_gb=after_pool,
        graph_gb=graph_gb,
        avail_after_graph_gb=after_pool - graph_gb,
        max_total_num_tokens=tokens,
        chunked_prefill_size=int(values.get("chunked_prefill_size") or 8192),
        max_prefill_tokens=int(values.get("max_prefill_tokens") or 16384),
        max_running_requests=running,
        context_len=context_len,
        max_req_input_len=min(context_len - 1, tokens - 1),
        graphs=graphs,
        speculative=speculative,
        draft_tokens=draft_tokens,
        mamba_slots=mamba.slots,
        mamba_conv_gb=mamba.conv_gb,
        mamba_ssm_gb=mamba.ssm_gb,
        mamba_intermediate_ssm_gb=mamba.intermediate_ssm_gb,
        mamba_intermediate_conv_gb=mamba.intermediate_conv_gb,
        mamba_slots_per_request=mamba.slots_per_request if mamba.slots else 0,
        capped_by_mamba=capped,
    )
