"""Follow a run's startup from its log and its state, until READY, dead or timed out.

The log is read over the transport from an offset (only the new bytes), the state from
``state.json`` directly (one read, no process started on the host): every ``POLL_S``.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

from orchestrator.commands.context import HostAgent
from orchestrator.commands.events import LogLine, Outcome, UpEvent
from orchestrator.errors import ConnectError, ExitCode, StartupTimeout
from orchestrator.fleet.client import WatchSilent
from orchestrator.fleet.protocol.inspect import InspectRequest
from orchestrator.fleet.protocol.watch import (
    Inspected,
    LogBytes,
    StateChanged,
    StatusChecked,
    decode_watch_event,
)
from orchestrator.model import Profile, RunState
from orchestrator.remote.agent.states import BACKOFF, READY, TERMINAL_STATES
from orchestrator.remote.agent.verdict import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    HUNG,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    LOST,
    MODEL_NOT_FOUND,
    NCCL,
    PORT_IN_USE,
    SPAWN_FAILED,
    STARTUP_TIMEOUT,
    restart_for,
)
from orchestrator.sglang.observe import LineSplitter, LogEvent, parse_line

POLL_S = 0.1
# How often up asks the host whether the supervisor is still the process it recorded: state.json
# alone cannot say that a supervisor died (kill -9, the OOM killer) and will never write again.
AGENT_CHECK_S = 0.5
# The agent enforces health.startup_timeout_s (and stops the server); up waits this much longer
# before giving up by itself, for the stop's grace and an agent too old to enforce it.
TIMEOUT_MARGIN_S = 10.0
TAIL_LINES = 30
EXPLAINING_LINES = 400  # kept from before the config line: SGLang explains its changes there
AFTER_LINES = 4000  # kept from after it: the pools' sizes, per rank, until READY

EXIT_CODES = {
    CONFIG_ERROR: ExitCode.CONFIG_ERROR,
    CUDA_OOM: ExitCode.CUDA_OOM,
    KILLED: ExitCode.KILLED,
    PORT_IN_USE: ExitCode.PORT_IN_USE,
    IMPORT_ERROR: ExitCode.IMPORT_ERROR,
    MODEL_NOT_FOUND: ExitCode.MODEL_NOT_FOUND,
    NCCL: ExitCode.NCCL,
    KERNEL_ERROR: ExitCode.KERNEL_ERROR,
    CRASHED: ExitCode.CRASHED,
    HUNG: ExitCode.HUNG,
    STARTUP_TIMEOUT: ExitCode.STARTUP_TIMEOUT,
    SPAWN_FAILED: ExitCode.SPAWN_FAILED,
    LOST: ExitCode.CRASHED,
}


GROUP_CLASS_PREFIX = "group-"  # the agent's classes of a group that did not form or fell apart


def exit_code_of(cls: str) -> ExitCode:
    """The exit code of a verdict's class (docs/exit-codes.md)."""
    if cls in EXIT_CODES:
        return EXIT_CODES[cls]
    return ExitCode.GROUP if cls.startswith(GROUP_CLASS_PREFIX) else ExitCode.CRASHED


@dataclass
class StartupLog:
    """What ``follow`` saw up to SGLang's ``server_args=`` line: the line and those before it
    (so that a crash right after it can be compared without another round trip)."""

    config_line: str | None = None
    before: list[str] = field(default_factory=list)
    after: list[str] = field(default_factory=list)  # to READY: SGLang's memory lines are here
    inspected: dict[str, Any] | None = None  # the agent's inspection, sent just before READY

    def add(self, line: str, event: LogEvent | None) -> None:
        if self.config_line is not None:
            if len(self.after) < AFTER_LINES:
                self.after.append(line)
            return
        if event is not None and event.kind == "config":
            self.config_line = line
        elif len(self.before) < EXPLAINING_LINES:
            self.before.append(line)


@dataclass(frozen=True)
class Clock:
    now: Callable[[], float]
    sleep: Callable[[float], None]


def follow_seconds(profile: Profile) -> float:
    """How long a startup is followed: the agent's own startup timeout, its stop's grace, and
    a margin for an agent too old to enforce it."""
    return profile.health.startup_timeout_s + profile.stop_timeout_s + TIMEOUT_MARGIN_S


