"""The memory budget's text and ``--json`` shapes: the plan's section, one bar per GPU, and the
predicted-against-measured table ``up`` shows once the server is READY. Nothing prints."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from orchestrator.cli.show.text import Text, grid, line
from orchestrator.sglang.memory.budget import Budget
from orchestrator.sglang.memory.measured import Comparison, MeasuredMemory

BAR_WIDTH = 60
# One letter and one colour per part of a GPU, the same in the bar and its legend.
PARTS = {
    "other": ("o", "90", "used before SGLang (CUDA context, other tenants)"),
    "weights": ("W", "34", "weights"),
    "mamba": ("M", "35", "mamba state pool"),
    "spec": ("S", "95", "speculative states"),
    "kv": ("K", "32", "KV pool"),
    "draft": ("D", "36", "draft worker"),
    "graphs": ("G", "33", "CUDA graphs + activations (estimated)"),
    "free": (".", "0", "headroom"),
}


def gib(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} GiB"


def size(nbytes: int) -> str:
    if nbytes >= 1 << 20:
        return f"{nbytes / (1 << 20):.1f} MiB"
    return f"{nbytes / 1024:.1f} KiB"


Segments = tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class Bar:
    """A line of the budget that is a GPU's bar: its label and its parts."""

    label: str
    segments: Segments


def bar(segments: Segments, width: int = BAR_WIDTH) -> str:
    """A GPU as one row of cells, each part in proportion."""
    return "[" + "".join(letter * count for letter, _, count in _cells(segments, width)) + "]"


def bar_texts(segments: Segments, width: int = BAR_WIDTH) -> list[Text]:
    """The same bar coloured for a terminal: the colours are orch's own control texts."""
    texts = [Text("[")]
    for letter, colour, count in _cells(segments, width):
        if count:
            texts += [
                Text(f"\x1b[{colour}m", control=True),
                Text(letter * count),
                Text("\x1b[0m", control=True),
            ]
    return [*texts, Text("]")]


def _cells(segments: Segments, width: int) -> list[tuple[str, str, int]]:
    total = sum(part for _, part in segments) or 1.0
    return [
        (PARTS[name][0], PARTS[name][1], round(part / total * width)) for name, part in segments
    ]


def legend(budget: Budget) -> str:
    return "  ".join(
        f"{PARTS[name][0]} {PARTS[name][2]} {part:.1f}" for name, part in budget.segments if part
    )


def budget_lines(budget: Budget | None, notes: tuple[str, ...]) -> list[str]:
    """``orch plan``'s memory section, as plain lines."""
    return [
        row if isinstance(row, str) else row.label + bar(row.segments)
        for row in _budget_rows(budget, notes)
    ]


def budget_texts(budget: Budget | None, notes: tuple[str, ...], *, tty: bool = False) -> list[Text]:
    """``orch plan``'s memory section, its bars coloured on a terminal."""
    texts: list[Text] = []
    for row in _budget_rows(budget, notes):
        if isinstance(row, str):
            texts.append(line(row))
        elif tty:
            texts += [Text(row.label), *bar_texts(row.segments), Text("\n")]
        else:
            texts.append(line(row.label + bar(row.segments)))
    return texts


