"""A host over SSH (paramiko): one connection per ``SSHTransport``, host keys always checked.

Import this module lazily (``import paramiko`` costs ~170 ms). What it does:

- **Addressing** as OpenSSH would: ``host.address`` is looked up in ``~/.ssh/config`` (HostName,
  Port, User, IdentityFile, IdentitiesOnly, UserKnownHostsFile, ProxyJump, ProxyCommand); the
  inventory's port, user and identity_file override what the config says. ssh-agent and the
  default ``~/.ssh/id_*`` keys are tried after the identity files (unless IdentitiesOnly yes).
- **ProxyJump**: each hop (``[user@]host[:port]``, comma-separated for several) is itself looked
  up in the config and host-key-checked like the target; the next hop is reached through a
  ``direct-tcpip`` channel of the previous one. A hop's own ProxyJump/ProxyCommand is not
  followed (OpenSSH would); list every hop in the target's ProxyJump instead.
- **ProxyCommand** runs as OpenSSH runs it (``sh -c 'exec <command>'``, the line is the user's own
  shell command) with its stdin/stdout on a socketpair. Tokens are expanded by paramiko, which
  takes ``%p`` from the config, not from an inventory port override.
- **Host keys** come from the given known_hosts files plus any UserKnownHostsFile in the config
  and are checked by :mod:`orchestrator.transport.known_hosts`; an unknown, changed or revoked
  key is refused with :class:`HostKeyError` before anything is sent. Never auto-added.
- **Commands**: argv is joined by :func:`remote_command` (the only ``shlex.join``), run on a new
  channel of the shared connection; the remote login shell must be POSIX (sh, bash, zsh, dash).
- **Files** go over one SFTP session: atomic put (temp file chmod-ed before the first byte, then
  ``posix-rename@openssh.com``), ranged read, stat.

If the connection drops, the call in progress raises :class:`ConnectError` and the next call
connects again. Not supported: host certificates (``@cert-authority``), ``Include`` and
``Match exec`` in ssh_config (paramiko's parser), password and keyboard-interactive login.
"""

from __future__ import annotations

import contextlib
import errno
import getpass
import itertools
import logging
import os
import posixpath
import secrets
import select
import shlex
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

import paramiko

from orchestrator.errors import (
    AuthError,
    ConnectError,
    HostKeyError,
    OrchError,
    RemoteCommandError,
)
from orchestrator.model import Host
from orchestrator.transport import CommandResult, expand_home
from orchestrator.transport.known_hosts import (
    SSH_PORT,
    KnownHosts,
    Verdict,
    fingerprint,
    known_hosts_name,
    pin,
    refusal,
)

# paramiko logs transport-thread failures at ERROR; without a handler Python's last-resort
# handler would print them on stderr next to orch's own message. Records still propagate to
# any handler the application configures.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

DEFAULT_SSH_CONFIG = Path("~/.ssh/config").expanduser()
_DEFAULT_KEY_FILES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")
_READ_CHUNK = 1 << 16
_STDERR_TAIL = 64 * 1024

T = TypeVar("T")


def remote_command(argv: Sequence[str]) -> str:
    """The one place an argv becomes a command string: the SSH protocol carries a single string,
    which the remote login shell splits back into exactly these words."""
    if not argv:
        raise ValueError("empty argv")
    return shlex.join(argv)


# --------------------------------------------------------------------------- addressing


@dataclass(frozen=True)
class Endpoint:
    """One SSH server on the way: where to connect, as whom, with which keys."""

    alias: str  # what was looked up: the inventory address or a ProxyJump hop
    hostname: str
    port: int
    user: str
    identity_files: tuple[str, ...]
    identities_only: bool = False

    @property
    def known_hosts_name(self) -> str:
        return known_hosts_name(self.hostname, self.port)

    @property
    def label(self) -> str:
        where = f"{self.hostname}:{self.port}"
        return where if self.alias == self.hostname else f"{self.alias} ({where})"


@dataclass(frozen=True)
class Route:
    """How to reach a host: through ``jumps`` in order (or ``proxy_command``), then ``target``."""

    target: Endpoint
    jumps: tuple[Endpoint, ...] = ()
    proxy_command: str | None = None
    known_hosts_files: tuple[Path, ...] = ()  # UserKnownHostsFile entries from the config


