"""The memory calibration's shapes: its section of ``bench/results.md`` (between two markers,
replaced whole by each run of ``scripts/calibrate-memory`` and kept by ``python -m bench``) and
its JSON document. Nothing prints."""

from __future__ import annotations

from typing import Any

from orchestrator.sglang.memory.calibration import Calibration, ProfileRun
from orchestrator.sglang.memory.measured import Comparison

BEGIN = "<!-- calibrate-memory: begin (scripts/calibrate-memory rewrites this section) -->"
END = "<!-- calibrate-memory: end -->"
TITLE = "## Memory calibration (`--load-format dummy`)"
JSON_FORMAT = 1

NOT_RUN_YET = "\n".join(
    (
        BEGIN,
        TITLE,
        "",
        "No GPU calibration has been run yet: no GPU was lent to this work, so none of the "
        "plan's memory terms has been measured against real SGLang. On a box with NVIDIA GPUs "
        "and SGLang "
        "with CUDA, `make calibrate` (`scripts/calibrate-memory`, docs/memory.md) plans each "
        "shipped profile, starts real SGLang with `--load-format dummy`, reads its memory lines "
        "and writes predicted against measured, term by term, here.",
        END,
    )
)


def _figure(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    if unit:
        return f"{value:.2f} {unit}"
    return f"{value:,.0f}"


def _error(row: Comparison) -> str:
    error = row.error_pct
    if error is None:
        return "-"
    return f"{error:+.1f} %"


def _run_lines(run: ProfileRun) -> list[str]:
    verdict = f" (plan: {run.plan_verdict})" if run.plan_verdict else ""
    lines = ["", f"### {run.profile}: {run.outcome}{verdict}"]
    if run.reason:
        lines += ["", run.reason]
    if run.log:
        rank = f", rank {run.rank}" if run.rank else ""
        lines += ["", f"log: `{run.log}`{rank}"]
    if run.rows:
        lines += ["", "| term | predicted | measured | error |", "|---|---|---|---|"]
        lines += [
            f"| {row.figure} | {_figure(row.predicted, row.unit)} | "
            f"{_figure(row.measured, row.unit)} | {_error(row)} |"
            for row in run.rows
        ]
    return lines


def _gpus(calibration: Calibration) -> str:
    if not calibration.gpus:
        return "none"
    names: dict[str, list[float]] = {}
    for gpu in calibration.gpus:
        names.setdefault(gpu.name, []).append(gpu.total_gib)
    parts = [
        f"{len(totals)} x {name} ({max(totals):.1f} GiB each)" for name, totals in names.items()
    ]
    return f"{', '.join(parts)}; {calibration.gpu_basis}"


def results_section(calibration: Calibration) -> str:
    """The section, markers included, for one run of the script."""
    lines = [BEGIN, TITLE, ""]
    if calibration.standin:
        lines += [
            "**orch's SGLang stand-in, NOT SGLang: its figures are illustrative, this is not a "
            "calibration** (the script's whole path, exercised without a GPU).",
            "",
        ]
    lines += [
        f"- command: `{calibration.command}`",
        f"- date: {calibration.date}",
        f"- GPU: {_gpus(calibration)}",
        f"- SGLang: {calibration.sglang_version} (`{calibration.sglang_python}`)",
        "",
        "Each profile was planned by `orch plan --json` on this box (the GPUs' free memory read "
        "before the server started), then started as `orch render` spells it, with "
        "`--load-format dummy` (random weights, no checkpoint read), on the first GPUs it needs, "
        "and stopped once SGLang logged its memory lines; the measured figures are the first "
        "rank's, read by orch's own reader (`observe.memory_figures`). error = (predicted - "
        "measured) / measured.",
    ]
    for run in calibration.runs:
        lines += _run_lines(run)
    lines += ["", END]
    return "\n".join(lines)


def replace_section(text: str, section: str) -> str:
    """``text`` with its calibration section (between the markers) replaced by ``section``, or
    ``section`` appended when it has none."""
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start < 0 or end < 0:
        return text.rstrip("\n") + "\n\n" + section + "\n"
    return text[:start] + section + text[end + len(END) :]


def section_of(text: str) -> str | None:
    """The calibration section ``text`` holds, markers included; None without one."""
    start = text.find(BEGIN)
    end = text.find(END, start) if start >= 0 else -1
    if start < 0 or end < 0:
        return None
    return text[start : end + len(END)]


def _row_json(row: Comparison) -> dict[str, Any]:
    error = row.error_pct
    return {
        "term": row.figure,
        "unit": row.unit,
        "predicted": row.predicted,
        "measured": row.measured,
        "error_pct": None if error is None else round(error, 2),
    }


def as_json(calibration: Calibration) -> dict[str, Any]:
    """The run as the script's JSON file holds it."""
    return {
        "format": JSON_FORMAT,
        "date": calibration.date,
        "command": calibration.command,
        "standin": calibration.standin,
        "sglang": {"version": calibration.sglang_version, "python": calibration.sglang_python},
        "gpu_basis": calibration.gpu_basis,
        "gpus": [
            {
                "index": gpu.index,
                "name": gpu.name,
                "total_gib": gpu.total_gib,
                "free_gib": gpu.free_gib,
            }
            for gpu in calibration.gpus
        ],
        "runs": [
            {
                "profile": run.profile,
                "outcome": run.outcome,
                "reason": run.reason,
                "plan_verdict": run.plan_verdict,
                "rank": run.rank,
                "log": run.log,
                "terms": [_row_json(row) for row in run.rows],
            }
            for run in calibration.runs
        ],
    }
