"""This machine, without SSH: ``host: local``."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Generator, Sequence
from pathlib import Path

from orchestrator.errors import RemoteCommandError
from orchestrator.model import Host
from orchestrator.transport import CommandResult


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
        except FileNotFoundError as exc:
            raise RemoteCommandError(argv, 127, f"{argv[0]}: command not found") from exc
        except subprocess.TimeoutExpired as exc:
            raise RemoteCommandError(argv, 124, f"timed out after {timeout:g} s") from exc
        return CommandResult(argv, done.returncode, done.stdout, done.stderr)

    def stream(
        self, argv: Sequence[str], *, timeout: float | None = None
    ) -> Generator[bytes, None, None]:
        argv = tuple(argv)
        try:
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
        except FileNotFoundError as exc:
            raise RemoteCommandError(argv, 127, f"{argv[0]}: command not found") from exc
        assert process.stdout is not None  # noqa: S101 - PIPE was asked for
        try:
            yield from process.stdout
        finally:
            if process.poll() is None:
                process.terminate()
            process.wait(timeout=timeout)
            process.stdout.close()
            if process.stderr is not None:
                process.stderr.close()

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
