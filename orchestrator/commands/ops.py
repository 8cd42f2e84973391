"""down and status: the deployment as it is on its host (its runs and logs: ``logs``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.commands import group, ownership
from orchestrator.commands.context import Context
from orchestrator.commands.events import Stopped, Stopping
from orchestrator.errors import OrchError, TransportError
from orchestrator.model import Profile, RunState


def down(
    ctx: Context, name: str, *, timeout_s: float | None = None, take_over: bool = False
) -> Iterator[Stopping | Stopped]:
    """Stop a profile's server: ``Stopping`` before the (blocking) stop, then ``Stopped``;
    nothing when nothing was running. ``timeout_s`` overrides the profile's ``stop_timeout_s``.
    A deployment launched from another profiles repository is refused unless ``take_over``.
    A launch group is stopped rank 0 first, then every other rank (``group.down``)."""
    launch = ctx.launch(name, require_secrets=False)
    if launch.is_group:
        yield from group.down(ctx, launch, timeout_s=timeout_s, take_over=take_over)
        return
    profile = launch.profile
    agent = ctx.agent(profile)
    current = agent.status()
    if not current.deployed or (not current.alive and not current.stale):
        return
    ownership.check(profile, current, ctx.origin(), "stop", take_over=take_over)
    timeout = profile.stop_timeout_s if timeout_s is None else timeout_s
    yield Stopping(name, current.pid, current.state, timeout)
    yield Stopped(name, agent.stop(timeout))


@dataclass(frozen=True)
class StatusRow:
    profile: str
    host: str
    state: RunState | None
    error: OrchError | None = None
    rank: int | None = None  # a launch group's rank; None for a single server


def status(ctx: Context, names: Sequence[str]) -> list[StatusRow]:
    """State of each profile's deployment (each rank of a group); hosts are asked in parallel,
    one connection each."""
    servers: list[tuple[Profile, int | None]] = []
    for name in names:
        launch = ctx.launch(name, require_secrets=False)
        servers += [(m.profile, m.rank if launch.is_group else None) for m in launch.members]
    by_host: dict[str, list[tuple[Profile, int | None]]] = {}
    for server in servers:
        by_host.setdefault(server[0].host.name, []).append(server)

    def ask(group: list[tuple[Profile, int | None]]) -> list[StatusRow]:
        rows: list[StatusRow] = []
        for profile, rank in group:
            try:
                state = ctx.agent(profile).status()
                rows.append(StatusRow(profile.name, profile.host.name, state, rank=rank))
            except TransportError as exc:  # the host is unreachable: so for all its profiles
                rows.extend(
                    StatusRow(p.name, p.host.name, None, exc, rank=r) for p, r in group[len(rows) :]
                )
                break
            except OrchError as exc:
                rows.append(StatusRow(profile.name, profile.host.name, None, exc, rank=rank))
        return rows

    with ThreadPoolExecutor(max_workers=min(16, max(len(by_host), 1))) as pool:
        results = list(pool.map(ask, by_host.values()))
    order = {name: index for index, name in enumerate(names)}
    return sorted(
        (row for rows in results for row in rows),
        key=lambda r: (order[r.profile], r.rank or 0),
    )
