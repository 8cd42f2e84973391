"""The local side of the remote agent: push it, start, stop, ask for state.

Everything crosses to the host as an argv (``<python> <agent.py> <command> --dir ...``) and comes
back as one JSON document. The run spec, which holds the server's environment (secrets
included), goes over SFTP as a mode-0600 file and never appears in an argv or a log.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.remote import agent as agent_module
from orchestrator.errors import PreflightError, RemoteCommandError, SupervisorError
from orchestrator.model import ExitInfo, Host, RunState
from orchestrator.transport import Transport, expand_home

AGENT_SOURCE = Path(agent_module.__file__).read_bytes()
AGENT_DIGEST = hashlib.sha256(AGENT_SOURCE).hexdigest()[:12]
PROBE_FILE = Path(agent_module.__file__).with_name("sglang_probe.py")  # plan's SGLang probe
PROBE_SOURCE = PROBE_FILE.read_bytes()
PROBE_DIGEST = hashlib.sha256(PROBE_SOURCE).hexdigest()[:12]


@dataclass(frozen=True)
class Deployment:
    """Where one profile's server lives on its host."""

    name: str
    host: Host
    python: str
    workdir: str  # absolute, ``~`` expanded

    @property
    def dir(self) -> str:
        return posixpath.join(self.workdir, self.name)

    @property
    def agent_path(self) -> str:
        return posixpath.join(self.workdir, ".orch", f"agent-{AGENT_DIGEST}.py")

    @property
    def probe_path(self) -> str:
        return posixpath.join(self.workdir, ".orch", f"sglang_probe-{PROBE_DIGEST}.py")

    def run_log(self, run_id: str) -> str:
        return posixpath.join(self.dir, "runs", run_id, "server.log")


def locate(transport: Transport, name: str, python: str) -> Deployment:
    host = transport.host
    workdir = expand_home(host.workdir, transport.home()) if "~" in host.workdir else host.workdir
    return Deployment(name=name, host=host, python=python, workdir=workdir)


class Agent:
    """Calls into ``agent.py`` on the deployment's host."""

    def __init__(self, transport: Transport, deployment: Deployment) -> None:
        self.transport = transport
        self.deployment = deployment
        self._pushed = False

    def ensure_pushed(self) -> None:
        """Push agent.py once per version: its name carries its digest."""
        if self._pushed:
            return
        path = self.deployment.agent_path
        if self.transport.size(path) != len(AGENT_SOURCE):
            self.transport.put(AGENT_SOURCE, path, 0o600)
        self._pushed = True

    def call(self, *args: str, timeout: float = 60.0) -> dict[str, Any]:
        # Optimistic: run the agent, and push it only when the host does not have this version
        # yet (python's "can't open file", exit 2). Saves an SFTP session per host and command.
        argv = (self.deployment.python, self.deployment.agent_path, *args)
        result = self.transport.run(argv, timeout=timeout)
        if result.returncode == 2 and b"can't open file" in result.stderr and not self._pushed:
            self.ensure_pushed()
            result = self.transport.run(argv, timeout=timeout)
        if result.returncode == 127:
            raise PreflightError(
                f"{self.deployment.python}: not found on {self.deployment.host.name}",
                f"set hosts.{self.deployment.host.name}.python to the interpreter of the venv "
                "that holds sglang",
            )
        if result.returncode not in (0, 3):
            stderr = result.stderr.decode("utf-8", "replace")
            if "No module named 'psutil'" in stderr:
                raise PreflightError(
                    f"{self.deployment.python} on {self.deployment.host.name} has no psutil",
                    "psutil ships with sglang; is this the venv that holds sglang?",
                )
            raise SupervisorError(
                f"agent {args[0]} failed on {self.deployment.host.name}: "
                + (stderr.strip().splitlines() or ["no output"])[-1],
                f"the agent's own log: {posixpath.join(self.deployment.dir, 'agent.log')}",
            ) from RemoteCommandError(argv, result.returncode, stderr)
        try:
            document = json.loads(result.stdout.decode("utf-8").strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise SupervisorError(
                f"agent {args[0]} answered something that is not JSON",
                "is the host's python a CPython >= 3.9?",
            ) from exc
        if not isinstance(document, dict):
            raise SupervisorError(f"agent {args[0]} answered {type(document).__name__}")
        protocol = document.get("protocol", agent_module.PROTOCOL)
        if protocol != agent_module.PROTOCOL and "state" in document:
            raise SupervisorError(
                f"agent protocol {protocol}, orch speaks {agent_module.PROTOCOL}",
                "stop the deployment with the orch version that started it",
            )
        return document

    def probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str]
    ) -> dict[str, Any]:
        """Preflight facts, with ``import sglang`` checked under the server's environment
        (pushed as a 0600 file the agent removes once read: it may hold secrets)."""
        env_file = posixpath.join(self.deployment.dir, f".probe-env-{secrets.token_hex(6)}.json")
        self.transport.put(json.dumps(dict(env)).encode(), env_file, 0o600)
        args = ["probe", "--port", str(port), "--bind", bind, "--env-file", env_file]
        if model is not None:
            args += ["--model", model]
        return self.call(*args, timeout=180.0)

    def start(self, spec: dict[str, Any], launch_script: str) -> dict[str, Any]:
        """Push the spec (0600) and the launch script, then detach a supervisor."""
        directory = self.deployment.dir
        self.transport.put(launch_script.encode(), posixpath.join(directory, "launch.sh"), 0o600)
        pending = posixpath.join(directory, f".spec-{secrets.token_hex(6)}.json")
        self.transport.put(json.dumps(spec, indent=1).encode(), pending, 0o600)
        return self.call("start", "--dir", directory, "--spec", pending, timeout=60.0)

    def status(self) -> RunState:
        return run_state(self.call("status", "--dir", self.deployment.dir))

    def stop(self, timeout: float) -> tuple[RunState, tuple[int, ...]]:
        document = self.call(
            "stop", "--dir", self.deployment.dir, "--timeout", f"{timeout:g}",
            timeout=timeout + 60.0,
        )  # fmt: skip
        return run_state(document), tuple(document.get("leftovers_killed", ()))

    def runs(self) -> list[dict[str, Any]]:
        runs = self.call("runs", "--dir", self.deployment.dir).get("runs", [])
        return [run for run in runs if isinstance(run, dict)]

    def plan(self, request: dict[str, Any], timeout: float = 300.0) -> dict[str, Any]:
        """Run SGLang's parsing and resolution on the host (``sglang_probe.py``); the request,
        which carries the server's environment, goes 0600 and is removed once read."""
        probe = self.deployment.probe_path
        if self.transport.size(probe) != len(PROBE_SOURCE):
            self.transport.put(PROBE_SOURCE, probe, 0o600)
        pending = posixpath.join(posixpath.dirname(probe), f".plan-{secrets.token_hex(6)}.json")
        self.transport.put(json.dumps(request).encode(), pending, 0o600)
        result = self.transport.run((self.deployment.python, probe, pending), timeout=timeout)
        return answer_of(result.stdout, result.stderr, result.returncode, "sglang_probe.py")

    def inspect(
        self,
        *,
        port: int,
        host: str,
        env_names: Sequence[str],
        pid: int | None = None,
        log: str | None = None,
    ) -> dict[str, Any]:
        """What the server received and resolved (see ``agent.py inspect``)."""
        argv = ["inspect", "--dir", self.deployment.dir, "--port", str(port), "--host", host]
        for name in env_names:
            argv += ["--env", name]
        if pid is not None:
            argv += ["--pid", str(pid)]
        if log is not None:
            argv += ["--log", log]
        return self.call(*argv, timeout=30.0)


