"""A host over SSH (paramiko): one connection per ``SSHTransport``, host keys always checked.

Import this module lazily (``import paramiko`` costs ~170 ms). How a host is reached is worked out
by :mod:`.ssh_route` (ssh_config, ProxyJump, ProxyCommand) and the connection is made by
:mod:`.ssh_connect` (host keys, authentication); this module is the
:class:`~orchestrator.transport.Transport` over that connection:

- **Commands**: argv is joined by :func:`remote_command` (the only ``shlex.join``), run on a new
  channel of the shared connection; the remote login shell must be POSIX (sh, bash, zsh, dash).
  When that shell cannot start ``argv[0]`` (its exit 127 or 126, with its own message naming
  ``argv[0]``), ``run`` raises :class:`ProgramNotFound`, as :class:`LocalTransport` does.
- **Files** go over one SFTP session: atomic put (temp file chmod-ed before the first byte, then
  ``posix-rename@openssh.com``), ranged read, stat.
- **Trust on request** (``orch hosts trust``): :func:`fetch_host_key` asks the host for its key
  without logging in, :func:`pin_host_key` files it.

If the connection drops, the call in progress raises :class:`ConnectError` and the next call
connects again.
"""

from __future__ import annotations

import contextlib
import errno
import posixpath
import re
import secrets
import select
import shlex
import stat
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import paramiko

from orchestrator.errors import ConnectError, HostKeyError, ProgramNotFound, RemoteCommandError
from orchestrator.model import Host
from orchestrator.transport import CommandResult, expand_home, ssh_connect
from orchestrator.transport.known_hosts import KnownHosts, fingerprint, pin
from orchestrator.transport.ssh_route import DEFAULT_SSH_CONFIG, resolve
from orchestrator.transport.streams import LineQueue

_READ_CHUNK = 1 << 16

T = TypeVar("T")


def remote_command(argv: Sequence[str]) -> str:
    """The one place an argv becomes a command string: the SSH protocol carries a single string,
    which the remote login shell splits back into exactly these words."""
    if not argv:
        raise ValueError("empty argv")
    return shlex.join(argv)


# What a POSIX login shell says when it cannot start the program: dash ``sh: 1: NAME: not found``,
# bash ``bash: line 1: NAME: No such file or directory`` / ``NAME: command not found`` /
# ``NAME: Permission denied`` (126), zsh ``zsh:1: command not found: NAME``, mksh ``NAME:
# inaccessible or not found``. English only: under another locale the 127 stays a plain result.
_CANNOT_START = {
    "not found": (
        "command not found",
        "not found",
        "no such file or directory",
        "not a directory",
        "inaccessible or not found",
    ),
    "not executable": ("permission denied", "is a directory", "cannot execute"),
}


def program_not_started(program: str, returncode: int, stderr: bytes) -> str | None:
    """Why the remote shell could not start ``program`` ("not found", "not executable"), or None
    when it ran. The shell exits 127 (126: found but cannot be executed) with a last stderr line
    naming ``program`` itself. A program that did start may exit 127 too (``env``, ``timeout``
    and ``nohup`` do when *their* command is missing): its line names that other command, so it
    stays a plain result."""
    if returncode not in (126, 127):
        return None
    lines = stderr.decode("utf-8", "replace").strip().splitlines()
    if not lines:
        return None
    last = lines[-1].strip()
    name = re.escape(program)
    for reason, phrases in _CANNOT_START.items():
        said = "|".join(map(re.escape, phrases))
        if re.search(rf"(?:^|: )(?:{name}: (?:{said})|(?:{said}): {name}$)", last, re.IGNORECASE):
            return reason
    return None


# --------------------------------------------------------------------------- the transport


def _exec_without_waiting(channel: paramiko.Channel, command: str) -> None:
    """``channel.exec_command`` without waiting for the server's reply to the request: OpenSSH's
    client does not wait either. SSH keeps a connection's messages in order, so stdin sent next
    reaches the command, and a refusal closes the channel (paramiko's ``_request_failed``),
    which the reader sees. One round trip saved on every command (20-150 ms to a GPU box).
    The message is ``exec_command``'s own (RFC 4254 6.5), built with paramiko's public Message."""
    message = paramiko.Message()
    message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    message.add_int(channel.remote_chanid)
    message.add_string("exec")
    message.add_boolean(True)  # the reply still comes; nothing blocks on it
    message.add_string(command)
    transport = channel.get_transport()
    if transport is None:
        raise EOFError("the connection closed")
    send: Callable[[paramiko.Message], None] = transport._send_user_message  # type: ignore[attr-defined]
    send(message)  # exec_command's own send, minus its wait


