"""orch's remote agent: supervises one SGLang server on its host.

ONE file, standard library + psutil (present in every SGLang venv), importing nothing from
orchestrator: orch pushes this file over SFTP and runs it with the host's SGLang python.

    python agent.py start  --dir DEPLOYMENT_DIR --spec SPEC.json   # detach a supervisor
    python agent.py status --dir DEPLOYMENT_DIR                    # state as JSON
    python agent.py stop   --dir DEPLOYMENT_DIR [--timeout S]      # stop, sweep, report
    python agent.py runs   --dir DEPLOYMENT_DIR                    # the runs and their logs
    python agent.py adopt  --dir DEPLOYMENT_DIR                    # supervise a server whose
                                                                   # supervisor died
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
READY = "READY"  # /health answered 200 after SGLang accepted its configuration
UNHEALTHY = "UNHEALTHY"  # after READY, /health failed health.failures times in a row: stopping it
BACKOFF = "BACKOFF"  # exited; waiting to start again
STOPPING = "STOPPING"  # stop requested: SIGTERM to the group, grace, SIGKILL
EXITED = "EXITED"  # stopped on request, or exited and not to be restarted
FATAL = "FATAL"  # will not be restarted: deterministic error, start limit hit, or agent error
STATES = (STARTING, RUNNING, READY, UNHEALTHY, BACKOFF, STOPPING, EXITED, FATAL)
INITIAL_STATE = STARTING
# Not a state of a supervisor but what ``status`` reports when there is none: the supervisor died
# (OOM killer, crash, reboot of the agent alone) and its server, verified by identity, still runs.
UNSUPERVISED = "UNSUPERVISED"

# Every state but the terminal ones can also go to FATAL: the agent's own error (cmd_start).
TRANSITIONS: dict[str, frozenset[str]] = {
    # config line seen; the ready line alone (after its grace) even without one; stop; exit
    STARTING: frozenset({RUNNING, STOPPING, BACKOFF, EXITED, FATAL}),
    RUNNING: frozenset({READY, STOPPING, BACKOFF, EXITED, FATAL}),
    # liveness: /health failed health.failures times in a row after READY
    READY: frozenset({UNHEALTHY, STOPPING, BACKOFF, EXITED, FATAL}),
    # the hung server is being stopped; then the restart policy applies as after any exit
    UNHEALTHY: frozenset({STOPPING, BACKOFF, EXITED, FATAL}),
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
    --skip-server-warmup, possibly before uvicorn listens): a record of its logger whose whole
    message is the ready line. The words elsewhere (a served model name, a request, the config
    dump) are not it."""
    record = log_record(line.rstrip("\r\n"))
    return record is not None and record.message.strip() == READY_LINE


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
# Verdicts of the supervisor itself, not of classify_exit: it stopped a server that stopped
# answering /health after READY (HUNG) or never became READY in time (STARTUP_TIMEOUT); the
# server could not be started at all (SPAWN_FAILED: argv over the kernel's per-argument limit,
# exec format error, a missing interpreter: the same argv fails the same way).
HUNG = "hung"
STARTUP_TIMEOUT = "startup-timeout"
SPAWN_FAILED = "spawn-failed"
# The supervisor took over a running server whose own supervisor had died (``adopt``): it is
# not its child, so its exit status cannot be known.
LOST = "lost"
DETERMINISTIC = (CONFIG_ERROR, IMPORT_ERROR, MODEL_NOT_FOUND, SPAWN_FAILED)

# Every process of a run carries both (children inherit them), for the sweep after the group kill.
RUN_ID_ENV = "ORCH_RUN_ID"
DEPLOYMENT_ENV = "ORCH_DEPLOYMENT_DIR"

# ``ExcType: message`` (``Exception: ...`` and a message starting on the next line included).
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Warning)(?::(?: .*)?)?$"
)


