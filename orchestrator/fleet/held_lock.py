"""The client side of a deployment's operation lock (``agent hold``, issue 31): the hold's lines
read until it holds, and the lock held while the command's stdin stays open (``HeldLock``).
``fleet.client.Agent.hold`` starts the command (pushing the agent first where the host lacks
it)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable

from orchestrator.errors import OrchError, SupervisorError
from orchestrator.fleet.protocol.hold import HOLD_ANSWER_MARGIN_S, HoldLine, decode_hold_line
from orchestrator.model import LockHolder
from orchestrator.transport import Stream


class HeldLock:
    """A deployment's operation lock, held on its host by ``agent hold`` for as long as the
    command's stdin is open. ``release`` ends stdin and waits, briefly, for the agent to say it
    let go (so that the lock is free on return); orch dying ends it the same way (sshd closes
    the channel, the agent reads the end of its stdin)."""

    RELEASE_WAIT_S = 5.0

    def __init__(
        self, stream: Stream, deployment: str, host: str, generation: int | None = None
    ) -> None:
        self._stream = stream
        self.deployment = deployment
        self.host = host
        self.generation = generation  # the hold's number on its host (LockView.consistent_with)
        self._released = False

    def release(self) -> None:
        if self._released:
            return
        self._released = True
        try:
            self._stream.finish_stdin(b"")
            with contextlib.suppress(OrchError, OSError):
                while self._stream.readline(self.RELEASE_WAIT_S):
                    pass
        finally:
            self._stream.close()

    def __enter__(self) -> HeldLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def await_hold(
    stream: Stream,
    deployment: str,
    host: str,
    agent_log: str,
    wait_s: float,
    on_wait: Callable[[LockHolder], None] | None,
) -> HoldLine | None:
    """Read the hold's lines until it holds (its ``held`` line), or it ended without an answer
    (None: the bootstrap's exit status says why); ``on_wait`` told who holds it when the agent
    waits; a refusal raises errors.Locked naming the holder."""
    waited = 0.0
    limit = max(wait_s, 0.0) + HOLD_ANSWER_MARGIN_S
    while True:
        line = stream.readline(1.0)
        if line is None:
            waited += 1.0
            if waited > limit:
                raise SupervisorError(
                    f"agent hold said nothing on {host} in {limit:g} s",
                    f"the agent's own log: {agent_log}",
                )
            continue
        if not line:
            return None
        try:
            document = json.loads(line)
        except ValueError:
            continue  # not ours (a sitecustomize printing?)
        if not isinstance(document, dict):
            continue
        answer = decode_hold_line(document, deployment, host)
        if answer.held:
            return answer
        if answer.waiting and answer.holder is not None and on_wait is not None:
            on_wait(answer.holder)


def exit_status(stream: Stream, wait_s: float = 5.0) -> int | None:
    """The exit status of a command whose output ended: a local process may close its stdout
    a moment before it is reaped (``returncode`` None until then)."""
    deadline = time.monotonic() + wait_s
    while (code := stream.returncode) is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return code
