"""A rank >= 1 of a launch group, a member: it joins the coordinator, then starts and stops its
server when the coordinator says so, reports each end, and never restarts on its own. Its
coordinator's shutdown, its loss, or a stop request end it (EXITED), the server stopped. Its end
of the control channel is member_link.py's GroupMemberLink."""

from __future__ import annotations

from typing import Any

from ..output import OutputWatcher
from ..record import AgentState
from ..spec import GroupSpec
from ..states import BACKOFF, EXITED
from ..supervisor import Supervisor
from ..verdict import STOPPED, ExitVerdict
from ..world import ServerProcess
from .control import GROUP_TEXT_MAX
from .failure import GROUP_COORDINATOR_LOST, GROUP_COORDINATOR_UNREACHABLE, GroupFailure
from .member_link import GroupMemberLink
from .rank import GroupRank


class Member(GroupRank):
    """A member's role (role.Role): the coordinator's commands, its gate reports, its end."""

    def __init__(self, supervisor: Supervisor, group: GroupSpec) -> None:
        super().__init__(supervisor, group)
        self.link: GroupMemberLink | None = None  # once run() began to reach the coordinator
        self.generation = 0  # the generation its server runs (or ran) for
        self._stop: dict[str, Any] | None = None  # the coordinator's stop that ended its run
        # Its gated launch in its server of this generation: (ranks at the gate, a rank logged
        # it passed), as last reported to the coordinator.
        self._gate_seen: tuple[frozenset[int], bool] = (frozenset(), False)

    # -- what the supervisor asks while its server runs --

    def look(self, watcher: OutputWatcher | None) -> ExitVerdict | None:
        """Its node's ranks at the gate reported; the coordinator's stop of this generation (or
        the start of a newer one, this one's stop lost) stops the server: not a stop request
        (no STOPPING), the rank starts again with the group's next generation."""
        link = self.link
        if link is None:
            return None
        self._tend_gate(link, watcher)
        command = link.interrupting(self.generation)
        if command is None:
            return None
        if command["type"] == "stop":
            why = command["reason"] or "the group stopped"
        else:  # a newer generation started: this one ended while its stop was lost
            why = f"generation {command['generation']} started"
        self._stop = {"generation": self.generation, "reason": why}
        verdict = ExitVerdict(
            STOPPED, f"stopped by the group coordinator (generation {self.generation}): {why}"
        )
        self.supervisor.update(message=f"{verdict.message}: stopping it")
        self.supervisor.event("group-stop", generation=self.generation, reason=verdict.message)
        return verdict

    def ready_evidence(self, watcher: OutputWatcher | None) -> bool:
        """READY's extra evidence on a group member: SGLang's worker line. Its /health is a dummy
        that answers 200 whatever its schedulers do (ROUND2-FACTS §1.5)."""
        return watcher is not None and watcher.saw_worker_line

    def why_stopped(self) -> str:
        """A member's stop comes from its coordinator (or its loss), or from its own node."""
        end = None if self.link is None else self.link.end
        if end is None:
            return "stopped on request"
        if end[0] == "shutdown":
            return f"stopped: the group coordinator shut the group down ({end[1]})"
        return f"stopped: {self.group.coordinator} was lost ({end[1]})"

    def stop_grace_s(self) -> float | None:
        return self.group.member_stop_grace_s

    def shown_generation(self) -> int:
        return self.generation

    def own_view(self) -> dict[str, Any]:
        """Its own node's ranks at the gate, and its coordinator."""
        group, link = self.group, self.link
        view: dict[str, Any] = {}
        if group.gate is not None:
            view["gate"] = {
                "generation": self.generation,
                "ranks": list(group.gate.node_ranks[group.rank]),
                "waiting": sorted(self._gate_seen[0]),
                "activated": self._gate_seen[1],
            }
        view["coordinator"] = {
            "rank": 0,
            "node": group.nodes[0],
            "connected": link is not None and link.connected,
        }
        return view

    def _tend_gate(self, link: GroupMemberLink, watcher: OutputWatcher | None) -> None:
        """The ranks of its node at the gate, to the coordinator as they arrive."""
        gate = self.group.gate
        if gate is None or watcher is None:
            return
        seen = (watcher.gate_waiting, watcher.gate_activated)
        if seen == self._gate_seen:
            return
        if seen[0] != self._gate_seen[0]:
            ranks = sorted(rank for rank in seen[0] if rank < gate.world_size)
            link.send("gate", generation=self.generation, ranks=ranks)
        self._gate_seen = seen
        self.show()

    # -- the coordinator's commands --

    def run(self, adopted: ServerProcess | None) -> int:
        """Join the coordinator, then start and stop the server when it says so; report each
        end, never restart on its own."""
        group, supervisor = self.group, self.supervisor
        link = GroupMemberLink(group, supervisor.clock, supervisor.stop_requested)
        self.link = link
        supervisor.journal.on_write = self._report
        coordinator = f"{group.coordinator} at {group.control_address}"
        supervisor.update(message=f"joining the group: reaching {coordinator}")
        try:
            problem = link.connect()
            if problem is not None:
                failure = GroupFailure(
                    0,
                    group.nodes[0],
                    GROUP_COORDINATOR_UNREACHABLE,
                    problem,
                    None,
                    0,
                    supervisor.clock.monotonic(),
                )
                self.fail_for_good(failure)
                return 0
            if link.connected:
                supervisor.event("group-join", rank=group.rank, node=group.nodes[group.rank])
                supervisor.update(
                    message=f"joined the group: waiting for {coordinator} to start it",
                    group=self.view(),
                )
            while not supervisor.stop_requested.is_set():
                command = link.next_command(0.1)
                if command is None:
                    continue
                generation = command["generation"]
                if command["type"] == "stop":  # nothing runs: it ended already, or never began
                    link.send("stopped", generation=generation, run_id=supervisor.record.run_id)
                elif generation > self.generation:  # older ones were in flight as they ended
                    self._run_generation(link, generation)
            return self._end(link)
        finally:
            link.close()

    def _report(self, record: AgentState) -> None:
        """Each state.json written: this rank's state to the coordinator, when it changed."""
        if self.link is not None:
            self.link.report(record, self.generation)

    def _run_generation(self, link: GroupMemberLink, generation: int) -> None:
        supervisor = self.supervisor
        if self.generation:
            supervisor.update(restarts=supervisor.record.restarts + 1)
        self.generation = generation
        self._gate_seen = (frozenset(), False)
        self._take_stop()  # a stop of an earlier generation's is no stop of this one
        self.show()
        supervisor.event("group-start", generation=generation)
        returncode, verdict, _ = supervisor.run_once()
        if supervisor.stop_requested.is_set():
            return
        run_id = supervisor.record.run_id
        if self._take_stop() is not None:
            link.send("stopped", generation=generation, run_id=run_id)
            message = f"stopped by the group (generation {generation}): waiting for the next start"
        else:
            link.send(
                "exited",
                generation=generation,
                run_id=run_id,
                cls=verdict.cls,
                message=verdict.message[:GROUP_TEXT_MAX],
                returncode=returncode,
                restart_helps=verdict.restart_helps,
                restart_why=verdict.restart_why[:GROUP_TEXT_MAX],
            )
            message = f"exited ({verdict.cls}): waiting for the group coordinator"
        if supervisor.record.state == BACKOFF:  # a spawn that failed leaves it there
            supervisor.update(message=message, next_start_at=None)
        else:
            supervisor.change_state(BACKOFF, message=message, next_start_at=None)

    def _take_stop(self) -> dict[str, Any] | None:
        """The coordinator's stop that ended this member's run (``look``), once."""
        stop, self._stop = self._stop, None
        return stop

    def _end(self, link: GroupMemberLink) -> int:
        group, supervisor = self.group, self.supervisor
        end = link.end
        if end is None:  # a stop request on this node: the coordinator learns it, and stops
            link.send("leaving", reason="stopped on request on its node")
            message = "stopped"
        elif end[0] == "shutdown":
            message = f"stopped: the group coordinator shut the group down ({end[1]})"
        else:
            # A rank without its group is useless and holds its GPUs (NCCL would hang).
            message = f"{group.coordinator} was lost ({end[1]}): stopped this rank"
            self.failure = GroupFailure(
                0,
                group.nodes[0],
                GROUP_COORDINATOR_LOST,
                message,
                None,
                self.generation,
                supervisor.clock.monotonic(),
            )
            supervisor.event("group-coordinator-lost", reason=end[1])
        supervisor.change_state(
            EXITED, pid=None, pgid=None, message=message, next_start_at=None, group=self.view()
        )
        supervisor.event("stopped", reason=message)
        if end is not None and end[0] == "shutdown":
            link.send("shutdown-done")  # after EXITED (reported): the coordinator may end now
        link.close()
        self.show()
        return 0
