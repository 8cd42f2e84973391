"""state.json and events.jsonl hold what they held when the agent was one file: the supervisor's
state became a record (AgentState) written by a journal, and a recorded run reads the same,
key for key and value for value (tests/fixtures/agent-protocol/state-1f4782b.json, written by the
single-file agent of commit 1f4782b in these scenarios: ``python -m tests.unit.test_agent_state``
writes them again from this agent)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.agent.files import Paths
from orchestrator.remote.agent.policy import RestartPolicy
from orchestrator.remote.agent.record import AgentState
from orchestrator.remote.agent.spec import Spec
from orchestrator.remote.agent.supervisor import Supervisor
from tests.conftest import REPO
from tests.unit.test_supervisor_logic import CONFIG, FakeClock, Script, ScriptedWorld

FIXTURE = REPO / "tests" / "fixtures" / "agent-protocol" / "state-1f4782b.json"
PREVIOUS = REPO / "tests" / "fixtures" / "agent-protocol" / "agent-6eb3b5c.json"

# The scenarios: a server READY, then crashed, restarted after a backoff that a stop ends; a
# server that cannot be started. Each is played on a fake clock (nothing real but the files).
READY_THEN_CRASH = Script(lines=((0.5, CONFIG),), healthy_from=1.0, exit_at=10.0, returncode=1)
NO_PROGRAM = FileNotFoundError(2, "No such file or directory")


def _spec(restart: RestartPolicy) -> Spec:
    return Spec(
        deployment="t",
        argv=("sglang", "serve", "--model-path", "/m"),
        env={"A": "1"},
        port=30000,
        health_host="127.0.0.1",
        health_endpoint="/health",
        health_interval_s=5.0,
        startup_timeout_s=1800.0,
        restart=restart,
        meta={"launch_digest": "0123456789ab"},
    )


def play(root: Path, make: Callable[..., Any], name: str) -> dict[str, Any]:
    """One scenario's state.json and events.jsonl, what varies from run to run (the test
    directory, this process's pid and identity) named instead. ``make(spec, paths, clock,
    world)``: a supervisor of the agent under test (this one, or another version's)."""
    paths = Paths(str(root / name / "workdir" / "t"))
    Path(paths.runs).mkdir(parents=True)
    clock = FakeClock()
    if name == "ready-then-crash":
        world = ScriptedWorld(clock, [READY_THEN_CRASH])
        supervisor = make(_spec(RestartPolicy()), paths, clock, world)
        clock.at(11.0, supervisor.stop_requested.set)
    else:
        world = ScriptedWorld(clock, [NO_PROGRAM])
        supervisor = make(_spec(RestartPolicy(mode="no")), paths, clock, world)
    assert supervisor.run() == 0
    events = [json.loads(line) for line in Path(paths.events).read_text().splitlines()]
    recorded = {"state.json": json.loads(Path(paths.state).read_text()), "events.jsonl": events}
    text = json.dumps(recorded, sort_keys=True).replace(str(root / name), "<dir>")
    named: dict[str, Any] = json.loads(text)
    state = named["state.json"]
    assert state["agent_pid"] == os.getpid()
    assert state["agent"]["pid"] == os.getpid()
    state["agent_pid"], state["agent"] = "<pid>", "<identity>"
    return named


SCENARIOS = ("ready-then-crash", "spawn-failed")


def _this_agent(spec: Spec, paths: Paths, clock: FakeClock, world: ScriptedWorld) -> Supervisor:
    return Supervisor(spec, paths, clock=clock, world=world)


@pytest.mark.parametrize("name", SCENARIOS)
def test_state_json_and_events_are_the_single_file_agents(tmp_path: Path, name: str) -> None:
    expected = json.loads(FIXTURE.read_text())[name]
    assert play(tmp_path, _this_agent, name) == expected


def test_a_state_round_trips_through_the_record(tmp_path: Path) -> None:
    state = play(tmp_path, _this_agent, "ready-then-crash")["state.json"]
    assert AgentState.from_json(state).to_json() == state


def test_a_previous_versions_state_keeps_every_key_it_had() -> None:
    """A supervisor resumes (``adopt``, a stop finishing a dead one's duty) from whatever an
    older agent recorded: what it knows is kept as it was, what it lacks gets the default."""
    previous = json.loads(PREVIOUS.read_text())["state.json"]
    assert "health_failures" not in previous  # that version counted no /health failures
    kept = AgentState.from_json(previous).to_json()
    assert {key: kept[key] for key in previous} == previous
    assert kept["health_failures"] == 0
    older = dict(previous, plan_hash="3f1c2a9be071")  # a key this version does not know
    assert AgentState.from_json(older).to_json()["plan_hash"] == "3f1c2a9be071"


def test_the_record_refuses_a_key_state_json_has_no_room_for() -> None:
    record = AgentState(deployment="t", port=1, meta={})
    with pytest.raises(KeyError, match="stat"):
        record.update({"stat": "READY"})
    record.update({"memory_loads": None})  # written once set, and from then on
    assert "memory_loads" in record.to_json()
    assert "group" not in record.to_json()


if (
    __name__ == "__main__"
):  # the fixture again, from this agent: python -m tests.unit.test_agent_state
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        document = {name: play(Path(directory), _this_agent, name) for name in SCENARIOS}
    FIXTURE.write_text(json.dumps(document, indent=1, sort_keys=True) + "\n")
    sys.stdout.write(f"wrote {FIXTURE}\n")
