"""A fake of orch's agent for the unit tests of ``commands/`` (pip-tools' FakeRepository is the
anchor: a fake index fed from recorded data, behind the interface the code under test uses).

``FakeAgent`` is what ``Context.agent`` hands a command (``commands.context.HostAgent``). It
answers what the real agent answered: every document comes from
``tests/fixtures/agent-protocol/answers.json``, recorded by ``scripts/record_agent_answers.py``
from the real agent supervising orch's SGLang stand-in, and is decoded by orch's own decoders
(``fleet.protocol``), as ``fleet.client.Agent`` decodes it. Which answer it gives follows the
deployment's situation on the fake host (``FakeDeployment``): nothing deployed, READY,
stopped, unsupervised, adopted, stale, crashed; a start or a stop moves it to the situation the
agent was in after the same command. The only thing of an answer the fake changes is the
``meta`` of the launch it is about: the agent echoes the meta orch sent with the start, so the
fake echoes the one of the launch it was started with (or that a test deployed).

An answer that was not recorded is never made up: ``NotRecorded`` (a test that needs it adds a
situation to the recorder).
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.commands.context import Events
from orchestrator.effective.plan import PlanAnswer
from orchestrator.effective.verify import Observation
from orchestrator.errors import TransportError
from orchestrator.fleet.client import Deployment
from orchestrator.fleet.protocol.common import refused
from orchestrator.fleet.protocol.hold import locked
from orchestrator.fleet.protocol.inspect import InspectRequest, LastRun, decode_inspect
from orchestrator.fleet.protocol.plan import decode_plan_answer
from orchestrator.fleet.protocol.probe import HostFacts, decode_probe
from orchestrator.fleet.protocol.reach import ProbeAnswer
from orchestrator.fleet.protocol.reconfigure import (
    LiveChanges,
    ReconfigureReply,
    live_changes,
)
from orchestrator.fleet.protocol.runs import RunInfo, RunsReply, decode_runs_reply
from orchestrator.fleet.protocol.start import StartReply, decode_start
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.fleet.protocol.stop import StopReply, decode_stop
from orchestrator.fleet.protocol.survey import HostSurvey, decode_survey
from orchestrator.fleet.protocol.tail import TailReply, decode_tail
from orchestrator.model import Host, LockHolder, Profile, RunState
from orchestrator.remote.agent.live import fields_of as live_fields
from orchestrator.transport import CommandResult, Stream, Transport
from tests.conftest import REPO

FIXTURES = REPO / "tests" / "fixtures" / "agent-protocol"
RECORDED_PROFILES = FIXTURES / "profiles"  # the launches the answers are about

# A deployment's situation: which of the recorded answers describe it.
UNDEPLOYED = "undeployed"
READY = "ready"
STOPPED = "stopped"
UNSUPERVISED = "unsupervised"  # its supervisor killed, the server running on
ADOPTED = "adopted"  # a new supervisor adopted the unsupervised server
STALE = "stale"  # supervisor and server killed, no end recorded
CRASHED = "crashed"  # the server failed its startup (config-error), not restarted
UNSAFE = "unsafe"  # its directory is writable by others: every command is refused
RUNNING = frozenset({READY, UNSUPERVISED, ADOPTED})  # a server runs: a start is refused

# The startup each recorded profile's ``start --watch`` streamed, and where it left it.
STARTUPS = {
    "demo": ("start-watch", READY),
    "drift": ("start-watch-drift", READY),
    "crash": ("start-watch-crash", CRASHED),
}
PLANS = {"demo": "plan", "drift": "plan-drift", "incident": "plan-incident"}
INSPECTED = {
    ("demo", READY): "inspect-ready",
    ("demo", ADOPTED): "inspect-ready",
    ("drift", READY): "inspect-drift",
    ("crash", CRASHED): "inspect-crashed",
}


class NotRecorded(AssertionError):
    """The agent's answer to this was not recorded (scripts/record_agent_answers.py)."""


