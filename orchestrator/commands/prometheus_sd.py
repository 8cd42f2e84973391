"""``orch export prometheus-sd``: the servers of the chosen profiles that run READY now, found with
one ``agent survey`` per host (``sync_read``: nothing written there, hosts asked in parallel),
turned into a Prometheus file_sd document (``export.prometheus``). A deployment that is not READY
(stopped, starting, failed, on a host that cannot be reached) is left out, so a re-export after
``orch down`` drops its target; an unreachable host is a note, not a failure."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.commands import sync_read
from orchestrator.commands.context import Context, Member
from orchestrator.errors import OrchError
from orchestrator.export.prometheus import (
    GatewayTarget,
    RunningServer,
    ServiceDiscovery,
    service_discovery,
)
from orchestrator.model import RunState
from orchestrator.remote.agent.states import READY


@dataclass(frozen=True)
class Request:
    names: tuple[str, ...]  # empty: every profile (``--all``)


def export(ctx: Context, request: Request) -> ServiceDiscovery:
    """The file_sd document of every READY server of the profiles asked for."""
    listing = not request.names
    names = ctx.store.names() if listing else list(request.names)
    notes: list[str] = []
    members: list[tuple[Member, int | None]] = []
    gateways: list[GatewayTarget] = []
    for name in names:
        try:
            launch = ctx.launch(name, require_secrets=False)
        except OrchError as exc:
            if not listing:
                raise  # a profile asked for by name that cannot be read is the command's error
            notes.append(f"{name}: left out: {exc.message}")
            continue
        if launch.profile.abstract:
            continue
        router = launch.profile.router
        if router is not None:
            gateways.append(GatewayTarget(name, router.url, router.metrics_url))
        for one in launch.replicas or (launch,):
            members += [(m, m.rank if one.is_group else None) for m in one.members]
    hosts = list({m.host.name: m.host for m, _ in members}.values())
    surveyed = sync_read.survey(ctx, hosts)
    for host, answer in sorted(surveyed.items()):
        if isinstance(answer, sync_read.Unreachable):
            notes.append(f"{host} not surveyed: {answer.error.message}")
    servers = []
    for member, rank in members:
        surveyed_host = surveyed.get(member.host.name)
        if not isinstance(surveyed_host, sync_read.HostSurvey):
            continue
        deployments = surveyed_host.deployments
        state = deployments.get(member.profile.deployment, RunState(deployed=False))
        if not _ready(state):
            continue
        servers.append(_running(member, rank, state, surveyed_host.sglang_version))
    found = service_discovery(servers, gateways)
    return ServiceDiscovery(found.groups, found.text, (*notes, *found.notes))


def _ready(state: RunState) -> bool:
    """Serving now: READY under a live supervisor (an orphaned server still serving is READY in
    its last record too, but its supervisor is gone: ``status`` says so; it is left out)."""
    return state.deployed and state.agent_alive and state.state == READY


def _running(
    member: Member, rank: int | None, state: RunState, host_sglang: str | None
) -> RunningServer:
    profile = member.profile
    argv = member.command.argv
    return RunningServer(
        profile=profile.name,
        deployment=profile.deployment,
        rank=rank,
        replica=profile.replica,
        host=profile.host.name,
        address=profile.host.address,
        bind=profile.bind,
        port=state.port if state.port is not None else profile.port,
        commit=state.git_commit,
        sglang_version=host_sglang or profile.sglang_version,
        metrics="--enable-metrics" in argv,
        all_schedulers="--enable-metrics-for-all-schedulers" in argv,
    )
