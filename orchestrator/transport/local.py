"""This machine, without SSH: ``host: local``."""

from __future__ import annotations

import contextlib
import errno
import os
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

from orchestrator.errors import ProgramNotFound, RemoteCommandError
from orchestrator.model import Host
from orchestrator.transport import CommandResult
from orchestrator.transport.streams import LineQueue

# exec's errors that mean "this program cannot be started", in the words SSHTransport reports
# the remote shell's refusal with: a missing file (or a path through a file), or one that is
# there but not executable (mode, a directory, not a binary or script this kernel runs).
_CANNOT_START = {
    errno.ENOENT: "not found",
    errno.ENOTDIR: "not found",
    errno.EACCES: "not executable",
    errno.ENOEXEC: "not executable",
}


class LocalStream:
    """A local process's stdout, line by line (``Transport.stream``)."""

    def __init__(self, process: subprocess.Popen[bytes]) -> None:
        if process.stdout is None or process.stderr is None:
            raise ValueError("a LocalStream reads a process started with stdout/stderr=PIPE")
        self._process = process
        out, err = process.stdout.fileno(), process.stderr.fileno()
        self._lines = LineQueue(lambda size: os.read(out, size), "orch-local-stream")
        self._stderr = LineQueue(lambda size: os.read(err, size), "orch-local-stream-err")
        self._err = b""

    def readline(self, timeout: float) -> bytes | None:
        return self._lines.readline(timeout)

    def finish_stdin(self, data: bytes) -> None:
        if self._process.stdin is None:
            raise ValueError("this stream's stdin was not held open")
        with contextlib.suppress(BrokenPipeError):  # it ended without reading: its exit says
            self._process.stdin.write(data)
        with contextlib.suppress(BrokenPipeError):
            self._process.stdin.close()

    def close(self) -> None:
        if self._process.stdin is not None and not self._process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self._process.stdin.close()
        if self._process.poll() is None:
            self._process.kill()
        self._process.wait()
        self._lines.join(1.0)  # the pipes end with the process: the readers are done
        self._stderr.join(1.0)
        for pipe in (self._process.stdout, self._process.stderr):
            if pipe is not None:
                pipe.close()

    @property
    def returncode(self) -> int | None:
        return self._process.poll() if self._lines.ended else None

    @property
    def stderr(self) -> bytes:
        while (line := self._stderr.readline(0)) is not None and line:
            self._err += line
        return self._err


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

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None, hold_stdin: bool = False
    ) -> LocalStream:
        argv = tuple(argv)
        try:
            process = subprocess.Popen(
                argv,
                stdin=subprocess.PIPE if stdin or hold_stdin else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
        except OSError as exc:
            reason = _CANNOT_START.get(exc.errno) if exc.errno is not None else None
            if reason is None:
                raise
            raise ProgramNotFound(argv[0], self._host.name, reason) from exc
        stream = LocalStream(process)
        if stdin and not hold_stdin:
            stream.finish_stdin(stdin)
        elif stdin and process.stdin is not None:  # held: the rest comes with finish_stdin
            with contextlib.suppress(BrokenPipeError):
                process.stdin.write(stdin)
                process.stdin.flush()
        return stream

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
