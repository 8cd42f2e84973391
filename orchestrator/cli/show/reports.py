"""The reports' text and ``--json`` shapes: ``orch plan``, ``orch lock``, ``orch
diff-effective`` (``core`` holds the rest: up, status, runs, logs, down). Nothing prints."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from orchestrator.cli.show import budget as show_budget
from orchestrator.cli.show.text import Text, grid, line
from orchestrator.commands.effective import GroupReport
from orchestrator.effective import plan, verify

VALUE_WIDTH = 32  # a value in the plan and diff-effective tables without --wide
WIDE = 100_000  # with --wide: whole (a model path, a JSON value)


# -- plan, lock ------------------------------------------------------------------------------------


def plan_text(
    report: plan.PlanReport, include_defaulted: bool, *, wide: bool = False, tty: bool = False
) -> list[Text]:
    width = WIDE if wide else VALUE_WIDTH
    simulated = f", simulated {report.simulated_gpu}" if report.simulated_gpu else ""
    standin = " -- orch's stand-in, NOT SGLang" if report.standin else ""
    lines = [
        f"{report.profile}: SGLang {report.sglang_version or '?'} ({report.where}{simulated}), "
        f"{report.mode}{standin}"
    ]
    if report.error is None:
        rows = [*report.fields, *(report.defaulted if include_defaulted else ())]
        table = [("FIELD", "PROFILE", "PREDICTED", "CHANGED BY")]
        for row in rows:
            name = row.field + (f" (as {row.requested_as})" if row.requested_as else "")
            by = ""
            if row.changed:
                by = ", ".join(p.describe() for p in row.provenance) or "SGLang (no record)"
                if row.why:
                    by += f": {row.why}"
            table.append(
                (
                    name,
                    verify.display(row.profile, row.secret, width),
                    verify.display(row.effective, row.secret, width),
                    by,
                )
            )
        lines.append(grid(table))
        changed = report.changed
        lines.append(
            f"{len(changed)} field{'s' if len(changed) != 1 else ''} the profile sets would change"
            if changed
            else "SGLang keeps every field the profile sets"
        )
    said = cache_text(report.cache)
    if said is not None:
        lines.insert(1, said)
    # the pitfalls right under the heading: orch's reading comes before SGLang's
    texts = [line(lines[0]), *(line(text) for text in pitfall_lines(report))]
    texts += [line(text) for text in lines[1:]]
    if report.error is None:
        texts += show_budget.budget_texts(report.budget, report.budget_notes, tty=tty)
    return texts + [line(f"note: {note}") for note in report.notes]


def pitfall_lines(report: plan.PlanReport) -> list[str]:
    """The launch pitfalls, errors first, each with what to write instead."""
    out = []
    for pitfall in report.pitfalls:
        out.append(f"pitfall ({pitfall.severity}) {pitfall.kind}: {pitfall.message}")
        out.append(f"  hint: {pitfall.hint}")
    return out


def cache_text(cache: plan.CachedAnswer | None) -> str | None:
    """One line on the plan cache: an answer kept from before, or why it was not used or kept;
    None for a fresh answer kept as it should be."""
    if cache is None:
        return None
    if cache.hit:
        return (
            f"from the plan cache (key {cache.key or '?'}, planned {_age(cache.age_s)} ago; "
            "SGLang not imported, the GPUs' free memory read now; --no-cache plans afresh)"
        )
    return f"plan cache: {cache.note}" if cache.note else None


def cache_json(cache: plan.CachedAnswer | None) -> dict[str, object] | None:
    if cache is None:
        return None
    return {
        "hit": cache.hit,
        "stored": cache.stored,
        "key": cache.key,
        "age_s": cache.age_s,
        "note": cache.note,
        "lookup_s": cache.lookup_s,
    }


def _age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def plan_json(report: plan.PlanReport, include_defaulted: bool) -> dict[str, object]:
    def row(field: plan.PlannedField) -> dict[str, object]:
        return {
            "field": field.field,
            "requested_as": field.requested_as,
            "key_path": field.key_path,
            "profile": jsonable(field.profile, field.secret),
            "predicted": jsonable(field.effective, field.secret),
            "changed": field.changed,
            "provenance": [
                {
                    "source": p.source,
                    "file": p.file,
                    "line": p.line,
                    "value": jsonable(p.value, field.secret),
                }
                for p in field.provenance
            ],
            "why": field.why,
        }

    failure = report.error
    return {
        "format": "orch.plan/1",
        "profile": report.profile,
        "sglang_version": report.sglang_version,
        "where": report.where,
        "simulated_gpu": report.simulated_gpu,
        "standin": report.standin,
        "mode": report.mode,
        "ok": failure is None,
        "pitfalls": [
            {
                "kind": p.kind,
                "severity": p.severity,
                "message": p.message,
                "hint": p.hint,
                "fields": list(p.fields),
            }
            for p in report.pitfalls
        ],
        "error": None
        if failure is None
        else {
            "stage": failure.stage,
            "type": failure.kind,
            "message": failure.message,
            "raised_in": failure.raised_in,
            "hint": failure.hint,
        },
        "fields": [row(f) for f in report.fields],
        "defaulted": [row(f) for f in report.defaulted] if include_defaulted else [],
        "logs": list(report.logs),
        "notes": list(report.notes),
        "cache": cache_json(report.cache),
        "memory": show_budget.budget_json(report.budget, report.budget_notes)
        if failure is None
        else None,
    }


def lock_written(target: Path, document: dict[str, Any], report: plan.PlanReport) -> str:
    effective = document["effective"]
    hit = report.cache is not None and report.cache.hit
    return (
        f"wrote {target}: SGLang {document['sglang']}, gpu {document['gpu_type'] or '-'}, "
        f"{len(effective)} fields differ from SGLang's defaults ({report.where})"
        + ("; predicted by orch's stand-in, NOT SGLang" if report.standin else "")
        + ("; SGLang's answer from the plan cache (--no-cache plans afresh)" if hit else "")
    )


# -- diff-effective --------------------------------------------------------------------------------


def diff_text(report: verify.Report, *, wide: bool = False) -> str:
    width = WIDE if wide else VALUE_WIDTH
    found = {
        "orch": "run by orch",
        "port": "found by its port",
        "pid": "given pid",
        "url": "asked by --url",
    }
    head = (
        f"{report.profile}: SGLang {report.sglang_version}, pid {report.pid or '-'} "
        f"({found.get(report.found_by, 'not running')}), resolved from "
        f"{report.resolved_source or 'nothing'}"
    )
    # the lock's predictions in a column of their own, only when there is a lock
    locked = any(row.locked is not verify.ABSENT for row in report.fields)
    lock_head: tuple[str, ...] = ("LOCK",) if locked else ()
    table: list[tuple[str, ...]] = [
        ("FIELD", "PROFILE", *lock_head, "RECEIVED", "RESOLVED", "VERDICT", "WHY")
    ]
    for row in report.fields:
        name = row.field + (f" (as {row.requested_as})" if row.requested_as else "")
        lock_cell = (verify.display(row.locked, row.secret, width),) if locked else ()
        table.append(
            (
                name,
                verify.display(row.profile, row.secret, width),
                *lock_cell,
                verify.display(row.received, row.secret, width),
                verify.display(row.resolved, row.secret, width),
                row.verdict,
                row.why or "",
            )
        )
    for env in report.env:
        table.append(
            (
                f"env {env.name}",
                verify.display(env.profile, False, width),
                *("",) * len(lock_head),
                "-" if env.received is None else verify.display(env.received, False, width),
                "",
                env.verdict,
                "",
            )
        )
    lines = [head, grid(table)]
    lines += [f"unrecognised on the command line: {token}" for token in report.unknown_received]
    lines += [f"note: {note}" for note in report.notes]
    if report.memory_measured:
        rank = report.memory_measured[0].rank
        at = f" ({rank})" if rank else ""
        if report.memory_predicted:
            lines.append(f"memory{at}, predicted at launch vs as SGLang logged it:")
            lines += ["  " + row for row in show_budget.comparison_lines(report.memory_rows)]
        else:
            lines.append(
                "memory as SGLang logged it (no prediction kept: orch up --no-plan, "
                "or a server orch did not start):"
            )
            lines += ["  " + row for row in show_budget.measured_lines(report.memory_measured)]
    drift = report.drift
    lines.append(
        f"{len(drift)} field{'s' if len(drift) != 1 else ''} drifted" if drift else "no drift"
    )
    return "\n".join(lines)


def jsonable(value: Any, secret: bool = False) -> Any:
    if value is verify.ABSENT:
        return None
    if secret:
        return verify.SECRET_SHOWN
    return value


def diff_json(report: verify.Report) -> dict[str, Any]:
    """The stable ``--json`` format (documented in README.md)."""
    return {
        "format": "orch.diff-effective/1",
        "memory": show_budget.comparison_json(report.memory_measured, report.memory_rows)
        if report.memory_measured
        else None,
        "profile": report.profile,
        "sglang_version": report.sglang_version,
        "pid": report.pid,
        "found_by": report.found_by,
        "resolved_source": report.resolved_source or None,
        "drift": bool(report.drift),
        "fields": [
            {
                "field": row.field,
                "requested_as": row.requested_as,
                "key_path": row.key_path,
                "profile": jsonable(row.profile, row.secret),
                "lock": jsonable(row.locked, row.secret),
                "received": jsonable(row.received, row.secret),
                "received_present": row.received is not verify.ABSENT,
                "resolved": jsonable(row.resolved, row.secret),
                "resolved_present": row.resolved is not verify.ABSENT,
                "launch_command": jsonable(row.launch_command, row.secret),
                "verdict": row.verdict,
                "why": row.why,
            }
            for row in report.fields
        ],
        "env": [
            {"name": r.name, "profile": r.profile, "received": r.received, "verdict": r.verdict}
            for r in report.env
        ],
        "unknown_received": list(report.unknown_received),
        "notes": list(report.notes),
    }


def group_diff_text(report: GroupReport, *, wide: bool = False) -> str:
    """Every rank's comparison under its own heading, then the ranks against each other."""
    parts = []
    for rank, (node, rank_report) in enumerate(report.ranks):
        parts.append(f"== rank {rank} on {node} ==\n{diff_text(rank_report, wide=wide)}")
    width = WIDE if wide else VALUE_WIDTH
    if report.between:
        table = [("FIELD", *(f"RANK {r}" for r in range(len(report.ranks))), "VERDICT", "WHY")]
        for row in report.between:
            shown = [verify.display(value, False, width) for value in row.values]
            verdict = "differs" if row.drift else "per process"
            table.append((row.field, *shown, verdict, row.why))
        parts.append(f"== the ranks against each other ==\n{grid(table)}")
    else:
        parts.append("== the ranks against each other ==\nevery rank resolved the same values")
    return "\n\n".join(parts)


def group_diff_json(report: GroupReport) -> dict[str, Any]:
    return {
        "format": "orch.diff-effective-group/1",
        "drift": report.drift,
        "ranks": [
            {"rank": rank, "node": node, **diff_json(rank_report)}
            for rank, (node, rank_report) in enumerate(report.ranks)
        ],
        "between_ranks": [
            {
                "field": row.field,
                "values": [jsonable(v, False) for v in row.values],
                "drift": row.drift,
                "why": row.why,
            }
            for row in report.between
        ],
    }
