"""orch's remote agent: supervises one SGLang server on its host.

ONE file, standard library + psutil (present in every SGLang venv), importing nothing from
orchestrator: orch pushes this file over SFTP and runs it with the host's SGLang python.

    python agent.py start  --dir DEPLOYMENT_DIR --spec SPEC.json   # detach a supervisor
    python agent.py status --dir DEPLOYMENT_DIR                    # state as JSON
    python agent.py stop   --dir DEPLOYMENT_DIR [--timeout S]      # stop, sweep, report
    python agent.py runs   --dir DEPLOYMENT_DIR                    # the runs and their logs
    python agent.py probe  --port P [--model PATH] [--bind ADDR]   # preflight facts as JSON
    python agent.py inspect --dir DIR [--pid P] [--port N] [--env NAME ...]  # diff-effective facts

The supervisor (``start``) detaches from the SSH session (double fork, new session, stdin from
/dev/null), holds a lock per deployment and per port, starts the server from an argv list in its
own process group with its output piped into ``runs/<run-id>/server.log`` (rotated at a size
cap; runs never share a log), watches for SGLang's ready line and ``/health``, classifies every
exit, restarts by policy (systemd's on-failure/always/no, exponential backoff, start limit; never
a deterministic configuration error), and stops with SIGTERM to the group, a grace period,
SIGKILL, then a sweep for processes of the run that escaped the group (SGLang's schedulers can
be reparented to PID 1 and keep GPU memory). Its state is one JSON file replaced atomically.

The supervisor's states and their allowed transitions are one table (TRANSITIONS), checked on
every change. Its time comes from an injected Clock and its contacts with the world (spawning,
the health probe, signals, the sweep) from an injected World, both real by default: its logic
runs in-process in tests. SGLang's log vocabulary (``log_record``, ``config_line_payload``,
``is_ready_line``), the state names and the exit classifier here are also what orch's observe
stage uses, so the agent and the CLI can never disagree about what a log or a state means.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import re
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import subprocess

# subprocess, socket and urllib are imported where they are used: orch's pure observe stage
# imports the classifier from this file and must not pull in process or network machinery.

PROTOCOL = 1

# -- states and their transitions ---------------------------------------------------------------
# One table: every state change goes through Supervisor._change_state, which refuses a pair the
# table does not hold (supervisor's change_state/_assertInState). orch imports these names.

STARTING = "STARTING"  # spawned (or about to be); SGLang has not accepted its configuration yet
RUNNING = "RUNNING"  # the config line (server_args=) was logged: loading, capturing graphs
READY = "READY"  # /health answered 200, or the ready line was logged READY_LINE_GRACE_S ago
BACKOFF = "BACKOFF"  # exited; waiting to start again
STOPPING = "STOPPING"  # stop requested: SIGTERM to the group, grace, SIGKILL
EXITED = "EXITED"  # stopped on request, or exited and not to be restarted
FATAL = "FATAL"  # will not be restarted: deterministic error, start limit hit, or agent error
STATES = (STARTING, RUNNING, READY, BACKOFF, STOPPING, EXITED, FATAL)
INITIAL_STATE = STARTING

# Every state but the terminal ones can also go to FATAL: the agent's own error (cmd_start).
TRANSITIONS: dict[str, frozenset[str]] = {
    # config line seen; the ready line alone (after its grace) even without one; stop; exit
    STARTING: frozenset({RUNNING, READY, STOPPING, BACKOFF, EXITED, FATAL}),
    RUNNING: frozenset({READY, STOPPING, BACKOFF, EXITED, FATAL}),
    READY: frozenset({STOPPING, BACKOFF, EXITED, FATAL}),
    # the next server spawned; stopped while waiting; a restart that could not spawn (FATAL)
    BACKOFF: frozenset({STARTING, EXITED, FATAL}),
    STOPPING: frozenset({EXITED, FATAL}),
    EXITED: frozenset(),
    FATAL: frozenset(),
}
TERMINAL_STATES = tuple(state for state in STATES if not TRANSITIONS[state])  # EXITED, FATAL


class IllegalTransition(RuntimeError):
    """A state change the table does not allow: a bug in the agent, never a server's doing."""


def check_transition(current: str, new: str) -> None:
    if new not in TRANSITIONS.get(current, frozenset()):
        allowed = ", ".join(sorted(TRANSITIONS.get(current, ()))) or "nothing (terminal)"
        raise IllegalTransition(f"{current} -> {new}: {current} may go to {allowed}")


# -- SGLang's log vocabulary (docs/sglang-facts.md §2) ---------------------------------------------
# Defined once: the supervisor, orch's observe stage and diff-effective read a log the same way.

# ``[YYYY-mm-dd HH:MM:SS(.mmm)( TP0 ...)] message``: a record of SGLang's logger; the rank
# (`` TP0``, `` DP1 TP3``, `` PP0``) only on scheduler processes of parallel runs.
LOG_RECORD = re.compile(
    r"^\[(?P<timestamp>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{3})?)(?: (?P<rank>[^\]]+))?\] "
    r"(?P<message>.*)$"
)
READY_LINE = "The server is fired up and ready to roll!"
READY_LINE_GRACE_S = 10.0  # the ready line without a /health answer counts after this long
CONFIG_LINE_MARK = "server_args="
# The message of the config line: ServerArgs(...) up to 0.5.18, a dict from 0.5.19.
_CONFIG_MESSAGE = re.compile(r"server_args=(ServerArgs\(.*\)|\{.*\})\s*$")


class LogRecord(NamedTuple):
    timestamp: str  # as logged: local time, milliseconds when SGLANG_LOG_MS is set
    rank: str | None  # "TP0", "DP1 TP3" ... or None in the main process
    message: str


def log_record(line: str) -> LogRecord | None:
    """The parts of a line SGLang's logger wrote, or None for any other output (tracebacks,
    uvicorn's access log, tqdm, prints)."""
    match = LOG_RECORD.match(line)
    if match is None:
        return None
    return LogRecord(match.group("timestamp"), match.group("rank"), match.group("message"))


