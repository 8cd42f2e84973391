"""End-to-end workspaces: a profile directory, a host, and orch's CLI run against them.

The server is orch's SGLang stand-in (standin/sglang, NOT SGLang), made importable as
`sglang` through the profile's PYTHONPATH, exactly as a real venv would provide it.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main
from tests.conftest import REPO
from tests.ssh.sshd import SshServer

STANDIN = REPO / "standin"
MODEL = STANDIN / "models" / "Qwen3.6-27B"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


@dataclass
class Workspace:
    root: Path
    host_name: str
    workdir: Path

    @property
    def profiles(self) -> Path:
        return self.root / "profiles"

    def profile(
        self,
        name: str,
        body: str = "",
        *,
        env: dict[str, Any] | None = None,
        version: str = "0.5.23",
        port: int | None = None,
        host: str | None = None,
        restart: dict[str, Any] | None = None,
        args: dict[str, Any] | None = None,
        served_model_name: str = "qwen-test",
    ) -> str:
        """A stand-in profile on this workspace's host; ``body`` adds YAML keys."""
        document = {
            "sglang": version,
            "host": host or self.host_name,
            "model": {"path": str(MODEL), "served_model_name": served_model_name},
            "port": port or free_port(),
            "bind": "127.0.0.1",
            "env": {"PYTHONPATH": str(STANDIN), "ORCH_STANDIN_VERSION": version, **(env or {})},
            "args": {"skip_server_warmup": True, **(args or {})},
            "health": {"startup_timeout_s": 60, "interval_s": 0.5},
            "restart": restart
            or {"mode": "on-failure", "delay_s": 0.2, "max_delay_s": 1, "start_limit": 3},
            "stop_timeout_s": 3,
        }
        text = yaml.safe_dump(document, sort_keys=False) + textwrap.dedent(body)
        (self.profiles / f"{name}.yaml").write_text(text)
        return name

    def orch(self, *argv: str) -> Outcome:
        out, err = io.StringIO(), io.StringIO()
        code = main(["--profiles", str(self.profiles), *argv], out=out, err=err)
        return Outcome(code, out.getvalue(), err.getvalue())

    def spawn(self, *argv: str) -> subprocess.Popen[str]:
        """orch in a process of its own (to kill it, or to race two of them)."""
        return subprocess.Popen(
            [sys.executable, "-m", "orchestrator", "--profiles", str(self.profiles), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )

    def deployment_dir(self, name: str) -> Path:
        return self.workdir / name

    def cleanup(self) -> None:
        for path in self.profiles.glob("*.yaml"):
            if path.name != "hosts.yaml":
                self.orch("down", path.stem)


@pytest.fixture
def local_workspace(tmp_path: Path) -> Iterator[Workspace]:
    workdir = tmp_path / "workdir"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "hosts.yaml").write_text(
        yaml.safe_dump({"hosts": {"local": {"python": sys.executable, "workdir": str(workdir)}}})
    )
    space = Workspace(tmp_path, "local", workdir)
    yield space
    space.cleanup()


@pytest.fixture
def ssh_workspace(tmp_path: Path, sshd: SshServer) -> Iterator[Workspace]:
    """A host `box` reached over the session's real sshd on 127.0.0.1, with its key pinned in
    the inventory's known_hosts; and `stranger`, the same server with an empty known_hosts."""
    workdir = tmp_path / "remote-workdir"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "empty_known_hosts").write_text("")
    box = {
        "address": "127.0.0.1",
        "port": sshd.port,
        "user": sshd.user,
        "identity_file": str(sshd.client_key),
        "known_hosts": str(sshd.known_hosts),
        "python": sys.executable,
        "workdir": str(workdir),
    }
    stranger = {**box, "known_hosts": str(tmp_path / "empty_known_hosts")}
    (tmp_path / "profiles" / "hosts.yaml").write_text(
        yaml.safe_dump({"hosts": {"box": box, "stranger": stranger}})
    )
    space = Workspace(tmp_path, "box", workdir)
    yield space
    space.cleanup()


def add_host(space: Workspace, name: str, **fields: Any) -> None:
    """Another inventory entry: a copy of the workspace's host with ``fields`` changed."""
    path = space.profiles / "hosts.yaml"
    document = yaml.safe_load(path.read_text())
    document["hosts"][name] = {**document["hosts"][space.host_name], **fields}
    path.write_text(yaml.safe_dump(document))