@functools.cache
def _recorded() -> dict[str, Any]:
    answers: dict[str, Any] = json.loads((FIXTURES / "answers.json").read_text())
    return answers


def recorded(key: str, meta: Mapping[str, Any] | None = None) -> Any:
    """The recorded answer ``key`` (a copy), with ``meta`` where the agent echoed the meta."""
    if key not in _recorded():
        raise NotRecorded(f"no recorded answer {key!r}")
    document = copy.deepcopy(_recorded()[key])
    return document if meta is None else _with_meta(document, meta)


def _with_meta(value: Any, meta: Mapping[str, Any]) -> Any:
    if isinstance(value, list):
        return [_with_meta(item, meta) for item in value]
    if isinstance(value, dict):
        out = {key: _with_meta(item, meta) for key, item in value.items()}
        if "meta" in value:
            out["meta"] = dict(meta)
        return out
    return value


@dataclass
class FakeDeployment:
    """A deployment on the fake host: the situation its agent answers from, the meta of the
    launch it holds, the spec of every run it was asked to start (the agent keeps each as its
    spec.json) and every situation it went through (the agent's events)."""

    name: str
    situation: str = UNDEPLOYED
    meta: dict[str, Any] = field(default_factory=dict)
    started: list[dict[str, Any]] = field(default_factory=list)
    reconfigured: list[dict[str, Any]] = field(default_factory=list)  # specs taken running
    history: list[str] = field(default_factory=list)
    # the meta of a launch that another orch starts here just before this one's start arrives
    concurrent: Mapping[str, Any] | None = None

    @property
    def launch_digest(self) -> str | None:
        digest = self.meta.get("launch_digest")
        return digest if isinstance(digest, str) else None

    def become(self, situation: str) -> None:
        self.situation = situation
        self.history.append(situation)

    def status_answer(self, key: str) -> Any:
        """``status`` or ``probe-status`` in its situation: as recorded of this deployment,
        else of the demo's (the shape of a state is the same for every deployment)."""
        own = f"{self.name}/{key}-{self.situation}"
        return recorded(own if own in _recorded() else f"{key}-{self.situation}", self.meta)

    def start(self, spec: Mapping[str, Any]) -> list[Any]:
        """The documents of ``start --watch``: the startup as recorded, or the refusal."""
        if self.concurrent is not None:  # another orch up's start arrived first
            self.meta, self.concurrent = dict(self.concurrent), None
            self.become(READY)
        if self.situation in RUNNING:
            return [recorded("start-refused", self.meta)]
        if self.name not in STARTUPS:
            raise NotRecorded(f"no startup of {self.name!r} was recorded")
        stream, after = STARTUPS[self.name]
        self.meta = dict(spec["meta"])
        self.started.append(dict(spec))
        self.become(after)
        documents: list[Any] = recorded(stream, self.meta)
        return documents

    def stop(self) -> Any:
        if self.situation in RUNNING:
            answer = recorded("stop", self.meta)
        elif self.situation == STALE:
            answer = recorded("stop-stale", self.meta)
        else:
            raise NotRecorded(f"no stop of a {self.situation} deployment was recorded")
        self.become(STOPPED)
        return answer

    def adopt(self) -> Any:
        if self.situation != UNSUPERVISED:
            return recorded("adopt-refused", self.meta)
        self.become(ADOPTED)
        return recorded("adopt", self.meta)


@dataclass
class FakeLock:
    """A deployment's operation lock on a fake host, as ``agent hold`` keeps it: its holder,
    and for one another orch holds (``FakeFleet.hold_elsewhere``), when that one lets it go
    (None: not while this test runs)."""

    holder: LockHolder
    until: float | None = None


class FakeHeld:
    """``fleet.client.HeldLock`` on the fake host: releasing it frees the lock."""

    def __init__(self, fleet: FakeFleet, key: tuple[str, str], generation: int) -> None:
        self._fleet = fleet
        self._key = key
        self.generation: int | None = generation
        self.released = False

    def release(self) -> None:
        if not self.released:
            self.released = True
            del self._fleet.locks[self._key]
            self._fleet.lock_log.append(("release", *self._key))

    def __enter__(self) -> FakeHeld:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


