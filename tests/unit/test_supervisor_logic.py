"""The supervisor's logic in-process, in milliseconds: a fake clock whose sleep and wait advance
time, and scripted server doubles in place of processes (tests/agent runs the real thing).

What the supervisor decides is read back from what it records: state.json and events.jsonl.
"""

from __future__ import annotations

import errno
import heapq
import itertools
import json
import os
import signal
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.agent.files import Paths
from orchestrator.remote.agent.http_json import Reply
from orchestrator.remote.agent.identity import process_identity
from orchestrator.remote.agent.output import OutputWatcher
from orchestrator.remote.agent.policy import RestartPolicy
from orchestrator.remote.agent.sglang_log import READY_LINE
from orchestrator.remote.agent.spec import Spec
from orchestrator.remote.agent.states import (
    BACKOFF,
    EXITED,
    FATAL,
    INITIAL_STATE,
    READY,
    RUNNING,
    STARTING,
    STATES,
    STOPPING,
    TERMINAL_STATES,
    TRANSITIONS,
    UNHEALTHY,
    IllegalTransition,
    check_transition,
)
from orchestrator.remote.agent.supervisor import Supervisor

WALL_AT_ZERO = 1_800_000_000.0  # the fake wall clock at monotonic 0
HORIZON_S = 100_000.0  # a supervisor still running past this would never have stopped
CONFIG = "[2026-11-29 07:42:55] server_args=ServerArgs(model_path='/m', port=30000)"
READY_LOGGED = f"[2026-11-29 07:43:40] {READY_LINE}"
TRACEBACK = (
    "Traceback (most recent call last):",
    '  File "/opt/sglang/server_args.py", line 2163, in check_server_args',
    "ValueError: bad mamba strategy",
)


# -- the doubles --------------------------------------------------------------------------------


class FakeClock:
    """Time that passes only when the supervisor sleeps or waits, in whole microseconds (no
    drift from adding 0.05 s); actions scheduled ``at`` a time run when it is reached."""

    def __init__(self) -> None:
        self._now_us = 0
        self._order = itertools.count()
        self._actions: list[tuple[int, int, Callable[[], None]]] = []

    def at(self, when_s: float, action: Callable[[], None]) -> None:
        heapq.heappush(self._actions, (round(when_s * 1e6), next(self._order), action))

    def monotonic(self) -> float:
        return self._now_us / 1e6

    def wall(self) -> float:
        return WALL_AT_ZERO + self.monotonic()

    def sleep(self, seconds: float) -> None:
        self._advance(self._now_us + round(seconds * 1e6), None)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        if not event.is_set():
            self._advance(self._now_us + round(timeout * 1e6), event)
        return event.is_set()

    def _advance(self, until_us: int, event: threading.Event | None) -> None:
        if until_us > HORIZON_S * 1e6:
            raise AssertionError(f"the supervisor still runs after {HORIZON_S:g} s")
        while self._actions and self._actions[0][0] <= until_us:
            when_us, _, action = heapq.heappop(self._actions)
            self._now_us = max(self._now_us, when_us)
            action()
            if event is not None and event.is_set():
                return
        self._now_us = until_us


@dataclass(frozen=True)
class Script:
    """What one start of the server does, in seconds after it was spawned."""

    lines: tuple[tuple[float, str], ...] = ()
    exit_at: float | None = None  # None: runs until a signal ends it
    returncode: int = 1
    healthy_from: float | None = None  # /health answers 200 from then on
    hangs_at: float | None = None  # /health stops answering then (kill -STOP; a deadlock)
    ignores_sigterm: bool = False


