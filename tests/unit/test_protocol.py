"""The agent protocol, both directions: what orch sends (``build_spec``) is what the agent reads
(``Spec.from_json``); what the agent answers is what orch decodes (``fleet/protocol``'s ``decode_*``), for the
agent of this version (its own code, run in-process) and for answers of the previous version
(tests/fixtures/agent-protocol/, captured from the agent and probe of commit 6eb3b5c)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from orchestrator.commands import routing
from orchestrator.commands.context import Context, ProfilesOrigin
from orchestrator.errors import PreflightError, SupervisorError
from orchestrator.fleet.protocol.inspect import decode_inspect
from orchestrator.fleet.protocol.plan import decode_plan_answer
from orchestrator.fleet.protocol.probe import decode_probe
from orchestrator.fleet.protocol.runs import decode_runs_reply
from orchestrator.fleet.protocol.start import build_spec, decode_start
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.fleet.protocol.stop import decode_stop
from orchestrator.remote.agent.cmd_inspect import cmd_inspect
from orchestrator.remote.agent.cmd_probe import cmd_probe
from orchestrator.remote.agent.cmd_runs import cmd_runs
from orchestrator.remote.agent.cmd_status import cmd_status
from orchestrator.remote.agent.files import Paths
from orchestrator.remote.agent.policy import RestartPolicy
from orchestrator.remote.agent.protocol import PROTOCOL
from orchestrator.remote.agent.spec import Spec
from orchestrator.remote.agent.states import EXITED, READY, UNSUPERVISED
from orchestrator.remote.agent.supervisor import Supervisor
from orchestrator.remote.agent.verdict import CRASHED
from orchestrator.sglang.memory.shapes import GIB, GpuMemory
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
META = {
    "launch_digest": "0123456789ab",
    "git_commit": "c0ffee",
    "git_dirty": True,
    "launched_by": "ops@laptop",
}


def _previous(name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((FIXTURES / name).read_text())
    return document


def _spec_document(profile_dir: ProfileDir) -> dict[str, Any]:
    profile_dir.write("p", PROFILE)
    profile = profile_dir.store().load("p").profile
    argv = ("/opt/venv/bin/python", "-m", "sglang.launch_server", "--model-path", "/models/m")
    return build_spec(profile, argv, {"SGLANG_ENABLE_SPEC_V2": "1"}, META)


# -- orch -> agent ------------------------------------------------------------------------------


def test_the_spec_orch_builds_is_the_spec_the_agent_reads(profile_dir: ProfileDir) -> None:
    spec = Spec.from_json(json.loads(json.dumps(_spec_document(profile_dir))))
    assert spec.deployment == "p"
    assert spec.argv[-2:] == ("--model-path", "/models/m")
    assert spec.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert (spec.port, spec.health_host) == (31234, "127.0.0.1")  # the wildcard: asked locally
    assert (spec.health_endpoint, spec.health_interval_s, spec.startup_timeout_s) == (
        "/ready",
        7.0,
        900.0,
    )
    assert spec.restart == RestartPolicy("always", 2.0, 3.0, 40.0, 4, 120.0)
    assert spec.stop_timeout_s == 12.0
    assert spec.meta == META


ROUTED = (
    PROFILE
    + """\
router:
  url: http://10.0.0.5:30080/
  api_key: {from_env: SMG_CONTROL_KEY}
  labels: {team: serving}
  ready_timeout_s: 45
