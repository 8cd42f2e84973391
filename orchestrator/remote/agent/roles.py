"""A supervisor for a run spec, in its role: one server alone, or one rank of a launch group
(rank 0 coordinates, the others are members)."""

from __future__ import annotations

from .files import Paths
from .group.coordinator import Coordinator
from .group.member import Member
from .spec import Spec
from .supervisor import Supervisor
from .world import Clock, World


def supervisor_for(
    spec: Spec, paths: Paths, *, clock: Clock | None = None, world: World | None = None
) -> Supervisor:
    supervisor = Supervisor(spec, paths, clock=clock, world=world)
    group = spec.group
    if group is not None:
        role = Coordinator(supervisor, group) if group.is_coordinator else Member(supervisor, group)
        supervisor.take_role(role)
    return supervisor
