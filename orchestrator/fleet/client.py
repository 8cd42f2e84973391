"""The agent's client: push the agent and the planning probe (each ONE bundle, fleet/bundle.py,
run through the checking bootstrap, fleet/bootstrap.py), call them, and hand back every answer
decoded (``protocol/``, each command's request beside its decoder) into a frozen value.

Everything crosses to the host as an argv (``<python> -c BOOTSTRAP <agent-<digest>.pyz> <sha256>
<command> --dir ...``) and comes
back as one JSON document on the last line of stdout, or as JSON lines while it happens (a
stream). The run spec, which holds the server's environment (secrets included), travels on the
command's stdin (the agent writes it 0600) and never appears in an argv.

Round trips decide how orch feels on a host 20-150 ms away, so ``up`` asks in two commands on
one connection: ``probe --dir`` (the deployment's status and the host's facts), then ``start
--watch`` (the supervisor started, the startup streamed on the same channel, the inspection at
READY ahead of the READY state).
"""

from __future__ import annotations

import contextlib
import functools
import json
import posixpath
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.effective.plan import PlanAnswer
from orchestrator.effective.verify import Observation
from orchestrator.errors import (
    OrchError,
    PreflightError,
    ProgramNotFound,
    RemoteCommandError,
    SupervisorError,
)
from orchestrator.fleet.bootstrap import (
    BOOT_CHANGED,
    BOOT_MISSING,
    BOOT_UNSAFE,
    bootstrap_argv,
    carrying,
)
from orchestrator.fleet.bundle import Bundle, build
from orchestrator.fleet.held_lock import HeldLock, await_hold, exit_status
from orchestrator.fleet.protocol.common import Request, last_json_line
from orchestrator.fleet.protocol.hold import hold_args
from orchestrator.fleet.protocol.inspect import (
    InspectRequest,
    LastRun,
    decode_inspect,
    inspect_request,
)
from orchestrator.fleet.protocol.plan import decode_plan_answer, plan_request
from orchestrator.fleet.protocol.probe import HostFacts, decode_probe_reply, probe_request
from orchestrator.fleet.protocol.reach import (
    ProbeAnswer,
    decode_probe_answer,
    listen_request,
    reach_request,
)
from orchestrator.fleet.protocol.reconfigure import (
    LiveChanges,
    ReconfigureReply,
    decode_reconfigure,
    reconfigure_request,
)
from orchestrator.fleet.protocol.runs import RunInfo, RunsReply, decode_runs_reply, runs_request
from orchestrator.fleet.protocol.start import (
    StartReply,
    adopt_request,
    decode_start,
    start_previous_request,
    start_request,
    start_stdin,
    start_watch_args,
)
from orchestrator.fleet.protocol.status import decode_state, status_request
from orchestrator.fleet.protocol.stop import StopReply, decode_stop, stop_request
from orchestrator.fleet.protocol.survey import HostSurvey, decode_survey, survey_request
from orchestrator.fleet.protocol.tail import TailReply, decode_tail, tail_request
from orchestrator.fleet.protocol.watch import watch_args
from orchestrator.model import Host, LockHolder, RunState
from orchestrator.remote.agent.protocol import PROTOCOL
from orchestrator.transport import Stream, Transport, expand_home


