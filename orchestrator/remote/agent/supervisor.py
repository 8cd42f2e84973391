"""The supervisor: one deployment's server run until stopped, as a state machine.

It starts the server from an argv list in its own process group with its output piped into
``runs/<run-id>/server.log`` (rotated at a size cap; runs never share a log), watches for
SGLang's config line, ready line and ``/health``, classifies every exit, restarts by policy
(systemd's on-failure/always/no, exponential backoff, start limit; never what repeats at this
configuration), and stops with SIGTERM to the group, a grace period, SIGKILL, then a sweep for
processes of the run that escaped the group (SGLang's schedulers can be reparented to PID 1 and
keep GPU memory). Every state change goes through ``change_state``, checked against the table
(states.py); what it records goes through its journal (journal.py). Its time and its contacts
with the world are injected (world.py): its logic runs in-process in tests.

Its Role says when it runs its server and is asked what only it knows while the server runs:
one server alone (Alone, here: restarted by the policy), or one rank of a launch group
(group/coordinator.py, group/member.py; roles.py picks).
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections import deque
from typing import Any

from .classify import exit_record, run_ending
from .disk_watch import DiskWatch
from .files import (
    Paths,
    last_run_seq,
    no_room,
    os_error_text,
    read_bytes,
    read_json,
    write_json_atomic,
    write_private,
)
from .gateway_duty import GatewayDuty
from .identity import DEPLOYMENT_ENV, IDENTITY_CMDLINE_ITEMS, RUN_ID_ENV
from .journal import Journal
from .liveness import Liveness
from .load_watch import LoadWatch
from .output import LogSink, OutputWatcher
from .protocol import CONFIG_FILE, RECEIVED_FILE
from .record import AgentState
from .role import Role
from .spec import Spec
from .states import (
    BACKOFF,
    EXITED,
    FATAL,
    READY,
    RUNNING,
    STARTING,
    STOPPING,
    TERMINAL_STATES,
    UNHEALTHY,
    IllegalTransition,
    check_transition,
)
from .verdict import CRASHED, HUNG, SPAWN_FAILED, STARTUP_TIMEOUT, STOPPED, ExitVerdict
from .world import Clock, Descendants, RealClock, RealWorld, ServerProcess, World, spawn_failure


class Alone:
    """One server on one node: started, restarted by the policy, until stopped or final."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._supervisor = supervisor

    def run(self, adopted: ServerProcess | None) -> int:
        supervisor = self._supervisor
        consecutive_failures = 0
        while not supervisor.stop_requested.is_set():
            supervisor.note_start()
            returncode, verdict, was_ready = supervisor.run_once(adopted)
            adopted = None
            if supervisor.stop_requested.is_set():
                break
            consecutive_failures = 1 if was_ready else consecutive_failures + 1
            delay = supervisor.apply_policy(verdict, returncode, consecutive_failures)
            if delay is None:
                return 0
            if supervisor.clock.wait(supervisor.stop_requested, delay):
                break
            supervisor.update(restarts=supervisor.record.restarts + 1, next_start_at=None)
        return supervisor.stopped()

    def look(self, watcher: OutputWatcher | None) -> ExitVerdict | None:
        return None

    def ready_evidence(self, watcher: OutputWatcher | None) -> bool:
        return True

    def why_stopped(self) -> str:
        return "stopped on request"

    def stop_grace_s(self) -> float | None:
        return None

    def view(self) -> dict[str, Any] | None:
        return None


