"""What only SSH does: host keys, authentication, addressing through ssh_config, jumps, proxies,
one connection per transport, errors translated at the edge. All against the real sshd."""

from __future__ import annotations

import base64
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.errors import AuthError, ConnectError, HostKeyError, OrchError
from orchestrator.model import Host
from orchestrator.transport.known_hosts import fingerprint
from orchestrator.transport.ssh import (
    SSHTransport,
    fetch_host_key,
    pin_host_key,
    program_not_started,
    remote_command,
)
from tests.ssh.sshd import SshConfigFile, SshServer, free_port, public_b64

PY = sys.executable


def ssh(host: Host, known_hosts: Path | None, **options: Any) -> SSHTransport:
    files = [known_hosts] if known_hosts is not None else []
    options.setdefault("ssh_config", None)
    options.setdefault("connect_timeout", 5.0)
    return SSHTransport(host, known_hosts_files=files, **options)


def touch_argv(marker: Path) -> list[str]:
    return [PY, "-c", "import pathlib, sys; pathlib.Path(sys.argv[1]).touch()", str(marker)]


def message_of(error: OrchError) -> str:
    return f"{error.message}\n{error.hint}"


def established_to(port: int) -> int:
    """This process's TCP connections to ``port``: the honest count of SSH connections."""
    return sum(
        1
        for conn in psutil.Process().net_connections(kind="tcp")
        if conn.raddr and conn.raddr.port == port and conn.status == psutil.CONN_ESTABLISHED
    )


# ---------------------------------------------------------------------------- the fixture


def test_sshd_starts_fast(sshd: SshServer) -> None:
    assert sshd.start_seconds < 2.0


