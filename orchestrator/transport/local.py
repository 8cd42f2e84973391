"""This machine, without SSH: ``host: local``."""

from __future__ import annotations

import errno
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import ProgramNotFound, RemoteCommandError
from orchestrator.model import Host
from orchestrator.transport import CommandResult

# exec's errors that mean "this program cannot be started", in the words SSHTransport reports
# the remote shell's refusal with: a missing file (or a path through a file), or one that is
# there but not executable (mode, a directory, not a binary or script this kernel runs).
_CANNOT_START = {
    errno.ENOENT: "not found",
    errno.ENOTDIR: "not found",
    errno.EACCES: "not executable",
    errno.ENOEXEC: "not executable",
}


class LocalTransport:
    def __init__(self, host: Host) -> None:
        self._host = host

    @property
    def host(self) -> Host:
        return self._host

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> CommandResult:
        argv = tuple(argv)
        try:
            done = subprocess.run(
                argv,
                input=stdin if stdin is not None else b"",
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise RemoteCommandError(argv, 124, f"timed out after {timeout:g} s") from exc
        except OSError as exc:
            reason = _CANNOT_START.get(exc.errno) if exc.errno is not None else None
            if reason is None:
                raise
            raise ProgramNotFound(argv[0], self._host.name, reason) from exc
        return CommandResult(argv, done.returncode, done.stdout, done.stderr)

    def put(self, data: bytes, path: str, mode: int) -> None:
        target = Path(path).expanduser()
        target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
        try:
            os.fchmod(fd, mode)  # before the first byte: a secret is never world-readable
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            Path(temp).replace(target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def read(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        with Path(path).expanduser().open("rb") as handle:
            handle.seek(offset)
            return handle.read(limit)

    def size(self, path: str) -> int | None:
        try:
            return Path(path).expanduser().stat().st_size
        except FileNotFoundError:
            return None

    def home(self) -> str:
        return str(Path.home())

    def close(self) -> None:
        pass
