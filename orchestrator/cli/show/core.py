"""Every text and ``--json`` shape orch shows: values in, text out; ``cli/output.py`` writes it.

A ``Text`` is a piece of output and the stream it belongs on: results on stdout, errors,
warnings and notices on stderr. Nothing here prints.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from typing import Any, ClassVar

from orchestrator import render
from orchestrator.cli.show import budget as show_budget
from orchestrator.cli.show.text import Text, error, finding, grid, line
from orchestrator.commands.events import (
    Attached,
    Effective,
    LogLine,
    MemoryMeasured,
    Outcome,
    Planned,
    RunEnded,
    Started,
    Step,
    Stopping,
    UpEvent,
    Warn,
)
from orchestrator.commands.logs import RunsView
from orchestrator.commands.rolling import RollResult
from orchestrator.commands.rolling import Step as RollStep
from orchestrator.commands.routing import Routed
from orchestrator.effective import plan, verify
from orchestrator.errors import ExitCode
from orchestrator.fleet.protocol.hold import holder_text
from orchestrator.fleet.protocol.runs import RunInfo
from orchestrator.fleet.protocol.stop import StopReply
from orchestrator.model import (
    ExitInfo,
    Finding,
    LockHolder,
    Profile,
    ServerCommand,
    Severity,
)
from orchestrator.remote.agent.verdict import LOST_RETURNCODE, STOPPED
from orchestrator.sglang.observe import LogEvent


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


# -- up --------------------------------------------------------------------------------------------


class UpView:
    """``up``'s events as text: startup phases as lines, weight loading as one bar redrawn on a
    terminal, the outcome as soon as it comes (more may follow: what the log recorded)."""

    _PHASES: ClassVar[dict[str, str]] = {
        "config": "SGLang accepted its configuration (server_args logged)",
        "load_begin": "loading weights",
        "load_end": "weights loaded",
        "memory_pool": "memory pool allocated",
        "graph_begin": "capturing CUDA graphs",
        "graph_end": "CUDA graphs captured",
        "capacity": "capacity",
        "http_up": "HTTP server up",
        "ready": "ready line logged",
    }

    def __init__(self, tty: bool) -> None:
        self.tty = tty
        self.open_bar = False
        self.last_done: int | None = None
        self.exit_code: int = ExitCode.INTERNAL  # up always ends with an Outcome

    def event(self, event: UpEvent) -> list[Text]:
        if isinstance(event, LogLine):
            return self._log_event(event.event)
        texts = self._end_bar()
        if isinstance(event, Step):
            texts.append(line(f"  {event.message}"))
        elif isinstance(event, Warn):
            texts += finding(Finding(Severity.WARNING, event.message, event.hint))
        elif isinstance(event, Started):
            texts.append(line(f"  started run {event.run_id} (pid {event.pid}); log {event.log}"))
        elif isinstance(event, Attached):
            state = event.state
            texts.append(
                line(
                    f"  the same launch already runs: run {state.run_id}, {state.state}, "
                    f"pid {state.pid}; following it"
                )
            )
        elif isinstance(event, Planned):
            texts += plan_in_up(event.report)
        elif isinstance(event, Effective):
            texts += effective_in_up(event)
        elif isinstance(event, MemoryMeasured):
            texts += memory_in_up(event)
        else:
            texts += self._outcome(event)
        return texts

    def _end_bar(self) -> list[Text]:
        if not self.open_bar:
            return []
        self.open_bar = False
        return [Text("\n")]

    def _outcome(self, event: Outcome) -> list[Text]:
        self.exit_code = event.exit_code
        texts: list[Text] = []
        if event.ok:
            texts.append(line(event.summary))
        elif event.exit_code == ExitCode.DRIFT:
            texts += error(event.summary, event.hint)
        else:
            if event.last_lines:
                texts.append(Text(f"  last lines of {event.lines_of}:\n", err=True))
                texts += [Text(f"  | {text}\n", err=True) for text in event.last_lines[-15:]]
            failed = "" if event.exit_code == ExitCode.SUPERVISOR else "server failed: "
            texts += error(f"{failed}{event.summary}", event.hint)
        return [*texts, Text("", flush=True), Text("", err=True, flush=True)]

    def _log_event(self, event: LogEvent) -> list[Text]:
        if event.kind == "load_progress" and event.done is not None and event.total:
            if event.done == self.last_done:
                return []
            self.last_done = event.done
            width = 30
            filled = width * event.done // event.total
            bar = f"  [{'#' * filled}{'.' * (width - filled)}] {event.done}/{event.total} shards"
            if self.tty:
                self.open_bar = True
                return [Text("\r", control=True), Text(bar, flush=True)]
            return [line(bar)]
        label = self._PHASES.get(event.kind)
        if label is None:
            if event.kind == "error":
                return [*self._end_bar(), line(f"  ! {event.text}")]
            return []
        detail = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in event.fields.items())
        return [*self._end_bar(), line(f"  {label}" + (f": {detail}" if detail else ""))]


def group_commands(
    profile: Profile, commands: Sequence[ServerCommand], *, one_line: bool
) -> list[str]:
    """``orch render`` of a group: each rank's command under a comment naming its node, then
    how the ranks differ (what a reviewer checks: only the rank, ports and NIC variables)."""
    group = profile.group
    assert group is not None  # noqa: S101 - the caller renders single servers itself
    gate = group.active_gate_port
    gated = f", gated launch port {gate} (orch activates it)" if gate is not None else ""
    out = [
        f"# {profile.name}: one server over {group.nnodes} nodes, rendezvous "
        f"{group.rendezvous}, orch control port {group.control_port}{gated}"
    ]
    for rank, (node, command) in enumerate(zip(group.nodes, commands, strict=True)):
        role = "serves the API and the rendezvous" if rank == 0 else "worker"
        where = node.host.address or "this machine"
        out += ["", f"# rank {rank} on {node.host.name} ({where}): {role}"]
        out.append(render.format_command(command, multiline=not one_line))
    out += ["", "# how the ranks differ from rank 0:"]
    out += [f"#   {text}" for text in render.rank_differences(tuple(commands))]
    return out


def replica_commands(
    profile: Profile, commands: Sequence[ServerCommand], *, one_line: bool
) -> list[str]:
    """``orch render`` of a profile with replicas: each replica's command under a comment
    naming its deployment and host, then how the replicas differ from replica 0."""
    out = [f"# {profile.name}: {len(commands)} replicas, each a server of its own"]
    for index, command in enumerate(commands):
        replica = profile.for_replica(index)
        where = replica.host.address or "this machine"
        out += ["", f"# replica {index} ({replica.deployment}) on {replica.host.name} ({where})"]
        out.append(render.format_command(command, multiline=not one_line))
    out += ["", "# how the replicas differ from replica 0:"]
    out += [f"#   {text}" for text in render.rank_differences(tuple(commands), "replica")]
    return out


def tagged(tag: str, texts: Sequence[Text]) -> list[Text]:
    """Texts of one of several servers that run at once (replicas), each line prefixed with
    ``TAG| `` as ``orch logs --node all`` prefixes a rank's; a terminal's control is dropped
    (no bar is redrawn over another server's line)."""
    out: list[Text] = []
    for text in texts:
        if text.control:
            continue
        lines = text.text.splitlines(keepends=True)
        out.append(dataclasses.replace(text, text="".join(f"{tag}| {piece}" for piece in lines)))
    return out


def replicas_up(name: str, done: Sequence[tuple[str, str, int]]) -> list[Text]:
    """``orch up`` of replicas, once every one has ended: which are up, which failed and how
    (``done``: deployment, host, exit code, in replica order)."""
    up = [f"{deployment} on {host}" for deployment, host, code in done if code == ExitCode.OK]
    failed = [
        f"{deployment} on {host} (exit {code})"
        for deployment, host, code in done
        if code != ExitCode.OK
    ]
    texts = [
        line(f"{name}: {len(up)} of {len(done)} replicas up" + ": " * bool(up) + ", ".join(up))
    ]
    if failed:
        texts += error(
            f"{name}: {len(failed)} of {len(done)} replicas failed: {', '.join(failed)}",
            f"orch logs {name} --replica I shows a replica's log; orch status {name}",
        )
    return texts


def plan_in_up(report: plan.PlanReport) -> list[Text]:
    if report.error is not None:
        return []  # the refusal (or the --force warning) says it
    who = "orch's stand-in (NOT SGLang)" if report.standin else f"SGLang {report.sglang_version}"
    changed = report.changed
    cached = report.cache is not None and report.cache.hit
    texts = [
        line(
            f"  plan: {who} accepts the command line; "
            + (
                f"{len(changed)} field(s) would change"
                if changed
                else "no field the profile sets changes"
            )
            + (" (from the plan cache; --no-cache plans afresh)" if cached else "")
        ),
        *budget_in_up(report),
    ]
    if report.cache is not None and report.cache.note and not cached:
        texts.append(line(f"  plan cache: {report.cache.note}"))
    for field in changed:
        by = ", ".join(p.source for p in field.provenance) or "SGLang"
        texts += finding(
            Finding(
                Severity.NOTICE,
                f"plan: {field.field} {verify.display(field.profile, field.secret)} -> "
                f"{verify.display(field.effective, field.secret)} ({by})",
                field.why,
            )
        )
    return texts


def budget_in_up(report: plan.PlanReport) -> list[Text]:
    """The plan's memory budget in one line, its warnings as notices."""
    budget = report.budget
    if budget is None:
        return [line(f"  memory: {note}") for note in report.budget_notes[:1]]
    mamba = f", {budget.mamba.slots} mamba slots" if budget.mamba else ""
    texts = [
        line(
            f"  memory: {budget.verdict} on {budget.gpu_name} (SGLang {budget.family}+ sizing): "
            f"weights {budget.weights_gib or 0:.1f} GiB, KV {budget.kv_tokens:,} tokens{mamba}, "
            f"max_running_requests {budget.max_running_requests}, headroom "
            f"{budget.headroom_gib:.1f} GiB ({budget.headroom_worst_gib:.1f} to "
            f"{budget.headroom_best_gib:.1f})"
        ),
        line(f"    {budget.deciding}"),
    ]
    for warning in budget.warnings:
        texts += finding(Finding(Severity.NOTICE, f"memory: {warning}"))
    return texts


def memory_in_up(event: MemoryMeasured) -> list[Text]:
    if not event.comparisons:
        rows = show_budget.measured_lines(event.measured)
        return [line("  memory as SGLang logged it:"), *(line(f"    {row}") for row in rows)]
    rank = event.measured[0].rank
    title = f"  memory, predicted vs measured{f' ({rank})' if rank else ''}:"
    rows = show_budget.comparison_lines(event.comparisons)
    texts = [line(title), *(line(f"    {row}") for row in rows)]
    if event.standin:
        texts.append(
            line(
                "    (measured by orch's SGLang stand-in, NOT SGLang: its figures are "
                "illustrative, the errors say nothing of the plan)"
            )
        )
    return texts


def effective_in_up(event: Effective) -> list[Text]:
    report = event.report
    fields = [row for row in report.fields if row.verdict != verify.DEFAULTED]
    drift = report.drift
    matched = sum(1 for row in fields if row.verdict == verify.OK)
    where = report.resolved_source or "no resolved configuration"
    texts = [
        line(
            f"  effective configuration ({where}): {matched}/{len(fields)} fields as the profile "
            f"says, {len(drift)} drift"
        )
    ]
    pinned = {id(row) for row in event.pinned}
    for row in drift:
        if id(row) in pinned:
            texts += error(f"pinned {drift_sentence(row)}")
        else:
            texts += finding(Finding(Severity.WARNING, drift_sentence(row), None))
    return texts


def drift_sentence(row: verify.FieldRow | verify.EnvRow) -> str:
    if isinstance(row, verify.EnvRow):
        got = "absent" if row.received is None else row.received
        return f"env {row.name}: {row.verdict} (profile {row.profile}, process {got})"
    text = (
        f"{row.field}: {row.verdict} (profile {verify.display(row.profile, row.secret)}, "
        f"received {verify.display(row.received, row.secret)}, "
        f"resolved {verify.display(row.resolved, row.secret)})"
    )
    return text + (f": {row.why}" if row.why else "")


# -- down, status ----------------------------------------------------------------------------------


def down(name: str, reply: StopReply | None) -> list[Text]:
    if reply is None:
        return [line(f"{name}: not running")]
    texts = [line(f"{name}: {reply.state.state} ({reply.state.message})")]
    if reply.leftovers_killed:
        killed = list(reply.leftovers_killed)
        texts.append(line(f"  killed {len(killed)} leftover process(es): {killed}"))
    texts.extend(line(f"  note: {note}") for note in reply.notes)
    return texts


def routed(event: Routed) -> list[Text]:
    """A server taken out of (or put in) its gateway, or drained: said as it happens."""
    detail = f": {event.detail}" if event.detail else ""
    return [
        Text(
            f"{event.deployment}: {event.what} ({event.worker_url} at {event.gateway}){detail}\n",
            flush=True,
        )
    ]


def roll_step(name: str, step: RollStep) -> list[Text]:
    """One step of a rolling restart, as it happens."""
    who = f"{name}@{step.replica}" if step.replica is not None else name
    detail = f": {step.detail}" if step.detail else ""
    return [Text(f"{who}: {step.what}{detail}\n", flush=True)]


def roll_result(name: str, result: RollResult) -> list[Text]:
    def names(replicas: tuple[int, ...]) -> str:
        return ", ".join(f"{name}@{i}" for i in replicas) or "none"

    if result.ok:
        return [line(f"{name}: rolled {names(result.rolled)}")]
    texts = [line(f"{name}: rolled {names(result.rolled)}; untouched {names(result.untouched)}")]
    if result.failed is not None:
        back = {True: "back on its previous launch", False: "NOT restored", None: "-"}
        texts.append(line(f"  {name}@{result.failed}: {back[result.restored]}"))
    return texts


def stopping(event: Stopping) -> list[Text]:
    """Said before ``down``'s stop call, which blocks while the server drains."""
    if event.pid is None:
        what = f"stopping {event.profile} ({event.state or 'no server running'})"
    else:
        what = f"SIGTERM sent to {event.profile} (pid {event.pid})"
    return [Text(f"{what}; draining, up to {event.timeout_s:g} s\n", flush=True)]


def waiting_for_lock(label: str, holder: LockHolder, wait_s: float) -> list[Text]:
    """Said once per deployment another orch holds, before waiting for it (``--lock-wait``)."""
    return [
        Text(
            f"orch: waiting for {label}: {holder_text(holder)} holds it; up to {wait_s:g} s "
            "(--lock-wait)\n",
            err=True,
            flush=True,
        )
    ]


# -- runs and logs -------------------------------------------------------------------------------


def utc(at: float | None) -> str:
    """A host's wall-clock time as users read it (UTC, as the run ids)."""
    return "-" if at is None else time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(at))