def config_line_payload(line: str) -> str | None:
    """``ServerArgs(...)`` or ``{...}`` when ``line`` is SGLang's config line (a log record whose
    message is ``server_args=`` and one of those), else None: a traceback's source line that
    mentions ``server_args=`` is not one."""
    record = log_record(line.rstrip("\r\n"))
    if record is None:
        return None
    match = _CONFIG_MESSAGE.match(record.message)
    return None if match is None else match.group(1)


def is_ready_line(line: str) -> bool:
    """SGLang logged that it is up (after its warm-up request; at once with
    --skip-server-warmup, possibly before uvicorn listens)."""
    record = log_record(line)
    return record is not None and READY_LINE in record.message


def strip_log_prefix(line: str) -> str:
    record = log_record(line)
    return (line if record is None else record.message).strip()


# Exit classes; the deterministic ones are never restarted (the same argv fails the same way).
CONFIG_ERROR = "config-error"
CUDA_OOM = "cuda-oom"
KILLED = "killed"
PORT_IN_USE = "port-in-use"
IMPORT_ERROR = "import-error"
MODEL_NOT_FOUND = "model-not-found"
NCCL = "nccl"
CRASHED = "crashed"
STOPPED = "stopped"
DETERMINISTIC = (CONFIG_ERROR, IMPORT_ERROR, MODEL_NOT_FOUND)

# Every process of a run carries both (children inherit them), for the sweep after the group kill.
RUN_ID_ENV = "ORCH_RUN_ID"
DEPLOYMENT_ENV = "ORCH_DEPLOYMENT_DIR"

_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)(?:: .*)?$"
)


# -- classification (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class ExitVerdict:
    cls: str
    message: str

    @property
    def deterministic(self) -> bool:
        return self.cls in DETERMINISTIC


def last_exception_line(lines: Sequence[str]) -> str | None:
    """The ``ExcType: message`` line that ends the last traceback, if any."""
    for line in reversed(lines):
        text = strip_log_prefix(line)
        if _EXCEPTION_LINE.match(text):
            return text
    return None


def classify_exit(
    returncode: int, tail: Sequence[str], *, saw_config_line: bool, was_ready: bool
) -> ExitVerdict:
    """Why a server process ended, from its exit status and the last lines it printed.

    Formats: docs/sglang-facts.md §2. A traceback before SGLang logged its ``server_args=`` line is
    SGLang rejecting its configuration (the incident's ValueError): deterministic.
    """
    text = "\n".join(tail)
    lowered = text.lower()
    exception = last_exception_line(tail)
    signalled = returncode < 0 or returncode in (128 + signal.SIGKILL, 128 + signal.SIGTERM)
    # SGLang kills its own tree (SIGKILL, itself included) once a child reports a failure:
    # then the signal is the consequence and the log says the cause.
    self_killed = signalled and any(mark in lowered for mark in _SGLANG_SELF_KILL_MARKS)
    if signalled and not self_killed:
        number = -returncode if returncode < 0 else returncode - 128
        name = _signal_name(number)
        why = " (the kernel's OOM killer, or kill -9)" if number == signal.SIGKILL else ""
        return ExitVerdict(KILLED, f"killed by {name}{why}")
    if "address already in use" in lowered or "[errno 98]" in lowered:
        line = _find_line(tail, ("address already in use", "[Errno 98]"))
        return ExitVerdict(PORT_IN_USE, line or "the port is already in use")
    if returncode == 2:
        line = _find_line(tail, (": error: ",))
        if line is not None:
            return ExitVerdict(CONFIG_ERROR, line)
    if "out of memory" in lowered and "cuda" in lowered:
        line = _find_line(tail, ("CUDA out of memory", "OutOfMemoryError"))
        return ExitVerdict(CUDA_OOM, line or exception or "CUDA out of memory")
    if "nccl" in lowered and ("error" in lowered or "timeout" in lowered):
        return ExitVerdict(NCCL, exception or _find_line(tail, ("NCCL",)) or "NCCL failure")
    if exception is not None and exception.startswith(("ModuleNotFoundError", "ImportError")):
        return ExitVerdict(IMPORT_ERROR, exception)
    if _looks_like_missing_model(lowered):
        line = _find_line(tail, _MISSING_MODEL_MARKS)
        return ExitVerdict(MODEL_NOT_FOUND, exception or line or "model not found")
    if exception is not None and not saw_config_line and not was_ready and not self_killed:
        return ExitVerdict(CONFIG_ERROR, exception)
    if exception is not None:
        return ExitVerdict(CRASHED, exception)
    if self_killed:
        line = _find_line(tail, _SGLANG_SELF_KILL_MARKS)
        return ExitVerdict(CRASHED, line or "SGLang stopped its processes after a child failed")
    return ExitVerdict(CRASHED, f"exited with code {returncode}")


# docs/sglang-facts.md §2 (runtime failures): what SGLang logs before it kills its own process tree.
_SGLANG_SELF_KILL_MARKS = (
    "received sigquit from a child process",
    "kill_process_tree called",
    "scheduler hit an exception",
    "crashed with exit code",
)


_MISSING_MODEL_MARKS = (
    "is not a local folder and is not a valid model identifier",
    "does not appear to have a file named config.json",
    "Repository Not Found",
    "Can't load the configuration of",
)


def _looks_like_missing_model(lowered: str) -> bool:
    return any(mark.lower() in lowered for mark in _MISSING_MODEL_MARKS)


def _find_line(lines: Sequence[str], needles: Iterable[str]) -> str | None:
    wanted = [n.lower() for n in needles]
    for line in reversed(lines):
        lowered = line.lower()
        if any(n in lowered for n in wanted):
            return strip_log_prefix(line)
    return None


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


# -- restart policy (pure) ----------------------------------------------------------------------