class SSHStream:
    """A remote command's stdout on its own channel, line by line (``Transport.stream``): the
    host says what happens when it happens, no round trip per look."""

    def __init__(self, channel: paramiko.Channel, host: str, argv: tuple[str, ...]) -> None:
        self._channel = channel
        self._host = host
        self._argv = argv
        self._lines = LineQueue(channel.recv, "orch-ssh-stream")
        self._err = bytearray()

    def readline(self, timeout: float) -> bytes | None:
        line = self._lines.readline(timeout)
        if line == b"":
            reason = program_not_started(self._argv[0], self.returncode or 0, self.stderr)
            if reason is not None:
                raise ProgramNotFound(self._argv[0], self._host, reason)
        return line

    def close(self) -> None:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            self._channel.close()

    def finish_stdin(self, data: bytes) -> None:
        try:
            if data:
                self._channel.sendall(data)
            self._channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the command ended without reading it all: its exit status says what it did

    @property
    def returncode(self) -> int | None:
        if not self._lines.ended:
            return None
        if not self._channel.status_event.wait(5.0):
            return None
        return int(self._channel.exit_status)

    @property
    def stderr(self) -> bytes:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            while self._channel.recv_stderr_ready():
                self._err += self._channel.recv_stderr(_READ_CHUNK)
        return bytes(self._err)