def run_verdict(ended: ExitInfo | None) -> str:
    """``cuda-oom (SIGKILL)``, ``crashed (exit 1)``: the class and the exit status; a stop on
    request is ``stopped`` whatever the status (SGLang ends its own SIGTERM drain by
    SIGKILLing itself: -9 is how it stops cleanly, not a kill; --json keeps the status)."""
    if ended is None:
        return "no exit recorded"
    if ended.cls == STOPPED:
        return STOPPED
    if ended.signal:
        status = ended.signal
    elif ended.returncode == LOST_RETURNCODE:
        status = "status unknown"
    else:
        status = f"exit {ended.returncode}"
    return f"{ended.cls} ({status})"


def restart_verdict(ended: ExitInfo) -> str:
    """``restart will not help: <why>`` or ``restart may help: <why>`` (the agent's verdict)."""
    return f"restart {'may help' if ended.restart_helps else 'will not help'}: {ended.restart_why}"


def run_ended(event: RunEnded, *, at_line_start: bool = True) -> list[Text]:
    """The marker between two runs in ``orch logs -f``, and at the deployment's end."""
    head = f"-- run {event.run_id} ended: {run_verdict(event.verdict)}; "
    if event.verdict is not None and event.verdict.cls != STOPPED:
        head += f"{restart_verdict(event.verdict)}; "  # as status, runs and up say it
    if event.next_run is not None:
        tail = f"following run {event.next_run} --"
    else:
        tail = f"{event.state}{': ' + event.message if event.message else ''}; no new run --"
    return [Text(("" if at_line_start else "\n") + head + tail + "\n", flush=True)]