# -- classification (pure) ----------------------------------------------------------------------
# A verdict is read from the decisive evidence only (tests/fixtures/crashlogs/README.md): the
# exceptions that ended a process (type and message, chained causes included, "During handling"
# ones superseded), what SGLang itself logs when a process of the server fails, the signal, and
# how far the startup got. Never from ordinary log text: SGLang's server_args= dump holds
# nccl_port and watchdog_timeout, NCCL INFO lines and "sglang is using nccl==2.27.3" are chatter.


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

    In order (formats: docs/sglang-facts.md §2, tests/fixtures/crashlogs/):
    argparse's usage error with exit 2; an exception (Python, a C++ ``terminate``, a torch
    NCCL watchdog record) whose type and message name a specific cause, the root cause first
    (import, model, port, CUDA memory, then NCCL, which other ranks' failures also cause);
    a process of the server that SGLang reports dead by a signal; a signal from outside;
    any other exception: a configuration error when the main process raised it before SGLang
    accepted its configuration (the incident's ValueError), else a crash.
    """
    lines = [_plain(line) for line in tail]
    number = _signal_number(returncode)
    if returncode == 2:
        usage = _argparse_error(tail)
        if usage is not None:
            return ExitVerdict(CONFIG_ERROR, usage)
    failures = _failures(tail, lines)
    specific = [f for f in failures if f.cls is not None]
    if specific:
        cause = min(specific, key=lambda f: (_CAUSE_ORDER.index(f.cls or ""), -f.line))
        return ExitVerdict(cause.cls or CRASHED, cause.text)
    self_kill = _last_index(lines, _SELF_KILL_MARKS)
    dead_child = _dead_child(lines)
    if dead_child is not None:
        index, child_signal, text = dead_child
        # SGLang SIGKILLs its own processes after a failure it saw: a child's death reported
        # after that is the consequence, not the cause.
        if self_kill is None or self_kill > index:
            name = _signal_name(child_signal)
            if child_signal not in _EXTERNAL_SIGNALS:  # SIGSEGV, SIGBUS, SIGABRT: it crashed
                return ExitVerdict(CRASHED, f"{text}: crashed with {name}")
            why = " (the kernel's OOM killer, or kill -9)" if child_signal == signal.SIGKILL else ""
            return ExitVerdict(KILLED, f"{text}: killed by {name}{why}")
    generic = failures[-1] if failures else None
    external = _last_index(lines, _EXTERNAL_STOP_MARKS)
    if number in _EXTERNAL_SIGNALS or external is not None:
        if external is not None:
            return ExitVerdict(KILLED, lines[external])
        if self_kill is None and (generic is None or generic.process == "main"):
            # An exception SGLang did not die of (it logs its self-kill when one does).
            why = " (the kernel's OOM killer, or kill -9)" if number == signal.SIGKILL else ""
            return ExitVerdict(KILLED, f"killed by {_signal_name(number or 0)}{why}")
        if generic is None and self_kill is not None:
            return ExitVerdict(CRASHED, lines[self_kill])
    if generic is not None:
        past_config = saw_config_line or was_ready or _past_config(tail)
        if not past_config and generic.process == "main" and generic.python:
            return ExitVerdict(CONFIG_ERROR, generic.text)
        return ExitVerdict(CRASHED, generic.text)
    if number is not None:
        return ExitVerdict(CRASHED, f"crashed with {_signal_name(number)}")
    if self_kill is not None:
        return ExitVerdict(CRASHED, lines[self_kill])
    return ExitVerdict(CRASHED, f"exited with code {returncode}")


# The root cause first: a rank's CUDA OOM or crash makes the other ranks' collectives fail.
_CAUSE_ORDER = (IMPORT_ERROR, MODEL_NOT_FOUND, PORT_IN_USE, CUDA_OOM, NCCL)
# Signals sent from outside (kill, the OOM killer, a stop) as opposed to a crash of the
# process itself (SIGSEGV, SIGBUS, SIGABRT ...). 128 + N is how a shell or container reports N.
_EXTERNAL_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
_REPORTED_SIGNALS = (*_EXTERNAL_SIGNALS, signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS)

# docs/sglang-facts.md §2 (runtime failures): what SGLang logs before it kills its own process
# tree (SIGKILL, itself included) after one of its processes failed.
_SELF_KILL_MARKS = (
    "received sigquit from a child proces",  # "proces." in 0.4.2 (sglang#3460)
    "kill_process_tree called",
    "hit an exception",  # Scheduler, TpModelWorkerClient, DetokenizerManager ...
    "crashed with exit code",
)
# SGLang's own record of a stop it was asked for from outside.
_EXTERNAL_STOP_MARKS = ("sigterm received. signum=",)
# Exceptions and fatal errors, by the first line of their text.
_TORCH_RANK = re.compile(r"^\[rank\d+\]:\s?")
# torch's C++ error records: ``[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] ...``
_TORCH_ERROR_RECORD = re.compile(r"^\[E\d{4} [^\]]*\] ")
_CPP_TERMINATE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
_UVICORN_ERROR = re.compile(r"^ERROR:\s+\[Errno (?P<errno>\d+)\] ")
_ARGPARSE_ERROR = re.compile(r"^(?:usage: )?[\w.\-/ ]+: error: \S")
# "Rank 0 scheduler is dead" + "Exit code: -9" (0.4.1+); "Child process unexpectedly failed with
# an exit code 9" / "exitcode=9" (SIGCHLD handler; a raw wait status: the signal in its low bits).
_SCHEDULER_DEAD = re.compile(r"scheduler is dead\.")
_EXIT_CODE = re.compile(r"Exit code: (?P<code>-?\d+)$")
_CHILD_FAILED = re.compile(
    r"Child process unexpectedly failed with (?:an exit code |exitcode=)(\d+)"
)
# A traceback frame in the entry point of one of SGLang's processes (scheduler, detokenizer,
# data parallel controller): they report their failure to the main process, which kills the tree.
_SUBPROCESS_FRAME = re.compile(
    r"\bin run_(?:scheduler|detokenizer|data_parallel_controller)_process"
)
_CHAIN_SUPERSEDED = "during handling of the above exception, another exception occurred"

_MISSING_MODEL_TYPES = (
    "RepositoryNotFoundError",
    "GatedRepoError",
    "HFValidationError",
    "LocalEntryNotFoundError",
    "RevisionNotFoundError",
    "EntryNotFoundError",
)
_MISSING_MODEL_MARKS = (
    "is not a local folder and is not a valid model identifier",
    "does not appear to have a file named",
    "incorrect path_or_model_id",
    "repo id must be in the form",  # a local path that does not exist (huggingface_hub >= 0.23)
    "repository not found",
    "can't load the configuration of",
    "can't load tokenizer for",
    "trying to access a gated repo",
    "cannot access gated repo",
)
_HUB_HTTP_ERROR = re.compile(r"\b(?:401|403|404) client error\b.*huggingface\.co/")
_PORT_MARKS = ("address already in use", "[errno 98]", "errno: 98", "is used by a process already")
# sglang/srt/utils/network.py wait_port_available: "<name> at <port> is not available in 30
# seconds" (it names the holder only when it can find it).
_PORT_WAIT = re.compile(r" at \d+ is not available in \d+ seconds")
_OOM_MARKS = (
    "cuda out of memory",
    "cuda error: out of memory",
    "hip out of memory",
    "not enough memory. please try to increase --mem-fraction-static",
)
_NCCL_TYPES = ("DistBackendError", "DistNetworkError", "DistStoreError")
_NCCL_MARKS = (
    "nccl error",
    "watchdog caught collective operation timeout",
    "ncclunhandledcudaerror",
    "ncclsystemerror",
    "ncclinternalerror",
    "ncclremoteerror",
    "ncclinvalidusage",
)


class _Failure(NamedTuple):
    line: int  # its index in the tail
    text: str  # what the verdict shows: ``ExcType: message`` as printed
    cls: str | None  # the specific cause it names, None for any other exception
    process: str  # "main", a rank ("TP3", "DP1 TP0") or "scheduler" when SGLang said so
    python: bool  # a Python exception (not a fatal signal, a C++ abort or uvicorn's error)


def _plain(line: str) -> str:
    """A line without SGLang's record prefix, torch's ``[rankN]:`` prefix and outer blanks."""
    return _TORCH_RANK.sub("", strip_log_prefix(line.rstrip("\r\n")), count=1)


def _failures(tail: Sequence[str], lines: Sequence[str]) -> list[_Failure]:
    """Every failure the tail shows, in order: exceptions that ended a traceback (those the
    next one was raised "during handling" of are dropped), C++ terminations, torch's NCCL
    watchdog records, uvicorn's bind errors."""
    found: list[_Failure] = []
    process = "main"
    for index, text in enumerate(lines):
        record = log_record(tail[index])
        if record is not None and "hit an exception" in record.message:
            process = record.rank or "scheduler"
        elif record is not None:
            process = record.rank or "main"
        elif process == "main" and _SUBPROCESS_FRAME.search(text):
            process = "scheduler"  # a traceback through a subprocess's entry point
        failure = _failure_at(index, text, tail, lines)
        if failure is not None:
            exc_type, shown, detail = failure
            cls = _specific_class(exc_type, detail)
            python = bool(_EXCEPTION_LINE.match(shown))
            found.append(_Failure(index, shown, cls, process, python))
    return found


def _failure_at(
    index: int, text: str, tail: Sequence[str], lines: Sequence[str]
) -> tuple[str, str, str] | None:
    """(type, text to show, lowered text to match) when line ``index`` states a failure."""
    if _EXCEPTION_LINE.match(text):
        exc_type = text.split(":", 1)[0]
        if exc_type.endswith("Warning") or _superseded(index, tail, lines):
            return None
        return exc_type, text, _message(index, tail, lines)
    terminate = _CPP_TERMINATE.match(text)
    if terminate is not None:  # a C++ exception: its what() follows
        what = next((t for t in lines[index + 1 : index + 4] if t.startswith("what():")), "")
        detail = f"{text} {what}".lower()
        return terminate.group("type"), (what or text), detail
    if text.startswith("Fatal Python error: "):
        return "Fatal Python error", text, text.lower()
    record = _TORCH_ERROR_RECORD.match(text)
    if record is not None and "watchdog caught collective operation timeout" in text.lower():
        return "c10::DistBackendError", text[record.end() :], text.lower()
    uvicorn = _UVICORN_ERROR.match(text)
    if uvicorn is not None:
        return "uvicorn", text, text.lower()
    return None


def _message(index: int, tail: Sequence[str], lines: Sequence[str]) -> str:
    """The exception line and the lines its message continues on (a few at most), lowered."""
    parts = [lines[index]]
    for later in range(index + 1, min(index + 8, len(lines))):
        text = lines[later]
        if not text or text.startswith(("Traceback", "File ")) or _EXCEPTION_LINE.match(text):
            break
        if log_record(tail[later]) is not None or _TORCH_ERROR_RECORD.match(text):
            break
        if _CHAIN_SUPERSEDED in text.lower() or text.startswith("The above exception"):
            break
        parts.append(text)
    return " ".join(parts).lower()


def _superseded(index: int, tail: Sequence[str], lines: Sequence[str]) -> bool:
    """Raised while handling this exception, another one followed and ended the process."""
    for later in range(index + 1, min(index + 10, len(lines))):
        text = lines[later]
        if _CHAIN_SUPERSEDED in text.lower():
            return True
        if text.startswith(("Traceback", "The above exception")) or log_record(tail[later]):
            return False
    return False


def _specific_class(exc_type: str, detail: str) -> str | None:
    """The cause an exception names by its type and message, if it names one."""
    name = exc_type.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    if name in ("ModuleNotFoundError", "ImportError") or (
        name == "OSError" and ("undefined symbol" in detail or "shared object file" in detail)
    ):
        return IMPORT_ERROR
    if (
        name in _MISSING_MODEL_TYPES
        or any(mark in detail for mark in _MISSING_MODEL_MARKS)
        or _HUB_HTTP_ERROR.search(detail)
    ):
        return MODEL_NOT_FOUND
    if any(mark in detail for mark in _PORT_MARKS) or _PORT_WAIT.search(detail):
        return PORT_IN_USE
    if name == "OutOfMemoryError" or any(mark in detail for mark in _OOM_MARKS):
        return CUDA_OOM
    if name in _NCCL_TYPES or any(mark in detail for mark in _NCCL_MARKS):
        return NCCL
    return None


def _argparse_error(tail: Sequence[str]) -> str | None:
    for line in reversed(tail):
        text = line.strip()
        if log_record(text) is None and _ARGPARSE_ERROR.match(text):
            return text
    return None


def _dead_child(lines: Sequence[str]) -> tuple[int, int, str] | None:
    """(line, signal, SGLang's line) when SGLang reported a process of the server dead by a
    signal; the last such report."""
    found: tuple[int, int, str] | None = None
    for index, text in enumerate(lines):
        child = _CHILD_FAILED.search(text)
        status = int(child.group(1)) if child else 0
        if child and status & 0x7F in _REPORTED_SIGNALS:  # the raw wait status of waitpid
            found = (index, status & 0x7F, text)
        if _SCHEDULER_DEAD.search(text):
            for later in lines[index + 1 : index + 4]:
                code = _EXIT_CODE.search(later)
                if code and -int(code.group("code")) in _REPORTED_SIGNALS:
                    found = (index, -int(code.group("code")), text)
                    break
    return found


def _past_config(tail: Sequence[str]) -> bool:
    """The tail shows SGLang past accepting its configuration: its config line, or any record
    of a scheduler process (they are started after it)."""
    for line in tail:
        record = log_record(line)
        if record is not None and (record.rank is not None or config_line_payload(line)):
            return True
    return False


def _last_index(lines: Sequence[str], marks: Iterable[str]) -> int | None:
    wanted = tuple(marks)
    for index in range(len(lines) - 1, -1, -1):
        lowered = lines[index].lower()
        if any(mark in lowered for mark in wanted):
            return index
    return None


def _signal_number(returncode: int) -> int | None:
    """The signal that ended the process: -N from Python, 128+N as a shell or container says."""
    if returncode < 0:
        return -returncode
    if returncode - 128 in _REPORTED_SIGNALS:
        return returncode - 128
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
        delay = self.delay_s
        for _ in range(max(consecutive_failures - 1, 0)):  # stops growing at the cap: a crash
            if delay >= self.max_delay_s:  # loop of any length never overflows a float
                break
            delay *= self.multiplier
        return float(min(delay, self.max_delay_s))

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
    health_failures: int = 3  # consecutive /health failures after READY that make it UNHEALTHY
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
            health_failures=max(int(health.get("failures", 3)), 1),
            restart=RestartPolicy(**data["restart"]),
            stop_timeout_s=float(data.get("stop_timeout_s", 30.0)),
            log_max_bytes=int(data.get("log_max_bytes", 256 << 20)),
            log_keep=int(data.get("log_keep", 3)),
            cwd=data.get("cwd"),
            meta=dict(data.get("meta", {})),
        )


# Files the agent creates are never reached through a symlink (a planted one would make it write
# into a victim file) and get their mode at creation: O_NOFOLLOW, and O_EXCL where they are new.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def write_json_atomic(path: str, document: dict[str, Any], mode: int = 0o600) -> None:
    temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # ours, left by a process killed mid-write (same pid and thread: rare)
    fd = os.open(temp, _NEW_FILE, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(document, handle, indent=1, sort_keys=True)
        handle.write("\n")
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)  # replaces a symlink at ``path`` itself, never its target


def read_json(path: str) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, encoding="utf-8") as handle:
        data = json.load(handle)
    return data if isinstance(data, dict) else None


