"""down, status, logs: the deployment as it is on its host."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.commands.context import Context
from orchestrator.errors import NotDeployed, OrchError, TransportError
from orchestrator.model import Profile, RunState
from orchestrator.protocol import StopReply

LOG_FOLLOW_POLL_S = 0.25


def down(ctx: Context, name: str) -> StopReply | None:
    """Stop a profile's server; None when nothing was running."""
    profile = ctx.launch(name, require_secrets=False).profile
    agent = ctx.agent(profile)
    current = agent.status()
    if not current.deployed or (not current.alive and not current.stale):
        return None
    return agent.stop(profile.stop_timeout_s)


@dataclass(frozen=True)
class StatusRow:
    profile: str
    host: str
    state: RunState | None
    error: OrchError | None = None


def status(ctx: Context, names: Sequence[str]) -> list[StatusRow]:
    """State of each profile's deployment; hosts are asked in parallel, one connection each."""
    profiles = [ctx.launch(name, require_secrets=False).profile for name in names]
    by_host: dict[str, list[Profile]] = {}
    for profile in profiles:
        by_host.setdefault(profile.host.name, []).append(profile)

    def ask(group: list[Profile]) -> list[StatusRow]:
        rows: list[StatusRow] = []
        for profile in group:
            try:
                rows.append(StatusRow(profile.name, profile.host.name, ctx.agent(profile).status()))
            except TransportError as exc:  # the host is unreachable: so for all its profiles
                rows.extend(StatusRow(p.name, p.host.name, None, exc) for p in group[len(rows) :])
                break
            except OrchError as exc:
                rows.append(StatusRow(profile.name, profile.host.name, None, exc))
        return rows

    with ThreadPoolExecutor(max_workers=min(16, max(len(by_host), 1))) as pool:
        results = list(pool.map(ask, by_host.values()))
    order = {name: index for index, name in enumerate(names)}
    return sorted((row for rows in results for row in rows), key=lambda r: order[r.profile])


@dataclass(frozen=True)
class LogChunk:
    text: str
    run_id: str
    path: str


def logs(
    ctx: Context, name: str, *, run_id: str | None, follow_log: bool, lines: int,
) -> Iterator[LogChunk]:  # fmt: skip
    """The last ``lines`` of a run's log, then (``follow_log``) what is appended to it.
    Reads only what it shows, from an offset, whatever the log's size."""
    profile = ctx.launch(name, require_secrets=False).profile
    agent = ctx.agent(profile)
    transport = agent.transport
    if run_id is None:
        current = agent.read_state()
        run_id = current.run_id if current else None
    if run_id is None:  # no state yet: the newest run on disk
        runs = agent.runs()
        if not runs:
            raise NotDeployed(f"{name} has no runs on {profile.host.name}", f"orch up {name}")
        run_id = runs[-1].run_id
    path = agent.deployment.run_log(run_id)
    size = transport.size(path)
    if size is None:
        known = ", ".join(run.run_id for run in agent.runs()[-5:])
        raise NotDeployed(f"no log for run {run_id} of {name}", f"recent runs: {known or 'none'}")
    window = max(lines, 1) * 512
    start = max(size - window, 0)
    data = transport.read(path, start, size - start)
    text = data.decode("utf-8", "replace")
    if start > 0:
        text = text.split("\n", 1)[1] if "\n" in text else ""
    shown = text.splitlines(keepends=True)[-lines:] if lines else []
    yield LogChunk("".join(shown), run_id, path)
    offset = size
    while follow_log:
        now_size = transport.size(path)
        if now_size is not None and now_size < offset:
            offset = 0  # rotated: the new file starts over
        if now_size is not None and now_size > offset:
            data = transport.read(path, offset, now_size - offset)
            offset += len(data)
            yield LogChunk(data.decode("utf-8", "replace"), run_id, path)
        else:
            ctx.sleep(LOG_FOLLOW_POLL_S)