class FakeFleet:
    """The hosts a test's commands reach: each deployment by host and name, and the hosts that
    cannot be reached (their error); the operation locks held on them, and a clock (the
    command's: a waiter for a lock lets it pass)."""

    def __init__(
        self,
        sleep: Callable[[float], None] | None = None,
        monotonic: Callable[[], float] | None = None,
    ) -> None:
        self.deployments: dict[tuple[str, str], FakeDeployment] = {}
        self.unreachable: dict[str, TransportError] = {}
        self.locks: dict[tuple[str, str], FakeLock] = {}
        self.generations: dict[tuple[str, str], int] = {}  # holds so far, as agent hold counts
        self.lock_log: list[tuple[str, str, str]] = []  # ("hold" | "release", host, deployment)
        self._now = 0.0  # without the command's clock: time that passes only when a hold waits
        self.sleep = sleep or self._pass
        self.monotonic = monotonic or (lambda: self._now)

    def _pass(self, seconds: float) -> None:
        self._now += seconds

    def hold_elsewhere(
        self, host: str, deployment: str, holder: LockHolder, for_s: float | None = None
    ) -> None:
        """Another orch holds ``deployment``'s lock on ``host``; it lets go after ``for_s``
        seconds of the command's clock (None: not while the test runs)."""
        until = None if for_s is None else self.monotonic() + for_s
        self.locks[(host, deployment)] = FakeLock(holder, until)

    def hold(
        self,
        host: str,
        deployment: str,
        holder: LockHolder,
        wait_s: float,
        on_wait: Callable[[LockHolder], None] | None,
    ) -> FakeHeld:
        """As ``agent hold``: taken when free; held by another, its holder said once and
        waited for up to ``wait_s``; still held then: Locked naming it."""
        key = (host, deployment)
        other = self.locks.get(key)
        if other is not None:
            if wait_s > 0 and on_wait is not None:
                on_wait(other.holder)
            now = self.monotonic()
            if other.until is None or other.until > now + wait_s:
                self.sleep(max(wait_s, 0.0))
                raise locked(deployment, host, other.holder)
            self.sleep(other.until - now)
            del self.locks[key]
        self.locks[key] = FakeLock(holder)
        self.lock_log.append(("hold", host, deployment))
        self.generations[key] = self.generations.get(key, 0) + 1
        return FakeHeld(self, key, self.generations[key])

    def deployment(self, host: str, name: str) -> FakeDeployment:
        key = (host, name)
        if key not in self.deployments:
            self.deployments[key] = FakeDeployment(name)
        return self.deployments[key]

    def deploy(
        self, host: str, name: str, situation: str, meta: Mapping[str, Any]
    ) -> FakeDeployment:
        """A deployment already in ``situation``, holding the launch ``meta`` describes."""
        deployment = self.deployment(host, name)
        deployment.meta = dict(meta)
        deployment.become(situation)
        return deployment

    def agent(self, profile: Profile) -> FakeAgent:
        """``Context.agent_factory``: the fake agent of ``profile``'s deployment."""
        return FakeAgent(self, profile.host, profile.deployment)

    def host_agent(self, host: Host) -> FakeAgent:
        """``Context.host_agent_factory``: the fake agent of ``host``, bound to no deployment."""
        return FakeAgent(self, host, "")

    def survey_answer(self, host: Host) -> dict[str, Any]:
        """``survey``'s answer on ``host``, built as the agent builds it: every deployment there
        that is not undeployed, by its recorded ``status`` answer (an unsafe one, refused, by
        its reason in ``unreadable``); the host's SGLang as the recorded probe found it."""
        deployments: dict[str, Any] = {}
        unreadable: dict[str, str] = {}
        for (on, name), deployment in sorted(self.deployments.items()):
            if on != host.name or not name or deployment.situation == UNDEPLOYED:
                continue
            answer = deployment.status_answer("status")
            if answer.get("refused"):
                unreadable[name] = str(answer["reason"])
            else:
                deployments[name] = answer
        return {
            "protocol": 1,
            "ok": True,
            "workdir": host.workdir,
            "hostname": recorded("probe")["hostname"],
            "sglang_version": recorded("probe")["sglang"]["version"],
            "deployments": deployments,
            "unreadable": unreadable,
        }


