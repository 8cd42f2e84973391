"""``orch diff``'s report as text and as ``--json`` (``review_markdown`` words it for a pull
request). Nothing prints. Secrets arrive masked (``commands/review.py``); nothing here unmasks."""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.cli.show.reports import jsonable
from orchestrator.cli.show.text import grid
from orchestrator.effective import review, verify

VALUE_WIDTH = 40


def value(item: Any, width: int = VALUE_WIDTH) -> str:
    if item is verify.ABSENT:
        return "(unset)"
    return verify.display(item, limit=width)


def title(report: review.Review) -> str:
    base = f"{report.base} ({report.base_commit[:12]})"
    head = report.head
    if report.head_commit is not None:
        head += f" ({report.head_commit[:12]})"
    return f"orch diff {base} -> {head}"


def headline(report: review.Review) -> str:
    """One line: how many deployments change and how."""
    if not report.deployments:
        return f"No deployment changes ({report.unchanged} unchanged)."
    counts: dict[str, int] = {}
    for change in report.deployments:
        counts[change.action] = counts.get(change.action, 0) + 1
    parts = ", ".join(f"{counts[a]} {a}" for a in review.ACTIONS if a in counts)
    many = len(report.deployments)
    noun = "deployment changes" if many == 1 else "deployments change"
    return f"{many} {noun}: {parts}; {report.unchanged} unchanged."


def memory_cell(change: review.DeploymentChange) -> str:
    memory = change.memory
    if memory is None:
        return "-"
    before = memory.before_verdict or "-"
    after = memory.after_verdict or "-"
    return after if before == after else f"{before} -> {after}"


def forced_cell(change: review.DeploymentChange) -> str:
    if change.action == review.BLOCKED:
        return "see below"
    return ", ".join(change.forced_by) or "-"


def summary_rows(report: review.Review) -> list[list[str]]:
    rows = [["DEPLOYMENT", "ACTION", "FORCED BY", "MEMORY"]]
    rows += [
        [change.name, change.action, forced_cell(change), memory_cell(change)]
        for change in report.deployments
    ]
    return rows


def rendered_lines(change: review.DeploymentChange) -> list[str]:
    """The launch as the server gets it, before and after: ``-``/``+`` lines, flags with their
    values, the environment by name."""
    old = change.before.rendered if change.before else None
    new = change.after.rendered if change.after else None
    if change.action == review.BLOCKED and new is None:
        return []  # the new side does not render: its reasons say why, the old launch is noise
    before, after = _launch_lines(old), _launch_lines(new)
    out = []
    for line in difflib.ndiff(before, after):
        if line.startswith(("- ", "+ ")):
            out.append(line)
    return out


def _launch_lines(rendered: review.Rendered | None) -> list[str]:
    if rendered is None:
        return []
    lines = [f"{name}: {shown}" for name, shown in rendered.placement.items()]
    lines += [f"env {name}={shown}" for name, shown in sorted(rendered.env.items())]
    words: list[list[str]] = [[]]
    for token in rendered.argv:
        if token.startswith("--") and words[-1]:
            words.append([])
        words[-1].append(token)
    lines += [" ".join(group) for group in words]
    return lines


def change_line(item: review.FieldChange, wide: bool = False) -> str:
    width = 10_000 if wide else VALUE_WIDTH
    name = item.field
    if item.renamed_from:
        name = f"{item.renamed_from} -> {item.field}"
    if item.basis == review.RENAME:
        text = f"{name}  (renamed; {value(item.after, width)} either way)"
    else:
        text = f"{name}  {value(item.before, width)} -> {value(item.after, width)}"
    how = item.how if wide or len(item.how) <= 90 else item.how[:87] + "..."
    return f"{text}  [{item.basis}{': ' + how if how else ''}]"


def memory_lines(memory: review.Memory) -> list[str]:
    def side(verdict: str | None, deciding: str | None, mrr: int | None, room: float | None) -> str:
        if verdict is None:
            return "no plan"
        text = verdict
        if mrr is not None:
            text += f", max_running_requests {mrr}"
        if room is not None:
            text += f", headroom {room:.1f} GiB"
        return text + (f" ({deciding})" if deciding else "")

    return [
        "before: "
        + side(
            memory.before_verdict,
            memory.before_deciding,
            memory.before_max_running_requests,
            memory.before_headroom_gib,
        ),
        "after:  "
        + side(
            memory.after_verdict,
            memory.after_deciding,
            memory.after_max_running_requests,
            memory.after_headroom_gib,
        ),
    ]


