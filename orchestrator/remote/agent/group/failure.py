"""Why a launch group's generation ended, or the group could not form (GroupFailure), and which
of several ranks' ends names it (decisive_failure)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..verdict import NCCL, ExitVerdict, Restart

# The group's own verdicts (not classify_exit's). Only the member lost and the gated launch's are
# restarted (by rank 0's policy and its start limit): a member never joining, a control port that
# cannot be bound, a coordinator that cannot be reached or that was lost end the group (or the
# rank) for good. The gate's: not every rank at the gate within gate.timeout_s of the
# generation's start (a node stuck before the rendezvous: NCCL, a slow load, a wrong address), or
# rank 0's gate server not answering its activation (its port held by another program).
GROUP_PORT_IN_USE = "group-control-port-in-use"
GROUP_PORT_UNAVAILABLE = "group-control-port-unavailable"
GROUP_NEVER_JOINED = "group-member-never-joined"
GROUP_MEMBER_LOST = "group-member-lost"
GROUP_COORDINATOR_UNREACHABLE = "group-coordinator-unreachable"
GROUP_COORDINATOR_LOST = "group-coordinator-lost"
GROUP_RENDEZVOUS_TIMEOUT = "group-rendezvous-timeout"
GROUP_GATE_UNREACHABLE = "group-gate-unreachable"


@dataclass(frozen=True)
class GroupFailure:
    """Why a generation of the group ended, or the group could not form: the rank it names and
    that rank's verdict; ``message`` names the rank (``rank 1 (node-b): killed by SIGKILL``)."""

    rank: int
    node: str
    cls: str
    message: str
    returncode: int | None  # the failed rank's (restart=on-failure looks at it)
    generation: int
    at: float  # monotonic: when the coordinator learnt of it
    restart: Restart | None = None  # the failed rank's restart verdict; None: its class's

    @property
    def verdict(self) -> ExitVerdict:
        return ExitVerdict(self.cls, self.message, self.restart)

    @property
    def deterministic(self) -> bool:
        return self.verdict.deterministic

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "cls": self.cls,
            "message": self.message,
            "returncode": self.returncode,
            "generation": self.generation,
            "restart_helps": self.verdict.restart_helps,
            "restart_why": self.verdict.restart_why,
        }


def decisive_failure(failures: Sequence[GroupFailure]) -> GroupFailure | None:
    """The failure that names a generation's end when several ranks ended together: a
    deterministic one first (the cause, as the others' collectives fail after it, and it must
    not be restarted), then any but an NCCL error or a lost connection (as often another rank's
    end as a cause), then the first the coordinator learnt of."""
    return min(
        failures,
        key=lambda f: (not f.deterministic, f.cls in (NCCL, GROUP_MEMBER_LOST), f.at),
        default=None,
    )
