"""The agent supervising real child processes on this machine: detach, state, restarts,
verdicts, stop and sweep, locks. The children are small Python programs printing SGLang's
real log formats; the full SGLang stand-in is exercised in tests/e2e."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.fleet.bootstrap import bootstrap_argv
from orchestrator.fleet.client import agent_bundle
from orchestrator.fleet.protocol.runs import decode_runs_reply
from orchestrator.fleet.protocol.start import decode_start
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.fleet.protocol.stop import decode_stop
from orchestrator.remote.agent.identity import RUN_ID_ENV
from orchestrator.remote.agent.protocol import PROTOCOL
from orchestrator.remote.agent.sglang_log import READY_LINE
from orchestrator.remote.agent.states import EXITED, INITIAL_STATE, TRANSITIONS
from orchestrator.remote.agent.verdict import STOPPED


def _agent_prefix() -> tuple[str, ...]:
    """The agent as a host runs it: orch's bundle of its package, written once into a private
    directory (0700) and run through the checking bootstrap from the bytes it checked. The
    directory goes at exit: a detached supervisor still running then holds its code in memory."""
    bundle = agent_bundle()
    home = Path(tempfile.mkdtemp(prefix="orch-agent-bundle-"))
    atexit.register(shutil.rmtree, home, ignore_errors=True)
    path = home / bundle.file_name
    path.write_bytes(bundle.data)
    path.chmod(0o600)
    return bootstrap_argv(sys.executable, str(path), bundle.sha256, ())


AGENT = _agent_prefix()

PRELUDE = "import os, sys, time, signal\nsys.stdout.reconfigure(line_buffering=True)\n"
CONFIG_LINE = "print('[2026-11-29 07:42:55] server_args=ServerArgs(model_path=\"/m\")')\n"
# Serve /health on the spec's port (the agent declares READY on a 200), then log the ready line.
READY = (
    "import http.server, threading\n"
    "class H(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers()\n"
    "    def log_message(self, *a): pass\n"
    "s = http.server.HTTPServer(('127.0.0.1', int(os.environ['TEST_PORT'])), H)\n"
    "threading.Thread(target=s.serve_forever, daemon=True).start()\n"
    f"print('[2026-11-29 07:42:56] {READY_LINE}')\n"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _spec(argv: list[str], **overrides: Any) -> dict[str, Any]:
    port = _free_port()
    spec: dict[str, Any] = {
        "protocol": PROTOCOL,
        "deployment": "t",
        "argv": argv,
        "env": {"FROM_SPEC": "yes", "TEST_PORT": str(port)},
        "port": port,
        "health": {"endpoint": "/health", "interval_s": 60, "startup_timeout_s": 30},
        "restart": {
            "mode": "on-failure",
            "delay_s": 0.05,
            "multiplier": 2,
            "max_delay_s": 0.2,
            "start_limit": 3,
            "start_limit_interval_s": 60,
        },
        "stop_timeout_s": 2,
        "meta": {"launch_digest": "abc"},
    }
    spec.update(overrides)
    return spec


def _agent(*args: str) -> dict[str, Any]:
    done = subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode in (0, 3), done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


class Deployment:
    def __init__(self, root: Path) -> None:
        self.dir = root / "workdir" / "t"
        self.dir.mkdir(parents=True)
        self._specs = 0

    def start(self, program: str, **overrides: Any) -> dict[str, Any]:
        self._specs += 1
        spec_path = self.dir / f".spec-{self._specs}.json"
        spec_path.write_text(
            json.dumps(_spec([sys.executable, "-c", PRELUDE + program], **overrides))
        )
        return _agent("start", "--dir", str(self.dir), "--spec", str(spec_path))

    def status(self) -> dict[str, Any]:
        return _agent("status", "--dir", str(self.dir))

    def stop(self) -> dict[str, Any]:
        return _agent("stop", "--dir", str(self.dir), "--timeout", "2")

    def wait_for(self, *states: str, timeout: float = 10.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.status()
            if status.get("state") in states:
                return status
            time.sleep(0.05)
        raise AssertionError(f"never reached {states}: {self.status()}")


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    yield made
    if (made.dir / "state.json").exists():
        made.stop()


def test_agent_detaches_and_reports_ready(deployment: Deployment) -> None:
    reply = deployment.start(CONFIG_LINE + READY + "time.sleep(60)\n")
    assert reply["ok"] is True
    started = decode_start(reply)  # the real agent's answers, decoded as orch decodes them
    assert started.state is not None
    assert started.state.pid
    assert started.state.run_id
    status = deployment.wait_for("READY")
    assert status["agent_alive"]
    assert status["server_alive"]
    assert status["meta"] == {"launch_digest": "abc"}
    state = decode_state(status)  # the protocol's contract: orch reads what the agent writes
    assert state.ready
    assert state.pid == status["pid"]
    assert state.launch_digest == "abc"
    server = psutil.Process(status["pid"])
    assert os.getpgid(server.pid) == server.pid  # its own process group
    assert server.environ()["FROM_SPEC"] == "yes"
    assert server.environ()[RUN_ID_ENV] == status["run_id"]
    log = Path(status["log"]).read_text()
    assert READY_LINE in log
    assert oct((deployment.dir / "spec.json").stat().st_mode & 0o777) == "0o600"
    (run,) = decode_runs_reply(_agent("runs", "--dir", str(deployment.dir))).runs
    assert run.run_id == status["run_id"]
    stopped = decode_stop(deployment.stop())
    assert stopped.state.state == EXITED
    assert stopped.state.last_exit is not None
    assert stopped.state.last_exit.cls == STOPPED


def test_agent_stop_kills_the_group_and_sweeps_escaped_children(deployment: Deployment) -> None:
    escapee = (
        "import subprocess\n"
        "subprocess.Popen([sys.executable, '-c', 'import os,time; os.setsid(); time.sleep(60)'])\n"
    )
    deployment.start(CONFIG_LINE + escapee + READY + "time.sleep(60)\n")
    status = deployment.wait_for("READY")
    server = psutil.Process(status["pid"])
    time.sleep(0.7)  # let the agent see the child once
    children = server.children(recursive=True)
    assert children
    final = deployment.stop()
    assert final["state"] == "EXITED"
    assert not psutil.pid_exists(server.pid)
    for child in children:
        assert not psutil.pid_exists(child.pid) or child.status() == psutil.STATUS_ZOMBIE


def test_agent_config_error_is_fatal_without_restart(deployment: Deployment) -> None:
    program = (
        "print('Traceback (most recent call last):', file=sys.stderr)\n"
        "print('ValueError: bad mamba strategy', file=sys.stderr)\nsys.exit(1)\n"
    )
    deployment.start(program)
    status = deployment.wait_for("FATAL")
    assert status["restarts"] == 0
    assert status["starts"] == 1
    assert status["last_exit"]["class"] == "config-error"
    assert status["last_exit"]["message"] == "ValueError: bad mamba strategy"


def test_agent_restarts_a_crash_with_backoff_then_hits_the_start_limit(
    deployment: Deployment,
) -> None:
    deployment.start(CONFIG_LINE + "time.sleep(0.1)\nsys.exit(7)\n")
    status = deployment.wait_for("FATAL")
    assert status["starts"] == 3
    assert status["restarts"] == 2
    assert "start limit hit" in status["message"]
    assert status["last_exit"]["class"] == "crashed"
    runs = _agent("runs", "--dir", str(deployment.dir))["runs"]
    assert len(runs) == 3  # one directory and log per run
    events = [
        json.loads(line) for line in (deployment.dir / "events.jsonl").read_text().splitlines()
    ]
    backoffs = [e["delay_s"] for e in events if e["event"] == "backoff"]
    assert backoffs == [0.05, 0.1]
    # every change recorded, each one allowed and starting where the last one ended
    changes = [(e["from"], e["to"]) for e in events if e["event"] == "state"]
    assert [old for old, _ in changes] == [INITIAL_STATE] + [new for _, new in changes[:-1]]
    assert all(new in TRANSITIONS[old] for old, new in changes)
    assert changes.count(("BACKOFF", "STARTING")) == 2
    assert changes[-1][1] == "FATAL"


def test_agent_sigkill_of_the_server_restarts_it_and_keeps_the_previous_log(
    deployment: Deployment,
) -> None:
    deployment.start(CONFIG_LINE + READY + "print('run marker', os.getpid())\ntime.sleep(60)\n")
    first = deployment.wait_for("READY")
    os.kill(first["pid"], 9)
    deadline = time.monotonic() + 10
    second = deployment.status()
    while second.get("run_id") == first["run_id"] or second.get("state") != "READY":
        assert time.monotonic() < deadline, second
        time.sleep(0.05)
        second = deployment.status()
    assert second["restarts"] == 1
    assert second["last_exit"]["class"] == "killed"
    old_log = Path(first["log"]).read_text()
    assert f"run marker {first['pid']}" in old_log
    assert second["log"] != first["log"]


def test_two_supervisors_for_one_deployment_never_both_run(deployment: Deployment) -> None:
    program = CONFIG_LINE + READY + "time.sleep(60)\n"
    first = deployment.start(program)
    second = deployment.start(program)
    assert first["ok"] is True
    assert second["ok"] is False
    assert "locked" in second["reason"]


def test_agent_output_is_redirected_so_a_caller_pipe_closes(deployment: Deployment) -> None:
    """`start` returns promptly: the detached supervisor holds none of the caller's pipes
    (over SSH, a held pipe keeps the session open: the classic nohup-over-ssh hang)."""
    began = time.monotonic()
    deployment.start(CONFIG_LINE + READY + "time.sleep(60)\n")
    assert time.monotonic() - began < 5