def answer_of(stdout: bytes, stderr: bytes, returncode: int, what: str) -> dict[str, Any]:
    """One JSON document on the last line of stdout, or a SupervisorError saying why not."""
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        document = json.loads(lines[-1]) if lines else None
    except ValueError:
        document = None
    if isinstance(document, dict):
        return document
    last = (stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
    raise SupervisorError(
        f"{what} exited with {returncode} without an answer: {last}",
        "is the python the one of the venv that holds sglang?",
    )


def run_state(document: dict[str, Any]) -> RunState:
    """The agent's status JSON -> RunState (the protocol's contract, tested both ways)."""
    if not document.get("deployed", False):
        return RunState(deployed=False)
    raw_exit = document.get("last_exit")
    last_exit = None
    if isinstance(raw_exit, dict):
        last_exit = ExitInfo(
            run_id=str(raw_exit["run_id"]),
            returncode=int(raw_exit["returncode"]),
            cls=str(raw_exit["class"]),
            message=str(raw_exit["message"]),
            at=float(raw_exit["at"]),
            was_ready=bool(raw_exit.get("was_ready", False)),
            signal=raw_exit.get("signal"),
            swept_pids=tuple(raw_exit.get("swept_pids", ())),
        )
    meta = document.get("meta") or {}
    return RunState(
        deployed=True,
        state=document.get("state"),
        pid=document.get("pid"),
        run_id=document.get("run_id"),
        run_dir=document.get("run_dir"),
        log=document.get("log"),
        port=document.get("port"),
        starts=int(document.get("starts", 0)),
        restarts=int(document.get("restarts", 0)),
        ready=bool(document.get("ready", False)),
        uptime_s=document.get("uptime_s"),
        started_at=document.get("started_at"),
        ready_at=document.get("ready_at"),
        message=str(document.get("message", "")),
        last_exit=last_exit,
        agent_alive=bool(document.get("agent_alive", False)),
        stale=bool(document.get("stale", False)),
        next_start_at=document.get("next_start_at"),
        plan_hash=meta.get("plan_hash"),
        git_commit=meta.get("git_commit"),
        git_dirty=meta.get("git_dirty"),
        launched_by=meta.get("launched_by"),
    )
