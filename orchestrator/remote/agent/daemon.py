"""The detached supervisor: double fork and a new session (an SSH exec returns at once), stdin
from /dev/null and output to the agent's own log, the deployment's and the port's locks held
for its life, and the answer to ``start`` once its server is spawned."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import threading
from typing import Any

from .files import NOFOLLOW, Paths, open_append, read_json
from .reload import listen as listen_for_reload
from .states import TERMINAL_STATES
from .supervisor import Supervisor
from .world import ServerProcess

# ``start`` of a group's rank answers by then even before its server is spawned (a rank spawns
# once every member has joined; orch's call gives up after 60 s).
GROUP_START_ANSWER_S = 30.0


def take_lock(path: str) -> int | None:
    import fcntl

    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    os.set_inheritable(fd, False)
    return fd


def start_detached(paths: Paths, port: int) -> tuple[int | None, dict[str, Any] | None]:
    """Fork twice. In the caller: (None, the supervisor's answer). In the supervisor, detached
    and holding the deployment's and the port's locks: (the answer pipe, None); it exits
    itself when it cannot take them."""
    reader, writer = os.pipe()
    first = os.fork()
    if first:
        os.close(writer)
        with os.fdopen(reader, "rb") as pipe:
            answer = pipe.read()
        os.waitpid(first, 0)
        if not answer:
            return None, {
                "ok": False,
                "reason": "the supervisor died while starting; see agent.log",
            }
        result: dict[str, Any] = json.loads(answer)
        return None, result
    # first child: new session, then fork again so the supervisor is no session leader
    os.close(reader)
    os.setsid()
    if os.fork():
        os._exit(0)
    _become_daemon(paths)
    deployment_lock = take_lock(paths.lock)
    port_lock = take_lock(paths.port_lock(port)) if deployment_lock is not None else None
    if deployment_lock is None or port_lock is None:
        holder = read_json(paths.state)
        which = "deployment" if deployment_lock is None else f"port {port}"
        send_answer(
            writer,
            {
                "ok": False,
                "reason": f"locked: another supervisor holds the {which}",
                "holder": holder,
            },
        )
        os._exit(0)
    return writer, None


def supervise(supervisor: Supervisor, writer: int, adopted: ServerProcess | None) -> None:
    """In the detached supervisor: answer the caller once the server is spawned (or could not
    be), then run until stopped; never returns."""
    clock = supervisor.clock
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stop_requested.set())
    signal.signal(signal.SIGINT, lambda *_: supervisor.stop_requested.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    listen_for_reload(supervisor)  # SIGHUP: a reconfigure's new spec (reload.py)
    answered = threading.Event()

    # A group's rank spawns once every member joined (the others are started at the same time).
    group = supervisor.spec.group is not None

    def answer_when_spawned() -> None:
        deadline = clock.monotonic() + (GROUP_START_ANSWER_S if group else 10.0)
        record = supervisor.record
        while clock.monotonic() < deadline and record.pid is None:
            if record.last_exit is not None:
                break
            if group and record.state in TERMINAL_STATES:
                break  # the group could not form: no server, no run
            clock.sleep(0.01)
        send_answer(writer, {"ok": True, "state": supervisor.record.to_json()})
        answered.set()

    threading.Thread(target=answer_when_spawned, daemon=True).start()
    try:
        supervisor.run(adopted)
    except Exception as exc:
        supervisor.fail(f"agent error: {type(exc).__name__}: {exc}")
        raise
    finally:
        answered.wait(timeout=1.0)
    os._exit(0)


def _become_daemon(paths: Paths) -> None:
    """No terminal, no SSH channel: stdin from /dev/null, output to the agent's own log."""
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = open_append(paths.agent_log)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def send_answer(fd: int, document: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(document).encode())
        os.close(fd)