def resolve(host: Host, ssh_config: Path | None = DEFAULT_SSH_CONFIG) -> Route:
    """Apply ``ssh_config`` to ``host.address`` the way ``ssh`` would, inventory fields winning."""
    if host.address is None:
        raise ValueError(f"host {host.name} has no address: it is local, not SSH")
    config = _load_config(ssh_config, host)
    options = _lookup(config, host.address, host, ssh_config)
    target = _endpoint(host.address, options, host.user, host.port, host.identity_file)
    jumps: tuple[Endpoint, ...] = ()
    proxy_command: str | None = None
    keys = list(options)
    jump_spec = options.get("proxyjump")
    command = options.get("proxycommand")
    # The first of ProxyJump / ProxyCommand given wins, as in ssh_config(5).
    use_jump = jump_spec is not None and (
        command is None or keys.index("proxyjump") < keys.index("proxycommand")
    )
    if use_jump and jump_spec is not None and jump_spec.lower() != "none":
        jumps = tuple(
            _jump_endpoint(config, spec, host, ssh_config) for spec in jump_spec.split(",")
        )
    elif not use_jump and command is not None and command.lower() != "none":
        proxy_command = command
    known = tuple(Path(p).expanduser() for p in options.get("userknownhostsfile", "").split())
    return Route(target, jumps, proxy_command, known)


def _load_config(path: Path | None, host: Host) -> paramiko.SSHConfig:
    if path is None:
        return paramiko.SSHConfig()
    try:
        return paramiko.SSHConfig.from_path(str(path))
    except FileNotFoundError:
        return paramiko.SSHConfig()
    except (OSError, UnicodeDecodeError, paramiko.SSHException) as exc:
        raise ConnectError(
            f"{host.name}: cannot read ssh config {path}: {exc}",
            "fix that file, or check it with: ssh -G <address>",
        ) from exc


def _lookup(
    config: paramiko.SSHConfig, name: str, host: Host, path: Path | None
) -> paramiko.SSHConfigDict:
    try:
        return config.lookup(name)
    except (ImportError, paramiko.SSHException, OSError) as exc:
        # ImportError: "Match exec" needs the optional `invoke` package.
        raise ConnectError(
            f"{host.name}: cannot apply ssh config {path} to {name}: {exc}",
            "orch reads ssh_config with paramiko, which has no Include and needs `invoke` for "
            "Match exec; simplify the entry for this host",
        ) from exc


def _endpoint(
    alias: str,
    options: paramiko.SSHConfigDict,
    user: str | None,
    port: int | None,
    identity_file: str | None,
) -> Endpoint:
    identities: tuple[str, ...]
    if identity_file is not None:
        identities = (str(Path(identity_file).expanduser()),)
    else:
        # As OpenSSH: config IdentityFile lines that do not exist are skipped silently.
        identities = tuple(
            str(Path(p).expanduser())
            for p in options.get("identityfile", [])
            if Path(p).expanduser().exists()
        )
    return Endpoint(
        alias=alias,
        hostname=options.get("hostname", alias),
        port=port if port is not None else int(options.get("port", SSH_PORT)),
        user=user or options.get("user") or getpass.getuser(),
        identity_files=identities,
        identities_only=options.get("identitiesonly", "no").lower() == "yes",
    )


def _jump_endpoint(
    config: paramiko.SSHConfig, spec: str, host: Host, path: Path | None
) -> Endpoint:
    spec = spec.strip().removeprefix("ssh://")
    user: str | None = None
    if "@" in spec:
        user, _, spec = spec.rpartition("@")
    port: int | None = None
    address = spec
    if spec.startswith("["):  # [v6-address]:port
        address, _, rest = spec[1:].partition("]")
        if rest.startswith(":"):
            port = _port(rest[1:], host, spec)
    elif spec.count(":") == 1:
        address, _, number = spec.partition(":")
        port = _port(number, host, spec)
    options = _lookup(config, address, host, path)
    return _endpoint(address, options, user, port, None)


