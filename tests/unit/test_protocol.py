"""The agent protocol, both directions: what orch sends (``build_spec``) is what the agent reads
(``Spec.from_json``); what the agent answers is what orch decodes (``protocol.decode_*``), for the
agent of this version (its own code, run in-process) and for answers of the previous version
(tests/fixtures/agent-protocol/, captured from the agent and probe of commit 6eb3b5c)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator import protocol
from orchestrator.errors import PreflightError, SupervisorError
from orchestrator.remote import agent
from tests.conftest import REPO, ProfileDir
from tests.unit.test_supervisor_logic import CONFIG, FakeClock, Script, ScriptedWorld

FIXTURES = REPO / "tests" / "fixtures" / "agent-protocol"
PROFILE = """\
host: local
model: {path: /models/m}
sglang: "0.5.11"
port: 31234
bind: 0.0.0.0
env: {SGLANG_ENABLE_SPEC_V2: "1"}
restart: {mode: always, delay_s: 2, multiplier: 3, max_delay_s: 40, start_limit: 4,
          start_limit_interval_s: 120}
health: {endpoint: /ready, interval_s: 7, startup_timeout_s: 900}
stop_timeout_s: 12
"""
META = {"launch_digest": "0123456789ab", "git_commit": "c0ffee", "git_dirty": True,
        "launched_by": "ops@laptop"}  # fmt: skip


def _previous(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return document


def _spec_document(profile_dir: ProfileDir) -> dict[str, Any]:
    profile_dir.write("p", PROFILE)
    profile = profile_dir.store().load("p").profile
    argv = ("/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/m")
    return protocol.build_spec(profile, argv, {"SGLANG_ENABLE_SPEC_V2": "1"}, META)


# -- orch -> agent ------------------------------------------------------------------------------


def test_the_spec_orch_builds_is_the_spec_the_agent_reads(profile_dir: ProfileDir) -> None:
    spec = agent.Spec.from_json(json.loads(json.dumps(_spec_document(profile_dir))))
    assert spec.deployment == "p"
    assert spec.argv[-2:] == ("--model-path", "/models/m")
    assert spec.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert (spec.port, spec.health_host) == (31234, "127.0.0.1")  # the wildcard: asked locally
    assert (spec.health_endpoint, spec.health_interval_s, spec.startup_timeout_s) == (
        "/ready", 7.0, 900.0,
    )  # fmt: skip
    assert spec.restart == agent.RestartPolicy("always", 2.0, 3.0, 40.0, 4, 120.0)
    assert spec.stop_timeout_s == 12.0
    assert spec.meta == META


def test_the_agent_refuses_a_spec_of_another_protocol(profile_dir: ProfileDir) -> None:
    document = {**_spec_document(profile_dir), "protocol": agent.PROTOCOL + 1}
    with pytest.raises(ValueError, match="protocol"):
        agent.Spec.from_json(document)


# -- agent -> orch, this version ----------------------------------------------------------------


@pytest.fixture
def supervised(tmp_path: Path, profile_dir: ProfileDir) -> agent.Paths:
    """A deployment directory as this agent's supervisor leaves it: one run that became READY
    and crashed, a restart in BACKOFF, then stopped (in-process, on a fake clock)."""
    spec = agent.Spec.from_json(_spec_document(profile_dir))
    paths = agent.Paths(str(tmp_path / "workdir" / "p"))
    Path(paths.runs).mkdir(parents=True)
    clock = FakeClock()
    crash = Script(lines=((0.5, CONFIG),), healthy_from=1.0, exit_at=10.0, returncode=1)
    world = ScriptedWorld(clock, [crash])
    supervisor = agent.Supervisor(spec, paths, clock=clock, world=world)
    clock.at(11.0, supervisor.stop_requested.set)
    assert supervisor.run() == 0
    return paths


def test_this_agents_status_decodes(supervised: agent.Paths) -> None:
    state = protocol.decode_state(agent.cmd_status(supervised.root))
    assert state.deployed
    assert state.state == agent.EXITED
    assert state.agent_alive  # the in-process supervisor's pid is this test's
    assert (state.starts, state.port) == (1, 31234)
    assert state.launch_digest == "0123456789ab"
    assert (state.git_commit, state.git_dirty, state.launched_by) == ("c0ffee", True, "ops@laptop")
    assert state.last_exit is not None
    assert (state.last_exit.cls, state.last_exit.returncode) == (agent.CRASHED, 1)
    assert state.last_exit.was_ready


def test_this_agents_state_file_read_directly_decodes_the_same(supervised: agent.Paths) -> None:
    document = json.loads(Path(supervised.state).read_text())
    direct = protocol.decode_state(document, agent_alive=True)
    asked = protocol.decode_state(agent.cmd_status(supervised.root))
    assert direct.state == asked.state
    assert direct.run_id == asked.run_id
    assert direct.last_exit == asked.last_exit


def test_this_agents_runs_and_inspect_decode(supervised: agent.Paths) -> None:
    (run,) = protocol.decode_runs_reply(agent.cmd_runs(supervised.root)).runs
    assert run.log.endswith(f"{run.run_id}/server.log")
    observed, last_run = protocol.decode_inspect(
        agent.cmd_inspect(supervised.root, None, None, "127.0.0.1", ["SGLANG_ENABLE_SPEC_V2"], None)
    )
    assert last_run is not None
    assert (last_run.run_id, last_run.state) == (run.run_id, agent.EXITED)
    assert observed.resolved == {"model_path": "/m", "port": 30000}  # the kept config line
    assert observed.resolved_source == "server_args line"


def test_this_agents_probe_decodes() -> None:
    facts = protocol.decode_probe(agent.cmd_probe(1, "/nonexistent/model", "127.0.0.1", None))
    assert facts.executable
    assert facts.python
    assert facts.port.port == 1
    assert facts.model is not None
    assert not facts.model.exists


def test_this_agents_inspect_of_a_process_decodes_its_command_line_and_env() -> None:
    observed, _ = protocol.decode_inspect(
        agent.cmd_inspect("/nonexistent", os.getpid(), None, "127.0.0.1", ["PATH"], None)
    )
    assert observed.alive
    assert observed.argv is not None
    assert observed.argv[0]
    assert observed.env == {"PATH": os.environ["PATH"]}


# -- agent -> orch, the previous version ----------------------------------------------------------


def test_previous_agents_answers_decode() -> None:
    answers = _previous("agent-6eb3b5c.json")
    started = protocol.decode_start(answers["start"])
    assert started.ok
    assert started.state is not None
    assert started.state.pid
    ready = protocol.decode_state(answers["status"])
    assert ready.state == agent.READY
    assert ready.ready
    assert ready.agent_alive
    assert ready.launch_digest == "3f1c2a9be071"  # written as plan_hash by that version
    direct = protocol.decode_state(answers["state.json"], agent_alive=True)
    assert direct.run_id == ready.run_id
    (run,) = protocol.decode_runs_reply(answers["runs"]).runs
    assert run.run_id == ready.run_id
    assert run.size
    observed, last_run = protocol.decode_inspect(answers["inspect"])
    assert observed.alive
    assert observed.found_by == "orch"
    assert observed.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert observed.resolved is not None
    assert observed.resolved["mem_fraction_static"] == 0.92
    assert observed.server_version == "0.5.11"
    assert last_run is not None
    assert last_run.state == agent.READY
    facts = protocol.decode_probe(answers["probe"])
    assert facts.sglang_version
    assert not facts.port.free
    assert facts.port.holder_pid
    assert not facts.gpus.available
    assert facts.gpus.reason
    stopped = protocol.decode_stop(answers["stop"])
    assert stopped.state.state == agent.EXITED
    assert stopped.leftovers_killed == ()
    assert stopped.state.last_exit is not None
    assert stopped.state.last_exit.signal == "SIGTERM"
    assert not protocol.decode_state(answers["status-undeployed"]).deployed
    # fields this version adds have defaults that read an old answer as it meant
    assert ready.server_alive  # it had a pid and no identity check: alive as it said
    assert (ready.unsupervised, ready.adopted, ready.output_lost) == (False, False, False)
    assert (ready.recorded_state, ready.recorded_pid, ready.health_failures) == (None, None, 0)
    assert last_run.exit_class is None


def test_the_spec_carries_the_liveness_threshold(profile_dir: ProfileDir) -> None:
    document = _spec_document(profile_dir)
    assert document["health"]["failures"] == 3  # the profile's default
    assert agent.Spec.from_json(document).health_failures == 3


def test_this_agents_unsupervised_answer_decodes() -> None:
    answer = {
        "protocol": 1, "deployed": True, "state": agent.UNSUPERVISED, "recorded_state": "READY",
        "pid": 4242, "agent_alive": False, "server_alive": True, "stale": True,
        "output_lost": True, "message": "its supervisor (pid 1) died", "run_id": "0001-x",
    }  # fmt: skip
    state = protocol.decode_state(answer)
    assert state.unsupervised
    assert not state.alive
    assert (state.recorded_state, state.pid, state.output_lost) == ("READY", 4242, True)


def test_a_refusal_of_the_agent_is_a_preflight_error_with_its_hint() -> None:
    refusal = {
        "protocol": 1, "ok": False, "refused": "unsafe-path",
        "reason": "the deployment directory /w/p is writable by group or others (mode 0777)",
        "hint": "chmod go-w /w/p",
    }  # fmt: skip
    for decode in (protocol.decode_state, protocol.decode_start, protocol.decode_stop):
        with pytest.raises(PreflightError, match="writable by group or others") as caught:
            decode(refusal)
        assert caught.value.hint == "chmod go-w /w/p"


def test_a_dead_runs_snapshot_decodes_with_its_verdict_as_a_note() -> None:
    answer = {
        "protocol": 1, "pid": 77, "found_by": "orch", "alive": False,
        "argv": ["python", "-m", "sglang.launch_server"], "env": {},
        "received_file": "/w/p/runs/0001-x/received.json",
        "last_run": {"run_id": "0001-x", "state": "FATAL",
                     "exit": {"class": "config-error", "message": "ValueError: bad"}},
    }  # fmt: skip
    observed, last_run = protocol.decode_inspect(answer)
    assert observed.argv == ("python", "-m", "sglang.launch_server")
    assert observed.resolved is None
    assert any("/w/p/runs/0001-x/received.json" in note for note in observed.notes)
    assert any("config-error: ValueError: bad" in note for note in observed.notes)
    assert last_run is not None
    assert (last_run.exit_class, last_run.exit_message) == ("config-error", "ValueError: bad")


def test_previous_probes_answers_decode() -> None:
    answers = _previous("sglang_probe-6eb3b5c-0.5.11.json")
    accepted = protocol.decode_plan_answer(answers["accepted"])
    assert accepted.ok
    assert accepted.error_stage is None
    assert accepted.sglang_version == "0.5.11"
    assert accepted.simulated_gpu == "NVIDIA B200"
    assert accepted.effective["mamba_scheduler_strategy"] == "extra_buffer"
    incident = protocol.decode_plan_answer(answers["incident"])
    assert not incident.ok
    assert (incident.error_stage, incident.error_type) == ("resolve", "ValueError")
    assert incident.error_raised_in == (
        "_handle_mamba_radix_cache (sglang/srt/server_args.py:2453)"
    )
    changed = incident.provenance["mamba_scheduler_strategy"]
    assert [p.value for p in changed] == ["no_buffer"]  # auto -> no_buffer, nobody asked


# -- answers orch cannot read -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("document", "where"),
    [
        ({"deployed": True, "pid": "4242"}, "agent state: pid: expected an integer, got str"),
        ({"deployed": True, "last_exit": {"run_id": "1"}}, "agent state.last_exit: returncode"),
        ([1, 2], "agent state: expected a JSON object, got list"),
    ],
)
def test_a_malformed_answer_is_a_supervisor_error_naming_the_key(
    document: object, where: str
) -> None:
    with pytest.raises(SupervisorError, match=where):
        protocol.decode_state(document)