class Supervisor:
    """Runs one deployment's server until stopped. Its time (``clock``) and its contacts with
    the world (``world``: spawn, health probe, signals, sweep) are injected, real by default,
    so that its logic runs in-process in tests. Every state change goes through
    ``change_state``, checked against TRANSITIONS."""

    def __init__(
        self,
        spec: Spec,
        paths: Paths,
        *,
        clock: Clock | None = None,
        world: World | None = None,
    ) -> None:
        self.spec = spec
        self.paths = paths
        self.clock: Clock = clock if clock is not None else RealClock()
        self.world: World = world if world is not None else RealWorld(self.clock)
        self.stop_requested = threading.Event()
        self.stop_grace_s: float | None = None  # this stop's grace, when `stop` gave one
        record = AgentState(
            deployment=spec.deployment,
            port=spec.port,
            meta=spec.meta,
            agent_pid=os.getpid(),
            agent=self.world.identity(os.getpid()),  # checked before any "alive" or signal
            state_since=self.clock.wall(),
        )
        self.journal = Journal(paths, record, self.clock)
        self.role: Role = Alone(self)
        # out of its gateway after a failure, back in after a restart
        self.gateway = GatewayDuty.of(spec.gateway, self)
        if self.gateway is not None:
            record.update({"gateway": self.gateway.view()})
        self._runs = 0  # runs watched: the first one's registration is orch's, after its checks
        self.exit_noticed: float | None = None  # monotonic: when _watch saw its server end
        self.disk_watch = DiskWatch(
            self.clock.monotonic,
            self.clock.wall,
            lambda: self.record.disk,
            lambda disk: self.update(disk=disk),
            lambda: self.journal.save_if_unsaved(),
        )
        self._start_times: deque[float] = deque(maxlen=max(spec.restart.start_limit, 1) * 2)
        self._run_seq = last_run_seq(paths.runs)
        self._received_key: tuple[Any, ...] | None = None
        self.load_watch = LoadWatch.of(self)  # /v1/loads while READY: state.json's load

    @property
    def record(self) -> AgentState:
        return self.journal.record

    def take_spec(self, spec: Spec) -> None:
        """A reconfigure's spec (reload.py): its policies at once, its argv/env at the next
        start."""
        self._start_times = deque(self._start_times, maxlen=max(spec.restart.start_limit, 1) * 2)
        self.spec = spec

    def take_role(self, role: Role) -> None:
        """Run as ``role`` (before ``run``); its view is in the first state.json written."""
        self.role = role
        view = role.view()
        if view is not None:
            self.record.update({"group": view})

    def resume(self, recorded: dict[str, Any]) -> None:
        """Continue from the state a dead supervisor recorded (``adopt``, or ``stop`` finishing
        its duty): its state is this one's starting point, as STARTING is a new one's."""
        own = self.record
        record = AgentState.from_json(recorded)
        record.update(
            {
                "protocol": own.protocol,
                "agent_pid": own.agent_pid,
                "agent": own.agent,
                "meta": own.meta,
                "identity_recorded": True,
            }
        )
        self.journal.record = record
        self.load_watch.last = record.extra.get("load")  # kept when a first read fails

    # -- what it records --

    def change_state(self, new: str, **fields: Any) -> None:
        """The one way to change ``state``: refuses what TRANSITIONS does not allow, stamps
        ``state_since``, writes state.json and records the change in events.jsonl."""
        old = self.record.state
        check_transition(old, new)
        self.journal.write(dict(fields, state=new, state_since=self.clock.wall()))
        self.event("state", **{"from": old, "to": new})

    def update(self, **fields: Any) -> None:
        """Fields other than the state itself."""
        if "state" in fields or "state_since" in fields:
            raise IllegalTransition("the state changes through change_state only")
        self.journal.write(fields)

    def event(self, kind: str, **details: Any) -> None:
        self.journal.event(kind, **details)

    def fail(self, message: str) -> None:
        """The agent itself failed: FATAL, unless the state was final already."""
        if self.record.state not in TERMINAL_STATES:
            self.change_state(FATAL, message=message)

    # -- running the server --

    def run(self, adopted: ServerProcess | None = None) -> int:
        """Start the server (or watch ``adopted``, a running one taken over), restart it by
        policy, until stopped or final: as its role runs it."""
        return self.role.run(adopted)

    def note_start(self) -> None:
        """A start, for the start limit."""
        self._start_times.append(self.clock.monotonic())

    def stopped(self) -> int:
        """Stopped on request: EXITED."""
        self.change_state(EXITED, pid=None, pgid=None, message="stopped", next_start_at=None)
        self.event("stopped")
        return 0

    def apply_policy(
        self, verdict: ExitVerdict, returncode: int, consecutive_failures: int, cause: str = ""
    ) -> float | None:
        """The restart policy after a run that ended on its own: FATAL (the restart verdict says
        it repeats at this configuration; the start limit) or EXITED (the policy does not restart
        it), recorded, and None; or BACKOFF and the delay before the next start. ``cause`` ends
        each message (a group's failed rank)."""
        if verdict.deterministic:
            message = f"{verdict.cls}: not restarting ({verdict.restart_why}){cause}"
            self.change_state(FATAL, message=message)
            self.event("fatal", reason=verdict.cls)
            return None
        if not self.spec.restart.wants_restart(verdict, returncode):
            message = f"exited ({verdict.cls}); restart={self.spec.restart.mode}{cause}"
            self.change_state(EXITED, message=message)
            return None
        if self.spec.restart.start_limit_hit(self._start_times, self.clock.monotonic()):
            message = (
                f"{verdict.cls}: start limit hit ({self.spec.restart.start_limit} starts "
                f"within {self.spec.restart.start_limit_interval_s:g} s)"
            )
            self.change_state(FATAL, message=message + cause, next_start_at=None)
            self.event("fatal", reason=message)
            return None
        delay = self.spec.restart.delay(consecutive_failures)
        self.change_state(
            BACKOFF,
            next_start_at=self.clock.wall() + delay,
            message=f"{verdict.cls}: restarting in {delay:g} s{cause}",
        )
        self.event("backoff", delay_s=delay, failures=consecutive_failures)
        return delay

    def _new_run_id(self) -> tuple[str, str]:
        self._run_seq += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock.wall()))
        run_id = f"{self._run_seq:04d}-{stamp}"
        return run_id, os.path.join(self.paths.runs, run_id)

    def _make_run_dir(self, run_dir: str) -> None:
        """The run's directory with its copies of the launch script and the spec (kept for
        people and diff-effective); a copy that finds no room is left out, not the run."""
        os.makedirs(run_dir, mode=0o700, exist_ok=False)
        copies = [("spec.json", self.paths.spec)]
        if os.path.exists(self.paths.launch_script):
            copies.insert(0, ("launch.sh", self.paths.launch_script))
        for name, source in copies:
            target = os.path.join(run_dir, name)
            try:
                write_private(target, read_bytes(source))
            except OSError as exc:
                if not no_room(exc):
                    raise
                with contextlib.suppress(OSError):
                    os.unlink(target)  # never a copy cut short
                self.journal.disk_trouble(exc, "failed_writes")

    def run_once(self, adopted: ServerProcess | None = None) -> tuple[int, ExitVerdict, bool]:
        self._runs += 1
        if adopted is not None:
            return self._watch(adopted, None)
        spawned = self._spawn()
        if isinstance(spawned, ExitVerdict):
            return 127, spawned, False
        return self._watch(*spawned)

    def _spawn(self) -> tuple[ServerProcess, OutputWatcher] | ExitVerdict:
        spec = self.spec  # one spec for the whole start: a reconfigure's lands between two
        run_id, run_dir = self._new_run_id()
        try:
            self._make_run_dir(run_dir)
        except OSError as exc:
            if not no_room(exc):
                raise
            # A full disk without room for a directory (ext4 needs a block): a run that could
            # not start, restarted by policy as a crash (never deterministic: room comes back).
            why = f"cannot create the run's directory {run_dir}: {os_error_text(exc)}"
            self.journal.disk_trouble(exc, "failed_writes")
            self.update(
                run_id=run_id,
                run_dir=None,
                log=None,
                started_at=self.clock.wall(),
                starts=self.record.starts + 1,
                server=None,
                message=why,
            )
            verdict = ExitVerdict(CRASHED, why)
            self.record_exit(run_id, 127, verdict)
            return verdict
        log_path = os.path.join(run_dir, "server.log")
        env = dict(os.environ)
        env.update(spec.env)
        env[RUN_ID_ENV] = run_id
        env[DEPLOYMENT_ENV] = self.paths.root
        sink = LogSink(log_path, spec.log_max_bytes, spec.log_keep)
        watcher = OutputWatcher(sink, config_path=os.path.join(run_dir, CONFIG_FILE))
        self._received_key = None
        try:
            process = self.world.spawn(spec.argv, spec.cwd or run_dir, env, watcher)
        except OSError as exc:
            why = spawn_failure(spec.argv, exc)
            sink.write(f"orch agent: {why}\n".encode())
            sink.close()
            # The run exists (its directory and log say why): up finds its verdict by run id.
            self.update(
                run_id=run_id,
                run_dir=run_dir,
                log=log_path,
                started_at=self.clock.wall(),
                starts=self.record.starts + 1,
                server=None,
                message=why,
            )
            verdict = ExitVerdict(SPAWN_FAILED, why)
            self.record_exit(run_id, 127, verdict)
            return verdict
        spawned = {
            "pid": process.pid,
            "pgid": process.pid,
            "server": self.world.identity(process.pid),
            "run_id": run_id,
            "run_dir": run_dir,
            "log": log_path,
            "received": None,
            "starts": self.record.starts + 1,
            "ready": False,
            "health_failures": 0,
            "adopted": False,
            "output_lost": False,
            "started_at": self.clock.wall(),
            "started_mono": self.clock.monotonic(),
            "ready_at": None,
            "ready_by": None,
            "message": "",
            "memory_loads": None,  # the previous run's figures are not this one's
            "memory_loads_error": None,
        }
        if self.record.state == STARTING:  # the first start: the supervisor began there
            self.update(**spawned)
        else:
            self.change_state(STARTING, **spawned)
        self.event("start", run_id=run_id, pid=process.pid)
        return process, watcher

    def _watch(
        self, process: ServerProcess, watcher: OutputWatcher | None
    ) -> tuple[int, ExitVerdict, bool]:
        """Until the server ends: RUNNING at its config line, READY on /health, its liveness
        after READY, the startup timeout, a stop request. ``watcher`` is None for an adopted
        server (its output went with the supervisor that died)."""
        run_id = str(self.record.run_id)
        spec = self.spec
        started = self.clock.monotonic()
        if watcher is not None and self.record.started_mono is not None:
            started = self.record.started_mono  # since the spawn, not since this look began
        past_config = watcher is None and self.record.state != STARTING
        tracked = Descendants(process.pid, self.clock, self.world)
        next_health = started if not self.record.ready else started + spec.health_interval_s
        probe_timeout = min(max(spec.health_interval_s, 0.2), 5.0)  # a probe never outlasts
        ready_line_at: float | None = None  # the interval: detection in interval x failures
        liveness = Liveness(spec.health_failures)
        ended_by: ExitVerdict | None = None
        while process.poll() is None:
            spec = self.spec  # a reconfigure's health policy applies at once
            if self.stop_requested.is_set():
                self._stop_process(process, tracked)
                break
            interrupt = self.role.look(watcher)
            if interrupt is not None:  # the group's: its ranks are told, this one stops now
                self.terminate(process, tracked)
                ended_by = interrupt
                break
            saw_config = past_config or (watcher is not None and watcher.saw_config_line)
            if watcher is not None and not self.record.ready:
                self._note_received(process.pid)
            if self.record.state == STARTING and saw_config:
                self.change_state(RUNNING)
            now = self.clock.monotonic()
            if not self.record.ready:
                # READY when /health answers 200 once SGLang has accepted its configuration.
                # The ready line alone is never enough (with --skip-server-warmup SGLang logs
                # it before uvicorn binds the port; a hung server may have logged it): it only
                # makes the checks frequent. /health never answering is a startup timeout.
                healthy = False
                if watcher is not None and watcher.saw_ready_line and ready_line_at is None:
                    ready_line_at = now
                    next_health = now
                if now >= next_health and saw_config and self.role.ready_evidence(watcher):
                    healthy = self.world.health_ok(
                        spec.health_host, spec.port, spec.health_endpoint
                    )
                    fast = ready_line_at is not None
                    next_health = now + (0.1 if fast else min(spec.health_interval_s, 1.0))
                if healthy:
                    self.change_state(
                        READY, ready=True, ready_at=self.clock.wall(), ready_by="health"
                    )
                    self.event("ready", run_id=run_id)
                    # what the server says of its memory, once: the pools do not change after
                    # READY, and a status call never waits on the server for them
                    self.update(**self.world.memory_loads(spec.health_host, spec.port))
                    if self.gateway is not None and self._runs > 1:
                        self.gateway.bring_back(run_id)  # a restart of ours: back in
                    next_health = self.clock.monotonic() + spec.health_interval_s
                    liveness.ready(watcher.batch_lines if watcher is not None else None)
                elif now - started > spec.startup_timeout_s:
                    why = f"not READY after {spec.startup_timeout_s:g} s (health.startup_timeout_s)"
                    ended_by = self._give_up(process, tracked, STARTUP_TIMEOUT, why)
                    break
            elif now >= next_health:  # liveness after READY (liveness.py)
                next_health = now + spec.health_interval_s
                batches = watcher.batch_lines if watcher is not None else None
                probe = liveness.probe(
                    self.world.health_ok(
                        spec.health_host, spec.port, spec.health_endpoint, probe_timeout
                    ),
                    batches,
                )
                if probe.excused:
                    self.event("health_excused", run_id=run_id, why="batches logged")
                if probe.failures_changed:
                    self.update(health_failures=probe.failures)
                if probe.unhealthy:
                    why = (
                        f"{spec.health_endpoint} failed {probe.failures} times in a row "
                        f"({spec.health_interval_s:g} s apart) after READY"
                    )
                    self.change_state(UNHEALTHY, message=f"{why}: stopping it")
                    self.event("unhealthy", run_id=run_id, failures=probe.failures)
                    ended_by = self._give_up(process, tracked, HUNG, f"{why}: stopped")
                    break
            tracked.refresh()
            self.load_watch.look(now, self.record.state == READY)
            self.disk_watch.look(watcher)
            if self.gateway is not None:
                self.gateway.tick()
            self.clock.wait(process.ended, 0.05)  # a death wakes it at once
        self.exit_noticed = self.clock.monotonic()
        if self.gateway is not None:
            self.gateway.cancel()
            if not self.stop_requested.is_set():  # a stop's take-out is orch's (orch down)
                self.gateway.take_out(run_id)  # before the sweep and the restart
        returncode = process.wait()
        # Children that outlive the server hold its output pipe open: give the last lines a
        # moment, give the verdict at once, then sweep (which closes the pipe for good).
        process.drain(0.2)
        was_ready = bool(self.record.ready)
        verdict = run_ending(
            returncode,
            list(watcher.tail) if watcher is not None else None,
            stopped=(
                ExitVerdict(STOPPED, self.role.why_stopped())
                if self.stop_requested.is_set()
                else None
            ),
            ended_by=ended_by,
            saw_config_line=watcher is not None and watcher.saw_config_line,
            was_ready=was_ready,
        )
        self.record_exit(run_id, returncode, verdict)
        swept = self._sweep(run_id, tracked)
        process.drain(5.0)
        if watcher is not None:  # the run's dropped output counts on in the supervisor's total
            self.disk_watch.run_ended(watcher)
        if swept:
            last_exit = dict(self.record.last_exit or {}, swept_pids=swept)
            self.update(last_exit=last_exit)
            self.event("swept", run_id=run_id, pids=swept)
        return returncode, verdict, was_ready

    def _note_received(self, pid: int) -> None:
        """Keep what the server was exec'd with (``received.json`` in its run directory, 0600):
        its command line and, of its environment, the names the spec sets. Taken again when
        the program changes (a wrapper that execs the server), until READY; diff-effective
        compares it when the server is gone."""
        facts = self.world.received(pid, sorted(self.spec.env))
        if facts is None:
            return
        key = (facts.get("exe"), tuple(facts.get("argv") or ()))
        if key == self._received_key:
            return
        path = os.path.join(str(self.record.run_dir), RECEIVED_FILE)
        document = dict(facts, pid=pid, run_id=self.record.run_id, at=self.clock.wall())
        try:
            write_json_atomic(path, document, 0o600)
        except OSError as exc:
            if not no_room(exc):
                raise
            if self._received_key is None:  # counted once per run: it is tried again each look
                self.journal.disk_trouble(exc, "failed_writes")
                self._received_key = ()
            return
        self._received_key = key
        server = dict(self.record.server or {"pid": pid})
        server.update(exe=facts.get("exe"), cmdline=list(key[1])[:IDENTITY_CMDLINE_ITEMS])
        self.update(received=path, server=server)
        self.event("received", run_id=self.record.run_id, exe=facts.get("exe"))

    def record_exit(self, run_id: str, returncode: int, verdict: ExitVerdict) -> None:
        last_exit = exit_record(
            run_id, returncode, verdict, at=self.clock.wall(), was_ready=bool(self.record.ready)
        )
        self.update(pid=None, server=None, ready=False, last_exit=last_exit)
        self.event("exit", **last_exit)

    def _signal(self, process: ServerProcess, sig: int) -> None:
        """Signal the server's group while it is still ours: a child not yet reaped (its pid
        cannot be reused), or an adopted server whose identity still matches."""
        if process.poll() is None:
            self.world.signal_group(process.pid, sig)

    def terminate(self, process: ServerProcess, tracked: Descendants) -> None:
        """SIGTERM to the group (and SIGCONT: a stopped process never sees its SIGTERM), the
        grace, then SIGKILL."""
        self._signal(process, signal.SIGTERM)
        self._signal(process, signal.SIGCONT)
        deadline = self.clock.monotonic() + self._stop_grace_s()
        while process.poll() is None and self.clock.monotonic() < deadline:
            tracked.refresh()
            self.clock.sleep(0.05)
        self._signal(process, signal.SIGKILL)
        process.wait()

    def _stop_process(self, process: ServerProcess, tracked: Descendants) -> None:
        self.change_state(STOPPING, message="stopping")
        request = read_json(self.paths.stop_request)  # `orch down --timeout S`
        if request is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.paths.stop_request)
            grace = request.get("grace_s")
            if isinstance(grace, (int, float)) and 0 <= grace < 366 * 86400:
                self.stop_grace_s = float(grace)
        self.terminate(process, tracked)

    def _give_up(
        self, process: ServerProcess, tracked: Descendants, cls: str, why: str
    ) -> ExitVerdict:
        """The supervisor ends the server itself (hung, or not READY in time): its verdict."""
        if self.record.state != UNHEALTHY:
            self.update(message=f"{cls}: {why}; stopping it")
        self.event(cls, run_id=self.record.run_id, message=why)
        if self.gateway is not None:  # out before its stop grace, not after
            self.gateway.take_out(str(self.record.run_id))
        self.terminate(process, tracked)
        return ExitVerdict(cls, why)

    def _stop_grace_s(self) -> float:
        """SIGTERM -> SIGKILL: this stop's (``stop --timeout``), the role's (a group member's:
        SGLang's workers ignore SIGTERM from 0.5.21 on, they wait for rank 0's shutdown
        broadcast), or the spec's."""
        if self.stop_grace_s is not None:
            return self.stop_grace_s
        grace = self.role.stop_grace_s()
        return self.spec.stop_timeout_s if grace is None else grace

    def _sweep(self, run_id: str, tracked: Descendants) -> list[int]:
        """Kill what is left of the run: the group, then anything carrying the run's marker or
        seen as a descendant (reparented schedulers keep GPU memory otherwise)."""
        pgid = self.record.pgid
        if pgid:
            self.world.signal_group(int(pgid), signal.SIGKILL)
            self.update(pgid=None)
        return self.world.sweep(self.paths.root, run_id, tracked.seen)

    # -- launch groups --