def test_fingerprint_format_matches_ssh_keygen(sshd: SshServer) -> None:
    listed = subprocess.run(
        ["ssh-keygen", "-l", "-E", "sha256", "-f", str(sshd.root / "host_ed25519.pub")],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()[1]
    assert fingerprint(base64.b64decode(sshd.host_key_b64)) == listed == sshd.host_key_fingerprint


def test_remote_command_is_shlex_join() -> None:
    assert remote_command(["echo", "a b", "$HOME", "it's"]) == "echo 'a b' '$HOME' 'it'\"'\"'s'"
    with pytest.raises(ValueError, match="empty argv"):
        remote_command([])


# What the login shell says when it cannot start argv[0]: read from every POSIX shell on this
# machine (the sshd's login shell is one of them), plus zsh and mksh as their manuals word it.
SHELLS = [shell for shell in ("dash", "bash", "zsh", "mksh", "ksh") if shutil.which(shell)]


@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize(
    ("program", "reason"),
    [
        ("/nonexistent/python3", "not found"),
        ("orch-no-such-command-4f1d", "not found"),
        ("/etc/passwd/python3", "not found"),
        ("/tmp/with space/$HOME/python3", "not found"),
        ("/etc/passwd", "not executable"),
        ("/", "not executable"),
    ],
)
def test_program_not_started_reads_the_shells_own_words(
    shell: str, program: str, reason: str
) -> None:
    done = subprocess.run(
        [shell, "-c", remote_command([program, "-c", "pass"])], capture_output=True, check=False
    )
    assert done.returncode in (126, 127)
    assert program_not_started(program, done.returncode, done.stderr) == reason


@pytest.mark.parametrize(
    "stderr",
    [
        b"zsh:1: command not found: python9\n",
        b"zsh:1: no such file or directory: python9\n",
        b"mksh: python9: inaccessible or not found\n",
        b"noise from .bashrc\nbash: line 1: python9: command not found\n",
    ],
)
def test_program_not_started_other_shells(stderr: bytes) -> None:
    assert program_not_started("python9", 127, stderr) == "not found"


@pytest.mark.parametrize(
    ("returncode", "stderr"),
    [
        (127, b"env: 'python9': No such file or directory\n"),  # env ran; its command is missing
        (127, b"timeout: failed to run command 'python9': No such file or directory\n"),
        (127, b"/opt/python9: not found\n"),  # another program with the same name
        (127, b"sh: 1: python9: not found\ntraceback of something that ran after\n"),
        (127, b""),
        (1, b"sh: 1: python9: not found\n"),
    ],
)
def test_program_not_started_is_none_when_the_program_ran(returncode: int, stderr: bytes) -> None:
    assert program_not_started("python9", returncode, stderr) is None


# ---------------------------------------------------------------------------- host keys


def test_unknown_host_key_is_refused_and_nothing_runs(sshd: SshServer, tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    marker = tmp_path / "ran"
    with ssh(sshd.host(tmp_path), empty) as transport, pytest.raises(HostKeyError) as raised:
        transport.run(touch_argv(marker))
    error = raised.value
    assert "unknown" in error.message
    assert f"127.0.0.1:{sshd.port}" in error.message
    assert "ssh-ed25519" in error.message
    assert sshd.host_key_fingerprint in error.message
    assert "\n" not in error.message
    assert error.hint is not None
    assert "orch hosts trust sshd-test" in error.hint
    assert not marker.exists()


def test_missing_known_hosts_files_mean_unknown(sshd: SshServer, tmp_path: Path) -> None:
    with ssh(sshd.host(tmp_path), tmp_path / "absent") as transport, pytest.raises(HostKeyError):
        transport.connect()


def test_changed_host_key_is_refused_loudly(sshd: SshServer, tmp_path: Path) -> None:
    impostor_b64 = public_b64(sshd.client_key)  # some other ed25519 key, filed for this host
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{sshd.port} ssh-ed25519 {impostor_b64}\n")
    marker = tmp_path / "ran"
    with ssh(sshd.host(tmp_path), known) as transport, pytest.raises(HostKeyError) as raised:
        transport.run(touch_argv(marker))
    error = raised.value
    assert "HOST KEY CHANGED" in error.message
    assert "man-in-the-middle" in error.message
    assert fingerprint(base64.b64decode(impostor_b64)) in error.message
    assert sshd.host_key_fingerprint in error.message
    assert f"{known}:1" in error.message
    assert error.hint is not None
    assert "out of band" in error.hint
    assert "ssh-keygen -R" in error.hint
    assert not marker.exists()


def test_key_filed_without_port_does_not_vouch_for_other_ports(
    sshd: SshServer, tmp_path: Path
) -> None:
    """As OpenSSH: ``127.0.0.1 <key>`` is port 22 only; this server is on another port."""
    known = tmp_path / "known_hosts"
    known.write_text(f"127.0.0.1 ssh-ed25519 {sshd.host_key_b64}\n")
    with ssh(sshd.host(tmp_path), known) as transport, pytest.raises(HostKeyError, match="unknown"):
        transport.connect()


def test_hashed_known_hosts_entry_is_accepted(sshd: SshServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text(sshd.known_hosts.read_text())
    subprocess.run(["ssh-keygen", "-H", "-f", str(known)], check=True, capture_output=True)
    assert known.read_text().startswith("|1|")
    with ssh(sshd.host(tmp_path), known) as transport:
        assert transport.run(["true"]).returncode == 0


def test_known_hosts_files_are_merged(sshd: SshServer, tmp_path: Path) -> None:
    other = tmp_path / "team_known_hosts"
    other.write_text("example.org ssh-ed25519 " + public_b64(sshd.client_key) + "\n")
    host = sshd.host(tmp_path)
    transport = SSHTransport(
        host, known_hosts_files=[tmp_path / "absent", other, sshd.known_hosts], ssh_config=None
    )
    with transport:
        assert transport.run(["true"]).returncode == 0


def test_user_known_hosts_file_from_ssh_config_is_read(sshd: SshServer, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(f"Host 127.0.0.1\n    UserKnownHostsFile {sshd.known_hosts}\n")
    with ssh(sshd.host(tmp_path), None, ssh_config=config) as transport:
        assert transport.run(["true"]).returncode == 0


# ---------------------------------------------------------------------------- trust


def test_fetch_and_pin_then_connect(sshd: SshServer, tmp_path: Path) -> None:
    known = tmp_path / "new" / "known_hosts"  # neither the file nor its directory exist
    host = sshd.host(tmp_path)
    scanned = fetch_host_key(host, ssh_config=None, connect_timeout=5)
    assert scanned.known_hosts_name == f"[127.0.0.1]:{sshd.port}"
    assert scanned.key_type == "ssh-ed25519"
    assert scanned.fingerprint == sshd.host_key_fingerprint
    assert scanned.key_base64 == sshd.host_key_b64
    assert pin_host_key(known, scanned) is True
    assert stat.S_IMODE(known.stat().st_mode) == 0o644
    assert pin_host_key(known, scanned) is False  # already there: nothing added
    assert known.read_text() == scanned.known_hosts_line
    with ssh(host, known) as transport:
        assert transport.run(["true"]).returncode == 0


def test_pin_keeps_existing_lines(sshd: SshServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    known.write_text("# team hosts\nexample.org ssh-ed25519 " + public_b64(sshd.client_key))
    scanned = fetch_host_key(sshd.host(tmp_path), ssh_config=None)
    assert pin_host_key(known, scanned) is True
    lines = known.read_text().splitlines()
    assert lines[:2] == ["# team hosts", "example.org ssh-ed25519 " + public_b64(sshd.client_key)]
    assert lines[2] == scanned.known_hosts_line.strip()


def test_pin_refuses_a_different_key(sshd: SshServer, tmp_path: Path) -> None:
    known = tmp_path / "known_hosts"
    before = f"[127.0.0.1]:{sshd.port} ssh-ed25519 {public_b64(sshd.client_key)}\n"
    known.write_text(before)
    scanned = fetch_host_key(sshd.host(tmp_path), ssh_config=None)
    with pytest.raises(HostKeyError, match="different ssh-ed25519 key"):
        pin_host_key(known, scanned)
    assert known.read_text() == before


def test_fetch_host_key_through_an_alias_with_proxy_jump(
    sshd: SshServer, sshd_config: SshConfigFile, tmp_path: Path
) -> None:
    host = Host(name="via-jump", address=sshd_config.jump)
    scanned = fetch_host_key(
        host, ssh_config=sshd_config.path, known_hosts_files=[sshd.known_hosts]
    )
    assert scanned.known_hosts_name == f"[127.0.0.1]:{sshd.port}"
    assert scanned.fingerprint == sshd.host_key_fingerprint


# ---------------------------------------------------------------------------- auth and connect


def test_wrong_client_key_is_auth_error(sshd: SshServer, tmp_path: Path) -> None:
    host = sshd.host(tmp_path, identity_file=str(sshd.stranger_key))
    with ssh(host, sshd.known_hosts) as transport, pytest.raises(AuthError) as raised:
        transport.run(["true"])
    text = message_of(raised.value)
    assert sshd.user in raised.value.message
    assert str(sshd.stranger_key) in text  # which files were tried: by name
    secret = sshd.stranger_key.read_text()
    body = "".join(line for line in secret.splitlines() if "PRIVATE KEY" not in line)
    assert body[:40] not in text
    assert public_b64(sshd.stranger_key) not in text


def test_missing_identity_file_is_auth_error(sshd: SshServer, tmp_path: Path) -> None:
    host = sshd.host(tmp_path, identity_file=str(tmp_path / "no_such_key"))
    with ssh(host, sshd.known_hosts) as transport, pytest.raises(AuthError, match="does not exist"):
        transport.connect()


def test_closed_port_is_connect_error_quickly(sshd: SshServer, tmp_path: Path) -> None:
    port = free_port()
    started = time.monotonic()
    with ssh(sshd.host(tmp_path, port=port), sshd.known_hosts) as transport:
        with pytest.raises(ConnectError) as raised:
            transport.run(["true"])
    assert time.monotonic() - started < 2.0
    assert f"127.0.0.1:{port}" in raised.value.message
    assert "refused" in raised.value.message
    assert raised.value.hint


def test_invalid_host_name_is_connect_error(sshd: SshServer, tmp_path: Path) -> None:
    with ssh(sshd.host(tmp_path, address="orch..invalid"), sshd.known_hosts) as transport:
        with pytest.raises(ConnectError, match="not a valid host name"):
            transport.connect()


@pytest.fixture
def not_ssh_port() -> Iterator[int]:
    """A TCP port that answers like a web server, then hangs up."""
    listener = socket.create_server(("127.0.0.1", 0))
    port: int = listener.getsockname()[1]

    def serve() -> None:
        with listener:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    listener.close()
    thread.join(timeout=5)


def test_not_an_ssh_server_is_connect_error(
    sshd: SshServer, tmp_path: Path, not_ssh_port: int
) -> None:
    host = sshd.host(tmp_path, port=not_ssh_port)
    with ssh(host, sshd.known_hosts, connect_timeout=3) as transport:
        with pytest.raises(ConnectError, match="handshake"):
            transport.connect()


# ---------------------------------------------------------------------------- addressing


def test_ssh_config_alias(sshd: SshServer, sshd_config: SshConfigFile) -> None:
    host = Host(name="aliased", address=sshd_config.alias)  # no port, user or key of its own
    with ssh(host, sshd.known_hosts, ssh_config=sshd_config.path) as transport:
        assert transport.run(["echo", "via alias"]).stdout == b"via alias\n"


def test_inventory_fields_override_ssh_config(
    sshd: SshServer, sshd_config: SshConfigFile, tmp_path: Path
) -> None:
    """The alias names the right key; the inventory names a wrong one, and wins."""
    host = Host(name="aliased", address=sshd_config.alias, identity_file=str(sshd.stranger_key))
    with ssh(host, sshd.known_hosts, ssh_config=sshd_config.path) as transport:
        with pytest.raises(AuthError):
            transport.connect()


def test_proxy_jump(sshd: SshServer, sshd_config: SshConfigFile) -> None:
    host = Host(name="jumped", address=sshd_config.jump)
    with ssh(host, sshd.known_hosts, ssh_config=sshd_config.path) as transport:
        assert transport.run(["echo", "jumped"]).stdout == b"jumped\n"
        assert transport.read(str(sshd.known_hosts)) == sshd.known_hosts.read_bytes()
        assert transport.connections_opened == 1


def test_proxy_jump_two_hops(sshd: SshServer, sshd_config: SshConfigFile) -> None:
    host = Host(name="jumped-twice", address=sshd_config.two_hops)
    with ssh(host, sshd.known_hosts, ssh_config=sshd_config.path) as transport:
        assert transport.run(["echo", "twice"]).stdout == b"twice\n"


def test_unknown_jump_host_key_is_refused(
    sshd: SshServer, sshd_config: SshConfigFile, tmp_path: Path
) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    host = Host(name="jumped", address=sshd_config.jump)
    with ssh(host, empty, ssh_config=sshd_config.path) as transport:
        with pytest.raises(HostKeyError, match="jump host orch-test-alias"):
            transport.connect()


def test_proxy_command(sshd: SshServer, sshd_config: SshConfigFile) -> None:
    host = Host(name="proxied", address=sshd_config.proxy_command)
    with ssh(host, sshd.known_hosts, ssh_config=sshd_config.path) as transport:
        assert transport.run(["echo", "proxied"]).stdout == b"proxied\n"


def test_failing_proxy_command_is_connect_error(sshd: SshServer, tmp_path: Path) -> None:
    config = tmp_path / "ssh_config"
    config.write_text(
        "Host broken-proxy\n    HostName 127.0.0.1\n"
        "    ProxyCommand sh -c 'echo proxy went away >&2; exit 3'\n"
    )
    host = Host(name="proxied", address="broken-proxy", identity_file=str(sshd.client_key))
    with ssh(host, sshd.known_hosts, ssh_config=config) as transport:
        with pytest.raises(ConnectError, match="proxy went away"):
            transport.connect()


# ---------------------------------------------------------------------------- one connection


def test_connects_lazily(sshd: SshServer, tmp_path: Path) -> None:
    with ssh(sshd.host(tmp_path), sshd.known_hosts) as transport:
        assert transport.connections_opened == 0
        transport.connect()
        transport.connect()
        assert transport.connections_opened == 1


def test_one_connection_serves_every_call(sshd: SshServer, tmp_path: Path) -> None:
    before = established_to(sshd.port)
    with ssh(sshd.host(tmp_path), sshd.known_hosts) as transport:
        for i in range(5):
            assert transport.run(["echo", str(i)]).stdout == f"{i}\n".encode()
        transport.put(b"data", str(tmp_path / "f"), 0o600)
        assert transport.read(str(tmp_path / "f")) == b"data"
        assert transport.size(str(tmp_path / "f")) == 4
        assert transport.home()
        assert established_to(sshd.port) == before + 1
        assert transport.connections_opened == 1
    assert established_to(sshd.port) == before


# Walk up from the command to the sshd process that serves this connection, and kill it.
KILL_MY_SSHD = """
import os, signal, time
pid = os.getppid()
while True:
    with open(f"/proc/{pid}/comm") as f:
        if f.read().strip() == "sshd":
            break
    with open(f"/proc/{pid}/stat") as f:
        pid = int(f.read().rsplit(")", 1)[1].split()[1])
os.kill(pid, signal.SIGKILL)
time.sleep(10)
"""


def test_dropped_connection_is_connect_error_then_reconnects(
    sshd: SshServer, tmp_path: Path
) -> None:
    with ssh(sshd.host(tmp_path), sshd.known_hosts) as transport:
        assert transport.run(["true"]).returncode == 0
        with pytest.raises(ConnectError, match="lost while running"):
            transport.run([PY, "-c", KILL_MY_SSHD], timeout=20)
        assert transport.run(["echo", "again"]).stdout == b"again\n"
        assert transport.connections_opened == 2
