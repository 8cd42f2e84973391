"""down and status: the deployment as it is on its host (its runs and logs: ``logs``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from orchestrator.commands import group, ownership, replicas, routing
from orchestrator.commands.context import Context, Launch
from orchestrator.commands.events import Stopped, Stopping
from orchestrator.commands.fanout import parallel
from orchestrator.commands.routing import Routed
from orchestrator.errors import OrchError, TransportError
from orchestrator.fleet.gateway import normal_url
from orchestrator.model import Profile, RunState, deployment_name
from orchestrator.sglang.loads import Cap, concurrency_cap, launch_facts, totals


def down(
    ctx: Context,
    name: str,
    *,
    timeout_s: float | None = None,
    take_over: bool = False,
    replica: int | None = None,
) -> Iterator[Stopping | Stopped | Routed]:
    """Stop a profile's server: ``Stopping`` before the (blocking) stop, then ``Stopped``;
    nothing when nothing was running. ``timeout_s`` overrides the profile's ``stop_timeout_s``.
    A deployment launched from another profiles repository is refused unless ``take_over``.
    A launch group is stopped rank 0 first, then every other rank (``group.down``). Replicas
    (every one, or ``replica``) are stopped all at once, each ``Stopping`` said before."""
    launch = ctx.launch(name, require_secrets=False)
    if launch.replicas or replica is not None:
        yield from _down_replicas(
            ctx, replicas.chosen(launch, replica), timeout_s=timeout_s, take_over=take_over
        )
        return
    if launch.is_group:
        yield from group.down(ctx, launch, timeout_s=timeout_s, take_over=take_over)
        return
    profile = launch.profile
    agent = ctx.agent(profile)
    current = agent.status()
    if not current.deployed or (not current.alive and not current.stale):
        return
    ownership.check(profile, current, ctx.origin(), "stop", take_over=take_over)
    if profile.router is not None:  # out of the gateway, then idle, then the stop
        yield from _out_of_gateway(ctx, [launch])
    timeout = profile.stop_timeout_s if timeout_s is None else timeout_s
    yield Stopping(name, current.pid, current.state, timeout)
    yield Stopped(name, agent.stop(timeout))


def _out_of_gateway(ctx: Context, launches: Sequence[Launch]) -> Iterator[Routed]:
    """Each server out of its gateway (all at once), then each idle, bounded by its
    ``router.drain_timeout_s``: before any of them is stopped."""
    behind = [launch for launch in launches if launch.profile.router is not None]
    if not behind:
        return
    for routed in parallel(
        lambda launch: routing.deregister(ctx, launch.profile, stopping=True), behind
    ):
        if routed is not None:
            yield routed

    def idle(launch: Launch) -> Routed:
        router = launch.profile.router
        return routing.wait_idle(ctx, launch, router.drain_timeout_s if router else 0.0)

    yield from parallel(idle, behind)


def _down_replicas(
    ctx: Context, launches: Sequence[Launch], *, timeout_s: float | None, take_over: bool
) -> Iterator[Stopping | Stopped | Routed]:
    """Every replica's state first (each checked as ours before any is stopped), then the
    stops at once."""

    def current(launch: Launch) -> RunState:
        return ctx.agent(launch.profile).status()

    states = parallel(current, launches)
    running: list[tuple[Profile, float]] = []
    leaving: list[Launch] = []
    stopping: list[Stopping] = []
    for launch, state in zip(launches, states, strict=True):
        if not state.deployed or (not state.alive and not state.stale):
            continue
        profile = launch.profile
        ownership.check(profile, state, ctx.origin(), "stop", take_over=take_over)
        timeout = profile.stop_timeout_s if timeout_s is None else timeout_s
        stopping.append(Stopping(profile.deployment, state.pid, state.state, timeout))
        running.append((profile, timeout))
        leaving.append(launch)
    yield from _out_of_gateway(ctx, leaving)
    yield from stopping

    def stop(item: tuple[Profile, float]) -> Stopped:
        profile, timeout = item
        return Stopped(profile.deployment, ctx.agent(profile).stop(timeout))

    yield from parallel(stop, running)


@dataclass(frozen=True)
class GatewayView:
    """A server as its gateway (``router:``) sees it, beside what its agent says."""

    url: str  # the gateway's
    registered: bool
    status: str | None = None  # smg: pending, ready, not_ready, draining, failed
    ready: bool = False
    healthy: bool | None = None
    load: int | None = None  # requests the gateway has in flight to it
    circuit: str | None = None
    error: str | None = None  # the gateway could not be asked (a warning, never a failure)


@dataclass(frozen=True)
class StatusRow:
    profile: str
    host: str
    state: RunState | None
    error: OrchError | None = None
    rank: int | None = None  # a launch group's rank; None for a single server
    replica: int | None = None  # the replica (``replicas:``); None for a profile without
    gateway: GatewayView | None = None  # a server behind a router: the gateway's view
    cap: Cap | None = None  # what decides its max_running_requests (from its load's figures)

    @property
    def deployment(self) -> str:
        """The profile, or ``NAME@I`` for a replica (its deployment on the host)."""
        return deployment_name(self.profile, self.replica)


def status(ctx: Context, names: Sequence[str], *, load: bool = False) -> list[StatusRow]:
    """State of each profile's deployment (each rank of a group); hosts are asked in parallel,
    one connection each. ``load``: each READY server's /v1/loads read now, by its agent in the
    same command (a loopback call on the host); without it, the last figures its supervisor
    kept."""
    servers: list[tuple[Profile, int | None]] = []
    argvs: dict[tuple[str, int | None, int | None], tuple[str, ...]] = {}
    for name in names:
        launch = ctx.launch(name, require_secrets=False)
        for one in launch.replicas or (launch,):  # each replica is a deployment of its own
            for m in one.members:
                rank = m.rank if one.is_group else None
                servers.append((m.profile, rank))
                argvs[(m.profile.name, m.profile.replica, rank)] = m.argv
    by_host: dict[str, list[tuple[Profile, int | None]]] = {}
    for server in servers:
        by_host.setdefault(server[0].host.name, []).append(server)

    def row(
        profile: Profile, rank: int | None, state: RunState | None, error: OrchError | None = None
    ) -> StatusRow:
        where = (profile.name, profile.host.name)
        cap = None
        if state is not None and state.load is not None and state.load.ranks:
            argv = argvs.get((profile.name, profile.replica, rank), ())
            cap = concurrency_cap(
                totals(state.load.ranks).max_running_requests,
                state.load.ranks[0].token_capacity,
                launch_facts(argv),
                version=state.load.version,
                planned=state.planned_requests,
                planned_by=state.planned_requests_by,
            )
        return StatusRow(*where, state, error, rank=rank, replica=profile.replica, cap=cap)

    def ask(group: list[tuple[Profile, int | None]]) -> list[StatusRow]:
        rows: list[StatusRow] = []
        for profile, rank in group:
            try:
                rows.append(row(profile, rank, ctx.agent(profile).status(load=load)))
            except TransportError as exc:  # the host is unreachable: so for all its profiles
                rows.extend(row(p, r, None, exc) for p, r in group[len(rows) :])
                break
            except OrchError as exc:
                rows.append(row(profile, rank, None, exc))
        return rows

    with ThreadPoolExecutor(max_workers=min(16, max(len(by_host), 1))) as pool:
        results = list(pool.map(ask, by_host.values()))
    order = {name: index for index, name in enumerate(names)}
    rows = sorted(
        (row for rows in results for row in rows),
        key=lambda r: (order[r.profile], r.replica or 0, r.rank or 0),
    )
    views = _gateway_views(ctx, [profile for profile, rank in servers if not rank])
    return [
        dataclasses.replace(row, gateway=views.get((row.profile, row.replica)))
        if row.rank in (None, 0)
        else row
        for row in rows
    ]


def _gateway_views(
    ctx: Context, profiles: Sequence[Profile]
) -> dict[tuple[str, int | None], GatewayView]:
    """Each server behind a router, as its gateway lists it: one ``GET /workers`` per gateway.
    A gateway that cannot be asked is said on each of its rows, never an error of status."""
    behind: dict[str, list[Profile]] = {}
    for profile in profiles:
        if profile.router is not None:
            behind.setdefault(profile.router.url, []).append(profile)
    views: dict[tuple[str, int | None], GatewayView] = {}
    for url, served in behind.items():
        try:
            client = routing.gateway_for(ctx, served[0])
            assert client is not None  # noqa: S101 - a profile behind a router
            workers = {normal_url(w.url): w for w in client.workers()}
        except OrchError as exc:
            for profile in served:
                views[(profile.name, profile.replica)] = GatewayView(url, False, error=exc.message)
            continue
        for profile in served:
            worker = workers.get(normal_url(routing.worker_url(profile)))
            views[(profile.name, profile.replica)] = (
                GatewayView(url, False)
                if worker is None
                else GatewayView(
                    url,
                    True,
                    worker.status,
                    worker.ready,
                    worker.healthy,
                    worker.load,
                    worker.circuit,
                )
            )
    return views