def open_append(path: str) -> int:
    """A private file appended to (events.jsonl, agent.log, a run's log), never via a symlink."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o600)


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
        # `stop --timeout S` for the supervisor that does the stopping: its grace this once
        self.stop_request = os.path.join(deployment_dir, "stop-request.json")

    def files(self) -> tuple[tuple[str, str], ...]:
        """The files the supervisor writes or acts on, named for messages."""
        return (
            ("state.json", self.state), ("events.jsonl", self.events),
            ("agent.log", self.agent_log), ("spec.json", self.spec),
            ("launch.sh", self.launch_script), (".lock", self.lock),
        )  # fmt: skip

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
        self._file = os.fdopen(open_append(path), "ab")  # lives as long as the run; 0600
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
        self._file = os.fdopen(open_append(self.path), "ab")
        self._size = 0

    def close(self) -> None:
        self._file.close()


# A line is noted (config line, ready line, the verdict's tail) by its first LINE_SCAN_BYTES;
# the log gets all of it. SGLang's config line is 12 KB (0.5.11) to 19 KB (0.5.23) and grows
# with inline templates and JSON overrides: a cap that cut it would keep a server from READY.
LINE_SCAN_BYTES = 1 << 20
# SGLang's startup memory lines (weights, pools, graphs, the capacity summary), in 0.5.11's and
# 0.5.23's words; kept per run in MEMORY_FILE, at most MEMORY_LINES of them (TP ranks x ~8).
MEMORY_MARKERS = (
    "avail mem=", "KV Cache is allocated", "KV cache allocated", "Mamba Cache is allocated",
    "max_total_num_tokens=", "is capped to",
)  # fmt: skip
MEMORY_LINES = 400
MEMORY_FILE = "memory_lines.json"
TAIL_LINE_CHARS = 16 << 10  # per line of the 400 kept for the exit verdict
_LINE_BREAK = re.compile(rb"[\r\n]")


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
        self.memory_lines: list[str] = []
        # The line being received: its first LINE_SCAN_BYTES, in pieces (never re-joined per
        # read: a 30 MB line without a newline took READY from 0.1 s to 68 s when it was).
        self._partial: list[bytes] = []
        self._partial_size = 0

    def feed(self, chunk: bytes) -> None:
        """Every byte goes to the log as it came; lines are noted up to LINE_SCAN_BYTES each.
        Linear in the output: each chunk is split once and never copied again."""
        self._sink.write(chunk)
        # tqdm redraws with \r: split on both so each progress update is a line
        pieces = _LINE_BREAK.split(chunk)
        self._extend(pieces[0])
        if len(pieces) == 1:
            return
        self._end_line()
        for piece in pieces[1:-1]:
            if piece:
                self._note(piece[:LINE_SCAN_BYTES].decode("utf-8", "replace"))
        self._extend(pieces[-1])

    def close(self) -> None:
        """The output ended: its last, unterminated line counts too."""
        self._end_line()
        self._sink.close()

    def _extend(self, piece: bytes) -> None:
        room = LINE_SCAN_BYTES - self._partial_size
        if piece and room > 0:
            kept = piece[:room]
            self._partial.append(kept)
            self._partial_size += len(kept)

    def _end_line(self) -> None:
        if self._partial:
            self._note(b"".join(self._partial).decode("utf-8", "replace"))
        self._partial = []
        self._partial_size = 0

    def _note(self, line: str) -> None:
        self.tail.append(line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS])
        if not self.saw_config_line and config_line_payload(line) is not None:
            self.saw_config_line = True
            self._keep_config(line)
        elif (
            self.saw_config_line
            and not self.saw_ready_line
            and len(self.memory_lines) < MEMORY_LINES
            and any(marker in line for marker in MEMORY_MARKERS)
        ):
            self.memory_lines.append(line[:TAIL_LINE_CHARS])
            self._keep_memory()
        if is_ready_line(line):
            self.saw_ready_line = True

    def _keep_memory(self) -> None:
        """SGLang's memory lines of this run's startup, beside its log: ``diff-effective``
        compares them with the plan's prediction (a rotated or huge log never hides them)."""
        if self.config_path is None:
            return
        path = os.path.join(os.path.dirname(self.config_path), MEMORY_FILE)
        with contextlib.suppress(OSError):
            write_json_atomic(path, {"lines": self.memory_lines}, 0o600)

    def _keep_config(self, line: str) -> None:
        """Keep the config line and what SGLang logged before it beside the log (which may
        rotate): ``orch diff-effective`` reads them from here."""
        if self.config_path is None:
            return
        document = {"server_args_line": line, "log_lines": list(self.tail)[:-1]}
        with contextlib.suppress(OSError):
            write_json_atomic(self.config_path, document, 0o600)


# -- process identity ---------------------------------------------------------------------------
# A pid is no identity: pids are reused, and after the supervisor died (OOM killer, crash) its
# recorded pids may name anybody's process. A process is the one recorded when its pid AND its
# start (the kernel's start time in clock ticks since boot, /proc/PID/stat field 22; psutil's
# create_time where there is no /proc) are those recorded at spawn: both are fixed for the
# process's life and unchanged by exec. ``exe`` and the head of ``cmdline`` are recorded for
# people (and refreshed when the server execs again); only the start decides. Checked before every
# signal and every "alive" claim: a mismatch is "gone", never "ours".

