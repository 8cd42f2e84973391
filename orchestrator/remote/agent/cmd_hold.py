"""``hold``: a deployment's operation lock, held by this process for as long as orch keeps the
command's stdin open (issue 31: two people acting on the same fleet from two laptops must not
both restart a server; the second waits, or is told who holds it).

The lock is ``flock`` on ``<workdir>/.orch/locks/<deployment>.lock``: the kernel lets it go when
the holder ends, however it ends (orch SIGKILLed: sshd closes the channel, this process reads
EOF; this process SIGKILLed: its descriptor closes), so a holder that died never blocks the next
one. Who holds it is written beside it, ``<deployment>.holder.json`` (0600, replaced atomically),
for the waiters' message; a holder file whose lock nobody holds is stale and is replaced. The
lock file itself is never removed: unlinking a file another process is about to lock would
hand two processes two different locks of the "same" name.

It is advisory, between orch clients: the supervisor's own lock (the deployment's ``.lock``) is
another file, and nothing here touches it.

Its lines on stdout, each one JSON object:
``{"waiting": true, "holder": {...}}`` once, when another holds it and ``--wait`` lets it wait;
``{"ok": true, "held": true, ...}`` once it holds it; then, after stdin's end (or SIGTERM/SIGHUP),
the final answer ``{"ok": true, "released": true}``. Not obtained in time: the final answer is
``{"ok": false, "refused": "held", "holder": {...}}``."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from types import FrameType
from typing import Any, Protocol

from .files import NOFOLLOW, read_json, write_json_atomic
from .protocol import PROTOCOL
from .trust import UnsafePath, check_directory, check_file, check_workdir

LOCKS_DIR = "locks"  # under <workdir>/.orch
LOOK_S = 0.1  # how often a waiter tries the lock again
HOLDER_KEYS = ("user", "machine", "pid", "command", "since")


class Clock(Protocol):
    """The waiter's clock (monotonic) and sleep; a test hands in its own."""

    def monotonic(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...


class RealClock:
    """Not world.py's: importing the supervisor's OS façade would cost every hold tens of
    milliseconds."""

    def monotonic(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)


class _Released(Exception):
    """SIGTERM or SIGHUP while held: let it go as on stdin's end."""


def lock_paths(workdir: str, deployment: str) -> tuple[str, str, str]:
    """(the locks directory, the lock file, the holder file) of ``deployment``."""
    if not deployment or "/" in deployment or deployment.startswith(".") or "\0" in deployment:
        raise UnsafePath(
            f"{deployment!r} is not a deployment name",
            "a deployment is a profile's name, or NAME@I for a replica",
        )
    directory = os.path.join(workdir, ".orch", LOCKS_DIR)
    return (
        directory,
        os.path.join(directory, f"{deployment}.lock"),
        os.path.join(directory, f"{deployment}.holder.json"),
    )


def _secure_locks_dir(workdir: str, directory: str) -> None:
    """StrictModes for the locks: the workdir and its ``.orch`` (made 0700 when missing: a
    first ``hold`` on a host comes before any deployment) and the locks directory, each the
    user's and writable by nobody else."""
    if not check_workdir(workdir):
        raise UnsafePath(
            f"the workdir {workdir} does not exist",
            "orch up creates it; check hosts.<host>.workdir",
        )
    agent_dir = os.path.dirname(directory)
    for path, what in ((agent_dir, "agent directory"), (directory, "locks directory")):
        if not check_directory(path, what):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
            check_directory(path, what)


def _open_lock(path: str) -> int:
    check_file(path, "the lock file")
    fd = os.open(path, os.O_RDWR | os.O_CREAT | NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o600)
    info = os.fstat(fd)
    if info.st_uid != os.getuid():  # raced in between: never lock another's file
        os.close(fd)
        raise UnsafePath(f"the lock file {path} belongs to uid {info.st_uid}", "remove it")
    return fd


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
            return False
        raise
    return True


def _holder_of(path: str) -> dict[str, Any]:
    """What the holder file says (only the keys of a holder); {} when there is none yet (the
    holder took the lock and has not written it) or it cannot be read."""
    try:
        check_file(path, "the holder file")
        document = read_json(path) or {}
    except (OSError, UnsafePath):
        return {}
    return {key: document[key] for key in HOLDER_KEYS if key in document}


def lock_generation(holder_path: str) -> int:
    """How many times the lock was taken (the holder file keeps the count after a release):
    orch reads a deployment's state before its hold is granted, and trusts that read only when
    the hold it got is the next one after it (``lock_view``); 0 when never taken."""
    try:
        check_file(holder_path, "the holder file")
        document = read_json(holder_path) or {}
    except (OSError, UnsafePath, ValueError):
        return 0
    generation = document.get("generation") if isinstance(document, dict) else None
    return generation if isinstance(generation, int) and generation >= 0 else 0


def lock_view(workdir: str, deployment: str) -> dict[str, Any]:
    """The lock as a reader sees it, with no lock taken: its generation, and whether a holder
    is named (held, or a holder that died: either way a read then is not trusted)."""
    try:
        _, _, holder_path = lock_paths(workdir, deployment)
    except UnsafePath:
        return {"generation": 0, "held": False}
    return {
        "generation": lock_generation(holder_path),
        "held": bool(_holder_of(holder_path)),
    }


def _say(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"protocol": PROTOCOL, **document}, sort_keys=True) + "\n")
    sys.stdout.flush()


