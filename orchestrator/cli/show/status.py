"""``orch status``'s table and ``--json``: each deployment as its agent reports it, the
gateway's view beside it, what the running servers say of their memory. Nothing prints."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from orchestrator.cli.show.core import duration, restart_verdict
from orchestrator.cli.show.status_load import LOAD_HEADER, load_cells, load_json, load_lines
from orchestrator.cli.show.text import grid
from orchestrator.commands.ops import GatewayView, StatusRow
from orchestrator.effective.sync import Verdict
from orchestrator.errors import ProfileError, TransportError
from orchestrator.model import MemoryLoad, RunState
from orchestrator.remote.agent.states import FATAL, READY
from orchestrator.remote.agent.verdict import STOPPED

# ``orch status --all``'s SYNC column: each row's ``effective.sync`` verdict by (deployment, rank)
SyncVerdicts = Mapping[tuple[str, int | None], Verdict]


def status_json(row: StatusRow, sync: SyncVerdicts | None = None) -> dict[str, object]:
    document: dict[str, object] = {"profile": row.profile, "host": row.host}
    if row.replica is not None:  # a replica: its index and its deployment (NAME@I)
        document["replica"] = row.replica
        document["deployment"] = row.deployment
    if row.rank is not None:
        document["rank"] = row.rank
    if row.error is not None:
        document["error"] = row.error.message
    if row.state is not None:
        document.update(dataclasses.asdict(row.state))
        document["alive"] = row.state.alive
        document["unsupervised"] = row.state.unsupervised
        document.pop("load", None)  # in its own shape below (status_load.load_json)
    if (load := load_json(row)) is not None:
        document["load"] = load
    if row.gateway is not None:
        document["gateway"] = dataclasses.asdict(row.gateway)
    if sync is not None:
        verdict = sync.get((row.deployment, row.rank))
        document["sync"] = (
            {"state": verdict.state, "why": verdict.why} if verdict is not None else None
        )
    return document


def gateway_cell(view: GatewayView | None) -> str:
    """The gateway's view of a server in a few words."""
    if view is None:
        return "-"
    if view.error is not None:
        return f"not asked: {view.error}"
    if not view.registered:
        return "not registered"
    words = [view.status or ("ready" if view.ready else "listed")]
    if view.healthy is False:
        words.append("unhealthy")
    if view.load is not None:
        words.append(f"load {view.load}")
    if view.circuit not in (None, "closed"):
        words.append(f"circuit {view.circuit}")
    return ", ".join(words)


FAILURE_WIDTH = 60  # the LAST FAILURE column without --wide; `orch status --wide` shows it all