IDENTITY_CMDLINE_ITEMS = 3  # the program and how it was started: the rest may hold secrets


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return None if fields[0] == b"Z" else int(fields[19])  # state, ..., starttime (22)
    except (IndexError, ValueError):
        return None


def process_identity(pid: int) -> dict[str, Any] | None:
    """pid, start, exe and the head of cmdline of a running process; None when it is gone or a
    zombie."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            identity: dict[str, Any] = {
                "pid": pid,
                "start_ticks": _start_ticks(pid),
                "create_time": process.create_time(),
            }
            try:
                identity["exe"] = process.exe()
                identity["cmdline"] = process.cmdline()[:IDENTITY_CMDLINE_ITEMS]
            except psutil.Error:  # another user's process: no exe or cmdline to read
                identity["exe"], identity["cmdline"] = None, None
    except psutil.Error:
        return None
    return identity


def same_process(recorded: Any, now: dict[str, Any] | None) -> bool:
    """``now`` (process_identity) is the process ``recorded`` at spawn."""
    if not isinstance(recorded, dict) or now is None or recorded.get("pid") != now["pid"]:
        return False
    if recorded.get("start_ticks") is not None and now.get("start_ticks") is not None:
        return bool(recorded["start_ticks"] == now["start_ticks"])
    created = recorded.get("create_time")
    return isinstance(created, (int, float)) and abs(created - now["create_time"]) < 0.02


def verified_alive(recorded: Any) -> bool:
    """The recorded process runs, and it is still that process (not a reuse of its pid)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("pid"), int):
        return False
    return same_process(recorded, process_identity(int(recorded["pid"])))