@dataclass(frozen=True)
class RestartPolicy:
    mode: str = "on-failure"  # no | on-failure | always
    delay_s: float = 5.0
    multiplier: float = 2.0
    max_delay_s: float = 300.0
    start_limit: int = 5
    start_limit_interval_s: float = 600.0

    def delay(self, consecutive_failures: int) -> float:
        """Delay before the next start after ``consecutive_failures`` failures (>= 1)."""
        steps = max(consecutive_failures - 1, 0)
        return float(min(self.delay_s * (self.multiplier**steps), self.max_delay_s))

    def wants_restart(self, verdict: ExitVerdict, returncode: int) -> bool:
        if verdict.deterministic or self.mode == "no":
            return False
        if self.mode == "always":
            return True
        return returncode != 0

    def start_limit_hit(self, start_times: Sequence[float], now: float) -> bool:
        recent = [t for t in start_times if now - t < self.start_limit_interval_s]
        return len(recent) >= self.start_limit


# -- the spec and the state ---------------------------------------------------------------------


@dataclass(frozen=True)
class Spec:
    deployment: str
    argv: tuple[str, ...]
    env: dict[str, str]
    port: int
    health_host: str
    health_endpoint: str
    health_interval_s: float
    startup_timeout_s: float
    restart: RestartPolicy
    stop_timeout_s: float = 30.0
    log_max_bytes: int = 256 << 20
    log_keep: int = 3
    cwd: str | None = None  # None: the run's own directory
    meta: dict[str, Any] = field(default_factory=dict)  # plan hash, git commit ...: echoed

    @staticmethod
    def from_json(data: dict[str, Any]) -> Spec:
        if data.get("protocol") != PROTOCOL:
            raise ValueError(f"spec protocol {data.get('protocol')!r}, agent speaks {PROTOCOL}")
        health = data["health"]
        return Spec(
            deployment=data["deployment"],
            argv=tuple(data["argv"]),
            env=dict(data["env"]),
            port=int(data["port"]),
            health_host=data.get("health_host", "127.0.0.1"),
            health_endpoint=health.get("endpoint", "/health"),
            health_interval_s=float(health.get("interval_s", 5.0)),
            startup_timeout_s=float(health.get("startup_timeout_s", 1800.0)),
            restart=RestartPolicy(**data["restart"]),
            stop_timeout_s=float(data.get("stop_timeout_s", 30.0)),
            log_max_bytes=int(data.get("log_max_bytes", 256 << 20)),
            log_keep=int(data.get("log_keep", 3)),
            cwd=data.get("cwd"),
            meta=dict(data.get("meta", {})),
        )


def write_json_atomic(path: str, document: dict[str, Any], mode: int = 0o644) -> None:
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def read_json(path: str) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return None
    return data if isinstance(data, dict) else None


class Paths:
    """Where a deployment keeps things on the host."""

    def __init__(self, deployment_dir: str) -> None:
        self.root = deployment_dir
        self.state = os.path.join(deployment_dir, "state.json")
        self.spec = os.path.join(deployment_dir, "spec.json")
        self.lock = os.path.join(deployment_dir, ".lock")
        self.events = os.path.join(deployment_dir, "events.jsonl")
        self.agent_log = os.path.join(deployment_dir, "agent.log")
        self.runs = os.path.join(deployment_dir, "runs")
        self.launch_script = os.path.join(deployment_dir, "launch.sh")

    def port_lock(self, port: int) -> str:
        # one level up: every deployment under the same workdir shares the port locks
        return os.path.join(os.path.dirname(self.root), ".orch", "locks", f"port-{port}.lock")


# -- log piping with rotation -------------------------------------------------------------------