def follow(
    agent: HostAgent,
    state: RunState,
    profile: Profile,
    clock: Clock,
    startup: StartupLog,
    *,
    events: Generator[dict[str, Any], None, None] | None = None,
    inspect: InspectRequest | None = None,
) -> Iterator[UpEvent]:
    """Stream a run's startup; the last event is its Outcome (or StartupTimeout is raised).

    The agent's ``watch`` says on one open channel what happens as it happens (the log's new
    bytes, each state change, a dead supervisor): a death reaches orch one one-way delay later,
    with no round trip per look. ``events``: that stream already open (``start --watch``);
    ``inspect``: what the watch is to inspect at READY (kept in ``startup.inspected``). Should
    the stream end without a verdict (a connection in trouble), orch looks itself, every
    POLL_S."""
    run_id = state.run_id
    if state.ready and state.state == READY:
        if events is not None:
            events.close()
        yield ready_outcome(state, profile)
        return
    log = agent.deployment.run_log(run_id) if run_id else None
    reader = _LogReader(agent, log, startup)
    deadline = clock.now() + follow_seconds(profile)
    if run_id is not None:
        if events is None:
            events = agent.watch(run_id, reader.offset, deadline - clock.now(), inspect)
        outcome = yield from _follow_stream(events, run_id, state, profile, clock, reader, deadline)
        if outcome is not None:
            yield outcome
            return
    yield from _follow_polling(agent, state, profile, clock, reader, deadline)


def _follow_stream(
    events: Generator[dict[str, Any], None, None],
    run_id: str,
    state: RunState,
    profile: Profile,
    clock: Clock,
    reader: _LogReader,
    deadline: float,
) -> Generator[UpEvent, None, Outcome | None]:
    """The startup from the agent's watch stream; None when it ended without a verdict."""
    current = state
    try:
        for line in events:
            event = decode_watch_event(line)
            if isinstance(event, Inspected):
                reader.startup.inspected = event.answer
            elif isinstance(event, LogBytes):
                yield from reader.feed(event.data)
            elif isinstance(event, StateChanged):
                current = event.state
                verdict = _verdict(current, run_id, profile)
                if verdict is not None and not verdict.ok:
                    reader.flush()  # the watcher sent the log's bytes before the state
                    verdict = dataclasses.replace(verdict, last_lines=tuple(reader.tail))
                if verdict is not None:
                    return verdict
            elif isinstance(event, StatusChecked):
                checked = event.state
                if not checked.agent_alive and checked.state not in TERMINAL_STATES:
                    reader.flush()
                    return supervisor_died(checked, profile, tuple(reader.tail))
            if clock.now() > deadline:
                _timed_out(profile, current, reader)
    except (WatchSilent, ConnectError):
        return None  # looked at directly from here on (a lost connection is said there)
    finally:
        events.close()
    return None


def _follow_polling(
    agent: HostAgent,
    state: RunState,
    profile: Profile,
    clock: Clock,
    reader: _LogReader,
    deadline: float,
) -> Iterator[UpEvent]:
    run_id = state.run_id
    next_check = clock.now() + AGENT_CHECK_S
    while True:
        yield from reader.read_new()
        current = agent.read_state() or state
        if clock.now() >= next_check and current.state not in TERMINAL_STATES:
            next_check = clock.now() + AGENT_CHECK_S
            checked = agent.status()
            if not checked.agent_alive and checked.state not in TERMINAL_STATES:
                yield from reader.read_new()
                reader.flush()
                yield supervisor_died(checked, profile, tuple(reader.tail))
                return
        verdict = _verdict(current, run_id, profile)
        if verdict is not None:
            if not verdict.ok:
                yield from reader.read_new()  # the last lines, before they are shown
                reader.flush()
                verdict = dataclasses.replace(verdict, last_lines=tuple(reader.tail))
            yield verdict
            return
        if clock.now() > deadline:
            _timed_out(profile, current, reader)
        clock.sleep(POLL_S)


def _verdict(current: RunState, run_id: str | None, profile: Profile) -> Outcome | None:
    """READY or the run's end, from the state the supervisor recorded; None: not yet. A
    failure's last lines are the caller's to add, once it has read the log to its end."""
    ended = current.last_exit if current.last_exit and current.last_exit.run_id == run_id else None
    if ended is not None:
        return failure_outcome(current, ended.cls, ended.message, ())
    if current.run_id == run_id and current.state == READY:
        return ready_outcome(current, profile)
    if current.state in TERMINAL_STATES:  # another run's end, the group's, the agent's error
        return failure_outcome(current, ended_class(current), current.message, ())
    return None


