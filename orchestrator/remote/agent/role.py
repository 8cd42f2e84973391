"""What a supervisor's role answers: one server alone (supervisor.Alone), or one rank of a launch
group (group.coordinator.Coordinator, group.member.Member)."""

from __future__ import annotations

from typing import Any, Protocol

from .output import OutputWatcher
from .verdict import ExitVerdict
from .world import ServerProcess


class Role(Protocol):
    """A supervisor's part: one server alone, or one rank of a launch group. The supervisor runs
    its server's lifecycle; the role runs the supervisor (``run``) and answers what only it knows
    while a server runs."""

    def run(self, adopted: ServerProcess | None) -> int:
        """Until stopped or final (``adopted``: a running server taken over, one alone only)."""

    def look(self, watcher: OutputWatcher | None) -> ExitVerdict | None:
        """At each look while the server runs: the group's business (its gated launch), and
        its reason to stop the server now, the group told (None: none)."""

    def ready_evidence(self, watcher: OutputWatcher | None) -> bool:
        """What READY needs besides /health (a group member's worker line)."""

    def why_stopped(self) -> str:
        """A stop request's verdict."""

    def stop_grace_s(self) -> float | None:
        """SIGTERM -> SIGKILL for this role's server (None: the spec's)."""

    def view(self) -> dict[str, Any] | None:
        """state.json's ``group`` (None: no group)."""
