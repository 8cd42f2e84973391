"""``agent reconfigure``: a running supervisor takes a new spec without its server being
touched, with real supervisors on this machine: a tiny server for the agent-only changes, orch's
SGLang stand-in (standin/, NOT SGLang) for the live ones, applied over HTTP and verified."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.fleet.protocol.reconfigure import decode_reconfigure, reconfigure_request
from orchestrator.remote.agent.states import EXITED, READY
from tests.agent.test_supervisor import AGENT, CONFIG_LINE, PRELUDE, _agent, _spec
from tests.agent.test_supervisor import READY as SERVES_READY

STANDIN_KEY = "sk-live-test-0123"


def _serving(marker: str) -> str:
    return (
        PRELUDE + f"print('MARKER {marker}')\n" + CONFIG_LINE + SERVES_READY + "time.sleep(120)\n"
    )


class Running:
    """One deployment started by the real agent, reconfigured through orch's request."""

    def __init__(self, root: Path) -> None:
        self.dir = root / "workdir" / "t"
        self.dir.mkdir(parents=True, mode=0o700)
        self.spec: dict[str, Any] = {}

    def start(self, spec: dict[str, Any]) -> dict[str, Any]:
        self.spec = spec
        path = self.dir / ".spec-first.json"
        path.write_text(json.dumps(spec))
        return _agent("start", "--dir", str(self.dir), "--spec", str(path))

    def status(self) -> dict[str, Any]:
        return _agent("status", "--dir", str(self.dir))

    def wait(self, state: str, timeout: float = 30.0, **where: Any) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status.get("state") == state and all(status.get(k) == v for k, v in where.items()):
                return status
            time.sleep(0.05)
        raise AssertionError(f"never {state} {where}: {self.status()}")

    def reconfigure(
        self, spec: dict[str, Any], live: list[dict[str, Any]] | None = None
    ) -> tuple[dict[str, Any], str]:
        import subprocess

        request = reconfigure_request(str(self.dir), spec, "#!/bin/sh\necho new\n", live)
        done = subprocess.run(
            [*AGENT, *request.args],
            input=request.stdin,
            capture_output=True,
            timeout=60,
            check=False,
        )
        assert done.returncode in (0, 3), done.stderr
        output = done.stdout.decode()
        answer: dict[str, Any] = json.loads(output)
        return answer, output

    def events(self) -> list[dict[str, Any]]:
        lines = (self.dir / "events.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def files(self) -> dict[str, bytes]:
        return {
            path.name: path.read_bytes()
            for path in sorted(self.dir.iterdir())
            if path.is_file() and path.name not in ("events.jsonl", "agent.log", "state.json")
        }


@pytest.fixture
def running(tmp_path: Path) -> Iterator[Running]:
    made = Running(tmp_path)
    yield made
    if (made.dir / "state.json").exists():
        _agent("stop", "--dir", str(made.dir), "--timeout", "2")


def _new_spec(old: dict[str, Any], **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(json.dumps(old))
    spec.update(changes)
    return spec


def test_agent_only_the_server_runs_on_with_the_new_policy_at_once_and_argv_at_its_next_start(
    running: Running,
) -> None:
    first = _spec([sys.executable, "-c", _serving("v1")])
    first["restart"]["mode"] = "no"
    assert running.start(first)["ok"]
    before = running.wait(READY)
    new = _new_spec(
        first,
        argv=[sys.executable, "-c", _serving("v2")],
        meta={"launch_digest": "def", "git_commit": "b" * 40, "git_dirty": False},
    )
    new["restart"] = dict(first["restart"], mode="on-failure")

    answer, _ = running.reconfigure(new)

    assert answer["ok"], answer
    after = answer["state"]
    assert after["server"]["pid"] == before["server"]["pid"]  # the server untouched
    assert after["server"]["start_ticks"] == before["server"]["start_ticks"]
    assert after["run_id"] == before["run_id"]
    assert after["state"] == READY
    assert after["meta"]["launch_digest"] == "def"
    assert after["meta"]["git_commit"] == "b" * 40
    assert after["reconfigured"]["how"] == "agent-only"
    assert decode_reconfigure(answer).state is not None
    assert [e["how"] for e in running.events() if e["event"] == "reconfigured"] == ["agent-only"]
    assert json.loads((running.dir / "spec.previous.json").read_text())["argv"] == first["argv"]
    assert (running.dir / "launch.sh").read_text() == "#!/bin/sh\necho new\n"
    # the new restart policy at once: the old one (no) would leave it EXITED
    os.kill(before["server"]["pid"], signal.SIGKILL)
    restarted = _next_ready(running, before)
    # ... and the new argv at that start
    log = Path(restarted["log"]).read_text()
    assert "MARKER v2" in log
    assert "MARKER v1" not in log
    assert restarted["meta"]["launch_digest"] == "def"


def _next_ready(running: Running, before: dict[str, Any]) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = running.status()
        assert status["state"] != EXITED, status["message"]
        if status["state"] == READY and status["run_id"] != before["run_id"]:
            return status
        time.sleep(0.05)
    raise AssertionError(f"no new READY run: {running.status()}")


def test_a_new_spec_that_moves_the_server_is_refused_and_nothing_is_written(
    running: Running,
) -> None:
    first = _spec([sys.executable, "-c", _serving("v1")])
    assert running.start(first)["ok"]
    running.wait(READY)
    files = running.files()
    answer, _ = running.reconfigure(_new_spec(first, port=first["port"] + 1))
    assert not answer["ok"]
    assert "that is a new start" in answer["reason"]
    assert running.files() == files
    assert not [e for e in running.events() if e["event"] == "reconfigured"]


def test_a_deployment_without_a_running_supervisor_is_refused(running: Running) -> None:
    first = _spec([sys.executable, "-c", _serving("v1")])
    assert running.start(first)["ok"]
    running.wait(READY)
    _agent("stop", "--dir", str(running.dir), "--timeout", "2")
    files = running.files()
    answer, _ = running.reconfigure(_new_spec(first, meta={"launch_digest": "def"}))
    assert not answer["ok"]
    assert "no supervisor runs" in answer["reason"]
    assert running.files() == files


# -- live changes, on the stand-in -----------------------------------------------------------------


def _standin_spec(version: str) -> dict[str, Any]:
    spec = _spec([])
    spec["argv"] = [
        sys.executable,
        "-m",
        "sglang.launch_server",
        "--model-path",
        "Qwen/Qwen3-8B",
        "--host",
        "127.0.0.1",
        "--port",
        str(spec["port"]),
        "--api-key",
        STANDIN_KEY,
    ]
    spec["env"].update(
        ORCH_STANDIN_VERSION=version, ORCH_STANDIN_LOAD_S="0.1", ORCH_STANDIN_GRAPH_S="0"
    )
    spec["health"]["interval_s"] = 0.5
    return spec


def _server_info(port: int) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/server_info",
        headers={"Authorization": f"Bearer {STANDIN_KEY}"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:  # noqa: S310 - our stand-in
        info: dict[str, Any] = json.loads(reply.read())
    return info


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_live_changes_are_applied_verified_and_the_server_runs_on(
    running: Running, version: str
) -> None:
    first = _standin_spec(version)
    assert running.start(first)["ok"]
    before = running.wait(READY)
    live = [
        {
            "endpoint": "/set_internal_state",
            "body": {"server_args": {"pp_max_micro_batch_size": 2}},
        },
        {"endpoint": "/configure_logging", "body": {"log_requests": True}},
    ]
    new = _new_spec(first, meta={"launch_digest": "live1"})

    answer, output = running.reconfigure(new, live)

    assert answer["ok"], answer
    assert answer["live_applied"] == {"pp_max_micro_batch_size": 2, "log_requests": True}
    assert answer["state"]["reconfigured"]["how"] == (
        "live: pp_max_micro_batch_size=2, log_requests=true"
    )
    assert answer["state"]["server"]["pid"] == before["server"]["pid"]
    assert answer["state"]["meta"]["launch_digest"] == "live1"
    assert STANDIN_KEY not in output  # the key went in a header, never into the answer
    info = _server_info(first["port"])
    assert [s["pp_max_micro_batch_size"] for s in info["internal_states"]] == [2]


def test_a_live_change_the_server_refuses_writes_nothing(running: Running) -> None:
    first = _standin_spec("0.5.23")
    assert running.start(first)["ok"]
    running.wait(READY)
    files = running.files()
    live = [
        {
            "endpoint": "/set_internal_state",
            "body": {"server_args": {"pp_max_micro_batch_size": 10**6}},
        }
    ]
    answer, output = running.reconfigure(_new_spec(first, meta={"launch_digest": "nope"}), live)
    assert not answer["ok"]
    assert "the server refused ([false])" in answer["reason"]
    assert STANDIN_KEY not in output
    assert running.files() == files
    assert running.status()["meta"]["launch_digest"] == "abc"
    assert not [e for e in running.events() if e["event"] == "reconfigured"]
    info = _server_info(first["port"])
    assert info["internal_states"][0]["pp_max_micro_batch_size"] != 10**6


def test_a_logging_change_the_release_does_not_know_is_not_verified(running: Running) -> None:
    first = _standin_spec("0.5.11")  # 0.5.11's ConfigureLoggingReq has no log_level
    assert running.start(first)["ok"]
    running.wait(READY)
    files = running.files()
    live = [{"endpoint": "/configure_logging", "body": {"log_level": "debug"}}]
    answer, _ = running.reconfigure(_new_spec(first, meta={"launch_digest": "nope"}), live)
    assert not answer["ok"]
    assert "did not log its new logging configuration (log_level='debug')" in answer["reason"]
    assert running.files() == files
