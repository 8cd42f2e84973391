"""Connecting to a host over SSH (paramiko): along a :class:`~.ssh_route.Route`, host keys checked.

Import lazily (``import paramiko`` costs ~170 ms). What it does:

- **ProxyJump**: each hop is host-key-checked like the target and logged into; the next hop is
  reached through a ``direct-tcpip`` channel of the previous one.
- **ProxyCommand** runs as OpenSSH runs it (``sh -c 'exec <command>'``, the line is the user's own
  shell command) with its stdin/stdout on a socketpair; its last stderr line is added to a
  connect error.
- **Host keys** are checked by :mod:`orchestrator.transport.known_hosts` against the files
  given: an unknown, changed or revoked key is refused with :class:`HostKeyError` before anything
  is sent. Never auto-added. The server is asked for a key type already on file first.
- **Authentication**: the route's identity files, then ssh-agent and the default ``~/.ssh/id_*``
  keys (unless IdentitiesOnly yes). Not supported: host certificates (``@cert-authority``),
  password and keyboard-interactive login.

Every failure is translated here: :class:`ConnectError`, :class:`AuthError`, :class:`HostKeyError`.
"""

from __future__ import annotations

import itertools
import logging
import os
import socket
import subprocess
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import paramiko

from orchestrator.errors import AuthError, ConnectError, OrchError
from orchestrator.model import Host
from orchestrator.transport.known_hosts import KeyMatch, KnownHosts, refusal
from orchestrator.transport.ssh_route import Endpoint, Route

# paramiko logs transport-thread failures at ERROR; without a handler Python's last-resort
# handler would print them on stderr next to orch's own message. Records still propagate to
# any handler the application configures.
logging.getLogger("paramiko").addHandler(logging.NullHandler())

_DEFAULT_KEY_FILES = ("~/.ssh/id_rsa", "~/.ssh/id_ecdsa", "~/.ssh/id_ed25519")


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


class ProxyProcess:
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
        if check.match is not KeyMatch.TRUSTED:
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
class Connection:
    """The target's SSH client plus what keeps it reachable (jump hosts, proxy process)."""

    client: paramiko.SSHClient
    transport: paramiko.Transport
    via: list[paramiko.SSHClient]
    proxy: ProxyProcess | None

    def close(self) -> None:
        self.client.close()
        for jump in reversed(self.via):
            jump.close()
        if self.proxy is not None:
            self.proxy.close()


def socket_to_target(
    route: Route, known: KnownHosts, host: Host, timeout: float, keepalive_s: int
) -> tuple[Any, list[paramiko.SSHClient], ProxyProcess | None]:
    """A socket-like object connected to the target's SSH port, through any jumps or proxy."""
    if route.proxy_command is not None:
        proxy = ProxyProcess(route.proxy_command, host)
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


def connect(
    host: Host,
    route: Route,
    known: KnownHosts,
    timeout: float,
    keepalive_s: int,
) -> Connection:
    sock, via, proxy = socket_to_target(route, known, host, timeout, keepalive_s)
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
    return Connection(client, transport, via, proxy)


__all__ = ["Connection", "ProxyProcess", "connect", "socket_to_target"]
