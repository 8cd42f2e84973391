"""What each SGLang release does when it sizes its pools (``rules_for``), and the resolved server
arguments the pools depend on (``inputs_from``).  [pure]"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# SGLang changed its sizing code release by release (docs/memory.md has the table, read from the
# released wheels 0.5.11 ... 0.5.23 and the commits that changed it): ``rules_for`` names what a
# release does, and ``budget.plan_budget`` follows those rules step by step.


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
    Rules(
        (0, 5, 11),
        _MIXIN,
        None,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
        False,
    ),
    Rules(
        (0, 5, 13),
        _MIXIN,
        "first",
        True,
        False,
        False,
        False,
        True,
        False,
        False,
        False,
        True,
        False,
        False,
        False,
    ),
    # 0.5.14 (#23862, #28855): draft weights and the draft's KV counted in the budget
    Rules(
        (0, 5, 14),
        _MIXIN,
        "first",
        True,
        False,
        False,
        True,
        True,
        True,
        False,
        False,
        True,
        False,
        True,
        False,
    ),
    Rules(
        (0, 5, 16),
        _CONFIGURATOR,
        "first",
        True,
        False,
        False,
        True,
        True,
        True,
        False,
        True,
        True,
        False,
        True,
        False,
    ),
    # 0.5.17 (#32184, #32228, #32541): the final solve, the padding slot, the logged cap
    Rules(
        (0, 5, 17),
        _CONFIGURATOR,
        "final",
        True,
        True,
        True,
        True,
        True,
        True,
        False,
        True,
        True,
        True,
        True,
        False,
    ),
    Rules(
        (0, 5, 23),
        _CONFIGURATOR,
        "final",
        True,
        True,
        True,
        True,
        True,
        True,
        True,
        True,
        True,
        True,
        True,
        True,
    ),
)
LEGACY = "0.5.11"  # reserve for every request, then K from the ratio; the cap is silent
JOINT = "0.5.23"  # K solved jointly, the reserve for the capped requests, the cap logged


NO_DRAFT_KV = ("NGRAM",)  # speculative algorithms without a draft model (BudgetInputs.draft_kv)


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