def _legacy_identity(
    state: dict[str, Any], which: str, deployment_dir: str
) -> dict[str, Any] | None:
    """A state.json of the previous agent version recorded bare pids: accept one only when the
    process shows it is ours (the supervisor's argv names the deployment directory; the server
    carries the run's markers), then take its identity as it is now."""
    pid = state.get("agent_pid" if which == "agent" else "pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        import psutil

        process = psutil.Process(pid)
        if which == "agent":
            ours = deployment_dir in process.cmdline() and "start" in process.cmdline()
        else:
            environ = process.environ()
            ours = (
                environ.get(RUN_ID_ENV) == state.get("run_id")
                and environ.get(DEPLOYMENT_ENV) == deployment_dir
            )
    except Exception:  # noqa: BLE001 - psutil missing, gone, or not ours to read: not verified
        return None
    return process_identity(pid) if ours else None


def recorded_identity(
    state: dict[str, Any], which: str, deployment_dir: str
) -> dict[str, Any] | None:
    """The identity state.json recorded for ``which`` ("agent" or "server"), or, for a state of
    the previous agent version, the process's identity when it verifiably is ours."""
    recorded = state.get(which)
    if isinstance(recorded, dict):
        return recorded
    if state.get("identity_recorded"):
        return None  # this agent records one for every process it runs: none means none runs
    return _legacy_identity(state, which, deployment_dir)


# -- StrictModes: directories the agent trusts ----------------------------------------------------
# Like OpenSSH's StrictModes: the agent keeps the run spec (secrets included), state it acts on
# (pids it signals) and logs in these directories, and runs code from the workdir. A directory
# another user owns, or that group or others may write, is refused: anyone who can write there
# can plant a symlink that makes the agent write into a victim file, or a state that names a pid.


class UnsafePath(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def check_directory(path: str, what: str) -> bool:
    """Refuse (UnsafePath) a ``path`` that is a symlink, not a directory, not the user's, or
    writable by group or others; False when it does not exist."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise UnsafePath(
            f"the {what} {path} is {kind}",
            "remove it; orch creates the directory itself, owned by you and private (0700)",
        )
    if info.st_uid != os.getuid():
        raise UnsafePath(
            f"the {what} {path} belongs to uid {info.st_uid}, not to this user (uid {os.getuid()})",
            "use a workdir of your own (hosts.<host>.workdir): orch keeps the server's "
            "environment and its state there",
        )
    if info.st_mode & 0o022:
        raise UnsafePath(
            f"the {what} {path} is writable by group or others (mode {info.st_mode & 0o7777:04o})",
            f"chmod go-w {path} (orch makes its own directories 0700): anyone who can write "
            "there can plant files the supervisor would write into or act on",
        )
    return True


def check_file(path: str, what: str) -> None:
    """Refuse a file the agent writes or acts on that is a symlink or someone else's."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise UnsafePath(
            f"{what} {path} is {kind}: refusing to follow it",
            f"remove it (rm {path}); nobody but you should write in {os.path.dirname(path)}",
        )
    if info.st_uid != os.getuid():
        raise UnsafePath(
            f"{what} {path} belongs to uid {info.st_uid}, not to this user",
            f"remove it; nobody but you should be able to write in {os.path.dirname(path)}",
        )


def secure_deployment(paths: Paths, *, create: bool = False) -> bool:
    """StrictModes for a deployment: its workdir, the workdir's ``.orch``, the deployment and its
    runs directory, and the files the supervisor writes there. With ``create``, make what is
    missing (0700) and tighten the deployment's own directories to 0700. False when the
    deployment directory does not exist (and ``create`` is not set)."""
    workdir = os.path.dirname(paths.root)
    check_directory(workdir, "workdir")
    check_directory(os.path.join(workdir, ".orch"), "agent directory")
    if create:
        os.makedirs(paths.root, mode=0o700, exist_ok=True)
    if not check_directory(paths.root, "deployment directory"):
        return False
    for name, path in paths.files():
        check_file(path, name)
    if create:
        os.makedirs(paths.runs, mode=0o700, exist_ok=True)
    check_directory(paths.runs, "runs directory")
    if create:
        for directory in (paths.root, paths.runs):
            os.chmod(directory, 0o700)
    return True


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

    def health_ok(self, host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool: ...

    def memory_loads(self, host: str, port: int) -> dict[str, Any]:
        """``GET /v1/loads?include=memory`` once READY: ``{"memory_loads": [...]}``, or
        ``{"memory_loads_error": why}`` (an older SGLang, another server)."""

    def signal_group(self, pgid: int, sig: int) -> None:
        """Signal a process group; one that is gone already is no error."""

    def identity(self, pid: int) -> dict[str, Any] | None:
        """``process_identity``: pid, start, exe, head of cmdline; None when gone."""

    def received(self, pid: int, env_names: Sequence[str]) -> dict[str, Any] | None:
        """What the process runs as now: ``exe``, ``argv`` (/proc/PID/cmdline) and, of its
        environment, only ``env_names`` (``env``); None when it cannot be read."""

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

    def health_ok(self, host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool:
        return _health_ok(host, port, endpoint, timeout)

    def memory_loads(self, host: str, port: int) -> dict[str, Any]:
        return _memory_loads(host, port)

    def signal_group(self, pgid: int, sig: int) -> None:
        _signal_group(pgid, sig)

    def identity(self, pid: int) -> dict[str, Any] | None:
        return process_identity(pid)

    def received(self, pid: int, env_names: Sequence[str]) -> dict[str, Any] | None:
        try:
            facts = _proc_facts(pid, set(env_names))
        except OSError:  # it ended while being read: the last snapshot stands
            return None
        if not facts.get("argv"):
            return None
        try:
            exe: str | None = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            exe = None
        return {"exe": exe, "argv": facts["argv"], "env": facts.get("env", {})}

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
        """Read as fast as the server writes (a full pipe blocks the server): each read is
        fed once, in time linear in its size, whatever the length of the lines."""
        fd = self._stream.fileno()
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                self._output.feed(chunk)
        finally:
            self._output.close()
            self._stream.close()

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
        self.stop_grace_s: float | None = None  # this stop's grace, when `stop` gave one
        self.state: dict[str, Any] = {
            "protocol": PROTOCOL,
            "deployment": spec.deployment,
            "agent_pid": os.getpid(),
            "agent": self.world.identity(os.getpid()),  # checked before any "alive" or signal
            "identity_recorded": True,  # "server": None then means no server, not an old agent
            "state": INITIAL_STATE,
            "pid": None,
            "pgid": None,
            "server": None,  # the server's identity (process_identity) while it runs
            "run_id": None,
            "run_dir": None,
            "log": None,
            "received": None,  # runs/<id>/received.json: what the server was exec'd with
            "port": spec.port,
            "starts": 0,
            "restarts": 0,
            "ready": False,
            "health_failures": 0,  # consecutive /health failures after READY
            "adopted": False,  # a server this supervisor took over from a dead one
            "output_lost": False,  # its output went with the dead supervisor's pipe
            "started_at": None,
            "started_mono": None,
            "ready_at": None,
            "ready_by": None,  # "health": READY means /health answered 200
            "state_since": self.clock.wall(),
            "next_start_at": None,
            "last_exit": None,
            "message": "",
            "meta": spec.meta,
        }
        self._start_times: deque[float] = deque(maxlen=max(spec.restart.start_limit, 1) * 2)
        self._run_seq = _last_run_seq(paths.runs)
        self._received_key: tuple[Any, ...] | None = None

    def resume(self, recorded: dict[str, Any]) -> None:
        """Continue from the state a dead supervisor recorded (``adopt``, or ``stop`` finishing
        its duty): its state is this one's starting point, as STARTING is a new one's."""
        own = {key: self.state[key] for key in ("protocol", "agent_pid", "agent", "meta")}
        self.state = dict(recorded, **own, identity_recorded=True)
        self.state.setdefault("server", None)

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
        with os.fdopen(open_append(self.paths.events), "a", encoding="utf-8") as handle:
            handle.write(json.dumps(record, sort_keys=True) + "\n")

    # -- main loop --

    def run(self, adopted: ServerProcess | None = None) -> int:
        """Start the server (or watch ``adopted``, a running one taken over), restart it by
        policy, until stopped or final."""
        consecutive_failures = 0
        while not self.stop_requested.is_set():
            self._start_times.append(self.clock.monotonic())
            returncode, verdict, was_ready = self._run_once(adopted)
            adopted = None
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
            script = _read_bytes(self.paths.launch_script)
            _write_private(os.path.join(run_dir, "launch.sh"), script)
        _write_private(os.path.join(run_dir, "spec.json"), _read_bytes(self.paths.spec))
        return run_id, run_dir

    def _run_once(self, adopted: ServerProcess | None = None) -> tuple[int, ExitVerdict, bool]:
        if adopted is not None:
            return self._watch(adopted, None)
        spawned = self._spawn()
        if isinstance(spawned, ExitVerdict):
            return 127, spawned, False
        return self._watch(*spawned)

    def _spawn(self) -> tuple[ServerProcess, OutputWatcher] | ExitVerdict:
        run_id, run_dir = self._new_run_dir()
        log_path = os.path.join(run_dir, "server.log")
        env = dict(os.environ)
        env.update(self.spec.env)
        env[RUN_ID_ENV] = run_id
        env[DEPLOYMENT_ENV] = self.paths.root
        sink = LogSink(log_path, self.spec.log_max_bytes, self.spec.log_keep)
        watcher = OutputWatcher(sink, config_path=os.path.join(run_dir, CONFIG_FILE))
        self._received_key = None
        try:
            process = self.world.spawn(self.spec.argv, self.spec.cwd or run_dir, env, watcher)
        except OSError as exc:
            why = spawn_failure(self.spec.argv, exc)
            sink.write(f"orch agent: {why}\n".encode())
            sink.close()
            # The run exists (its directory and log say why): up finds its verdict by run id.
            self._update(
                run_id=run_id, run_dir=run_dir, log=log_path, started_at=self.clock.wall(),
                starts=self.state["starts"] + 1, server=None, message=why,
            )  # fmt: skip
            verdict = ExitVerdict(SPAWN_FAILED, why)
            self._record_exit(run_id, 127, verdict)
            return verdict
        spawned = {
            "pid": process.pid,
            "pgid": process.pid,
            "server": self.world.identity(process.pid),
            "run_id": run_id,
            "run_dir": run_dir,
            "log": log_path,
            "received": None,
            "starts": self.state["starts"] + 1,
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
        if self.state["state"] == STARTING:  # the first start: the supervisor began there
            self._update(**spawned)
        else:
            self._change_state(STARTING, **spawned)
        self._event("start", run_id=run_id, pid=process.pid)
        return process, watcher

    def _watch(
        self, process: ServerProcess, watcher: OutputWatcher | None
    ) -> tuple[int, ExitVerdict, bool]:
        """Until the server ends: RUNNING at its config line, READY on /health, its liveness
        after READY, the startup timeout, a stop request. ``watcher`` is None for an adopted
        server (its output went with the supervisor that died)."""
        run_id = str(self.state["run_id"])
        spec = self.spec
        started = self.clock.monotonic() if watcher is None else self.state["started_mono"]
        past_config = watcher is None and self.state["state"] != STARTING
        tracked = _Descendants(process.pid, self.clock, self.world)
        next_health = started if not self.state["ready"] else started + spec.health_interval_s
        probe_timeout = min(max(spec.health_interval_s, 0.2), 5.0)  # a probe never outlasts
        ready_line_at: float | None = None  # the interval: detection in interval x failures
        failures = 0
        ended_by: ExitVerdict | None = None
        while process.poll() is None:
            if self.stop_requested.is_set():
                self._stop_process(process, tracked)
                break
            saw_config = past_config or (watcher is not None and watcher.saw_config_line)
            if watcher is not None and not self.state["ready"]:
                self._note_received(process.pid)
            if self.state["state"] == STARTING and saw_config:
                self._change_state(RUNNING)
            now = self.clock.monotonic()
            if not self.state["ready"]:
                # READY when /health answers 200 once SGLang has accepted its configuration.
                # The ready line alone is never enough (with --skip-server-warmup SGLang logs
                # it before uvicorn binds the port; a hung server may have logged it): it only
                # makes the checks frequent. /health never answering is a startup timeout.
                healthy = False
                if watcher is not None and watcher.saw_ready_line and ready_line_at is None:
                    ready_line_at = now
                    next_health = now
                if now >= next_health and saw_config:
                    healthy = self.world.health_ok(
                        spec.health_host, spec.port, spec.health_endpoint
                    )
                    fast = ready_line_at is not None
                    next_health = now + (0.1 if fast else min(spec.health_interval_s, 1.0))
                if healthy:
                    self._change_state(
                        READY, ready=True, ready_at=self.clock.wall(), ready_by="health"
                    )
                    self._event("ready", run_id=run_id)
                    # what the server says of its memory, once: the pools do not change after
                    # READY, and a status call never waits on the server for them
                    self._update(**self.world.memory_loads(spec.health_host, spec.port))
                    next_health = self.clock.monotonic() + spec.health_interval_s
                elif now - started > spec.startup_timeout_s:
                    why = f"not READY after {spec.startup_timeout_s:g} s (health.startup_timeout_s)"
                    ended_by = self._give_up(process, tracked, STARTUP_TIMEOUT, why)
                    break
            elif now >= next_health:
                # Liveness, as a Kubernetes liveness probe: every interval, a probe that never
                # outlasts it; health.failures failures in a row make the server UNHEALTHY.
                next_health = now + spec.health_interval_s
                if self.world.health_ok(
                    spec.health_host, spec.port, spec.health_endpoint, probe_timeout
                ):
                    if failures:
                        failures = 0
                        self._update(health_failures=0)
                else:
                    failures += 1
                    self._update(health_failures=failures)
                    if failures >= spec.health_failures:
                        why = (
                            f"{spec.health_endpoint} failed {failures} times in a row "
                            f"({spec.health_interval_s:g} s apart) after READY"
                        )
                        self._change_state(UNHEALTHY, message=f"{why}: stopping it")
                        self._event("unhealthy", run_id=run_id, failures=failures)
                        ended_by = self._give_up(process, tracked, HUNG, f"{why}: stopped")
                        break
            tracked.refresh()
            self.clock.sleep(0.05)
        returncode = process.wait()
        # Children that outlive the server hold its output pipe open: give the last lines a
        # moment, give the verdict at once, then sweep (which closes the pipe for good).
        process.drain(0.2)
        was_ready = bool(self.state["ready"])
        if self.stop_requested.is_set() and ended_by is None:
            verdict = ExitVerdict(STOPPED, "stopped on request")
        elif ended_by is not None:
            verdict = ended_by
        elif watcher is None:
            verdict = ExitVerdict(
                LOST,
                "the adopted server ended; its exit status and last lines are unknown (it was "
                "not this supervisor's child, and its output went with the one that died)",
            )
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
        self._received_key = key
        path = os.path.join(str(self.state["run_dir"]), RECEIVED_FILE)
        document = dict(facts, pid=pid, run_id=self.state["run_id"], at=self.clock.wall())
        write_json_atomic(path, document, 0o600)
        server = dict(self.state.get("server") or {"pid": pid})
        server.update(exe=facts.get("exe"), cmdline=list(key[1])[:IDENTITY_CMDLINE_ITEMS])
        self._update(received=path, server=server)
        self._event("received", run_id=self.state["run_id"], exe=facts.get("exe"))

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
        self._update(pid=None, server=None, ready=False, last_exit=last_exit)
        self._event("exit", **last_exit)

    def _signal(self, process: ServerProcess, sig: int) -> None:
        """Signal the server's group while it is still ours: a child not yet reaped (its pid
        cannot be reused), or an adopted server whose identity still matches."""
        if process.poll() is None:
            self.world.signal_group(process.pid, sig)

    def _terminate(self, process: ServerProcess, tracked: _Descendants) -> None:
        """SIGTERM to the group (and SIGCONT: a stopped process never sees its SIGTERM), the
        grace, then SIGKILL."""
        self._signal(process, signal.SIGTERM)
        self._signal(process, signal.SIGCONT)
        grace = self.spec.stop_timeout_s if self.stop_grace_s is None else self.stop_grace_s
        deadline = self.clock.monotonic() + grace
        while process.poll() is None and self.clock.monotonic() < deadline:
            tracked.refresh()
            self.clock.sleep(0.05)
        self._signal(process, signal.SIGKILL)
        process.wait()

    def _stop_process(self, process: ServerProcess, tracked: _Descendants) -> None:
        self._change_state(STOPPING, message="stopping")
        request = read_json(self.paths.stop_request)  # `orch down --timeout S`
        if request is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.paths.stop_request)
            grace = request.get("grace_s")
            if isinstance(grace, (int, float)) and 0 <= grace < 366 * 86400:
                self.stop_grace_s = float(grace)
        self._terminate(process, tracked)

    def _give_up(
        self, process: ServerProcess, tracked: _Descendants, cls: str, why: str
    ) -> ExitVerdict:
        """The supervisor ends the server itself (hung, or not READY in time): its verdict."""
        if self.state["state"] != UNHEALTHY:
            self._update(message=f"{cls}: {why}; stopping it")
        self._event(cls, run_id=self.state["run_id"], message=why)
        self._terminate(process, tracked)
        return ExitVerdict(cls, why)

    def _sweep(self, run_id: str, tracked: _Descendants) -> list[int]:
        """Kill what is left of the run: the group, then anything carrying the run's marker or
        seen as a descendant (reparented schedulers keep GPU memory otherwise)."""
        pgid = self.state.get("pgid")
        if pgid:
            self.world.signal_group(int(pgid), signal.SIGKILL)
            self._update(pgid=None)
        return self.world.sweep(self.paths.root, run_id, tracked.seen)


RECEIVED_FILE = "received.json"  # beside each run's log: what the server was exec'd with
LOST_RETURNCODE = 255  # an adopted server's end: not our child, its status is unknown


def spawn_failure(argv: Sequence[str], exc: OSError) -> str:
    """Why the server could not be started, in words that say what to fix."""
    program = argv[0] if argv else "?"
    why = f"cannot start {program}: {exc.strerror or exc}"
    if exc.errno == errno.E2BIG:
        longest = max((len(arg.encode()) for arg in argv), default=0)
        why += (
            f" (the longest argument is {longest} bytes; the kernel refuses any single "
            "argument over 128 KiB, MAX_ARG_STRLEN, and all of them with the environment over "
            "ARG_MAX)"
        )
    elif exc.errno == errno.ENOEXEC:
        why += " (not a program this host can run: a script without #!, or another architecture)"
    elif exc.errno == errno.ENOENT and os.path.exists(program):
        why += " (the program exists: the interpreter on its #! line does not)"
    return why


class _Adopted:
    """A running server whose supervisor died, taken over by this one: not its child (no exit
    status, no pipe), so it is watched by identity, checked at every poll."""

    def __init__(self, identity: dict[str, Any], world: World, clock: Clock) -> None:
        self.pid = int(identity["pid"])
        self._identity = identity
        self._world = world
        self._clock = clock
        self._returncode: int | None = None

    def poll(self) -> int | None:
        if self._returncode is None and not same_process(
            self._identity, self._world.identity(self.pid)
        ):
            self._returncode = LOST_RETURNCODE
        return self._returncode

    def wait(self) -> int:
        while self.poll() is None:
            self._clock.sleep(0.05)
        return LOST_RETURNCODE

    def drain(self, timeout: float) -> None:
        """Nothing to read: its output went with the supervisor that died."""


def _write_private(path: str, data: bytes) -> None:
    fd = os.open(path, _NEW_FILE, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)


def _read_bytes(path: str) -> bytes:
    try:
        with os.fdopen(os.open(path, os.O_RDONLY | _NOFOLLOW), "rb") as handle:
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


def _health_ok(host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool:
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}{endpoint}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
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
    fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES):
            return None
        raise
    os.set_inheritable(fd, False)
    return fd


def _read_spec(spec_path: str) -> Spec:
    check_file(spec_path, "the run spec")
    raw = read_json(spec_path)
    if raw is None:
        raise ValueError(f"{spec_path}: no run spec")
    return Spec.from_json(raw)  # fail here, attached, on a bad spec


def _start_detached(paths: Paths, port: int) -> tuple[int | None, dict[str, Any] | None]:
    """Fork twice. In the caller: (None, the supervisor's answer). In the supervisor, detached
    and holding the deployment's and the port's locks: (the answer pipe, None); it exits
    itself when it cannot take them."""
    reader, writer = os.pipe()
    first = os.fork()
    if first:
        os.close(writer)
        with os.fdopen(reader, "rb") as pipe:
            answer = pipe.read()
        os.waitpid(first, 0)
        if not answer:
            return None, {
                "ok": False,
                "reason": "the supervisor died while starting; see agent.log",
            }
        result: dict[str, Any] = json.loads(answer)
        return None, result
    # first child: new session, then fork again so the supervisor is no session leader
    os.close(reader)
    os.setsid()
    if os.fork():
        os._exit(0)
    _become_daemon(paths)
    deployment_lock = _lock(paths.lock)
    port_lock = _lock(paths.port_lock(port)) if deployment_lock is not None else None
    if deployment_lock is None or port_lock is None:
        holder = read_json(paths.state)
        which = "deployment" if deployment_lock is None else f"port {port}"
        _answer(
            writer,
            {
                "ok": False,
                "reason": f"locked: another supervisor holds the {which}",
                "holder": holder,
            },
        )
        os._exit(0)
    return writer, None


def _supervise(supervisor: Supervisor, writer: int, adopted: ServerProcess | None) -> None:
    """In the detached supervisor: answer the caller once the server is spawned (or could not
    be), then run until stopped; never returns."""
    clock = supervisor.clock
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
        supervisor.run(adopted)
    except Exception as exc:
        supervisor.fail(f"agent error: {type(exc).__name__}: {exc}")
        raise
    finally:
        answered.wait(timeout=1.0)
    os._exit(0)


def cmd_start(deployment_dir: str, spec_path: str) -> dict[str, Any]:
    """Detach a supervisor; answers once it holds its locks and has spawned the server."""
    paths = Paths(deployment_dir)
    try:
        secure_deployment(paths, create=True)
        spec = _read_spec(spec_path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(spec_path)  # it holds the server's environment: never left behind
        raise
    writer, answer = _start_detached(paths, spec.port)
    if writer is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spec_path)
        return answer or {}
    os.replace(spec_path, paths.spec)
    os.chmod(paths.spec, 0o600)
    supervisor = Supervisor(spec, paths, clock=RealClock())
    _supervise(supervisor, writer, None)
    return {}  # never reached: the supervisor exits itself


ADOPTABLE = (STARTING, RUNNING, READY)


def cmd_adopt(deployment_dir: str) -> dict[str, Any]:
    """Detach a new supervisor for a running server whose supervisor died: it takes over its
    liveness, restarts and stop without restarting it. Its output is lost (the pipe's reader
    died with the old supervisor); a restart gets a new run with a log again."""
    paths = Paths(deployment_dir)
    if not secure_deployment(paths):
        return {"ok": False, "reason": f"{deployment_dir}: not deployed"}
    state = read_json(paths.state)
    if state is None:
        return {"ok": False, "reason": f"{deployment_dir}: no state to adopt"}
    if verified_alive(recorded_identity(state, "agent", deployment_dir)):
        return {"ok": False, "reason": "its supervisor runs: nothing to adopt", "holder": state}
    server = recorded_identity(state, "server", deployment_dir)
    if not verified_alive(server) or server is None:
        return {"ok": False, "reason": "no server of this deployment runs: nothing to adopt"}
    if state.get("state") not in ADOPTABLE:
        return {
            "ok": False,
            "reason": f"its supervisor died while {state.get('state')}: orch down stops the server",
        }
    spec = _read_spec(paths.spec)
    writer, answer = _start_detached(paths, spec.port)
    if writer is None:
        return answer or {}
    supervisor = Supervisor(spec, paths, clock=RealClock())
    if not verified_alive(server):  # it ended while this supervisor was detaching
        _answer(writer, {"ok": False, "reason": "the server ended while being adopted"})
        os._exit(0)
    dead = state.get("agent_pid")
    supervisor.resume(state)
    note = (
        f"orch agent: the supervisor (pid {dead}) died; supervisor pid {os.getpid()} adopted "
        f"server pid {server['pid']}: what it printed since is lost (its pipe's reader died)\n"
    )
    with contextlib.suppress(OSError), os.fdopen(open_append(str(state.get("log"))), "a") as log:
        log.write(note)
    supervisor._update(
        server=server, pid=server["pid"], pgid=server["pid"], adopted=True, output_lost=True,
        message=f"adopted: its supervisor (pid {dead}) died; its output since is lost",
    )  # fmt: skip
    supervisor._event("adopted", run_id=state.get("run_id"), pid=server["pid"], previous=dead)
    _supervise(supervisor, writer, _Adopted(server, supervisor.world, supervisor.clock))
    return {}  # never reached


def _become_daemon(paths: Paths) -> None:
    """No terminal, no SSH channel: stdin from /dev/null, output to the agent's own log."""
    os.chdir("/")
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    log = open_append(paths.agent_log)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)


def _answer(fd: int, document: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):
        os.write(fd, json.dumps(document).encode())
        os.close(fd)


def cmd_status(deployment_dir: str) -> dict[str, Any]:
    """The state as recorded, with what is true now: the supervisor and the server are alive
    only when their recorded identities match a running process (a reused pid is "gone"). A
    dead supervisor with a live server is UNSUPERVISED."""
    paths = Paths(deployment_dir)
    state = read_json(paths.state) if secure_deployment(paths) else None
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    agent_alive = verified_alive(recorded_identity(state, "agent", deployment_dir))
    if not agent_alive:
        # It may have recorded its end and exited between the read above and that check (a
        # server that died with restart=no: EXITED, then the supervisor exits): what it wrote
        # last is the truth, never "it died without an end".
        state = read_json(paths.state) or state
    server_alive = verified_alive(recorded_identity(state, "server", deployment_dir))
    state["deployed"] = True
    state["agent_alive"] = agent_alive
    state["server_alive"] = server_alive
    if not server_alive and state.get("pid"):
        state["recorded_pid"], state["pid"] = state["pid"], None  # gone: never shown as ours
    started = state.get("started_mono")
    state["uptime_s"] = (time.monotonic() - started) if started and server_alive else None
    if not agent_alive and state.get("state") not in TERMINAL_STATES:
        state["stale"] = True  # the supervisor died without recording an end
        if server_alive:
            state["recorded_state"], state["state"] = state.get("state"), UNSUPERVISED
            state["output_lost"] = True
            state["message"] = (
                f"its supervisor (pid {state.get('agent_pid')}) died; the server runs "
                "unsupervised and its output is lost: orch up re-attaches one, orch down stops it"
            )
    if not server_alive:
        state.pop("memory_loads", None)  # figures of a server that is gone
    return state


LOADS_TIMEOUT_S = 1.0


def _memory_loads(host: str, port: int) -> dict[str, Any]:
    """What the server says of its memory once READY (``GET /v1/loads?include=memory``,
    0.5.11+): per DP rank, the weights, KV cache and CUDA graphs in GB, its token capacity."""
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}/v1/loads?include=memory"
    try:
        with urllib.request.urlopen(url, timeout=LOADS_TIMEOUT_S) as response:
            document = json.loads(response.read(1 << 20))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"memory_loads_error": f"/v1/loads: {exc}"}
    loads = document.get("loads") if isinstance(document, dict) else None
    if not isinstance(loads, list):
        return {"memory_loads_error": "/v1/loads: no loads in the answer"}
    kept = ("dp_rank", "memory", "max_total_num_tokens", "max_running_requests",
            "num_running_reqs", "token_usage")  # fmt: skip
    return {
        "memory_loads": [
            {key: load[key] for key in kept if key in load}
            for load in loads
            if isinstance(load, dict)
        ]
    }