class _NoFiles:
    """The fake host's transport: the commands under test read their answers from the agent,
    never a file (a read here is a branch the recorded answers do not cover)."""

    def __init__(self, host: Host) -> None:
        self._host = host

    @property
    def host(self) -> Host:
        return self._host

    def _refuse(self, what: str) -> AssertionError:
        return NotRecorded(f"the fake host {self._host.name} has no {what}")

    def run(
        self, argv: Sequence[str], *, stdin: bytes | None = None, timeout: float = 60.0
    ) -> CommandResult:
        raise self._refuse(f"command {argv[0]}")

    def stream(
        self, argv: Sequence[str], *, stdin: bytes | None = None, hold_stdin: bool = False
    ) -> Stream:
        raise self._refuse(f"command {argv[0]}")

    def put(self, data: bytes, path: str, mode: int) -> None:
        raise self._refuse(f"file {path}")

    def read(self, path: str, offset: int = 0, limit: int = 1 << 20) -> bytes:
        raise self._refuse(f"file {path}")

    def size(self, path: str) -> int | None:
        raise self._refuse(f"file {path}")

    def home(self) -> str:
        return "/home/ops"

    def close(self) -> None:
        pass


class FakeStart:
    """``start --watch`` opened ahead of its spec (``fleet.client.PendingStart``)."""

    def __init__(self, agent: FakeAgent) -> None:
        self._agent = agent

    def send(self, spec: Mapping[str, Any], launch_script: str) -> tuple[StartReply, Events | None]:
        return self._agent.started(spec)

    def cancel(self) -> None:
        """Called off: the agent was never given a spec, and does nothing."""


