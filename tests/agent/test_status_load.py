"""``agent status --load``: a READY stand-in's /v1/loads read by the real agent on this machine
(known figures: ORCH_STANDIN_LOADS; its --api-key sent, never shown), the supervisor's sample
kept in state.json, and kept after the stop."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.agent.states import EXITED, READY
from tests.agent.test_reconfigure import STANDIN_KEY, _standin_spec
from tests.agent.test_supervisor import AGENT, _agent

FIGURES = {
    "num_running_reqs": 3,
    "num_waiting_reqs": 1,
    "token_usage": 0.42,
    "gen_throughput": 1234.5,
    "cache_hit_rate": 0.615,
    "speculative": {"accept_length": 2.31, "accept_rate": 0.66},
}


@pytest.fixture
def directory(tmp_path: Path) -> Iterator[Path]:
    made = tmp_path / "workdir" / "t"
    made.mkdir(parents=True, mode=0o700)
    yield made
    if (made / "state.json").exists():
        _agent("stop", "--dir", str(made), "--timeout", "2")


def _status(directory: Path, *extra: str) -> tuple[dict[str, Any], str]:
    done = subprocess.run(
        [*AGENT, "status", "--dir", str(directory), *extra],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer, done.stdout + done.stderr


def _wait_ready(directory: Path) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        answer, _ = _status(directory)
        if answer.get("state") == READY and answer.get("load"):
            return answer
        time.sleep(0.1)
    raise AssertionError(f"never READY with a load: {_status(directory)[0]}")


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_status_load_reads_the_server_now_and_the_supervisor_keeps_the_last_figures(
    directory: Path, version: str
) -> None:
    spec = _standin_spec(version)
    spec["env"]["ORCH_STANDIN_LOADS"] = json.dumps(FIGURES)
    path = directory / ".spec.json"
    path.write_text(json.dumps(spec))
    assert _agent("start", "--dir", str(directory), "--spec", str(path))["ok"]

    sampled = _wait_ready(directory)["load"]  # the supervisor's, at READY
    assert sampled["live"] is False
    assert sampled["loads"][0]["num_running_reqs"] == 3
    assert sampled["version"] == version

    answer, output = _status(directory, "--load")
    live = answer["load"]
    assert live["live"] is True
    assert live["age_s"] == 0.0
    (rank,) = live["loads"]
    assert rank["num_waiting_reqs"] == 1
    assert rank["gen_throughput"] == 1234.5
    assert rank["speculative"] == {"accept_length": 2.31, "accept_rate": 0.66}
    assert STANDIN_KEY not in output  # sent as a header; never in an answer

    _agent("stop", "--dir", str(directory), "--timeout", "2")
    stopped, _ = _status(directory, "--load")  # nothing to read now: the last figures
    assert stopped["state"] == EXITED
    assert stopped["load"]["live"] is False
    assert stopped["load"]["loads"] == sampled["loads"]
    assert stopped["load"]["age_s"] >= 0.0