class ScriptedServer:
    """A test double of a server process, not a process: it plays its Script on the fake clock,
    feeding its lines to the supervisor's watcher as they come due, and ends when the script
    or a signal says so."""

    def __init__(self, pid: int, script: Script, clock: FakeClock, output: OutputWatcher) -> None:
        self.pid = pid
        self.script = script
        self._clock = clock
        self._output = output
        self._started = clock.monotonic()
        self._next_line = 0
        self.returncode: int | None = None
        self.ended = threading.Event()  # the loop's wait times out on the fake clock instead

    def _elapsed(self) -> float:
        return self._clock.monotonic() - self._started

    def _play(self) -> None:
        if self.returncode is not None:
            return
        lines = self.script.lines
        while self._next_line < len(lines) and lines[self._next_line][0] <= self._elapsed():
            self._output.feed(f"{lines[self._next_line][1]}\n".encode())
            self._next_line += 1
        exit_at = self.script.exit_at
        if exit_at is not None and self._elapsed() >= exit_at:
            self._end(self.script.returncode)

    def _end(self, returncode: int) -> None:
        if self.returncode is None:
            self.returncode = returncode
            self._output.close()

    def poll(self) -> int | None:
        self._play()
        return self.returncode

    def wait(self) -> int:
        self._play()
        if self.returncode is None:
            raise AssertionError("wait() on a server that still runs would block forever")
        return self.returncode

    def drain(self, timeout: float) -> None:
        """The double's output is fed synchronously: nothing is left to read."""

    def healthy(self) -> bool:
        self._play()
        start, hang = self.script.healthy_from, self.script.hangs_at
        if hang is not None and self._elapsed() >= hang:
            return False
        return self.returncode is None and start is not None and self._elapsed() >= start

    def hung(self) -> bool:
        hang = self.script.hangs_at
        return self.returncode is None and hang is not None and self._elapsed() >= hang

    def receive(self, sig: int) -> None:
        if sig == signal.SIGKILL or (sig == signal.SIGTERM and not self.script.ignores_sigterm):
            self._end(-sig)


