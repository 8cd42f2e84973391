"""What ``orch sync`` (and ``orch status --all``'s SYNC column) read of the hosts: each host's
deployments and its SGLang, one ``agent survey`` per host (nothing written there), the hosts asked
in parallel."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.commands.context import Context
from orchestrator.commands.fanout import parallel
from orchestrator.errors import OrchError
from orchestrator.fleet.protocol.survey import HostSurvey
from orchestrator.model import Host

__all__ = ["HostSurvey", "Unreachable", "survey"]


@dataclass(frozen=True)
class Unreachable:
    """A host that could not be surveyed (not reached, or its workdir refused as unsafe): every
    deployment on it reads ``down`` with this."""

    host: str
    error: OrchError


def survey(ctx: Context, hosts: Sequence[Host]) -> dict[str, HostSurvey | Unreachable]:
    """Each host's survey by its name."""

    def one(host: Host) -> HostSurvey | Unreachable:
        try:
            return ctx.survey(host)
        except OrchError as exc:
            return Unreachable(host.name, exc)

    answers = parallel(one, list(hosts))
    return {host.name: answer for host, answer in zip(hosts, answers, strict=True)}