def cmd_stop(deployment_dir: str, timeout: float) -> dict[str, Any]:
    """Stop the deployment: through its supervisor when it runs; when it died, stop the server
    it left (verified by identity) the same way and record the end in state.json, so that a
    second stop finds nothing to do. Nothing that is not verifiably ours is signalled."""
    paths = Paths(deployment_dir)
    state = read_json(paths.state) if secure_deployment(paths) else None
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    clock = RealClock()
    agent = recorded_identity(state, "agent", deployment_dir)
    if verified_alive(agent) and agent is not None:
        write_json_atomic(paths.stop_request, {"grace_s": timeout})
        os.kill(int(agent["pid"]), signal.SIGTERM)
        deadline = clock.monotonic() + timeout + 10.0
        while verified_alive(agent) and clock.monotonic() < deadline:
            clock.sleep(0.05)
        if verified_alive(agent):  # it did not finish in time: take over its last duty
            os.kill(int(agent["pid"]), signal.SIGKILL)
            clock.sleep(0.1)
        with contextlib.suppress(OSError):
            os.unlink(paths.stop_request)  # not read when it stopped in BACKOFF
    final = read_json(paths.state) or state
    leftovers: list[int] = []
    if final.get("state") not in TERMINAL_STATES:
        leftovers = _stop_for_a_dead_supervisor(paths, final, timeout, clock)
    elif final.get("run_id"):
        leftovers = _kill_leftovers(paths.root, str(final["run_id"]), {}, clock)
    result = cmd_status(deployment_dir)
    result["leftovers_killed"] = leftovers
    return result


