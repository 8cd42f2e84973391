"""The supervisor behind a gateway (issue 30, item 5), in-process on the fake clock: out of the
gateway as soon as its server failed, before the restart; back in once the restarted run is
READY; a gateway that cannot be reached or refuses is a warning, never a server kept down; the
keys never in what the agent records. And liveness: a failing /health alone never restarts a
server that is making progress; a dead process is restarted whatever /health says.

The gateway is a double of smg 1.13.0's worker API (its answers as
tests/fixtures/gateway/smg-1.13.0-worker-api.json captured them): a registration is listed only
once its job is done, a removed worker is listed ``draining`` for 5 s, a URL still listed is 409.
What is checked is what the agent recorded (events.jsonl, state.json) and what the gateway
lists, never which calls were made.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.remote.agent.gateway import GatewaySpec
from orchestrator.remote.agent.http_json import Reply, Unreachable
from orchestrator.remote.agent.policy import RestartPolicy
from orchestrator.remote.agent.sglang_log import is_batch_line
from orchestrator.remote.agent.spec import Spec
from orchestrator.remote.agent.states import BACKOFF, EXITED, READY, UNHEALTHY
from orchestrator.remote.agent.supervisor import Supervisor
from tests.unit.test_supervisor_logic import (
    CONFIG,
    READY_LOGGED,
    SERVES,
    FakeClock,
    Outcome,
    Script,
    ScriptedWorld,
    _assert_every_change_was_checked,
    _paths,
)

GATEWAY = "http://10.0.0.5:30080"
WORKER = "http://10.0.0.7:31001"
CONTROL_KEY = "cp-key-" + "7" * 24
WORKER_KEY = "worker-key-" + "3" * 20
BATCH = (
    "[2026-11-29 07:44:{:02d}] Prefill batch, #new-seq: 1, #new-token: 8192, #cached-token: 0, "
    "token usage: 0.31, #running-req: 1, #queue-req: 3, "
)


class FakeSmg:
    """smg's worker API on the fake clock: ``reachable`` off refuses connections."""

    def __init__(self, clock: FakeClock, *, register_s: float = 0.5, drain_s: float = 5.0) -> None:
        self._clock = clock
        self._register_s = register_s
        self._drain_s = drain_s
        self.reachable = True
        self.echo_key_in_errors = False  # a gateway that repeats what it was sent
        self.entries: dict[str, dict[str, Any]] = {}  # id -> entry, listed or pending
        self.listed_from: dict[str, float] = {}  # id -> when its registration job is done
        self.gone_at: dict[str, float] = {}  # id -> when a removed worker stops being listed
        self.log: list[tuple[float, str, str]] = []  # the gateway's own log: (time, what, url)

    def preregister(self, url: str) -> None:
        """As orch leaves it after ``orch up``: listed ready."""
        worker_id = str(uuid.uuid4())
        self.entries[worker_id] = _entry(worker_id, url, {})
        self.listed_from[worker_id] = -1.0

    def listing(self) -> list[dict[str, Any]]:
        now = self._clock.monotonic()
        for worker_id, gone in list(self.gone_at.items()):
            if now >= gone:
                del self.entries[worker_id], self.gone_at[worker_id], self.listed_from[worker_id]
        return [
            entry for worker_id, entry in self.entries.items() if now >= self.listed_from[worker_id]
        ]

    def __call__(
        self,
        method: str,
        url: str,
        *,
        key: str | None,
        timeout_s: float,
        payload: Mapping[str, Any] | None = None,
    ) -> Reply:
        if not self.reachable:
            raise Unreachable("Connection refused")
        if key != CONTROL_KEY:
            return Reply(401, "Unauthorized", b"Invalid authentication token")
        assert url.startswith(GATEWAY)
        path, now = url[len(GATEWAY) :], self._clock.monotonic()
        if self.echo_key_in_errors:
            return _json(500, {"error": f"internal error handling request with key {key}"})
        if method == "GET" and path == "/workers":
            workers = self.listing()
            return _json(200, {"workers": workers, "total": len(workers), "stats": {}})
        if method == "POST" and path == "/workers":
            assert payload is not None
            self.listing()
            for entry in self.entries.values():
                if entry["url"] == payload["url"]:
                    return _json(409, {"code": "WORKER_ALREADY_EXISTS", "error": "exists"})
            worker_id = str(uuid.uuid4())
            self.entries[worker_id] = _entry(worker_id, payload["url"], payload.get("labels", {}))
            self.entries[worker_id]["api_key_given"] = payload.get("api_key") == WORKER_KEY
            self.listed_from[worker_id] = now + self._register_s
            self.log.append((now, "add", payload["url"]))
            return _json(202, {"status": "accepted", "worker_id": worker_id})
        if method == "DELETE" and path.startswith("/workers/"):
            worker_id = path.rsplit("/", 1)[1]
            if worker_id not in {entry["id"] for entry in self.listing()}:
                return _json(404, {"code": "WORKER_NOT_FOUND", "error": "not found"})
            self.entries[worker_id]["status"] = "draining"
            self.gone_at.setdefault(worker_id, now + self._drain_s)
            self.log.append((now, "remove", self.entries[worker_id]["url"]))
            return _json(202, {"status": "accepted", "worker_id": worker_id})
        return _json(404, {"error": "no route"})

    def when(self, what: str) -> list[float]:
        return [at for at, done, _ in self.log if done == what]


