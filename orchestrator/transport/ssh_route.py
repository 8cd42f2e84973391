"""How to reach a host over SSH, worked out as OpenSSH would: no network, no connection.

``host.address`` is looked up in ``~/.ssh/config`` (HostName, Port, User, IdentityFile,
IdentitiesOnly, UserKnownHostsFile, ProxyJump, ProxyCommand); the inventory's port, user and
identity_file override what the config says. Each ProxyJump hop (``[user@]host[:port]``,
comma-separated for several) is itself looked up in the config; a hop's own ProxyJump or
ProxyCommand is not followed (OpenSSH would): list every hop in the target's ProxyJump instead.
Of ProxyJump and ProxyCommand, the first given wins (ssh_config(5)). ProxyCommand tokens are
expanded by paramiko, which takes ``%p`` from the config, not from an inventory port override.

Importing this module does not import paramiko; :func:`resolve` does, for its ssh_config parser
(no ``Include``; ``Match exec`` needs the optional ``invoke`` package).
"""

from __future__ import annotations

import getpass
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.errors import ConnectError
from orchestrator.model import Host
from orchestrator.transport.known_hosts import SSH_PORT, known_hosts_name

if TYPE_CHECKING:
    import paramiko

DEFAULT_SSH_CONFIG = Path("~/.ssh/config").expanduser()


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
    import paramiko  # ~170 ms: only when a route is worked out, never on import

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
    import paramiko

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


__all__ = ["DEFAULT_SSH_CONFIG", "Endpoint", "Route", "resolve"]