def cmd_hold(
    workdir: str,
    deployment: str,
    holder_json: str,
    wait_s: float,
    clock: Clock | None = None,
    read_stdin: Callable[[], bytes] | None = None,
) -> dict[str, Any]:
    """Take the lock (waiting up to ``wait_s``), say so, keep it until stdin ends or a SIGTERM
    or SIGHUP comes, then let it go; the final answer is main's to write."""
    clock = clock or RealClock()
    try:
        holder = json.loads(holder_json)
    except ValueError:
        holder = None
    if not isinstance(holder, dict):
        return {"protocol": PROTOCOL, "ok": False, "refused": "bad-holder", "reason": holder_json}
    holder = {key: holder[key] for key in HOLDER_KEYS if key in holder}
    directory, lock_path, holder_path = lock_paths(workdir, deployment)
    _secure_locks_dir(workdir, directory)
    fd = _open_lock(lock_path)
    try:
        deadline = clock.monotonic() + max(wait_s, 0.0)
        said_waiting = False
        while not _try_lock(fd):
            other = _holder_of(holder_path)
            if clock.monotonic() >= deadline:
                return {
                    "protocol": PROTOCOL,
                    "ok": False,
                    "refused": "held",
                    "deployment": deployment,
                    "holder": other,
                }
            if not said_waiting and other:
                _say({"waiting": True, "deployment": deployment, "holder": other})
                said_waiting = True
            clock.sleep(LOOK_S)
        return _held(fd, deployment, holder, holder_path, read_stdin or _read_stdin_to_end)
    finally:
        os.close(fd)  # the lock goes with the descriptor


def _held(
    fd: int,
    deployment: str,
    holder: dict[str, Any],
    holder_path: str,
    read_stdin: Callable[[], bytes],
) -> dict[str, Any]:
    check_file(holder_path, "the holder file")
    generation: int | None = lock_generation(holder_path) + 1
    # a stale file (a holder that died) is replaced: the lock is ours, so is the file now
    try:
        write_json_atomic(
            holder_path, {**holder, "agent_pid": os.getpid(), "generation": generation}
        )
    except OSError:
        # no room to say who holds it (a full disk: `orch down` must still stop the server);
        # the lock is held all the same. Its number is not recorded, so none is given: orch
        # then reads the deployment again under it instead of trusting an earlier read
        generation = None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGHUP)}

    def release(signum: int, frame: FrameType | None) -> None:
        raise _Released

    try:
        for sig in previous:
            signal.signal(sig, release)
        with contextlib.suppress(BrokenPipeError):  # orch already went: release at once
            _say(
                {
                    "ok": True,
                    "held": True,
                    "deployment": deployment,
                    "holder": holder,
                    "generation": generation,
                }
            )
            read_stdin()
    except _Released:
        pass
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # before the unlock: no holder named any more, the generation kept for the next one
        if generation is not None:  # else the file is not ours to rewrite (none was written)
            with contextlib.suppress(OSError, UnsafePath):
                write_json_atomic(holder_path, {"generation": generation, "released": True})
        fcntl.flock(fd, fcntl.LOCK_UN)
    return {"protocol": PROTOCOL, "ok": True, "released": True, "deployment": deployment}


def _read_stdin_to_end() -> bytes:
    """Block until stdin ends: orch's EOF, or sshd closing the channel when orch went away."""
    while True:
        try:
            chunk = os.read(0, 4096)
        except OSError:
            return b""
        if not chunk:
            return b""
