"""``orch sync``'s words: the dry run's table and summary, the apply's report and verdict, and
the ``orch.sync/1`` JSON document. Nothing prints; no value from the environment is read here
(the review masks secrets, the CLI's stream redacts what the command read)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from orchestrator.cli.show.text import grid
from orchestrator.commands.sync import DryRun
from orchestrator.commands.sync_apply import SyncRow
from orchestrator.effective import sync as esync

FORMAT = "orch.sync/1"
WHY_WIDTH = 60


def _commit(commit: str | None, dirty: bool | None = None) -> str:
    return (commit[:8] if commit else "-") + ("+dirty" if dirty else "")


def running_cell(row: SyncRow) -> str:
    state = row.running
    if state is None or not state.deployed:
        return "-"
    return f"{_commit(state.git_commit, state.git_dirty)} {state.launch_digest or '-'}"


def wanted_cell(row: SyncRow) -> str:
    return f"{_commit(row.wanted.commit)} {row.wanted.digest}"


def table(found: DryRun, *, wide: bool = False) -> str:
    header = ("DEPLOYMENT", "HOST", "STATE", "ACTION", "FORCED-BY", "RUNNING", "WANTED", "WHY")
    cells = [header]
    for row in found.rows:
        verdict = row.row.verdict
        why = verdict.why
        if not wide and len(why) > WHY_WIDTH:
            why = why[: WHY_WIDTH - 12] + "... (--wide)"
        acting = verdict.state in (esync.PENDING, esync.DOWN, esync.OUT_OF_BAND)
        cells.append(
            (
                row.row.name,
                row.row.host,
                verdict.state,
                (verdict.action or "-") if acting else "-",
                ", ".join(verdict.forced_by) or "-",
                running_cell(row),
                wanted_cell(row),
                why,
            )
        )
    lines = [grid(cells)] if found.rows else []
    for row in found.rows:
        lines += [f"{row.row.name}: note: {note}" for note in row.row.verdict.notes]
    lines += [
        f"{host}: {name}: unmanaged (no profile renders it; left alone)"
        for host, name in found.unmanaged
    ]
    lines += [f"{name}: invalid: {why}" for name, why in found.invalid]
    lines += [f"note: {note}" for note in found.notes]
    lines.append(summary(found))
    return "\n".join(lines)


def summary(found: DryRun) -> str:
    """``2 of 6 would change: 1 restart, 1 agent-only; 1 down; 1 out-of-band``."""
    states = Counter(row.row.verdict.state for row in found.rows)
    total = len(found.rows)
    actions = Counter(
        row.row.verdict.action or "-"
        for row in found.rows
        if row.row.verdict.state == esync.PENDING
    )
    others = [
        f"{states[state]} {state}"
        for state in (esync.DOWN, esync.OUT_OF_BAND, esync.VERSION_SKEW)
        if states[state]
    ]
    if found.unmanaged:
        others.append(f"{len(found.unmanaged)} unmanaged")
    if found.invalid:
        others.append(f"{len(found.invalid)} invalid")
    if not others and not actions:
        return f"all {total} clean" if total else "no deployment selected"
    head = f"{states[esync.PENDING]} of {total} would change"
    if actions:
        head += ": " + ", ".join(f"{n} {action}" for action, n in actions.most_common())
    return "; ".join([head, *others])


def said(line: str) -> str:
    return f"sync: {line}"


def report(plan: esync.Plan, result: esync.Report) -> str:
    cells = [("DEPLOYMENT", "ACTION", "RESULT", "WHY")]
    for outcome in result.outcomes:
        why = outcome.why
        if outcome.restored is not None and outcome.result == esync.FAILED:
            why += "" if why else ("restored" if outcome.restored else "not restored")
        for name in outcome.unit.rows:
            cells.append((name, outcome.unit.action, outcome.result, why or "-"))
    for name, why in plan.skipped:
        cells.append((name, "-", esync.SKIPPED, why))
    lines = [grid(cells)] if len(cells) > 1 else []
    lines.append(verdict(plan, result))
    return "\n".join(lines)


def verdict(plan: esync.Plan, result: esync.Report) -> str:
    counts = Counter(outcome.result for outcome in result.outcomes)
    parts = [
        f"{counts[esync.DONE]} done",
        f"{counts[esync.FAILED]} failed",
        f"{len(plan.skipped)} skipped",
        f"{counts[esync.NOT_REACHED]} not reached",
        f"{len(plan.clean)} already clean",
    ]
    head = (
        "sync halted: " + result.halted
        if result.halted
        else ("sync complete" if result.ok else "sync finished with failures")
    )
    return f"{head} ({', '.join(parts)})"


def as_json(
    found: DryRun,
    applied: tuple[esync.Plan, esync.Report] | None = None,
) -> dict[str, Any]:
    document: dict[str, Any] = {
        "format": FORMAT,
        "wanted": {
            "commit": found.wanted.commit,
            "dirty": found.wanted.dirty,
            "rev": found.wanted.rev,
        },
        "deployments": [_row_json(row) for row in found.rows],
        "unmanaged": [{"host": host, "deployment": name} for host, name in found.unmanaged],
        "invalid": [{"profile": name, "error": why} for name, why in found.invalid],
        "summary": summary(found),
    }
    if applied is not None:
        plan, result = applied
        document["applied"] = _applied_json(plan, result)
        document["halted"] = result.halted
    return document


def _row_json(row: SyncRow) -> dict[str, Any]:
    verdict = row.row.verdict
    state = row.running
    deployed = state is not None and state.deployed
    return {
        "profile": row.row.profile,
        "deployment": row.row.deployment,
        "rank": row.row.rank,
        "replica": row.row.replica,
        "host": row.row.host,
        "state": verdict.state,
        "why": verdict.why,
        "notes": list(verdict.notes),
        "action": verdict.action,
        "forced_by": list(verdict.forced_by),
        "running": {
            "commit": state.git_commit if deployed and state else None,
            "dirty": state.git_dirty if deployed and state else None,
            "digest": state.launch_digest if deployed and state else None,
            "state": state.state if deployed and state else None,
        },
        "wanted": {"commit": row.wanted.commit, "digest": row.wanted.digest},
    }


def _applied_json(plan: esync.Plan, result: esync.Report) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for outcome in result.outcomes:
        for name in outcome.unit.rows:
            out.append(
                {
                    "deployment": name,
                    "unit": outcome.unit.name,
                    "action": outcome.unit.action,
                    "result": outcome.result,
                    "why": outcome.why,
                    "restored": outcome.restored,
                }
            )
    out += [
        {"deployment": name, "unit": name, "action": None, "result": esync.SKIPPED, "why": why}
        for name, why in plan.skipped
    ]
    return out


def sync_cell(rows: Sequence[SyncRow], deployment: str, rank: int | None) -> str:
    """``orch status``'s SYNC column: the state of that deployment (rank), or ``-``."""
    for row in rows:
        if row.row.deployment == deployment and row.row.rank == rank:
            return row.row.verdict.state
    return "-"
