"""A host whose sshd offers no SFTP subsystem: every command that asks the agent goes over the
SSH channel's exec; ``orch runs`` used to read state.json over SFTP and failed there alone."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace
from tests.ssh.sshd import SshdUnavailable, SshServer, _missing, start_sshd, stop_sshd


@pytest.fixture
def no_sftp(tmp_path: Path) -> Iterator[Workspace]:
    try:
        server, process = start_sshd(tmp_path / "sshd", sftp=False)
    except SshdUnavailable as exc:
        _missing(str(exc))
        raise
    try:
        yield _workspace(tmp_path, server)
    finally:
        stop_sshd(process)


def _workspace(tmp_path: Path, server: SshServer) -> Workspace:
    workdir = tmp_path / "remote-workdir"
    (tmp_path / "profiles").mkdir()
    host = {
        "address": "127.0.0.1",
        "port": server.port,
        "user": server.user,
        "identity_file": str(server.client_key),
        "known_hosts": str(server.known_hosts),
        "python": sys.executable,
        "workdir": str(workdir),
    }
    (tmp_path / "profiles" / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"box": host}}))
    return Workspace(tmp_path, "box", workdir)


def test_runs_and_a_clean_stop_without_sftp(no_sftp: Workspace) -> None:
    name = no_sftp.profile("nosftp")
    try:
        up = no_sftp.orch("up", name)
        assert up.code == ExitCode.OK, up.out + up.err
        down = no_sftp.orch("down", name)
        assert down.code == ExitCode.OK, down.err
        runs = no_sftp.orch("runs", name)
        assert runs.code == ExitCode.OK, runs.err
        (row,) = runs.out.splitlines()[1:]
        # the stand-in ends like SGLang after SIGTERM: it SIGKILLs itself; still a clean stop
        assert "stopped" in row.split(), row
        assert "SIGKILL" not in row, row
        document = no_sftp.orch("runs", name, "--json").json()
        assert document["runs"][0]["exit"]["class"] == "stopped"
    finally:
        no_sftp.orch("down", name)