args: {api-key: {from_env: SERVER_KEY}}
"""
)


def test_the_gateway_orch_sends_is_the_gateway_the_agent_reads(profile_dir: ProfileDir) -> None:
    profile_dir.write("p", ROUTED)
    environ = {"SMG_CONTROL_KEY": "control-key-value", "SERVER_KEY": "server-key-value"}
    origin = ProfilesOrigin(repo="r", directory="d", commit="c0ffee" * 6, dirty=False)
    ctx = Context(profile_dir.store(), environ, "/usr/bin/python3", known_origin=origin)
    launch = ctx.launch("p")
    section = routing.spec_gateway(ctx, launch)
    document = build_spec(launch.profile, launch.primary.argv, {}, META, gateway=section)
    gateway = Spec.from_json(json.loads(json.dumps(document))).gateway
    assert gateway is not None
    assert (gateway.url, gateway.worker_url) == ("http://10.0.0.5:30080", "http://127.0.0.1:31234")
    assert gateway.labels == {
        "orch.profile": "p",
        "orch.deployment": "p",
        "orch.commit": "c0ffeec0ffee",
        "team": "serving",
    }
    assert (gateway.api_key, gateway.worker_api_key) == ("control-key-value", "server-key-value")
    assert gateway.ready_timeout_s == 45.0
    assert "control-key-value" not in repr(gateway)
    # orch's own output never shows the key: it joined the redactor
    assert "control-key-value" not in ctx.redactor("key control-key-value")


def test_a_profile_without_a_router_sends_no_gateway(profile_dir: ProfileDir) -> None:
    document = _spec_document(profile_dir)
    assert "gateway" not in document
    assert Spec.from_json(document).gateway is None


def test_the_agent_refuses_a_spec_of_another_protocol(profile_dir: ProfileDir) -> None:
    document = {**_spec_document(profile_dir), "protocol": PROTOCOL + 1}
    with pytest.raises(ValueError, match="protocol"):
        Spec.from_json(document)


# -- agent -> orch, this version ----------------------------------------------------------------


@pytest.fixture
def supervised(tmp_path: Path, profile_dir: ProfileDir) -> Paths:
    """A deployment directory as this agent's supervisor leaves it: one run that became READY
    and crashed, a restart in BACKOFF, then stopped (in-process, on a fake clock)."""
    spec = Spec.from_json(_spec_document(profile_dir))
    paths = Paths(str(tmp_path / "workdir" / "p"))
    Path(paths.runs).mkdir(parents=True)
    clock = FakeClock()
    crash = Script(lines=((0.5, CONFIG),), healthy_from=1.0, exit_at=10.0, returncode=1)
    world = ScriptedWorld(clock, [crash])
    supervisor = Supervisor(spec, paths, clock=clock, world=world)
    clock.at(11.0, supervisor.stop_requested.set)
    assert supervisor.run() == 0
    return paths


def test_this_agents_status_decodes(supervised: Paths) -> None:
    state = decode_state(cmd_status(supervised.root))
    assert state.deployed
    assert state.state == EXITED
    assert state.agent_alive  # the in-process supervisor's pid is this test's
    assert (state.starts, state.port) == (1, 31234)
    assert state.launch_digest == "0123456789ab"
    assert (state.git_commit, state.git_dirty, state.launched_by) == ("c0ffee", True, "ops@laptop")
    assert state.last_exit is not None
    assert (state.last_exit.cls, state.last_exit.returncode) == (CRASHED, 1)
    assert state.last_exit.was_ready


def test_this_agents_state_file_read_directly_decodes_the_same(supervised: Paths) -> None:
    document = json.loads(Path(supervised.state).read_text())
    direct = decode_state(document, agent_alive=True)
    asked = decode_state(cmd_status(supervised.root))
    assert direct.state == asked.state
    assert direct.run_id == asked.run_id
    assert direct.last_exit == asked.last_exit


def test_this_agents_runs_and_inspect_decode(supervised: Paths) -> None:
    (run,) = decode_runs_reply(cmd_runs(supervised.root)).runs
    assert run.log.endswith(f"{run.run_id}/server.log")
    observed, last_run = decode_inspect(
        cmd_inspect(supervised.root, None, None, "127.0.0.1", ["SGLANG_ENABLE_SPEC_V2"], None)
    )
    assert last_run is not None
    assert (last_run.run_id, last_run.state) == (run.run_id, EXITED)
    assert observed.resolved == {"model_path": "/m", "port": 30000}  # the kept config line
    assert observed.resolved_source == "server_args line"


def test_this_agents_probe_decodes() -> None:
    facts = decode_probe(cmd_probe(1, "/nonexistent/model", "127.0.0.1", None))
    assert facts.executable
    assert facts.python
    assert facts.port.port == 1
    assert facts.model is not None
    assert not facts.model.exists


def test_this_agents_inspect_of_a_process_decodes_its_command_line_and_env() -> None:
    observed, _ = decode_inspect(
        cmd_inspect("/nonexistent", os.getpid(), None, "127.0.0.1", ["PATH"], None)
    )
    assert observed.alive
    assert observed.argv is not None
    assert observed.argv[0]
    assert observed.env == {"PATH": os.environ["PATH"]}


# -- agent -> orch, the previous version ----------------------------------------------------------


def test_previous_agents_answers_decode() -> None:
    answers = _previous("agent-6eb3b5c.json")
    started = decode_start(answers["start"])
    assert started.ok
    assert started.state is not None
    assert started.state.pid
    ready = decode_state(answers["status"])
    assert ready.state == READY
    assert ready.ready
    assert ready.agent_alive
    assert ready.launch_digest == "3f1c2a9be071"  # written as plan_hash by that version
    direct = decode_state(answers["state.json"], agent_alive=True)
    assert direct.run_id == ready.run_id
    (run,) = decode_runs_reply(answers["runs"]).runs
    assert run.run_id == ready.run_id
    assert run.size
    observed, last_run = decode_inspect(answers["inspect"])
    assert observed.alive
    assert observed.found_by == "orch"
    assert observed.env == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert observed.resolved is not None
    assert observed.resolved["mem_fraction_static"] == 0.92
    assert observed.server_version == "0.5.11"
    assert last_run is not None
    assert last_run.state == READY
    facts = decode_probe(answers["probe"])
    assert facts.sglang_version
    assert not facts.port.free
    assert facts.port.holder_pid
    assert not facts.gpus.available
    assert facts.gpus.reason
    stopped = decode_stop(answers["stop"])
    assert stopped.state.state == EXITED
    assert stopped.leftovers_killed == ()
    assert stopped.state.last_exit is not None
    assert stopped.state.last_exit.signal == "SIGTERM"
    assert not decode_state(answers["status-undeployed"]).deployed
    # fields this version adds have defaults that read an old answer as it meant
    assert ready.server_alive  # it had a pid and no identity check: alive as it said
    assert (ready.unsupervised, ready.adopted, ready.output_lost) == (False, False, False)
    assert (ready.recorded_state, ready.recorded_pid, ready.health_failures) == (None, None, 0)
    assert last_run.exit_class is None


def test_the_spec_carries_the_liveness_threshold(profile_dir: ProfileDir) -> None:
    document = _spec_document(profile_dir)
    assert document["health"]["failures"] == 3  # the profile's default
    assert Spec.from_json(document).health_failures == 3


def test_this_agents_unsupervised_answer_decodes() -> None:
    answer = {
        "protocol": 1,
        "deployed": True,
        "state": UNSUPERVISED,
        "recorded_state": "READY",
        "pid": 4242,
        "agent_alive": False,
        "server_alive": True,
        "stale": True,
        "output_lost": True,
        "message": "its supervisor (pid 1) died",
        "run_id": "0001-x",
    }
    state = decode_state(answer)
    assert state.unsupervised
    assert not state.alive
    assert (state.recorded_state, state.pid, state.output_lost) == ("READY", 4242, True)


def test_a_refusal_of_the_agent_is_a_preflight_error_with_its_hint() -> None:
    refusal = {
        "protocol": 1,
        "ok": False,
        "refused": "unsafe-path",
        "reason": "the deployment directory /w/p is writable by group or others (mode 0777)",
        "hint": "chmod go-w /w/p",
    }
    for decode in (decode_state, decode_start, decode_stop):
        with pytest.raises(PreflightError, match="writable by group or others") as caught:
            decode(refusal)
        assert caught.value.hint == "chmod go-w /w/p"


def test_a_dead_runs_snapshot_decodes_with_its_verdict_as_a_note() -> None:
    answer = {
        "protocol": 1,
        "pid": 77,
        "found_by": "orch",
        "alive": False,
        "argv": ["python", "-m", "sglang.launch_server"],
        "env": {},
        "received_file": "/w/p/runs/0001-x/received.json",
        "last_run": {
            "run_id": "0001-x",
            "state": "FATAL",
            "exit": {"class": "config-error", "message": "ValueError: bad"},
        },
    }
    observed, last_run = decode_inspect(answer)
    assert observed.argv == ("python", "-m", "sglang.launch_server")
    assert observed.resolved is None
    assert any("/w/p/runs/0001-x/received.json" in note for note in observed.notes)
    assert any("config-error: ValueError: bad" in note for note in observed.notes)
    assert last_run is not None
    assert (last_run.exit_class, last_run.exit_message) == ("config-error", "ValueError: bad")


def test_previous_probes_answers_decode() -> None:
    answers = _previous("sglang_probe-6eb3b5c-0.5.11.json")
    accepted = decode_plan_answer(answers["accepted"])
    assert accepted.ok
    assert accepted.error_stage is None
    assert accepted.sglang_version == "0.5.11"
    assert accepted.simulated_gpu == "NVIDIA B200"
    assert accepted.effective["mamba_scheduler_strategy"] == "extra_buffer"
    incident = decode_plan_answer(answers["incident"])
    assert not incident.ok
    assert (incident.error_stage, incident.error_type) == ("resolve", "ValueError")
    assert incident.error_raised_in == (
        "_handle_mamba_radix_cache (sglang/srt/server_args.py:2453)"
    )
    changed = incident.provenance["mamba_scheduler_strategy"]
    assert [p.value for p in changed] == ["no_buffer"]  # auto -> no_buffer, nobody asked
    assert (accepted.memory, incident.memory) == (None, None)  # before the memory section


# -- the probe's memory section (run on the stand-in: tests/standin/test_probe_answers.py) ----------


def _sglang_memory_section() -> dict[str, Any]:
    """A memory section as the probe answers it with SGLang 0.5.23's classes (Qwen3.6-27B's
    config.json, TP 2, on a host with two GPUs)."""
    return {
        "basis": "sglang",
        "shapes": {
            "architecture": "Qwen3_5ForConditionalGeneration",
            "context_len": 8192,
            "model_dtype": "bfloat16",
            "nextn_predict_layers": None,
            "multimodal": True,
            "tp_size": 2,
            "pp_size": 1,
            "dp_size": 1,
            "attn_cp_size": 1,
            "attn_dp_size": 1,
            "attn_tp_size": 2,
            "enable_dp_attention": False,
            "kv_cache_dtype": "auto",
            "kv_dtype": "bfloat16",
            "kv_dtype_bytes": 2,
            "attention": "MHA",
            "full_attention_layers": 16,
            "kv_heads_per_rank": 2,
            "head_dim": 256,
            "v_head_dim": 256,
            "kv_cell_bytes": 32768,
            "kv_cell_source": "DefaultPoolConfigurator._compute_cell_size",
            "hybrid": True,
            "mamba": {
                "params": "Mamba2CacheParams",
                "layers": 48,
                "conv_shapes": [[5120, 3]],
                "temporal_shape": [24, 128, 128],
                "conv_dtype": "bfloat16",
                "ssm_dtype": "float32",
                "conv_bytes": 1474560,
                "ssm_bytes": 75497472,
                "slot_bytes": 76972032,
            },
            "sources": [
                "ModelConfig.from_server_args",
                "runtime_context.parallel_widths_of",
                "hybrid_arch.mambaish_config",
                "Qwen3_5TextConfig.mamba2_cache_params",
                "DefaultPoolConfigurator._compute_cell_size",
            ],
            "notes": [],
            "draft": {
                "path": "/models/Qwen3.6-27B",
                "architecture": "Qwen3_5ForCausalLMMTP",
                "nextn_predict_layers": 1,
                "layers": 64,
                "eagle_draft_layers": 1,
            },
        },
        "env": {"SGLANG_MAMBA_CONV_DTYPE": "bfloat16", "SGLANG_MAMBA_SSM_DTYPE": None},
        "text_config": {"num_hidden_layers": 64},
        "weights": {
            "path": "/models/Qwen3.6-27B",
            "bytes": 55_561_680_896,
            "basis": "model.safetensors.index.json total_size",
        },
        "draft_weights": None,
        "gpus": [
            {
                "index": 0,
                "name": "NVIDIA H200",
                "uuid": "GPU-a",
                "total_bytes": 150 * GIB,
                "free_bytes": 140 * GIB,
                "basis": "NVML on gpu-1",
            },
            {
                "index": 1,
                "name": "NVIDIA H200",
                "uuid": "GPU-b",
                "total_bytes": 150 * GIB,
                "free_bytes": 139 * GIB,
                "basis": "NVML on gpu-1",
            },
        ],
        "gpu_error": None,
        "default_mem_fraction_static": 0.83783765625,
        "default_mem_fraction_static_basis": "resolved again without --mem-fraction-static",
        "logs": [],
        "elapsed_s": 0.068,
    }


def _plan_answer(memory: Any) -> dict[str, Any]:
    return {"protocol": 1, "ok": True, "sglang_version": "0.5.23", "mode": "x", "memory": memory}


def test_a_memory_section_of_sglangs_classes_decodes_into_the_models_shapes() -> None:
    memory = decode_plan_answer(_plan_answer(_sglang_memory_section())).memory
    assert memory is not None
    model = memory.model
    assert model is not None
    assert model.basis.startswith("SGLang's classes: ModelConfig.from_server_args, ")
    assert (model.architecture, model.context_len, model.attention_tp) == (
        "Qwen3_5ForConditionalGeneration",
        8192,
        2,
    )
    assert (model.full_attention_layers, model.kv_cell_bytes, model.kv_dtype) == (
        16,
        32768,
        "bfloat16",
    )
    assert model.hybrid
    assert (model.mamba_layers, model.mamba_slot_bytes) == (48, 76972032)
    assert (model.mamba_conv_bytes, model.mamba_ssm_bytes) == (1474560, 75497472)
    assert (model.mamba_conv_dtype, model.mamba_ssm_dtype) == ("bfloat16", "float32")
    assert (model.weights_bytes, model.weights_basis) == (
        55_561_680_896,
        "model.safetensors.index.json total_size",
    )
    assert model.draft_kv_layers == 1  # the MTP head of SGLang's draft-mode config
    assert model.multimodal
    assert memory.gpus == (
        GpuMemory("NVIDIA H200", 150 * GIB, 140 * GIB, "NVML on gpu-1", index=0),
        GpuMemory("NVIDIA H200", 150 * GIB, 139 * GIB, "NVML on gpu-1", index=1),
    )
    assert memory.default_mem_fraction_static == 0.83783765625
    assert memory.env == {"SGLANG_MAMBA_CONV_DTYPE": "bfloat16"}
    assert memory.text_config == {"num_hidden_layers": 64}


def test_a_plain_models_memory_section_decodes_without_mamba_state() -> None:
    section = _sglang_memory_section()
    section["shapes"].update(mamba=None, hybrid=False, full_attention_layers=64, draft=None)
    memory = decode_plan_answer(_plan_answer(section)).memory
    assert memory is not None
    model = memory.model
    assert model is not None
    assert not model.hybrid
    assert (model.mamba_slot_bytes, model.mamba_ssm_dtype, model.draft_kv_layers) == (0, None, None)


def test_a_memory_section_the_probe_could_not_build_decodes_as_its_error() -> None:
    answer = decode_plan_answer(_plan_answer({"error": "KeyError: 'x'"}))
    assert answer.ok  # the plan stands
    assert answer.memory is not None
    assert (answer.memory.model, answer.memory.error) == (None, "KeyError: 'x'")


def _broken(path: str, value: Any) -> dict[str, Any]:
    section = _sglang_memory_section()
    *parents, key = path.split(".")
    holder: Any = section
    for name in parents:
        holder = holder[int(name)] if name.isdigit() else holder[name]
    holder[key] = value
    return _plan_answer(section)


@pytest.mark.parametrize(
    ("document", "where"),
    [
        (_plan_answer([1]), r"sglang_probe answer.memory: expected a JSON object, got list"),
        (
            _broken("shapes.kv_cell_bytes", "32768"),
            r"sglang_probe answer.memory.shapes: kv_cell_bytes: expected an integer, got str",
        ),
        (
            _broken("shapes.mamba.slot_bytes", None),
            r"sglang_probe answer.memory.shapes.mamba: slot_bytes: expected an integer, got NoneType",
        ),
        (
            _broken("gpus.1.total_bytes", 1.5),
            r"sglang_probe answer.memory.gpus\[1\]: total_bytes: expected an integer, got float",
        ),
        (
            _broken("text_config", [64]),
            r"sglang_probe answer.memory.text_config: expected a JSON object, got list",
        ),
        (
            _broken("env", {"SGLANG_MAMBA_SSM_DTYPE": 2}),
            r"sglang_probe answer.memory: env: expected an object of strings",
        ),
        (
            _broken("default_mem_fraction_static", "0.8"),
            r"sglang_probe answer.memory: default_mem_fraction_static: expected a number or null",
        ),
        (
            _broken("weights.bytes", "55G"),
            r"sglang_probe answer.memory.weights: bytes: expected an integer, got str",
        ),
    ],
)
def test_a_malformed_memory_section_is_a_supervisor_error_naming_the_key(
    document: dict[str, Any], where: str
) -> None:
    with pytest.raises(SupervisorError, match=where):
        decode_plan_answer(document)


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
        decode_state(document)