def status_table(
    rows: Sequence[StatusRow],
    *,
    wide: bool = False,
    sync: SyncVerdicts | None = None,
    load: bool = False,
) -> str:
    """The table; ``sync`` (``orch status`` over every profile): a SYNC column, each row's
    state against the profiles' HEAD (``orch sync --dry-run`` says why); ``load`` (``orch
    status --load``): the load columns after RUN (status_load.py)."""
    header = [
        "PROFILE",
        "HOST",
        "STATE",
        "PID",
        "UPTIME",
        "RESTARTS",
        "PORT",
        "RUN",
        *(LOAD_HEADER if load else ()),
        "LAST FAILURE",
        "DIGEST",
        "COMMIT",
    ]
    if wide:
        header.append("LAUNCHED FROM")
    if sync is not None:
        header.append("SYNC")
    table = [tuple(header)]

    def cut(text: str) -> str:
        if wide or len(text) <= FAILURE_WIDTH:
            return text
        return text[: FAILURE_WIDTH - 12] + "... (--wide)"

    for row in rows:
        state = row.state
        cells: list[str]
        name = row.deployment if row.rank is None else f"{row.deployment} r{row.rank}"
        if state is None:
            failure = row.error.message if row.error else "?"
            cells = [name, row.host, _unknown(row), "-", "-", "-", "-", "-", cut(failure), "-", "-"]
        elif not state.deployed:
            cells = [name, row.host, "-", "-", "-", "-", "-", "-", "-", "-", "-"]
        else:
            last = "-"
            if state.last_exit is not None and state.last_exit.cls != STOPPED:
                ended = state.last_exit
                last = f"{ended.cls}: {ended.message}; {restart_verdict(ended)}"
            if state.state == FATAL and state.message:  # why it is not restarted
                last = state.message if last == "-" else f"{state.message}; last: {last}"
            commit = (state.git_commit or "-")[:10] + ("+dirty" if state.git_dirty else "")
            cells = [
                name,
                row.host,
                state_cell(state),
                str(state.pid or "-"),
                duration(state.uptime_s),
                str(state.restarts),
                str(state.port or "-"),
                state.run_id or "-",
                cut(last),
                state.launch_digest or "-",
                commit,
            ]
        if load:  # after RUN (the 8th cell)
            cells[8:8] = load_cells(row)
        if wide:
            origin = "-"
            if state is not None and state.profiles_dir:
                origin = state.profiles_dir + (
                    f" ({state.launched_by})" if state.launched_by else ""
                )
            cells.append(origin)
        if sync is not None:
            verdict = sync.get((row.deployment, row.rank))
            cells.append(verdict.state if verdict is not None else "-")
        table.append(tuple(cells))
    lines = [grid(table)]
    for row in rows:  # behind a router: the gateway's view beside the agent's
        if row.gateway is not None:
            lines.append(
                f"{row.deployment}: gateway {row.gateway.url}: {gateway_cell(row.gateway)}"
            )
    if load:
        lines.extend(load_lines(rows))
    for row in rows:  # what the running servers say of their memory (/v1/loads)
        for memory in row.state.memory_loads if row.state is not None else ():
            rank = f" DP{memory.dp_rank}" if memory.dp_rank is not None else ""
            lines.append(f"{row.deployment}{rank}: {memory_load_text(memory)}")
    for row in rows:  # a group's coordinator: every rank as it last heard, the last failure
        view = row.state.group if row.state is not None else None
        if view is None or row.rank != 0:
            continue
        ranks = ", ".join(
            f"r{m.rank} {m.state or '?'}" + ("" if m.connected else " (not connected)")
            for m in view.members
        )
        gate = ""
        if view.gate is not None:
            after = view.gate.activated_after_s
            gate = f"; gated launch {view.gate.status}" + (
                f" {after:.1f} s after the start" if after is not None else ""
            )
            if view.gate.missing and view.gate.status != "activated":
                gate += f" (ranks not at the gate: {', '.join(map(str, view.gate.missing))})"
        lines.append(f"{row.profile}: group start {view.generation}; {ranks}{gate}")
        if view.failure is not None:
            lost = view.failure
            lines.append(
                f"{row.profile}: last group failure: rank {lost.rank} ({lost.node}) "
                f"{lost.cls}: {lost.message}"
            )
    return "\n".join(lines)


def memory_load_text(load: MemoryLoad) -> str:
    def gib(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} GiB"

    tokens = f" ({load.token_capacity:,} tokens)" if load.token_capacity is not None else ""
    running = ""
    if load.max_running_requests is not None:
        running = f"; {load.running_requests or 0} of {load.max_running_requests} requests running"
    usage = f", KV in use {load.token_usage:.0%}" if load.token_usage is not None else ""
    return (
        f"memory: weights {gib(load.weight_gib)}, KV cache {gib(load.kv_cache_gib)}{tokens}, "
        f"CUDA graphs {gib(load.graph_gib)}{running}{usage}"
    )


def _unknown(row: StatusRow) -> str:
    """Why a row has no state: its host cannot be reached, or its profile is invalid."""
    if isinstance(row.error, TransportError):
        return "UNREACHABLE"
    if isinstance(row.error, ProfileError):
        return "INVALID"
    return "UNKNOWN"


def state_cell(state: RunState) -> str:
    """The state and what qualifies it: no supervisor, adopted, failing health checks."""
    shown = state.state or "?"
    if state.unsupervised:
        return f"{shown} (was {state.recorded_state}; no supervisor, output lost)"
    if state.stale:
        return f"{shown} (supervisor died; server gone)"
    notes = []
    if state.corrupt_state:
        notes.append("state.json corrupt")
    if state.adopted:
        notes.append("adopted" + ("; output lost" if state.output_lost else ""))
    if state.health_failures and state.state == READY:
        notes.append(f"health failed {state.health_failures}x")
    if state.gateway_error:
        notes.append(f"gateway: {state.gateway_error}")
    if state.disk_full:
        notes.append("disk full")
    if state.output_dropped_bytes:
        notes.append(f"{state.output_dropped_bytes:,} bytes of output dropped")
    return shown + (f" ({'; '.join(notes)})" if notes else "")