def _port(text: str, host: Host, spec: str) -> int:
    if not text.isdigit():
        raise ConnectError(f"{host.name}: bad port in ProxyJump {spec!r}")
    return int(text)


# --------------------------------------------------------------------------- connecting


def _tcp_socket(endpoint: Endpoint, timeout: float, host: Host) -> socket.socket:
    try:
        sock = socket.create_connection((endpoint.hostname, endpoint.port), timeout=timeout)
    except UnicodeError as exc:  # the IDNA codec refuses it (empty label, label too long)
        raise ConnectError(
            f"{host.name}: {endpoint.hostname!r} is not a valid host name",
            "check the host's address in the inventory (or HostName in ~/.ssh/config)",
        ) from exc
    except socket.gaierror as exc:
        raise ConnectError(
            f"{host.name}: cannot resolve {endpoint.hostname}: {exc.strerror}",
            "check the host's address in the inventory (or HostName in ~/.ssh/config)",
        ) from exc
    except TimeoutError as exc:
        raise ConnectError(
            f"{host.name}: connecting to {endpoint.label} timed out after {timeout:g} s",
            "is the host up, and is the port open in its firewall?",
        ) from exc
    except ConnectionRefusedError as exc:
        raise ConnectError(
            f"{host.name}: connection to {endpoint.label} refused",
            "is sshd running on the host, and on that port?",
        ) from exc
    except OSError as exc:
        raise ConnectError(
            f"{host.name}: cannot connect to {endpoint.label}: {exc.strerror or exc}",
            "check the network path to the host (VPN, routes, firewall)",
        ) from exc
    # SSH is request/response: do not let Nagle hold a small packet for the peer's delayed ACK.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


class _ProxyProcess:
    """A ProxyCommand child whose stdin/stdout is one end of a socketpair."""

    def __init__(self, command: str, host: Host) -> None:
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 - closed in close()
        ours, theirs = socket.socketpair()
        try:
            # ssh_config(5): the command line is run with the user's shell, using "exec".
            self.process = subprocess.Popen(
                ["/bin/sh", "-c", f"exec {command}"],
                stdin=theirs.fileno(),
                stdout=theirs.fileno(),
                stderr=self._stderr,
                close_fds=True,
            )
        except OSError as exc:
            ours.close()
            self._stderr.close()
            raise ConnectError(f"{host.name}: cannot start ProxyCommand: {exc}") from exc
        finally:
            theirs.close()
        self.sock = ours

    def stderr_tail(self) -> str:
        self._stderr.seek(0)
        lines = self._stderr.read().decode("utf-8", "replace").strip().splitlines()
        return lines[-1] if lines else ""

    def close(self) -> None:
        self.sock.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=2)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._stderr.close()


def _key_type_order(known_types: Sequence[str]) -> Callable[..., paramiko.Transport]:
    """A transport factory that asks the server for a key type already on file, as OpenSSH does,
    so that a host known by its RSA key is not reported as changed for offering ed25519."""
    wanted: list[str] = []
    for key_type in known_types:
        wanted.extend(["rsa-sha2-512", "rsa-sha2-256"] if key_type == "ssh-rsa" else [key_type])

    def factory(sock: Any, /, **kwargs: Any) -> paramiko.Transport:
        transport = paramiko.Transport(sock, **kwargs)
        options = transport.get_security_options()
        offered = list(options.key_types)
        first = [key_type for key_type in wanted if key_type in offered]
        options.key_types = first + [key_type for key_type in offered if key_type not in first]
        return transport

    return factory


class _Verify(paramiko.MissingHostKeyPolicy):
    """The SSHClient is given no host keys of its own, so paramiko hands every server key to this
    policy, which checks it against the known_hosts files and refuses anything not trusted."""

    def __init__(self, known: KnownHosts, endpoint: Endpoint, label: str, host_name: str) -> None:
        self._known = known
        self._endpoint = endpoint
        self._label = label
        self._host_name = host_name

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        check = self._known.check(self._endpoint.known_hosts_name, key.get_name(), key.asbytes())
        if check.verdict is not Verdict.TRUSTED:
            raise refusal(check, self._label, self._host_name)


