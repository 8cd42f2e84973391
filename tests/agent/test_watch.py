"""The agent's ``watch`` stream (what ``orch up`` follows a startup with, on one channel) and the
commands that take their secrets on stdin (``start --spec -``, ``probe --env-file -``): real
agent processes supervising real children on this machine."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.agent import states as agent_states
from orchestrator.remote.agent.protocol import PROTOCOL
from orchestrator.remote.agent.sglang_log import READY_LINE
from orchestrator.remote.agent.states import EXITED, FATAL, UNSUPERVISED
from orchestrator.remote.agent.verdict import CUDA_OOM
from tests.agent.test_supervisor import (
    AGENT,
    CONFIG_LINE,
    PRELUDE,
    READY,
    Deployment,
    _agent,
    _spec,
)


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    made = Deployment(tmp_path)
    yield made
    if (made.dir / "state.json").exists():
        made.stop()


def _watch(deployment: Deployment, run_id: str, seconds: float = 30) -> Iterator[dict[str, Any]]:
    process = subprocess.Popen(
        [*AGENT, "watch", "--dir", str(deployment.dir), "--run", run_id, "--seconds", str(seconds)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        for line in process.stdout:
            yield json.loads(line)
    finally:
        process.kill()
        process.wait()
        process.stdout.close()


def _log_text(events: list[dict[str, Any]]) -> str:
    return b"".join(base64.b64decode(e["log"]) for e in events if "log" in e).decode()


def test_watch_streams_the_log_and_ends_on_ready(deployment: Deployment) -> None:
    reply = deployment.start(CONFIG_LINE + READY + "time.sleep(60)\n")
    run_id = reply["state"]["run_id"]
    events = list(_watch(deployment, run_id))
    states = [e["state"]["state"] for e in events if "state" in e]
    assert states[-1] == agent_states.READY
    assert READY_LINE in _log_text(events)
    assert "server_args=ServerArgs" in _log_text(events)
    assert events[-1]["protocol"] == PROTOCOL  # the answer line, after the stream
    assert events[-1]["ended"] == "state"


def test_watch_reports_the_death_as_it_happens(deployment: Deployment) -> None:
    program = CONFIG_LINE + "time.sleep(1.5)\nprint('Traceback (most recent call last):')\n"
    program += "print('torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB')\n"
    program += "sys.exit(1)\n"
    reply = deployment.start(program, restart={"mode": "no"})
    run_id = reply["state"]["run_id"]
    seen_at, exited = None, None
    for event in _watch(deployment, run_id):
        last_exit = (event.get("state") or {}).get("last_exit")
        if last_exit and last_exit["run_id"] == run_id:
            seen_at, exited = time.time(), last_exit
    assert exited is not None
    assert exited["class"] == CUDA_OOM
    assert seen_at is not None
    assert seen_at - float(exited["at"]) < 1.0  # said within a few of the watcher's ticks


def test_watch_says_when_the_supervisor_died(deployment: Deployment) -> None:
    reply = deployment.start(CONFIG_LINE + "time.sleep(60)\n")
    run_id = reply["state"]["run_id"]
    status = deployment.status()
    os.kill(status["agent_pid"], signal.SIGKILL)
    events = list(_watch(deployment, run_id))
    died = [e["status"] for e in events if "status" in e]
    assert died
    assert died[-1]["agent_alive"] is False
    assert died[-1]["state"] == UNSUPERVISED
    assert events[-1]["ended"] == "supervisor"
    os.killpg(died[-1]["pid"], signal.SIGKILL)


def test_watch_refuses_a_run_id_that_is_a_path(deployment: Deployment) -> None:
    answer = _agent("watch", "--dir", str(deployment.dir), "--run", "../../etc")
    assert answer["ok"] is False
    assert "not a run id" in answer["reason"]


def test_start_takes_the_spec_and_launch_script_on_stdin(deployment: Deployment) -> None:
    spec = _spec([sys.executable, "-c", PRELUDE + CONFIG_LINE + READY + "time.sleep(60)\n"])
    spec["env"]["HF_TOKEN"] = "hf_" + "s" * 30
    bundle = {"spec": spec, "launch_script": "#!/usr/bin/env bash\nexec true\n"}
    done = subprocess.run(
        [*AGENT, "start", "--dir", str(deployment.dir), "--spec", "-"],
        input=json.dumps(bundle),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["ok"] is True
    assert oct((deployment.dir / "spec.json").stat().st_mode & 0o777) == "0o600"
    assert oct((deployment.dir / "launch.sh").stat().st_mode & 0o777) == "0o600"
    assert (deployment.dir / "launch.sh").read_text() == bundle["launch_script"]
    assert list(deployment.dir.glob(".spec-*")) == []  # nothing pending left behind
    assert "hf_" not in done.stdout + done.stderr
    deployment.wait_for(agent_states.READY)


def test_probe_takes_the_environment_on_stdin(tmp_path: Path) -> None:
    """``import sglang`` is checked under the server's environment, given on stdin."""
    package = tmp_path / "site" / "sglang"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("__version__ = '9.9.9'\n")
    done = subprocess.run(
        [*AGENT, "probe", "--port", "1", "--env-file", "-"],
        input=json.dumps({"PYTHONPATH": str(tmp_path / "site")}),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr
    facts = json.loads(done.stdout.splitlines()[-1])
    assert "9.9.9" in json.dumps(facts)


def _start_watching(deployment: Deployment, program: str, *extra: str) -> list[dict[str, Any]]:
    """``start --spec - --watch``: every line it said, in order."""
    spec = _spec([sys.executable, "-c", PRELUDE + program])
    bundle = {"spec": spec, "launch_script": "#!/usr/bin/env bash\nexec true\n"}
    done = subprocess.run(
        [*AGENT, "start", "--dir", str(deployment.dir), "--spec", "-", "--watch", "30", *extra],
        input=json.dumps(bundle),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_start_watch_answers_then_streams_the_run_and_inspects_it_before_ready(
    deployment: Deployment,
) -> None:
    """One command for what took three (start, watch, inspect): the supervisor's answer first,
    then the startup, then what the server received, just ahead of the READY state."""
    said = _start_watching(
        deployment,
        CONFIG_LINE + READY + "time.sleep(60)\n",
        "--inspect-port",
        "1",
        "--inspect-env",
        "FROM_SPEC",
        "--inspect-env",
        "NOT_SET",
    )
    assert said[0]["start"]["ok"] is True
    run_id = said[0]["start"]["state"]["run_id"]
    assert READY_LINE in _log_text(said)
    keys = [
        next(iter(k for k in ("start", "inspect", "state", "log", "beat", "protocol") if k in e))
        for e in said
    ]
    ready_at = next(
        i
        for i, e in enumerate(said)
        if "state" in e
        and e["state"]["state"] == agent_states.READY
        and e["state"]["run_id"] == run_id
    )
    assert keys[ready_at - 1] == "inspect"  # what orch compares next comes before READY
    inspected = said[ready_at - 1]["inspect"]
    assert inspected["found_by"] == "orch"
    assert inspected["pid"] == said[ready_at]["state"]["pid"]
    assert inspected["env"] == {"FROM_SPEC": "yes"}  # only the names asked, when set
    assert inspected["argv"][:2] == [sys.executable, "-c"]
    assert keys.count("inspect") == 1
    assert said[-1]["protocol"] == PROTOCOL
    assert said[-1]["ended"] == "state"


def test_start_watch_that_is_refused_answers_once(deployment: Deployment) -> None:
    deployment.start(CONFIG_LINE + READY + "time.sleep(60)\n")
    said = _start_watching(deployment, "time.sleep(60)\n")
    assert len(said) == 1  # no run started, nothing to follow
    assert said[0]["ok"] is False
    assert "locked" in said[0]["reason"]


def _probe(deployment: Deployment) -> dict[str, Any]:
    done = subprocess.run(
        [*AGENT, "probe", "--port", "1", "--env-file", "-", "--dir", str(deployment.dir)],
        input="{}",
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode in (0, 3), done.stderr
    answer: dict[str, Any] = json.loads(done.stdout.splitlines()[-1])
    return answer


def test_probe_with_dir_answers_the_status_and_the_facts_in_one_command(
    deployment: Deployment,
) -> None:
    answer = _probe(deployment)
    assert answer["status"]["deployed"] is False
    assert answer["port"]["port"] == 1  # the facts, since nothing of the deployment runs
    assert "python" in answer


def test_probe_with_dir_skips_the_facts_while_the_deployment_runs(deployment: Deployment) -> None:
    deployment.start(CONFIG_LINE + READY + "time.sleep(60)\n")
    deployment.wait_for(agent_states.READY)
    answer = _probe(deployment)
    assert answer["facts"] == "skipped"
    assert answer["status"]["agent_alive"] is True
    assert answer["status"]["state"] == agent_states.READY
    assert "port" not in answer


def _tail(deployment: Deployment, *args: str) -> dict[str, Any]:
    return _agent("tail", "--dir", str(deployment.dir), *args)


def test_tail_answers_the_current_runs_last_lines_and_where_a_follow_goes_on(
    deployment: Deployment,
) -> None:
    program = "".join(f"print('line {n}')\n" for n in range(50)) + "sys.exit(3)\n"
    run_id = deployment.start(program, restart={"mode": "no"})["state"]["run_id"]
    deployment.wait_for(EXITED, FATAL)
    answer = _tail(deployment, "--lines", "3")
    log = deployment.dir / "runs" / run_id / "server.log"
    written = log.read_bytes()
    assert answer["run_id"] == run_id
    assert base64.b64decode(answer["data"]) == b"".join(written.splitlines(keepends=True)[-3:])
    assert answer["size"] == len(written)
    assert answer["rotated_size"] is None
    # after a rotation the lines the new file lacks come from server.log.1
    rotated = b"".join(f"old {n}\n".encode() for n in range(10))
    (log.parent / "server.log.1").write_bytes(rotated)
    log.write_bytes(b"new 0\nnew 1\n")
    answer = _tail(deployment, "--lines", "4", "--run", run_id)
    assert base64.b64decode(answer["data"]) == b"old 8\nold 9\nnew 0\nnew 1\n"
    assert (answer["size"], answer["rotated_size"]) == (12, len(rotated))


def test_tail_refuses_a_run_id_that_is_a_path_and_says_when_there_is_no_run(
    deployment: Deployment,
) -> None:
    assert _tail(deployment, "--run", "../../etc")["ok"] is False
    deployment.dir.chmod(0o700)
    answer = _tail(deployment)
    assert answer["ok"] is False
    assert answer["reason"] in ("no runs", "not deployed")


def test_watch_of_a_new_run_ignores_the_previous_runs_state(deployment: Deployment) -> None:
    """A start answers once its server is spawned, and state.json follows: until it does, the
    previous run's EXITED state must not read as the new run's end (orch up --replace)."""
    deployment.start(CONFIG_LINE + "sys.exit(0)\n", restart={"mode": "no"})
    old = deployment.wait_for(EXITED)
    newer = "9999-20991231T000000Z"  # a run id after the recorded one, not written yet
    assert old["run_id"] < newer
    said = list(_watch(deployment, newer, seconds=1))
    assert [e for e in said if "state" in e] == []
    assert said[-1]["ended"] == "timeout"
