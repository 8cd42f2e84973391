"""``orch plan --fit``: the launch as it is, then each suggestion as the YAML to write into the
profile and what it predicts; ``--json`` gives the same as ``suggestions``. Nothing prints."""

from __future__ import annotations

from typing import Any

from orchestrator.cli.show.text import Text, line
from orchestrator.commands.fitting import FitResult
from orchestrator.effective import fit
from orchestrator.sglang.memory.budget import FAILS, FITS


def _predicted(prediction: fit.Prediction) -> str:
    return (
        f"{prediction.verdict}, max_running_requests {prediction.max_running_requests}, "
        f"KV tokens {prediction.kv_tokens}, headroom {prediction.headroom_gib:.1f} GiB"
    )


def _predicted_json(prediction: fit.Prediction) -> dict[str, Any]:
    return {
        "verdict": prediction.verdict,
        "max_running_requests": prediction.max_running_requests,
        "kv_tokens": prediction.kv_tokens,
        "headroom": round(prediction.headroom_gib, 3),
        "failure": prediction.failure,
    }


def fit_text(result: FitResult) -> list[Text]:
    report = result.report
    standin = " -- orch's stand-in, NOT SGLang" if report.standin else ""
    simulated = f", simulated {report.simulated_gpu}" if report.simulated_gpu else ""
    texts = [
        line(
            f"{report.profile}: SGLang {report.sglang_version or '?'} "
            f"({report.where}{simulated}){standin}"
        ),
        line(f"as it is: {_predicted(result.baseline)}"),
    ]
    if result.baseline.failure:
        texts.append(line(f"  will fail: {result.baseline.failure}"))
    elif result.baseline.verdict == FITS:
        texts.append(line("  it fits already; the edits below leave more concurrency"))
    texts.append(
        line(
            f"searched {result.sized} edits of up to {fit.MAX_CHANGES} fields (pinned fields "
            f"left alone); planned the best {result.planned} through SGLang's own resolution"
        )
    )
    for number, suggestion in enumerate(result.suggestions, 1):
        texts.append(line())
        texts.append(line(f"suggestion {number}: {_predicted(suggestion.predicted)}"))
        texts.extend(line("  " + row) for row in fit.yaml_snippet(suggestion.changes).split("\n"))
    if result.dropped:
        texts.append(line())
        texts.append(line("planned and dropped:"))
        for dropped in result.dropped:
            edit = ", ".join(f"{k}={_value(v)}" for k, v in dropped.changes.items())
            texts.append(line(f"  {edit}: {dropped.reason}"))
    return texts


def fit_json(result: FitResult) -> dict[str, Any]:
    return {
        "format": "orch.plan-fit/1",
        "profile": result.report.profile,
        "sglang_version": result.report.sglang_version,
        "where": result.report.where,
        "simulated_gpu": result.report.simulated_gpu,
        "standin": result.report.standin,
        "as_is": _predicted_json(result.baseline),
        "searched": result.sized,
        "planned": result.planned,
        "suggestions": [
            {
                "profile_changes": dict(suggestion.changes),
                "predicted": _predicted_json(suggestion.predicted),
                "estimated": _predicted_json(suggestion.estimated),
            }
            for suggestion in result.suggestions
        ],
        "dropped": [
            {"profile_changes": dict(dropped.changes), "reason": dropped.reason}
            for dropped in result.dropped
        ],
    }


def nothing_found(result: FitResult) -> tuple[str, str]:
    """The error and hint when no suggestion is left."""
    name = result.report.profile
    if result.baseline.verdict == FITS:
        problem = f"{name} fits; no edit orch searches leaves more concurrency"
    elif result.baseline.verdict == FAILS:
        problem = f"{name} will fail, and no edit orch searches plans as not will fail"
    else:
        problem = f"{name}: no edit orch searches plans better than it does"
    hint = (
        "unpin a field (pin:), list more GPUs on the host, or use a larger GPU type (gpu.type); "
        f"orch plan {name} shows the budget"
    )
    return problem, hint


def _value(value: Any) -> str:
    return fit.yaml_snippet({"x.v": value}).split(": ", 1)[1]