def _auth_sources(endpoint: Endpoint) -> tuple[bool, bool, tuple[str, ...]]:
    """(allow_agent, look_for_keys, default key files present), for connect and for messages."""
    only = endpoint.identities_only and bool(endpoint.identity_files)
    allow_agent = not only and bool(os.environ.get("SSH_AUTH_SOCK"))
    defaults = tuple(p for p in _DEFAULT_KEY_FILES if Path(p).expanduser().is_file())
    return allow_agent, not only, defaults if not only else ()


def _ssh_client(
    endpoint: Endpoint,
    sock: Any,
    known: KnownHosts,
    *,
    host: Host,
    label: str,
    timeout: float,
    keepalive_s: int,
) -> paramiko.SSHClient:
    for path in endpoint.identity_files:
        if not Path(path).is_file():
            raise AuthError(
                f"{host.name}: identity file {path} does not exist",
                "fix identity_file in the inventory (or IdentityFile in ~/.ssh/config)",
            )
    allow_agent, look_for_keys, _ = _auth_sources(endpoint)
    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(_Verify(known, endpoint, label, host.name))
    try:
        client.connect(
            endpoint.hostname,
            port=endpoint.port,
            username=endpoint.user,
            # paramiko accepts a list; the stub says str.
            key_filename=list(endpoint.identity_files) or None,  # type: ignore[arg-type]
            timeout=timeout,
            banner_timeout=timeout,
            auth_timeout=timeout,
            channel_timeout=timeout,
            allow_agent=allow_agent,
            look_for_keys=look_for_keys,
            sock=sock,
            transport_factory=_key_type_order(known.key_types_for(endpoint.known_hosts_name)),
        )
    except OrchError:
        client.close()
        raise
    except paramiko.AuthenticationException as exc:
        client.close()
        raise _auth_error(endpoint, host, label, exc) from exc
    except paramiko.SSHException as exc:
        client.close()
        if "No authentication methods available" in str(exc):
            raise _auth_error(endpoint, host, label, exc) from exc
        raise ConnectError(
            f"{host.name}: SSH handshake with {label} failed: {exc}",
            "is that port an SSH server? is the host overloaded (MaxStartups)?",
        ) from exc
    except (OSError, EOFError) as exc:
        client.close()
        raise ConnectError(
            f"{host.name}: connection to {label} lost during the SSH handshake: {exc}",
            "is that port an SSH server, and does it accept connections from here?",
        ) from exc
    transport = client.get_transport()
    if transport is None:  # pragma: no cover - connect() returned without a transport
        raise ConnectError(f"{host.name}: no SSH transport after connecting to {label}")
    transport.set_keepalive(keepalive_s)
    return client


def _auth_error(endpoint: Endpoint, host: Host, label: str, exc: Exception) -> AuthError:
    allow_agent, _, defaults = _auth_sources(endpoint)
    tried = [*endpoint.identity_files, *(["ssh-agent"] if allow_agent else []), *defaults]
    reason = str(exc) or type(exc).__name__  # paramiko's texts name methods, never secrets
    return AuthError(
        f"{host.name}: {label} refused user {endpoint.user}: {reason}",
        f"tried: {', '.join(tried) or 'no keys at all'}; put the public key in "
        f"~{endpoint.user}/.ssh/authorized_keys on the host, or set user / identity_file "
        "in the inventory",
    )


@dataclass
class _Connection:
    """The target's SSH client plus what keeps it reachable (jump hosts, proxy process)."""

    client: paramiko.SSHClient
    transport: paramiko.Transport
    via: list[paramiko.SSHClient]
    proxy: _ProxyProcess | None

    def close(self) -> None:
        self.client.close()
        for jump in reversed(self.via):
            jump.close()
        if self.proxy is not None:
            self.proxy.close()