def _entry(worker_id: str, url: str, labels: Mapping[str, str]) -> dict[str, Any]:
    return {"id": worker_id, "url": url, "status": "ready", "is_healthy": True, "labels": labels}


def _json(status: int, document: Any) -> Reply:
    return Reply(status, "", json.dumps(document).encode())


class GatewayWorld(ScriptedWorld):
    """The scripted servers, and the gateway double in front of them."""

    def __init__(
        self, clock: FakeClock, scripts: Sequence[Script | OSError], gateway: FakeSmg
    ) -> None:
        super().__init__(clock, scripts)
        self.gateway = gateway

    def gateway_exchange(
        self,
        method: str,
        url: str,
        *,
        key: str | None,
        timeout_s: float,
        payload: Mapping[str, Any] | None = None,
    ) -> Reply:
        return self.gateway(method, url, key=key, timeout_s=timeout_s, payload=payload)


class AlwaysHealthyWorld(ScriptedWorld):
    """Something else answers 200 on the server's port (a leftover child holding the socket)."""

    def health_ok(self, host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool:
        return True


def _spec(**changes: Any) -> Spec:
    spec = Spec(
        deployment="t@0",
        argv=("sglang", "serve", "--model-path", "/m"),
        env={},
        port=31001,
        health_host="127.0.0.1",
        health_endpoint="/health",
        health_interval_s=5.0,
        startup_timeout_s=1800.0,
        restart=RestartPolicy(delay_s=1.0),
        stop_timeout_s=5.0,
        gateway=GatewaySpec(
            url=GATEWAY,
            worker_url=WORKER,
            labels={"orch.replica": "0"},
            api_key=CONTROL_KEY,
            worker_api_key=WORKER_KEY,
            ready_timeout_s=20.0,
        ),
    )
    return dataclasses.replace(spec, **changes)


@dataclass(frozen=True)
class Supervised:
    outcome: Outcome
    state_text: str
    events_text: str

    def at(self, kind: str, **match: Any) -> list[float]:
        """When each event of ``kind`` (with these details) happened, in seconds."""
        return [
            self.outcome.seconds(event)
            for event in self.outcome.of(kind)
            if all(event.get(key) == value for key, value in match.items())
        ]


def supervise(
    tmp_path: Path,
    spec: Spec,
    gateway: FakeSmg | None,
    *scripts: Script,
    stop_at: float,
    clock: FakeClock,
    world: ScriptedWorld | None = None,
) -> Supervised:
    paths = _paths(tmp_path)
    if world is None:
        assert gateway is not None
        world = GatewayWorld(clock, scripts, gateway)
    supervisor = Supervisor(spec, paths, clock=clock, world=world)
    clock.at(stop_at, supervisor.stop_requested.set)
    assert supervisor.run() == 0
    state_text, events_text = Path(paths.state).read_text(), Path(paths.events).read_text()
    events = tuple(json.loads(line) for line in events_text.splitlines())
    outcome = Outcome(json.loads(state_text), events, len(world.servers))
    _assert_every_change_was_checked(outcome)
    return Supervised(outcome, state_text, events_text)


READY_THEN_KILLED = Script(lines=((0.5, CONFIG),), healthy_from=1.0, exit_at=10.0, returncode=-9)


# -- out after a failure, back in after the restart ---------------------------------------------


def test_a_killed_server_is_deregistered_before_its_restart_and_registered_after_ready(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    gateway.preregister(WORKER)  # orch registered the first run after its checks
    run = supervise(tmp_path, _spec(), gateway, READY_THEN_KILLED, SERVES, stop_at=40, clock=clock)
    first, second = (event["run_id"] for event in run.outcome.of("start"))
    (out,) = run.at("gateway_deregistered", run_id=first, was_listed=True, removed=True)
    (restarted,) = run.at("start", run_id=second)
    (ready_again,) = run.at("ready", run_id=second)
    (back,) = run.at("gateway_registered", run_id=second, already_listed=False)
    assert 10.0 <= out < restarted < ready_again <= back
    assert out - 10.0 < 0.1  # as soon as the death was seen, before the sweep and the backoff
    # smg lists a removed worker draining for 5 s and refuses its URL meanwhile: the agent
    # waited it out rather than be refused (no error), and added it once gone
    assert run.outcome.of("gateway_error") == []
    (removed,), (added,) = gateway.when("remove"), gateway.when("add")
    assert removed == out
    assert added >= removed + 5.0
    (listed,) = gateway.listing()
    assert (listed["url"], listed["status"], listed["labels"]) == (
        WORKER,
        "ready",
        {"orch.replica": "0"},
    )
    assert listed["api_key_given"]  # the server's own key, for the gateway to send it
    view = run.outcome.state["gateway"]
    assert (view["status"], view["error"], view["worker_url"]) == ("registered", None, WORKER)


def test_the_first_run_of_a_start_is_left_to_orch_and_a_stop_is_not_deregistered(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    run = supervise(tmp_path, _spec(), gateway, SERVES, stop_at=30, clock=clock)
    assert run.outcome.states[-1] == EXITED
    assert gateway.log == []  # orch registers after its checks; orch down deregisters first
    assert not any(e["event"].startswith("gateway_") for e in run.outcome.events)
    assert run.outcome.state["gateway"]["status"] == "untouched"


def test_a_hung_server_is_taken_out_before_its_stop_grace(tmp_path: Path) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    gateway.preregister(WORKER)
    hung = Script(lines=((0.5, CONFIG),), healthy_from=1.0, hangs_at=10.0, ignores_sigterm=True)
    spec = _spec(health_interval_s=2.0, health_failures=3, stop_timeout_s=5.0)
    run = supervise(tmp_path, spec, gateway, hung, SERVES, stop_at=80, clock=clock)
    assert UNHEALTHY in run.outcome.states
    first = run.outcome.of("start")[0]["run_id"]
    (out,) = run.at("gateway_deregistered", run_id=first)
    (ended,) = run.at("exit", run_id=first)
    assert ended - out >= 5.0  # out at UNHEALTHY, not after the SIGTERM grace ran out
    assert run.at("gateway_registered")


def test_an_unreachable_gateway_is_a_warning_and_the_server_still_comes_back(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    gateway.reachable = False
    run = supervise(tmp_path, _spec(), gateway, READY_THEN_KILLED, SERVES, stop_at=60, clock=clock)
    states = run.outcome.states
    assert states.count(READY) == 2  # restarted and READY, gateway or not
    errors = run.outcome.of("gateway_error")
    assert [(e["action"], e["final"]) for e in errors] == [
        ("deregister", True),
        ("register", False),  # said once while retrying
        ("register", True),  # given up at ready_timeout_s
    ]
    assert "cannot reach it: Connection refused" in errors[0]["message"]
    (ready_again,) = run.at("ready", run_id=run.outcome.of("start")[1]["run_id"])
    assert 19.9 <= run.outcome.seconds(errors[-1]) - ready_again <= 20.6
    view = run.outcome.state["gateway"]
    assert view["status"] == "failed"
    assert view["error"].startswith(f"gateway {GATEWAY}: cannot reach it")


def test_a_gateway_back_before_the_deadline_gets_the_server_registered(tmp_path: Path) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    gateway.reachable = False
    clock.at(18.0, lambda: setattr(gateway, "reachable", True))
    run = supervise(tmp_path, _spec(), gateway, READY_THEN_KILLED, SERVES, stop_at=60, clock=clock)
    (back,) = run.at("gateway_registered")
    assert back >= 18.0
    assert run.outcome.state["gateway"] | {"since": None, "error_at": None} == {
        "url": GATEWAY,
        "worker_url": WORKER,
        "status": "registered",
        "since": None,
        "error": None,
        "error_at": None,
    }


def test_the_keys_never_reach_the_state_or_the_events(tmp_path: Path) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    gateway.preregister(WORKER)
    gateway.echo_key_in_errors = True
    run = supervise(tmp_path, _spec(), gateway, READY_THEN_KILLED, SERVES, stop_at=40, clock=clock)
    assert run.outcome.of("gateway_error")
    assert "***" in run.outcome.of("gateway_error")[0]["message"]
    for text in (run.state_text, run.events_text):
        assert CONTROL_KEY not in text
        assert WORKER_KEY not in text
    assert CONTROL_KEY not in repr(_spec().gateway)


def test_a_refused_key_is_said_without_it(tmp_path: Path) -> None:
    clock = FakeClock()
    gateway = FakeSmg(clock)
    spec = _spec()
    assert spec.gateway is not None
    wrong = dataclasses.replace(spec.gateway, api_key="not-the-key")
    run = supervise(
        tmp_path, _spec(gateway=wrong), gateway, READY_THEN_KILLED, SERVES, stop_at=40, clock=clock
    )
    (refused, *_) = run.outcome.of("gateway_error")
    assert "HTTP 401: its control plane refused the key" in refused["message"]
    assert "not-the-key" not in run.events_text + run.state_text


# -- liveness: progress, and a dead process ----------------------------------------------------


def _busy(until_s: int) -> Script:
    """READY, then /health times out from 10 s on (SGLang's /health runs a generation, stuck
    behind long prefills) while the scheduler logs a prefill batch every second until
    ``until_s``; then nothing (hung)."""
    batches = tuple((float(t), BATCH.format(t)) for t in range(10, until_s))
    return Script(
        lines=((0.5, CONFIG), (1.0, READY_LOGGED), *batches), healthy_from=1.0, hangs_at=10.0
    )


def test_batch_lines_are_sglangs_prefill_and_decode_records_only() -> None:
    assert is_batch_line(BATCH.format(1))
    assert is_batch_line("[2026-11-29 07:44:01 TP0] Decode batch [812], #running-req: 3, ")
    assert not is_batch_line('INFO:     127.0.0.1:5 - "GET /health HTTP/1.1" 503')
    assert not is_batch_line("[2026-11-29 07:44:01] the Prefill batch, said a user")


def test_a_failing_health_probe_never_restarts_a_server_logging_batches(tmp_path: Path) -> None:
    clock = FakeClock()
    spec = _spec(gateway=None, health_interval_s=2.0, health_failures=3)
    world = ScriptedWorld(clock, [_busy(until_s=60)])
    run = supervise(tmp_path, spec, None, stop_at=60, clock=clock, world=world)
    assert UNHEALTHY not in run.outcome.states
    assert run.outcome.spawned == 1
    assert len(run.outcome.of("health_excused")) == 1  # said once for the stretch


def test_a_failing_health_probe_restarts_once_the_batches_stop(tmp_path: Path) -> None:
    clock = FakeClock()
    spec = _spec(gateway=None, health_interval_s=2.0, health_failures=3)
    world = ScriptedWorld(clock, [_busy(until_s=30), SERVES])
    run = supervise(tmp_path, spec, None, stop_at=80, clock=clock, world=world)
    (unhealthy,) = [e for e in run.outcome.of("state") if e["to"] == UNHEALTHY]
    # the last batch at 29 s; then interval x failures (+ one interval for the probe after it)
    assert 30.0 < run.outcome.seconds(unhealthy) <= 29.0 + 2.0 * 3 + 2.0 + 2.0
    assert run.outcome.of("exit")[0]["class"] == "hung"


def test_a_dead_server_is_restarted_though_its_port_answers_200(tmp_path: Path) -> None:
    clock = FakeClock()
    spec = _spec(gateway=None)
    world = AlwaysHealthyWorld(clock, [READY_THEN_KILLED, SERVES])
    run = supervise(tmp_path, spec, None, stop_at=40, clock=clock, world=world)
    assert run.outcome.states[:5] == ["STARTING", "RUNNING", READY, BACKOFF, "STARTING"]
    (ended, _) = run.outcome.of("exit")
    assert (ended["class"], ended["signal"]) == ("killed", "SIGKILL")
    assert run.outcome.spawned == 2
