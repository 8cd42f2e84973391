"""Rank 0's end of the control channel (control.py): it listens on the group's control port,
admits each member that proves it holds the key, and keeps what each one says, for the
coordinating supervisor (coordinator.py)."""

from __future__ import annotations

import contextlib
import errno
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import selectors
    import socket

from ..spec import WILDCARDS, GroupSpec, host_port, is_ip_address
from ..verdict import CRASHED, LOST_RETURNCODE, STOPPED, Restart
from ..world import Clock
from .control import (
    GROUP_HANDSHAKE_S,
    GROUP_PENDING_MAX,
    GROUP_PENDING_PER_SOURCE,
    GROUP_REFUSED_EVENTS_MAX,
    GROUP_TEXT_MAX,
    ControlLink,
    LinkBroken,
    admit_hello,
    challenge_member,
    integer,
    short_text,
)
from .failure import (
    GROUP_MEMBER_LOST,
    GROUP_PORT_IN_USE,
    GROUP_PORT_UNAVAILABLE,
    GroupFailure,
)
from .gate import GateProgress


@dataclass
class MemberSeen:
    """What the coordinator knows of one member, updated as its messages arrive (under the
    coordinator's lock)."""

    rank: int
    node: str
    connected: bool = False
    state: str | None = None
    run_id: str | None = None
    pid: int | None = None
    ready: bool = False
    generation: int = 0  # of the server it reported last
    message: str = ""
    stopped: int = 0  # the last generation it confirmed stopped
    shut_down: bool = False  # it confirmed the shutdown

    def view(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "node": self.node,
            "connected": self.connected,
            "state": self.state,
            "run_id": self.run_id,
            "pid": self.pid,
            "ready": self.ready,
            "generation": self.generation,
            "message": self.message,
        }


@dataclass(eq=False)
class _Handshake:
    """A connection the coordinator challenged that has not answered yet."""

    link: ControlLink
    peer: str  # its source address
    nonce: str  # the challenge's
    accepted: float  # monotonic


def evicted_pending(
    pending: Sequence[tuple[str, float]], source: str, *, per_source: int, total: int
) -> int | None:
    """Which unanswered connection to close now that one from ``source`` arrived (``pending``:
    every one, the newcomer included, as (source, accepted at)): the oldest of ``source`` when
    it holds more than ``per_source``; else, when there are more than ``total``, the oldest of
    the source holding the most; None while there is room."""
    by_source: dict[str, list[int]] = {}
    for index, (peer, _) in enumerate(pending):
        by_source.setdefault(peer, []).append(index)

    def oldest(indices: list[int]) -> int:
        return min(indices, key=lambda index: pending[index][1])

    if len(by_source.get(source, [])) > per_source:
        return oldest(by_source[source])
    if len(pending) > total:
        crowded = max(
            by_source.values(), key=lambda indices: (len(indices), -pending[oldest(indices)][1])
        )
        return oldest(crowded)
    return None


