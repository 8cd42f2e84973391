"""``agent survey``: every deployment under a workdir as ``status`` reports it, read with real
supervisors on this machine, through orch's client (``Agent.survey``: the bootstrap's
``--no-write``), and nothing on the host changed by it: no file written, none touched."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import PreflightError
from orchestrator.fleet.client import Agent, Deployment
from orchestrator.fleet.protocol.survey import decode_survey
from orchestrator.model import Host
from orchestrator.remote.agent.states import EXITED, READY
from orchestrator.transport.local import LocalTransport
from tests.agent.test_supervisor import CONFIG_LINE, PRELUDE, _agent, _spec
from tests.agent.test_supervisor import READY as SERVES_READY

SERVES = CONFIG_LINE + SERVES_READY + "time.sleep(120)\n"
NOBODY = 65534


class Workdir:
    """A host's workdir with deployments started by the real agent."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.root.mkdir(mode=0o700)
        self.started: list[Path] = []

    def start(self, name: str, program: str = SERVES) -> dict[str, Any]:
        directory = self.root / name
        directory.mkdir(mode=0o700)
        spec_path = directory / ".spec-new.json"
        spec = _spec([sys.executable, "-c", PRELUDE + program], deployment=name)
        spec_path.write_text(json.dumps(spec))
        self.started.append(directory)
        return _agent("start", "--dir", str(directory), "--spec", str(spec_path))

    def wait(self, name: str, state: str) -> dict[str, Any]:
        import time

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            status = _agent("status", "--dir", str(self.root / name))
            if status.get("state") == state:
                return status
            time.sleep(0.05)
        raise AssertionError(f"{name} never {state}")

    def client(self) -> Agent:
        host = Host("local", workdir=str(self.root))
        return Agent(LocalTransport(host), Deployment("", host, sys.executable, str(self.root)))


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Workdir]:
    made = Workdir(tmp_path / "workdir")
    yield made
    for directory in made.started:
        _agent("stop", "--dir", str(directory), "--timeout", "2")


def _tree(root: Path) -> dict[str, tuple[int, int, int]]:
    """Every path under ``root`` with its size, mode and modification time (ns)."""
    seen: dict[str, tuple[int, int, int]] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            info = path.lstat()
            seen[str(path.relative_to(root))] = (info.st_size, info.st_mode, info.st_mtime_ns)
    return seen


def test_a_survey_reports_every_deployment_as_status_does_and_writes_nothing(
    workdir: Workdir,
) -> None:
    assert workdir.start("serving")["ok"]
    workdir.wait("serving", READY)
    assert workdir.start("replica@1")["ok"]
    workdir.wait("replica@1", READY)
    assert workdir.start("stopped")["ok"]
    workdir.wait("stopped", READY)
    _agent("stop", "--dir", str(workdir.root / "stopped"), "--timeout", "2")
    # a stranger's deployment directory, one others can write, and what is no deployment
    stranger = workdir.root / "stranger"
    stranger.mkdir(mode=0o700)
    (stranger / "state.json").write_text(json.dumps({"state": "READY", "pid": 1}))
    os.chown(stranger, NOBODY, NOBODY)
    open_dir = workdir.root / "open-to-all"
    open_dir.mkdir()
    (open_dir / "spec.json").write_text("{}")
    open_dir.chmod(0o777)
    (workdir.root / "notes").mkdir()
    (workdir.root / "README").write_text("not a deployment\n")
    before = _tree(workdir.root)

    survey = workdir.client().survey()

    assert _tree(workdir.root) == before  # nothing written, nothing touched
    assert not list((workdir.root / ".orch").glob("agent-*"))  # the agent was carried
    assert sorted(survey.deployments) == ["replica@1", "serving", "stopped"]
    assert set(survey.unreadable) == {"open-to-all", "stranger"}
    assert "writable by group or others" in survey.unreadable["open-to-all"]
    assert f"belongs to uid {NOBODY}" in survey.unreadable["stranger"]
    assert survey.host == "local"
    assert survey.workdir == str(workdir.root)
    assert survey.hostname == os.uname().nodename
    for name in ("serving", "replica@1", "stopped"):  # what status --dir says of each
        status = _agent("status", "--dir", str(workdir.root / name))
        reported = survey.deployments[name]
        assert reported.state == status["state"]
        assert reported.pid == status.get("pid")
        assert reported.run_id == status["run_id"]
        assert reported.launch_digest == "abc"
    assert survey.deployments["serving"].state == READY
    assert survey.deployments["serving"].server_alive
    assert survey.deployments["stopped"].state == EXITED
    assert not survey.deployments["stopped"].agent_alive


def test_the_survey_names_the_sglang_of_the_hosts_python(workdir: Workdir) -> None:
    from importlib import metadata

    try:
        expected: str | None = metadata.version("sglang")
    except metadata.PackageNotFoundError:
        expected = None
    answer = _agent("survey", "--workdir", str(workdir.root))
    assert answer["sglang_version"] == expected
    assert decode_survey("h", answer).deployments == {}


def test_a_workdir_that_does_not_exist_is_surveyed_empty_and_not_created(tmp_path: Path) -> None:
    host = Host("local", workdir=str(tmp_path / "absent"))
    client = Agent(LocalTransport(host), Deployment("", host, sys.executable, host.workdir))
    survey = client.survey()
    assert survey.deployments == {}
    assert survey.unreadable == {}
    assert not (tmp_path / "absent").exists()


def test_a_workdir_others_can_write_refuses_the_survey(workdir: Workdir) -> None:
    workdir.root.chmod(0o777)
    with pytest.raises(PreflightError, match="writable by group or others"):
        workdir.client().survey()


def test_a_survey_runs_the_agent_the_host_holds_without_writing_its_code_cache(
    workdir: Workdir, tmp_path: Path
) -> None:
    # the agent as pushed by an earlier up, without its compiled-code cache beside it
    bundle_home = workdir.root / ".orch"
    bundle_home.mkdir(mode=0o700)
    client = workdir.client()
    from orchestrator.fleet.client import agent_bundle

    bundle = agent_bundle()
    (bundle_home / bundle.file_name).write_bytes(bundle.data)
    (bundle_home / bundle.file_name).chmod(0o600)
    before = _tree(workdir.root)
    assert client.survey().deployments == {}
    assert _tree(workdir.root) == before
    # the same run without --no-write keeps its cache: the difference is the flag's
    client.call("survey", "--workdir", str(workdir.root))
    assert _tree(workdir.root) != before
