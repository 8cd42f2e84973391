"""What one rank's SGLang logged about memory at startup, beside the budget's prediction: the
figures ``up`` keeps with a run and ``diff-effective`` compares.  [pure]"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.sglang.memory.budget import Budget


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
    # what the pools leave: the slack, and what they subtracted but never allocated
    after_pools = budget.slack_gib + budget.unused_in_pools_gib
    return {
        "free before loading": round(budget.pre_load_gib, 3),
        "weights": None if budget.weights_gib is None else round(budget.weights_gib, 3),
        "mamba slots": float(budget.mamba.slots) if budget.mamba else None,
        "KV tokens": float(budget.kv_tokens),
        "max_running_requests": float(budget.max_running_requests),
        "free after the pools": round(after_pools, 3),
        "free after CUDA graphs": round(
            budget.left_for_estimates_gib - budget.graphs_gib - budget.activations_gib, 3
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
