"""The deployment's files on the host (Paths) and how the agent writes them: never through a
symlink, modes at creation, JSON replaced atomically; a write that finds no room (a full disk,
a quota) is told apart, so that what fails for want of room is counted and never ends a server
or its supervisor (issue 26)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import threading
from collections.abc import Sequence
from typing import Any

# Files the agent creates are never reached through a symlink (a planted one would make it write
# into a victim file) and get their mode at creation: O_NOFOLLOW, and O_EXCL where they are new.
NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


# A write that failed for want of room (a full disk, a quota, a file size limit): what the agent
# writes then is dropped and counted, never its end nor its server's (issue 26).
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def no_room(exc: OSError) -> bool:
    return exc.errno in NO_ROOM_ERRNOS


def os_error_text(exc: OSError) -> str:
    """``no space left on device``: the error as a marker or a status says it."""
    text = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    return text[:1].lower() + text[1:]


# state.json's ``disk``: what found no room so far (server output, events.jsonl lines, other
# files: state.json, a run's copies), the last error and when (the host's wall clock). ``status``
# adds the filesystem's room now (``full``, ``free_bytes``).
NO_DISK_TROUBLE: dict[str, Any] = {
    "dropped_bytes": 0,
    "dropped_events": 0,
    "failed_writes": 0,
    "last_error": None,
    "last_error_at": None,
}
DISK_LOOK_S = 1.0  # how often the supervisor brings its count of dropped output to state.json
DISK_FULL_BYTES = 1 << 20  # less room than this on the deployment's filesystem reads "full"


def write_json_atomic(path: str, document: dict[str, Any], mode: int = 0o600) -> None:
    """``path`` replaced whole, or left as it was: on a failed write (a full disk) the temp file
    is removed and the error raised; a reader never sees a truncated document."""
    temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # ours, left by a process killed mid-write (same pid and thread: rare)
    data = (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(temp, NEW_FILE, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)  # replaces a symlink at ``path`` itself, never its target
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is none (missing, not JSON, not an object:
    read_state_file tells those apart for state.json)."""
    return read_state_file(path)[0]


def read_state_file(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the object, None) from ``path``; (None, None) when there is no file; (None, why) when it
    is corrupt: not JSON, or JSON that is no object (``null``, ``[]``)."""
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return None, None
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, f"{path} holds something that is not JSON, not a state"
    if isinstance(data, dict):
        return data, None
    kinds = {type(None): "null", list: "a list", str: "a string", bool: "true or false"}
    kind = kinds.get(type(data), "a number")
    return None, f"{path} holds {kind}, not a state"


def open_append(path: str) -> int:
    """A private file appended to (events.jsonl, agent.log, a run's log), never via a symlink."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW, 0o600)


class Paths:
    """Where a deployment keeps things on the host."""

    def __init__(self, deployment_dir: str) -> None:
        self.root = deployment_dir
        self.state = os.path.join(deployment_dir, "state.json")
        self.spec = os.path.join(deployment_dir, "spec.json")
        # the spec of the launch before this one: `start --previous` puts it back (a rolling
        # restart whose relaunch failed restores the replica with it)
        self.previous_spec = os.path.join(deployment_dir, "spec.previous.json")
        self.lock = os.path.join(deployment_dir, ".lock")
        self.events = os.path.join(deployment_dir, "events.jsonl")
        self.agent_log = os.path.join(deployment_dir, "agent.log")
        self.runs = os.path.join(deployment_dir, "runs")
        self.launch_script = os.path.join(deployment_dir, "launch.sh")
        # `stop --timeout S` for the supervisor that does the stopping: its grace this once
        self.stop_request = os.path.join(deployment_dir, "stop-request.json")

    def files(self) -> tuple[tuple[str, str], ...]:
        """The files the supervisor writes or acts on, named for messages."""
        return (
            ("state.json", self.state),
            ("events.jsonl", self.events),
            ("agent.log", self.agent_log),
            ("spec.json", self.spec),
            ("spec.previous.json", self.previous_spec),
            ("launch.sh", self.launch_script),
            (".lock", self.lock),
        )

    def port_lock(self, port: int) -> str:
        # one level up: every deployment under the same workdir shares the port locks
        return os.path.join(os.path.dirname(self.root), ".orch", "locks", f"port-{port}.lock")


def write_private(path: str, data: bytes) -> None:
    fd = os.open(path, NEW_FILE, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def read_bytes(path: str) -> bytes:
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | NOFOLLOW), "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""


def last_run_seq(runs_dir: str) -> int:
    try:
        names = os.listdir(runs_dir)
    except FileNotFoundError:
        return 0
    numbers = [int(n.split("-", 1)[0]) for n in names if n.split("-", 1)[0].isdigit()]
    return max(numbers, default=0)


def replace_private(path: str, data: bytes) -> None:
    """A new 0600 file (never through a symlink), replacing ``path`` atomically."""
    temp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, NEW_FILE, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def disk_room(path: str) -> dict[str, Any]:
    """The room left on ``path``'s filesystem now, as this user may use it (root may use the
    blocks reserved for it): ``full`` under DISK_FULL_BYTES. A quota is not seen here: the
    supervisor's own count of failed writes says that one."""
    try:
        info = os.statvfs(path)
    except OSError:
        return {"full": False, "free_bytes": None}
    blocks = info.f_bfree if os.geteuid() == 0 else info.f_bavail
    free = blocks * info.f_frsize
    return {"full": free < DISK_FULL_BYTES, "free_bytes": free}


ENV_FILE_NAME = re.compile(r"\.probe-env-[0-9a-f]+\.json")


def remove_env_file(path: str | None) -> None:
    """The probe's environment file (0600, it may hold secrets) never outlives the command."""
    if path and ENV_FILE_NAME.fullmatch(os.path.basename(path)):
        with contextlib.suppress(OSError):
            os.unlink(path)


def env_file_argument(argv: Sequence[str]) -> str | None:
    """``--env-file``'s value, found before argparse runs: removed even when the parsing of the
    rest fails (a model path "--help" once left it behind with the server's environment)."""
    for index, arg in enumerate(argv):
        if arg == "--env-file" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--env-file="):
            return arg.split("=", 1)[1]
    return None
