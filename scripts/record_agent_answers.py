"""Record what orch's agent answers, for the fake agent of the unit tests (tests/unit/commands/).

The real agent is run the way orch runs it on a host (``fleet.client.Agent``: the bootstrap, the
same argv and stdin), on this machine, supervising orch's SGLang stand-in (standin/, NOT
SGLang), through the situations ``commands/`` meets: nothing deployed; started and followed to
READY; asked again while it runs; stopped; its supervisor killed (the server unsupervised, then
adopted); supervisor and server killed (stale); the port held by someone else; a workdir others
may write; a server that fails its startup; SGLang's plan accepted, changing a pinned field, and
refusing. Every answer is kept as the agent printed it (a stream as its list of documents) in
``tests/fixtures/agent-protocol/answers.json``, with the profiles that were launched in
``tests/fixtures/agent-protocol/profiles/``: what the tests load, so that the launch they build
is the launch the answers are about.

This machine's paths are rewritten (``rewritten``): the workdir to /data/orch, the repository to
/opt/orch, the venv to /opt/venv, the host name to gpu-1 (the test inventory's host), in every
string and in the log bytes the watch stream carries; pids, times and the port are kept. The
``meta`` orch sends with a start (who launched what, from which repository) is a made-up one:
the fake agent echoes the meta of the launch under test in its place, as the agent echoes what
it was sent.

    .venv/bin/python scripts/record_agent_answers.py     # ~1 minute; then review the diff
"""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from orchestrator import render
from orchestrator.commands.context import Context, Launch, ProfilesOrigin
from orchestrator.commands.effective import inspect_request
from orchestrator.effective import plan
from orchestrator.fleet.client import Agent, probe_bundle
from orchestrator.fleet.protocol.common import last_json_line
from orchestrator.fleet.protocol.start import build_spec
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang import config as sglang_config

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "agent-protocol"
HOST = "gpu-1"  # tests/conftest.py's inventory: python /opt/venv/bin/python, workdir /data/orch
MODEL = "Qwen/Qwen3.6-27B"  # a Hub id: the stand-in assumes the model's facts, nothing to rewrite

# The profiles launched (as the tests load them: host gpu-1, the stand-in at /opt/orch/standin).
BASE: dict[str, Any] = {
    "sglang": "0.5.23",
    "host": HOST,
    "model": {"path": MODEL, "served_model_name": "qwen-test"},
    "bind": "127.0.0.1",
    "env": {"PYTHONPATH": "/opt/orch/standin", "ORCH_STANDIN_VERSION": "0.5.23"},
    "args": {"skip_server_warmup": True},
    "health": {"startup_timeout_s": 60, "interval_s": 0.5},
    "restart": {"mode": "on-failure", "delay_s": 0.2, "max_delay_s": 1, "start_limit": 3},
    "stop_timeout_s": 3,
}
SPEC_DECODE = {"algorithm": "EAGLE", "num_steps": 3, "eagle_topk": 1}
PROFILES: dict[str, dict[str, Any]] = {
    "demo": {},
    # topk 1: SGLang sets speculative_num_draft_tokens to num_steps + 1 (8 -> 4), and it is pinned
    "drift": {
        "spec_decode": {**SPEC_DECODE, "num_draft_tokens": 8},
        "pin": ["speculative_num_draft_tokens"],
    },
    # SGLang's own refusal at resolution (the incident of 0.5.11)
    "crash": {"env": {"ORCH_STANDIN_FAIL": "config-error"}, "restart": {"mode": "no"}},
    # 0.5.11 speculative decoding on a hybrid model without extra_buffer: SGLang refuses it
    "incident": {
        "sglang": "0.5.11",
        "env": {"ORCH_STANDIN_VERSION": "0.5.11"},
        "spec_decode": {**SPEC_DECODE, "num_draft_tokens": 4},
    },
}
META_ORIGIN = ProfilesOrigin(
    repo="git:git@example.net:team/profiles.git",
    directory="/home/ops/profiles",
    commit="c0ffee0c0ffee0c0ffee0c0ffee0c0ffee0c0ffe",
    dirty=False,
)