def _stop_for_a_dead_supervisor(
    paths: Paths, recorded: dict[str, Any], timeout: float, clock: Clock
) -> list[int]:
    """The supervisor died without recording an end: stop its server if it is still the one
    recorded (group SIGTERM, grace, SIGKILL, sweep), then record the end as it would have."""
    spec = _spec_for(paths, recorded)
    stopper = Supervisor(spec, paths, clock=clock)
    stopper.stop_grace_s = timeout
    stopper.resume(recorded)
    server = recorded_identity(recorded, "server", paths.root)
    run_id = str(recorded.get("run_id") or "")
    message = f"stopped; its supervisor (pid {recorded.get('agent_pid')}) had died"
    if verified_alive(server) and server is not None:
        stopper._change_state(STOPPING, message="stopping (its supervisor had died)")
        process = _Adopted(server, stopper.world, clock)
        stopper._terminate(process, _Descendants(process.pid, clock, stopper.world))
        stopper._record_exit(run_id, LOST_RETURNCODE, ExitVerdict(STOPPED, message))
    elif run_id and (stopper.state.get("last_exit") or {}).get("run_id") != run_id:
        lost = ExitVerdict(LOST, "its supervisor died and the server was gone when stopped")
        stopper._record_exit(run_id, LOST_RETURNCODE, lost)
    swept = _kill_leftovers(paths.root, run_id, {}, clock) if run_id else []
    stopper._change_state(EXITED, pid=None, pgid=None, server=None, message=message)
    stopper._event("stopped", supervisor_died=True, swept=swept)
    return swept