class PendingStart:
    """``agent start --watch`` opened before its spec is known (``Agent.open_start``)."""

    def __init__(self, agent: Agent, args: tuple[str, ...]) -> None:
        self._agent = agent
        self._args = args
        self._opened: Stream | None = None
        self._done = False
        deployment = agent.deployment
        self._argv = bootstrap_argv(
            deployment.python, deployment.agent_path, agent_bundle().sha256, args, stdin_first=True
        )
        self._thread = threading.Thread(target=self._open, name="orch-open-start", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        with contextlib.suppress(OrchError, OSError):  # send() starts it again and says why
            self._opened = self._agent.transport.stream(self._argv, hold_stdin=True)

    def send(
        self, spec: Mapping[str, Any], launch_script: str
    ) -> tuple[StartReply, Generator[dict[str, Any], None, None] | None]:
        """Start: the spec and the launch script on the waiting command's stdin."""
        self._thread.join()
        self._done = True
        bundle = start_stdin(spec, launch_script)
        opened = self._opened
        if opened is not None:
            opened.finish_stdin(bundle)
        events = self._agent._stream(self._args, bundle, opened=opened, stdin_first=True)
        return self._agent._started(events)

    def cancel(self) -> None:
        """Called off: an empty stdin, on which the bootstrap ends having done nothing."""
        if self._done:
            return
        self._done = True
        self._thread.join()
        if self._opened is not None:
            self._opened.finish_stdin(b"")
            self._opened.close()


WATCH_SILENCE_S = 5.0  # the watcher beats every second: this long without a line, it is lost


class WatchSilent(Exception):
    """The agent's watch stream went silent: follow falls back to looking itself."""


SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the directory that holds orchestrator/


@functools.cache
@functools.cache
def agent_bundle() -> Bundle:
    """The agent as it is pushed: ONE deterministic bundle, named by its digest."""
    return build(SOURCE_ROOT, "agent", "orchestrator.remote.agent", ("orchestrator.remote.host",))


@functools.cache
def probe_bundle() -> Bundle:
    """orch plan's probe (remote/probe, with the host facts it reads: remote/host)."""
    return build(SOURCE_ROOT, "probe", "orchestrator.remote.probe", ("orchestrator.remote.host",))


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
        return posixpath.join(self.workdir, ".orch", agent_bundle().file_name)

    @property
    def probe_path(self) -> str:
        return posixpath.join(self.workdir, ".orch", probe_bundle().file_name)

    @property
    def plan_cache_dir(self) -> str:
        """The probe's cached answers for this deployment (remote/probe/cache.py)."""
        return posixpath.join(self.workdir, ".orch", "plan-cache", self.name)

    @property
    def state_path(self) -> str:
        return posixpath.join(self.dir, "state.json")

    def run_log(self, run_id: str) -> str:
        return posixpath.join(self.dir, "runs", run_id, "server.log")


def locate(transport: Transport, name: str, python: str) -> Deployment:
    host = transport.host
    workdir = expand_home(host.workdir, transport.home()) if "~" in host.workdir else host.workdir
    return Deployment(name=name, host=host, python=python, workdir=workdir)


# -- the client ------------------------------------------------------------------------------------


class Agent:
    """Calls into the agent (and the planning probe) on the deployment's host."""

    def __init__(self, transport: Transport, deployment: Deployment) -> None:
        self.transport = transport
        self.deployment = deployment

    def _missing_python(self, exc: ProgramNotFound) -> PreflightError:
        host = self.deployment.host.name
        return PreflightError(
            exc.message,
            f"set hosts.{host}.python to the interpreter of the venv that holds sglang",
        )

    def _run(self, argv: Sequence[str], stdin: bytes | None, timeout: float) -> Any:
        try:
            return self.transport.run(argv, stdin=stdin, timeout=timeout)
        except ProgramNotFound as exc:
            raise self._missing_python(exc) from exc

    def run_pushed(
        self,
        bundle: Bundle,
        path: str,
        args: Sequence[str],
        timeout: float,
        stdin: bytes | None = None,
        *,
        carry: bool = False,
        no_write: bool = False,
    ) -> Any:
        """Run a pushed bundle through the checking bootstrap. Optimistic: when the host does
        not have this version, the same command again, carrying the bundle on its stdin (one
        more command, once per orch version and host; no file transfer). ``carry``: carry it
        on the first try (57 KB, where a round trip costs more). ``no_write``: nothing is
        written on the host (the bootstrap's ``--no-write``): a bundle the host lacks, or holds
        in another content, is carried and run from memory, never written or replaced."""
        argv = bootstrap_argv(self.deployment.python, path, bundle.sha256, args, no_write=no_write)
        if carry:
            result = self._run(*carrying(argv, bundle.data, stdin), timeout)
        else:
            result = self._run(argv, stdin, timeout)
        if result.returncode == BOOT_MISSING or (no_write and result.returncode == BOOT_CHANGED):
            result = self._run(*carrying(argv, bundle.data, stdin), timeout)
        if result.returncode == BOOT_CHANGED and not no_write:  # not what orch pushed: replace
            self.transport.put(bundle.data, path, 0o600)
            result = self._run(argv, stdin, timeout)
        if result.returncode == BOOT_UNSAFE:
            raise self._unsafe(result.stderr)
        return result

    def _unsafe(self, stderr: bytes) -> PreflightError:
        why = (stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        return PreflightError(
            f"refusing to run orch's files on {self.deployment.host.name}: "
            + why.removeprefix("orch-bootstrap: "),
            f"hosts.{self.deployment.host.name}.workdir must be a directory only you can "
            "write (chmod go-w; chown to the SSH user)",
        )

    def watch(
        self, run_id: str, offset: int, seconds: float, inspect: InspectRequest | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """The agent's ``watch`` stream for one run (``agent watch``): each event as it
        happens, on one channel. Ends with the stream; WatchSilent when the host said nothing
        for WATCH_SILENCE_S (the watcher beats every second: the connection is in trouble)."""
        return self._stream(watch_args(self.deployment.dir, run_id, offset, seconds, inspect))

    def open_start(self, seconds: float, inspect: InspectRequest | None = None) -> PendingStart:
        """``start`` and ``watch`` in one command (``agent start --watch``), its channel
        opened now, on a thread, while orch still checks the launch; ``PendingStart.send``
        gives it the spec, ``cancel`` calls it off (the agent then does nothing). The opening,
        and sshd's opening of the channel's window for stdin, overlap the probe's round trips."""
        return PendingStart(self, start_watch_args(self.deployment.dir, seconds, inspect))

    def _started(
        self, events: Generator[dict[str, Any], None, None]
    ) -> tuple[StartReply, Generator[dict[str, Any], None, None] | None]:
        """The supervisor's answer, then, when it started a run, that run's startup streamed on
        the same channel (None when it did not)."""
        first = next(events, None)
        if first is not None and isinstance(first.get("start"), dict):
            return decode_start(first["start"]), events
        events.close()
        if first is None:
            raise SupervisorError(
                f"agent start said nothing on {self.deployment.host.name}",
                f"the agent's own log: {posixpath.join(self.deployment.dir, 'agent.log')}",
            )
        return decode_start(first), None  # refused: no run to follow

    def hold(
        self,
        holder: LockHolder,
        wait_s: float,
        on_wait: Callable[[LockHolder], None] | None = None,
    ) -> HeldLock:
        """The deployment's operation lock (``agent hold``), waiting up to ``wait_s`` for
        another holder to let go (``on_wait`` told once who it is); Locked naming the holder
        when it does not. One command on the connection, its stdin left open: the lock is
        held while it is (``HeldLock.release``)."""
        deployment = self.deployment
        path = deployment.agent_path
        args = hold_args(deployment.workdir, deployment.name, holder, wait_s)
        plain = bootstrap_argv(deployment.python, path, agent_bundle().sha256, args)
        argv, stdin = plain, b""
        for attempt in (1, 2):
            try:
                stream = self.transport.stream(argv, stdin=stdin or None, hold_stdin=True)
            except ProgramNotFound as exc:
                raise self._missing_python(exc) from exc
            host, log = deployment.host.name, posixpath.join(deployment.dir, "agent.log")
            try:
                held = await_hold(stream, deployment.name, host, log, wait_s, on_wait)
            except BaseException:
                stream.close()
                raise
            if held is not None:
                return HeldLock(stream, deployment.name, host, held.generation)
            code, stderr = exit_status(stream), stream.stderr
            stream.close()
            if code == BOOT_UNSAFE:
                raise self._unsafe(stderr)
            if code == BOOT_MISSING and attempt == 1:
                # this orch's agent is not on the host yet: the hold again, carrying it on its
                # stdin (written there by the bootstrap, as run_pushed does; once per orch
                # version and host), the stdin then held open as before
                argv, stdin = carrying(plain, agent_bundle().data, None)
                continue
            if code == BOOT_CHANGED and attempt == 1:  # not what orch pushed: replaced
                self.transport.put(agent_bundle().data, path, 0o600)
                continue
            raise self._failed("hold", code or 0, stderr)
        raise SupervisorError(f"agent hold did not start on {deployment.host.name}")  # unreached

    def _stream(
        self,
        args: Sequence[str],
        stdin: bytes | None = None,
        *,
        opened: Stream | None = None,
        stdin_first: bool = False,
    ) -> Generator[dict[str, Any], None, None]:
        """An agent command read as JSON lines as they come (its final answer included).
        Pushes the agent first when the host lacks this version, like ``run_pushed``.
        ``opened``: the command already started (its stdin given); ``stdin_first``: it was
        started with the bootstrap's ``--stdin-first``."""
        path = self.deployment.agent_path
        agent = agent_bundle()
        plain = bootstrap_argv(
            self.deployment.python, path, agent.sha256, args, stdin_first=stdin_first
        )
        argv, given = plain, stdin
        for attempt in (1, 2):
            try:
                stream = opened or self.transport.stream(argv, stdin=given)
            except ProgramNotFound as exc:
                raise self._missing_python(exc) from exc
            opened = None
            said = False
            try:
                while True:
                    line = stream.readline(WATCH_SILENCE_S)
                    if line is None:
                        raise WatchSilent(f"{self.deployment.host.name}: the watcher went silent")
                    if not line:
                        break
                    try:
                        document = json.loads(line)
                    except ValueError:
                        continue  # not ours (a sitecustomize printing?): the log is the truth
                    if isinstance(document, dict):
                        said = True
                        yield document
                code = stream.returncode
                if code == BOOT_UNSAFE:
                    raise self._unsafe(stream.stderr)
                if not said and code == BOOT_MISSING and attempt == 1:
                    argv, given = carrying(plain, agent.data, stdin)
                    continue
                if not said and code == BOOT_CHANGED and attempt == 1:
                    self.transport.put(agent.data, path, 0o600)
                    continue
                if not said and code not in (0, 3, None):
                    raise self._failed(args[0], code, stream.stderr)
                return
            finally:
                stream.close()

    def call(
        self,
        *args: str,
        timeout: float = 60.0,
        stdin: bytes | None = None,
        carry: bool = False,
        no_write: bool = False,
    ) -> Any:
        """Run an agent command; its answer as JSON (decoded by the caller's decoder).
        ``carry``: the agent travels with it; ``no_write``: nothing written on the host to run
        it (see ``run_pushed``)."""
        path = self.deployment.agent_path
        result = self.run_pushed(
            agent_bundle(), path, args, timeout, stdin, carry=carry, no_write=no_write
        )
        if result.returncode not in (0, 3):
            raise self._failed(args[0], result.returncode, result.stderr)
        try:
            document = json.loads(result.stdout.decode("utf-8").strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise SupervisorError(
                f"agent {args[0]} answered something that is not JSON",
                "is the host's python a CPython >= 3.9?",
            ) from exc
        if isinstance(document, dict):
            protocol = document.get("protocol", PROTOCOL)
            if protocol != PROTOCOL:
                raise SupervisorError(
                    f"agent protocol {protocol}, orch speaks {PROTOCOL}",
                    "stop the deployment with the orch version that started it",
                )
        return document

    def ask(self, request: Request, *, carry: bool = False, no_write: bool = False) -> Any:
        """One agent command of the protocol (``fleet/protocol/``): its answer as JSON, for
        the decoder beside the request."""
        return self.call(
            *request.args,
            timeout=request.timeout,
            stdin=request.stdin,
            carry=carry,
            no_write=no_write,
        )

    def _failed(self, command: str, returncode: int, stderr_bytes: bytes) -> OrchError:
        """An agent command that ended without its answer (a traceback, a missing module)."""
        stderr = stderr_bytes.decode("utf-8", "replace")
        argv = (self.deployment.python, self.deployment.agent_path, command)
        if "No module named 'psutil'" in stderr:
            return PreflightError(
                f"{self.deployment.python} on {self.deployment.host.name} has no psutil",
                "psutil ships with sglang; is this the venv that holds sglang?",
            )
        error = SupervisorError(
            f"agent {command} failed on {self.deployment.host.name}: "
            + (stderr.strip().splitlines() or ["no output"])[-1],
            f"the agent's own log: {posixpath.join(self.deployment.dir, 'agent.log')}",
        )
        error.__cause__ = RemoteCommandError(argv, returncode, stderr)
        return error

    def probe(self, port: int, model: str | None, bind: str, env: Mapping[str, str]) -> HostFacts:
        """Preflight facts, with ``import sglang`` checked under the server's environment
        (sent on the command's stdin: it may hold secrets, so never in an argv nor a file;
        and no transfer of its own before the command)."""
        facts, _ = self._probe(port, model, bind, env, with_status=False)
        if facts is None:  # pragma: no cover - only skipped when asked with the status
            raise SupervisorError("agent probe skipped the facts")
        return facts

    def status_and_probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str]
    ) -> tuple[RunState, HostFacts | None]:
        """The deployment's status and the preflight facts in one command; no facts (None)
        while something of the deployment runs or died without an end: the next step changes
        the host (attach, adopt, stop), so ``probe`` asks again when they are needed."""
        facts, status = self._probe(port, model, bind, env, with_status=True)
        if status is None:
            raise SupervisorError("agent probe answered without the deployment's status")
        return status, facts

    def _probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str], *, with_status: bool
    ) -> tuple[HostFacts | None, RunState | None]:
        request = probe_request(
            port, model, bind, env, self.deployment.dir if with_status else None
        )
        # up's first command: the agent travels with it, so that a host without this orch's
        # agent costs no extra round trip
        return decode_probe_reply(self.ask(request, carry=with_status))

    def start(self, spec: Mapping[str, Any], launch_script: str) -> StartReply:
        """Detach a supervisor; the spec (the server's environment, secrets included) and the
        launch script go with the command, on its stdin: one round trip, no file transfer,
        written 0600 by the agent."""
        return decode_start(self.ask(start_request(self.deployment.dir, spec, launch_script)))

    def start_previous(self) -> StartReply:
        """The deployment's previous launch started again, from the spec the agent kept when
        the current one replaced it (a rolling restart's way back after a failed relaunch)."""
        return decode_start(self.ask(start_previous_request(self.deployment.dir)))

    def adopt(self) -> StartReply:
        """A new supervisor for a server whose supervisor died: it verifies the server's
        identity and watches it without restarting it (see ``agent adopt``)."""
        return decode_start(self.ask(adopt_request(self.deployment.dir)))

    def status(self, *, load: bool = False) -> RunState:
        """``load``: a READY server's /v1/loads read now, in the same agent command."""
        return decode_state(self.ask(status_request(self.deployment.dir, load=load)))

    def read_state(self) -> RunState | None:
        """state.json read directly (one SFTP read, no process started): for fast polling."""
        try:
            raw = self.transport.read(self.deployment.state_path)
        except FileNotFoundError:
            return None
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            return None  # never partial (replaced atomically), but be safe
        if not isinstance(document, dict):
            return None  # corrupt (null, []): the agent's status says so, and finds what runs
        return decode_state(document, agent_alive=True)

    def survey(self) -> HostSurvey:
        """Every deployment under the host's workdir, its state as ``status`` reports it, and
        the host's SGLang version, in one command that writes nothing on the host (not even
        the agent's bundle: a host without it gets it carried and run from memory)."""
        request = survey_request(self.deployment.workdir)
        return decode_survey(self.deployment.host.name, self.ask(request, no_write=True))

    def reconfigure(
        self,
        spec: Mapping[str, Any],
        launch_script: str,
        live: LiveChanges | None = None,
    ) -> ReconfigureReply:
        """The running supervisor takes ``spec`` (a new launch of the same deployment) without
        its server being touched; ``live`` changes applied over HTTP by the agent first, and
        verified (see ``agent reconfigure``)."""
        request = reconfigure_request(self.deployment.dir, spec, launch_script, live)
        return decode_reconfigure(self.ask(request))

    def stop(self, timeout: float) -> StopReply:
        return decode_stop(self.ask(stop_request(self.deployment.dir, timeout)))

    def tail(self, lines: int, bytes_per_line: int, run_id: str | None = None) -> TailReply:
        """The last ``lines`` of a run's log (default the current run, else the newest), in
        one command (``agent tail``)."""
        request = tail_request(self.deployment.dir, lines, bytes_per_line, run_id)
        return decode_tail(self.ask(request))

    def runs(self) -> tuple[RunInfo, ...]:
        return self.runs_reply().runs

    def runs_reply(self) -> RunsReply:
        """Every run with its start, READY and exit, and the host's clock."""
        return decode_runs_reply(self.ask(runs_request(self.deployment.dir)))

    def plan(self, request: Mapping[str, Any], timeout: float = 300.0) -> PlanAnswer:
        """Run SGLang's parsing and resolution on the host (the probe bundle, ``-``); the
        request, which carries the server's environment, travels on the command's stdin (no
        file, no transfer of its own)."""
        probe = self.deployment.probe_path
        asked = plan_request(request, timeout)
        result = self.run_pushed(probe_bundle(), probe, asked.args, asked.timeout, asked.stdin)
        answer = last_json_line(result.stdout, result.stderr, result.returncode, "probe")
        return decode_plan_answer(answer)

    def inspect(
        self,
        *,
        port: int,
        host: str,
        env_names: Sequence[str],
        pid: int | None = None,
        log: str | None = None,
    ) -> tuple[Observation, LastRun | None]:
        """What the server received and resolved (see ``agent inspect``)."""
        request = inspect_request(
            self.deployment.dir, port=port, host=host, env_names=env_names, pid=pid, log=log
        )
        return decode_inspect(self.ask(request))

    # -- a launch group's preflight --

    def listen(
        self, bind: str, port: int, token: str, seconds: float, *, expect: int
    ) -> ProbeAnswer:
        """A short-lived listener on ``bind:port`` (``agent listen``, detached): what the
        other nodes of a group try to reach before any server starts. It ends after ``expect``
        exchanges (the port is the server's right after) or ``seconds``."""
        request = listen_request(bind, port, token, seconds, expect=expect)
        return decode_probe_answer(self.ask(request), "listen")

    def reach(self, host: str, port: int, token: str, timeout: float) -> ProbeAnswer:
        """Connect from this node to ``host:port`` and exchange ``token`` (``agent reach``)."""
        return decode_probe_answer(self.ask(reach_request(host, port, token, timeout)), "reach")