def _run_cells(view: RunsView, run: RunInfo) -> dict[str, Any]:
    current = view.current if view.current and view.current.run_id == run.run_id else None
    ended_at = run.exit.at if run.exit else None
    length = None
    if run.started_at is not None:
        if ended_at is not None:
            length = ended_at - run.started_at
        elif current is not None and view.now is not None:
            length = view.now - run.started_at
    if run.exit is not None:
        verdict = run_verdict(run.exit)
    elif current is not None:
        verdict = current.state or "?"
    else:
        verdict = "no exit recorded"
    restart = "-"
    if run.exit is not None and run.exit.cls != STOPPED:
        restart = restart_verdict(run.exit).removeprefix("restart ")
    return {
        "ended_at": ended_at,
        "duration_s": length,
        "verdict": verdict,
        "restart": restart,
        "state": current.state if current else None,
        "current": current is not None,
    }


def runs_table(view: RunsView) -> str:
    table = [
        ("RUN", "STARTED (UTC)", "ENDED (UTC)", "DURATION", "READY AFTER", "VERDICT", "RESTART")
    ]
    for run in view.runs:
        cells = _run_cells(view, run)
        ready = None
        if run.ready_at is not None and run.started_at is not None:
            ready = run.ready_at - run.started_at
        table.append(
            (
                run.run_id,
                utc(run.started_at),
                utc(cells["ended_at"]),
                duration(cells["duration_s"]),
                duration(ready),
                cells["verdict"],
                cells["restart"],
            )
        )
    text = grid(table)
    if view.skipped_events:
        text += (
            f"\nnote: {view.skipped_events} lines of events.jsonl skipped (longer or nested "
            "deeper than any event the agent writes)"
        )
    return text


def runs_json(view: RunsView) -> dict[str, Any]:
    rows = []
    for run in view.runs:
        cells = _run_cells(view, run)
        rows.append(
            {
                "run_id": run.run_id,
                "log": run.log,
                "log_bytes": run.size,
                "pid": run.pid,
                "started_at": run.started_at,
                "ready_at": run.ready_at,
                "ended_at": cells["ended_at"],
                "duration_s": cells["duration_s"],
                "current": cells["current"],
                "state": cells["state"],
                "exit": None
                if run.exit is None
                else {
                    "class": run.exit.cls,
                    "returncode": run.exit.returncode,
                    "signal": run.exit.signal,
                    "message": run.exit.message,
                    "was_ready": run.exit.was_ready,
                    "swept_pids": list(run.exit.swept_pids),
                    "restart_helps": run.exit.restart_helps,
                    "restart_why": run.exit.restart_why,
                },
            }
        )
    return {
        "profile": view.profile,
        "host": view.host,
        "runs": rows,
        "skipped_events": view.skipped_events,
    }