class SSHTransport:
    """The :class:`~orchestrator.transport.Transport` of a remote host, over one SSH connection."""

    def __init__(
        self,
        host: Host,
        *,
        known_hosts_files: Sequence[Path],
        ssh_config: Path | None = DEFAULT_SSH_CONFIG,
        connect_timeout: float = 10.0,
        keepalive_s: int = 15,
    ) -> None:
        if host.address is None:
            raise ValueError(f"host {host.name} has no address: use LocalTransport")
        self._host = host
        self._known_hosts_files = tuple(known_hosts_files)
        self._ssh_config = ssh_config
        self._connect_timeout = connect_timeout
        self._keepalive_s = keepalive_s
        self._lock = threading.RLock()
        self._connection: ssh_connect.Connection | None = None
        self._sftp: paramiko.SFTPClient | None = None
        self._home: str | None = None
        self.connections_opened = 0  # how many SSH connections this object has made
        self.commands_run = 0  # exec channels opened (one round trip each, at least)
        self.file_operations = 0  # SFTP operations (puts, reads, stats)

    def __enter__(self) -> SSHTransport:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    @property
    def host(self) -> Host:
        return self._host

    # ---- connection

    def connect(self) -> None:
        """Connect now (otherwise the first call does); a no-op while connected."""
        self._transport()

    def _transport(self) -> paramiko.Transport:
        with self._lock:
            if self._connection is not None and self._connection.transport.is_active():
                return self._connection.transport
            self._drop()
            route = resolve(self._host, self._ssh_config)
            known = KnownHosts.load([*self._known_hosts_files, *route.known_hosts_files])
            self._connection = ssh_connect.connect(
                self._host, route, known, self._connect_timeout, self._keepalive_s
            )
            self.connections_opened += 1
            return self._connection.transport

    def _drop(self) -> None:
        if self._sftp is not None:
            with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
                self._sftp.close()
        self._sftp = None
        if self._connection is not None:
            self._connection.close()
        self._connection = None

    def close(self) -> None:
        with self._lock:
            self._drop()

    def _lost(self, doing: str, exc: BaseException | None = None) -> ConnectError:
        reason = f": {exc}" if exc is not None and str(exc) else ""
        return ConnectError(
            f"{self._host.name}: connection to {self._host.address} lost while {doing}{reason}",
            "check the host and the network; orch connects again on the next command",
        )

    def connected(self) -> bool:
        """The connection is up (a kept connection's server ends when it is not)."""
        return self._connected()

    def _connected(self) -> bool:
        return self._connection is not None and self._connection.transport.is_active()

    # ---- commands

    def _exec(self, argv: tuple[str, ...]) -> paramiko.Channel:
        command = remote_command(argv)
        transport = self._transport()
        self.commands_run += 1
        try:
            channel = transport.open_session(timeout=self._connect_timeout)
            channel.set_combine_stderr(False)
            _exec_without_waiting(channel, command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            if not self._connected():
                raise self._lost(f"starting {argv[0]}", exc) from exc
            raise ConnectError(
                f"{self._host.name}: the host refused to run a command: {exc}",
                "too many sessions at once? (sshd MaxSessions)",
            ) from exc
        return channel

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> CommandResult:
        argv = tuple(argv)
        deadline = time.monotonic() + timeout
        channel = self._exec(argv)
        try:
            result = self._collect(channel, argv, stdin or b"", deadline, timeout)
        finally:
            channel.close()
        reason = program_not_started(argv[0], result.returncode, result.stderr)
        if reason is not None:
            shell_said = result.stderr.decode("utf-8", "replace")
            raise ProgramNotFound(argv[0], self._host.name, reason) from RemoteCommandError(
                argv, result.returncode, shell_said
            )
        return result

    def _collect(
        self,
        channel: paramiko.Channel,
        argv: tuple[str, ...],
        stdin: bytes,
        deadline: float,
        timeout: float,
    ) -> CommandResult:
        stdout, stderr = bytearray(), bytearray()
        pending = memoryview(stdin)
        if not pending:
            channel.shutdown_write()
        ready = channel.fileno()  # readable while stdout or stderr data (or EOF) waits
        try:
            while True:
                # Interleave stdin with reading: a child that writes before it reads must
                # never block us, nor we it.
                while pending and channel.send_ready():
                    if channel.closed:
                        pending = pending[:0]  # the child is gone without reading it all
                        break
                    sent = channel.send(bytes(pending[:_READ_CHUNK]))
                    pending = pending[sent:]
                    if not pending:
                        channel.shutdown_write()
                while channel.recv_ready():
                    stdout += channel.recv(_READ_CHUNK)
                while channel.recv_stderr_ready():
                    stderr += channel.recv_stderr(_READ_CHUNK)
                if channel.closed or (channel.eof_received and not pending):
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RemoteCommandError(argv, 124, f"timed out after {timeout:g} s")
                select.select([ready], [], [], min(remaining, 0.05) if pending else remaining)
            # Data arrives before EOF, so both buffers are complete; drain what is left.
            while channel.recv_ready():
                stdout += channel.recv(_READ_CHUNK)
            while channel.recv_stderr_ready():
                stderr += channel.recv_stderr(_READ_CHUNK)
            if not channel.status_event.wait(max(0.0, deadline - time.monotonic())):
                raise RemoteCommandError(argv, 124, f"timed out after {timeout:g} s")
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(f"running {argv[0]}", exc) from exc
        status = channel.exit_status
        if status == -1 and not self._connected():
            raise self._lost(f"running {argv[0]}")
        # -1 with the connection up: killed by a signal (paramiko does not expose exit-signal).
        return CommandResult(argv, status, bytes(stdout), bytes(stderr))

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None, hold_stdin: bool = False
    ) -> SSHStream:
        argv = tuple(argv)
        channel = self._exec(argv)
        try:
            if stdin:  # sent behind the exec request, once sshd opens the channel's window
                channel.sendall(stdin)
            if hold_stdin:  # the rest is sent, and stdin closed, by finish_stdin
                return SSHStream(channel, self._host.name, argv)
            channel.shutdown_write()
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(f"starting {argv[0]}", exc) from exc
        return SSHStream(channel, self._host.name, argv)

    # ---- files

    def _sftp_client(self) -> paramiko.SFTPClient:
        with self._lock:
            transport = self._transport()
            if self._sftp is None:
                try:
                    self._sftp = paramiko.SFTPClient.from_transport(transport)
                except (paramiko.SSHException, OSError, EOFError) as exc:
                    if not self._connected():
                        raise self._lost("opening SFTP", exc) from exc
                    raise ConnectError(
                        f"{self._host.name}: the host refused an SFTP session: {exc}",
                        "does its sshd_config have a `Subsystem sftp` line?",
                    ) from exc
                if self._sftp is None:  # pragma: no cover - from_transport failed quietly
                    raise ConnectError(f"{self._host.name}: the host refused an SFTP session")
            return self._sftp

    def _file_op(self, doing: str, op: Callable[[paramiko.SFTPClient], T]) -> T:
        """Run an SFTP operation. File errors stay OSError (FileNotFoundError, PermissionError),
        as with LocalTransport; a lost connection becomes ConnectError."""
        sftp = self._sftp_client()
        self.file_operations += 1
        try:
            return op(sftp)
        except paramiko.SSHException as exc:
            raise self._lost(doing, exc) from exc
        except EOFError as exc:  # an SFTP EOF status, or the channel ended under us
            if not self._connected():
                raise self._lost(doing, exc) from exc
            raise OSError(errno.EIO, f"{doing}: unexpected end of file") from exc
        except OSError as exc:
            if not self._connected():
                raise self._lost(doing, exc) from exc
            if exc.errno is None:  # SFTP "failure" without an errno: name the path at least
                raise OSError(errno.EIO, f"{doing}: {exc}") from exc
            raise

    def _path(self, path: str) -> str:
        return expand_home(path, self.home()) if path.startswith("~") else path

    def put(self, data: bytes, path: str, mode: int) -> None:
        target = self._path(path)
        self._file_op(f"writing {target}", lambda sftp: _put(sftp, data, target, mode))

    def read(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        target = self._path(path)
        return self._file_op(f"reading {target}", lambda sftp: _read(sftp, target, offset, limit))

    def size(self, path: str) -> int | None:
        target = self._path(path)
        try:
            attrs = self._file_op(f"checking {target}", lambda sftp: sftp.stat(target))
        except FileNotFoundError:
            return None
        return attrs.st_size

    def home(self) -> str:
        if self._home is None:
            self._home = self._file_op("asking for the home directory", lambda s: s.normalize("."))
        return self._home


def _makedirs(sftp: paramiko.SFTPClient, directory: str) -> None:
    if directory in ("", "/", "."):
        return
    try:
        attrs = sftp.stat(directory)
    except FileNotFoundError:
        pass
    else:
        if attrs.st_mode is not None and not stat.S_ISDIR(attrs.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "not a directory", directory)
        return
    _makedirs(sftp, posixpath.dirname(directory.rstrip("/")))
    try:
        sftp.mkdir(directory, 0o700)
    except OSError:
        attrs = sftp.stat(directory)  # created meanwhile by someone else? then fine
        if attrs.st_mode is None or not stat.S_ISDIR(attrs.st_mode):
            raise


def _put(sftp: paramiko.SFTPClient, data: bytes, target: str, mode: int) -> None:
    directory, name = posixpath.split(target)
    if not name:
        raise IsADirectoryError(errno.EISDIR, "is a directory", target)
    _makedirs(sftp, directory)
    temp = posixpath.join(directory, f".{name}.{secrets.token_hex(6)}.tmp")
    try:
        with sftp.open(temp, "wbx") as handle:  # x: never follow or reuse an existing name
            handle.chmod(mode)  # before the first byte: a secret is never world-readable
            handle.set_pipelined(True)
            handle.write(data)
        sftp.posix_rename(temp, target)
    except BaseException:
        with contextlib.suppress(OSError, EOFError, paramiko.SSHException):
            sftp.remove(temp)
        raise


def _read(sftp: paramiko.SFTPClient, target: str, offset: int, limit: int) -> bytes:
    with sftp.open(target, "rb") as handle:
        size = handle.stat().st_size or 0
        count = min(limit, size - offset)
        if count <= 0:
            return b""
        return b"".join(handle.readv([(offset, count)]))


# --------------------------------------------------------------------------- trust on request


@dataclass(frozen=True)
class ScannedKey:
    """A host key as the host presented it, not yet trusted: for ``orch hosts trust``."""

    known_hosts_name: str  # ``addr`` or ``[addr]:port``: the name it is filed under
    key_type: str
    fingerprint: str  # SHA256:...
    key_base64: str

    @property
    def known_hosts_line(self) -> str:
        return f"{self.known_hosts_name} {self.key_type} {self.key_base64}\n"


def fetch_host_key(
    host: Host,
    *,
    ssh_config: Path | None = DEFAULT_SSH_CONFIG,
    connect_timeout: float = 10.0,
    known_hosts_files: Sequence[Path] = (),
) -> ScannedKey:
    """Ask the host for its key without logging in. Jump hosts on the way must already be
    trusted (``known_hosts_files``): they are logged into, the target is not."""
    route = resolve(host, ssh_config)
    known = KnownHosts.load([*known_hosts_files, *route.known_hosts_files])
    sock, via, proxy = ssh_connect.socket_to_target(route, known, host, connect_timeout, 0)
    transport = paramiko.Transport(sock)
    try:
        transport.start_client(timeout=connect_timeout)
        key = transport.get_remote_server_key()
    except (paramiko.SSHException, OSError, EOFError) as exc:
        raise ConnectError(
            f"{host.name}: SSH handshake with {route.target.label} failed: {exc}",
            "is that port an SSH server?",
        ) from exc
    finally:
        transport.close()
        for jump in reversed(via):
            jump.close()
        if proxy is not None:
            proxy.close()
    blob = key.asbytes()
    return ScannedKey(
        known_hosts_name=route.target.known_hosts_name,
        key_type=key.get_name(),
        fingerprint=fingerprint(blob),
        key_base64=key.get_base64(),
    )


def pin_host_key(known_hosts_file: Path, scanned: ScannedKey) -> bool:
    """Append the scanned key to ``known_hosts_file`` unless it is there already; see
    :func:`orchestrator.transport.known_hosts.pin`. Returns whether a line was added."""
    try:
        return pin(known_hosts_file, scanned.known_hosts_name, scanned.key_type, scanned.key_base64)
    except OSError as exc:
        raise HostKeyError(
            f"cannot write {known_hosts_file}: {exc.strerror or exc}",
            "check that file's permissions",
        ) from exc


__all__ = [
    "SSHTransport",
    "ScannedKey",
    "fetch_host_key",
    "pin_host_key",
    "program_not_started",
    "remote_command",
]