def _spec_for(paths: Paths, state: dict[str, Any]) -> Spec:
    try:
        return _read_spec(paths.spec)
    except (OSError, ValueError, KeyError, TypeError):
        return Spec(
            deployment=str(state.get("deployment") or os.path.basename(paths.root)), argv=(),
            env={}, port=int(state.get("port") or 0), health_host="127.0.0.1",
            health_endpoint="/health", health_interval_s=5.0, startup_timeout_s=1800.0,
            restart=RestartPolicy(), meta=dict(state.get("meta") or {}),
        )  # fmt: skip


def cmd_runs(deployment_dir: str, events_bytes: int = 4 << 20) -> dict[str, Any]:
    """Every run of the deployment (its directory under ``runs/``) with its log, and from the
    last ``events_bytes`` of events.jsonl (whatever its size) its start, READY and exit (class,
    status, message); ``now`` is this host's clock, for the length of a run still going."""
    paths = Paths(deployment_dir)
    secure_deployment(paths)
    events: dict[str, dict[str, Any]] = {}
    tail: list[bytes] = []
    try:
        handle = os.fdopen(os.open(paths.events, os.O_RDONLY | _NOFOLLOW), "rb")
    except FileNotFoundError:
        handle = None
    if handle is not None:
        with handle:
            events_size = os.fstat(handle.fileno()).st_size
            handle.seek(max(events_size - events_bytes, 0))
            tail = handle.read(events_bytes).splitlines()
            if events_size > events_bytes:
                tail = tail[1:]  # the first line is cut
    for raw in tail:
        try:
            record = json.loads(raw)
        except ValueError:
            continue
        run_id = record.get("run_id") if isinstance(record, dict) else None
        if not isinstance(run_id, str):
            continue
        known = events.setdefault(run_id, {})
        kind = record.get("event")
        if kind == "start":
            known.update(started_at=record.get("at"), pid=record.get("pid"))
        elif kind == "ready":
            known["ready_at"] = record.get("at")
        elif kind == "exit":
            known["exit"] = {key: record.get(key) for key in (
                "run_id", "returncode", "signal", "class", "message", "at", "was_ready",
            )}  # fmt: skip
            known["exit"]["swept_pids"] = []
        elif kind == "swept" and isinstance(known.get("exit"), dict):
            known["exit"]["swept_pids"] = record.get("pids") or []
    runs_dir = paths.runs
    runs = []
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        log = os.path.join(runs_dir, name, "server.log")
        size = os.path.getsize(log) if os.path.exists(log) else None
        known = events.get(name, {})
        runs.append({
            "run_id": name, "log": log, "size": size, "started_at": known.get("started_at"),
            "ready_at": known.get("ready_at"), "pid": known.get("pid"), "exit": known.get("exit"),
        })  # fmt: skip
    return {"protocol": PROTOCOL, "runs": runs, "now": RealClock().wall()}


def cmd_inspect(
    deployment_dir: str,
    pid: int | None,
    port: int | None,
    host: str,
    env_names: Sequence[str],
    log: str | None,
) -> dict[str, Any]:
    """What a server received and what it resolved, for ``orch diff-effective``.

    The server is ``pid`` when given, else the deployment's server when it runs (verified by
    identity), else whatever listens on ``port`` (a server started by hand). From it:
    ``/proc/PID/cmdline`` and, of its environment, only ``env_names`` (the rest may hold other
    people's secrets); ``/server_info`` (``/get_server_info`` on old versions) asked on the
    host; and from its log the ``server_args=`` line with the lines logged before it (SGLang
    explains its changes there). When orch's last run is gone: what it was exec'd with
    (``received.json``), and how it ended.
    """
    result: dict[str, Any] = {"protocol": PROTOCOL, "pid": None, "found_by": "", "alive": False}
    paths = Paths(deployment_dir)
    state = (read_json(paths.state) if secure_deployment(paths) else None) or {}
    if state:
        result["last_run"] = {"run_id": state.get("run_id"), "state": state.get("state")}
        ended = state.get("last_exit")
        if isinstance(ended, dict) and ended.get("run_id") == state.get("run_id"):
            result["last_run"]["exit"] = {
                "class": ended.get("class"), "message": ended.get("message"),
            }  # fmt: skip
    server = recorded_identity(state, "server", deployment_dir) if state else None
    if pid is not None:
        result.update(pid=pid, found_by="pid")
    elif server is not None and verified_alive(server):
        result.update(pid=int(server["pid"]), found_by="orch")
    elif port is not None:
        holder = _port_holder(port)
        if holder and holder.get("pid"):
            result.update(pid=int(holder["pid"]), found_by="port")
    if log is None and result["found_by"] in ("orch", ""):
        log = state.get("log")  # orch's run, or its last one: its config line still tells
    port = port or state.get("port")
    target = result["pid"]
    if target is not None:
        result.update(_proc_facts(int(target), set(env_names)))
    elif state.get("run_dir"):
        snapshot = os.path.join(str(state["run_dir"]), RECEIVED_FILE)
        received = read_json(snapshot)
        if received is not None and isinstance(received.get("argv"), list):
            env: dict[str, Any] = received["env"] if isinstance(received.get("env"), dict) else {}
            result.update(
                pid=received.get("pid"), found_by="orch", alive=False, argv=received["argv"],
                env={name: value for name, value in env.items() if name in env_names},
                received_file=snapshot, received_at=received.get("at"),
            )  # fmt: skip
    if result["alive"] and port:
        result.update(_server_info(host, int(port)))
    if log:
        result["log"] = log
        kept = read_json(os.path.join(os.path.dirname(log), CONFIG_FILE))
        result.update(kept if kept is not None else _config_from_log(log))
        memory = read_json(os.path.join(os.path.dirname(log), MEMORY_FILE))
        if memory is not None and isinstance(memory.get("lines"), list):
            result["memory_lines"] = [str(line) for line in memory["lines"]]
    meta = state.get("meta")
    if result["found_by"] in ("orch", "") and isinstance(meta, dict):
        predicted = meta.get("memory_plan")
        if isinstance(predicted, dict):
            result["memory_plan"] = predicted  # what the plan predicted at orch up
    return result


def _proc_facts(pid: int, env_names: set[str]) -> dict[str, Any]:
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/cmdline", "rb") as handle:
            argv = [a.decode("utf-8", "surrogateescape") for a in handle.read().split(b"\0")[:-1]]
        with open(f"{base}/environ", "rb") as handle:
            pairs = [e.decode("utf-8", "surrogateescape") for e in handle.read().split(b"\0") if e]
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while being read
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
        try:
            check_file(env_file, "the probe's environment file")
            env.update(read_json(env_file) or {})
        finally:
            remove_env_file(env_file)

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


ENV_FILE_NAME = re.compile(r"\.probe-env-[0-9a-f]+\.json")


def remove_env_file(path: str | None) -> None:
    """The probe's environment file (0600, it may hold secrets) never outlives the command."""
    if path and ENV_FILE_NAME.fullmatch(os.path.basename(path)):
        with contextlib.suppress(OSError):
            os.unlink(path)


def _env_file_argument(argv: Sequence[str]) -> str | None:
    """``--env-file``'s value, found before argparse runs: removed even when the parsing of the
    rest fails (a model path "--help" once left it behind with the server's environment)."""
    for index, arg in enumerate(argv):
        if arg == "--env-file" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--env-file="):
            return arg.split("=", 1)[1]
    return None


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    env_file = _env_file_argument(arguments)
    try:
        result = _dispatch(arguments)
    except UnsafePath as exc:
        result = {
            "protocol": PROTOCOL, "ok": False, "refused": "unsafe-path",
            "reason": exc.message, "hint": exc.hint,
        }  # fmt: skip
    finally:
        remove_env_file(env_file)
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    return 0 if result.get("ok", True) else 3


def _dispatch(argv: Sequence[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="orch-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"orch-agent protocol {PROTOCOL}")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start")
    start.add_argument("--dir", required=True)
    start.add_argument("--spec", required=True)
    for name in ("status", "runs", "adopt"):
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
    elif args.command == "adopt":
        result = cmd_adopt(args.dir)
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
    return result


if __name__ == "__main__":
    raise SystemExit(main())