class FakeAgent:
    """What a command asks the agent of one deployment, answered from the recorded answers."""

    def __init__(self, fleet: FakeFleet, host: Host, name: str) -> None:
        self._fleet = fleet
        self._host = host.name
        self._host_value = host
        # a host's agent (no deployment: survey) keeps nothing in the fleet's records
        self._deployment = fleet.deployment(host.name, name) if name else FakeDeployment(name)
        self.deployment = Deployment(
            name, host, host.python or "/opt/venv/bin/python", host.workdir
        )
        self.transport: Transport = _NoFiles(host)

    def _reach(self) -> FakeDeployment:
        error = self._fleet.unreachable.get(self._host)
        if error is not None:
            raise error
        return self._deployment

    def status(self, *, load: bool = False) -> RunState:
        return decode_state(self._reach().status_answer("status"))

    def read_state(self) -> RunState | None:
        deployment = self._reach()
        if deployment.situation == UNDEPLOYED:
            return None
        if deployment.situation != READY:
            raise NotRecorded(f"no state.json of a {deployment.situation} deployment")
        return decode_state(recorded("state.json-ready", deployment.meta), agent_alive=True)

    def status_and_probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str]
    ) -> tuple[RunState, HostFacts | None]:
        # decoded as fleet.client.Agent decodes ``probe --dir``'s answer
        document = self._reach().status_answer("probe-status")
        refused(document)
        state = decode_state(document["status"])
        return state, None if document.get("facts") == "skipped" else decode_probe(document)

    def probe(self, port: int, model: str | None, bind: str, env: Mapping[str, str]) -> HostFacts:
        self._reach()
        return decode_probe(recorded("probe"))

    def open_start(self, seconds: float, inspect: InspectRequest | None = None) -> FakeStart:
        self._reach()
        return FakeStart(self)

    def started(self, spec: Mapping[str, Any]) -> tuple[StartReply, Events | None]:
        """The start's reply, then the startup streamed (None when refused), as
        ``fleet.client.Agent`` hands them on."""
        documents = self._reach().start(spec)
        first = documents[0]
        if isinstance(first.get("start"), dict):
            return decode_start(first["start"]), _stream(documents[1:])
        return decode_start(first), None

    def start(self, spec: Mapping[str, Any], launch_script: str) -> StartReply:
        reply, events = self.started(spec)
        if events is not None:
            events.close()
        return reply

    def adopt(self) -> StartReply:
        return decode_start(self._reach().adopt())

    def start_previous(self) -> StartReply:
        raise NotRecorded("no start of a previous launch was recorded")

    def stop(self, timeout: float) -> StopReply:
        return decode_stop(self._reach().stop())

    def watch(
        self, run_id: str, offset: int, seconds: float, inspect: InspectRequest | None = None
    ) -> Events:
        raise NotRecorded("no watch of a running startup was recorded")

    def tail(self, lines: int, bytes_per_line: int, run_id: str | None = None) -> TailReply:
        self._reach()
        return decode_tail(recorded("tail"))

    def runs(self) -> tuple[RunInfo, ...]:
        return self.runs_reply().runs

    def runs_reply(self) -> RunsReply:
        self._reach()
        return decode_runs_reply(recorded("runs"))

    def plan(self, request: Mapping[str, Any], timeout: float = 300.0) -> PlanAnswer:
        self._reach()
        if self._deployment.name not in PLANS:
            raise NotRecorded(f"no plan of {self._deployment.name!r} was recorded")
        return decode_plan_answer(recorded(PLANS[self._deployment.name]))

    def inspect(
        self,
        *,
        port: int,
        host: str,
        env_names: Sequence[str],
        pid: int | None = None,
        log: str | None = None,
    ) -> tuple[Observation, LastRun | None]:
        deployment = self._reach()
        if deployment.situation == UNDEPLOYED:
            return decode_inspect(recorded("inspect-undeployed"))
        key = INSPECTED.get((deployment.name, deployment.situation))
        if key is None:
            raise NotRecorded(f"no inspect of {deployment.name} {deployment.situation}")
        return decode_inspect(recorded(key))

    def survey(self) -> HostSurvey:
        self._reach()
        return decode_survey(self._host, self._fleet.survey_answer(self._host_value))

    def reconfigure(
        self,
        spec: Mapping[str, Any],
        launch_script: str,
        live: LiveChanges | None = None,
    ) -> ReconfigureReply:
        """As the agent takes a new spec: a running supervisor (a READY deployment here) takes
        it and echoes its meta; live changes need a READY server too. Anything else is refused
        with the agent's reason."""
        deployment = self._reach()
        applied = live_fields(live_changes(live))
        if deployment.situation not in RUNNING or deployment.situation == UNSUPERVISED:
            return ReconfigureReply(
                ok=False,
                reason=f"no supervisor runs {deployment.name} (state "
                f"{deployment.situation.upper()}): a new spec is taken by a running one; orch "
                "up starts one",
                state=self.status(),
                live_applied={},
            )
        deployment.meta = dict(spec["meta"])
        deployment.reconfigured.append(dict(spec))
        return ReconfigureReply(ok=True, reason="", state=self.status(), live_applied=applied)

    def listen(
        self, bind: str, port: int, token: str, seconds: float, *, expect: int
    ) -> ProbeAnswer:
        raise NotRecorded("no listen was recorded")

    def reach(self, host: str, port: int, token: str, timeout: float) -> ProbeAnswer:
        raise NotRecorded("no reach was recorded")

    def hold(
        self,
        holder: LockHolder,
        wait_s: float,
        on_wait: Callable[[LockHolder], None] | None = None,
    ) -> FakeHeld:
        self._reach()
        return self._fleet.hold(self._host, self.deployment.name, holder, wait_s, on_wait)


def _stream(documents: Sequence[Any]) -> Generator[dict[str, Any], None, None]:
    yield from documents
