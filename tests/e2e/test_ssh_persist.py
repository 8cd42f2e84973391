"""A host's SSH connection kept between orch commands (``hosts.NAME.persist_s``,
transport/mux.py): later commands reach the host through it, with no handshake of their own;
only this user may use it; it ends when idle. Against the session's real sshd."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import yaml

from orchestrator.errors import ExitCode
from orchestrator.transport import mux
from tests.e2e.conftest import Workspace


def _servers() -> list[psutil.Process]:
    """The kept connections' servers of this test (those whose sockets are in its directory)."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "orchestrator.transport.mux" not in cmdline:
            continue
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                continue
            if process.environ().get(mux.MUX_DIR_ENV) == os.environ.get(mux.MUX_DIR_ENV):
                found.append(process)
        except psutil.Error:
            continue
    return found


@pytest.fixture
def kept(
    ssh_workspace: Workspace, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Path]:
    """``box`` with persist_s, its sockets in a private directory of this test."""
    inventory = ssh_workspace.profiles / "hosts.yaml"
    plain = inventory.read_text()
    hosts = yaml.safe_load(plain)
    hosts["hosts"]["box"]["persist_s"] = 30
    inventory.write_text(yaml.safe_dump(hosts))
    directory = tmp_path / "mux"
    monkeypatch.setenv(mux.MUX_DIR_ENV, str(directory))
    yield directory
    inventory.write_text(plain)  # the workspace's own cleanup connects by itself
    for process in _servers():
        process.kill()


def _count_direct_connections(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from orchestrator.transport.ssh import SSHTransport

    made: list[str] = []
    real = SSHTransport.__init__

    def counted(self: SSHTransport, *args: object, **kwargs: object) -> None:
        made.append("ssh")
        real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(SSHTransport, "__init__", counted)
    return made


def test_commands_after_the_first_use_the_kept_connection(
    ssh_workspace: Workspace, kept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    direct = _count_direct_connections(monkeypatch)
    name = ssh_workspace.profile("kept")
    up = ssh_workspace.orch("up", name, "--no-plan")
    assert up.code == ExitCode.OK, up.err
    (server,) = _servers()
    for _ in range(2):
        status = ssh_workspace.orch("status", name)
        assert status.code == ExitCode.OK, status.err
        assert "READY" in status.out
    logs = ssh_workspace.orch("logs", name, "-n", "1000")
    assert "The server is fired up and ready to roll!" in logs.out
    assert ssh_workspace.orch("down", name).code == ExitCode.OK
    assert direct == []  # this process never connected by itself
    assert [p.pid for p in _servers()] == [server.pid]  # one server for every command
    sshd_connections = [c for c in server.net_connections("tcp") if c.status == "ESTABLISHED"]
    assert len(sshd_connections) == 1  # and it holds one connection
    (socket_file,) = kept.glob("*.sock")
    assert stat.S_ISSOCK(socket_file.stat().st_mode)
    assert stat.S_IMODE(socket_file.stat().st_mode) == 0o600
    assert stat.S_IMODE(kept.stat().st_mode) == 0o700


def test_a_directory_others_can_use_is_never_used(
    ssh_workspace: Workspace, kept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept.mkdir(mode=0o700)
    kept.chmod(0o777)  # someone could put a socket of theirs here
    direct = _count_direct_connections(monkeypatch)
    name = ssh_workspace.profile("open")
    status = ssh_workspace.orch("status", name)
    assert status.code == ExitCode.OK, status.err
    assert direct == ["ssh"]  # connected by itself
    assert list(kept.iterdir()) == []
    assert _servers() == []


def test_the_kept_connection_ends_when_idle_and_the_next_command_starts_another(
    ssh_workspace: Workspace, kept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    inventory = ssh_workspace.profiles / "hosts.yaml"
    hosts = yaml.safe_load(inventory.read_text())
    hosts["hosts"]["box"]["persist_s"] = 1
    inventory.write_text(yaml.safe_dump(hosts))
    name = ssh_workspace.profile("idle")
    assert ssh_workspace.orch("status", name).code == ExitCode.OK
    (server,) = _servers()
    server.wait(timeout=10)  # idle for 1 s: it ends by itself
    assert list(kept.glob("*.sock")) == []  # and takes its socket along
    assert ssh_workspace.orch("status", name).code == ExitCode.OK
    assert len(_servers()) == 1


def test_a_silent_client_never_keeps_the_connection_from_ending_when_idle(
    ssh_workspace: Workspace, kept: Path
) -> None:
    """issue 26: a client of this user that connects to the socket and sends nothing (re-opened
    as soon as it is closed) kept the kept connection, and its SSH connection, alive for ever.
    It gets mux.REQUEST_WAIT_S to send its request; only requests count as use."""
    import socket
    import threading

    inventory = ssh_workspace.profiles / "hosts.yaml"
    hosts = yaml.safe_load(inventory.read_text())
    hosts["hosts"]["box"]["persist_s"] = 1
    inventory.write_text(yaml.safe_dump(hosts))
    name = ssh_workspace.profile("silent")
    assert ssh_workspace.orch("status", name).code == ExitCode.OK
    (server,) = _servers()
    (path,) = kept.glob("*.sock")
    stop = threading.Event()

    def hold_silently() -> None:
        while not stop.is_set():
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as silent:
                try:
                    silent.connect(str(path))
                except OSError:
                    return  # the socket is gone: the server withdrew it
                silent.settimeout(0.2)
                while not stop.is_set():
                    try:
                        if silent.recv(1) == b"":
                            break  # closed by the server: open another at once
                    except TimeoutError:
                        continue
                    except OSError:
                        break

    holder = threading.Thread(target=hold_silently, daemon=True)
    holder.start()
    try:
        began = time.monotonic()
        server.wait(timeout=1 + mux.REQUEST_WAIT_S + 10)
        took = time.monotonic() - began
        print(f"\nkept connection, a silent client throughout: ended after {took:.1f} s")  # noqa: T201 - measured, for docs/faults.md (-s)
    finally:
        stop.set()
        holder.join(5)
    assert list(kept.glob("*.sock")) == []


def test_a_kept_connection_gone_before_a_command_asks_is_replaced_by_its_own(
    ssh_workspace: Workspace, kept: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Killed between two operations of one command: the next operation connects by itself."""
    import sys

    from orchestrator.commands.context import Context
    from orchestrator.profile.store import ProfileStore

    name = ssh_workspace.profile("gone")
    assert ssh_workspace.orch("status", name).code == ExitCode.OK
    (server,) = _servers()
    ctx = Context(
        store=ProfileStore(ssh_workspace.profiles), environ=os.environ, local_python=sys.executable
    )
    host = ctx.store.inventory()["box"]
    transport = ctx.transport(host)
    assert isinstance(transport, mux.MuxTransport)
    assert transport.home() == str(Path.home())
    server.kill()
    server.wait(timeout=10)
    time.sleep(0.1)
    assert transport.home() == str(Path.home())  # through a connection of its own
    transport.close()