def _socket_to_target(
    route: Route, known: KnownHosts, host: Host, timeout: float, keepalive_s: int
) -> tuple[Any, list[paramiko.SSHClient], _ProxyProcess | None]:
    """A socket-like object connected to the target's SSH port, through any jumps or proxy."""
    if route.proxy_command is not None:
        proxy = _ProxyProcess(route.proxy_command, host)
        return proxy.sock, [], proxy
    if not route.jumps:
        return _tcp_socket(route.target, timeout, host), [], None
    via: list[paramiko.SSHClient] = []
    sock: Any = _tcp_socket(route.jumps[0], timeout, host)
    try:
        hops = [*route.jumps, route.target]
        for jump, following in itertools.pairwise(hops):
            label = f"jump host {jump.label}"
            client = _ssh_client(
                jump, sock, known, host=host, label=label, timeout=timeout, keepalive_s=keepalive_s
            )
            via.append(client)
            transport = client.get_transport()
            assert transport is not None  # noqa: S101 - _ssh_client checked it
            try:
                sock = transport.open_channel(
                    "direct-tcpip",
                    (following.hostname, following.port),
                    ("127.0.0.1", 0),
                    timeout=timeout,
                )
            except (paramiko.SSHException, OSError, EOFError) as exc:
                raise ConnectError(
                    f"{host.name}: {label} could not open a connection to "
                    f"{following.hostname}:{following.port}: {exc}",
                    "can the jump host reach that address? does its sshd allow TCP forwarding?",
                ) from exc
    except BaseException:
        sock.close()
        for client in reversed(via):
            client.close()
        raise
    return sock, via, None


def _connect(
    host: Host,
    route: Route,
    known: KnownHosts,
    timeout: float,
    keepalive_s: int,
) -> _Connection:
    sock, via, proxy = _socket_to_target(route, known, host, timeout, keepalive_s)
    try:
        client = _ssh_client(
            route.target,
            sock,
            known,
            host=host,
            label=route.target.label,
            timeout=timeout,
            keepalive_s=keepalive_s,
        )
    except BaseException as exc:
        tail = proxy.stderr_tail() if proxy is not None else ""
        sock.close()
        for jump in reversed(via):
            jump.close()
        if proxy is not None:
            proxy.close()
        if tail and isinstance(exc, ConnectError):
            raise ConnectError(f"{exc.message} (ProxyCommand said: {tail})", exc.hint) from exc
        raise
    transport = client.get_transport()
    assert transport is not None  # noqa: S101 - _ssh_client checked it
    return _Connection(client, transport, via, proxy)


# --------------------------------------------------------------------------- the transport


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
        self._connection: _Connection | None = None
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
            self._connection = _connect(
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
            channel.exec_command(command)
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
            return self._collect(channel, argv, stdin or b"", deadline, timeout)
        finally:
            channel.close()

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
        self, argv: Sequence[str], *, timeout: float | None = None
    ) -> Generator[bytes, None, None]:
        """Yield stdout lines as they arrive. ``timeout``: the longest wait for the next bytes
        (RemoteCommandError 124 after it); None waits forever. stderr is read and dropped.
        Closing the generator closes the channel (the remote process gets EOF/SIGPIPE)."""
        argv = tuple(argv)
        channel = self._exec(argv)
        try:
            channel.shutdown_write()
            ready = channel.fileno()
            pending = bytearray()
            while True:
                got = False
                while channel.recv_stderr_ready():
                    channel.recv_stderr(_READ_CHUNK)
                    got = True
                while channel.recv_ready():
                    pending += channel.recv(_READ_CHUNK)
                    got = True
                while (end := pending.find(b"\n")) >= 0:
                    line = bytes(pending[: end + 1])
                    del pending[: end + 1]
                    yield line
                if channel.eof_received or channel.closed:
                    if not channel.recv_ready() and not channel.recv_stderr_ready():
                        break
                    continue
                if not got:
                    readable, _, _ = select.select([ready], [], [], timeout)
                    if not readable:
                        raise RemoteCommandError(
                            argv, 124, f"no output for {timeout:g} s" if timeout else "timed out"
                        )
            if pending:
                yield bytes(pending)
            if not channel.eof_received and not self._connected():
                raise self._lost(f"streaming {argv[0]}")
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise self._lost(f"streaming {argv[0]}", exc) from exc
        finally:
            channel.close()

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
    sock, via, proxy = _socket_to_target(route, known, host, connect_timeout, 0)
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
    "DEFAULT_SSH_CONFIG",
    "Endpoint",
    "Route",
    "SSHTransport",
    "ScannedKey",
    "fetch_host_key",
    "pin_host_key",
    "remote_command",
    "resolve",
]
