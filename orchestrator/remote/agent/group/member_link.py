"""A member's end of the control channel (control.py): it reaches the coordinator, says it is
alive, and hands the coordinator's commands to the member's supervisor (member.py)."""

from __future__ import annotations

import contextlib
import threading
from collections import deque
from typing import Any

from ..record import AgentState
from ..spec import GroupSpec
from ..world import Clock
from .control import (
    GROUP_CONNECT_RETRY_S,
    ControlLink,
    LinkBroken,
    connect_failure,
    greet_coordinator,
    integer,
    short_text,
)


class GroupMemberLink:
    """A member's end of the control channel: it reaches the coordinator (retrying while the
    group gathers), says it is alive, and hands the coordinator's ``start``/``stop`` to the
    supervisor. The coordinator's ``shutdown``, or its loss, ends the member as a stop request
    does (``stop_requested``), with ``end`` saying why."""

    def __init__(self, group: GroupSpec, clock: Clock, stop_requested: threading.Event) -> None:
        self.group = group
        self._clock = clock
        self._stop_requested = stop_requested
        self._link: ControlLink | None = None
        self._lock = threading.Condition()
        self._commands: deque[dict[str, Any]] = deque()
        self.end: tuple[str, str] | None = None  # ("shutdown" | "lost", why): the first one
        self._reported: tuple[Any, ...] | None = None

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.closed.is_set()

    def connect(self) -> str | None:
        """Reach the coordinator and join, retrying for join_timeout_s: None once joined (or a
        stop was requested meanwhile), else why it could not."""
        import socket

        group = self.group
        deadline = self._clock.monotonic() + group.join_timeout_s
        last = "no attempt"
        while not self._stop_requested.is_set():
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                break
            timeout = min(remaining, group.lost_after_s)
            try:
                connection = socket.create_connection(
                    (group.control_host, group.control_port), timeout=timeout
                )
            except OSError as exc:
                last = connect_failure(exc, timeout)
            else:
                connection.settimeout(group.lost_after_s)
                with contextlib.suppress(OSError):
                    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                link = ControlLink(connection, group)
                try:
                    greet_coordinator(link)
                except LinkBroken as exc:
                    link.close()
                    last = f"it did not admit this rank: {exc}"
                else:
                    self._link = link
                    threading.Thread(target=self._read, args=(link,), daemon=True).start()
                    threading.Thread(target=self._beat, args=(link,), daemon=True).start()
                    return None
            self._clock.wait(self._stop_requested, GROUP_CONNECT_RETRY_S)
        if self._stop_requested.is_set():
            return None
        return (
            f"could not reach {group.coordinator} at {group.control_address} within "
            f"{group.join_timeout_s:g} s ({last})"
        )

    def send(self, kind: str, **fields: Any) -> bool:
        return self._link is not None and self._link.send(kind, **fields)

    def report(self, record: AgentState, generation: int) -> None:
        """Tell the coordinator this rank's state when it changed (it shows it in its
        ``status``)."""
        snapshot = (
            record.state,
            record.run_id,
            record.pid,
            bool(record.ready),
            record.message,
            generation,
        )
        if snapshot == self._reported or not self.connected:
            return
        self._reported = snapshot
        self.send(
            "state",
            state=snapshot[0],
            run_id=snapshot[1],
            pid=snapshot[2],
            ready=snapshot[3],
            message=short_text(snapshot[4]),
            generation=generation,
        )

    def next_command(self, timeout: float) -> dict[str, Any] | None:
        """The coordinator's next ``start`` or ``stop``, waiting at most ``timeout``."""
        with self._lock:
            if not self._commands:
                self._lock.wait(timeout)
            return self._commands.popleft() if self._commands else None

    def interrupting(self, generation: int) -> dict[str, Any] | None:
        """While the server of ``generation`` runs: the ``stop`` that ends it, taken, or the
        ``start`` of a newer generation, left for the supervisor's loop. Commands of older
        generations are dropped: messages in flight when they ended."""
        with self._lock:
            while self._commands:
                head = self._commands[0]
                if head["generation"] < generation:
                    self._commands.popleft()
                elif head["type"] == "stop":
                    return self._commands.popleft()
                elif head["generation"] > generation:
                    return head
                else:
                    self._commands.popleft()  # its own start again: nothing to do
            return None

    def close(self) -> None:
        if self._link is not None:
            self._link.close()

    def _read(self, link: ControlLink) -> None:
        try:
            while True:
                message = link.receive()
                kind = message.get("type")
                generation = integer(message.get("generation"))
                if kind in ("start", "stop") and generation is not None:
                    command = {
                        "type": kind,
                        "generation": generation,
                        "reason": short_text(message.get("reason")),
                    }
                    with self._lock:
                        self._commands.append(command)
                        self._lock.notify_all()
                elif kind == "shutdown":
                    self._finish("shutdown", short_text(message.get("reason"), "the group stopped"))
        except LinkBroken as exc:
            link.close()  # a silent coordinator's connection too: nothing more goes over it
            self._finish("lost", str(exc))

    def _beat(self, link: ControlLink) -> None:
        while not link.closed.wait(self.group.heartbeat_s):
            if not link.send("heartbeat"):
                return

    def _finish(self, kind: str, why: str) -> None:
        with self._lock:
            if self.end is None:
                self.end = (kind, why)
            self._lock.notify_all()
        self._stop_requested.set()
