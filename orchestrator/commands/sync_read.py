"""What ``orch sync`` reads of the hosts: each host's deployments and its SGLang, in ONE function
(``survey``), so that the agent's one-command survey replaces the stand-in below without touching
the rest of sync.

STAND-IN until the SURVEY branch lands: one ``ctx.agent(p).status()`` per known deployment, the
deployments of a host asked one after another and the hosts in parallel, returned in exactly the
shape of ``fleet.protocol.survey.HostSurvey`` (31-shared.md). It cannot list the directories no
profile names (no ``unmanaged``) nor the host's SGLang version (no ``version-skew``). The
integrator swaps its body for ``ctx.survey(host)`` per host and imports ``HostSurvey`` from
``fleet.protocol.survey``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator.commands.context import Context
from orchestrator.commands.fanout import parallel
from orchestrator.errors import OrchError, TransportError
from orchestrator.model import Host, Profile, RunState, frozen_map


@dataclass(frozen=True)
class HostSurvey:
    """The shape of ``fleet.protocol.survey.HostSurvey`` (the SURVEY branch's)."""

    host: str  # the hosts.yaml name
    workdir: str
    sglang_version: str | None  # None: absent, or (this stand-in) not asked
    deployments: Mapping[str, RunState]  # deployment dir (NAME, NAME@I) -> its state
    unreadable: Mapping[str, str] = field(default_factory=frozen_map)  # dir -> why


@dataclass(frozen=True)
class Unreachable:
    """A host that could not be surveyed: every deployment on it reads ``down`` with this."""

    host: str
    error: OrchError


def survey(
    ctx: Context, hosts: Sequence[Host], expected: Sequence[Profile]
) -> dict[str, HostSurvey | Unreachable]:
    """Each host's survey by its name. ``expected``: the deployments orch knows of (one profile
    each: a group's rank, a replica); only this stand-in reads it, the real survey lists the
    host's workdir."""
    by_host: dict[str, list[Profile]] = {host.name: [] for host in hosts}
    for profile in expected:
        by_host.setdefault(profile.host.name, []).append(profile)

    def one(host: Host) -> HostSurvey | Unreachable:
        states: dict[str, RunState] = {}
        unreadable: dict[str, str] = {}
        for profile in by_host.get(host.name, []):
            try:
                states[profile.deployment] = ctx.agent(profile).status()
            except TransportError as exc:  # the host: so for all its deployments
                return Unreachable(host.name, exc)
            except OrchError as exc:
                unreadable[profile.deployment] = exc.message
        return HostSurvey(host.name, host.workdir, None, frozen_map(states), frozen_map(unreadable))

    answers = parallel(one, list(hosts))
    return {host.name: answer for host, answer in zip(hosts, answers, strict=True)}
