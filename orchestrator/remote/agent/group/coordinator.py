"""Rank 0 of a launch group, its coordinator: it runs the group generation by generation. Every
member joined, ``start`` to each and its own server spawned; any rank's end stops every rank,
and rank 0's restart policy decides on the group; with SGLang's gated launch it activates the
gate once every global rank waits there (gate.py). Its end of the control channel is
coordinator_link.py's GroupCoordinator."""

from __future__ import annotations

from typing import Any

from ..output import OutputWatcher
from ..spec import GATE_RETRY_S, GateSpec, GroupSpec
from ..states import EXITED
from ..supervisor import Supervisor
from ..verdict import STOPPED, ExitVerdict
from ..world import ServerProcess
from .control import GROUP_REPLY_MARGIN_S
from .coordinator_link import GroupCoordinator, MemberSeen
from .failure import (
    GROUP_GATE_UNREACHABLE,
    GROUP_NEVER_JOINED,
    GROUP_RENDEZVOUS_TIMEOUT,
    GroupFailure,
    decisive_failure,
)
from .gate import GateProgress, open_gate, rendezvous_shortfall
from .rank import GroupRank


class Coordinator(GroupRank):
    """Rank 0's role (role.Role): the group's generations, its gate, its end."""

    def __init__(self, supervisor: Supervisor, group: GroupSpec) -> None:
        super().__init__(supervisor, group)
        self.link: GroupCoordinator | None = None  # once run() opened the control port
        self._interrupted_by: GroupFailure | None = None  # a member's end, this generation

    # -- what the supervisor asks while rank 0's server runs --

    def look(self, watcher: OutputWatcher | None) -> ExitVerdict | None:
        """The gate tended; a member's end this generation stops rank 0's server, the members
        told first: they stop while rank 0 drains (a broken group serves nothing)."""
        link = self.link
        if link is None:
            return None
        gate = self.group.gate
        if gate is not None and watcher is not None:
            self._tend_gate(self.group, gate, link, watcher)
        failure = decisive_failure(link.failures())
        if failure is None:
            return None
        self._interrupted_by = failure
        reason = f"group failure: {failure.verdict.message}"
        self.supervisor.update(message=f"{reason}: stopping every rank")
        link.stop_members(reason)
        self.supervisor.event("group-stop", generation=link.generation, reason=reason)
        return failure.verdict

    def ready_evidence(self, watcher: OutputWatcher | None) -> bool:
        return True

    def why_stopped(self) -> str:
        return "stopped on request"

    def stop_grace_s(self) -> float | None:
        return None

    def shown_generation(self) -> int:
        return 0 if self.link is None else self.link.generation

    def own_view(self) -> dict[str, Any]:
        """Where the control port is bound, the gate, each member as it last reported."""
        link, group = self.link, self.group
        view: dict[str, Any] = {"listening": None if link is None else link.listening}
        if group.gate is not None:
            view["gate"] = None if link is None else link.gate_view()
        if link is not None:
            view["members"] = link.view()
        else:
            view["members"] = {
                str(rank): MemberSeen(rank, group.nodes[rank]).view()
                for rank in range(1, group.nnodes)
            }
        return view

    # -- the gated launch --

    def _tend_gate(
        self,
        group: GroupSpec,
        gate: GateSpec,
        coordinator: GroupCoordinator,
        watcher: OutputWatcher,
    ) -> None:
        """While rank 0's server runs: every node's ranks at the gate gathered (its own from its
        log, the members' from their reports), the gate activated once all are there, the
        generation failed when they are not there gate.timeout_s after its start."""
        progress = coordinator.gate()
        if progress is None or progress.settled or coordinator.failures():
            return  # a rank's end stops the generation: its gate no longer matters
        if coordinator.note_gate(0, progress.generation, watcher.gate_waiting):
            progress = coordinator.gate() or progress
            self.show()
        now = self.supervisor.clock.monotonic()
        if progress.complete:
            self._open_gate(group, gate, coordinator, progress)
        elif now - progress.started > gate.timeout_s:
            rank, message = rendezvous_shortfall(progress, group)
            coordinator.gate_failed(
                GroupFailure(
                    rank,
                    group.nodes[rank],
                    GROUP_RENDEZVOUS_TIMEOUT,
                    message,
                    None,
                    progress.generation,
                    now,
                )
            )
            self.show()

    def _open_gate(
        self,
        group: GroupSpec,
        gate: GateSpec,
        coordinator: GroupCoordinator,
        progress: GateProgress,
    ) -> None:
        """Every rank is at the gate: POST the activation, once per generation (a few tries:
        rank 0's gate server starts in a thread as its ranks arrive). Not answered, it is the
        generation's failure."""
        supervisor = self.supervisor
        error = "not tried"
        for attempt in range(gate.attempts):
            if attempt and supervisor.clock.wait(supervisor.stop_requested, GATE_RETRY_S):
                return  # stopped meanwhile: the stop ends the generation
            error = open_gate(gate.url, gate.request_timeout_s) or ""
            if not error:
                break
        now = supervisor.clock.monotonic()
        if not error:
            after = now - progress.started
            coordinator.gate_activated(progress.generation, supervisor.clock.wall(), after)
            supervisor.event(
                "group-gate-activated",
                generation=progress.generation,
                url=gate.url,
                ranks=gate.world_size,
                elapsed_s=round(after, 3),
            )
            self.show()
            return
        tries = "1 attempt" if gate.attempts == 1 else f"{gate.attempts} attempts"
        message = (
            f"{group.name(0)}: could not activate the gated launch at {gate.url}: {error} "
            f"({tries}; another program may hold port {gate.port}, leaving SGLang's gate "
            "server unbound)"
        )
        coordinator.gate_failed(
            GroupFailure(
                0, group.nodes[0], GROUP_GATE_UNREACHABLE, message, None, progress.generation, now
            )
        )
        self.show()

    # -- the generations --

    def run(self, adopted: ServerProcess | None) -> int:
        """Rank 0: the control port first, then the group generation by generation: every
        member joined, ``start`` to each and its own server spawned; any rank's end stops every
        rank, and rank 0's restart policy decides on the group (see _coordinate_generations)."""
        supervisor = self.supervisor
        group = self.group
        coordinator = GroupCoordinator(
            group, supervisor.clock, on_change=self.show, on_event=supervisor.event
        )
        self.link = coordinator
        problem = coordinator.open()
        if problem is not None:
            cls, message = problem
            failure = GroupFailure(
                0, group.nodes[0], cls, message, None, 0, supervisor.clock.monotonic()
            )
            self.fail_for_good(failure)
            return 0
        self.show()  # where it listens
        try:
            return self._coordinate_generations(group, coordinator)
        finally:
            coordinator.close()

    def _coordinate_generations(self, group: GroupSpec, coordinator: GroupCoordinator) -> int:
        supervisor = self.supervisor
        reply_s = group.member_stop_grace_s + GROUP_REPLY_MARGIN_S
        consecutive_failures = 0
        while not supervisor.stop_requested.is_set():
            missing = self._await_members(group, coordinator)
            if supervisor.stop_requested.is_set():
                break
            if coordinator.left is not None:
                return self._end_as_a_member_left(coordinator, coordinator.left, reply_s)
            if missing:
                names = ", ".join(group.name(rank) for rank in missing)
                verb = "never joined" if coordinator.generation == 0 else "did not rejoin"
                message = (
                    f"{names} {verb} the group (control port {group.control_address}, "
                    f"{group.join_timeout_s:g} s)"
                )
                self.fail_for_good(
                    GroupFailure(
                        missing[0],
                        group.nodes[missing[0]],
                        GROUP_NEVER_JOINED,
                        message,
                        None,
                        coordinator.generation,
                        supervisor.clock.monotonic(),
                    )
                )
                coordinator.shutdown(message, reply_s)
                return 0
            self._interrupted_by = supervisor.exit_noticed = None
            generation = coordinator.begin()
            self.show()
            supervisor.event("group-start", generation=generation)
            supervisor.note_start()
            returncode, verdict, was_ready = supervisor.run_once()
            if supervisor.stop_requested.is_set():
                break
            failure = self._end_generation(group, coordinator, verdict, returncode)
            if supervisor.stop_requested.is_set():
                break
            if failure.cls == STOPPED:  # a member was stopped on request on its own node
                return self._end_as_a_member_left(coordinator, failure, reply_s)
            consecutive_failures = 1 if was_ready else consecutive_failures + 1
            delay = supervisor.apply_policy(
                failure.verdict,
                returncode if failure.returncode is None else failure.returncode,
                consecutive_failures,
                cause=f": {failure.message}",
            )
            if delay is None:  # FATAL or EXITED: the members have nothing left to do
                coordinator.shutdown(str(supervisor.record.message), reply_s)
                return 0
            if supervisor.clock.wait(supervisor.stop_requested, delay):
                break
            supervisor.update(restarts=supervisor.record.restarts + 1, next_start_at=None)
        # A stop request (orch down). Rank 0's server got its SIGTERM first (in its watch): SGLang's
        # rank 0 drains and broadcasts the shutdown to the other nodes; now their supervisors.
        supervisor.update(message="stopping: the members next")
        coordinator.shutdown(f"stopped on request on {group.name(0)}", reply_s)
        return supervisor.stopped()

    def _await_members(self, group: GroupSpec, coordinator: GroupCoordinator) -> list[int]:
        """Until every member is connected: [] then (or on a stop request, or when a member
        left), else the ranks still missing after join_timeout_s."""
        supervisor = self.supervisor
        deadline = supervisor.clock.monotonic() + group.join_timeout_s
        missing = coordinator.missing()
        if missing:
            names = ", ".join(group.name(rank) for rank in missing)
            supervisor.update(
                message=f"waiting for {names} to join the group "
                f"(control port {group.control_address})"
            )
        while missing and not supervisor.stop_requested.is_set() and coordinator.left is None:
            if supervisor.clock.monotonic() >= deadline:
                return missing
            supervisor.clock.wait(supervisor.stop_requested, 0.05)
            missing = coordinator.missing()
        return []

    def _end_generation(
        self,
        group: GroupSpec,
        coordinator: GroupCoordinator,
        verdict: ExitVerdict,
        returncode: int,
    ) -> GroupFailure:
        """After rank 0's run ended other than on request: every member stopped (bounded; one
        that does not confirm is dropped), then the failure that names the generation's end
        (decisive_failure of every rank's end learnt of meanwhile) recorded."""
        supervisor = self.supervisor
        generation = coordinator.generation
        own: list[GroupFailure] = []
        if self._interrupted_by is None:  # rank 0's own server ended, or could not start
            noticed = supervisor.exit_noticed
            if noticed is None:
                noticed = supervisor.clock.monotonic()
            own.append(
                GroupFailure(
                    0,
                    group.nodes[0],
                    verdict.cls,
                    f"{group.name(0)}: {verdict.message}",
                    returncode,
                    generation,
                    noticed,
                    verdict.judged,
                )
            )
            reason = f"group failure: {own[0].message}"
            supervisor.update(message=f"{reason}: stopping every member")
            coordinator.stop_members(reason)
            supervisor.event("group-stop", generation=generation, reason=reason)
        unconfirmed = coordinator.wait_stopped(
            group.member_stop_grace_s + GROUP_REPLY_MARGIN_S, supervisor.stop_requested
        )
        if unconfirmed and not supervisor.stop_requested.is_set():
            coordinator.drop(unconfirmed, "did not confirm its stop in time")
        failure = decisive_failure(coordinator.failures() + own)
        assert failure is not None  # noqa: S101 - rank 0's own end, or the member's that stopped it
        coordinator.finish()
        self.failure = failure
        last_exit = supervisor.record.last_exit
        if failure.rank != 0 and isinstance(last_exit, dict):
            # rank 0's run ended for the failed rank: its verdict is that rank's
            supervisor.update(
                last_exit=dict(
                    last_exit,
                    **{"class": failure.cls, "message": failure.message},
                    restart_helps=failure.verdict.restart_helps,
                    restart_why=failure.verdict.restart_why,
                )
            )
        self.show()
        supervisor.event("group-failure", **failure.as_dict())
        return failure

    def _end_as_a_member_left(
        self, coordinator: GroupCoordinator, failure: GroupFailure, reply_s: float
    ) -> int:
        """A member was stopped on request on its own node (not through rank 0): the group
        cannot run without it, and somebody is taking it down. EXITED, not restarted."""
        message = f"{failure.message}: stopped the group"
        self.failure = failure
        coordinator.shutdown(message, reply_s)
        self.supervisor.change_state(
            EXITED,
            pid=None,
            pgid=None,
            message=message,
            next_start_at=None,
            group=self.view(),
        )
        self.supervisor.event("stopped", reason=message)
        return 0

    # -- a member (rank >= 1) --