class LogSink:
    """The run's log: every byte the server prints, rotated at a size cap, never truncated."""

    def __init__(self, path: str, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self._file = open(path, "ab")  # noqa: SIM115 - lives as long as the run
        self._size = self._file.tell()

    def write(self, data: bytes) -> None:
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._rotate()
        self._file.write(data)
        self._file.flush()
        self._size += len(data)

    def _rotate(self) -> None:
        self._file.close()
        for index in range(self.keep - 1, 0, -1):
            older = f"{self.path}.{index}"
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{index + 1}")
        os.replace(self.path, f"{self.path}.1")
        self._file = open(self.path, "ab")  # noqa: SIM115
        self._size = 0

    def close(self) -> None:
        self._file.close()


class OutputWatcher:
    """The server's combined output as it arrives: written to the log, and noted (the config
    line, the ready line, the last lines for the exit verdict). Fed by whoever reads the
    server's output (``World.spawn``'s reader thread)."""

    def __init__(
        self, sink: LogSink, tail_lines: int = 400, config_path: str | None = None
    ) -> None:
        self._sink = sink
        self.config_path = config_path
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.saw_config_line = False
        self.saw_ready_line = False
        self._partial = b""

    def feed(self, chunk: bytes) -> None:
        self._sink.write(chunk)
        # tqdm redraws with \r: split on both so each progress update is a line
        pieces = re.split(rb"[\r\n]", self._partial + chunk)
        self._partial = pieces.pop()
        for piece in pieces:
            if piece:
                self._note(piece.decode("utf-8", "replace"))

    def close(self) -> None:
        """The output ended: its last, unterminated line counts too."""
        if self._partial:
            self._note(self._partial.decode("utf-8", "replace"))
            self._partial = b""
        self._sink.close()

    def _note(self, line: str) -> None:
        self.tail.append(line)
        if not self.saw_config_line and config_line_payload(line) is not None:
            self.saw_config_line = True
            self._keep_config(line)
        if is_ready_line(line):
            self.saw_ready_line = True

    def _keep_config(self, line: str) -> None:
        """Keep the config line and what SGLang logged before it beside the log (which may
        rotate): ``orch diff-effective`` reads them from here."""
        if self.config_path is None:
            return
        document = {"server_args_line": line, "log_lines": list(self.tail)[:-1]}
        with contextlib.suppress(OSError):
            write_json_atomic(self.config_path, document, 0o600)


# -- the supervisor's clock and its contacts with the world -------------------------------------


class Clock(Protocol):
    """Every time source of the supervisor. Intervals, deadlines, backoff, the start-limit
    window and health intervals use ``monotonic``; ``wall`` only stamps what users read."""

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Until ``event`` is set (True) or ``timeout`` seconds passed (False)."""


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)


class ServerProcess(Protocol):
    """A started server as the supervisor sees it (in subprocess.Popen's words)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def drain(self, timeout: float) -> None:
        """Let the reader of the output reach its end, waiting at most ``timeout`` seconds
        (children that outlive the server can hold the pipe open)."""


class World(Protocol):
    """The supervisor's contacts with the world outside it: RealWorld on a host, a scripted
    double in tests/unit/test_supervisor_logic.py."""

    def spawn(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], output: OutputWatcher
    ) -> ServerProcess:
        """Start the server in its own session and process group, stdin from /dev/null, its
        stdout and stderr fed to ``output`` (then closed); OSError when it cannot start."""

    def health_ok(self, host: str, port: int, endpoint: str) -> bool: ...

    def signal_group(self, pgid: int, sig: int) -> None:
        """Signal a process group; one that is gone already is no error."""

    def descendants(self, pid: int) -> dict[int, float]:
        """pid -> start time of every process under ``pid`` now (empty when it is gone)."""

    def sweep(self, deployment_dir: str, run_id: str, seen: dict[int, float]) -> list[int]:
        """Kill what is left of a run: every process carrying its markers or seen as a
        descendant (same pid and start time); the pids killed."""


class RealWorld:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def spawn(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], output: OutputWatcher
    ) -> ServerProcess:
        import subprocess

        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and process group
        )
        return _Spawned(process, output)

    def health_ok(self, host: str, port: int, endpoint: str) -> bool:
        return _health_ok(host, port, endpoint)

    def signal_group(self, pgid: int, sig: int) -> None:
        _signal_group(pgid, sig)

    def descendants(self, pid: int) -> dict[int, float]:
        found: dict[int, float] = {}
        try:
            import psutil

            for child in psutil.Process(pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    found[child.pid] = child.create_time()
        except Exception:  # noqa: BLE001, S110 - psutil missing or the root is gone: best effort
            pass
        return found

    def sweep(self, deployment_dir: str, run_id: str, seen: dict[int, float]) -> list[int]:
        return _kill_leftovers(deployment_dir, run_id, seen, self.clock)


class _Spawned:
    """A real server process; a thread pumps its output into the watcher."""

    def __init__(self, process: subprocess.Popen[bytes], output: OutputWatcher) -> None:
        assert process.stdout is not None  # noqa: S101
        self.pid = process.pid
        self._process = process
        self._stream = process.stdout
        self._output = output
        self._thread = threading.Thread(target=self._pump, name="log-pump", daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        fd = self._stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            self._output.feed(chunk)
        self._output.close()

    def poll(self) -> int | None:
        return self._process.poll()

    def wait(self) -> int:
        return self._process.wait()

    def drain(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)


# -- the supervisor -----------------------------------------------------------------------------


class Supervisor:
    """Runs one deployment's server until stopped. Its time (``clock``) and its contacts with
    the world (``world``: spawn, health probe, signals, sweep) are injected, real by default,
    so that its logic runs in-process in tests. Every state change goes through
    ``_change_state``, checked against TRANSITIONS."""

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
        self.state: dict[str, Any] = {
            "protocol": PROTOCOL,
            "deployment": spec.deployment,
            "agent_pid": os.getpid(),
            "state": INITIAL_STATE,
            "pid": None,
            "pgid": None,
            "run_id": None,
            "run_dir": None,
            "log": None,
            "port": spec.port,
            "starts": 0,
            "restarts": 0,
            "ready": False,
            "started_at": None,
            "started_mono": None,
            "ready_at": None,
            "state_since": self.clock.wall(),
            "next_start_at": None,
            "last_exit": None,
            "message": "",
            "meta": spec.meta,
        }
        self._start_times: deque[float] = deque(maxlen=max(spec.restart.start_limit, 1) * 2)
        self._run_seq = _last_run_seq(paths.runs)

    # -- state --

    def _change_state(self, new: str, **fields: Any) -> None:
        """The one way to change ``state``: refuses what TRANSITIONS does not allow, stamps
        ``state_since``, writes state.json and records the change in events.jsonl."""
        old = self.state["state"]
        check_transition(old, new)
        self._write(dict(fields, state=new, state_since=self.clock.wall()))
        self._event("state", **{"from": old, "to": new})

    def _update(self, **fields: Any) -> None:
        """Fields other than the state itself."""
        if "state" in fields or "state_since" in fields:
            raise IllegalTransition("the state changes through _change_state only")
        self._write(fields)

    def _write(self, fields: dict[str, Any]) -> None:
        self.state.update(fields)
        write_json_atomic(self.paths.state, self.state)

    def fail(self, message: str) -> None:
        """The agent itself failed: FATAL, unless the state was final already."""
        if self.state["state"] not in TERMINAL_STATES:
            self._change_state(FATAL, message=message)

    def _event(self, kind: str, **details: Any) -> None:
        record = {"at": self.clock.wall(), "event": kind, **details}
        with open(self.paths.events, "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    # -- main loop --

    def run(self) -> int:
        consecutive_failures = 0
        while not self.stop_requested.is_set():
            self._start_times.append(self.clock.monotonic())
            returncode, verdict, was_ready = self._run_once()
            if self.stop_requested.is_set():
                break
            consecutive_failures = 1 if was_ready else consecutive_failures + 1
            if verdict.deterministic:
                self._change_state(FATAL, message=f"{verdict.cls}: not restarting (deterministic)")
                self._event("fatal", reason=verdict.cls)
                return 0
            if not self.spec.restart.wants_restart(verdict, returncode):
                self._change_state(
                    EXITED, message=f"exited ({verdict.cls}); restart={self.spec.restart.mode}"
                )
                return 0
            if self.spec.restart.start_limit_hit(self._start_times, self.clock.monotonic()):
                message = (
                    f"{verdict.cls}: start limit hit ({self.spec.restart.start_limit} starts "
                    f"within {self.spec.restart.start_limit_interval_s:g} s)"
                )
                self._change_state(FATAL, message=message, next_start_at=None)
                self._event("fatal", reason=message)
                return 0
            delay = self.spec.restart.delay(consecutive_failures)
            self._change_state(
                BACKOFF,
                next_start_at=self.clock.wall() + delay,
                message=f"{verdict.cls}: restarting in {delay:g} s",
            )
            self._event("backoff", delay_s=delay, failures=consecutive_failures)
            if self.clock.wait(self.stop_requested, delay):
                break
            self._update(restarts=self.state["restarts"] + 1, next_start_at=None)
        self._change_state(EXITED, pid=None, pgid=None, message="stopped", next_start_at=None)
        self._event("stopped")
        return 0

    def _new_run_dir(self) -> tuple[str, str]:
        self._run_seq += 1
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(self.clock.wall()))
        run_id = f"{self._run_seq:04d}-{stamp}"
        run_dir = os.path.join(self.paths.runs, run_id)
        os.makedirs(run_dir, mode=0o700, exist_ok=False)
        if os.path.exists(self.paths.launch_script):
            with open(self.paths.launch_script, "rb") as source:
                _write_private(os.path.join(run_dir, "launch.sh"), source.read())
        _write_private(os.path.join(run_dir, "spec.json"), _read_bytes(self.paths.spec))
        return run_id, run_dir

    def _run_once(self) -> tuple[int, ExitVerdict, bool]:
        run_id, run_dir = self._new_run_dir()
        log_path = os.path.join(run_dir, "server.log")
        env = dict(os.environ)
        env.update(self.spec.env)
        env[RUN_ID_ENV] = run_id
        env[DEPLOYMENT_ENV] = self.paths.root
        sink = LogSink(log_path, self.spec.log_max_bytes, self.spec.log_keep)
        watcher = OutputWatcher(sink, config_path=os.path.join(run_dir, CONFIG_FILE))
        try:
            process = self.world.spawn(self.spec.argv, self.spec.cwd or run_dir, env, watcher)
        except OSError as exc:
            sink.write(f"orch agent: cannot start {self.spec.argv[0]}: {exc}\n".encode())
            sink.close()
            verdict = ExitVerdict(CONFIG_ERROR, f"cannot start {self.spec.argv[0]}: {exc.strerror}")
            self._record_exit(run_id, 127, verdict)
            return 127, verdict, False
        started = self.clock.monotonic()
        spawned = {
            "pid": process.pid,
            "pgid": process.pid,
            "run_id": run_id,
            "run_dir": run_dir,
            "log": log_path,
            "starts": self.state["starts"] + 1,
            "ready": False,
            "started_at": self.clock.wall(),
            "started_mono": started,
            "ready_at": None,
            "message": "",
        }
        if self.state["state"] == STARTING:  # the first start: the supervisor began there
            self._update(**spawned)
        else:
            self._change_state(STARTING, **spawned)
        self._event("start", run_id=run_id, pid=process.pid)
        tracked = _Descendants(process.pid, self.clock, self.world)
        next_health = started
        ready_line_at: float | None = None
        while process.poll() is None:
            if self.stop_requested.is_set():
                self._stop_process(process, tracked)
                break
            if self.state["state"] == STARTING and watcher.saw_config_line:
                self._change_state(RUNNING)
            if not self.state["ready"]:
                # READY when /health answers 200. The ready line alone is not enough: with
                # --skip-server-warmup SGLang logs it before uvicorn binds the port. It makes
                # the checks frequent, and counts by itself only if /health stays unreachable
                # from the host (a bind address the host cannot reach) for a while.
                now = self.clock.monotonic()
                healthy = False
                if watcher.saw_ready_line and ready_line_at is None:
                    ready_line_at = now
                    next_health = now
                if now >= next_health and watcher.saw_config_line:
                    healthy = self.world.health_ok(
                        self.spec.health_host, self.spec.port, self.spec.health_endpoint
                    )
                    fast = ready_line_at is not None
                    next_health = now + (0.1 if fast else min(self.spec.health_interval_s, 1.0))
                trust_line = ready_line_at is not None and now - ready_line_at > READY_LINE_GRACE_S
                if healthy or trust_line:
                    self._change_state(READY, ready=True, ready_at=self.clock.wall())
                    self._event("ready", run_id=run_id)
            tracked.refresh()
            self.clock.sleep(0.05)
        returncode = process.wait()
        # Children that outlive the server hold its output pipe open: give the last lines a
        # moment, give the verdict at once, then sweep (which closes the pipe for good).
        process.drain(0.2)
        was_ready = bool(self.state["ready"])
        if self.stop_requested.is_set():
            verdict = ExitVerdict(STOPPED, "stopped on request")
        else:
            verdict = classify_exit(
                returncode,
                list(watcher.tail),
                saw_config_line=watcher.saw_config_line,
                was_ready=was_ready,
            )
        self._record_exit(run_id, returncode, verdict)
        swept = self._sweep(run_id, tracked)
        process.drain(5.0)
        if swept:
            last_exit = dict(self.state["last_exit"], swept_pids=swept)
            self._update(last_exit=last_exit)
            self._event("swept", run_id=run_id, pids=swept)
        return returncode, verdict, was_ready

    def _record_exit(self, run_id: str, returncode: int, verdict: ExitVerdict) -> None:
        last_exit = {
            "run_id": run_id,
            "returncode": returncode,
            "signal": _signal_name(-returncode) if returncode < 0 else None,
            "class": verdict.cls,
            "message": verdict.message,
            "at": self.clock.wall(),
            "was_ready": bool(self.state["ready"]),
            "swept_pids": [],
        }
        self._update(pid=None, ready=False, last_exit=last_exit)
        self._event("exit", **last_exit)

    def _stop_process(self, process: ServerProcess, tracked: _Descendants) -> None:
        self._change_state(STOPPING, message="stopping")
        self.world.signal_group(process.pid, signal.SIGTERM)
        deadline = self.clock.monotonic() + self.spec.stop_timeout_s
        while process.poll() is None and self.clock.monotonic() < deadline:
            tracked.refresh()
            self.clock.sleep(0.05)
        if process.poll() is None:
            self.world.signal_group(process.pid, signal.SIGKILL)
        process.wait()

    def _sweep(self, run_id: str, tracked: _Descendants) -> list[int]:
        """Kill what is left of the run: the group, then anything carrying the run's marker or
        seen as a descendant (reparented schedulers keep GPU memory otherwise)."""
        pgid = self.state.get("pgid")
        if pgid:
            self.world.signal_group(int(pgid), signal.SIGKILL)
            self._update(pgid=None)
        return self.world.sweep(self.paths.root, run_id, tracked.seen)


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _read_bytes(path: str) -> bytes:
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except FileNotFoundError:
        return b""


def _last_run_seq(runs_dir: str) -> int:
    try:
        names = os.listdir(runs_dir)
    except FileNotFoundError:
        return 0
    numbers = [int(n.split("-", 1)[0]) for n in names if n.split("-", 1)[0].isdigit()]
    return max(numbers, default=0)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _health_ok(host: str, port: int, endpoint: str) -> bool:
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}{endpoint}"
    try:
        with urllib.request.urlopen(url, timeout=2.0) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class _Descendants:
    """Processes seen under the server while it ran: (pid, create_time), so that a pid reused
    by an unrelated process is never killed."""

    def __init__(self, root_pid: int, clock: Clock, world: World) -> None:
        self.root_pid = root_pid
        self.seen: dict[int, float] = {}
        self._clock = clock
        self._world = world
        self._next = 0.0

    def refresh(self) -> None:
        now = self._clock.monotonic()
        if now < self._next:
            return
        self._next = now + 0.5
        self.seen.update(self._world.descendants(self.root_pid))


def _kill_leftovers(
    deployment_dir: str, run_id: str, seen: dict[int, float], clock: Clock
) -> list[int]:
    try:
        import psutil
    except ImportError:
        return []
    killed: list[int] = []
    for process in psutil.process_iter(["pid", "create_time"]):
        pid = process.info["pid"]
        if pid == os.getpid():
            continue
        mine = seen.get(pid) == process.info["create_time"]
        if not mine:
            with contextlib.suppress(psutil.Error):
                environ = process.environ()
                mine = (
                    environ.get(RUN_ID_ENV) == run_id
                    and environ.get(DEPLOYMENT_ENV) == deployment_dir
                )
        if mine:
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed.append(pid)
    _wait_gone(killed, 5.0, clock)
    return killed


def _wait_gone(pids: Sequence[int], timeout: float, clock: Clock) -> None:
    """Until each pid is gone or a zombie (a reparented one is reaped by someone else)."""
    import psutil

    deadline = clock.monotonic() + timeout
    waiting = list(pids)
    while waiting and clock.monotonic() < deadline:
        still = []
        for pid in waiting:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    still.append(pid)
        waiting = still
        if waiting:
            clock.sleep(0.02)


# -- commands -----------------------------------------------------------------------------------


def _lock(path: str) -> int | None:
    import fcntl

    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    os.set_inheritable(fd, False)
    return fd


def cmd_start(deployment_dir: str, spec_path: str) -> dict[str, Any]:
    """Detach a supervisor; answers once it holds its locks and has spawned the server."""
    paths = Paths(deployment_dir)
    with open(spec_path, encoding="utf-8") as handle:
        raw = json.load(handle)
    spec = Spec.from_json(raw)  # fail here, attached, on a bad spec
    os.makedirs(paths.runs, mode=0o700, exist_ok=True)
    reader, writer = os.pipe()
    first = os.fork()
    if first:
        os.close(writer)
        with os.fdopen(reader, "rb") as pipe:
            answer = pipe.read()
        os.waitpid(first, 0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spec_path)
        if not answer:
            return {"ok": False, "reason": "the supervisor died while starting; see agent.log"}
        result: dict[str, Any] = json.loads(answer)
        return result
    # first child: new session, then fork again so the supervisor is no session leader
    os.close(reader)
    os.setsid()
    if os.fork():
        os._exit(0)
    _become_daemon(paths)
    deployment_lock = _lock(paths.lock)
    port_lock = _lock(paths.port_lock(spec.port)) if deployment_lock is not None else None
    if deployment_lock is None or port_lock is None:
        holder = read_json(paths.state)
        which = "deployment" if deployment_lock is None else f"port {spec.port}"
        _answer(
            writer,
            {
                "ok": False,
                "reason": f"locked: another supervisor holds the {which}",
                "holder": holder,
            },
        )
        os._exit(0)
    os.replace(spec_path, paths.spec)
    os.chmod(paths.spec, 0o600)
    clock = RealClock()
    supervisor = Supervisor(spec, paths, clock=clock)
    signal.signal(signal.SIGTERM, lambda *_: supervisor.stop_requested.set())
    signal.signal(signal.SIGINT, lambda *_: supervisor.stop_requested.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    answered = threading.Event()

    def answer_when_spawned() -> None:
        deadline = clock.monotonic() + 10.0
        while clock.monotonic() < deadline and supervisor.state["pid"] is None:
            if supervisor.state["last_exit"] is not None:
                break
            clock.sleep(0.01)
        _answer(writer, {"ok": True, "state": supervisor.state})
        answered.set()

    threading.Thread(target=answer_when_spawned, daemon=True).start()
    try:
        supervisor.run()
    except Exception as exc:
        supervisor.fail(f"agent error: {type(exc).__name__}: {exc}")
        raise
    finally:
        answered.wait(timeout=1.0)
    os._exit(0)


def _become_daemon(paths: Paths) -> None:
    """No terminal, no SSH channel: stdin from /dev/null, output to the agent's own log."""
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = os.open(paths.agent_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def _answer(fd: int, document: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(document).encode())
        os.close(fd)


def _pid_alive(pid: int | None) -> bool:
    """Running (a zombie is not: an orphan waits for whoever reaps it, sometimes long)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            state = handle.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True  # no /proc (not Linux): trust kill(0)
    return state != b"Z"


def cmd_status(deployment_dir: str) -> dict[str, Any]:
    paths = Paths(deployment_dir)
    state = read_json(paths.state)
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    agent_alive = _pid_alive(state.get("agent_pid"))
    server_alive = _pid_alive(state.get("pid"))
    state["deployed"] = True
    state["agent_alive"] = agent_alive
    state["server_alive"] = server_alive
    started = state.get("started_mono")
    state["uptime_s"] = (time.monotonic() - started) if started and server_alive else None
    if not agent_alive and state.get("state") not in TERMINAL_STATES:
        state["stale"] = True  # the supervisor died without recording an end
    return state


def cmd_stop(deployment_dir: str, timeout: float) -> dict[str, Any]:
    paths = Paths(deployment_dir)
    state = read_json(paths.state)
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    agent_pid = int(state.get("agent_pid") or 0)
    if _pid_alive(agent_pid) and state.get("state") not in TERMINAL_STATES:
        os.kill(agent_pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout + 10.0
        while _pid_alive(agent_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    elif _pid_alive(agent_pid):
        os.kill(agent_pid, signal.SIGTERM)
    leftovers: list[int] = []
    final = read_json(paths.state) or state
    if _pid_alive(agent_pid):
        # the supervisor did not finish in time: take over its last duty
        os.kill(agent_pid, signal.SIGKILL)
    if final.get("pgid"):
        _signal_group(int(final["pgid"]), signal.SIGKILL)
    if final.get("run_id"):
        leftovers = _kill_leftovers(paths.root, str(final["run_id"]), {}, RealClock())
    result = cmd_status(deployment_dir)
    result["leftovers_killed"] = leftovers
    return result


def cmd_runs(deployment_dir: str) -> dict[str, Any]:
    runs_dir = Paths(deployment_dir).runs
    runs = []
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        log = os.path.join(runs_dir, name, "server.log")
        size = os.path.getsize(log) if os.path.exists(log) else None
        runs.append({"run_id": name, "log": log, "size": size})
    return {"protocol": PROTOCOL, "runs": runs}


def cmd_inspect(
    deployment_dir: str,
    pid: int | None,
    port: int | None,
    host: str,
    env_names: Sequence[str],
    log: str | None,
) -> dict[str, Any]:
    """What a server received and what it resolved, for ``orch diff-effective``.

    The server is ``pid`` when given, else the deployment's server when it runs, else whatever
    listens on ``port`` (a server started by hand). From it: ``/proc/PID/cmdline`` and, of its
    environment, only ``env_names`` (the rest may hold other people's secrets); ``/server_info``
    (``/get_server_info`` on old versions) asked on the host; and from its log the
    ``server_args=`` line with the lines logged before it (SGLang explains its changes there).
    """
    result: dict[str, Any] = {"protocol": PROTOCOL, "pid": None, "found_by": "", "alive": False}
    state = read_json(Paths(deployment_dir).state) or {}
    if state:
        result["last_run"] = {"run_id": state.get("run_id"), "state": state.get("state")}
    if pid is not None:
        result.update(pid=pid, found_by="pid")
    elif state.get("pid") and _pid_alive(state.get("pid")):
        result.update(pid=int(state["pid"]), found_by="orch")
    elif port is not None:
        holder = _port_holder(port)
        if holder and holder.get("pid"):
            result.update(pid=int(holder["pid"]), found_by="port")
    if result["pid"] is None and state.get("pid"):
        result.update(pid=int(state["pid"]), found_by="orch")  # dead: the log still tells
    if log is None and result["found_by"] in ("orch", ""):
        log = state.get("log")  # orch's run, or its last one: its config line still tells
    port = port or state.get("port")
    target = result["pid"]
    if target is not None:
        result.update(_proc_facts(int(target), set(env_names)))
    if result["alive"] and port:
        result.update(_server_info(host, int(port)))
    if log:
        result["log"] = log
        kept = read_json(os.path.join(os.path.dirname(log), CONFIG_FILE))
        result.update(kept if kept is not None else _config_from_log(log))
    return result


def _proc_facts(pid: int, env_names: set[str]) -> dict[str, Any]:
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/cmdline", "rb") as handle:
            argv = [a.decode("utf-8", "surrogateescape") for a in handle.read().split(b"\0")[:-1]]
        with open(f"{base}/environ", "rb") as handle:
            pairs = [e.decode("utf-8", "surrogateescape") for e in handle.read().split(b"\0") if e]
    except FileNotFoundError:
        return {"alive": False}
    except PermissionError as exc:
        return {"alive": True, "proc_error": f"{base}: {exc.strerror}"}
    if not argv:  # a zombie keeps its pid but has no command line left
        return {"alive": False}
    env = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name in env_names:
            env[name] = value
    return {"alive": True, "argv": argv, "env": env}


def _server_info(host: str, port: int) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    address = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104
    if ":" in address:
        address = f"[{address}]"
    errors = []
    for endpoint in ("/server_info", "/get_server_info"):
        url = f"http://{address}:{port}{endpoint}"
        try:
            with urllib.request.urlopen(url, timeout=5.0) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            errors.append(f"{endpoint}: HTTP {exc.code}")
            continue
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{endpoint}: {getattr(exc, 'reason', exc)}")
            continue
        if isinstance(payload, dict):
            return {"server_info": payload, "server_info_endpoint": endpoint}
        errors.append(f"{endpoint}: not a JSON object")
    return {"server_info_error": "; ".join(errors)}


CONFIG_FILE = "server_args.json"  # beside each run's log: its config line, kept by the watcher
CONFIG_SCAN_BYTES = 64 << 20  # the config line comes early; never read a whole huge log
EXPLAIN_LINES = 400


def _config_from_log(log: str) -> dict[str, Any]:
    """The ``server_args=`` line and up to EXPLAIN_LINES lines before it."""
    import collections

    before: collections.deque[str] = collections.deque(maxlen=EXPLAIN_LINES)
    try:
        with open(log, "rb") as handle:
            read = 0
            for raw in handle:
                read += len(raw)
                for piece in raw.decode("utf-8", "replace").replace("\r", "\n").split("\n"):
                    if not piece:
                        continue
                    if config_line_payload(piece) is not None:
                        return {"server_args_line": piece, "log_lines": list(before)}
                    before.append(piece[:2000])
                if read > CONFIG_SCAN_BYTES:
                    break
    except FileNotFoundError:
        return {"log_error": f"{log}: no such file"}
    except PermissionError as exc:
        return {"log_error": f"{log}: {exc.strerror}"}
    return {"server_args_line": None, "log_lines": list(before)}


def cmd_probe(port: int, model: str | None, bind: str, env_file: str | None) -> dict[str, Any]:
    """Facts orch checks before a launch; secrets are never part of them. ``env_file``: the
    server's environment (0600, removed once read), so that ``import sglang`` is checked the
    way the server will import it (PYTHONPATH, LD_LIBRARY_PATH ...)."""
    import socket

    env = dict(os.environ)
    if env_file is not None:
        with open(env_file, encoding="utf-8") as handle:
            env.update(json.load(handle))
        os.unlink(env_file)

    facts: dict[str, Any] = {
        "protocol": PROTOCOL,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "hostname": socket.gethostname(),
    }
    facts["sglang"] = _sglang_version(env)
    try:
        import psutil

        facts["psutil"] = psutil.__version__
    except ImportError:
        facts["psutil"] = None
    facts["port"] = {"port": port, "free": _port_free(bind, port), "holder": _port_holder(port)}
    if model is not None:
        facts["model"] = {
            "path": model,
            "exists": os.path.exists(model),
            "looks_like_hub_id": bool(re.fullmatch(r"[\w.-]+/[\w.-]+", model))
            and not model.startswith(("/", ".")),
        }
    facts["gpus"] = _gpus()
    return facts


_VERSION_PROBE = """
try:
    from importlib import metadata
    print(metadata.version("sglang"))
except Exception:
    import sglang
    print(sglang.__version__)
"""


def _sglang_version(env: dict[str, str]) -> dict[str, Any]:
    """In a child with the server's environment: metadata first (fast), else the import."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"version": None, "error": str(exc)}
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"version": None, "error": lines[-1] if lines else "import sglang failed"}
    return {"version": done.stdout.strip().splitlines()[-1]}


def _port_free(bind: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn does: connections of a server that just stopped linger in TIME_WAIT and
        # would make a plain bind fail although the server itself could bind.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError:
            return False
    return True


def _port_holder(port: int) -> dict[str, Any] | None:
    try:
        import psutil

        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid is None:
                    return {"pid": None}
                process = psutil.Process(conn.pid)
                return {"pid": conn.pid, "cmdline": process.cmdline()[:12]}
    except Exception:  # noqa: BLE001 - needs privileges on some hosts: a fact we just lack
        return None
    return None


def _gpus() -> dict[str, Any]:
    try:
        import pynvml
    except ImportError:
        return {"available": False, "reason": "pynvml (nvidia-ml-py) is not installed"}
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound / DriverNotLoaded ...
        return {"available": False, "reason": f"no NVIDIA driver: {exc}"}
    try:
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
            processes = []
            for proc in pynvml.nvmlDeviceGetComputeRunningProcesses(handle):
                processes.append(
                    {
                        "pid": proc.pid,
                        "used_bytes": proc.usedGpuMemory,
                        "cmdline": _cmdline(proc.pid),
                    }
                )
            devices.append(
                {
                    "index": index,
                    "name": name.decode() if isinstance(name, bytes) else name,
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "memory_total": memory.total,
                    "memory_free": memory.free,
                    "compute_capability": [major, minor],
                    "processes": processes,
                }
            )
        return {
            "available": True,
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
            "devices": devices,
        }
    finally:
        with contextlib.suppress(Exception):
            pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [a.decode("utf-8", "replace") for a in handle.read().split(b"\0")[:-1]][:12]
    except OSError:
        return []


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orch-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"orch-agent protocol {PROTOCOL}")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start")
    start.add_argument("--dir", required=True)
    start.add_argument("--spec", required=True)
    for name in ("status", "runs"):
        commands.add_parser(name).add_argument("--dir", required=True)
    stop = commands.add_parser("stop")
    stop.add_argument("--dir", required=True)
    stop.add_argument("--timeout", type=float, default=30.0)
    probe = commands.add_parser("probe")
    probe.add_argument("--port", type=int, required=True)
    probe.add_argument("--model")
    probe.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - checking that nobody holds it
    probe.add_argument("--env-file")
    inspect = commands.add_parser("inspect")
    inspect.add_argument("--dir", required=True)
    inspect.add_argument("--pid", type=int)
    inspect.add_argument("--port", type=int)
    inspect.add_argument("--host", default="127.0.0.1")
    inspect.add_argument("--env", action="append", default=[])
    inspect.add_argument("--log")
    args = parser.parse_args(argv)
    if args.command == "start":
        result = cmd_start(args.dir, args.spec)
    elif args.command == "status":
        result = cmd_status(args.dir)
    elif args.command == "stop":
        result = cmd_stop(args.dir, args.timeout)
    elif args.command == "runs":
        result = cmd_runs(args.dir)
    elif args.command == "inspect":
        result = cmd_inspect(args.dir, args.pid, args.port, args.host, args.env, args.log)
    else:
        result = cmd_probe(args.port, args.model, args.bind, args.env_file)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0 if result.get("ok", True) else 3


if __name__ == "__main__":
    raise SystemExit(main())
