"""One way to reach a host, local or over SSH: run an argv, put a file, read a file.

Commands stay argv tuples all the way down. ``LocalTransport`` runs them with subprocess and no
shell; ``SSHTransport`` joins them with ``shlex.join`` in exactly one place (the SSH protocol
carries one command string, which the remote login shell splits back). Every test that is not
about SSH itself runs against both.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from orchestrator.errors import RemoteCommandError
from orchestrator.model import Host


@dataclass(frozen=True)
class CommandResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: bytes
    stderr: bytes

    def check(self, hint: str | None = None) -> CommandResult:
        if self.returncode != 0:
            raise RemoteCommandError(
                self.argv, self.returncode, self.stderr.decode("utf-8", "replace"), hint
            )
        return self


class Stream(Protocol):
    """A command whose output is read as it comes (``Transport.stream``)."""

    def readline(self, timeout: float) -> bytes | None:
        """The next line of stdout (with its newline; the last may lack it), b"" once it
        ended, None when no line came within ``timeout`` seconds."""
        ...

    def close(self) -> None:
        """Stop reading; the command is ended (its channel closed, or the process killed)."""
        ...

    def finish_stdin(self, data: bytes) -> None:
        """Send ``data`` on the command's stdin, then its end (a stream opened with
        ``hold_stdin``: the command started while what it reads was still being decided)."""
        ...

    @property
    def returncode(self) -> int | None:
        """The exit status once the command ended and its output was read, else None."""
        ...

    @property
    def stderr(self) -> bytes:
        """What it wrote to stderr (complete once it ended)."""
        ...


class Transport(Protocol):
    """What every stage after render needs from a host."""

    @property
    def host(self) -> Host: ...

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> CommandResult:
        """Run ``argv`` (no shell on our side) and wait for it. Raises ProgramNotFound when
        ``argv[0]`` cannot be started (missing, or not executable), RemoteCommandError 124 on
        timeout; any other exit status is the result's ``returncode``."""
        ...

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None, hold_stdin: bool = False
    ) -> Stream:
        """Start ``argv`` (no shell on our side) and read its stdout line by line as it comes:
        one command, no round trip per look. ``stdin`` is sent with the command, then closed;
        with ``hold_stdin`` it is sent and stdin stays open until ``Stream.finish_stdin``.
        Raises ProgramNotFound like ``run``."""
        ...

    def put(self, data: bytes, path: str, mode: int) -> None:
        """Write ``data`` to ``path`` atomically (temp file + rename), created with ``mode``
        before any byte is written; parent directories are created (0700)."""
        ...

    def read(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        """Up to ``limit`` bytes of ``path`` from ``offset``; b"" at or past the end.
        Raises FileNotFoundError when the file does not exist."""
        ...

    def size(self, path: str) -> int | None:
        """The file's size, or None when it does not exist."""
        ...

    def home(self) -> str:
        """The login user's home directory on the host (for ``~`` in workdirs)."""
        ...

    def close(self) -> None: ...


def expand_home(path: str, home: str) -> str:
    """``~/x`` -> ``<home>/x``: argv is not run through a shell, so orch expands it itself."""
    if path == "~":
        return home
    if path.startswith("~/"):
        return home.rstrip("/") + path[1:]
    return path
