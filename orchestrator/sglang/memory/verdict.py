"""What decides a budget's verdict: the terms SGLang's code sizes exactly, the range of what is
only estimated (CUDA graphs and activations), and the one term that settles fits, tight or will
fail.  [pure]

SGLang's sizing leaves ``P x (1 - mem_fraction_static)`` outside its pools (the slack). What its
code puts there after the pools is known exactly (0.5.11's draft worker: its KV pool and a
separate draft checkpoint's weights); what the forward passes take there is not (CUDA graphs,
activations). The reserve 0.5.11 subtracts for speculative states it never allocates, and what
the pools leave unused under ``--max-total-tokens``, add to it. The verdict compares what is left
with a range for the estimated part:

- **will fail** when the exact terms do not fit, or when even the low estimate does not;
- **tight** when the outcome depends on the estimate (between the low end and SGLang's reserve);
- **fits** when SGLang's own reserve for this GPU and profile fits too."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.sglang.memory.rules import BudgetInputs
from orchestrator.sglang.memory.shapes import GIB

FITS, TIGHT, FAILS = "fits", "tight", "will fail"

SGLANG_CODE = "sglang-code"  # mirrored from SGLang's sizing code: exact given its inputs
CHECKPOINT = "checkpoint"  # read from the checkpoint's index or safetensors headers
ESTIMATE = "estimate"

# The fixed terms of SGLang's reserved_mem heuristic (server_args._handle_gpu_memory_settings):
# 512 MiB of "constant metadata (e.g., from attention backend)" and tp*pp/8 GiB "for large
# parallel size"; what every launch needs before a batch or a prefill token. The low end.
CONSTANT_MIB = 512
# SGLang's own floor and additions when it picks mem_fraction_static itself (0.5.11 and 0.5.23:
# at least 10 GiB on GPUs above 60 GB; +4 GiB for an EAGLE/MTP draft and its graphs, +6 GiB for
# STANDALONE): the high end when its default could not be read.
FLOOR_GIB, FLOOR_ABOVE_GB = 10.0, 60
DRAFT_RESERVE_GIB = {"STANDALONE": 6.0}
EAGLE_RESERVE_GIB = 4.0


@dataclass(frozen=True)
class Term:
    """One part of a GPU's memory as the plan counts it."""

    name: str
    gib: float
    basis: str  # SGLANG_CODE, CHECKPOINT or ESTIMATE
    within: str  # "pools": inside mem_fraction_static; "slack": in what it leaves


@dataclass(frozen=True)
class EstimateRange:
    """CUDA graphs and activations: low, expected, and SGLang's own reserve as the high end."""

    low_gib: float
    expected_gib: float
    high_gib: float
    high_basis: str


@dataclass(frozen=True)
class Decision:
    verdict: str
    deciding: str  # the sentence naming the term that decides it
    failure: str | None  # SGLang's error as it would show, for a verdict the slack decides


def mib(value: float) -> float:
    return value / 1024


def reserve_terms(inputs: BudgetInputs) -> tuple[float, float]:
    """(CUDA graphs, activations) in GiB from the terms of SGLang's own ``reserved_mem``
    heuristic (512 MiB + max(chunked, 2048) * 1.5 MiB + cuda_graph_max_bs * 2 MiB + tp*pp/8
    GiB), before its floor and its speculative additions: the expected figure."""
    graphs = 0.0 if inputs.disable_cuda_graph else mib((inputs.cuda_graph_max_bs or 0) * 2.0)
    chunked = max(inputs.chunked_prefill_size or 0, 2048)
    activations = mib(CONSTANT_MIB + chunked * 1.5 + inputs.ranks / 8 * 1024)
    return graphs, activations


def estimate_range(
    inputs: BudgetInputs,
    *,
    total_gib: float,
    default_mem_fraction_static: float | None,
) -> EstimateRange:
    """The estimated part's range. The high end is SGLang's own reserve: ``total x (1 -
    default mem_fraction_static)`` as its resolution picked the default for this GPU and
    profile, or, when that is unknown, its heuristic's floor and speculative additions."""
    graphs, activations = reserve_terms(inputs)
    expected = graphs + activations
    low = mib(CONSTANT_MIB + inputs.ranks / 8 * 1024)
    if default_mem_fraction_static is not None:
        high = total_gib * (1 - default_mem_fraction_static)
        basis = (
            f"SGLang's own reserve: its default mem_fraction_static "
            f"{default_mem_fraction_static:g} for this GPU and profile leaves {high:.1f} GiB"
        )
    else:
        high = max(expected, FLOOR_GIB) if total_gib > FLOOR_ABOVE_GB else expected
        name = (inputs.speculative_algorithm or "").upper()
        if inputs.draft_kv:
            high += DRAFT_RESERVE_GIB.get(name, EAGLE_RESERVE_GIB)
        basis = "SGLang's reserved_mem heuristic with its floor and speculative additions"
    return EstimateRange(low, expected, max(high, expected), basis)


def decide(
    *,
    slack_gib: float,
    left_gib: float,
    slack_takers: tuple[Term, ...],
    estimate: EstimateRange,
    mem_fraction_static: float,
) -> Decision:
    """The verdict for what is left after the exact terms (``left_gib``: the slack, plus what
    the pools leave unused, less what SGLang's code puts in the slack), against the range."""
    if left_gib < 0:
        biggest = max(slack_takers, key=lambda term: term.gib, default=None)
        named = f"{biggest.name}, {biggest.gib:.1f} GiB," if biggest else "what comes after it"
        deciding = (
            f"{named} exceeds the {slack_gib:.1f} GiB mem_fraction_static {mem_fraction_static:g} "
            "leaves outside the pools"
        )
        return Decision(FAILS, deciding, f"torch.OutOfMemoryError: CUDA out of memory: {deciding}")
    if left_gib < estimate.low_gib:
        deciding = (
            f"even the low estimate of CUDA graphs and activations, {estimate.low_gib:.1f} GiB, "
            f"exceeds the {left_gib:.1f} GiB left outside the pools"
        )
        return Decision(FAILS, deciding, f"torch.OutOfMemoryError: CUDA out of memory: {deciding}")
    if left_gib < estimate.high_gib:
        deciding = (
            f"{left_gib:.1f} GiB left for CUDA graphs and activations: more than their low "
            f"estimate ({estimate.low_gib:.1f} GiB), less than SGLang's own reserve "
            f"({estimate.high_gib:.1f} GiB); expected {estimate.expected_gib:.1f} GiB"
        )
        return Decision(TIGHT, deciding, None)
    deciding = (
        f"{left_gib:.1f} GiB left for CUDA graphs and activations covers SGLang's own reserve "
        f"({estimate.high_gib:.1f} GiB)"
    )
    return Decision(FITS, deciding, None)


def spec_allocated_gib(
    slot_bytes: int, requests: int, draft_tokens: int, padding: int = 1
) -> float:
    """What the intermediate speculative states really take: SGLang sizes them by the capped
    ``max_running_requests`` (HybridReqToTokenPool's ``mamba_spec_state_size``), plus one
    padding slot (MambaPool's ``spec_state_size + 1``), whatever its budget subtracted."""
    return slot_bytes * (max(0, requests) + padding) * draft_tokens / GIB
