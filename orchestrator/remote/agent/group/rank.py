"""What both roles of a launch group's rank share (coordinator.py, member.py): the group as
state.json shows it, the failure that ended its last generation, and the end of a rank that
cannot form or reach its group."""

from __future__ import annotations

from typing import Any

from ..spec import GroupSpec
from ..states import FATAL
from ..supervisor import Supervisor
from .failure import GroupFailure


class GroupRank:
    """One rank's part in a launch group: the supervisor it runs, and what it shows."""

    def __init__(self, supervisor: Supervisor, group: GroupSpec) -> None:
        self.supervisor = supervisor
        self.group = group
        self.failure: GroupFailure | None = None  # what ended the last generation: shown

    def view(self) -> dict[str, Any] | None:
        """state.json's ``group``: this rank, the generation, the failure that ended the last
        one, and what the role adds (its members, or its coordinator)."""
        group = self.group
        view: dict[str, Any] = {
            "id": group.group_id,
            "rank": group.rank,
            "nnodes": group.nnodes,
            "node": group.nodes[group.rank],
            "nodes": list(group.nodes),
            "role": "coordinator" if group.is_coordinator else "member",
            "control": group.control_address,
            "generation": self.shown_generation(),
            "failure": None if self.failure is None else self.failure.as_dict(),
        }
        view.update(self.own_view())
        return view

    def shown_generation(self) -> int:
        raise NotImplementedError

    def own_view(self) -> dict[str, Any]:
        raise NotImplementedError

    def show(self) -> None:
        self.supervisor.update(group=self.view())

    def fail_for_good(self, failure: GroupFailure) -> None:
        """The group cannot form (or this rank cannot reach it): FATAL, never restarted."""
        self.failure = failure
        self.supervisor.change_state(
            FATAL, message=failure.message, next_start_at=None, group=self.view()
        )
        self.supervisor.event("group-failure", **failure.as_dict())
        self.supervisor.event("fatal", reason=failure.cls)