class ScriptedWorld:
    """A test double of the supervisor's World: each spawn plays the next Script (or raises
    the next OSError); a spawn past the scripts fails the test."""

    def __init__(self, clock: FakeClock, scripts: Sequence[Script | OSError]) -> None:
        self._clock = clock
        self._scripts = list(scripts)
        self.servers: list[ScriptedServer] = []
        self.loads_asked = 0
        self.load_reads = 0

    def spawn(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], output: OutputWatcher
    ) -> ScriptedServer:
        if not self._scripts:
            raise AssertionError("the supervisor started a server no script was written for")
        script = self._scripts.pop(0)
        if isinstance(script, OSError):
            raise script
        server = ScriptedServer(4000 + len(self.servers), script, self._clock, output)
        self.servers.append(server)
        return server

    def memory_loads(self, host: str, port: int) -> dict[str, Any]:
        self.loads_asked += 1
        return {"memory_loads": [{"memory": {"weight_gb": 51.1}}]}

    def loads(self, host: str, port: int, key: str | None) -> dict[str, Any]:
        self.load_reads += 1
        return {"loads": [{"dp_rank": 0, "num_running_reqs": self.load_reads}]}

    def health_ok(self, host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool:
        healthy = any(server.healthy() for server in self.servers)
        if not healthy and any(server.hung() for server in self.servers):
            self._clock.sleep(timeout)  # it accepts but never answers: the probe times out
        return healthy

    def identity(self, pid: int) -> dict[str, Any] | None:
        if pid == os.getpid():  # the supervisor's own: this process, really
            return process_identity(pid)
        return {"pid": pid, "start_ticks": pid, "create_time": 0.0, "exe": "/x", "cmdline": []}

    def received(self, pid: int, env_names: Sequence[str]) -> dict[str, Any] | None:
        return {"exe": "/usr/bin/python3", "argv": ["python3", "-m", "sglang"], "env": {}}

    def signal_group(self, pgid: int, sig: int) -> None:
        for server in self.servers:
            if server.pid == pgid:
                server.receive(sig)

    def descendants(self, pid: int) -> dict[int, float]:
        return {}

    def sweep(self, deployment_dir: str, run_id: str, seen: dict[int, float]) -> list[int]:
        return []

    def gateway_exchange(
        self,
        method: str,
        url: str,
        *,
        key: str | None,
        timeout_s: float,
        payload: Mapping[str, Any] | None = None,
    ) -> Reply:
        """A spec without ``gateway`` never calls one (tests/unit/test_agent_gateway.py has
        a world with a gateway)."""
        raise AssertionError(f"{method} {url}: this spec has no gateway")


# -- running the supervisor on them -------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    state: dict[str, Any]  # state.json as the supervisor left it
    events: tuple[dict[str, Any], ...]  # events.jsonl
    spawned: int

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [event for event in self.events if event["event"] == kind]

    @property
    def states(self) -> list[str]:
        return [INITIAL_STATE] + [event["to"] for event in self.of("state")]

    @property
    def delays(self) -> list[float]:
        return [event["delay_s"] for event in self.of("backoff")]

    def seconds(self, event: dict[str, Any]) -> float:
        return float(event["at"]) - WALL_AT_ZERO


def _spec(restart: RestartPolicy, stop_timeout_s: float) -> Spec:
    return Spec(
        deployment="t",
        argv=("sglang", "serve", "--model-path", "/m"),
        env={},
        port=30000,
        health_host="127.0.0.1",
        health_endpoint="/health",
        health_interval_s=5.0,
        startup_timeout_s=1800.0,
        restart=restart,
        stop_timeout_s=stop_timeout_s,
    )


def _paths(tmp_path: Path) -> Paths:
    paths = Paths(str(tmp_path / "workdir" / "t"))
    Path(paths.runs).mkdir(parents=True)
    return paths


def supervise(
    tmp_path: Path,
    *scripts: Script | OSError,
    restart: RestartPolicy = RestartPolicy(),  # noqa: B008 - frozen
    stop_at: float | None = None,
    stop_timeout_s: float = 30.0,
) -> Outcome:
    return supervise_spec(tmp_path, _spec(restart, stop_timeout_s), *scripts, stop_at=stop_at)


def _assert_every_change_was_checked(outcome: Outcome) -> None:
    """Each recorded change starts where the previous one ended (no state was set around
    change_state), is in the table, and the last one is what state.json says."""
    changes = outcome.of("state")
    current = INITIAL_STATE
    for change in changes:
        assert change["from"] == current, changes
        assert change["to"] in TRANSITIONS[current], changes
        current = change["to"]
    assert outcome.state["state"] == current
    assert current in TERMINAL_STATES
    assert outcome.state["state_since"] == changes[-1]["at"]


def crash(after_s: float = 1.0, returncode: int = 1) -> Script:
    """Accepts its configuration, then dies without a traceback (a crash, not deterministic)."""
    return Script(lines=((0.5, CONFIG),), exit_at=after_s, returncode=returncode)


SERVES = Script(lines=((0.5, CONFIG), (2.0, READY_LOGGED)), healthy_from=2.0)  # until stopped


# -- the table ----------------------------------------------------------------------------------


def test_transition_table_refuses_every_pair_it_does_not_hold() -> None:
    assert set(TRANSITIONS) == set(STATES)
    for current, new in itertools.product(STATES, STATES):
        if new in TRANSITIONS[current]:
            check_transition(current, new)
        else:
            with pytest.raises(IllegalTransition, match=f"{current} -> {new}"):
                check_transition(current, new)


def test_transition_table_reaches_every_state_and_ends_only_in_terminal_ones() -> None:
    reached, frontier = {INITIAL_STATE}, [INITIAL_STATE]
    while frontier:
        for new in TRANSITIONS[frontier.pop()] - reached:
            reached.add(new)
            frontier.append(new)
    assert reached == set(STATES)
    assert set(TERMINAL_STATES) == {EXITED, FATAL}
    assert all(TRANSITIONS[state] for state in STATES if state not in TERMINAL_STATES)


def test_supervisor_refuses_an_illegal_change_and_keeps_its_state(tmp_path: Path) -> None:
    paths, clock = _paths(tmp_path), FakeClock()
    world = ScriptedWorld(clock, [])
    supervisor = Supervisor(_spec(RestartPolicy(), 30.0), paths, clock=clock, world=world)
    with pytest.raises(IllegalTransition, match="STARTING -> STARTING"):
        supervisor.change_state(STARTING)
    with pytest.raises(IllegalTransition):
        supervisor.update(state=READY)
    assert supervisor.record.state == STARTING
    assert not Path(paths.state).exists()


# -- restarts -----------------------------------------------------------------------------------


def test_crash_loop_backs_off_exponentially_up_to_the_cap(tmp_path: Path) -> None:
    policy = RestartPolicy(delay_s=5, multiplier=2, max_delay_s=60, start_limit=8)
    outcome = supervise(tmp_path, *[crash()] * 8, restart=policy)
    assert outcome.delays == [5, 10, 20, 40, 60, 60, 60]
    starts = outcome.of("start")
    for backoff, next_start in zip(outcome.of("backoff"), starts[1:], strict=True):
        assert outcome.seconds(next_start) - outcome.seconds(backoff) == backoff["delay_s"]
    assert [event["failures"] for event in outcome.of("backoff")] == [1, 2, 3, 4, 5, 6, 7]
    assert outcome.states[:6] == [STARTING, RUNNING, BACKOFF, STARTING, RUNNING, BACKOFF]
    assert outcome.state["restarts"] == 7


def test_start_limit_hit_is_fatal_with_its_message(tmp_path: Path) -> None:
    outcome = supervise(tmp_path, *[crash()] * 5)  # the default: 5 starts within 600 s
    assert outcome.delays == [5, 10, 20, 40]
    assert outcome.state["state"] == FATAL
    assert outcome.state["message"] == "crashed: start limit hit (5 starts within 600 s)"
    assert outcome.state["starts"] == 5
    assert outcome.state["next_start_at"] is None
    assert outcome.of("fatal")[-1]["reason"] == outcome.state["message"]


def test_starts_outside_the_start_limit_window_do_not_count(tmp_path: Path) -> None:
    policy = RestartPolicy(delay_s=20, multiplier=1, start_limit=3, start_limit_interval_s=30)
    outcome = supervise(tmp_path, *[crash()] * 6, SERVES, restart=policy, stop_at=200)
    assert outcome.delays == [20] * 6
    assert outcome.state["state"] == EXITED


def test_a_traceback_before_the_config_line_is_fatal_without_restart(tmp_path: Path) -> None:
    rejected = Script(lines=tuple((0.2, line) for line in TRACEBACK), exit_at=0.3)
    outcome = supervise(tmp_path, rejected)
    assert outcome.states == [STARTING, FATAL]
    assert outcome.state["message"].startswith("config-error: not restarting (SGLang rejects")
    assert outcome.state["last_exit"]["class"] == "config-error"
    assert outcome.state["last_exit"]["message"] == "ValueError: bad mamba strategy"
    assert outcome.spawned == 1
    assert outcome.of("backoff") == []


def test_the_same_traceback_after_the_config_line_is_a_crash_and_restarts(
    tmp_path: Path,
) -> None:
    late = Script(lines=((0.1, CONFIG), *((0.2, line) for line in TRACEBACK)), exit_at=0.3)
    outcome = supervise(tmp_path, late, SERVES, stop_at=60)
    assert outcome.states[:3] == [STARTING, RUNNING, BACKOFF]
    assert outcome.of("exit")[0]["class"] == "crashed"
    assert outcome.spawned == 2


# The restart verdict, not the class, decides (issue 25): what repeats at this configuration is
# never restarted, what may not repeat is, whatever its class.
SCHEDULER_FAILED = (
    "[2026-11-29 07:43:10 TP0] Scheduler hit an exception: Traceback (most recent call last):"
)
SELF_KILL = "[2026-11-29 07:43:10] Received sigquit from a child process. It usually means the child failed."


def _dies_with(*lines: str, ready: bool = False) -> Script:
    before = ((0.1, CONFIG), (0.2, READY_LOGGED)) if ready else ((0.1, CONFIG),)
    return Script(
        lines=(*before, *((0.3, line) for line in lines)),
        exit_at=0.4,
        returncode=-signal.SIGKILL,
        healthy_from=0.2 if ready else None,
    )


def test_a_parallelism_assertion_after_the_config_line_is_fatal_not_a_restart_loop(
    tmp_path: Path,
) -> None:
    asserted = _dies_with(SCHEDULER_FAILED, "AssertionError: 16 is not divisible by 6", SELF_KILL)
    outcome = supervise(tmp_path, asserted, SERVES, stop_at=60)
    assert outcome.states == [STARTING, RUNNING, FATAL]
    assert outcome.spawned == 1
    assert outcome.state["last_exit"]["class"] == "config-error"
    assert outcome.state["last_exit"]["restart_helps"] is False
    assert outcome.state["message"].startswith("config-error: not restarting (")
    assert "this configuration" in outcome.state["message"]


def test_a_kernel_error_during_startup_is_fatal(tmp_path: Path) -> None:
    capture = _dies_with(
        SCHEDULER_FAILED,
        "Exception: Capture cuda graph failed: RuntimeError: CUDA error: an illegal memory access "
        "was encountered",
        SELF_KILL,
    )
    outcome = supervise(tmp_path, capture, SERVES, stop_at=60)
    assert outcome.states == [STARTING, RUNNING, FATAL]
    assert outcome.state["last_exit"]["class"] == "kernel-error"
    assert outcome.of("backoff") == []


def test_a_kernel_error_while_serving_is_restarted(tmp_path: Path) -> None:
    serving = _dies_with(
        SCHEDULER_FAILED,
        "RuntimeError: CUDA error: an illegal memory access was encountered",
        SELF_KILL,
        ready=True,
    )
    outcome = supervise(tmp_path, serving, SERVES, stop_at=60)
    assert outcome.of("exit")[0]["class"] == "kernel-error"
    assert outcome.of("exit")[0]["restart_helps"] is True
    assert BACKOFF in outcome.states
    assert outcome.spawned == 2


def test_an_nccl_watchdog_timeout_is_restarted(tmp_path: Path) -> None:
    timeout = _dies_with(
        "[rank1]:[E210 02:06:33.347835395 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 1] "
        "Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught "
        "collective operation timeout: WorkNCCL(SeqNum=1522789, OpType=_ALLGATHER_BASE) ran for "
        "600003 milliseconds before timing out.",
        ready=True,
    )
    outcome = supervise(tmp_path, timeout, SERVES, stop_at=60)
    assert outcome.of("exit")[0]["class"] == "nccl"
    assert outcome.spawned == 2


def test_a_server_that_cannot_be_spawned_is_a_spawn_failed_verdict(tmp_path: Path) -> None:
    missing = FileNotFoundError(errno.ENOENT, "No such file or directory", "sglang")
    outcome = supervise(tmp_path, missing)
    assert outcome.states == [STARTING, FATAL]
    assert outcome.state["last_exit"]["class"] == "spawn-failed"
    assert outcome.state["last_exit"]["message"] == "cannot start sglang: No such file or directory"
    assert outcome.state["message"].startswith("spawn-failed: not restarting (")
    # the run has an id, a directory and a log saying why: up finds the verdict by run id
    assert outcome.state["run_id"] == outcome.state["last_exit"]["run_id"]
    assert "cannot start sglang" in Path(outcome.state["log"]).read_text()
    assert outcome.state["pid"] is None
    assert outcome.spawned == 0


def test_an_argument_over_the_kernel_limit_says_so(tmp_path: Path) -> None:
    too_long = OSError(errno.E2BIG, "Argument list too long")
    outcome = supervise(tmp_path, too_long)
    assert outcome.state["last_exit"]["class"] == "spawn-failed"
    assert "MAX_ARG_STRLEN" in outcome.state["last_exit"]["message"]


def test_a_spawn_that_fails_on_a_restart_is_fatal_at_once(tmp_path: Path) -> None:
    gone = FileNotFoundError(errno.ENOENT, "No such file or directory", "sglang")
    outcome = supervise(tmp_path, crash(), gone)
    assert outcome.states == [STARTING, RUNNING, BACKOFF, FATAL]
    assert outcome.state["last_exit"]["class"] == "spawn-failed"


def test_a_run_that_became_ready_resets_the_backoff(tmp_path: Path) -> None:
    ready_then_crash = Script(lines=((0.5, CONFIG),), exit_at=30, healthy_from=1.0)
    outcome = supervise(tmp_path, crash(), ready_then_crash, crash(), SERVES, stop_at=300)
    assert outcome.delays == [5, 5, 10]
    assert [event["failures"] for event in outcome.of("backoff")] == [1, 1, 2]
    assert outcome.state["state"] == EXITED


def test_restart_no_never_restarts(tmp_path: Path) -> None:
    outcome = supervise(tmp_path, crash(), restart=RestartPolicy(mode="no"))
    assert outcome.states == [STARTING, RUNNING, EXITED]
    assert outcome.state["message"] == "exited (crashed); restart=no"
    assert outcome.spawned == 1


@pytest.mark.parametrize(("mode", "restarted"), [("always", True), ("on-failure", False)])
def test_a_clean_exit_restarts_only_under_always(
    tmp_path: Path, mode: str, restarted: bool
) -> None:
    clean = crash(returncode=0)
    scripts = (clean, SERVES) if restarted else (clean,)
    outcome = supervise(tmp_path, *scripts, restart=RestartPolicy(mode=mode), stop_at=60)
    assert (BACKOFF in outcome.states) is restarted
    assert outcome.spawned == len(scripts)
    if not restarted:
        assert outcome.state["message"] == "exited (crashed); restart=on-failure"


# -- stopping -----------------------------------------------------------------------------------


def test_stop_requested_during_backoff_exits_without_another_start(tmp_path: Path) -> None:
    outcome = supervise(tmp_path, crash(after_s=1.0), stop_at=3.0)  # backing off 1 s .. 6 s
    assert outcome.states == [STARTING, RUNNING, BACKOFF, EXITED]
    assert outcome.spawned == 1
    assert outcome.state["message"] == "stopped"
    assert outcome.seconds(outcome.of("stopped")[0]) == 3.0  # the wait ended with the request


def test_stop_sends_sigterm_to_the_group(tmp_path: Path) -> None:
    outcome = supervise(tmp_path, SERVES, stop_at=20)
    assert outcome.states == [STARTING, RUNNING, READY, STOPPING, EXITED]
    assert outcome.state["last_exit"]["signal"] == "SIGTERM"
    assert outcome.state["last_exit"]["class"] == "stopped"
    assert outcome.state["pid"] is None


def test_stop_kills_a_server_that_ignores_sigterm_after_the_grace(tmp_path: Path) -> None:
    stubborn = Script(lines=((0.5, CONFIG),), healthy_from=1.0, ignores_sigterm=True)
    outcome = supervise(tmp_path, stubborn, stop_at=10, stop_timeout_s=30)
    assert outcome.state["last_exit"]["signal"] == "SIGKILL"
    (stopping,) = [e for e in outcome.of("state") if e["to"] == STOPPING]
    assert outcome.seconds(outcome.of("exit")[0]) - outcome.seconds(stopping) == 30.0


# -- readiness ----------------------------------------------------------------------------------


def test_ready_when_the_health_probe_answers(tmp_path: Path) -> None:
    probed = Script(lines=((0.5, CONFIG),), healthy_from=3.0)  # no ready line at all
    outcome = supervise(tmp_path, probed, stop_at=20)
    (ready,) = outcome.of("ready")
    assert 3.0 <= outcome.seconds(ready) <= 4.0  # probed at most 1 s apart until the line
    assert outcome.states[:3] == [STARTING, RUNNING, READY]
    # once READY, what the server says of its memory is asked once and kept in the state
    assert outcome.state["memory_loads"] == [{"memory": {"weight_gb": 51.1}}]


def test_load_is_sampled_every_15_s_while_ready_and_kept_after_the_stop(tmp_path: Path) -> None:
    outcome = supervise(tmp_path, SERVES, stop_at=50)  # READY at 2 s: samples at 2, 17, 32, 47
    assert outcome.states[-1] == EXITED
    load = outcome.state["load"]  # the last figures outlive the server, with their time
    assert load["loads"] == [{"dp_rank": 0, "num_running_reqs": 4}]
    assert 47.0 <= load["at"] - WALL_AT_ZERO < 48.0
    assert load["error"] is None


def test_health_is_not_asked_before_the_config_line(tmp_path: Path) -> None:
    early = Script(lines=((5.0, CONFIG),), healthy_from=0.0)  # another server on the port?
    outcome = supervise(tmp_path, early, stop_at=20)
    (ready,) = outcome.of("ready")
    assert outcome.seconds(ready) == 5.0


def test_the_ready_line_alone_never_makes_a_server_ready(tmp_path: Path) -> None:
    hung = Script(lines=((0.5, CONFIG), (2.0, READY_LOGGED)))  # /health never answers
    outcome = supervise(tmp_path, hung, stop_at=300)
    assert outcome.of("ready") == []
    assert outcome.states == [STARTING, RUNNING, STOPPING, EXITED]


def test_the_ready_line_makes_the_probe_frequent(tmp_path: Path) -> None:
    answers_soon = Script(lines=((0.5, CONFIG), (2.0, READY_LOGGED)), healthy_from=2.25)
    outcome = supervise(tmp_path, answers_soon, stop_at=30)
    (ready,) = outcome.of("ready")
    assert 2.25 <= outcome.seconds(ready) <= 2.35


def test_a_full_life_goes_through_the_table(tmp_path: Path) -> None:
    ready_then_crash = Script(lines=((0.5, CONFIG),), exit_at=30, healthy_from=1.0)
    outcome = supervise(tmp_path, ready_then_crash, SERVES, stop_at=100)
    assert outcome.states == [
        STARTING,
        RUNNING,
        READY,
        BACKOFF,
        STARTING,
        RUNNING,
        READY,
        STOPPING,
        EXITED,
    ]


# -- liveness after READY, and the startup timeout -----------------------------------------------


def _liveness_spec(**changes: Any) -> Spec:
    import dataclasses

    return dataclasses.replace(_spec(RestartPolicy(), 30.0), **changes)


def supervise_spec(
    tmp_path: Path, spec: Spec, *scripts: Script | OSError, stop_at: float | None = None
) -> Outcome:
    paths = _paths(tmp_path)
    clock = FakeClock()
    world = ScriptedWorld(clock, scripts)
    supervisor = Supervisor(spec, paths, clock=clock, world=world)
    if stop_at is not None:
        clock.at(stop_at, supervisor.stop_requested.set)
    assert supervisor.run() == 0
    state = json.loads(Path(paths.state).read_text())
    lines = Path(paths.events).read_text().splitlines()
    outcome = Outcome(state, tuple(json.loads(line) for line in lines), len(world.servers))
    _assert_every_change_was_checked(outcome)
    return outcome


def test_a_server_that_stops_answering_after_ready_is_unhealthy_then_restarted(
    tmp_path: Path,
) -> None:
    hung = Script(lines=((0.5, CONFIG),), healthy_from=1.0, hangs_at=20.0)  # kill -STOP at 20 s
    spec = _liveness_spec(health_interval_s=2.0, health_failures=3, stop_timeout_s=5.0)
    outcome = supervise_spec(tmp_path, spec, hung, SERVES, stop_at=200)
    assert outcome.states[:7] == [
        STARTING,
        RUNNING,
        READY,
        UNHEALTHY,
        BACKOFF,
        STARTING,
        RUNNING,
    ]
    (unhealthy,) = [e for e in outcome.of("state") if e["to"] == UNHEALTHY]
    # noticed within interval x failures (+ one interval: the probe after the hang)
    assert 20.0 < outcome.seconds(unhealthy) <= 20.0 + 2.0 * 3 + 2.0
    first_exit = outcome.of("exit")[0]
    assert first_exit["class"] == "hung"
    assert "/health failed 3 times in a row (2 s apart) after READY" in first_exit["message"]
    assert outcome.of("unhealthy")[0]["failures"] == 3
    assert outcome.spawned == 2


def test_a_failed_probe_followed_by_a_good_one_starts_the_count_again(tmp_path: Path) -> None:
    flaky = Script(lines=((0.5, CONFIG),), healthy_from=1.0, hangs_at=10.0)
    spec = _liveness_spec(health_interval_s=2.0, health_failures=100)
    outcome = supervise_spec(tmp_path, spec, flaky, stop_at=30)
    assert UNHEALTHY not in outcome.states
    assert outcome.state["state"] == EXITED


def test_unhealthy_under_restart_no_exits(tmp_path: Path) -> None:
    hung = Script(lines=((0.5, CONFIG),), healthy_from=1.0, hangs_at=5.0)
    spec = _liveness_spec(health_interval_s=1.0, restart=RestartPolicy(mode="no"))
    outcome = supervise_spec(tmp_path, spec, hung, stop_at=200)
    assert outcome.states == [STARTING, RUNNING, READY, UNHEALTHY, EXITED]
    assert outcome.state["message"] == "exited (hung); restart=no"


def test_the_agent_enforces_the_startup_timeout(tmp_path: Path) -> None:
    slow = Script(lines=((0.5, CONFIG),))  # never healthy, never logs the ready line
    spec = _liveness_spec(startup_timeout_s=60.0, restart=RestartPolicy(mode="no"))
    outcome = supervise_spec(tmp_path, spec, slow, stop_at=500)
    assert outcome.states == [STARTING, RUNNING, EXITED]
    (ended,) = outcome.of("exit")
    assert ended["class"] == "startup-timeout"
    assert ended["message"] == "not READY after 60 s (health.startup_timeout_s)"
    assert 60.0 < outcome.seconds(ended) <= 60.2
    assert ended["signal"] == "SIGTERM"


def test_a_startup_timeout_restarts_by_policy(tmp_path: Path) -> None:
    slow = Script(lines=((0.5, CONFIG),))
    spec = _liveness_spec(startup_timeout_s=30.0)
    outcome = supervise_spec(tmp_path, spec, slow, SERVES, stop_at=500)
    assert outcome.states[:5] == [STARTING, RUNNING, BACKOFF, STARTING, RUNNING]
    assert outcome.of("exit")[0]["class"] == "startup-timeout"


def test_the_received_snapshot_is_kept_beside_the_run(tmp_path: Path) -> None:
    outcome = supervise(tmp_path, SERVES, stop_at=10)
    (taken,) = outcome.of("received")
    snapshot = json.loads(Path(outcome.state["run_dir"], "received.json").read_text())
    assert snapshot["argv"] == ["python3", "-m", "sglang"]
    assert taken["exe"] == "/usr/bin/python3"
    assert Path(outcome.state["run_dir"], "received.json").stat().st_mode & 0o777 == 0o600


def test_the_backoff_of_a_very_long_crash_loop_stays_at_its_cap() -> None:
    policy = RestartPolicy(delay_s=5.0, multiplier=2.0, max_delay_s=300.0)
    assert policy.delay(1) == 5.0
    assert policy.delay(4) == 40.0
    assert policy.delay(5000) == 300.0  # 2 ** 4999 would overflow a float
