"""A host's SSH connection kept open between orch commands (what OpenSSH's ControlPersist does),
when the host asks for it: ``hosts.NAME.persist_s``.

On a host 20-150 ms away a new connection costs its handshake (TCP, key exchange, host key,
authentication: about 4 round trips) before the first command. With ``persist_s`` set, the
first command that reaches the host starts a small process of its own (``python -m
orchestrator.transport.mux``, detached: ``server.py``) which connects exactly as every command
does (the same known_hosts files and host-key rules, the same identity: it *is* an
``SSHTransport``) and then serves that connection on a Unix socket. Commands within
``persist_s`` of the last one send their operations there (run, stream, put, read, size, home)
and pay no handshake; it exits once idle that long, or when its connection is lost. A command
that cannot use it (none runs, it is going away, its directory is not safe) connects by itself,
as without ``persist_s``. This module is the client's side (``MuxTransport``), where the socket
lives, and the wire both sides speak.

Who may use it: the socket lives in a directory owned by this user and closed to everyone else
(0700, not a symlink, checked before every use), is created 0600, and each client's uid is
checked against the server's (SO_PEERCRED, where the kernel has it). Anyone who could talk to
it could run commands on the host as this user: exactly what these checks keep to this user.
What crosses the socket (a launch's environment, secrets included) is never logged.

The wire: one request per connection, a JSON line; the answer is JSON lines (one, or for
``stream`` one per line of output, then the end).
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import errno
import hashlib
import json
import os
import queue
import socket
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from orchestrator.errors import ConnectError, ProgramNotFound, RemoteCommandError
from orchestrator.model import Host
from orchestrator.transport import CommandResult, Stream, Transport

MUX_DIR_ENV = "ORCH_MUX_DIR"  # where the sockets live (tests); else $XDG_RUNTIME_DIR/orch-mux
START_TIMEOUT_S = 30.0  # the server's own connection: a handshake, a host key, authentication
_SUN_PATH_MAX = 100  # sockaddr_un holds 108 bytes on Linux, 104 on macOS
REQUEST_WAIT_S = 5.0  # a client's time to send its request once connected: silence is no use


# -- where: a private directory, a socket per connection identity --------------------------------


def mux_dir() -> Path:
    configured = os.environ.get(MUX_DIR_ENV)
    if configured:
        return Path(configured)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return Path(runtime) / "orch-mux"
    return Path("/tmp") / f"orch-mux-{os.getuid()}"  # noqa: S108 - checked private below


def private_dir(path: Path) -> bool:
    """``path`` exists or is created as a directory only this user can use: owned by us, mode
    0700, not a symlink. False: it is someone else's, or open to others; it is never used."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(0o700)
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return (
        stat.S_ISDIR(info.st_mode)
        and info.st_uid == os.getuid()
        and stat.S_IMODE(info.st_mode) & 0o077 == 0
    )


def identity(host: Host, known_hosts_files: Sequence[Path]) -> str:
    """What makes two commands' connections the same one: every field of the host (address,
    port, user, identity, known_hosts ...) and the known_hosts files orch checks keys with."""
    files = [str(p) for p in known_hosts_files]
    document = {"host": dataclasses.asdict(host), "known_hosts": files}
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:24]


def socket_path(host: Host, known_hosts_files: Sequence[Path]) -> Path | None:
    """The socket of this connection, in a private directory; None when there is none to use."""
    directory = mux_dir()
    path = directory / f"{identity(host, known_hosts_files)}.sock"
    if len(os.fsencode(path)) > _SUN_PATH_MAX or not private_dir(directory):
        return None
    return path


# -- the client ----------------------------------------------------------------------------------


def open_persistent(
    host: Host, known_hosts_files: Sequence[Path], direct: Callable[[], Transport]
) -> MuxTransport | None:
    """The host's kept connection, started when none runs; None when it cannot be had (then
    the caller connects by itself, and says why its own connection failed, if it does).
    ``direct``: this command's own connection, should the kept one go away meanwhile."""
    path = socket_path(host, known_hosts_files)
    if path is None:
        return None
    transport = MuxTransport(host, path, direct)
    if transport.alive():
        return transport
    config = {
        "host": dataclasses.asdict(host),
        "known_hosts": [str(p) for p in known_hosts_files],
        "socket": str(path),
        "persist_s": host.persist_s,
    }
    try:
        server = subprocess.Popen(
            [sys.executable, "-m", "orchestrator.transport.mux"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
        )
    except OSError:
        return None
    if server.stdin is None or server.stdout is None:  # pragma: no cover - PIPEs above
        return None
    with contextlib.suppress(OSError):
        server.stdin.write(json.dumps(config).encode())
        server.stdin.close()
    said = _read_line(server.stdout, START_TIMEOUT_S)
    server.stdout.close()
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=5.0)  # it forked the server and exited
    if said is None or not said.get("ready"):
        return None  # connecting by itself says what went wrong (a host key, authentication)
    return transport if transport.alive() else None