def _budget_rows(budget: Budget | None, notes: tuple[str, ...]) -> list[str | Bar]:
    if budget is None:
        return [f"memory: {note}" for note in notes] or ["memory: no budget"]
    lines: list[str | Bar] = [
        f"memory per GPU: {budget.verdict.upper()}: {budget.deciding}",
        f"  (SGLang's sizing as of {budget.family}: {budget.source})",
    ]
    rows = [
        (
            "GPU",
            f"{budget.gpu_name}: {budget.total_gib:.1f} GiB, {budget.free_gib:.1f} free "
            f"({budget.gpu_basis})",
        ),
        ("free at load (P)", f"{gib(budget.pre_load_gib)} (estimated: free less the CUDA context)"),
        ("weights", f"{gib(budget.weights_gib)} ({budget.weights_basis})"),
        (
            "budget (rest)",
            f"{gib(budget.after_weights_gib - budget.slack_gib)} = free after "
            f"weights {budget.after_weights_gib:.1f} - P x (1 - "
            f"{budget.mem_fraction_static:g})",
        ),
    ]
    if budget.multimodal_reserve_gib:
        rows.append(("multimodal cache", f"{gib(budget.multimodal_reserve_gib)} reserved"))
    mamba = budget.mamba
    if mamba is not None:
        rows.append(
            (
                "mamba pool",
                f"{mamba.slots} slots x {size(mamba.slot_bytes)} = {gib(mamba.pool_gib)} "
                f"(sized by {mamba.sized_by}); {mamba.slots_per_request} slots per request",
            )
        )
        if mamba.spec_reserve_gib:
            unused = mamba.spec_reserve_gib - budget.spec_allocated_gib
            rows.append(
                (
                    "speculative states",
                    f"{gib(budget.spec_allocated_gib)} (intermediate SSM/conv states for "
                    "verification)"
                    + (
                        f"; {gib(mamba.spec_reserve_gib)} subtracted from the budget, "
                        f"{gib(unused)} of it never allocated"
                        if unused > 0.05
                        else ""
                    ),
                )
            )
    rows += [
        (
            "KV pool",
            f"{budget.kv_tokens:,} tokens x {size(budget.kv_cell_bytes)} = {gib(budget.kv_gib)}",
        ),
        (
            "max_running_requests",
            f"{budget.max_running_requests} (limited by {budget.limited_by})"
            + (
                f"; the server argument resolves to {budget.max_running_requests_argument}"
                if budget.max_running_requests_argument not in (None, budget.max_running_requests)
                else ""
            ),
        ),
        (
            "slack",
            f"{gib(budget.slack_gib)} = P x (1 - {budget.mem_fraction_static:g})"
            + (
                f"; SGLang's default {budget.default_mem_fraction_static:g} would leave "
                f"{gib(budget.default_slack_gib)}"
                if budget.default_mem_fraction_static is not None
                and budget.default_mem_fraction_static != budget.mem_fraction_static
                else ""
            ),
        ),
    ]
    if budget.draft_in_slack_gib:
        rows.append(
            ("draft worker KV", f"{gib(budget.draft_in_slack_gib)} (one pool, after the target's)")
        )
    if budget.draft_weights_in_slack_gib:
        rows.append(("draft weights", gib(budget.draft_weights_in_slack_gib)))
    estimate = budget.estimate
    rows.append(
        (
            "left outside pools",
            f"{gib(budget.left_for_estimates_gib)} = slack {budget.slack_gib:.1f}"
            + (f" + unused {budget.unused_in_pools_gib:.1f}" if budget.unused_in_pools_gib else "")
            + (
                f" - draft {budget.draft_in_slack_gib + budget.draft_weights_in_slack_gib:.1f}"
                if budget.draft_in_slack_gib or budget.draft_weights_in_slack_gib
                else ""
            ),
        )
    )
    if estimate is not None:
        rows.append(
            (
                "graphs+activations",
                f"{estimate.low_gib:.1f} / {estimate.expected_gib:.1f} / "
                f"{estimate.high_gib:.1f} GiB (low / expected / SGLang's reserve; estimated)",
            )
        )
    rows.append(
        (
            "headroom",
            f"{gib(budget.headroom_gib)} expected (from {budget.headroom_worst_gib:.1f} to "
            f"{budget.headroom_best_gib:.1f})",
        )
    )
    lines += ["  " + text for text in grid(rows).splitlines()]
    gpus = budget.gpus or ()
    if len(gpus) > 1:
        for gpu in gpus:
            label = f"GPU{gpu.index}" if gpu.index is not None else gpu.name
            lines.append(Bar(f"  {label:<6} ", budget.segments_for(gpu)))
    else:
        lines.append(Bar("  ", budget.segments))
    lines.append("  " + legend(budget))
    if budget.failure:
        lines.append(f"  will fail: {budget.failure}")
    lines += [f"  warning: {text}" for text in budget.warnings]
    lines += [f"  hint: {text}" for text in budget.hints]
    lines += [f"  estimate: {text}" for text in budget.estimates]
    lines += [f"  note: {text}" for text in notes]
    return lines


def budget_json(budget: Budget | None, notes: tuple[str, ...]) -> dict[str, Any]:
    if budget is None:  # the same keys a consumer checks first, none of the figures
        return {"verdict": None, "failure": None, "notes": list(notes)}
    document = dataclasses.asdict(budget)
    document["headroom_range_gib"] = budget.headroom_range
    document["segments_gib"] = {name: round(part, 3) for name, part in budget.segments}
    document["notes"] = list(notes)
    return document


def comparison_lines(comparisons: tuple[Comparison, ...]) -> list[str]:
    table = [("FIGURE", "PREDICTED", "MEASURED", "ERROR")]
    for row in comparisons:
        error = row.error_pct
        table.append(
            (
                row.figure,
                _figure(row.predicted, row.unit),
                _figure(row.measured, row.unit),
                "-" if error is None else f"{error:+.1f}%",
            )
        )
    return grid(table).splitlines()


def measured_lines(measured: tuple[MeasuredMemory, ...]) -> list[str]:
    """What SGLang logged, per rank, when there was no prediction to compare with."""
    table = [("RANK", "WEIGHTS", "KV TOKENS", "MAMBA SLOTS", "MAX RUNNING", "FREE AFTER")]
    for rank in measured:
        table.append(
            (
                rank.rank or "-",
                gib(rank.weights_gib),
                _count(rank.kv_tokens),
                _count(rank.mamba_slots),
                _count(rank.max_running_requests),
                gib(
                    rank.available_gpu_mem_gib
                    if rank.available_gpu_mem_gib is not None
                    else rank.avail_after_pools_gib
                ),
            )
        )
    return grid(table).splitlines()


def comparison_json(
    measured: tuple[MeasuredMemory, ...], comparisons: tuple[Comparison, ...]
) -> dict[str, Any]:
    return {
        "measured": [dataclasses.asdict(rank) for rank in measured],
        "comparisons": [
            {**dataclasses.asdict(row), "error_pct": row.error_pct} for row in comparisons
        ],
    }


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    return f"{value:.2f} {unit}" if unit else f"{value:,.0f}"


def _count(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"