def profile_document(name: str, port: int) -> dict[str, Any]:
    changes = PROFILES[name]
    document = {**BASE, **changes, "port": port}
    document["env"] = {**BASE["env"], **changes.get("env", {})}
    return document


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class Recorder:
    """The agent of one deployment on this machine, and the answers recorded of it."""

    def __init__(self, ctx: Context, launch: Launch, rewritten: Callable[[Any], Any]) -> None:
        self.launch = launch
        agent = ctx.agent(launch.profile)
        if not isinstance(agent, Agent):
            raise TypeError("the recorder asks the real agent")
        self.agent = agent
        self.dir = agent.deployment.dir
        self.rewritten = rewritten
        self.answers: dict[str, Any] = {}
        profile = launch.profile
        member = launch.primary
        meta = launch.meta(META_ORIGIN)  # who launched it from where: made up, not this machine
        meta.update(launched_by="ops@laptop", orch_version="0.1.0")
        meta["profile_source"] = f"profiles/{profile.name}.yaml"
        spec = build_spec(profile, member.argv, member.env, meta)
        script = render.launcher_script(member.command)
        self.bundle = json.dumps({"spec": spec, "launch_script": script}).encode()

    def keep(self, key: str, answer: Any) -> Any:
        self.answers[key] = self.rewritten(answer)
        return answer

    def call(self, *args: str, stdin: bytes | None = None, timeout: float = 60.0) -> Any:
        return self.agent.call(*args, stdin=stdin, timeout=timeout)

    def status(self) -> Any:
        return self.call("status", "--dir", self.dir)

    def probe(self, *, with_status: bool) -> Any:
        profile = self.launch.profile
        args = ["probe", "--port", str(profile.port), f"--bind={profile.bind}", "--env-file", "-"]
        args += [f"--model={profile.model.path}"]
        if with_status:
            args += ["--dir", self.dir]
        return self.call(*args, stdin=json.dumps(dict(self.launch.primary.env)).encode())

    def start_watched(self) -> list[Any]:
        """``start --watch``, inspecting at READY as ``up`` asks: every document of the stream."""
        profile = self.launch.profile
        request = inspect_request(profile, sorted(self.launch.primary.env))
        args = [
            "start",
            "--dir",
            self.dir,
            "--spec",
            "-",
            "--watch",
            "60",
            "--inspect-port",
            str(request.port),
            "--inspect-host",
            request.host,
        ]
        for name in request.env_names:
            args += ["--inspect-env", name]
        return list(self.agent._stream(args, self.bundle))

    def start(self) -> Any:
        return self.call("start", "--dir", self.dir, "--spec", "-", stdin=self.bundle)

    def stop(self) -> Any:
        return self.call("stop", "--dir", self.dir, "--timeout", "3", timeout=63.0)

    def inspect(self) -> Any:
        request = inspect_request(self.launch.profile, sorted(self.launch.primary.env))
        args = ["inspect", "--dir", self.dir, "--port", str(request.port), "--host", request.host]
        for name in request.env_names:
            args += ["--env", name]
        return self.call(*args)

    def plan(self) -> Any:
        """SGLang's plan of the launch on this host (the probe, ``-``), as it answered."""
        member = self.launch.primary
        arguments = sglang_config.sglang_arguments(member.argv) or ()
        request = json.dumps(plan.probe_request(arguments, member.env)).encode()
        probe = self.agent.deployment.probe_path
        result = self.agent.run_pushed(probe_bundle(), probe, ("-",), 300.0, request)
        return last_json_line(result.stdout, result.stderr, result.returncode, "the probe")

    def state_file(self) -> Any:
        return json.loads(self.agent.transport.read(self.agent.deployment.state_path))


def kill(pid: int, *, group: bool = False) -> None:
    """SIGKILL ``pid`` (its process group with ``group``), and wait until it is gone."""
    if group:
        os.killpg(pid, signal.SIGKILL)
    else:
        os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


def record_demo(demo: Recorder) -> None:
    """One deployment through its life: the answers ``up``, ``down`` and ``status`` meet."""
    demo.keep("status-undeployed", demo.status())
    demo.keep("probe-status-undeployed", demo.probe(with_status=True))
    demo.keep("probe", demo.probe(with_status=False))
    demo.keep("inspect-undeployed", demo.inspect())
    demo.keep("plan", demo.plan())
    demo.keep("start-watch", demo.start_watched())
    demo.keep("status-ready", demo.status())
    demo.keep("probe-status-ready", demo.probe(with_status=True))
    demo.keep("state.json-ready", demo.state_file())
    demo.keep("inspect-ready", demo.inspect())
    demo.keep("runs", demo.call("runs", "--dir", demo.dir))
    demo.keep("tail", demo.call("tail", "--dir", demo.dir, "--lines", "5"))
    demo.keep("start-refused", demo.start())
    demo.keep("adopt-refused", demo.call("adopt", "--dir", demo.dir))
    demo.keep("stop", demo.stop())
    demo.keep("status-stopped", demo.status())
    demo.keep("probe-status-stopped", demo.probe(with_status=True))

    # its supervisor killed: the server runs on, unsupervised; then adopted by a new one
    demo.start_watched()
    kill(demo.status()["agent_pid"])
    demo.keep("status-unsupervised", demo.status())
    demo.keep("probe-status-unsupervised", demo.probe(with_status=True))
    demo.keep("adopt", demo.call("adopt", "--dir", demo.dir))
    demo.keep("status-adopted", demo.status())
    demo.stop()

    # supervisor and server killed: nothing runs, and no end was recorded
    demo.start_watched()
    ready = demo.status()
    kill(ready["agent_pid"])
    kill(ready["pgid"], group=True)
    demo.keep("status-stale", demo.status())
    demo.keep("probe-status-stale", demo.probe(with_status=True))
    demo.keep("stop-stale", demo.stop())

    # the port held by another program
    with socket.socket() as holder:
        holder.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # its last TIME_WAITs
        holder.bind(("127.0.0.1", demo.launch.profile.port))
        holder.listen()
        demo.keep("probe-port-taken", demo.probe(with_status=False))

    # a deployment directory others may write: every command refuses it
    Path(demo.dir).chmod(0o777)  # the unsafe mode the refusal is about
    try:
        demo.keep("status-unsafe", demo.status())
    finally:
        Path(demo.dir).chmod(0o700)