def action_sentence(change: review.DeploymentChange) -> str:
    """What merging the change does to this deployment, in words."""
    forced = ", ".join(change.forced_by)
    action = change.action
    if action == review.REPLACE:
        return f"replace: a new place for the server ({forced})"
    if action == review.RESTART:
        return f"restart: SGLang reads {forced} at start"
    if action == review.LIVE:
        endpoints = sorted(set(change.live_endpoints.values()))
        return (
            f"live: the running SGLang changes {forced} in place ({', '.join(endpoints)}); "
            "orch up still restarts a changed launch"
        )
    if action == review.AGENT_ONLY:
        return f"agent-only: the supervisor's settings ({forced}); the server keeps running"
    if action == review.NONE:
        return "none: the rendering changed, the effective configuration did not"
    if action == review.NEW:
        return "new: a deployment that did not exist"
    if action == review.REMOVED:
        return "removed: the deployment no longer exists (orch down stops what runs)"
    return "blocked: it cannot launch as written"


def running_line(running: review.Running) -> str:
    if running.error is not None:
        return f"not asked: {running.error}"
    if running.state is None:
        return "nothing runs"
    commit = (running.commit or "-")[:12] + (" with uncommitted changes" if running.dirty else "")
    return f"{running.state}, launched from {commit}: runs the {running.launches}'s launch"


def text(report: review.Review, *, wide: bool = False) -> str:
    lines = [title(report), "", headline(report)]
    if report.deployments:
        lines += ["", grid(summary_rows(report))]
    for change in report.deployments:
        lines += ["", f"== {change.name}: {action_sentence(change)}"]
        lines += [f"  blocked: {reason}" for reason in change.reasons]
        rendered = rendered_lines(change)
        if rendered:
            lines.append("  rendered:")
            lines += [f"    {line}" for line in rendered]
        effective = [c for c in change.changes if c.basis != review.PLACEMENT]
        if effective:
            lines.append("  changes:")
            lines += [f"    {change_line(item, wide)}" for item in effective]
        if change.memory is not None:
            lines.append("  memory:")
            lines += [f"    {line}" for line in memory_lines(change.memory)]
        if change.running is not None:
            lines.append(f"  runs now: {running_line(change.running)}")
        lines += [f"  note: {note}" for note in change.notes]
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines) + "\n"


# -- --json --------------------------------------------------------------------------------------


def _json_value(item: Any) -> Any:
    return None if item is verify.ABSENT else jsonable(item)


def _rendered_json(side: review.Side | None) -> dict[str, Any] | None:
    if side is None or side.rendered is None:
        return None
    rendered = side.rendered
    placement = rendered.placement
    return {
        "argv": list(rendered.argv),
        "env": dict(rendered.env),
        "host": placement.host,
        "gpus": placement.gpus,
        "sglang": placement.sglang,
        "nodes": placement.nodes,
        "supervision": dict(rendered.supervision),
        "launch_digest": side.digest,
    }


def _memory_json(memory: review.Memory | None) -> dict[str, Any] | None:
    if memory is None:
        return None
    return {
        "before": {
            "verdict": memory.before_verdict,
            "deciding": memory.before_deciding,
            "max_running_requests": memory.before_max_running_requests,
            "headroom_gib": memory.before_headroom_gib,
        },
        "after": {
            "verdict": memory.after_verdict,
            "deciding": memory.after_deciding,
            "max_running_requests": memory.after_max_running_requests,
            "headroom_gib": memory.after_headroom_gib,
        },
    }


def _running_json(running: review.Running | None) -> dict[str, Any] | None:
    if running is None:
        return None
    return {
        "state": running.state,
        "git_commit": running.commit,
        "git_dirty": running.dirty,
        "runs": running.launches,
        "error": running.error,
    }


def deployment_json(change: review.DeploymentChange) -> dict[str, Any]:
    document = {
        "profile": change.profile,
        "rank": change.rank,
        "action": change.action,
        "forced_by": list(change.forced_by),
        "reasons": list(change.reasons),
        "rendered": {
            "before": _rendered_json(change.before),
            "after": _rendered_json(change.after),
        },
        "changes": [
            {
                "field": item.field,
                "before": _json_value(item.before),
                "after": _json_value(item.after),
                "basis": item.basis,
                "how": item.how,
                "renamed_from": item.renamed_from,
                "secret": item.secret,
            }
            for item in change.changes
        ],
        "live": dict(change.live_endpoints),
        "memory": _memory_json(change.memory),
        "running": _running_json(change.running),
        "notes": list(change.notes),
    }
    if change.replica is not None:  # one of the profile's replicas: its index, its deployment
        document["replica"] = change.replica
        document["deployment"] = change.deployment
    return document


def as_json(report: review.Review) -> dict[str, Any]:
    return {
        "format": "orch.diff/1",
        "base": report.base,
        "base_commit": report.base_commit,
        "head": report.head,
        "head_commit": report.head_commit,
        "changed": report.changed,
        "unchanged": report.unchanged,
        "summary": _counts(report.deployments),
        "deployments": [deployment_json(change) for change in report.deployments],
        "notes": list(report.notes),
    }


def _counts(changes: Sequence[review.DeploymentChange]) -> Mapping[str, int]:
    counts = dict.fromkeys(review.ACTIONS, 0)
    for change in changes:
        counts[change.action] += 1
    return counts
