"""``orch plan PROFILE --fit``: edits of the profile that make its launch fit, or leave more
concurrency. The launch is planned as ``orch plan`` plans it; the edits are sized from that
answer (effective/fit.py, stage 1), and the best few are rendered from the edited profile and
planned through SGLang's own resolution in one probe process (stage 2): a suggestion is an edit
that SGLang accepts, that keeps every pinned field, and whose budget is not will fail."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.commands import planning
from orchestrator.commands.context import Context, Launch
from orchestrator.effective import fit, plan, verify
from orchestrator.errors import PlanRefused, SupervisorError
from orchestrator.sglang import argtable
from orchestrator.sglang.memory.budget import FAILS
from orchestrator.sglang.memory.shapes import nominal_gpu


@dataclass(frozen=True)
class Suggestion:
    changes: Mapping[str, Any]  # dotted profile key -> value
    predicted: fit.Prediction  # by SGLang's own resolution of the edited profile
    estimated: fit.Prediction  # stage 1's estimate from the launch's own answer


@dataclass(frozen=True)
class Dropped:
    changes: Mapping[str, Any]
    reason: str


@dataclass(frozen=True)
class FitResult:
    report: plan.PlanReport  # the launch as it is
    baseline: fit.Prediction
    suggestions: tuple[Suggestion, ...]
    dropped: tuple[Dropped, ...]  # shortlisted, then refused by SGLang's resolution or budget
    sized: int  # edits sized in stage 1
    planned: int  # edits planned through SGLang's resolution in stage 2


def fit_launch(
    ctx: Context, launch: Launch, *, local: planning.LocalSGLang | None = None
) -> FitResult:
    profile = launch.profile
    answer, where, model_config = planning.ask(ctx, launch, local=local)
    report = planning.report_for(launch, answer, where, local=local, model_config=model_config)
    if report.error is not None:
        raise PlanRefused(
            f"{profile.name}: --fit needs a plan SGLang accepts: {report.refusal()}",
            report.error.hint or f"orch plan {profile.name} shows the details",
        )
    memory = planning.memory_answer(answer, local)
    if memory is None or report.budget is None:
        why = "; ".join(report.budget_notes) or "the probe answered no memory section"
        raise PlanRefused(
            f"{profile.name}: --fit sizes the memory budget, and there is none ({why})",
            f"orch plan {profile.name} shows what the budget lacks",
        )
    gpu = profile.gpu.type
    base = fit.Base(
        profile=profile,
        table=launch.table,
        effective=report.effective,
        env=launch.primary.env,
        memory=memory,
        version=argtable.parse_version(answer.sglang_version or "") or launch.table.parsed_version,
        nominal=nominal_gpu(gpu.name, gpu.memory_gb) if gpu is not None else None,
    )
    baseline = fit.Prediction.of(report.budget)
    shortlisted, sized = fit.shortlist(base, baseline)
    if not shortlisted:
        return FitResult(report, baseline, (), (), sized, 0)
    edited = tuple(
        launch.edited(fit.edited_profile(profile, r.candidate.changes), ctx.environ)
        for r in shortlisted
    )
    batch, batch_where, _ = planning.ask(
        ctx, launch, local=local, candidates=tuple(e.primary.argv for e in edited)
    )
    if len(batch.candidates) != len(edited):
        raise SupervisorError(
            f"the planning probe answered {len(batch.candidates)} of {len(edited)} candidates",
            "a probe older than orch plan --fit: run it again (orch pushes the current one)",
        )
    verified: list[fit.Ranked] = []
    estimated: dict[frozenset[tuple[str, Any]], fit.Prediction] = {}
    dropped: list[Dropped] = []
    for ranked, launched, answered in zip(shortlisted, edited, batch.candidates, strict=True):
        changes = ranked.candidate.changes
        planned = planning.report_for(
            launched, answered, batch_where, local=local, model_config=model_config
        )
        pinned = planned.pinned_changes(launched.profile.pin, launched.table)
        if planned.error is not None:
            dropped.append(Dropped(changes, planned.refusal()))
        elif planned.budget is None:
            dropped.append(Dropped(changes, "; ".join(planned.budget_notes) or "no budget"))
        elif planned.budget.verdict == FAILS:
            dropped.append(Dropped(changes, f"plans as will fail: {planned.budget.failure}"))
        elif pinned:
            moved = ", ".join(
                f"{f.field} {verify.display(f.profile)} -> {verify.display(f.effective)}"
                for f in pinned
            )
            dropped.append(Dropped(changes, f"SGLang would change pinned field(s): {moved}"))
        else:
            verified.append(fit.Ranked(ranked.candidate, fit.Prediction.of(planned.budget)))
            estimated[ranked.candidate.identity] = ranked.predicted
    chosen = fit.select(
        verified, baseline, fit.SHOWN, ranks=lambda r: fit.gpus_taken(base, r.candidate)
    )
    suggestions = tuple(
        Suggestion(r.candidate.changes, r.predicted, estimated[r.candidate.identity])
        for r in chosen
    )
    return FitResult(report, baseline, suggestions, tuple(dropped), sized, len(edited))