def ended_class(state: RunState) -> str:
    """The class of a deployment that ended without the followed run's exit: a launch group
    that never formed (or fell apart before a run) names it in its failure; else a crash."""
    failure = state.group.failure if state.group is not None else None
    if failure is not None and failure.cls.startswith(GROUP_CLASS_PREFIX):
        return failure.cls
    return CRASHED


def _timed_out(profile: Profile, current: RunState, reader: _LogReader) -> NoReturn:
    raise StartupTimeout(
        f"{profile.name} not ready after {profile.health.startup_timeout_s:g} s and its agent "
        f"did not end it (state {current.state}); it keeps running",
        tuple(reader.tail),
        f"orch logs {profile.name} -f to watch it, orch down {profile.name} to stop it",
    )


class _LogReader:
    """The run's log from an offset: new complete lines become events."""

    def __init__(self, agent: HostAgent, log: str | None, startup: StartupLog) -> None:
        self.agent = agent
        self.log = log
        self.startup = startup
        self.offset = 0
        self.splitter = LineSplitter()
        self.tail: deque[str] = deque(maxlen=TAIL_LINES)

    def read_new(self) -> Generator[UpEvent, None, None]:
        if self.log is None:
            return
        try:
            data = self.agent.transport.read(self.log, self.offset, 1 << 20)
        except FileNotFoundError:
            return
        yield from self.feed(data)

    def feed(self, data: bytes) -> Generator[UpEvent, None, None]:
        """New bytes of the log, from ``offset`` on."""
        self.offset += len(data)
        for line in self.splitter.feed(data):
            self.tail.append(line)
            event = parse_line(line)
            self.startup.add(line, event)
            if event is not None:
                yield LogLine(event)

    def flush(self) -> None:
        self.tail.extend(self.splitter.flush())


def ready_outcome(state: RunState, profile: Profile) -> Outcome:
    took = ""
    if state.ready_at is not None and state.started_at is not None:
        took = f" in {state.ready_at - state.started_at:.1f} s"
    return Outcome(
        ok=True,
        exit_code=ExitCode.OK,
        state=state,
        summary=f"READY{took}  {profile.name}  http://{profile.bind}:{profile.port}"
        f"  run {state.run_id}",
    )


def failure_outcome(
    state: RunState, cls: str, message: str, last_lines: tuple[str, ...]
) -> Outcome:
    hint: str | None
    ended = state.last_exit
    # The agent's restart verdict of this run (an agent before it: the class's own)
    if ended is not None and ended.cls == cls:
        helps, why = ended.restart_helps, ended.restart_why
    else:
        judged = restart_for(cls)
        helps, why = judged.helps, judged.why
    if not helps:
        hint = f"not restarted: {why}"
    elif state.state == BACKOFF:
        hint = f"the agent restarts it ({state.message}): {why}; orch status / orch down"
    else:
        hint = f"{state.message}: {why}" if state.message else why
    run = state.last_exit.run_id if state.last_exit else state.run_id
    return Outcome(
        ok=False,
        exit_code=exit_code_of(cls),
        state=state,
        summary=f"{cls}: {message} (run {run}, {state.state})",
        last_lines=last_lines,
        hint=hint,
    )


def supervisor_died(state: RunState, profile: Profile, last_lines: tuple[str, ...]) -> Outcome:
    """The supervisor is gone (its recorded identity matches no process) and recorded no end."""
    run = state.run_id or "?"
    if state.unsupervised:
        summary = (
            f"the supervisor died during startup (run {run}, {state.recorded_state}); the server "
            f"(pid {state.pid}) runs on unsupervised, its output lost"
        )
        hint = f"orch up {profile.name} re-attaches a supervisor; orch down {profile.name} stops it"
    else:
        summary = f"the supervisor died during startup (run {run}) and its server is gone"
        hint = f"its agent.log may say why; orch down {profile.name} records the end"
    return Outcome(
        ok=False,
        exit_code=ExitCode.SUPERVISOR,
        state=state,
        summary=summary,
        last_lines=last_lines,
        hint=hint,
    )
