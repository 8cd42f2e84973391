"""Calibration: the plan's memory terms (``orch plan --json``'s ``memory``) beside what a real
SGLang started with ``--load-format dummy`` logged (``observe.memory_figures``), term by term.
``scripts/calibrate-memory`` runs the servers; this module only compares.  [pure]

The plan is read from its JSON, not from a ``Budget``: the script plans in a separate ``orch``
process (the same command a user runs), and a record of it outlives the run."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model import Profile
from orchestrator.sglang.memory.measured import Comparison, MeasuredMemory, measured_figures

# The terms compared, in the order SGLang carves the GPU, with their units ("" for counts).
TERMS = (
    ("free before loading", "GiB"),
    ("weights", "GiB"),
    ("mamba slots", ""),
    ("mamba pool", "GiB"),
    ("speculative mamba states", "GiB"),
    ("KV tokens", ""),
    ("KV pool", "GiB"),
    ("max_running_requests", ""),
    ("free after the pools", "GiB"),
    ("CUDA graphs", "GiB"),
    ("free after CUDA graphs", "GiB"),
)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def predicted_terms(memory: Mapping[str, Any] | None) -> dict[str, float | None]:
    """Each term as the plan's ``memory`` object states it; None where the plan has no figure
    (no budget, a model without mamba state, a key this plan's format lacks)."""
    memory = memory or {}
    mamba = memory.get("mamba")
    mamba = mamba if isinstance(mamba, Mapping) else {}
    slack = _number(memory.get("slack_gib"))
    graphs = _number(memory.get("graphs_gib"))
    unused = _number(memory.get("unused_in_pools_gib")) or 0.0
    left = _number(memory.get("left_for_estimates_gib"))
    activations = _number(memory.get("activations_gib")) or 0.0
    # the pools leave the slack and what they subtracted but never allocated (0.5.11's
    # speculative reserve beyond the capped requests); the draft worker's pool comes after
    after_pools = None if slack is None else slack + unused
    after_graphs = None if left is None or graphs is None else left - graphs - activations
    spec = _number(memory.get("spec_allocated_gib"))
    if spec is None:  # a plan from before the allocated states were told apart
        spec = _number(mamba.get("spec_reserve_gib"))
    return {
        "free before loading": _number(memory.get("pre_load_gib")),
        "weights": _number(memory.get("weights_gib")),
        "mamba slots": _number(mamba.get("slots")),
        "mamba pool": _number(mamba.get("pool_gib")),
        "speculative mamba states": spec,
        "KV tokens": _number(memory.get("kv_tokens")),
        "KV pool": _number(memory.get("kv_gib")),
        "max_running_requests": _number(memory.get("max_running_requests")),
        "free after the pools": after_pools,
        "CUDA graphs": graphs,
        "free after CUDA graphs": after_graphs,
    }


def measured_terms(measured: MeasuredMemory) -> dict[str, float | None]:
    """Each term as one rank's SGLang logged it: ``up``'s figures (``measured_figures``) and
    the pools and graphs split out."""
    intermediate = measured.mamba_intermediate_gib
    pool = measured.mamba_gib
    if pool is not None and intermediate is not None:
        pool = round(pool - intermediate, 2)  # mamba_gib counts the speculative states too
    graph_parts = [
        part
        for part in (measured.graphs_gib, measured.prefill_graphs_gib, measured.draft_graphs_gib)
        if part is not None
    ]
    return {
        **measured_figures(measured),
        "mamba pool": pool,
        "speculative mamba states": intermediate,
        "KV pool": measured.kv_gib,
        "CUDA graphs": round(sum(graph_parts), 2) if graph_parts else None,
    }


def calibration_rows(
    predicted: Mapping[str, float | None], measured: Mapping[str, float | None]
) -> tuple[Comparison, ...]:
    """Predicted beside measured for every term; a term neither side has is left out."""
    return tuple(
        Comparison(name, unit, predicted.get(name), measured.get(name))
        for name, unit in TERMS
        if predicted.get(name) is not None or measured.get(name) is not None
    )


def compare_plan(
    plan_memory: Mapping[str, Any] | None, measured: MeasuredMemory
) -> tuple[Comparison, ...]:
    """The plan's terms beside one rank's logged ones (the rank the plan sizes: the first)."""
    return calibration_rows(predicted_terms(plan_memory), measured_terms(measured))


def startup_complete(measured: tuple[MeasuredMemory, ...]) -> bool:
    """Whether the first rank has logged SGLang's summary line, its last memory line at startup
    (``max_total_num_tokens=...``: after the pools and the CUDA graphs)."""
    return bool(measured) and measured[0].max_total_num_tokens is not None


@dataclass(frozen=True)
class GpuFacts:
    """One GPU of the box, as NVML (or nvidia-smi, or the stand-in) states it."""

    index: int
    name: str
    total_gib: float
    free_gib: float


@dataclass(frozen=True)
class ProfileRun:
    """One profile's calibration: planned, started, read, stopped, or why not."""

    profile: str
    outcome: str  # "measured", "failed", "timed out", "not run"
    reason: str | None = None  # why it failed or was not run; None when measured
    plan_verdict: str | None = None
    rank: str | None = None  # the rank whose lines were read ("TP0"; None: unprefixed)
    rows: tuple[Comparison, ...] = ()
    log: str | None = None  # the run's own log file


@dataclass(frozen=True)
class Calibration:
    """One run of the script on one box."""

    date: str
    command: str
    gpus: tuple[GpuFacts, ...]
    gpu_basis: str  # "NVML", "nvidia-smi", "orch's SGLang stand-in (simulated)"
    sglang_version: str
    sglang_python: str
    standin: bool
    runs: tuple[ProfileRun, ...] = field(default_factory=tuple)


_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


def gpus_needed(profile: Profile) -> int:
    """The GPUs one box gives the profile: ``gpu.devices``, else TP x PP."""

    def factor(name: str) -> int:
        value = profile.args.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1

    return len(profile.gpu.devices) or factor("tp_size") * factor("pp_size")


def why_not_here(profile: Profile, gpus: int, model: str, model_is_dir: bool) -> str | None:
    """Why this box cannot calibrate ``profile`` (``gpus`` GPUs; ``model`` the model path it would
    start, ``model_is_dir`` whether that is a directory here); None when it can."""
    if profile.group is not None:
        return f"a {len(profile.group.nodes)}-node launch group: one box cannot host it"
    needed = gpus_needed(profile)
    if needed > gpus:
        return f"needs {needed} GPUs, this box has {gpus}"
    if not model_is_dir and (model.startswith("/") or not _HUB_ID.fullmatch(model)):
        return (
            f"model.path {model} is not on this box: give --model (a directory holding the "
            "model's config.json, and its model.safetensors.index.json for the weights; or a "
            "Hub id)"
        )
    return None