class GroupCoordinator:
    """Rank 0's end of the control channel: it listens on the group's control port, admits each
    member that proves it holds the key, and keeps what each one says. A member's end (its
    ``exited``, its connection lost, its ``leaving``) while a generation runs is kept as a
    GroupFailure for the supervisor, which decides."""

    def __init__(
        self,
        group: GroupSpec,
        clock: Clock,
        *,
        on_change: Callable[[], None],
        on_event: Callable[..., None],
    ) -> None:
        self.group = group
        self._clock = clock
        self._show = on_change  # the supervisor shows the group in state.json
        self._record = on_event  # ... and records events
        self._lock = threading.Condition()
        self.members = {
            rank: MemberSeen(rank, group.nodes[rank]) for rank in range(1, group.nnodes)
        }
        self._links: dict[int, ControlLink] = {}
        self._failures: list[GroupFailure] = []
        self.generation = 0
        self._running = False  # from start(g) until its end is decided: a member's end is one
        self._stopping = False  # stop(g) sent: a member lost now is no new cause
        self.left: GroupFailure | None = None  # a member stopped on request on its own node
        self._gate: GateProgress | None = None  # this generation's, with a gated launch
        self._listener: socket.socket | None = None
        self._closing = threading.Event()
        self._refused = 0
        self.listening: str | None = None  # the address the control port is bound to

    # -- the supervisor's side --

    def open(self) -> tuple[str, str] | None:
        """Bind and listen on the control port, then admit members in a thread: None, or the
        class and message of why not. Bound to rank 0's own address (``control_host``, where
        the members reach it) when the spec says a wildcard and that address is this host's:
        nothing else of the host is listened on (a NAT'd address, or a name, keeps the
        wildcard)."""
        import socket

        group = self.group
        hosts = [group.control_bind]
        if group.control_bind in WILDCARDS and is_ip_address(group.control_host):
            hosts.insert(0, group.control_host)
        for host in hosts:
            address = host_port(host, group.control_port)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            listener = socket.socket(family, socket.SOCK_STREAM)
            # A previous group's connections in TIME_WAIT must not keep this one from binding;
            # a listener that holds the port still does.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((host, group.control_port))
                listener.listen(max(group.nnodes * 2, 64))
            except OSError as exc:
                listener.close()
                if exc.errno == errno.EADDRNOTAVAIL and host != hosts[-1]:
                    continue  # rank 0's address is not on this host: the wildcard then
                if exc.errno == errno.EADDRINUSE:
                    return GROUP_PORT_IN_USE, (
                        f"the group's control port {address} is in use on {group.nodes[0]} "
                        "(another group's coordinator, or another program): stop it, or choose "
                        "another group.control_port"
                    )
                return GROUP_PORT_UNAVAILABLE, (
                    f"cannot listen on the group's control port {address} on {group.nodes[0]}: "
                    f"{exc.strerror or exc}"
                )
            break
        listener.settimeout(0.2)
        self._listener = listener
        self.listening = address
        threading.Thread(target=self._accept, name="group-accept", daemon=True).start()
        threading.Thread(target=self._beat, name="group-heartbeat", daemon=True).start()
        return None

    def missing(self) -> list[int]:
        """The members without a connection, by rank."""
        with self._lock:
            return [rank for rank in self.members if rank not in self._links]

    def begin(self) -> int:
        """A new generation: ``start`` to every member; its number. A member whose connection
        closed since it was seen joined is lost in this generation (it cannot run without it)."""
        with self._lock:
            self.generation += 1
            generation = self.generation
            now = self._clock.monotonic()
            self._failures = [
                GroupFailure(
                    rank,
                    member.node,
                    GROUP_MEMBER_LOST,
                    f"{self.group.name(rank)}: lost (connection closed before generation "
                    f"{generation} started)",
                    LOST_RETURNCODE,
                    generation,
                    now,
                )
                for rank, member in self.members.items()
                if rank not in self._links
            ]
            self._running, self._stopping = True, False
            if self.group.gate is not None:
                self._gate = GateProgress.begin(self.group.gate, generation, now)
            links = list(self._links.values())
        for link in links:
            link.send("start", generation=generation)  # one that fails is lost: a failure
        return generation

    def gate(self) -> GateProgress | None:
        """This generation's gated launch so far (None without one)."""
        with self._lock:
            return self._gate

    def note_gate(self, rank: int, generation: int, ranks: Iterable[int]) -> bool:
        """Node ``rank``'s ranks at the gate in ``generation``'s server: whether that is news
        (an older generation's report never is)."""
        with self._lock:
            progress = self._gate
            if progress is None or progress.generation != generation or not self._running:
                return False
            self._gate = progress.arrive(rank, ranks)
            return self._gate is not progress

    def gate_activated(self, generation: int, at: float, after_s: float) -> None:
        with self._lock:
            if self._gate is not None and self._gate.generation == generation:
                self._gate = replace(self._gate, activated_at=at, activated_after_s=after_s)

    def gate_failed(self, failure: GroupFailure) -> None:
        """The gate's end of ``failure.generation``: a failure of the generation, which the
        supervisor finds among ``failures()`` and stops the group for."""
        with self._lock:
            if self._gate is None or self._gate.generation != failure.generation:
                return
            self._gate = replace(self._gate, failed=failure.cls)
            if self._running and failure.generation == self.generation:
                self._failures.append(failure)
            self._lock.notify_all()

    def gate_view(self) -> dict[str, Any] | None:
        with self._lock:
            return None if self._gate is None else self._gate.view()

    def failures(self) -> list[GroupFailure]:
        """The members' ends in this generation so far."""
        with self._lock:
            return list(self._failures)

    def stop_members(self, reason: str) -> None:
        with self._lock:
            self._stopping = True
            links = list(self._links.values())
            generation = self.generation
        for link in links:
            link.send("stop", generation=generation, reason=reason[:GROUP_TEXT_MAX])

    def wait_stopped(self, timeout: float, stop_requested: threading.Event) -> list[int]:
        """Until every connected member confirmed ``stopped`` for this generation (or is gone),
        ``timeout`` passed, or a stop was requested (the shutdown that follows stops them
        anyway): the ranks that did not confirm."""
        deadline = self._clock.monotonic() + timeout
        with self._lock:
            while True:
                waiting = [
                    rank for rank in self._links if self.members[rank].stopped < self.generation
                ]
                remaining = deadline - self._clock.monotonic()
                if not waiting or remaining <= 0 or stop_requested.is_set():
                    return waiting
                self._lock.wait(min(remaining, 0.1))

    def finish(self) -> None:
        """The generation's end is decided: what members say now is no longer its cause."""
        with self._lock:
            self._running = self._stopping = False

    def shutdown(self, reason: str, timeout: float) -> list[int]:
        """``shutdown`` to every member; until each confirmed (or is gone) or ``timeout``
        passed. Those that did not confirm are dropped (a member that loses its coordinator
        stops its server). The ranks that did not confirm."""
        with self._lock:
            self._running = self._stopping = False
            links = list(self._links.values())
        for link in links:
            link.send("shutdown", reason=reason[:GROUP_TEXT_MAX])
        deadline = self._clock.monotonic() + timeout
        with self._lock:
            while True:
                waiting = [rank for rank in self._links if not self.members[rank].shut_down]
                remaining = deadline - self._clock.monotonic()
                if not waiting or remaining <= 0:
                    break
                self._lock.wait(min(remaining, 0.1))
        self.drop(waiting, "did not confirm the shutdown in time")
        return waiting

    def drop(self, ranks: Sequence[int], why: str) -> None:
        """Close these members' connections: they stop their servers, as on a lost coordinator."""
        with self._lock:
            links = [(rank, self._links[rank]) for rank in ranks if rank in self._links]
        for rank, link in links:
            self._on_event("group-drop", rank=rank, node=self.group.nodes[rank], reason=why)
            link.close()

    # The connections' threads tell the supervisor through these. A write that fails (a full
    # disk) must not end a connection's thread: the member would never be counted lost. The
    # supervisor's own writes fail too, and end it.
    def _on_event(self, kind: str, **details: Any) -> None:
        with contextlib.suppress(OSError):
            self._record(kind, **details)

    def _on_change(self) -> None:
        with contextlib.suppress(OSError):
            self._show()

    def view(self) -> dict[str, Any]:
        with self._lock:
            return {str(rank): member.view() for rank, member in self.members.items()}

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            links = list(self._links.values())
        for link in links:
            link.close()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()

    # -- the connections' threads --

    def _beat(self) -> None:
        """Every member hears from the coordinator at least every heartbeat_s (it counts a
        silent coordinator lost)."""
        while not self._closing.wait(self.group.heartbeat_s):
            with self._lock:
                links = list(self._links.values())
            for link in links:
                link.send("heartbeat")

    def _accept(self) -> None:
        """Accept connections and run their handshakes in one selector, never blocking on any
        of them: each new one gets its challenge at once and GROUP_HANDSHAKE_S to answer it
        (within the caps, see GROUP_PENDING_PER_SOURCE); a member that answered is handed to
        a thread of its own (``_serve``)."""
        import selectors

        listener = self._listener
        assert listener is not None  # noqa: S101 - started by open() after binding it
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, None)
        pending: list[_Handshake] = []
        deadline_s = min(GROUP_HANDSHAKE_S, self.group.lost_after_s)
        try:
            while not self._closing.is_set():
                try:
                    ready = selector.select(0.2)  # _closing is looked at this often
                except (OSError, ValueError):  # the listener closed under it (close())
                    if self._closing.is_set():
                        return
                    raise
                for key, _ in ready:
                    if key.data is None:
                        self._take_connection(listener, selector, pending)
                    elif key.data in pending:  # not evicted by a newcomer of this same batch
                        self._read_hello(key.data, selector, pending)
                now = self._clock.monotonic()
                for late in [h for h in pending if now - h.accepted > deadline_s]:
                    self._drop_handshake(
                        late, selector, pending, f"no hello within {deadline_s:g} s"
                    )
        finally:
            for handshake in pending:
                handshake.link.close()
            selector.close()

    def _take_connection(
        self, listener: socket.socket, selector: selectors.BaseSelector, pending: list[_Handshake]
    ) -> None:
        import selectors
        import socket

        try:
            connection, peer = listener.accept()
        except (socket.timeout, BlockingIOError):  # TimeoutError only from 3.10
            return
        except OSError:
            if not self._closing.is_set():
                self._clock.sleep(0.05)  # EMFILE and the like: try again, never spin
            return
        connection.settimeout(self.group.lost_after_s)
        with contextlib.suppress(OSError):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = ControlLink(connection, self.group)
        handshake = _Handshake(link, str(peer[0]), "", self._clock.monotonic())
        pending.append(handshake)
        index = evicted_pending(
            [(h.peer, h.accepted) for h in pending],
            handshake.peer,
            per_source=GROUP_PENDING_PER_SOURCE,
            total=GROUP_PENDING_MAX,
        )
        if index is not None:
            oldest = pending[index]
            crowded = sum(1 for h in pending if h.peer == oldest.peer)
            self._drop_handshake(
                oldest,
                selector,
                pending,
                f"evicted: {crowded} connections from {oldest.peer} without a hello",
            )
        try:
            handshake.nonce = challenge_member(link)
        except LinkBroken as exc:
            self._drop_handshake(handshake, selector, pending, str(exc))
            return
        selector.register(connection, selectors.EVENT_READ, handshake)

    def _read_hello(
        self, handshake: _Handshake, selector: selectors.BaseSelector, pending: list[_Handshake]
    ) -> None:
        try:
            data = handshake.link.recv_available()
            if not handshake.link.feed(data):
                return
            rank = admit_hello(handshake.link, self.group, handshake.nonce)
        except LinkBroken as exc:
            self._drop_handshake(handshake, selector, pending, str(exc))
            return
        selector.unregister(handshake.link.connection)
        pending.remove(handshake)
        threading.Thread(
            target=self._serve,
            args=(handshake.link, rank, handshake.peer),
            name="group-member",
            daemon=True,
        ).start()

    def _drop_handshake(
        self,
        handshake: _Handshake,
        selector: selectors.BaseSelector,
        pending: list[_Handshake],
        why: str,
    ) -> None:
        pending.remove(handshake)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(handshake.link.connection)
        self._refuse(handshake.link, handshake.peer, why)

    def _serve(self, link: ControlLink, rank: int, peer: str) -> None:
        """A member that proved it holds the key: admitted once per rank, then heard until its
        connection ends."""
        with self._lock:
            admitted = rank not in self._links and not self._closing.is_set()
            if admitted:
                self._links[rank] = link
                member = self.members[rank]
                member.connected, member.shut_down = True, False
                generation = self.generation
                self._lock.notify_all()
        if not admitted or not link.send("welcome", generation=generation):
            self._refuse(link, peer, f"rank {rank} is connected already")
            return
        self._on_event("group-join", rank=rank, node=self.group.nodes[rank], peer=peer)
        self._on_change()
        try:
            while True:
                self._handle(rank, link.receive())
        except LinkBroken as exc:
            self._lose(rank, link, str(exc))
        except Exception as exc:  # noqa: BLE001 - the agent's bug: the member is lost, not ignored
            self._lose(rank, link, f"agent error: {type(exc).__name__}: {exc}")

    def _refuse(self, link: ControlLink, peer: str, why: str) -> None:
        """Recorded, then closed: whoever sees the close finds the event."""
        with self._lock:
            self._refused += 1
            record = self._refused <= GROUP_REFUSED_EVENTS_MAX
        if record:
            self._on_event("group-refused", peer=peer, reason=why)
        link.close()

    def _handle(self, rank: int, message: dict[str, Any]) -> None:
        kind = message.get("type")
        generation = integer(message.get("generation"))
        name = self.group.name(rank)
        event: dict[str, Any] | None = None
        with self._lock:
            member = self.members[rank]
            if kind == "state":
                member.state = short_text(message.get("state")) or None
                member.run_id = short_text(message.get("run_id")) or None
                member.pid = integer(message.get("pid"))
                member.ready = message.get("ready") is True
                member.generation = generation or 0
                member.message = short_text(message.get("message"))
            elif kind == "exited":
                cls = short_text(message.get("cls"), CRASHED) or CRASHED
                why = short_text(message.get("message"), "exited")
                returncode = integer(message.get("returncode"))
                helps = message.get("restart_helps")  # a member of an older agent sends none
                restart = (
                    Restart(helps, short_text(message.get("restart_why")))
                    if isinstance(helps, bool)
                    else None
                )
                failure = GroupFailure(
                    rank,
                    member.node,
                    cls,
                    f"{name}: {why}",
                    LOST_RETURNCODE if returncode is None else returncode,
                    generation or 0,
                    self._clock.monotonic(),
                    restart,
                )
                # An old generation's end is no cause of this one's (messages in flight).
                if self._running and generation == self.generation:
                    self._failures.append(failure)
                event = {"kind": "group-member-exited", **failure.as_dict()}
            elif kind == "gate" and generation is not None:
                ranks = message.get("ranks")
                progress = self._gate
                if (
                    progress is not None
                    and isinstance(ranks, list)
                    and self._running
                    and generation == progress.generation
                ):
                    reported = (integer(r) for r in ranks)
                    self._gate = progress.arrive(rank, (r for r in reported if r is not None))
            elif kind == "stopped" and generation is not None:
                member.stopped = max(member.stopped, generation)
                event = {"kind": "group-member-stopped", "rank": rank, "generation": generation}
            elif kind == "shutdown-done":
                member.shut_down = True
            elif kind == "leaving":
                why = short_text(message.get("reason"), "stopped on request")
                failure = GroupFailure(
                    rank,
                    member.node,
                    STOPPED,
                    f"{name}: {why}",
                    0,
                    self.generation,
                    self._clock.monotonic(),
                )
                if self.left is None:
                    self.left = failure
                if self._running:
                    self._failures.append(failure)
                event = {"kind": "group-member-left", **failure.as_dict()}
            # a heartbeat says nothing but that the member is alive: its arrival is enough
            self._lock.notify_all()
        if event is not None:
            self._on_event(event.pop("kind"), **event)
        if kind in ("state", "gate", "exited", "stopped", "leaving"):
            self._on_change()

    def _lose(self, rank: int, link: ControlLink, why: str) -> None:
        link.close()
        with self._lock:
            if self._links.get(rank) is not link:
                return
            del self._links[rank]
            member = self.members[rank]
            member.connected = False
            expected = member.shut_down or self._closing.is_set()
            if self._running and not self._stopping:
                self._failures.append(
                    GroupFailure(
                        rank,
                        member.node,
                        GROUP_MEMBER_LOST,
                        f"{self.group.name(rank)}: lost ({why})",
                        LOST_RETURNCODE,
                        self.generation,
                        self._clock.monotonic(),
                    )
                )
            self._lock.notify_all()
        if not expected:
            self._on_event("group-member-lost", rank=rank, node=member.node, reason=why)
        self._on_change()