def record_drift(drift: Recorder) -> None:
    drift.keep("plan-drift", drift.plan())
    drift.keep("start-watch-drift", drift.start_watched())
    drift.keep("inspect-drift", drift.inspect())
    drift.stop()


def record_crash(crash: Recorder) -> None:
    crash.keep("start-watch-crash", crash.start_watched())
    crash.keep("status-crashed", crash.status())
    crash.keep("inspect-crashed", crash.inspect())


def rewriting(workdir: Path) -> Callable[[Any], Any]:
    """Every string (and the watch stream's log bytes) with this machine's paths rewritten."""
    venv = Path(sys.prefix)
    pairs = [
        (str(workdir), "/data/orch"),
        (str(venv), "/opt/venv"),
        (os.path.realpath(sys.executable), "/opt/venv/bin/python"),
        (str(REPO), "/opt/orch"),
        (socket.gethostname(), HOST),
    ]
    pairs.sort(key=lambda pair: -len(pair[0]))

    def text(value: str) -> str:
        for old, new in pairs:
            value = value.replace(old, new)
        return value

    def rewritten(value: Any) -> Any:
        if isinstance(value, str):
            return text(value)
        if isinstance(value, list):
            return [rewritten(item) for item in value]
        if isinstance(value, dict):
            out = {key: rewritten(item) for key, item in value.items()}
            if isinstance(value.get("log"), str) and "offset" in value:  # a watch event's bytes
                data = text(base64.b64decode(value["log"]).decode("utf-8", "replace"))
                out["log"] = base64.b64encode(data.encode()).decode()
            if isinstance(value.get("meta"), dict):
                out["meta"] = value["meta"]  # made up already; the fake replaces it
            return out
        return value

    return rewritten


def recorders(root: Path) -> tuple[Context, list[Recorder]]:
    """A profiles directory that launches the stand-in on this machine, and one recorder per
    profile; the profiles also written, as the tests load them, into the fixtures."""
    workdir = root / "workdir"
    profiles = root / "profiles"
    profiles.mkdir()
    local = {"python": sys.executable, "workdir": str(workdir)}
    (profiles / "hosts.yaml").write_text(yaml.safe_dump({"hosts": {"local": local}}))
    (FIXTURES / "profiles").mkdir(exist_ok=True)
    ports = {name: free_port() for name in PROFILES}
    for name in PROFILES:
        document = profile_document(name, ports[name])
        here = {**document, "host": "local"}
        here["env"] = {**document["env"], "PYTHONPATH": str(REPO / "standin")}
        (profiles / f"{name}.yaml").write_text(yaml.safe_dump(here, sort_keys=False))
        fixture = yaml.safe_dump(document, sort_keys=False)
        (FIXTURES / "profiles" / f"{name}.yaml").write_text(
            "# Launched by scripts/record_agent_answers.py (its answers: ../answers.json).\n"
            + fixture
        )
    ctx = Context(store=ProfileStore(profiles), environ=os.environ, local_python=sys.executable)
    rewritten = rewriting(workdir)
    return ctx, [Recorder(ctx, ctx.launch(name), rewritten) for name in PROFILES]


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="orch-record-") as temp:
        root = Path(temp)
        ctx, (demo, drift, crash, incident) = recorders(root)
        answers: dict[str, Any] = {
            "_source": (
                "What orch's agent answered on this machine (scripts/record_agent_answers.py: "
                "the real agent through orch's client, supervising orch's SGLang stand-in), one "
                "document per answer, a stream as its documents; paths rewritten to /data/orch, "
                "/opt/orch, /opt/venv and host gpu-1; the launches are profiles/*.yaml."
            ),
        }
        try:
            record_demo(demo)
            record_drift(drift)
            record_crash(crash)
            # its host's facts (the stand-in as SGLang 0.5.11), then SGLang's refusal
            incident.keep("incident/probe-status-undeployed", incident.probe(with_status=True))
            incident.keep("plan-incident", incident.plan())
        finally:
            for recorder in (demo, drift, crash):
                recorder.stop()
            ctx.close()
        for recorder in (demo, drift, crash, incident):
            answers.update(recorder.answers)
    path = FIXTURES / "answers.json"
    path.write_text(json.dumps(answers, indent=1, sort_keys=True) + "\n")
    print(f"wrote {path.relative_to(REPO)}: {len(answers) - 1} answers")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
