"""The figures a scheduler reports at startup: GPU memory, KV-cache capacity, request limits.

Illustrative numbers for an H200 (139.81 GiB, 139.20 free before loading) and a 27B model; they
follow SGLang's arithmetic (pool = free after weights - total * (1 - mem_fraction_static)) so
flags move them the way they move the real ones, but no figure here was measured.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from sglang._standin.model import ModelFacts

TOTAL_GB = 139.81
FREE_AT_START_GB = 139.20
WEIGHTS_GB = 51.10  # the whole model; each TP rank holds its share
KV_BYTES_PER_TOKEN = 65536  # 16 full-attention layers x K,V x 4 heads x 256 dims x bf16
GRAPH_GB = 1.26


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
    max_running_requests: int
    context_len: int
    max_req_input_len: int
    graphs: bool

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Figures:
        return cls(**data)


def startup_figures(values: dict[str, Any], model: ModelFacts, graphs: bool) -> Figures:
    tp = max(1, int(values.get("tp_size") or 1))
    fraction = float(values.get("mem_fraction_static") or 0.88)
    weights = WEIGHTS_GB / tp
    after_load = FREE_AT_START_GB - weights
    kv_gb = max(1.0, after_load - TOTAL_GB * (1 - fraction))
    tokens = int(kv_gb * (1 << 30) / (KV_BYTES_PER_TOKEN / tp))
    if values.get("max_total_tokens"):
        tokens = min(tokens, int(values["max_total_tokens"]))
    after_pool = after_load - kv_gb
    graph_gb = GRAPH_GB if graphs else 0.0
    context_len = int(values.get("context_length") or model.context_len)
    running = values.get("max_running_requests")
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
        max_running_requests=int(running) if running else min(tokens // 2, 4096),
        context_len=context_len,
        max_req_input_len=min(context_len - 1, tokens - 1),
        graphs=graphs,
    )