def _read_line(pipe: Any, timeout: float) -> dict[str, Any] | None:
    import select

    ready, _, _ = select.select([pipe], [], [], timeout)
    if not ready:
        return None
    try:
        document = json.loads(pipe.readline() or b"null")
    except ValueError:
        return None
    return document if isinstance(document, dict) else None


class MuxTransport:
    """The :class:`~orchestrator.transport.Transport` of a host through its kept connection.
    Should the kept connection be gone before an operation is sent (it went idle, its host
    dropped it), that operation and the later ones go over a connection of this command's own
    (``direct``): nothing had been asked, so nothing is asked twice."""

    def __init__(self, host: Host, path: Path, direct: Callable[[], Transport]) -> None:
        self._host = host
        self._path = path
        self._make_direct = direct
        self._direct: Transport | None = None
        self.connections_opened = 0  # the kept connection was opened by its server
        self.commands_run = 0
        self.file_operations = 0

    @property
    def host(self) -> Host:
        return self._host

    def alive(self) -> bool:
        client = self._connect()
        if client is None:
            return False
        try:
            return self._exchange(client, {"op": "ping"}, 5.0).get("pong") is True
        except ConnectError:
            return False

    def _connect(self) -> socket.socket | None:
        if self._direct is not None or not private_dir(self._path.parent):
            return None
        client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            client.connect(str(self._path))
        except OSError:
            client.close()
            return None
        return client

    def _fallback(self) -> Transport:
        if self._direct is None:
            self._direct = self._make_direct()
        return self._direct

    def _exchange(
        self, client: socket.socket, request: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        with client:
            client.settimeout(timeout + 30.0)
            try:
                client.sendall(json.dumps(request).encode() + b"\n")
                with client.makefile("rb") as replies:
                    line = replies.readline()
            except OSError as exc:
                raise ConnectError(
                    f"{self._host.name}: the kept connection failed: {exc}",
                    "run the command again: it connects by itself",
                ) from exc
        return _answer(self._host.name, line)

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> CommandResult:
        client = self._connect()
        if client is None:
            return self._fallback().run(argv, stdin=stdin, timeout=timeout)
        self.commands_run += 1
        request = {"op": "run", "argv": list(argv), "stdin": b64(stdin or b""), "timeout": timeout}
        answer = self._exchange(client, request, timeout)
        return CommandResult(
            tuple(argv),
            int(answer["returncode"]),
            unb64(answer["stdout"]),
            unb64(answer["stderr"]),
        )

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None, hold_stdin: bool = False
    ) -> Stream:
        client = self._connect()
        if client is None:
            return self._fallback().stream(argv, stdin=stdin, hold_stdin=hold_stdin)
        self.commands_run += 1
        try:
            request = {
                "op": "stream",
                "argv": list(argv),
                "stdin": b64(stdin or b""),
                "hold_stdin": hold_stdin,
            }
            client.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            client.close()
            raise ConnectError(f"{self._host.name}: the kept connection failed: {exc}") from exc
        return MuxStream(client, self._host.name)

    def put(self, data: bytes, path: str, mode: int) -> None:
        client = self._connect()
        if client is None:
            self._fallback().put(data, path, mode)
            return
        self.file_operations += 1
        request = {"op": "put", "data": b64(data), "path": path, "mode": mode}
        self._exchange(client, request, 60.0)

    def read(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        client = self._connect()
        if client is None:
            return self._fallback().read(path, offset, limit)
        self.file_operations += 1
        request = {"op": "read", "path": path, "offset": offset, "limit": limit}
        return unb64(self._exchange(client, request, 60.0)["data"])

    def size(self, path: str) -> int | None:
        client = self._connect()
        if client is None:
            return self._fallback().size(path)
        self.file_operations += 1
        size = self._exchange(client, {"op": "size", "path": path}, 60.0).get("size")
        return int(size) if size is not None else None

    def home(self) -> str:
        client = self._connect()
        if client is None:
            return self._fallback().home()
        return str(self._exchange(client, {"op": "home"}, 60.0)["home"])

    def close(self) -> None:
        """The kept connection stays for the next command; one of this command's own closes."""
        if self._direct is not None:
            self._direct.close()


class MuxStream:
    """``Transport.stream`` through the kept connection: the server relays the channel's lines."""

    def __init__(self, client: socket.socket, host: str) -> None:
        self._client = client
        self._host = host
        self._lines: queue.Queue[bytes | BaseException] = queue.Queue()
        self._returncode: int | None = None
        self._stderr = b""
        self._done = threading.Event()
        threading.Thread(target=self._pump, name="orch-mux-stream", daemon=True).start()

    def _pump(self) -> None:
        try:
            with self._client.makefile("rb") as replies:
                for raw in replies:
                    document = json.loads(raw)
                    if "line" in document:
                        self._lines.put(unb64(document["line"]))
                        continue
                    if "error" in document:
                        self._lines.put(_error(self._host, document["error"]))
                    else:
                        code = document.get("returncode")
                        self._returncode = int(code) if code is not None else None
                        self._stderr = unb64(document.get("stderr", ""))
                    break
        except (OSError, ValueError) as exc:
            self._lines.put(ConnectError(f"{self._host}: the kept connection is gone: {exc}"))
        finally:
            self._done.set()
            self._lines.put(b"")

    def readline(self, timeout: float) -> bytes | None:
        try:
            line = self._lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if isinstance(line, BaseException):
            self._lines.put(b"")
            raise line
        if line == b"":
            self._lines.put(b"")  # every later call sees the end too
        return line

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._client.shutdown(socket.SHUT_RDWR)
        self._client.close()

    def finish_stdin(self, data: bytes) -> None:
        """The held stdin, as the request's second line: the server sends it on the channel."""
        with contextlib.suppress(OSError):
            self._client.sendall(json.dumps({"stdin": b64(data)}).encode() + b"\n")

    @property
    def returncode(self) -> int | None:
        return self._returncode if self._done.is_set() else None

    @property
    def stderr(self) -> bytes:
        return self._stderr


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _answer(host: str, line: bytes) -> dict[str, Any]:
    if not line:
        raise ConnectError(f"{host}: the kept connection closed without an answer")
    document = json.loads(line)
    if not isinstance(document, dict):
        raise ConnectError(f"{host}: the kept connection answered something else")
    if "error" in document:
        raise _error(host, document["error"])
    return document


# Errors cross the socket as what the Transport protocol raises, so callers cannot tell.
def _error(host: str, error: dict[str, Any]) -> BaseException:
    kind, message = error.get("type"), str(error.get("message", ""))
    if kind == "ProgramNotFound":
        return ProgramNotFound(str(error["program"]), host, str(error["reason"]))
    if kind == "RemoteCommandError":
        return RemoteCommandError(
            tuple(error["argv"]), int(error["returncode"]), str(error["stderr"])
        )
    if kind == "FileNotFoundError":
        return FileNotFoundError(errno.ENOENT, message)
    if kind == "OSError":
        return OSError(int(error.get("errno") or errno.EIO), message)
    return ConnectError(message, error.get("hint"))


def encode_error(exc: BaseException) -> dict[str, Any]:
    if isinstance(exc, ProgramNotFound):
        return {"type": "ProgramNotFound", "program": exc.program, "reason": exc.reason}
    if isinstance(exc, RemoteCommandError):
        return {
            "type": "RemoteCommandError",
            "argv": list(exc.argv),
            "returncode": exc.returncode,
            "stderr": exc.stderr_tail,
        }
    if isinstance(exc, FileNotFoundError):
        return {"type": "FileNotFoundError", "message": str(exc)}
    if isinstance(exc, ConnectError):
        return {"type": "ConnectError", "message": exc.message, "hint": exc.hint}
    if isinstance(exc, OSError):
        return {"type": "OSError", "errno": exc.errno, "message": exc.strerror or str(exc)}
    return {"type": "ConnectError", "message": f"{type(exc).__name__}: {exc}"}
