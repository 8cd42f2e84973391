"""A real OpenSSH sshd on 127.0.0.1 for the tests, and ssh_config files that point at it.

Registered as session fixtures by tests/conftest.py: one server for the whole run (it starts in
a few tens of milliseconds).

Fresh ed25519 host and client keys, a free port, its own sshd_config, its own known_hosts. Without
an sshd binary the ssh tests are skipped, except under ``CI=true``, where that fails the run.
"""

from __future__ import annotations

import base64
import dataclasses
import getpass
import hashlib
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.model import Host


@dataclass(frozen=True)
class SshServer:
    port: int
    user: str
    root: Path  # the server's scratch directory (keys, config, log)
    client_key: Path  # authorized
    stranger_key: Path  # a valid key the server does not know
    known_hosts: Path  # ``[127.0.0.1]:PORT ssh-ed25519 ...``
    host_key_b64: str
    host_key_fingerprint: str  # SHA256:...
    log: Path  # sshd's stderr
    start_seconds: float  # from spawning sshd until the port accepted

    @property
    def known_hosts_name(self) -> str:
        return f"[127.0.0.1]:{self.port}"

    def host(self, workdir: Path, **changes: Any) -> Host:
        """An inventory host for this server; ``changes`` replace fields (address=..., port=...)."""
        base = Host(
            name="sshd-test",
            address="127.0.0.1",
            port=self.port,
            user=self.user,
            identity_file=str(self.client_key),
            known_hosts=str(self.known_hosts),
            python=sys.executable,
            workdir=str(workdir),
        )
        return dataclasses.replace(base, **changes)


@dataclass(frozen=True)
class SshConfigFile:
    """An ssh_config with Host aliases for the test server."""

    path: Path
    alias: str  # HostName/Port/User/IdentityFile
    jump: str  # the same, reached through ProxyJump <alias>
    two_hops: str  # ProxyJump <alias>,<alias>
    proxy_command: str  # ProxyCommand ssh -W %h:%p ...


def _tool(name: str) -> str | None:
    found = shutil.which(name)
    if found is None and Path(f"/usr/sbin/{name}").exists():
        found = f"/usr/sbin/{name}"
    return found


def _missing(message: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true: the ssh tests need a real sshd: {message}")
    pytest.skip(message)


def keygen(path: Path) -> Path:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "orch-test", "-f", str(path)],
        check=True,
        capture_output=True,
    )
    return path


def public_b64(key: Path) -> str:
    return Path(f"{key}.pub").read_text(encoding="ascii").split()[1]


def sha256_fingerprint(key_b64: str) -> str:
    digest = hashlib.sha256(base64.b64decode(key_b64)).digest()
    return "SHA256:" + base64.b64encode(digest).decode("ascii").rstrip("=")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


SSHD_CONFIG = """\
ListenAddress 127.0.0.1
Port {port}
HostKey {host_key}
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
AllowTcpForwarding yes
{sftp}LogLevel ERROR
MaxSessions 50
MaxStartups 100
PrintMotd no
"""


def _listens(pid: int, port: int) -> bool:
    """Is ``pid`` listening on 127.0.0.1:port? (A port probed free can be taken by another
    process before sshd binds it; sshd then exits, and a connection test would be answered by
    the other one.)"""
    try:
        connections = psutil.Process(pid).net_connections(kind="tcp")
    except psutil.Error:
        return False
    return any(c.status == psutil.CONN_LISTEN and c.laddr.port == port for c in connections)


def _wait_for_port(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"sshd exited with {process.returncode}: {log.read_text()}")
        if _listens(process.pid, port):  # sshd itself, not whoever else holds the port
            return
        time.sleep(0.005)
    raise RuntimeError(f"sshd did not listen on {port} within 10 s: {log.read_text()}")


class SshdUnavailable(RuntimeError):
    """No sshd or ssh-keygen on this machine."""


def start_sshd(root: Path, *, sftp: bool = True) -> tuple[SshServer, subprocess.Popen[bytes]]:
    """A fresh sshd on 127.0.0.1 with its own keys under ``root`` (used by the session fixture
    and by the benchmarks, which start several). Stop it with ``process.terminate()``.
    ``sftp=False``: no SFTP subsystem, as on hosts that turn it off."""
    binary = _tool("sshd")
    if binary is None or _tool("ssh-keygen") is None:
        raise SshdUnavailable(
            f"{'sshd' if binary is None else 'ssh-keygen'} not found "
            "(apt-get install openssh-server openssh-client)"
        )
    root.mkdir(parents=True, exist_ok=True)
    host_key = keygen(root / "host_ed25519")
    client_key = keygen(root / "client_ed25519")
    stranger_key = keygen(root / "stranger_ed25519")
    (root / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
    log = root / "sshd.log"
    for _attempt in range(3):  # the free port may be taken between probing and binding
        port = free_port()
        config = root / "sshd_config"
        subsystem = "Subsystem sftp internal-sftp\n" if sftp else ""
        config.write_text(
            SSHD_CONFIG.format(port=port, host_key=host_key, root=root, sftp=subsystem)
        )
        started = time.monotonic()
        with log.open("wb") as log_file:
            process = subprocess.Popen(
                [binary, "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=log_file,
            )
        try:
            _wait_for_port(port, process, log)
        except RuntimeError:
            if process.poll() is None:
                process.kill()
            process.wait()
            continue
        break
    else:
        raise RuntimeError(f"sshd would not start: {log.read_text()}")
    start_seconds = time.monotonic() - started
    host_b64 = public_b64(host_key)
    known_hosts = root / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} ssh-ed25519 {host_b64}\n")
    server = SshServer(
        port=port,
        user=getpass.getuser(),
        root=root,
        client_key=client_key,
        stranger_key=stranger_key,
        known_hosts=known_hosts,
        host_key_b64=host_b64,
        host_key_fingerprint=sha256_fingerprint(host_b64),
        log=log,
        start_seconds=start_seconds,
    )
    return server, process


def stop_sshd(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@pytest.fixture(scope="session")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    try:
        server, process = start_sshd(tmp_path_factory.mktemp("sshd"))
    except SshdUnavailable as exc:
        _missing(str(exc))
        raise
    except RuntimeError as exc:
        pytest.fail(str(exc))
    try:
        yield server
    finally:
        stop_sshd(process)


@pytest.fixture(scope="session")
def sshd_config(sshd: SshServer) -> SshConfigFile:
    """Host aliases for the test server: plain, through ProxyJump (one and two hops), and through
    a ProxyCommand (``ssh -W``, the OpenSSH client's own netcat mode)."""
    path = sshd.root / "ssh_config"
    common = (
        f"    HostName 127.0.0.1\n    Port {sshd.port}\n    User {sshd.user}\n"
        f"    IdentityFile {sshd.client_key}\n    IdentitiesOnly yes\n"
    )
    ssh_w = (
        f"ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes "
        f"-o UserKnownHostsFile={sshd.known_hosts} -i {sshd.client_key} -p {sshd.port} "
        f"-W %h:%p {sshd.user}@127.0.0.1"
    )
    path.write_text(
        f"Host orch-test-alias\n{common}\n"
        f"Host orch-test-jump\n{common}    ProxyJump orch-test-alias\n\n"
        f"Host orch-test-two-hops\n{common}    ProxyJump orch-test-alias,orch-test-alias\n\n"
        f"Host orch-test-proxy-command\n{common}    ProxyCommand {ssh_w}\n"
    )
    return SshConfigFile(
        path=path,
        alias="orch-test-alias",
        jump="orch-test-jump",
        two_hops="orch-test-two-hops",
        proxy_command="orch-test-proxy-command",
    )
