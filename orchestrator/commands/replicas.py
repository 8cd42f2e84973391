"""Which of a profile's ``replicas:`` a command walks: each replica is its own launch and
deployment (``NAME@I``); ``--replica I`` picks one. ``up.up_replicas`` starts them at once,
``ops.down`` stops them at once, ``ops.status`` asks each."""

from __future__ import annotations

from orchestrator.commands.context import Launch
from orchestrator.errors import UsageError

REPLICA_OPTION = "--replica"


def chosen(launch: Launch, replica: int | None) -> tuple[Launch, ...]:
    """The launches a command walks: every replica's (``replica`` None), one replica's, or
    the profile's own when it has no replicas."""
    name = launch.profile.name
    if not launch.replicas:
        if replica is not None:
            raise UsageError(
                f"{REPLICA_OPTION} {replica}: {name} has no replicas", f"leave {REPLICA_OPTION} out"
            )
        return (launch,)
    if replica is None:
        return launch.replicas
    if not 0 <= replica < len(launch.replicas):
        raise UsageError(
            f"{REPLICA_OPTION} {replica}: {name} has replicas 0-{len(launch.replicas) - 1}",
            "a replica's index in `replicas:`",
        )
    return (launch.replicas[replica],)


def one(launch: Launch, replica: int | None) -> Launch:
    """The one launch a command about one server reads (logs, runs): the profile's, or the
    replica ``replica``'s, which a profile with replicas must be told."""
    if launch.replicas and replica is None:
        name = launch.profile.name
        raise UsageError(
            f"{name} has {len(launch.replicas)} replicas: which one?",
            f"{REPLICA_OPTION} I, I in 0-{len(launch.replicas) - 1}",
        )
    return chosen(launch, replica)[0]
