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
    python agent.py listen --bind ADDR --port P --token T --seconds S [--expect N]
                                                   # detach a short-lived probe listener
    python agent.py reach  --host H --port P --token T --timeout S  # reach one: JSON, exit 0

The supervisor (``start``) detaches from the SSH session (double fork, new session, stdin from
/dev/null), holds a lock per deployment and per port, starts the server from an argv list in its
own process group with its output piped into ``runs/<run-id>/server.log`` (rotated at a size
cap; runs never share a log), watches for SGLang's ready line and ``/health``, classifies every
exit, restarts by policy (systemd's on-failure/always/no, exponential backoff, start limit; never
a deterministic configuration error), and stops with SIGTERM to the group, a grace period,
SIGKILL, then a sweep for processes of the run that escaped the group (SGLang's schedulers can
be reparented to PID 1 and keep GPU memory). Its state is one JSON file replaced atomically.

A spec with a ``group`` makes it one rank of a launch group (one server over N nodes, every node
the same argv but ``--node-rank``): rank 0's supervisor coordinates the others' over a TCP
control channel (signed JSON lines, see "launch groups"). Any rank's end stops every rank and
the group starts again whole, by rank 0's restart policy; a member never restarts on its own,
and stops its server when its coordinator is lost. With SGLang's gated launch (``group.gate``)
each supervisor reads which global ranks of its node wait at the gate, the members tell the
coordinator, and it activates the gate once every rank is there (or fails the generation when
they are not, in time). ``listen`` and ``reach`` check, before a group starts, that rank 0's
ports are reachable from every other node.

The supervisor's states and their allowed transitions are one table (TRANSITIONS), checked on
every change. Its time comes from an injected Clock and its contacts with the world (spawning,
the health probe, signals, the sweep) from an injected World, both real by default: its logic
runs in-process in tests. SGLang's log vocabulary (``log_record``, ``config_line_payload``,
``is_ready_line``), the state names and the exit classifier here are also what orch's observe
stage uses, so the agent and the CLI can never disagree about what a log or a state means.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

if TYPE_CHECKING:
    import selectors
    import socket
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


# A node of rank >= 1 of a multi-node server (--nnodes N) never logs READY_LINE: its main process
# logs this once its schedulers reported ready, as it starts its dummy health server
# (ROUND2-FACTS §1.4; the host is bracketed when it is IPv6).
_WORKER_READY_MESSAGE = re.compile(r"Dummy health check server started in background thread at \S+")


def is_ready_line(line: str) -> bool:
    """SGLang logged that it is up (after its warm-up request; at once with
    --skip-server-warmup, possibly before uvicorn listens): a record of its logger whose whole
    message is the ready line, or, on a node of rank >= 1, the worker's line
    (``is_worker_ready_line``). The words elsewhere (a served model name, a request, the
    config dump) are not it."""
    record = log_record(line.rstrip("\r\n"))
    if record is None:
        return False
    message = record.message.strip()
    return message == READY_LINE or _WORKER_READY_MESSAGE.fullmatch(message) is not None


def is_worker_ready_line(line: str) -> bool:
    """A node of rank >= 1 is up: ``Dummy health check server started in background thread at
    HOST:PORT``. Its /health is that dummy server, which answers 200 whatever its schedulers do
    (ROUND2-FACTS §1.5): on such a node /health alone proves nothing, this line is required."""
    record = log_record(line.rstrip("\r\n"))
    return (
        record is not None and _WORKER_READY_MESSAGE.fullmatch(record.message.strip()) is not None
    )


def strip_log_prefix(line: str) -> str:
    record = log_record(line)
    return (line if record is None else record.message).strip()


# SGLang's gated launch (--gated-launch-port, 0.5.19+; sglang/srt/distributed/gated_launch.py):
# after the rendezvous, before its large GPU allocations, every scheduler (every global rank, on
# every node) logs the waiting line once and waits; world rank 0 serves ``POST /gate/activate``
# and each logs the activated line once it was. ``Gated launch still waiting for activation.
# rank=N elapsed=X s`` (every 10 s) is not the waiting line.
GATE_LINE_MARK = "Gated launch "
_GATE_WAITING_MESSAGE = re.compile(r"Gated launch waiting for activation\. rank=(\d{1,7})")
_GATE_ACTIVATED_MESSAGE = re.compile(r"Gated launch activated\.(?: elapsed=.*)?")


def gate_waiting_rank(line: str) -> int | None:
    """The global rank of SGLang's ``Gated launch waiting for activation. rank=N`` (a record of
    its logger), else None."""
    if GATE_LINE_MARK not in line:
        return None
    record = log_record(line.rstrip("\r\n"))
    match = None if record is None else _GATE_WAITING_MESSAGE.fullmatch(record.message.strip())
    return None if match is None else int(match.group(1))


def is_gate_activated_line(line: str) -> bool:
    """``Gated launch activated. elapsed=X s``: a rank passed the gate."""
    if GATE_LINE_MARK not in line:
        return False
    record = log_record(line.rstrip("\r\n"))
    return (
        record is not None and _GATE_ACTIVATED_MESSAGE.fullmatch(record.message.strip()) is not None
    )


# Exit classes: what happened. Whether a restart can help is a separate verdict (Restart below),
# decided from the class and the evidence: the supervisor restarts by that, never by the class.
CONFIG_ERROR = "config-error"
CUDA_OOM = "cuda-oom"
KILLED = "killed"
PORT_IN_USE = "port-in-use"
IMPORT_ERROR = "import-error"
MODEL_NOT_FOUND = "model-not-found"
NCCL = "nccl"
# A GPU kernel failed: a CUDA error a kernel raised (illegal memory access, misaligned address,
# device-side assert), a kernel that cannot be built or loaded (Triton's compiler and its
# OutOfResources, a JIT build), a kernel's own shape check (Marlin's tiles).
KERNEL_ERROR = "kernel-error"
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
# The classes that repeat at this configuration whatever the phase (the same argv, install and
# model path fail the same way); a kernel error repeats when it happens during the startup.
DETERMINISTIC = (CONFIG_ERROR, IMPORT_ERROR, MODEL_NOT_FOUND, SPAWN_FAILED)

# Every process of a run carries both (children inherit them), for the sweep after the group kill.
RUN_ID_ENV = "ORCH_RUN_ID"
DEPLOYMENT_ENV = "ORCH_DEPLOYMENT_DIR"

# ``ExcType: message`` (``Exception: ...`` and a message starting on the next line included).
# Triton's OutOfResources is the one failure type whose name ends in none of the usual words.
_EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Warning|OutOfResources)"
    r"(?::(?: .*)?)?$"
)


# -- classification (pure) ----------------------------------------------------------------------
# A verdict is read from the decisive evidence only (tests/fixtures/crashlogs/README.md): the
# exceptions that ended a process (type and message, chained causes included, "During handling"
# ones superseded), what SGLang itself logs when a process of the server fails, the signal, and
# how far the startup got. Never from ordinary log text: SGLang's server_args= dump holds
# nccl_port and watchdog_timeout, NCCL INFO lines and "sglang is using nccl==2.27.3" are chatter.


@dataclass(frozen=True)
class Restart:
    """Whether starting the same argv again can end otherwise (``helps``), and the evidence."""

    helps: bool
    why: str


def restart_for(cls: str, *, was_ready: bool = False) -> Restart:
    """The restart verdict a class carries: what repeats at this configuration is never
    restarted (a restart loop proves nothing); what may not repeat is restarted by the policy,
    whose start limit bounds the rest."""
    if cls in DETERMINISTIC:
        return Restart(False, _REPEATS[cls])
    if cls == KERNEL_ERROR and not was_ready:
        # SGLang's startup runs the same kernels on the same shapes on every start: weight repacks
        # (Marlin's tile checks) and Triton/JIT builds are functions of the model, the GPU and the
        # parallel sizes, and CUDA-graph capture replays a fixed list of batch sizes.
        return Restart(False, "a GPU kernel failed during startup (loading, building kernels or "
                       "capturing CUDA graphs runs the same kernels on the same shapes each "
                       "start): it repeats at this configuration")  # fmt: skip
    return Restart(True, _MAY_PASS.get(cls, "nothing shows a cause that repeats: restarted by "
                                       "the policy, bounded by its start limit"))  # fmt: skip


_REPEATS = {
    CONFIG_ERROR: "SGLang rejects this configuration: the same argv fails the same way",
    IMPORT_ERROR: "the install cannot import what SGLang needs: it fails the same way until the "
    "environment changes",
    MODEL_NOT_FOUND: "the model is not where the profile says: the same path or Hub id fails the "
    "same way",
    SPAWN_FAILED: "the program cannot be started: the same argv fails the same way",
}
_MAY_PASS = {
    KERNEL_ERROR: "a GPU kernel failed while serving (the request that triggered it is gone "
    "after a restart): it may not repeat",
    CUDA_OOM: "GPU memory depends on what else holds the GPU and on the load: it may not repeat",
    NCCL: "a collective failed or timed out (a peer, the network, another rank's end): it may "
    "not repeat",
    KILLED: "a signal from outside ended it: it may not repeat",
    PORT_IN_USE: "the port's holder may be gone: it may not repeat",
}


@dataclass(frozen=True)
class ExitVerdict:
    """What happened (``cls``, ``message``) and whether a restart can help (``restart``; None:
    what the class alone says)."""

    cls: str
    message: str
    restart: Restart | None = None

    @property
    def judged(self) -> Restart:
        return self.restart if self.restart is not None else restart_for(self.cls)

    @property
    def restart_helps(self) -> bool:
        return self.judged.helps

    @property
    def restart_why(self) -> str:
        return self.judged.why

    @property
    def deterministic(self) -> bool:
        """It repeats at this configuration: never restarted."""
        return not self.judged.helps


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
    """Why a server process ended (its class and the line that says so), and whether starting it
    again can end otherwise (``restart``: restart_for the class and the phase it reached)."""
    happened = _what_happened(
        returncode, tail, saw_config_line=saw_config_line, was_ready=was_ready
    )
    return replace(happened, restart=restart_for(happened.cls, was_ready=was_ready))


def _what_happened(
    returncode: int, tail: Sequence[str], *, saw_config_line: bool, was_ready: bool
) -> ExitVerdict:
    """Why a server process ended, from its exit status and the last lines it printed.

    In order (formats: docs/sglang-facts.md §2, tests/fixtures/crashlogs/):
    argparse's usage error with exit 2; an exception (Python, a C++ ``terminate``, a torch
    NCCL watchdog record) whose type and message name a specific cause, the root cause first
    (import, model, port, a configuration SGLang asserts against, CUDA memory, a GPU kernel,
    then NCCL, which other ranks' failures also cause);
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
    # A server that was READY had its configuration accepted and served: an assertion of its
    # sizes then is about a request, no verdict on the configuration.
    specific = [
        f for f in failures if f.cls is not None and not (was_ready and f.cls == CONFIG_ERROR)
    ]
    if specific:
        cause = min(specific, key=lambda f: (_CAUSE_ORDER.index(f.cls or ""), -f.line))
        return ExitVerdict(cause.cls or CRASHED, cause.text)
    self_kill = _last_index(lines, _SELF_KILL_MARKS)
    if self_kill is None:
        # A traceback through a subprocess's entry point is SGLang's own failure even when the
        # excerpt lost the line it logs before it kills its tree: the -9 is its self-kill.
        self_kill = _last_match(lines, _SUBPROCESS_FRAME)
    if self_kill is None:
        self_kill = _last_match(lines, _COMPONENT_FAILED)
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
    # abort() ends a process after the failure it reports (a C++ exception's what(), a CUDA
    # error): that failure, when the tail shows one, says more than "Aborted"
    said = [f for f in failures if f.text != _ABORTED] or failures
    generic = said[-1] if said else None
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


# The root cause first: a rank's CUDA OOM, kernel fault or crash makes the other ranks'
# collectives fail.
_CAUSE_ORDER = (
    IMPORT_ERROR, MODEL_NOT_FOUND, PORT_IN_USE, CONFIG_ERROR, CUDA_OOM, KERNEL_ERROR, NCCL,
)  # fmt: skip
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
    # http_server's warmup (0.3-0.5.x): logger.error("Initialization failed. warmup error: ...")
    # then kill_process_tree(os.getpid())
    "initialization failed. warmup error",
)
# SGLang 0.1-0.3's record of a failed process, before it killed its tree: logger.error("Exception
# in ControllerSingle:\n" + traceback) then kill_parent_process() ("Exception in ModelTpServer:",
# "Exception in ModelRpcClient:" likewise). Python's "Exception in thread X:" is not one. SGLang
# 0.1-0.2's main process prints the traceback its router (controller) sent through a pipe after
# "router init state:" ("Initialization failed. router_init_state:") and exits 1.
_COMPONENT_FAILED = re.compile(
    r"^Exception in (?!thread\b)[A-Z]\w*:$"
    r"|^(?:Initialization failed\. )?(?:router|controller)[_ ]init[_ ]state: (?!init ok)"
)
# SGLang's own record of a stop it was asked for from outside.
_EXTERNAL_STOP_MARKS = ("sigterm received. signum=",)
# Exceptions and fatal errors, by the first line of their text.
_TORCH_RANK = re.compile(r"^\[rank\d+\]:\s?")
# torch's C++ error records: ``[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] ...``, the
# month without its leading zero (``[E210 ...`` is 10 February). Two processes writing at once
# glue one to the middle of another's line: it is searched for, not only at the start.
_TORCH_ERROR_RECORD = re.compile(r"\[E\d{3,4} \d\d:\d\d:\d\d\.\d+ [^\]]*\] ")
_CPP_TERMINATE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
_UVICORN_ERROR = re.compile(r"^ERROR:\s+\[Errno (?P<errno>\d+)\] ")
_ARGPARSE_ERROR = re.compile(r"^(?:usage: )?[\w.\-/ ]+: error: \S")
# "Rank 0 scheduler is dead" + "Exit code: -9" (0.4.1+); "Child process unexpectedly failed with
# an exit code 9" / "exitcode=9" (SIGCHLD handler; a raw wait status: the signal in its low bits).
_SCHEDULER_DEAD = re.compile(r"scheduler is dead\.")
# 0.5.x: the main process raises "Rank N scheduler died during initialization (exit code: -9).
# If exit code is -9 (SIGKILL), ..." out of its wait (entrypoints/engine.py _scheduler_died_error),
# the exit code being multiprocessing's: -N for signal N.
_SCHEDULER_DIED = re.compile(r"scheduler died during initialization \(exit code: (?P<code>-?\d+)\)")
_EXIT_CODE = re.compile(r"Exit code: (?P<code>-?\d+)$")
_CHILD_FAILED = re.compile(
    r"Child process unexpectedly failed with (?:an exit code |exitcode=)(\d+)"
)
# A traceback frame in the entry point of one of SGLang's processes (scheduler, detokenizer,
# data parallel controller), or in the code only its model processes run (the TP worker, the
# model runner and its CUDA graphs, the model loader, torch.distributed's groups; 0.1's router,
# 0.2's controller): they report their failure to the main process, which kills the tree.
_SUBPROCESS_FRAME = re.compile(
    r"\bin run_(?:scheduler|detokenizer|data_parallel_controller)_process"
    r"|/srt/(?:managers/(?:router/|controller/)?(?:tp_worker(?:_overlap_thread)?|model_rpc"
    r"|model_runner)|model_executor/(?:model_runner|cuda_graph_runner)|model_loader/loader"
    r"|distributed/parallel_state)\.py\""
)
_CHAIN_SUPERSEDED = "during handling of the above exception, another exception occurred"
_ABORTED = "Fatal Python error: Aborted"
# torch's trailer of a CUDA error a kernel raised; on its own (the error's line cut from the
# excerpt) it is still the evidence of one.
_CUDA_ERROR_TRAILER = "CUDA kernel errors might be asynchronously reported"
_ORPHAN_CUDA_ERROR = "CUDA error"
# The innermost frame of a traceback: ``File "...", line N, in <module>`` is an import running.
_FRAME = re.compile(r'^File "(?P<path>[^"]*)", line \d+, in (?P<function>\S+)')
_CARETS = re.compile(r"[\^~ ]+")  # Python 3.11+ marks the failing part of a frame's line
# How Python prints an exception of a class outside builtins: ``package.module.Name: message``.
_QUALIFIED_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)+[A-Z]\w*: \S")
# CUDA's report of a kernel's failed assert(): "<file>:<line>: <function>: block: [x,y,z],
# thread: [x,y,z] Assertion `<condition>` failed." (torch's indexing kernels, any __assert_fail).
_DEVICE_ASSERT = re.compile(
    r": block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `.*` failed\."
)
# GPU kernel libraries: their Python wrappers check the shapes, dtypes and GPUs their kernels
# support (aiter's MLA decode asserts the head count, DeepGEMM its scale layouts, Triton's
# front end its operand types) before they launch or build anything.
_KERNEL_LIBRARY = re.compile(r"/(?:aiter|flashinfer|sgl_kernel|deep_gemm|flash_attn|triton)/")
_KERNEL_LIBRARY_CHECKS = ("AssertionError", "ValueError", "NotImplementedError")
# The kernel libraries' own exception texts: flashinfer::Error ("Error in function '<f>' at
# <file>:<line>: <message>", include/flashinfer/exception.h) and its dispatch macros
# (__PRETTY_FUNCTION__ " failed to dispatch " var " " value), DeepEP's EP_HOST_ASSERT
# ("Failed: Assertion error <file>:<line> '<condition>'", csrc/kernels/exception.cuh).
_KERNEL_LIBRARY_ERROR = re.compile(
    r"\berror in function '[^']*' at \S*flashinfer\S*:\d+: |\bfailed to dispatch \w+ -?\d+"
    r"|\bfailed: assertion error \S+:\d+ '"
)
# torch.ops.<library>.<op> runs the library's compiled kernel: a RuntimeError out of torch's
# _ops.py is the op's own TORCH_CHECK refusing its inputs (vLLM's awq_dequantize and bfloat16).
_COMPILED_OP = re.compile(r"/torch/_ops\.py$")
# torch's dispatcher refusing a call to a compiled op for its arguments (createStackForSchema):
# the op's library and its caller are of different releases (SGLang and a flashinfer JIT op).
_OP_SIGNATURE_MISFIT = re.compile(
    r"\(\) expected at most \d+ argument\(s\) but received \d+ argument\(s\)"
)
_REQUIRES_PACKAGE = re.compile(r'\brequires "?[\w.\-]+"? to be installed\b')
# A JIT build's compiler failing (Triton builds its launcher stubs with gcc, torch's cpp_extension
# and flashinfer run ninja, DeepGEMM nvcc): subprocess's CalledProcessError names the command.
_COMPILER_FAILED = re.compile(
    r"command '\['[^']*\b(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|nvcc|hipcc|ninja)'"
)
# What code of two releases that do not fit raises while a module is imported.
_IMPORT_TIME_MISFITS = ("ValueError", "TypeError", "AttributeError", "NameError")
# Python's own text for a module that lacks a name (not an object's attribute: a bug's), and
# torch's for an op namespace whose installed library registers no such op (torch/_ops.py).
_MODULE_LACKS = re.compile(
    r"^attributeerror: (?:module '[^']+'|'_opnamespace' '[^']+' object) has no attribute "
)

_MISSING_MODEL_TYPES = (
    "RepositoryNotFoundError",
    "GatedRepoError",
    "HFValidationError",
    "LocalEntryNotFoundError",
    "RevisionNotFoundError",
    "EntryNotFoundError",
    "OfflineModeIsEnabled",  # HF_HUB_OFFLINE: the Hub, and the model's files on it, unreachable
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
    "is not a valid json file",  # transformers: a config.json cut or empty
)
# Code that reads the model's own files (SGLang's loader reads the safetensors index, transformers
# the config and tokenizer files): a JSONDecodeError there is a file cut or empty, the model's.
_MODEL_FILE_READERS = re.compile(
    r"/sglang/srt/model_loader/|/transformers/(?:configuration|tokenization)_utils|/huggingface_hub/"
)
# The CUDACHECK/NCCLCHECK macros of CUDA code (vLLM's and sgl-kernel's custom all-reduce, NCCL's
# examples): printf("Failed: Cuda error %s:%d '%s'\n", ...) and exit(EXIT_FAILURE), no exception.
_CHECK_MACRO = re.compile(r"Failed[:,] (?P<lib>Cuda|CUDA|NCCL) error \S+:\d+ '(?P<what>[^']*)'")
# flashinfer's FLASHINFER_CUDA_CALL: "CUDA Error: <string> (<code>) <file>: line N at function ...".
_FLASHINFER_CUDA_CALL = re.compile(r"CUDA Error: (?P<what>.+?) \(\d+\) \S+: line \d+ at function")
# A CUDA error torch or a check names on a line of its own: what the trailer below it is about.
_NAMED_DEVICE_ERROR = re.compile(r"\b(?:CUDA|HIP) error: .*")
# torch's NCCL watchdog reports any CUDA error it meets while checking a collective's completion
# as a c10::DistBackendError: with a CUDA error in it, the collective is not what failed.
_CARRIES_CUDA_ERROR = "cuda error: "
_HUB_HTTP_ERROR = re.compile(r"\b(?:401|403|404) client error\b.*huggingface\.co/")
_PORT_MARKS = ("address already in use", "[errno 98]", "errno: 98", "is used by a process already")
# sglang/srt/utils/network.py wait_port_available: "<name> at <port> is not available in 30
# seconds" (it names the holder only when it can find it).
_PORT_WAIT = re.compile(r" at \d+ is not available in \d+ seconds")
_OOM_MARKS = (
    "cuda out of memory",
    "cuda error: out of memory",
    "hip out of memory",
    "cublas_status_alloc_failed",  # cuBLAS could not allocate its workspace
    "not enough memory. please try to increase --mem-fraction-static",
    "not enought memory. please try to increase --mem-fraction-static",  # SGLang 0.1's spelling
    "failed with error out of memory",  # flashinfer's ops: "<Op> failed with error <string>"
)
# GPU kernels (KERNEL_ERROR): torch's CUDA errors a kernel raises, Triton's compiler refusing or
# not fitting a kernel, a JIT build of one (torch's cpp_extension runs ninja), Marlin's shape
# checks (TORCH_CHECKs in gptq_marlin_repack / gptq_marlin_gemm: a TP size that splits a weight
# off the kernel's tiles). "CUDA error: out of memory" is CUDA_OOM, checked first.
_KERNEL_TYPES = ("OutOfResources", "CompilationError", "PTXASError")
_KERNEL_MARKS = (
    "an illegal memory access was encountered",
    "an illegal instruction was encountered",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert triggered",
    "triton error [",  # Triton's launcher: the driver's error for a launch ([CUDA] or [HIP])
    "no kernel image is available for execution",
    "invalid device function",  # the build has no code for this GPU (CUDA's and HIP's text)
    # CUDA's launch errors (cudaErrorInvalidConfiguration, ...LaunchOutOfResources,
    # ...CooperativeLaunchTooLarge), whichever check prints them
    "invalid configuration argument",
    "too many resources requested for launch",
    "too many blocks in cooperative launch",
    "passmanager::run failed",  # Triton's MLIR passes cannot lower the kernel
    "cublas_status_",  # torch's TORCH_CUDABLAS_CHECK: cuBLAS refused or failed a GEMM
    "out of resource: shared memory",
    "invalid thread config",
    "error building extension",
    "command '['ninja', '-v']' returned non-zero exit status",
    "ninja is required to load c++ extensions",  # torch's cpp_extension: no build at all
)
_MARLIN_SHAPE = re.compile(
    r"\b(?:size|prob)_[kmn] = \d+ is not divisible by (?:tile|thread)_"
    # SGLang's (and vLLM's) marlin_utils: a TP partition off the kernel's thread tiles
    r"|\bis not divisible by\s+(?:min_thread_[kn]|min_[kn]_threads)\b"
)
# SGLang's checks of its parallel sizes against the model (ensure_divisibility's "X is not
# divisible by Y" over heads, experts, vocabulary; its asserts on tp/dp/ep sizes): they hold or
# fail the same way for this argv and model, in whichever process makes them.
_PARALLEL_CHECK = re.compile(
    r"\bis not divisible by \d|\bmust be divisible by\b"
    r"|\b(?:tp|dp|pp|ep|cp|attn_tp|attn_dp|moe_tp|moe_ep|moe_dp)_size\b"
    r"|\b(?:tensor|data|pipeline|expert) parallel size\b"
    # fp8.py, blockwise_int8.py, qoq.py, marlin_utils.py: a TP partition of a weight off the
    # checkpoint's quantization blocks or groups ("Weight output_partition_size = 576 is not
    # divisible by weight quantization block_n = 128"); a kernel's tiles are _MARLIN_SHAPE's
    r"|\b\w+_(?:size_per_partition|partition_size) = \d+ is not divisible by\b"
)
# SGLang's ModelConfig._verify_quantization (vLLM's before it): --quantization against the
# checkpoint's own quantization config and the methods the release knows.
_QUANTIZATION_CHECK = re.compile(
    r"does not match the quantization method specified in the `quantization` argument"
    r"|\bunknown quantization method: "
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
        elif _COMPONENT_FAILED.match(text):
            process = "scheduler"  # SGLang 0.1-0.3's report of one of its processes
        failure = _failure_at(index, text, tail, lines)
        if failure is not None:
            exc_type, shown, detail = failure
            cls = _specific_class(
                exc_type,
                detail,
                at_import=_raised_at_import(index, lines),
                in_kernel_library=_raised_in_kernel_library(index, lines),
                in_compiled_op=_raised_in_compiled_op(index, lines),
                reading_model=_raised_reading_model(index, lines),
                importing=_raised_while_importing(index, lines),
            )
            python = bool(_EXCEPTION_LINE.match(shown)) or _is_exception_line(index, lines)
            found.append(_Failure(index, shown, cls, process, python))
    return found


def _failure_at(
    index: int, text: str, tail: Sequence[str], lines: Sequence[str]
) -> tuple[str, str, str] | None:
    """(type, text to show, lowered text to match) when line ``index`` states a failure."""
    if _is_exception_line(index, lines):
        exc_type = text.split(":", 1)[0]
        if exc_type.endswith("Warning") or _superseded(index, tail, lines):
            return None
        return exc_type, text, _message(index, tail, lines)
    if text.startswith(_CUDA_ERROR_TRAILER) and (
        index == 0 or not _EXCEPTION_LINE.match(lines[index - 1])
    ):  # the trailer follows its error's line at once: without one, the excerpt lost it
        named = _NAMED_DEVICE_ERROR.search(lines[index - 1]) if index else None
        if named is not None:  # on another record's line (torch's watchdog, glued output)
            return "named CUDA error", named.group(0), named.group(0).lower()
        return _ORPHAN_CUDA_ERROR, text, text.lower()
    terminate = _CPP_TERMINATE.match(text)
    if terminate is not None:  # a C++ exception: its what() follows
        what = next((t for t in lines[index + 1 : index + 4] if t.startswith("what():")), "")
        detail = f"{text} {what}".lower()
        return terminate.group("type"), (what or text), detail
    if _DEVICE_ASSERT.search(text):  # a kernel's own assert(), printed by CUDA
        return "device-side assert", text, "device-side assert triggered"
    check = _CHECK_MACRO.search(text)
    if check is not None:  # its text as torch words the same error: "CUDA error: ..."
        return "CUDACHECK", text[check.start() :], f"{check['lib']} error: {check['what']}".lower()
    call = _FLASHINFER_CUDA_CALL.search(text)
    if call is not None:
        return "CUDACHECK", text[call.start() :], f"cuda error: {call['what']}".lower()
    if text.startswith("Fatal Python error: "):
        return "Fatal Python error", text, text.lower()
    record = _TORCH_ERROR_RECORD.search(text)
    if record is not None and "watchdog caught collective operation timeout" in text.lower():
        shown = text[record.end() :]
        return "c10::DistBackendError", shown, shown.lower()
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
    """Raised while handling this exception, another one followed and ended the process. When
    the excerpt ends before that other one, this one is the best evidence there is."""
    for later in range(index + 1, min(index + 10, len(lines))):
        text = lines[later]
        if _CHAIN_SUPERSEDED in text.lower():
            return any(_EXCEPTION_LINE.match(after) for after in lines[later + 1 :])
        if text.startswith(("Traceback", "The above exception")) or log_record(tail[later]):
            return False
    return False


def _innermost_frame(index: int, lines: Sequence[str]) -> re.Match[str] | None:
    """The last ``File "...", line N, in f`` line of the traceback ending at line ``index``."""
    for earlier in range(index - 1, max(index - 6, -1), -1):
        frame = _FRAME.match(lines[earlier])
        if frame is not None:
            return frame
    return None


def _raised_at_import(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` was raised by a module's own top level: its
    innermost frame is ``in <module>`` (an import running), not a function it called."""
    frame = _innermost_frame(index, lines)
    return frame is not None and frame.group("function") == "<module>"


def _traceback_frames(index: int, lines: Sequence[str]) -> list[re.Match[str]]:
    """The ``File "...", line N, in f`` lines of the traceback ending at line ``index``, outermost
    first (back to its ``Traceback (most recent call last)`` line, 300 lines at most)."""
    frames: list[re.Match[str]] = []
    for earlier in range(index - 1, max(index - 300, -1), -1):
        if "Traceback (most recent call last)" in lines[earlier]:
            break
        frame = _FRAME.match(lines[earlier])
        if frame is not None:
            frames.append(frame)
    return frames[::-1]


def _raised_reading_model(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` passes through code that reads the model's files."""
    return any(_MODEL_FILE_READERS.search(f.group("path")) for f in _traceback_frames(index, lines))


def _raised_while_importing(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` runs inside an import: a module's top level below
    the entry point's own (``in <module>`` past the first), or importlib's machinery."""
    frames = _traceback_frames(index, lines)
    tops = [f for f in frames if f.group("function") == "<module>"]
    return len(tops) > 1 or any("importlib._bootstrap" in f.group("path") for f in frames)


def _raised_in_kernel_library(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` was raised by a GPU kernel library's own code."""
    frame = _innermost_frame(index, lines)
    return frame is not None and _KERNEL_LIBRARY.search(frame.group("path")) is not None


def _raised_in_compiled_op(index: int, lines: Sequence[str]) -> bool:
    """The traceback ending at line ``index`` was raised by a call of a compiled op."""
    frame = _innermost_frame(index, lines)
    return frame is not None and _COMPILED_OP.search(frame.group("path")) is not None


def _is_exception_line(index: int, lines: Sequence[str]) -> bool:
    """Line ``index`` states the exception that ends a traceback: ``ExcType: message``, or right
    after a frame ``module.Name: message`` whatever the class is called (Python prints every
    exception so: huggingface_hub's OfflineModeIsEnabled has no usual suffix)."""
    if _EXCEPTION_LINE.match(lines[index]):
        return True
    if _QUALIFIED_EXCEPTION.match(lines[index]) is None:
        return False
    earlier = index - 1
    while earlier >= 0 and _CARETS.fullmatch(lines[earlier]):
        earlier -= 1  # the ^^^ markers under the frame's source line
    return any(_FRAME.match(lines[i]) for i in (earlier, earlier - 1) if i >= 0)


def _specific_class(
    exc_type: str,
    detail: str,
    *,
    at_import: bool = False,
    in_kernel_library: bool = False,
    in_compiled_op: bool = False,
    reading_model: bool = False,
    importing: bool = False,
) -> str | None:
    """The cause an exception names by its type and message (and, for an AttributeError or a
    failed check, where it was raised), if it names one."""
    name = exc_type.rsplit(".", 1)[-1].rsplit(":", 1)[-1]
    if (
        name in ("ModuleNotFoundError", "ImportError")
        or (name == "OSError" and ("undefined symbol" in detail or "shared object file" in detail))
        # a module's top level reading what its dependency lacks (a torch, transformers or
        # sgl_kernel of another release), or an import circle
        or (name == "AttributeError" and (at_import or "partially initialized module" in detail))
        # a module of another release than its caller's (vllm._custom_ops without silu_and_mul)
        or (name == "AttributeError" and _MODULE_LACKS.match(detail) is not None)
        or _OP_SIGNATURE_MISFIT.search(detail) is not None
        # packages that do not fit together fail while one imports another (transformers
        # refusing SGLang's registration of a name it already has)
        or (importing and name in _IMPORT_TIME_MISFITS)
        # SGLang's assert_pkg_version: "<pkg> with minimum required version V is not installed",
        # "<pkg> is installed with version U, which is less than the minimum required version V"
        or "minimum required version" in detail
        # a library's own words for a package it needs (FastAPI: 'Form data requires
        # "python-multipart" to be installed.')
        or _REQUIRES_PACKAGE.search(detail) is not None
    ):
        return IMPORT_ERROR
    if (
        name in _MISSING_MODEL_TYPES
        or any(mark in detail for mark in _MISSING_MODEL_MARKS)
        or (name == "JSONDecodeError" and reading_model)
        or _HUB_HTTP_ERROR.search(detail)
    ):
        return MODEL_NOT_FOUND
    if any(mark in detail for mark in _PORT_MARKS) or _PORT_WAIT.search(detail):
        return PORT_IN_USE
    if name == "OutOfMemoryError" or any(mark in detail for mark in _OOM_MARKS):
        return CUDA_OOM
    if (
        name in _KERNEL_TYPES
        or exc_type == _ORPHAN_CUDA_ERROR
        or any(mark in detail for mark in _KERNEL_MARKS)
        or _MARLIN_SHAPE.search(detail)
        or (in_kernel_library and name in _KERNEL_LIBRARY_CHECKS)
        or _KERNEL_LIBRARY_ERROR.search(detail) is not None
        or (in_compiled_op and name == "RuntimeError" and not _names_nccl(detail))
        or (name == "CalledProcessError" and _COMPILER_FAILED.search(detail) is not None)
    ):
        return KERNEL_ERROR
    if name in ("AssertionError", "ValueError") and (
        _PARALLEL_CHECK.search(detail) or _QUANTIZATION_CHECK.search(detail)
    ):
        return CONFIG_ERROR
    if (name in _NCCL_TYPES and _CARRIES_CUDA_ERROR not in detail) or _names_nccl(detail):
        return NCCL
    return None


def _names_nccl(detail: str) -> bool:
    return any(mark in detail for mark in _NCCL_MARKS)


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
        died = _SCHEDULER_DIED.search(text)
        if died and -int(died.group("code")) in _REPORTED_SIGNALS:
            found = (index, -int(died.group("code")), text[: died.end()])
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


def _last_match(lines: Sequence[str], pattern: re.Pattern[str]) -> int | None:
    for index in range(len(lines) - 1, -1, -1):
        if pattern.search(lines[index]):
            return index
    return None


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

# A launch group's control channel (see "launch groups" below). Seconds unless named otherwise.
GROUP_HEARTBEAT_S = 1.0  # each end of a control connection says it is alive this often
GROUP_LOST_AFTER_S = 5.0  # a peer silent this long, or whose connection closed, is lost
GATE_REQUEST_TIMEOUT_S = 2.0  # one POST /gate/activate
GATE_ATTEMPTS = 3  # rank 0's gate server starts in a thread as its ranks log the waiting line
GATE_RETRY_S = 0.5
# What SGLang binds when told a wildcard, and where its own node reaches it then.
_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


@dataclass(frozen=True)
class GateSpec:
    """A launch group's gated launch (the spec's ``group.gate``; absent: SGLang has none or orch
    does not use it): every rank runs with ``--gated-launch-port``, and the coordinator activates
    the gate once every global rank logged its waiting line (see GATE_LINE_MARK)."""

    port: int  # --gated-launch-port: world rank 0's gate server
    host: str  # where rank 0's node reaches it (its --host; a wildcard as loopback)
    world_size: int  # global ranks that must wait at the gate (tp * pp)
    node_ranks: tuple[tuple[int, ...], ...]  # the global ranks each node runs, by group rank
    timeout_s: float = 300.0  # from a generation's start: the rendezvous completes within it
    request_timeout_s: float = GATE_REQUEST_TIMEOUT_S  # not written by orch: tests make them
    attempts: int = GATE_ATTEMPTS  # short

    @property
    def url(self) -> str:
        return f"http://{host_port(self.host, self.port)}/gate/activate"

    @staticmethod
    def from_json(data: dict[str, Any], nnodes: int) -> GateSpec:
        port = int(data["port"])
        world_size = int(data["world_size"])
        node_ranks = tuple(tuple(int(rank) for rank in ranks) for ranks in data["node_ranks"])
        if not 0 < port < 65536:
            raise ValueError(f"group.gate.port: {port} is no TCP port")
        if len(node_ranks) != nnodes:
            raise ValueError(f"group.gate.node_ranks: {len(node_ranks)} nodes for nnodes {nnodes}")
        every = sorted(rank for ranks in node_ranks for rank in ranks)
        if world_size < 1 or every != list(range(world_size)):
            raise ValueError(
                f"group.gate.node_ranks: the nodes' ranks are not 0-{world_size - 1} once each"
            )
        timeout = float(data.get("timeout_s", 300.0))
        if not timeout > 0:
            raise ValueError(f"group.gate.timeout_s: {timeout:g} is not positive")
        host = str(data.get("host", "127.0.0.1"))
        return GateSpec(
            port=port,
            host=_WILDCARDS.get(host, host),
            world_size=world_size,
            node_ranks=node_ranks,
            timeout_s=timeout,
            request_timeout_s=float(data.get("request_timeout_s", GATE_REQUEST_TIMEOUT_S)),
            attempts=max(int(data.get("attempts", GATE_ATTEMPTS)), 1),
        )


@dataclass(frozen=True)
class GroupSpec:
    """This node's part in a launch group (the spec's ``group``): one SGLang server over
    ``nnodes`` nodes, every node the same argv but ``--node-rank``. Rank 0's supervisor is the
    group's coordinator, the others are its members."""

    group_id: str  # the launch digest: a member of another launch is a stranger
    rank: int
    nnodes: int
    nodes: tuple[str, ...]  # the nodes' names by rank, for messages
    control_host: str  # where members reach the coordinator
    control_bind: str  # what the coordinator binds
    control_port: int
    key: bytes = field(repr=False)  # HMAC-SHA256 key of the control messages (spec.json: 0600)
    join_timeout_s: float = 120.0
    member_stop_grace_s: float = 5.0  # SIGTERM -> SIGKILL on ranks >= 1 (they ignore SIGTERM)
    heartbeat_s: float = GROUP_HEARTBEAT_S  # not written by orch: tests make them short
    lost_after_s: float = GROUP_LOST_AFTER_S
    gate: GateSpec | None = None  # None: no gated launch (an SGLang without it)

    @property
    def is_coordinator(self) -> bool:
        return self.rank == 0

    @property
    def control_address(self) -> str:
        return host_port(self.control_host, self.control_port)

    def name(self, rank: int) -> str:
        """``rank 1 (node-b)``: how messages name a rank."""
        return f"rank {rank} ({self.nodes[rank]})"

    @property
    def coordinator(self) -> str:
        """``the group coordinator (rank 0, node-a)``: how a member's messages name it."""
        return f"the group coordinator (rank 0, {self.nodes[0]})"

    @staticmethod
    def from_json(data: dict[str, Any]) -> GroupSpec:
        nnodes = int(data["nnodes"])
        nodes = tuple(str(node) for node in data["nodes"])
        rank = int(data["rank"])
        key = str(data["key"])
        port = int(data["control_port"])
        if nnodes < 1 or len(nodes) != nnodes:
            raise ValueError(f"group: {len(nodes)} node names for nnodes {nnodes}")
        if not 0 <= rank < nnodes:
            raise ValueError(f"group: rank {rank} of {nnodes} nodes")
        if re.fullmatch(r"[0-9a-fA-F]{64}", key) is None:
            raise ValueError("group.key: expected 64 hexadecimal characters")
        if not 0 < port < 65536:
            raise ValueError(f"group.control_port: {port} is no TCP port")
        return GroupSpec(
            group_id=str(data["id"]),
            rank=rank,
            nnodes=nnodes,
            nodes=nodes,
            control_host=str(data["control_host"]),
            control_bind=str(data.get("control_bind", "0.0.0.0")),  # noqa: S104 - other nodes
            control_port=port,
            key=bytes.fromhex(key),
            join_timeout_s=float(data.get("join_timeout_s", 120.0)),
            member_stop_grace_s=float(data.get("member_stop_grace_s", 5.0)),
            heartbeat_s=float(data.get("heartbeat_s", GROUP_HEARTBEAT_S)),
            lost_after_s=float(data.get("lost_after_s", GROUP_LOST_AFTER_S)),
            gate=None if data.get("gate") is None else GateSpec.from_json(data["gate"], nnodes),
        )


def _is_ip_address(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


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
    group: GroupSpec | None = None  # None: a server on one node

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
            group=None if data.get("group") is None else GroupSpec.from_json(data["group"]),
        )


# Files the agent creates are never reached through a symlink (a planted one would make it write
# into a victim file) and get their mode at creation: O_NOFOLLOW, and O_EXCL where they are new.
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


# A write that failed for want of room (a full disk, a quota, a file size limit): what the agent
# writes then is dropped and counted, never its end nor its server's (issue 26).
NO_ROOM_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})


def no_room(exc: OSError) -> bool:
    return exc.errno in NO_ROOM_ERRNOS


def os_error_text(exc: OSError) -> str:
    """``no space left on device``: the error as a marker or a status says it."""
    text = os.strerror(exc.errno) if exc.errno is not None else str(exc)
    return text[:1].lower() + text[1:]


# state.json's ``disk``: what found no room so far (server output, events.jsonl lines, other
# files: state.json, a run's copies), the last error and when (the host's wall clock). ``status``
# adds the filesystem's room now (``full``, ``free_bytes``).
NO_DISK_TROUBLE: dict[str, Any] = {
    "dropped_bytes": 0, "dropped_events": 0, "failed_writes": 0,
    "last_error": None, "last_error_at": None,
}  # fmt: skip
DISK_LOOK_S = 1.0  # how often the supervisor brings its count of dropped output to state.json
DISK_FULL_BYTES = 1 << 20  # less room than this on the deployment's filesystem reads "full"


def write_json_atomic(path: str, document: dict[str, Any], mode: int = 0o600) -> None:
    """``path`` replaced whole, or left as it was: on a failed write (a full disk) the temp file
    is removed and the error raised; a reader never sees a truncated document."""
    temp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)  # ours, left by a process killed mid-write (same pid and thread: rare)
    data = (json.dumps(document, indent=1, sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(temp, _NEW_FILE, mode)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)  # replaces a symlink at ``path`` itself, never its target
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise


def read_json(path: str) -> dict[str, Any] | None:
    """The JSON object in ``path``; None when there is none (missing, not JSON, not an object:
    read_state_file tells those apart for state.json)."""
    return read_state_file(path)[0]


def read_state_file(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the object, None) from ``path``; (None, None) when there is no file; (None, why) when it
    is corrupt: not JSON, or JSON that is no object (``null``, ``[]``)."""
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return None, None
    with os.fdopen(fd, "rb") as handle:
        raw = handle.read()
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return None, f"{path} holds something that is not JSON, not a state"
    if isinstance(data, dict):
        return data, None
    kinds = {type(None): "null", list: "a list", str: "a string", bool: "true or false"}
    kind = kinds.get(type(data), "a number")
    return None, f"{path} holds {kind}, not a state"


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
    """The run's log: every byte the server prints, rotated at a size cap, never truncated.

    A write that fails (a full disk, a quota: NO_ROOM_ERRNOS; any OSError alike) never stops
    the reader of the server's output, which would block the server on its full pipe: the bytes
    are dropped and counted, and the next write that finds room puts one marker line first
    (``[orch: N bytes of output dropped: no space left on device]``). Raw writes (no buffer): a
    failed write loses exactly what it says."""

    def __init__(self, path: str, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.dropped_total = 0  # bytes dropped over the run
        self.last_error: str | None = None  # why the last write failed
        self._dropped = 0  # since the last marker
        self._fd: int | None = None
        self._size = 0
        self._open()

    def _open(self) -> bool:
        """The log opened (0600, appended to); False when it cannot be now (retried later)."""
        try:
            self._fd = open_append(self.path)  # lives as long as the run
        except OSError as exc:
            self.last_error = os_error_text(exc)
            return False
        self._size = os.fstat(self._fd).st_size
        return True

    def write(self, data: bytes) -> None:
        if self._fd is None and not self._open():
            self._drop(len(data))
            return
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._rotate()
            if self._fd is None:
                self._drop(len(data))
                return
        if self._dropped:
            marker = (
                f"[orch: {self._dropped} bytes of output dropped: {self.last_error}]\n"
            ).encode()
            if self._put(marker) < len(marker):
                self._drop(len(data))  # still no room (a piece of the marker may be there)
                return
            self._dropped = 0
        written = self._put(data)
        if written < len(data):
            self._drop(len(data) - written)

    def _put(self, data: bytes) -> int:
        """Bytes of ``data`` written (all of them, unless a write failed)."""
        view = memoryview(data)
        written = 0
        while written < len(data):
            assert self._fd is not None  # noqa: S101 - opened by the caller
            try:
                count = os.write(self._fd, view[written:])
            except OSError as exc:
                self.last_error = os_error_text(exc)
                break
            written += count
        self._size += written
        return written

    def _drop(self, count: int) -> None:
        self._dropped += count
        self.dropped_total += count

    def _rotate(self) -> None:
        assert self._fd is not None  # noqa: S101 - rotated only while open
        os.close(self._fd)
        self._fd = None
        try:
            for index in range(self.keep - 1, 0, -1):
                older = f"{self.path}.{index}"
                if os.path.exists(older):
                    os.replace(older, f"{self.path}.{index + 1}")
            os.replace(self.path, f"{self.path}.1")
        except OSError as exc:
            self.last_error = os_error_text(exc)
        self._open()

    def close(self) -> None:
        if self._fd is None:
            return
        if self._dropped:  # the run ended while dropping: its log says so, if there is room
            self._put(
                f"[orch: {self._dropped} bytes of output dropped: {self.last_error}]\n".encode()
            )
        os.close(self._fd)
        self._fd = None


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
        self.saw_worker_line = False  # a group member's own ready line (is_worker_ready_line)
        # The gated launch: the global ranks that logged their waiting line (replaced, never
        # changed in place: the supervisor's thread reads it while the reader's adds to it),
        # and whether a rank logged that it passed the gate.
        self.gate_waiting: frozenset[int] = frozenset()
        self.gate_activated = False
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

    @property
    def dropped_bytes(self) -> int:
        """Output the log could not take (a full disk): counted, never a blocked server."""
        return self._sink.dropped_total

    @property
    def write_error(self) -> str | None:
        return self._sink.last_error

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
            if not self.saw_worker_line and is_worker_ready_line(line):
                self.saw_worker_line = True
        elif GATE_LINE_MARK in line:
            rank = gate_waiting_rank(line)
            if rank is not None:
                if rank not in self.gate_waiting:
                    self.gate_waiting = self.gate_waiting | {rank}
            elif not self.gate_activated and is_gate_activated_line(line):
                self.gate_activated = True

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


def check_workdir(path: str) -> bool:
    """check_directory's workdir, or a symlink to one (``/data`` -> a mount: common): accepted
    when nobody else could have planted or can change it: the link is the user's or root's, in
    a directory only they can write; every directory on the way to its target is the user's or
    root's and not writable by group or others (a sticky one, like /tmp, excepted: others cannot
    replace what is in it); the target is the user's own and private. False when it does not
    exist."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISLNK(info.st_mode):
        return check_directory(path, "workdir")
    uid = os.getuid()
    target = os.path.realpath(path)
    if info.st_uid not in (uid, 0):
        raise UnsafePath(
            f"the workdir {path} is a symlink that belongs to uid {info.st_uid}, not to this "
            f"user (uid {uid}) or root",
            f"remove it, or set the workdir to a directory of your own (its target {target}, "
            "if it is yours)",
        )
    holder = os.path.dirname(os.path.abspath(path))
    held = os.stat(holder)
    if held.st_uid not in (uid, 0) or held.st_mode & 0o022:
        raise UnsafePath(
            f"the workdir {path} is a symlink in {holder}, which "
            + (
                f"belongs to uid {held.st_uid}"
                if held.st_uid not in (uid, 0)
                else f"is writable by group or others (mode {held.st_mode & 0o7777:04o})"
            ),
            f"anyone who can write in {holder} can replace the link: set the workdir to its "
            f"target ({target}), or chmod go-w {holder}",
        )
    ancestor = os.path.dirname(target)
    ancestors = []
    while True:
        ancestors.append(ancestor)
        if ancestor == os.path.dirname(ancestor):
            break
        ancestor = os.path.dirname(ancestor)
    for directory in reversed(ancestors):  # from the root down
        seen = os.lstat(directory)
        sticky = seen.st_mode & stat.S_ISVTX
        if seen.st_uid not in (uid, 0) or (seen.st_mode & 0o022 and not sticky):
            why = (
                f"belongs to uid {seen.st_uid}"
                if seen.st_uid not in (uid, 0)
                else f"is writable by group or others (mode {seen.st_mode & 0o7777:04o})"
            )
            raise UnsafePath(
                f"the workdir {path} leads to {target} through {directory}, which {why}",
                f"whoever can write in {directory} can replace what the link leads to: use a "
                "workdir whose every directory only you (or root) can write",
            )
    return check_directory(target, "workdir")


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
    check_workdir(workdir)
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

    @property
    def ended(self) -> threading.Event:
        """Set as soon as the process ended (before it is reaped): the supervisor's loop waits
        on it between looks, so a death is seen when it happens, not at the next look."""
        ...


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
        self.ended = threading.Event()
        threading.Thread(target=self._wait_exit, name="exit-waiter", daemon=True).start()

    def _wait_exit(self) -> None:
        """Block until the child ends, leaving it to be reaped by ``poll`` (WNOWAIT): the
        exit status stays Popen's."""
        try:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        except (ChildProcessError, OSError, AttributeError):  # reaped already; no waitid
            pass
        finally:
            self.ended.set()

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


# -- launch groups: the control channel between the supervisors of one server --------------------
# One SGLang server over N nodes has no in-place recovery (ROUND2-FACTS §1.6-1.7): any rank's end
# is the group's, and the group is stopped and started again whole. Rank 0's supervisor, the
# coordinator, owns the group's restart policy; the others, its members, start and stop their
# server when it says so. Each member holds one TCP connection to it: line-delimited JSON, every
# line signed with the group's key (HMAC-SHA256 over the canonical JSON), naming the group and its
# sender's rank, numbered per connection, and bound to its connection by a nonce from each end
# (a line recorded on one connection and replayed on another is refused). A line that fails any
# of these checks closes its connection: a stranger on the network can neither start nor stop a
# group. Messages (``type``):
#   coordinator -> member: challenge{nonce}, welcome{generation}, start{generation},
#                          stop{generation, reason}, shutdown{reason}, heartbeat
#   member -> coordinator: hello{session}, state{generation, state, run_id, pid, ready, message},
#                          gate{generation, ranks}, exited{generation, run_id, cls, message,
#                          returncode}, stopped{generation, run_id}, shutdown-done,
#                          leaving{reason}, heartbeat
# ``gate`` (a group with a gated launch): the global ranks of the member's node that logged their
# waiting line in its server of ``generation``, all of them so far, sent as more arrive.

GROUP_CONNECT_RETRY_S = 0.5  # a member's pause between attempts to reach the coordinator
# Beyond member_stop_grace_s, what a member's stop may take before it confirms: SIGKILL, the
# sweep (it waits up to 5 s for the killed) and the last output (up to 5 s).
GROUP_REPLY_MARGIN_S = 15.0
# ``start`` of a group's rank answers by then even before its server is spawned (a rank spawns
# once every member has joined; orch's call gives up after 60 s).
GROUP_START_ANSWER_S = 30.0
GROUP_LINE_MAX_BYTES = 64 << 10  # a longer line is no control message: the connection is dropped
# Connections that have not proved they hold the key yet (the challenge sent, no valid hello):
# held in the accept loop's selector (never a thread each), each for GROUP_HANDSHAKE_S at most
# (a member answers its challenge in one round trip). Past the caps the oldest are closed: of
# the newcomer's own source when it holds GROUP_PENDING_PER_SOURCE, else of the most crowded
# source. A stranger can thus hold only its own address's slots, and never for long: only
# members that proved the key count toward the join (issue 26: 16 idle connections re-opened as
# they timed out kept a group from forming when 8 slots, held for lost_after_s, were all).
GROUP_HANDSHAKE_S = 3.0
GROUP_PENDING_PER_SOURCE = 32
GROUP_PENDING_MAX = 128
GROUP_REFUSED_EVENTS_MAX = 20  # refused connections recorded in events.jsonl (a scan would flood)
GROUP_TEXT_MAX = 4000  # characters of a verdict's message carried in a control message
_NONCE = re.compile(r"[0-9a-f]{32}")

# The group's own verdicts (not classify_exit's). Only the member lost and the gated launch's are
# restarted (by rank 0's policy and its start limit): a member never joining, a control port that
# cannot be bound, a coordinator that cannot be reached or that was lost end the group (or the
# rank) for good. The gate's: not every rank at the gate within gate.timeout_s of the
# generation's start (a node stuck before the rendezvous: NCCL, a slow load, a wrong address), or
# rank 0's gate server not answering its activation (its port held by another program).
GROUP_PORT_IN_USE = "group-control-port-in-use"
GROUP_PORT_UNAVAILABLE = "group-control-port-unavailable"
GROUP_NEVER_JOINED = "group-member-never-joined"
GROUP_MEMBER_LOST = "group-member-lost"
GROUP_COORDINATOR_UNREACHABLE = "group-coordinator-unreachable"
GROUP_COORDINATOR_LOST = "group-coordinator-lost"
GROUP_RENDEZVOUS_TIMEOUT = "group-rendezvous-timeout"
GROUP_GATE_UNREACHABLE = "group-gate-unreachable"


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign_control_message(key: bytes, body: dict[str, Any]) -> bytes:
    """One line of the control channel: ``body`` with its HMAC-SHA256 under the group's key."""
    mac = hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()
    return _canonical(dict(body, mac=mac)) + b"\n"


def verify_control_message(key: bytes, line: bytes) -> dict[str, Any] | None:
    """The body of a line signed with ``key``; None for anything else (not JSON, no MAC, a MAC
    under another key, a body changed on the way)."""
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested to exhaust the stack
        return None
    if not isinstance(document, dict):
        return None
    mac = document.pop("mac", None)
    if not isinstance(mac, str):
        return None
    expected = hmac.new(key, _canonical(document), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac.encode("utf-8", "replace"), expected.encode()):
        return None
    return document


class LinkBroken(Exception):
    """A control connection that is no longer usable: closed, silent, or it carried a line that
    is not the group's. Its message says which (events, the lost peer's verdict)."""


class ControlLink:
    """One control connection: lines out signed and numbered; lines in verified (MAC, group,
    sender's rank, session, sequence) or LinkBroken. Sends come from several threads (the
    heartbeat, the supervisor's), receives from one."""

    def __init__(self, sock: socket.socket, group: GroupSpec) -> None:
        self._sock = sock
        self._group = group
        self._send_lock = threading.Lock()
        self._sent = 0
        self._received = 0
        self._buffer = b""
        self.session: str | None = None  # both ends' nonces, once the handshake set them
        self.peer_rank: int | None = None
        self.closed = threading.Event()

    def send(self, kind: str, **fields: Any) -> bool:
        """False when the connection is gone (it is closed then: its reader learns why)."""
        with self._send_lock:
            if self.closed.is_set():
                return False
            self._sent += 1
            body = dict(fields, group=self._group.group_id, rank=self._group.rank)
            body.update(seq=self._sent, type=kind)
            if self.session is not None:
                body["session"] = self.session
            try:
                self._sock.sendall(sign_control_message(self._group.key, body))
            except OSError:
                self.close()
                return False
            return True

    def receive(self) -> dict[str, Any]:
        """The next verified message (blocks up to the socket's timeout)."""
        message = verify_control_message(self._group.key, self._read_line())
        if message is None:
            raise LinkBroken("it sent a message not signed with the group's key")
        if message.get("group") != self._group.group_id:
            raise LinkBroken(f"it sent a message of another group ({message.get('group')!r})")
        if message.get("seq") != self._received + 1:
            raise LinkBroken(
                f"it sent message {message.get('seq')!r} after {self._received} (replayed?)"
            )
        if self.peer_rank is not None and message.get("rank") != self.peer_rank:
            raise LinkBroken(f"rank {message.get('rank')!r} spoke on rank {self.peer_rank}'s line")
        if self.session is not None and message.get("session") != self.session:
            raise LinkBroken("it sent a message of another connection (replayed?)")
        self._received += 1
        return message

    @property
    def connection(self) -> socket.socket:
        return self._sock

    def recv_available(self) -> bytes:
        """What the peer sent, read once the connection is readable (the accept loop's
        selector said so): LinkBroken when it closed."""
        try:
            chunk = self._sock.recv(1 << 16)
        except OSError as exc:
            raise LinkBroken("connection closed") from exc
        if not chunk:
            raise LinkBroken("connection closed")
        return chunk

    def feed(self, data: bytes) -> bool:
        """Bytes the accept loop read for this connection: whether a whole line is buffered.
        LinkBroken when the line grows past GROUP_LINE_MAX_BYTES."""
        self._buffer += data
        if b"\n" in self._buffer:
            return True
        if len(self._buffer) > GROUP_LINE_MAX_BYTES:
            raise LinkBroken(f"it sent a line over {GROUP_LINE_MAX_BYTES} bytes")
        return False

    def _read_line(self) -> bytes:
        import socket

        while b"\n" not in self._buffer:
            if len(self._buffer) > GROUP_LINE_MAX_BYTES:
                raise LinkBroken(f"it sent a line over {GROUP_LINE_MAX_BYTES} bytes")
            try:
                chunk = self._sock.recv(1 << 16)
            except socket.timeout as exc:  # noqa: UP041 - no TimeoutError before 3.10
                raise LinkBroken(f"silent for {self._sock.gettimeout() or 0:g} s") from exc
            except (ConnectionResetError, BrokenPipeError) as exc:  # the peer died: a reset
                raise LinkBroken("connection closed") from exc
            except OSError as exc:
                if self.closed.is_set():  # closed at this end (its reader wakes up)
                    raise LinkBroken("connection closed") from exc
                raise LinkBroken(f"connection error: {exc.strerror or exc}") from exc
            if not chunk:
                raise LinkBroken("connection closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        if len(line) > GROUP_LINE_MAX_BYTES:
            raise LinkBroken(f"it sent a line over {GROUP_LINE_MAX_BYTES} bytes")
        return line

    def close(self) -> None:
        """Shut the connection (which wakes its reader) and release it; idempotent."""
        import socket

        self.closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


def greet_member(link: ControlLink, group: GroupSpec) -> int:
    """The coordinator's half of the handshake: its nonce out, then the member's ``hello``,
    signed, from a member rank, for a session that starts with that nonce. The rank."""
    return admit_hello(link, group, challenge_member(link))


def challenge_member(link: ControlLink) -> str:
    """The coordinator's challenge to a new connection: its nonce."""
    nonce = secrets.token_hex(16)
    if not link.send("challenge", nonce=nonce):
        raise LinkBroken("connection closed")
    return nonce


def admit_hello(link: ControlLink, group: GroupSpec, nonce: str) -> int:
    """The member's ``hello`` to the challenge ``nonce`` (read from the link, or already in its
    buffer): the member's rank, or LinkBroken."""
    hello = link.receive()
    rank, session = hello.get("rank"), hello.get("session")
    if hello.get("type") != "hello":
        raise LinkBroken(f"it sent {hello.get('type')!r} before hello")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 < rank < group.nnodes:
        raise LinkBroken(f"hello from rank {rank!r}, no member of this group")
    prefix = f"{nonce}."
    if not (
        isinstance(session, str)
        and session.startswith(prefix)
        and _NONCE.fullmatch(session[len(prefix) :])
    ):
        raise LinkBroken("hello for another connection (replayed?)")
    link.peer_rank, link.session = rank, session
    return rank


def greet_coordinator(link: ControlLink) -> int:
    """A member's half of the handshake: the coordinator's ``challenge``, its ``hello`` with
    both nonces, then the coordinator's ``welcome``. The group's generation then."""
    challenge = link.receive()
    nonce = challenge.get("nonce")
    if challenge.get("type") != "challenge" or challenge.get("rank") != 0:
        raise LinkBroken(f"it sent {challenge.get('type')!r} from rank {challenge.get('rank')!r}")
    if not isinstance(nonce, str) or _NONCE.fullmatch(nonce) is None:
        raise LinkBroken("a challenge without a nonce")
    link.peer_rank = 0
    link.session = f"{nonce}.{secrets.token_hex(16)}"
    if not link.send("hello"):
        raise LinkBroken("connection closed")
    welcome = link.receive()
    generation = welcome.get("generation")
    if welcome.get("type") != "welcome" or not isinstance(generation, int):
        raise LinkBroken(f"it answered hello with {welcome.get('type')!r}")
    return generation


def _connect_failure(exc: OSError, timeout: float) -> str:
    import socket

    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.timeout):
        return f"timed out after {timeout:g} s"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host: {exc.strerror or exc}"
    return str(exc.strerror or exc)


def _short_text(value: Any, default: str = "") -> str:
    return value[:GROUP_TEXT_MAX] if isinstance(value, str) else default


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class GroupFailure:
    """Why a generation of the group ended, or the group could not form: the rank it names and
    that rank's verdict; ``message`` names the rank (``rank 1 (node-b): killed by SIGKILL``)."""

    rank: int
    node: str
    cls: str
    message: str
    returncode: int | None  # the failed rank's (restart=on-failure looks at it)
    generation: int
    at: float  # monotonic: when the coordinator learnt of it
    restart: Restart | None = None  # the failed rank's restart verdict; None: its class's

    @property
    def verdict(self) -> ExitVerdict:
        return ExitVerdict(self.cls, self.message, self.restart)

    @property
    def deterministic(self) -> bool:
        return self.verdict.deterministic

    def as_dict(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "node": self.node, "cls": self.cls, "message": self.message,
            "returncode": self.returncode, "generation": self.generation,
            "restart_helps": self.verdict.restart_helps, "restart_why": self.verdict.restart_why,
        }  # fmt: skip


def decisive_failure(failures: Sequence[GroupFailure]) -> GroupFailure | None:
    """The failure that names a generation's end when several ranks ended together: a
    deterministic one first (the cause, as the others' collectives fail after it, and it must
    not be restarted), then any but an NCCL error or a lost connection (as often another rank's
    end as a cause), then the first the coordinator learnt of."""
    return min(
        failures,
        key=lambda f: (not f.deterministic, f.cls in (NCCL, GROUP_MEMBER_LOST), f.at),
        default=None,
    )


@dataclass(frozen=True)
class GateProgress:
    """One generation's gated launch as the coordinator sees it: which global ranks each node
    reported at the gate, and how it ended. Replaced on every change (the coordinator's
    connection threads and its supervisor's share it)."""

    gate: GateSpec
    generation: int
    started: float  # monotonic: the generation's start, where gate.timeout_s counts from
    arrived: tuple[frozenset[int], ...]  # by group rank: its global ranks logged waiting
    activated_at: float | None = None  # wall clock
    activated_after_s: float | None = None  # from the generation's start
    failed: str | None = None  # GROUP_RENDEZVOUS_TIMEOUT or GROUP_GATE_UNREACHABLE

    @staticmethod
    def begin(gate: GateSpec, generation: int, started: float) -> GateProgress:
        return GateProgress(gate, generation, started, tuple(frozenset() for _ in gate.node_ranks))

    def arrive(self, rank: int, ranks: Iterable[int]) -> GateProgress:
        """With ``ranks`` (of ``range(world_size)``) at the gate on node ``rank``: ``self`` when
        nothing is new."""
        if not 0 <= rank < len(self.arrived):
            return self
        known = self.arrived[rank]
        now = known | {r for r in ranks if 0 <= r < self.gate.world_size}
        if now == known:
            return self
        return replace(
            self, arrived=(*self.arrived[:rank], frozenset(now), *self.arrived[rank + 1 :])
        )

    @property
    def waiting(self) -> frozenset[int]:
        return frozenset().union(*self.arrived)

    @property
    def complete(self) -> bool:
        return len(self.waiting) == self.gate.world_size

    @property
    def settled(self) -> bool:
        return self.activated_at is not None or self.failed is not None

    def missing(self, rank: int) -> list[int]:
        """Node ``rank``'s global ranks not at the gate (reported by any node)."""
        waiting = self.waiting
        return [r for r in self.gate.node_ranks[rank] if r not in waiting]

    def view(self) -> dict[str, Any]:
        """state.json's ``group.gate`` on the coordinator."""
        waiting = self.waiting
        if self.activated_at is not None:
            status = "activated"
        elif self.failed == GROUP_RENDEZVOUS_TIMEOUT:
            status = "timed-out"
        elif self.failed is not None:
            status = "unreachable"
        else:
            status = "waiting"
        return {
            "generation": self.generation, "url": self.gate.url,
            "world_size": self.gate.world_size, "timeout_s": self.gate.timeout_s,
            "status": status, "waiting": sorted(waiting),
            "missing": [r for r in range(self.gate.world_size) if r not in waiting],
            "by_node": {str(rank): sorted(ranks) for rank, ranks in enumerate(self.arrived)},
            "activated_at": self.activated_at, "activated_after_s": self.activated_after_s,
        }  # fmt: skip


def rank_runs(ranks: Iterable[int]) -> str:
    """``8-15``, ``0, 2-3``: ranks as runs."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def rendezvous_shortfall(progress: GateProgress, group: GroupSpec) -> tuple[int, str]:
    """The group did not reach the gate in time: the first node with ranks missing (never rank
    0 when its ranks are all there) and the message naming what each node lacks."""
    short: list[str] = []
    whole: list[str] = []
    first: int | None = None
    for rank, ranks in enumerate(progress.gate.node_ranks):
        missing = progress.missing(rank)
        name = group.name(rank)
        if not missing:
            whole.append(f"{name} has all")
            continue
        first = rank if first is None else first
        if len(missing) == len(ranks):
            short.append(f"{name} has none of its ranks {rank_runs(ranks)} at the gate")
        else:
            short.append(
                f"{name} lacks {rank_runs(missing)} of its ranks {rank_runs(ranks)} at the gate"
            )
    message = f"the group did not rendezvous within {progress.gate.timeout_s:g} s: " + "; ".join(
        short + whole
    )
    return (0 if first is None else first), message


def open_gate(url: str, timeout: float) -> str | None:
    """POST the activation to SGLang's gate server: None once it answered 2xx, else why not.
    Never through a proxy: the gate is on this node."""
    import http.client
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 - GateSpec.url
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read(4096)
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        return _connect_failure(reason, timeout) if isinstance(reason, OSError) else str(reason)
    except OSError as exc:  # a timeout reading the answer, a reset
        return _connect_failure(exc, timeout)
    except http.client.HTTPException as exc:  # it closed without an answer, or spoke no HTTP
        return f"no HTTP answer ({type(exc).__name__}: {exc})"


@dataclass
class _MemberSeen:
    """What the coordinator knows of one member, updated as its messages arrive (under the
    coordinator's lock)."""

    rank: int
    node: str
    connected: bool = False
    state: str | None = None
    run_id: str | None = None
    pid: int | None = None
    ready: bool = False
    generation: int = 0  # of the server it reported last
    message: str = ""
    stopped: int = 0  # the last generation it confirmed stopped
    shut_down: bool = False  # it confirmed the shutdown

    def view(self) -> dict[str, Any]:
        return {
            "rank": self.rank, "node": self.node, "connected": self.connected,
            "state": self.state, "run_id": self.run_id, "pid": self.pid, "ready": self.ready,
            "generation": self.generation, "message": self.message,
        }  # fmt: skip


@dataclass(eq=False)
class _Handshake:
    """A connection the coordinator challenged that has not answered yet."""

    link: ControlLink
    peer: str  # its source address
    nonce: str  # the challenge's
    accepted: float  # monotonic


def evicted_pending(
    pending: Sequence[tuple[str, float]], source: str, *, per_source: int, total: int
) -> int | None:
    """Which unanswered connection to close now that one from ``source`` arrived (``pending``:
    every one, the newcomer included, as (source, accepted at)): the oldest of ``source`` when
    it holds more than ``per_source``; else, when there are more than ``total``, the oldest of
    the source holding the most; None while there is room."""
    by_source: dict[str, list[int]] = {}
    for index, (peer, _) in enumerate(pending):
        by_source.setdefault(peer, []).append(index)

    def oldest(indices: list[int]) -> int:
        return min(indices, key=lambda index: pending[index][1])

    if len(by_source.get(source, [])) > per_source:
        return oldest(by_source[source])
    if len(pending) > total:
        crowded = max(
            by_source.values(), key=lambda indices: (len(indices), -pending[oldest(indices)][1])
        )
        return oldest(crowded)
    return None


class GroupCoordinator:
    """Rank 0's end of the control channel: it listens on the group's control port, admits each
    member that proves it holds the key, and keeps what each one says. A member's end (its
    ``exited``, its connection lost, its ``leaving``) while a generation runs is kept as a
    GroupFailure for the supervisor, which decides."""

    def __init__(
        self,
        group: GroupSpec,
        clock: Clock,
        *,
        on_change: Callable[[], None],
        on_event: Callable[..., None],
    ) -> None:
        self.group = group
        self._clock = clock
        self._show = on_change  # the supervisor shows the group in state.json
        self._record = on_event  # ... and records events
        self._lock = threading.Condition()
        self.members = {
            rank: _MemberSeen(rank, group.nodes[rank]) for rank in range(1, group.nnodes)
        }
        self._links: dict[int, ControlLink] = {}
        self._failures: list[GroupFailure] = []
        self.generation = 0
        self._running = False  # from start(g) until its end is decided: a member's end is one
        self._stopping = False  # stop(g) sent: a member lost now is no new cause
        self.left: GroupFailure | None = None  # a member stopped on request on its own node
        self._gate: GateProgress | None = None  # this generation's, with a gated launch
        self._listener: socket.socket | None = None
        self._closing = threading.Event()
        self._refused = 0
        self.listening: str | None = None  # the address the control port is bound to

    # -- the supervisor's side --

    def open(self) -> tuple[str, str] | None:
        """Bind and listen on the control port, then admit members in a thread: None, or the
        class and message of why not. Bound to rank 0's own address (``control_host``, where
        the members reach it) when the spec says a wildcard and that address is this host's:
        nothing else of the host is listened on (a NAT'd address, or a name, keeps the
        wildcard)."""
        import socket

        group = self.group
        hosts = [group.control_bind]
        if group.control_bind in _WILDCARDS and _is_ip_address(group.control_host):
            hosts.insert(0, group.control_host)
        for host in hosts:
            address = host_port(host, group.control_port)
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            listener = socket.socket(family, socket.SOCK_STREAM)
            # A previous group's connections in TIME_WAIT must not keep this one from binding;
            # a listener that holds the port still does.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                listener.bind((host, group.control_port))
                listener.listen(max(group.nnodes * 2, 64))
            except OSError as exc:
                listener.close()
                if exc.errno == errno.EADDRNOTAVAIL and host != hosts[-1]:
                    continue  # rank 0's address is not on this host: the wildcard then
                if exc.errno == errno.EADDRINUSE:
                    return GROUP_PORT_IN_USE, (
                        f"the group's control port {address} is in use on {group.nodes[0]} "
                        "(another group's coordinator, or another program): stop it, or choose "
                        "another group.control_port"
                    )
                return GROUP_PORT_UNAVAILABLE, (
                    f"cannot listen on the group's control port {address} on {group.nodes[0]}: "
                    f"{exc.strerror or exc}"
                )
            break
        listener.settimeout(0.2)
        self._listener = listener
        self.listening = address
        threading.Thread(target=self._accept, name="group-accept", daemon=True).start()
        threading.Thread(target=self._beat, name="group-heartbeat", daemon=True).start()
        return None

    def missing(self) -> list[int]:
        """The members without a connection, by rank."""
        with self._lock:
            return [rank for rank in self.members if rank not in self._links]

    def begin(self) -> int:
        """A new generation: ``start`` to every member; its number. A member whose connection
        closed since it was seen joined is lost in this generation (it cannot run without it)."""
        with self._lock:
            self.generation += 1
            generation = self.generation
            now = self._clock.monotonic()
            self._failures = [
                GroupFailure(
                    rank, member.node, GROUP_MEMBER_LOST,
                    f"{self.group.name(rank)}: lost (connection closed before generation "
                    f"{generation} started)", LOST_RETURNCODE, generation, now,
                )
                for rank, member in self.members.items()
                if rank not in self._links
            ]  # fmt: skip
            self._running, self._stopping = True, False
            if self.group.gate is not None:
                self._gate = GateProgress.begin(self.group.gate, generation, now)
            links = list(self._links.values())
        for link in links:
            link.send("start", generation=generation)  # one that fails is lost: a failure
        return generation

    def gate(self) -> GateProgress | None:
        """This generation's gated launch so far (None without one)."""
        with self._lock:
            return self._gate

    def note_gate(self, rank: int, generation: int, ranks: Iterable[int]) -> bool:
        """Node ``rank``'s ranks at the gate in ``generation``'s server: whether that is news
        (an older generation's report never is)."""
        with self._lock:
            progress = self._gate
            if progress is None or progress.generation != generation or not self._running:
                return False
            self._gate = progress.arrive(rank, ranks)
            return self._gate is not progress

    def gate_activated(self, generation: int, at: float, after_s: float) -> None:
        with self._lock:
            if self._gate is not None and self._gate.generation == generation:
                self._gate = replace(self._gate, activated_at=at, activated_after_s=after_s)

    def gate_failed(self, failure: GroupFailure) -> None:
        """The gate's end of ``failure.generation``: a failure of the generation, which the
        supervisor finds among ``failures()`` and stops the group for."""
        with self._lock:
            if self._gate is None or self._gate.generation != failure.generation:
                return
            self._gate = replace(self._gate, failed=failure.cls)
            if self._running and failure.generation == self.generation:
                self._failures.append(failure)
            self._lock.notify_all()

    def gate_view(self) -> dict[str, Any] | None:
        with self._lock:
            return None if self._gate is None else self._gate.view()

    def failures(self) -> list[GroupFailure]:
        """The members' ends in this generation so far."""
        with self._lock:
            return list(self._failures)

    def stop_members(self, reason: str) -> None:
        with self._lock:
            self._stopping = True
            links = list(self._links.values())
            generation = self.generation
        for link in links:
            link.send("stop", generation=generation, reason=reason[:GROUP_TEXT_MAX])

    def wait_stopped(self, timeout: float, stop_requested: threading.Event) -> list[int]:
        """Until every connected member confirmed ``stopped`` for this generation (or is gone),
        ``timeout`` passed, or a stop was requested (the shutdown that follows stops them
        anyway): the ranks that did not confirm."""
        deadline = self._clock.monotonic() + timeout
        with self._lock:
            while True:
                waiting = [
                    rank for rank in self._links if self.members[rank].stopped < self.generation
                ]
                remaining = deadline - self._clock.monotonic()
                if not waiting or remaining <= 0 or stop_requested.is_set():
                    return waiting
                self._lock.wait(min(remaining, 0.1))

    def finish(self) -> None:
        """The generation's end is decided: what members say now is no longer its cause."""
        with self._lock:
            self._running = self._stopping = False

    def shutdown(self, reason: str, timeout: float) -> list[int]:
        """``shutdown`` to every member; until each confirmed (or is gone) or ``timeout``
        passed. Those that did not confirm are dropped (a member that loses its coordinator
        stops its server). The ranks that did not confirm."""
        with self._lock:
            self._running = self._stopping = False
            links = list(self._links.values())
        for link in links:
            link.send("shutdown", reason=reason[:GROUP_TEXT_MAX])
        deadline = self._clock.monotonic() + timeout
        with self._lock:
            while True:
                waiting = [rank for rank in self._links if not self.members[rank].shut_down]
                remaining = deadline - self._clock.monotonic()
                if not waiting or remaining <= 0:
                    break
                self._lock.wait(min(remaining, 0.1))
        self.drop(waiting, "did not confirm the shutdown in time")
        return waiting

    def drop(self, ranks: Sequence[int], why: str) -> None:
        """Close these members' connections: they stop their servers, as on a lost coordinator."""
        with self._lock:
            links = [(rank, self._links[rank]) for rank in ranks if rank in self._links]
        for rank, link in links:
            self._on_event("group-drop", rank=rank, node=self.group.nodes[rank], reason=why)
            link.close()

    # The connections' threads tell the supervisor through these. A write that fails (a full
    # disk) must not end a connection's thread: the member would never be counted lost. The
    # supervisor's own writes fail too, and end it.
    def _on_event(self, kind: str, **details: Any) -> None:
        with contextlib.suppress(OSError):
            self._record(kind, **details)

    def _on_change(self) -> None:
        with contextlib.suppress(OSError):
            self._show()

    def view(self) -> dict[str, Any]:
        with self._lock:
            return {str(rank): member.view() for rank, member in self.members.items()}

    def close(self) -> None:
        self._closing.set()
        with self._lock:
            links = list(self._links.values())
        for link in links:
            link.close()
        if self._listener is not None:
            with contextlib.suppress(OSError):
                self._listener.close()

    # -- the connections' threads --

    def _beat(self) -> None:
        """Every member hears from the coordinator at least every heartbeat_s (it counts a
        silent coordinator lost)."""
        while not self._closing.wait(self.group.heartbeat_s):
            with self._lock:
                links = list(self._links.values())
            for link in links:
                link.send("heartbeat")

    def _accept(self) -> None:
        """Accept connections and run their handshakes in one selector, never blocking on any
        of them: each new one gets its challenge at once and GROUP_HANDSHAKE_S to answer it
        (within the caps, see GROUP_PENDING_PER_SOURCE); a member that answered is handed to
        a thread of its own (``_serve``)."""
        import selectors

        listener = self._listener
        assert listener is not None  # noqa: S101 - started by open() after binding it
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ, None)
        pending: list[_Handshake] = []
        deadline_s = min(GROUP_HANDSHAKE_S, self.group.lost_after_s)
        try:
            while not self._closing.is_set():
                try:
                    ready = selector.select(0.2)  # _closing is looked at this often
                except (OSError, ValueError):  # the listener closed under it (close())
                    if self._closing.is_set():
                        return
                    raise
                for key, _ in ready:
                    if key.data is None:
                        self._take_connection(listener, selector, pending)
                    elif key.data in pending:  # not evicted by a newcomer of this same batch
                        self._read_hello(key.data, selector, pending)
                now = self._clock.monotonic()
                for late in [h for h in pending if now - h.accepted > deadline_s]:
                    self._drop_handshake(
                        late, selector, pending, f"no hello within {deadline_s:g} s"
                    )
        finally:
            for handshake in pending:
                handshake.link.close()
            selector.close()

    def _take_connection(
        self, listener: socket.socket, selector: selectors.BaseSelector, pending: list[_Handshake]
    ) -> None:
        import selectors
        import socket

        try:
            connection, peer = listener.accept()
        except (socket.timeout, BlockingIOError):  # noqa: UP041 - no TimeoutError before 3.10
            return
        except OSError:
            if not self._closing.is_set():
                self._clock.sleep(0.05)  # EMFILE and the like: try again, never spin
            return
        connection.settimeout(self.group.lost_after_s)
        with contextlib.suppress(OSError):
            connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        link = ControlLink(connection, self.group)
        handshake = _Handshake(link, str(peer[0]), "", self._clock.monotonic())
        pending.append(handshake)
        index = evicted_pending(
            [(h.peer, h.accepted) for h in pending], handshake.peer,
            per_source=GROUP_PENDING_PER_SOURCE, total=GROUP_PENDING_MAX,
        )  # fmt: skip
        if index is not None:
            oldest = pending[index]
            crowded = sum(1 for h in pending if h.peer == oldest.peer)
            self._drop_handshake(
                oldest, selector, pending,
                f"evicted: {crowded} connections from {oldest.peer} without a hello",
            )  # fmt: skip
        try:
            handshake.nonce = challenge_member(link)
        except LinkBroken as exc:
            self._drop_handshake(handshake, selector, pending, str(exc))
            return
        selector.register(connection, selectors.EVENT_READ, handshake)

    def _read_hello(
        self, handshake: _Handshake, selector: selectors.BaseSelector, pending: list[_Handshake]
    ) -> None:
        try:
            data = handshake.link.recv_available()
            if not handshake.link.feed(data):
                return
            rank = admit_hello(handshake.link, self.group, handshake.nonce)
        except LinkBroken as exc:
            self._drop_handshake(handshake, selector, pending, str(exc))
            return
        selector.unregister(handshake.link.connection)
        pending.remove(handshake)
        threading.Thread(
            target=self._serve, args=(handshake.link, rank, handshake.peer), name="group-member",
            daemon=True,
        ).start()  # fmt: skip

    def _drop_handshake(
        self,
        handshake: _Handshake,
        selector: selectors.BaseSelector,
        pending: list[_Handshake],
        why: str,
    ) -> None:
        pending.remove(handshake)
        with contextlib.suppress(KeyError, ValueError):
            selector.unregister(handshake.link.connection)
        self._refuse(handshake.link, handshake.peer, why)

    def _serve(self, link: ControlLink, rank: int, peer: str) -> None:
        """A member that proved it holds the key: admitted once per rank, then heard until its
        connection ends."""
        with self._lock:
            admitted = rank not in self._links and not self._closing.is_set()
            if admitted:
                self._links[rank] = link
                member = self.members[rank]
                member.connected, member.shut_down = True, False
                generation = self.generation
                self._lock.notify_all()
        if not admitted or not link.send("welcome", generation=generation):
            self._refuse(link, peer, f"rank {rank} is connected already")
            return
        self._on_event("group-join", rank=rank, node=self.group.nodes[rank], peer=peer)
        self._on_change()
        try:
            while True:
                self._handle(rank, link.receive())
        except LinkBroken as exc:
            self._lose(rank, link, str(exc))
        except Exception as exc:  # noqa: BLE001 - the agent's bug: the member is lost, not ignored
            self._lose(rank, link, f"agent error: {type(exc).__name__}: {exc}")

    def _refuse(self, link: ControlLink, peer: str, why: str) -> None:
        """Recorded, then closed: whoever sees the close finds the event."""
        with self._lock:
            self._refused += 1
            record = self._refused <= GROUP_REFUSED_EVENTS_MAX
        if record:
            self._on_event("group-refused", peer=peer, reason=why)
        link.close()

    def _handle(self, rank: int, message: dict[str, Any]) -> None:
        kind = message.get("type")
        generation = _integer(message.get("generation"))
        name = self.group.name(rank)
        event: dict[str, Any] | None = None
        with self._lock:
            member = self.members[rank]
            if kind == "state":
                member.state = _short_text(message.get("state")) or None
                member.run_id = _short_text(message.get("run_id")) or None
                member.pid = _integer(message.get("pid"))
                member.ready = message.get("ready") is True
                member.generation = generation or 0
                member.message = _short_text(message.get("message"))
            elif kind == "exited":
                cls = _short_text(message.get("cls"), CRASHED) or CRASHED
                why = _short_text(message.get("message"), "exited")
                returncode = _integer(message.get("returncode"))
                helps = message.get("restart_helps")  # a member of an older agent sends none
                restart = (
                    Restart(helps, _short_text(message.get("restart_why")))
                    if isinstance(helps, bool) else None
                )  # fmt: skip
                failure = GroupFailure(
                    rank, member.node, cls, f"{name}: {why}",
                    LOST_RETURNCODE if returncode is None else returncode,
                    generation or 0, self._clock.monotonic(), restart,
                )  # fmt: skip
                # An old generation's end is no cause of this one's (messages in flight).
                if self._running and generation == self.generation:
                    self._failures.append(failure)
                event = {"kind": "group-member-exited", **failure.as_dict()}
            elif kind == "gate" and generation is not None:
                ranks = message.get("ranks")
                progress = self._gate
                if (
                    progress is not None and isinstance(ranks, list) and self._running
                    and generation == progress.generation
                ):  # fmt: skip
                    reported = (_integer(r) for r in ranks)
                    self._gate = progress.arrive(rank, (r for r in reported if r is not None))
            elif kind == "stopped" and generation is not None:
                member.stopped = max(member.stopped, generation)
                event = {"kind": "group-member-stopped", "rank": rank, "generation": generation}
            elif kind == "shutdown-done":
                member.shut_down = True
            elif kind == "leaving":
                why = _short_text(message.get("reason"), "stopped on request")
                failure = GroupFailure(
                    rank, member.node, STOPPED, f"{name}: {why}", 0, self.generation,
                    self._clock.monotonic(),
                )  # fmt: skip
                if self.left is None:
                    self.left = failure
                if self._running:
                    self._failures.append(failure)
                event = {"kind": "group-member-left", **failure.as_dict()}
            # a heartbeat says nothing but that the member is alive: its arrival is enough
            self._lock.notify_all()
        if event is not None:
            self._on_event(event.pop("kind"), **event)
        if kind in ("state", "gate", "exited", "stopped", "leaving"):
            self._on_change()

    def _lose(self, rank: int, link: ControlLink, why: str) -> None:
        link.close()
        with self._lock:
            if self._links.get(rank) is not link:
                return
            del self._links[rank]
            member = self.members[rank]
            member.connected = False
            expected = member.shut_down or self._closing.is_set()
            if self._running and not self._stopping:
                self._failures.append(
                    GroupFailure(
                        rank, member.node, GROUP_MEMBER_LOST,
                        f"{self.group.name(rank)}: lost ({why})", LOST_RETURNCODE,
                        self.generation, self._clock.monotonic(),
                    )
                )  # fmt: skip
            self._lock.notify_all()
        if not expected:
            self._on_event("group-member-lost", rank=rank, node=member.node, reason=why)
        self._on_change()


class GroupMemberLink:
    """A member's end of the control channel: it reaches the coordinator (retrying while the
    group gathers), says it is alive, and hands the coordinator's ``start``/``stop`` to the
    supervisor. The coordinator's ``shutdown``, or its loss, ends the member as a stop request
    does (``stop_requested``), with ``end`` saying why."""

    def __init__(self, group: GroupSpec, clock: Clock, stop_requested: threading.Event) -> None:
        self.group = group
        self._clock = clock
        self._stop_requested = stop_requested
        self._link: ControlLink | None = None
        self._lock = threading.Condition()
        self._commands: deque[dict[str, Any]] = deque()
        self.end: tuple[str, str] | None = None  # ("shutdown" | "lost", why): the first one
        self._reported: tuple[Any, ...] | None = None

    @property
    def connected(self) -> bool:
        return self._link is not None and not self._link.closed.is_set()

    def connect(self) -> str | None:
        """Reach the coordinator and join, retrying for join_timeout_s: None once joined (or a
        stop was requested meanwhile), else why it could not."""
        import socket

        group = self.group
        deadline = self._clock.monotonic() + group.join_timeout_s
        last = "no attempt"
        while not self._stop_requested.is_set():
            remaining = deadline - self._clock.monotonic()
            if remaining <= 0:
                break
            timeout = min(remaining, group.lost_after_s)
            try:
                connection = socket.create_connection(
                    (group.control_host, group.control_port), timeout=timeout
                )
            except OSError as exc:
                last = _connect_failure(exc, timeout)
            else:
                connection.settimeout(group.lost_after_s)
                with contextlib.suppress(OSError):
                    connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                link = ControlLink(connection, group)
                try:
                    greet_coordinator(link)
                except LinkBroken as exc:
                    link.close()
                    last = f"it did not admit this rank: {exc}"
                else:
                    self._link = link
                    threading.Thread(target=self._read, args=(link,), daemon=True).start()
                    threading.Thread(target=self._beat, args=(link,), daemon=True).start()
                    return None
            self._clock.wait(self._stop_requested, GROUP_CONNECT_RETRY_S)
        if self._stop_requested.is_set():
            return None
        return (
            f"could not reach {group.coordinator} at {group.control_address} within "
            f"{group.join_timeout_s:g} s ({last})"
        )

    def send(self, kind: str, **fields: Any) -> bool:
        return self._link is not None and self._link.send(kind, **fields)

    def report(self, state: dict[str, Any], generation: int) -> None:
        """Tell the coordinator this rank's state when it changed (it shows it in its
        ``status``)."""
        snapshot = (
            state.get("state"), state.get("run_id"), state.get("pid"), bool(state.get("ready")),
            state.get("message"), generation,
        )  # fmt: skip
        if snapshot == self._reported or not self.connected:
            return
        self._reported = snapshot
        self.send(
            "state", state=snapshot[0], run_id=snapshot[1], pid=snapshot[2], ready=snapshot[3],
            message=_short_text(snapshot[4]), generation=generation,
        )  # fmt: skip

    def next_command(self, timeout: float) -> dict[str, Any] | None:
        """The coordinator's next ``start`` or ``stop``, waiting at most ``timeout``."""
        with self._lock:
            if not self._commands:
                self._lock.wait(timeout)
            return self._commands.popleft() if self._commands else None

    def interrupting(self, generation: int) -> dict[str, Any] | None:
        """While the server of ``generation`` runs: the ``stop`` that ends it, taken, or the
        ``start`` of a newer generation, left for the supervisor's loop. Commands of older
        generations are dropped: messages in flight when they ended."""
        with self._lock:
            while self._commands:
                head = self._commands[0]
                if head["generation"] < generation:
                    self._commands.popleft()
                elif head["type"] == "stop":
                    return self._commands.popleft()
                elif head["generation"] > generation:
                    return head
                else:
                    self._commands.popleft()  # its own start again: nothing to do
            return None

    def close(self) -> None:
        if self._link is not None:
            self._link.close()

    def _read(self, link: ControlLink) -> None:
        try:
            while True:
                message = link.receive()
                kind = message.get("type")
                generation = _integer(message.get("generation"))
                if kind in ("start", "stop") and generation is not None:
                    command = {
                        "type": kind, "generation": generation,
                        "reason": _short_text(message.get("reason")),
                    }  # fmt: skip
                    with self._lock:
                        self._commands.append(command)
                        self._lock.notify_all()
                elif kind == "shutdown":
                    self._finish(
                        "shutdown", _short_text(message.get("reason"), "the group stopped")
                    )
        except LinkBroken as exc:
            link.close()  # a silent coordinator's connection too: nothing more goes over it
            self._finish("lost", str(exc))

    def _beat(self, link: ControlLink) -> None:
        while not link.closed.wait(self.group.heartbeat_s):
            if not link.send("heartbeat"):
                return

    def _finish(self, kind: str, why: str) -> None:
        with self._lock:
            if self.end is None:
                self.end = (kind, why)
            self._lock.notify_all()
        self._stop_requested.set()


# -- the supervisor -----------------------------------------------------------------------------


class Supervisor:
    """Runs one deployment's server until stopped. Its time (``clock``) and its contacts with
    the world (``world``: spawn, health probe, signals, sweep) are injected, real by default,
    so that its logic runs in-process in tests. Every state change goes through
    ``_change_state``, checked against TRANSITIONS.

    With a ``group`` in its spec it runs one rank of a launch group: rank 0 coordinates the
    group's generations (``_coordinate``), the others serve them (``_serve_as_member``)."""

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
            "disk": dict(NO_DISK_TROUBLE),  # writes that found no room (a full disk)
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
        self._state_unsaved = False  # the last state.json write found no room: retried
        self._events_cut = False  # events.jsonl ends in a line cut short by a full disk
        self._dropped_before = 0  # server output dropped in the runs before this one
        self._next_disk_look = 0.0
        self._start_times: deque[float] = deque(maxlen=max(spec.restart.start_limit, 1) * 2)
        self._run_seq = _last_run_seq(paths.runs)
        self._received_key: tuple[Any, ...] | None = None
        # A launch group's: the coordinator's connection threads record what members say, so
        # state.json is written under a lock.
        self._state_lock = threading.RLock()
        self._coordinator: GroupCoordinator | None = None
        self._member_link: GroupMemberLink | None = None
        self._generation = 0  # a member's: the generation its server runs (or ran) for
        self._group_failure: GroupFailure | None = None  # shown in state.json
        self._interrupted_by: GroupFailure | None = None  # the coordinator's, this generation
        self._member_stop: dict[str, Any] | None = None  # the stop(g) that ended a member's run
        self._exit_noticed: float | None = None  # monotonic: when _watch saw its server end
        # A member's gated launch in its server of this generation: (ranks at the gate, a rank
        # logged it passed), as last reported to the coordinator.
        self._gate_seen: tuple[frozenset[int], bool] = (frozenset(), False)
        if spec.group is not None:
            self.state["group"] = self._group_view()

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
        with self._state_lock:
            self.state.update(fields)
            self._save_state()
        if self._member_link is not None:
            self._member_link.report(self.state, self._generation)

    def _save_state(self) -> None:
        """state.json written now; with no room for it (a full disk) the state stays in memory,
        the previous file whole, and the next chance writes it (``_tend_disk``). Under
        ``_state_lock``."""
        try:
            write_json_atomic(self.paths.state, self.state)
        except OSError as exc:
            if not no_room(exc):
                raise
            self._state_unsaved = True
            self._disk_trouble(exc, "failed_writes")
        else:
            self._state_unsaved = False

    def _disk_trouble(self, exc: OSError, counter: str) -> None:
        """One more write that found no room, in state.json's ``disk`` (written when it can)."""
        with self._state_lock:
            disk = dict(self.state.get("disk") or NO_DISK_TROUBLE)
            disk[counter] = int(disk.get(counter) or 0) + 1
            disk.update(last_error=os_error_text(exc), last_error_at=self.clock.wall())
            self.state["disk"] = disk

    def _tend_disk(self, watcher: OutputWatcher | None) -> None:
        """About once a second while the server runs: the output dropped so far into state.json,
        and a state.json that found no room written again."""
        now = self.clock.monotonic()
        if now < self._next_disk_look:
            return
        self._next_disk_look = now + DISK_LOOK_S
        dropped = self._dropped_before + (watcher.dropped_bytes if watcher is not None else 0)
        disk = self.state.get("disk") or NO_DISK_TROUBLE
        if watcher is not None and dropped != disk.get("dropped_bytes"):
            error = watcher.write_error or disk.get("last_error")
            self._update(disk=dict(
                disk, dropped_bytes=dropped, last_error=error, last_error_at=self.clock.wall()
            ))  # fmt: skip
        elif self._state_unsaved:
            with self._state_lock:
                self._save_state()

    def fail(self, message: str) -> None:
        """The agent itself failed: FATAL, unless the state was final already."""
        if self.state["state"] not in TERMINAL_STATES:
            self._change_state(FATAL, message=message)

    def _event(self, kind: str, **details: Any) -> None:
        """One line of events.jsonl; dropped (counted) when the disk has no room for it."""
        record = {"at": self.clock.wall(), "event": kind, **details}
        line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        with self._state_lock:  # one writer at a time: a line cut short is ended by the next
            if self._events_cut:
                line = b"\n" + line
            written = 0
            try:
                fd = open_append(self.paths.events)
                try:
                    while written < len(line):
                        written += os.write(fd, line[written:])
                finally:
                    os.close(fd)
            except OSError as exc:
                if not no_room(exc):
                    raise
                self._events_cut = self._events_cut or written > 0
                self._disk_trouble(exc, "dropped_events")
            else:
                self._events_cut = False

    # -- main loop --

    def run(self, adopted: ServerProcess | None = None) -> int:
        """Start the server (or watch ``adopted``, a running one taken over), restart it by
        policy, until stopped or final."""
        if self.spec.group is not None:
            if self.spec.group.is_coordinator:
                return self._coordinate(self.spec.group)
            return self._serve_as_member(self.spec.group)
        consecutive_failures = 0
        while not self.stop_requested.is_set():
            self._start_times.append(self.clock.monotonic())
            returncode, verdict, was_ready = self._run_once(adopted)
            adopted = None
            if self.stop_requested.is_set():
                break
            consecutive_failures = 1 if was_ready else consecutive_failures + 1
            delay = self._apply_policy(verdict, returncode, consecutive_failures)
            if delay is None:
                return 0
            if self.clock.wait(self.stop_requested, delay):
                break
            self._update(restarts=self.state["restarts"] + 1, next_start_at=None)
        self._change_state(EXITED, pid=None, pgid=None, message="stopped", next_start_at=None)
        self._event("stopped")
        return 0

    def _apply_policy(
        self, verdict: ExitVerdict, returncode: int, consecutive_failures: int, cause: str = ""
    ) -> float | None:
        """The restart policy after a run that ended on its own: FATAL (the restart verdict says
        it repeats at this configuration; the start limit) or EXITED (the policy does not restart
        it), recorded, and None; or BACKOFF and the delay before the next start. ``cause`` ends
        each message (a group's failed rank)."""
        if verdict.deterministic:
            message = f"{verdict.cls}: not restarting ({verdict.restart_why}){cause}"
            self._change_state(FATAL, message=message)
            self._event("fatal", reason=verdict.cls)
            return None
        if not self.spec.restart.wants_restart(verdict, returncode):
            message = f"exited ({verdict.cls}); restart={self.spec.restart.mode}{cause}"
            self._change_state(EXITED, message=message)
            return None
        if self.spec.restart.start_limit_hit(self._start_times, self.clock.monotonic()):
            message = (
                f"{verdict.cls}: start limit hit ({self.spec.restart.start_limit} starts "
                f"within {self.spec.restart.start_limit_interval_s:g} s)"
            )
            self._change_state(FATAL, message=message + cause, next_start_at=None)
            self._event("fatal", reason=message)
            return None
        delay = self.spec.restart.delay(consecutive_failures)
        self._change_state(
            BACKOFF,
            next_start_at=self.clock.wall() + delay,
            message=f"{verdict.cls}: restarting in {delay:g} s{cause}",
        )
        self._event("backoff", delay_s=delay, failures=consecutive_failures)
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
                _write_private(target, _read_bytes(source))
            except OSError as exc:
                if not no_room(exc):
                    raise
                with contextlib.suppress(OSError):
                    os.unlink(target)  # never a copy cut short
                self._disk_trouble(exc, "failed_writes")

    def _run_once(self, adopted: ServerProcess | None = None) -> tuple[int, ExitVerdict, bool]:
        if adopted is not None:
            return self._watch(adopted, None)
        spawned = self._spawn()
        if isinstance(spawned, ExitVerdict):
            return 127, spawned, False
        return self._watch(*spawned)

    def _spawn(self) -> tuple[ServerProcess, OutputWatcher] | ExitVerdict:
        run_id, run_dir = self._new_run_id()
        try:
            self._make_run_dir(run_dir)
        except OSError as exc:
            if not no_room(exc):
                raise
            # A full disk without room for a directory (ext4 needs a block): a run that could
            # not start, restarted by policy as a crash (never deterministic: room comes back).
            why = f"cannot create the run's directory {run_dir}: {os_error_text(exc)}"
            self._disk_trouble(exc, "failed_writes")
            self._update(
                run_id=run_id, run_dir=None, log=None, started_at=self.clock.wall(),
                starts=self.state["starts"] + 1, server=None, message=why,
            )  # fmt: skip
            verdict = ExitVerdict(CRASHED, why)
            self._record_exit(run_id, 127, verdict)
            return verdict
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
            self._tend_gate(watcher)
            interrupt = self._group_interrupt()
            if interrupt is not None:
                ended_by = self._stop_for_the_group(process, tracked, interrupt)
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
                if now >= next_health and saw_config and self._worker_line_seen(watcher):
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
            self._tend_disk(watcher)
            self.clock.wait(process.ended, 0.05)  # a death wakes it at once
        self._exit_noticed = self.clock.monotonic()
        returncode = process.wait()
        # Children that outlive the server hold its output pipe open: give the last lines a
        # moment, give the verdict at once, then sweep (which closes the pipe for good).
        process.drain(0.2)
        was_ready = bool(self.state["ready"])
        if self.stop_requested.is_set() and ended_by is None:
            verdict = ExitVerdict(STOPPED, self._why_stopped())
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
        if watcher is not None:  # the run's dropped output counts on in the supervisor's total
            self._next_disk_look = 0.0
            self._tend_disk(watcher)
            self._dropped_before += watcher.dropped_bytes
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
        path = os.path.join(str(self.state["run_dir"]), RECEIVED_FILE)
        document = dict(facts, pid=pid, run_id=self.state["run_id"], at=self.clock.wall())
        try:
            write_json_atomic(path, document, 0o600)
        except OSError as exc:
            if not no_room(exc):
                raise
            if self._received_key is None:  # counted once per run: it is tried again each look
                self._disk_trouble(exc, "failed_writes")
                self._received_key = ()
            return
        self._received_key = key
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
            "restart_helps": verdict.restart_helps,
            "restart_why": verdict.restart_why,
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
        deadline = self.clock.monotonic() + self._stop_grace()
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

    def _stop_grace(self) -> float:
        """SIGTERM -> SIGKILL: this stop's (``stop --timeout``), a group member's (SGLang's
        workers ignore SIGTERM from 0.5.21 on: they wait for rank 0's shutdown broadcast), or
        the spec's."""
        if self.stop_grace_s is not None:
            return self.stop_grace_s
        if self.spec.group is not None and not self.spec.group.is_coordinator:
            return self.spec.group.member_stop_grace_s
        return self.spec.stop_timeout_s

    def _sweep(self, run_id: str, tracked: _Descendants) -> list[int]:
        """Kill what is left of the run: the group, then anything carrying the run's marker or
        seen as a descendant (reparented schedulers keep GPU memory otherwise)."""
        pgid = self.state.get("pgid")
        if pgid:
            self.world.signal_group(int(pgid), signal.SIGKILL)
            self._update(pgid=None)
        return self.world.sweep(self.paths.root, run_id, tracked.seen)

    # -- launch groups --

    def _worker_line_seen(self, watcher: OutputWatcher | None) -> bool:
        """READY's extra evidence on a group member: SGLang's worker line. Its /health is a dummy
        that answers 200 whatever its schedulers do (ROUND2-FACTS §1.5)."""
        group = self.spec.group
        if group is None or group.is_coordinator:
            return True
        return watcher is not None and watcher.saw_worker_line

    def _why_stopped(self) -> str:
        """A stop request's verdict; a member's comes from its coordinator (or its loss)."""
        group = self.spec.group
        end = self._member_link.end if self._member_link is not None else None
        if group is None or end is None:
            return "stopped on request"
        if end[0] == "shutdown":
            return f"stopped: the group coordinator shut the group down ({end[1]})"
        return f"stopped: {group.coordinator} was lost ({end[1]})"

    def _group_interrupt(self) -> ExitVerdict | None:
        """While the server runs: the group's reason to stop it, if any (never on one node)."""
        if self._coordinator is not None:
            failure = decisive_failure(self._coordinator.failures())
            if failure is None:
                return None
            self._interrupted_by = failure
            return failure.verdict
        if self._member_link is not None:
            command = self._member_link.interrupting(self._generation)
            if command is None:
                return None
            if command["type"] == "stop":
                why = command["reason"] or "the group stopped"
            else:  # a newer generation started: this one ended while its stop was lost
                why = f"generation {command['generation']} started"
            self._member_stop = {"generation": self._generation, "reason": why}
            return ExitVerdict(
                STOPPED, f"stopped by the group coordinator (generation {self._generation}): {why}"
            )
        return None

    def _tend_gate(self, watcher: OutputWatcher | None) -> None:
        """A launch group's gated launch while its server runs (never on one node, never
        without ``group.gate``): a member reports the ranks of its node at the gate; the
        coordinator gathers every node's, activates the gate once all are there, and fails the
        generation when they are not there gate.timeout_s after its start."""
        group = self.spec.group
        if group is None or group.gate is None or watcher is None:
            return
        if self._coordinator is not None:
            self._tend_gate_as_coordinator(group, group.gate, self._coordinator, watcher)
        elif self._member_link is not None:
            seen = (watcher.gate_waiting, watcher.gate_activated)
            if seen == self._gate_seen:
                return
            if seen[0] != self._gate_seen[0]:
                ranks = sorted(rank for rank in seen[0] if rank < group.gate.world_size)
                self._member_link.send("gate", generation=self._generation, ranks=ranks)
            self._gate_seen = seen
            self._show_group()

    def _tend_gate_as_coordinator(
        self,
        group: GroupSpec,
        gate: GateSpec,
        coordinator: GroupCoordinator,
        watcher: OutputWatcher,
    ) -> None:
        progress = coordinator.gate()
        if progress is None or progress.settled or coordinator.failures():
            return  # a rank's end stops the generation: its gate no longer matters
        if coordinator.note_gate(0, progress.generation, watcher.gate_waiting):
            progress = coordinator.gate() or progress
            self._show_group()
        now = self.clock.monotonic()
        if progress.complete:
            self._open_gate(group, gate, coordinator, progress)
        elif now - progress.started > gate.timeout_s:
            rank, message = rendezvous_shortfall(progress, group)
            coordinator.gate_failed(
                GroupFailure(
                    rank, group.nodes[rank], GROUP_RENDEZVOUS_TIMEOUT, message, None,
                    progress.generation, now,
                )
            )  # fmt: skip
            self._show_group()

    def _open_gate(
        self,
        group: GroupSpec,
        gate: GateSpec,
        coordinator: GroupCoordinator,
        progress: GateProgress,
    ) -> None:
        """Every rank is at the gate: POST the activation, once per generation (a few tries:
        rank 0's gate server starts in a thread as its ranks arrive). Not answered, it is the
        generation's failure."""
        error = "not tried"
        for attempt in range(gate.attempts):
            if attempt and self.clock.wait(self.stop_requested, GATE_RETRY_S):
                return  # stopped meanwhile: the stop ends the generation
            error = open_gate(gate.url, gate.request_timeout_s) or ""
            if not error:
                break
        now = self.clock.monotonic()
        if not error:
            after = now - progress.started
            coordinator.gate_activated(progress.generation, self.clock.wall(), after)
            self._event(
                "group-gate-activated", generation=progress.generation, url=gate.url,
                ranks=gate.world_size, elapsed_s=round(after, 3),
            )  # fmt: skip
            self._show_group()
            return
        tries = "1 attempt" if gate.attempts == 1 else f"{gate.attempts} attempts"
        message = (
            f"{group.name(0)}: could not activate the gated launch at {gate.url}: {error} "
            f"({tries}; another program may hold port {gate.port}, leaving SGLang's gate "
            "server unbound)"
        )
        coordinator.gate_failed(
            GroupFailure(
                0, group.nodes[0], GROUP_GATE_UNREACHABLE, message, None, progress.generation, now
            )
        )
        self._show_group()

    def _stop_for_the_group(
        self, process: ServerProcess, tracked: _Descendants, verdict: ExitVerdict
    ) -> ExitVerdict:
        """Stop the server for the group: not a stop request (no STOPPING), the rank starts
        again with the group's next generation. On the coordinator the members are told
        first: they stop while rank 0 drains (a broken group serves nothing)."""
        if self._coordinator is not None:
            reason = f"group failure: {verdict.message}"
            self._update(message=f"{reason}: stopping every rank")
            self._coordinator.stop_members(reason)
            self._event("group-stop", generation=self._coordinator.generation, reason=reason)
        else:
            self._update(message=f"{verdict.message}: stopping it")
            self._event("group-stop", generation=self._generation, reason=verdict.message)
        self._terminate(process, tracked)
        return verdict

    def _group_view(self) -> dict[str, Any]:
        """state.json's ``group``: this rank, the generation, the failure that ended the last
        one; on the coordinator each member as it last reported, on a member its coordinator."""
        group = self.spec.group
        assert group is not None  # noqa: S101 - called for a group's supervisor only
        coordinator = self._coordinator
        view: dict[str, Any] = {
            "id": group.group_id, "rank": group.rank, "nnodes": group.nnodes,
            "node": group.nodes[group.rank], "nodes": list(group.nodes),
            "role": "coordinator" if group.is_coordinator else "member",
            "control": group.control_address,
            "generation": coordinator.generation if coordinator is not None else self._generation,
            "failure": None if self._group_failure is None else self._group_failure.as_dict(),
        }  # fmt: skip
        if group.is_coordinator:  # where the control port is bound (None: not yet, or not)
            view["listening"] = None if coordinator is None else coordinator.listening
        if group.gate is not None and group.is_coordinator:
            view["gate"] = None if coordinator is None else coordinator.gate_view()
        elif group.gate is not None:  # a member: its own node's ranks at the gate
            view["gate"] = {
                "generation": self._generation, "ranks": list(group.gate.node_ranks[group.rank]),
                "waiting": sorted(self._gate_seen[0]), "activated": self._gate_seen[1],
            }  # fmt: skip
        if coordinator is not None:
            view["members"] = coordinator.view()
        elif group.is_coordinator:
            view["members"] = {
                str(rank): _MemberSeen(rank, group.nodes[rank]).view()
                for rank in range(1, group.nnodes)
            }
        else:
            link = self._member_link
            view["coordinator"] = {
                "rank": 0, "node": group.nodes[0], "connected": link is not None and link.connected,
            }  # fmt: skip
        return view

    def _show_group(self) -> None:
        self._update(group=self._group_view())

    def _group_fatal(self, failure: GroupFailure) -> None:
        """The group cannot form (or this rank cannot reach it): FATAL, never restarted."""
        self._group_failure = failure
        self._change_state(
            FATAL, message=failure.message, next_start_at=None, group=self._group_view()
        )
        self._event("group-failure", **failure.as_dict())
        self._event("fatal", reason=failure.cls)

    # -- the coordinator (rank 0) --

    def _coordinate(self, group: GroupSpec) -> int:
        """Rank 0: the control port first, then the group generation by generation: every
        member joined, ``start`` to each and its own server spawned; any rank's end stops every
        rank, and rank 0's restart policy decides on the group (see _coordinate_generations)."""
        coordinator = GroupCoordinator(
            group, self.clock, on_change=self._show_group, on_event=self._event
        )
        self._coordinator = coordinator
        problem = coordinator.open()
        if problem is not None:
            cls, message = problem
            failure = GroupFailure(0, group.nodes[0], cls, message, None, 0, self.clock.monotonic())
            self._group_fatal(failure)
            return 0
        self._show_group()  # where it listens
        try:
            return self._coordinate_generations(group, coordinator)
        finally:
            coordinator.close()

    def _coordinate_generations(self, group: GroupSpec, coordinator: GroupCoordinator) -> int:
        reply_s = group.member_stop_grace_s + GROUP_REPLY_MARGIN_S
        consecutive_failures = 0
        while not self.stop_requested.is_set():
            missing = self._await_members(group, coordinator)
            if self.stop_requested.is_set():
                break
            if coordinator.left is not None:
                return self._end_as_a_member_left(coordinator, coordinator.left, reply_s)
            if missing:
                names = ", ".join(group.name(rank) for rank in missing)
                verb = "never joined" if coordinator.generation == 0 else "did not rejoin"
                message = (
                    f"{names} {verb} the group (control port {group.control_address}, "
                    f"{group.join_timeout_s:g} s)"
                )
                self._group_fatal(
                    GroupFailure(
                        missing[0], group.nodes[missing[0]], GROUP_NEVER_JOINED, message, None,
                        coordinator.generation, self.clock.monotonic(),
                    )
                )  # fmt: skip
                coordinator.shutdown(message, reply_s)
                return 0
            self._interrupted_by = self._exit_noticed = None
            generation = coordinator.begin()
            self._show_group()
            self._event("group-start", generation=generation)
            self._start_times.append(self.clock.monotonic())
            returncode, verdict, was_ready = self._run_once()
            if self.stop_requested.is_set():
                break
            failure = self._end_generation(group, coordinator, verdict, returncode)
            if self.stop_requested.is_set():
                break
            if failure.cls == STOPPED:  # a member was stopped on request on its own node
                return self._end_as_a_member_left(coordinator, failure, reply_s)
            consecutive_failures = 1 if was_ready else consecutive_failures + 1
            delay = self._apply_policy(
                failure.verdict,
                returncode if failure.returncode is None else failure.returncode,
                consecutive_failures,
                cause=f": {failure.message}",
            )
            if delay is None:  # FATAL or EXITED: the members have nothing left to do
                coordinator.shutdown(str(self.state["message"]), reply_s)
                return 0
            if self.clock.wait(self.stop_requested, delay):
                break
            self._update(restarts=self.state["restarts"] + 1, next_start_at=None)
        # A stop request (orch down). Rank 0's server got its SIGTERM first (in _watch): SGLang's
        # rank 0 drains and broadcasts the shutdown to the other nodes; now their supervisors.
        self._update(message="stopping: the members next")
        coordinator.shutdown(f"stopped on request on {group.name(0)}", reply_s)
        self._change_state(EXITED, pid=None, pgid=None, message="stopped", next_start_at=None)
        self._event("stopped")
        return 0

    def _await_members(self, group: GroupSpec, coordinator: GroupCoordinator) -> list[int]:
        """Until every member is connected: [] then (or on a stop request, or when a member
        left), else the ranks still missing after join_timeout_s."""
        deadline = self.clock.monotonic() + group.join_timeout_s
        missing = coordinator.missing()
        if missing:
            names = ", ".join(group.name(rank) for rank in missing)
            self._update(
                message=f"waiting for {names} to join the group "
                f"(control port {group.control_address})"
            )
        while missing and not self.stop_requested.is_set() and coordinator.left is None:
            if self.clock.monotonic() >= deadline:
                return missing
            self.clock.wait(self.stop_requested, 0.05)
            missing = coordinator.missing()
        return []

    def _end_generation(
        self,
        group: GroupSpec,
        coordinator: GroupCoordinator,
        verdict: ExitVerdict,
        returncode: int,
    ) -> GroupFailure:
        """After rank 0's run ended other than on request: every member stopped (bounded; one
        that does not confirm is dropped), then the failure that names the generation's end
        (decisive_failure of every rank's end learnt of meanwhile) recorded."""
        generation = coordinator.generation
        own: list[GroupFailure] = []
        if self._interrupted_by is None:  # rank 0's own server ended, or could not start
            noticed = self._exit_noticed
            own.append(
                GroupFailure(
                    0, group.nodes[0], verdict.cls, f"{group.name(0)}: {verdict.message}",
                    returncode, generation,
                    self.clock.monotonic() if noticed is None else noticed, verdict.judged,
                )
            )  # fmt: skip
            reason = f"group failure: {own[0].message}"
            self._update(message=f"{reason}: stopping every member")
            coordinator.stop_members(reason)
            self._event("group-stop", generation=generation, reason=reason)
        unconfirmed = coordinator.wait_stopped(
            group.member_stop_grace_s + GROUP_REPLY_MARGIN_S, self.stop_requested
        )
        if unconfirmed and not self.stop_requested.is_set():
            coordinator.drop(unconfirmed, "did not confirm its stop in time")
        failure = decisive_failure(coordinator.failures() + own)
        assert failure is not None  # noqa: S101 - rank 0's own end, or the member's that stopped it
        coordinator.finish()
        self._group_failure = failure
        last_exit = self.state.get("last_exit")
        if failure.rank != 0 and isinstance(last_exit, dict):
            # rank 0's run ended for the failed rank: its verdict is that rank's
            self._update(
                last_exit=dict(
                    last_exit, **{"class": failure.cls, "message": failure.message},
                    restart_helps=failure.verdict.restart_helps,
                    restart_why=failure.verdict.restart_why,
                )
            )  # fmt: skip
        self._show_group()
        self._event("group-failure", **failure.as_dict())
        return failure

    def _end_as_a_member_left(
        self, coordinator: GroupCoordinator, failure: GroupFailure, reply_s: float
    ) -> int:
        """A member was stopped on request on its own node (not through rank 0): the group
        cannot run without it, and somebody is taking it down. EXITED, not restarted."""
        message = f"{failure.message}: stopped the group"
        self._group_failure = failure
        coordinator.shutdown(message, reply_s)
        self._change_state(
            EXITED, pid=None, pgid=None, message=message, next_start_at=None,
            group=self._group_view(),
        )  # fmt: skip
        self._event("stopped", reason=message)
        return 0

    # -- a member (rank >= 1) --

    def _serve_as_member(self, group: GroupSpec) -> int:
        """Rank >= 1: join the coordinator, then start and stop the server when it says so;
        report each end, never restart on its own. Its shutdown, its loss, or a stop request
        end this supervisor (EXITED), the server stopped."""
        link = GroupMemberLink(group, self.clock, self.stop_requested)
        self._member_link = link
        coordinator = f"{group.coordinator} at {group.control_address}"
        self._update(message=f"joining the group: reaching {coordinator}")
        try:
            problem = link.connect()
            if problem is not None:
                failure = GroupFailure(
                    0, group.nodes[0], GROUP_COORDINATOR_UNREACHABLE, problem, None, 0,
                    self.clock.monotonic(),
                )  # fmt: skip
                self._group_fatal(failure)
                return 0
            if link.connected:
                self._event("group-join", rank=group.rank, node=group.nodes[group.rank])
                self._update(
                    message=f"joined the group: waiting for {coordinator} to start it",
                    group=self._group_view(),
                )
            while not self.stop_requested.is_set():
                command = link.next_command(0.1)
                if command is None:
                    continue
                generation = command["generation"]
                if command["type"] == "stop":  # nothing runs: it ended already, or never began
                    link.send("stopped", generation=generation, run_id=self.state["run_id"])
                elif generation > self._generation:  # older ones were in flight as they ended
                    self._run_generation(link, generation)
            return self._member_ends(link)
        finally:
            link.close()

    def _run_generation(self, link: GroupMemberLink, generation: int) -> None:
        if self._generation:
            self._update(restarts=self.state["restarts"] + 1)
        self._generation = generation
        self._gate_seen = (frozenset(), False)
        self._take_member_stop()  # a stop of an earlier generation's is no stop of this one
        self._show_group()
        self._event("group-start", generation=generation)
        returncode, verdict, _ = self._run_once()
        if self.stop_requested.is_set():
            return
        run_id = self.state["run_id"]
        if self._take_member_stop() is not None:
            link.send("stopped", generation=generation, run_id=run_id)
            message = f"stopped by the group (generation {generation}): waiting for the next start"
        else:
            link.send(
                "exited", generation=generation, run_id=run_id, cls=verdict.cls,
                message=verdict.message[:GROUP_TEXT_MAX], returncode=returncode,
                restart_helps=verdict.restart_helps,
                restart_why=verdict.restart_why[:GROUP_TEXT_MAX],
            )  # fmt: skip
            message = f"exited ({verdict.cls}): waiting for the group coordinator"
        if self.state["state"] == BACKOFF:  # a spawn that failed leaves it there
            self._update(message=message, next_start_at=None)
        else:
            self._change_state(BACKOFF, message=message, next_start_at=None)

    def _take_member_stop(self) -> dict[str, Any] | None:
        """The coordinator's stop that ended this member's run (_group_interrupt), once."""
        stop, self._member_stop = self._member_stop, None
        return stop

    def _member_ends(self, link: GroupMemberLink) -> int:
        group = self.spec.group
        assert group is not None  # noqa: S101 - a member's
        end = link.end
        if end is None:  # a stop request on this node: the coordinator learns it, and stops
            link.send("leaving", reason="stopped on request on its node")
            message = "stopped"
        elif end[0] == "shutdown":
            message = f"stopped: the group coordinator shut the group down ({end[1]})"
        else:
            # A rank without its group is useless and holds its GPUs (NCCL would hang).
            message = f"{group.coordinator} was lost ({end[1]}): stopped this rank"
            self._group_failure = GroupFailure(
                0, group.nodes[0], GROUP_COORDINATOR_LOST, message, None, self._generation,
                self.clock.monotonic(),
            )  # fmt: skip
            self._event("group-coordinator-lost", reason=end[1])
        self._change_state(
            EXITED, pid=None, pgid=None, message=message, next_start_at=None,
            group=self._group_view(),
        )  # fmt: skip
        self._event("stopped", reason=message)
        if end is not None and end[0] == "shutdown":
            link.send("shutdown-done")  # after EXITED (reported): the coordinator may end now
        link.close()
        self._show_group()
        return 0


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
        self.ended = threading.Event()  # not our child: seen ended at a look, never woken

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

    # A group's rank spawns once every member joined (the others are started at the same time).
    group = supervisor.spec.group is not None

    def answer_when_spawned() -> None:
        deadline = clock.monotonic() + (GROUP_START_ANSWER_S if group else 10.0)
        while clock.monotonic() < deadline and supervisor.state["pid"] is None:
            if supervisor.state["last_exit"] is not None:
                break
            if group and supervisor.state["state"] in TERMINAL_STATES:
                break  # the group could not form: no server, no run
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


def _replace_private(path: str, data: bytes) -> None:
    """A new 0600 file (never through a symlink), replacing ``path`` atomically."""
    temp = f"{path}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(temp)
    fd = os.open(temp, _NEW_FILE, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temp, path)


def _spec_from_stdin(paths: Paths) -> str:
    """``start --spec -``: the spec and the launch script arrive on stdin, in one JSON document
    (``{"spec": {...}, "launch_script": "..."}``), with the command: no file transfer before it.
    Written 0600 where ``start --spec FILE`` would have found them; the pending spec's path."""
    bundle = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    if not isinstance(bundle, dict) or not isinstance(bundle.get("spec"), dict):
        raise ValueError('start --spec -: stdin holds no {"spec": ...} document')
    if isinstance(bundle.get("launch_script"), str):
        check_file(paths.launch_script, "the launch script")
        _replace_private(paths.launch_script, bundle["launch_script"].encode("utf-8"))
    pending = os.path.join(paths.root, f".spec-{secrets.token_hex(6)}.json")
    write_json_atomic(pending, bundle["spec"])
    return pending


def cmd_start(deployment_dir: str, spec_path: str) -> dict[str, Any]:
    """Detach a supervisor; answers once it holds its locks and has spawned the server.
    ``spec_path`` "-": the spec (and the launch script) are read from stdin."""
    paths = Paths(deployment_dir)
    try:
        secure_deployment(paths, create=True)
        if spec_path == "-":
            spec_path = _spec_from_stdin(paths)
        spec = _read_spec(spec_path)
    except BaseException:
        if spec_path != "-":
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
    if spec.group is not None:
        # Its coordinator counted it lost and stopped the group's other ranks: a rank alone
        # serves nothing, and rejoining a running group is not possible (no in-place recovery).
        return {
            "ok": False,
            "reason": f"{spec.group.name(spec.group.rank)} of a launch group cannot be adopted: "
            "orch down stops the group, orch up starts it again",
        }
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


def _recorded_state(paths: Paths) -> dict[str, Any] | None:
    """state.json; when it is corrupt (issue 26: ``null`` or ``[]`` made a running deployment
    look undeployed), a state rebuilt from what runs, saying so (``corrupt_state``)."""
    state, corrupt = read_state_file(paths.state)
    if corrupt is None:
        return state
    return state_from_processes(paths, corrupt)


CORRUPT_STATE = "UNKNOWN"  # what status shows for a rebuilt state: the recorded one is lost


def state_from_processes(paths: Paths, why: str) -> dict[str, Any]:
    """A deployment's state rebuilt from its processes, state.json being corrupt: the supervisor
    is the process holding the deployment's lock (it holds it for its life) and naming the
    deployment in its command line; the server is the process group leader carrying the
    deployment's markers in its environment (RUN_ID_ENV, DEPLOYMENT_ENV). Each is recorded by
    its identity now, checked like any other before a signal."""
    supervisor = _lock_holder(paths)
    server, run_id = _marked_server(paths.root)
    spec = _spec_for(paths, {})
    run_dir = os.path.join(paths.runs, run_id) if run_id else None
    log = os.path.join(run_dir, "server.log") if run_dir else None
    found = []
    if supervisor is not None:
        found.append(f"its supervisor (pid {supervisor['pid']}) by the lock it holds")
    if server is not None:
        found.append(f"its server (pid {server['pid']}) by its environment")
    message = f"{why}: " + (
        "found " + " and ".join(found) if found else "nothing of the deployment runs"
    )
    return {
        "protocol": PROTOCOL, "deployment": spec.deployment, "corrupt_state": why,
        "agent_pid": supervisor["pid"] if supervisor else None, "agent": supervisor,
        "identity_recorded": True, "state": CORRUPT_STATE if supervisor or server else EXITED,
        "pid": server["pid"] if server else None, "pgid": server["pid"] if server else None,
        "server": server, "run_id": run_id, "run_dir": run_dir, "log": log, "received": None,
        "port": spec.port, "starts": 0, "restarts": 0, "ready": False, "health_failures": 0,
        "adopted": False, "output_lost": False, "disk": dict(NO_DISK_TROUBLE),
        "started_at": None, "started_mono": None, "ready_at": None, "ready_by": None,
        "state_since": None, "next_start_at": None, "last_exit": None, "message": message,
        "meta": spec.meta,
    }  # fmt: skip


def _lock_holder(paths: Paths) -> dict[str, Any] | None:
    """The identity of the process holding the deployment's lock (/proc/locks: ``1: FLOCK
    ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF``) when it names the deployment in its command line
    (a supervisor's); None otherwise, or without /proc."""
    try:
        info = os.stat(paths.lock)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    device = (os.major(info.st_dev), os.minor(info.st_dev))
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields:  # "->": a waiter
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            held = (int(major, 16), int(minor, 16)) == device and int(inode) == info.st_ino
        except ValueError:
            continue
        if held and paths.root in _cmdline(pid):
            return process_identity(pid)
    return None


def _marked_server(deployment_dir: str) -> tuple[dict[str, Any] | None, str | None]:
    """The identity and run id of the deployment's server: a process group leader (the server
    is started in its own) whose environment carries the deployment's markers; the newest."""
    try:
        import psutil
    except ImportError:
        return None, None
    found: list[tuple[float, int, str]] = []
    for process in psutil.process_iter(["pid", "create_time"]):
        pid = process.info["pid"]
        try:
            if pid == os.getpid() or os.getpgid(pid) != pid:
                continue
            environ = process.environ()
        except (psutil.Error, OSError):
            continue
        run_id = environ.get(RUN_ID_ENV)
        if environ.get(DEPLOYMENT_ENV) == deployment_dir and run_id:
            found.append((process.info["create_time"], pid, run_id))
    if not found:
        return None, None
    _, pid, run_id = max(found)
    return process_identity(pid), run_id


def disk_room(path: str) -> dict[str, Any]:
    """The room left on ``path``'s filesystem now, as this user may use it (root may use the
    blocks reserved for it): ``full`` under DISK_FULL_BYTES. A quota is not seen here: the
    supervisor's own count of failed writes says that one."""
    try:
        info = os.statvfs(path)
    except OSError:
        return {"full": False, "free_bytes": None}
    blocks = info.f_bfree if os.geteuid() == 0 else info.f_bavail
    free = blocks * info.f_frsize
    return {"full": free < DISK_FULL_BYTES, "free_bytes": free}


def cmd_status(deployment_dir: str, recorded: dict[str, Any] | None = None) -> dict[str, Any]:
    """The state as recorded, with what is true now: the supervisor and the server are alive
    only when their recorded identities match a running process (a reused pid is "gone"). A
    dead supervisor with a live server is UNSUPERVISED. ``recorded``: the state to start from
    instead of state.json (a stop whose end found no room to be written)."""
    paths = Paths(deployment_dir)
    if recorded is not None:
        state: dict[str, Any] | None = dict(recorded)
    else:
        state = _recorded_state(paths) if secure_deployment(paths) else None
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    state["disk"] = dict(state.get("disk") or NO_DISK_TROUBLE, **disk_room(deployment_dir))
    agent_alive = verified_alive(recorded_identity(state, "agent", deployment_dir))
    if not agent_alive and recorded is None:
        # It may have recorded its end and exited between the read above and that check (a
        # server that died with restart=no: EXITED, then the supervisor exits): what it wrote
        # last is the truth, never "it died without an end".
        state = read_json(paths.state) or state
        state["disk"] = dict(state.get("disk") or NO_DISK_TROUBLE, **disk_room(deployment_dir))
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
    group = state.get("group")
    if isinstance(group, dict) and not agent_alive:
        # its connections died with it, whatever it recorded last
        peers = [*(group.get("members") or {}).values(), group.get("coordinator")]
        for peer in peers:
            if isinstance(peer, dict):
                peer["connected"] = False
    return state


WATCH_TICK_S = 0.01  # the watcher's own polling, on the host: two small reads, no round trip
WATCH_BEAT_S = 1.0  # a line at least this often: a dead connection ends the watcher (EPIPE)
WATCH_CHECK_S = 0.25  # how often the watcher checks that the supervisor is alive
WATCH_CHUNK = 1 << 20


@dataclass(frozen=True)
class InspectAtReady:
    """What ``cmd_inspect`` is asked once the run is READY (``watch --inspect-port``)."""

    port: int
    host: str
    env_names: tuple[str, ...]


def cmd_watch(
    deployment_dir: str,
    run_id: str,
    offset: int,
    seconds: float,
    inspect: InspectAtReady | None = None,
) -> dict[str, Any]:
    """Stream one run's startup to orch as JSON lines on stdout, as it happens: ``{"log": b64,
    "offset": N}`` for new bytes of the run's log, ``{"state": {...}}`` whenever state.json
    changes, ``{"status": {...}}`` (cmd_status's answer) when the supervisor died without an
    end, ``{"beat": t}`` when nothing else was said for WATCH_BEAT_S. Ends on the run's READY or
    end, a terminal state, a dead supervisor, or after ``seconds``; orch ends it sooner by
    closing the channel. One process on the host instead of a round trip per look: the death
    of a server reaches orch in one one-way delay. With ``inspect``, the run's READY state is
    preceded by ``{"inspect": {...}}`` (cmd_inspect's answer): what orch compares next, without
    another command."""
    paths = Paths(deployment_dir)
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", run_id):
        return {"protocol": PROTOCOL, "ok": False, "reason": f"not a run id: {run_id!r}"}
    if not secure_deployment(paths):
        return {"protocol": PROTOCOL, "ok": False, "reason": "no deployment"}
    log = os.path.join(paths.runs, run_id, "server.log")
    out = sys.stdout
    deadline = time.monotonic() + seconds
    said_at = next_check = 0.0
    last_state: bytes | None = None
    seen_ours = False

    def say(document: dict[str, Any]) -> None:
        nonlocal said_at
        out.write(json.dumps(document, sort_keys=True) + "\n")
        out.flush()
        said_at = time.monotonic()

    while True:
        with contextlib.suppress(FileNotFoundError):
            with open(log, "rb") as handle:  # the run's log: only its new bytes
                handle.seek(offset)
                data = handle.read(WATCH_CHUNK)
            while data:
                offset += len(data)
                say({"log": base64.b64encode(data).decode("ascii"), "offset": offset})
                with open(log, "rb") as handle:
                    handle.seek(offset)
                    data = handle.read(WATCH_CHUNK)
        raw = None
        with contextlib.suppress(FileNotFoundError), open(paths.state, "rb") as handle:
            raw = handle.read()
        state: dict[str, Any] | None = None
        if raw is not None:
            with contextlib.suppress(ValueError):
                loaded = json.loads(raw)
                state = loaded if isinstance(loaded, dict) else None
        if state is not None and not seen_ours:
            # Until the run's own supervisor has written its state, state.json may still be the
            # previous run's (a start answers once the server is spawned; the file follows):
            # never said, never an end (an EXITED run before a --replace would read as ours).
            current = state.get("run_id")
            ended = (state.get("last_exit") or {}).get("run_id")
            # run ids grow (NNNN-time): a later one means ours was recorded and moved past
            if ended == run_id or (isinstance(current, str) and current >= run_id):
                seen_ours = True
            else:
                state = None
        if raw != last_state and state is not None:
            last_state = raw
            if (
                inspect is not None
                and state.get("run_id") == run_id
                and state.get("state") == READY
            ):
                say({"inspect": cmd_inspect(
                    deployment_dir, None, inspect.port, inspect.host, inspect.env_names, None
                )})  # fmt: skip
            say({"state": state})
        now = time.monotonic()
        if state is not None:
            last_exit = state.get("last_exit") or {}
            if (
                (state.get("run_id") == run_id and state.get("state") == READY)
                or last_exit.get("run_id") == run_id
                or state.get("state") in TERMINAL_STATES
            ):
                return {"protocol": PROTOCOL, "ok": True, "ended": "state"}
            if now >= next_check:
                next_check = now + WATCH_CHECK_S
                if not verified_alive(recorded_identity(state, "agent", deployment_dir)):
                    status = cmd_status(deployment_dir)
                    if status.get("state") not in TERMINAL_STATES:
                        say({"status": status})
                        return {"protocol": PROTOCOL, "ok": True, "ended": "supervisor"}
        if now >= deadline:
            return {"protocol": PROTOCOL, "ok": True, "ended": "timeout"}
        if now - said_at >= WATCH_BEAT_S:
            say({"beat": round(time.time(), 3)})
        time.sleep(WATCH_TICK_S)


TAIL_READ_MAX = 64 << 20  # the most of a log one tail reads, whatever -n asks


def _read_window(path: str, size: int, window: int) -> bytes:
    """The lines in the last ``window`` bytes of ``path`` (a line cut at the start left out)."""
    start = max(size - window, 0)
    try:
        fd = os.open(path, os.O_RDONLY | _NOFOLLOW)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        handle.seek(start)
        data = handle.read(size - start)
    if start > 0:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return data


def cmd_tail(
    deployment_dir: str, run_id: str | None, lines: int, bytes_per_line: int
) -> dict[str, Any]:
    """The last ``lines`` of a run's log, read on the host (``orch logs -n N`` in one command
    instead of a file session and a read per piece): ``run_id``, else the deployment's current
    run, else its newest on disk. From ``server.log.1`` too when the log holds fewer lines
    since a rotation. Answers the bytes (base64: orch decodes them), the log's size (where
    ``-f`` goes on from) and the rotated file's size (how ``-f`` sees the next rotation)."""
    paths = Paths(deployment_dir)
    if not secure_deployment(paths):
        return {"protocol": PROTOCOL, "ok": False, "reason": "not deployed"}
    if run_id is None:
        state = read_json(paths.state) or {}
        current = state.get("run_id")
        run_id = current if isinstance(current, str) else None
    if run_id is None:
        names = sorted(os.listdir(paths.runs)) if os.path.isdir(paths.runs) else []
        if not names:
            return {"protocol": PROTOCOL, "ok": False, "reason": "no runs"}
        run_id = names[-1]
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", run_id):
        return {"protocol": PROTOCOL, "ok": False, "reason": f"not a run id: {run_id!r}"}
    log = os.path.join(paths.runs, run_id, "server.log")
    rotated = f"{log}.1"

    def size_of(path: str) -> int | None:
        try:
            return os.lstat(path).st_size
        except FileNotFoundError:
            return None

    rotated_size, size = size_of(rotated), size_of(log)
    answer: dict[str, Any] = {
        "protocol": PROTOCOL, "ok": size is not None, "run_id": run_id, "log": log,
        "size": size, "rotated_size": rotated_size,
    }  # fmt: skip
    if size is None:
        answer["reason"] = "no log"
        return answer
    window = min(max(lines, 0) * max(bytes_per_line, 1), TAIL_READ_MAX)
    data = _read_window(log, size, window) if lines > 0 else b""
    if lines > 0 and size < window and rotated_size and data.count(b"\n") < lines:
        data = _read_window(rotated, rotated_size, window - size) + data
    kept = b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""
    answer["data"] = base64.b64encode(kept).decode("ascii")
    return answer


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
    second stop finds nothing to do. Nothing that is not verifiably ours is signalled. On a
    full disk it stops all the same: what it could not write is said in ``notes`` (the answer
    then shows the end as this stop knows it)."""
    paths = Paths(deployment_dir)
    state = _recorded_state(paths) if secure_deployment(paths) else None
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    clock = RealClock()
    notes: list[str] = []
    agent = recorded_identity(state, "agent", deployment_dir)
    asked = False  # its live supervisor was asked to stop, and ended by itself
    if verified_alive(agent) and agent is not None:
        grace = timeout
        try:
            write_json_atomic(paths.stop_request, {"grace_s": timeout})
        except OSError as exc:
            grace = max(timeout, _spec_for(paths, state).stop_timeout_s)
            notes.append(
                f"{paths.stop_request}: {os_error_text(exc)}: the supervisor stopped the server "
                "with the profile's stop_timeout_s, not --timeout"
            )
        os.kill(int(agent["pid"]), signal.SIGTERM)
        deadline = clock.monotonic() + grace + 10.0 + _members_stop_s(paths, state)
        while verified_alive(agent) and clock.monotonic() < deadline:
            clock.sleep(0.05)
        asked = not verified_alive(agent)
        if not asked:  # it did not finish in time: take over its last duty
            os.kill(int(agent["pid"]), signal.SIGKILL)
            clock.sleep(0.1)
        with contextlib.suppress(OSError):
            os.unlink(paths.stop_request)  # not read when it stopped in BACKOFF
    final = read_json(paths.state) or state
    leftovers: list[int] = []
    unrecorded: dict[str, Any] | None = None
    if final.get("state") not in TERMINAL_STATES:
        # it ended on request but recorded no end: for want of room, or it died meanwhile
        unwritten = asked and bool(disk_room(paths.root)["full"])
        leftovers, stopper = _stop_for_a_dead_supervisor(paths, final, timeout, clock, unwritten)
        if stopper._state_unsaved:
            unrecorded = stopper.state
            why = (stopper.state.get("disk") or {}).get("last_error") or "not written"
            notes.append(
                f"{paths.state}: {why}: the end of this stop is not recorded on the host "
                "(orch down again once there is room records it)"
            )
    elif final.get("run_id"):
        leftovers = _kill_leftovers(paths.root, str(final["run_id"]), {}, clock)
    result = cmd_status(deployment_dir, unrecorded)
    result["leftovers_killed"] = leftovers
    result["notes"] = notes
    return result


def _members_stop_s(paths: Paths, state: dict[str, Any]) -> float:
    """How much longer a group's coordinator takes to stop than a server's supervisor: after
    its own server, it waits (bounded) for every member to confirm its shutdown."""
    group = state.get("group")
    if not isinstance(group, dict) or group.get("rank") != 0:
        return 0.0
    spec_group = _spec_for(paths, state).group
    grace = spec_group.member_stop_grace_s if spec_group is not None else 5.0
    return grace + GROUP_REPLY_MARGIN_S


def _stop_for_a_dead_supervisor(
    paths: Paths, recorded: dict[str, Any], timeout: float, clock: Clock, asked: bool = False
) -> tuple[list[int], Supervisor]:
    """The supervisor died without recording an end: stop its server if it is still the one
    recorded (group SIGTERM, grace, SIGKILL, sweep), then record the end as it would have.
    ``asked``: it was asked to stop and ended by itself, but its end found no room (a full
    disk): a stop on request, not a death. The pids swept and the stopper (its state)."""
    spec = _spec_for(paths, recorded)
    stopper = Supervisor(spec, paths, clock=clock)
    stopper.stop_grace_s = timeout
    stopper.resume(recorded)
    if stopper.state.get("state") == CORRUPT_STATE:  # rebuilt from the processes: one runs
        stopper.state["state"] = RUNNING
    stopper.state.pop("corrupt_state", None)  # written anew, whole
    server = recorded_identity(recorded, "server", paths.root)
    run_id = str(recorded.get("run_id") or "")
    if asked:
        message = "stopped; its supervisor's record of the end found no room"
    else:
        message = f"stopped; its supervisor (pid {recorded.get('agent_pid')}) had died"
    if verified_alive(server) and server is not None:
        stopper._change_state(STOPPING, message="stopping (its supervisor had died)")
        process = _Adopted(server, stopper.world, clock)
        stopper._terminate(process, _Descendants(process.pid, clock, stopper.world))
        stopper._record_exit(run_id, LOST_RETURNCODE, ExitVerdict(STOPPED, message))
    elif run_id and (stopper.state.get("last_exit") or {}).get("run_id") != run_id:
        if asked:
            ended = ExitVerdict(STOPPED, "stopped on request")
        else:
            ended = ExitVerdict(LOST, "its supervisor died and the server was gone when stopped")
        stopper._record_exit(run_id, LOST_RETURNCODE, ended)
    swept = _kill_leftovers(paths.root, run_id, {}, clock) if run_id else []
    stopper._change_state(EXITED, pid=None, pgid=None, server=None, message=message)
    stopper._event("stopped", supervisor_died=not asked, swept=swept)
    return swept, stopper


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
    skipped = 0
    for raw in tail:
        record = _event_record(raw)
        if record is None:
            skipped += raw.strip() != b""
            continue
        run_id = record.get("run_id")
        if not isinstance(run_id, str):
            continue
        known = events.setdefault(run_id, {})
        kind = record.get("event")
        if kind == "start":
            known.update(started_at=_scalar(record.get("at")), pid=_scalar(record.get("pid")))
        elif kind == "ready":
            known["ready_at"] = _scalar(record.get("at"))
        elif kind == "exit":
            ended = _exit_record(record)
            if ended is None:
                skipped += 1
                continue
            known["exit"] = ended
        elif kind == "swept" and isinstance(known.get("exit"), dict):
            pids = record.get("pids")
            known["exit"]["swept_pids"] = (
                [pid for pid in pids if isinstance(pid, int)] if isinstance(pids, list) else []
            )
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
    return {
        "protocol": PROTOCOL,
        "runs": runs,
        "now": RealClock().wall(),
        "skipped_events": skipped,
    }


# The longest line of events.jsonl read: the agent's own events are far shorter (a verdict's
# message is at most a few KB). A longer one, or one nested deeper than json's recursion limit
# (100,000 "[" broke ``orch runs``: issue 26), is no event the agent wrote: skipped and counted.
EVENT_LINE_MAX = 1 << 20


def _event_record(raw: bytes) -> dict[str, Any] | None:
    if len(raw) > EVENT_LINE_MAX:
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return record if isinstance(record, dict) else None


def _exit_record(record: dict[str, Any]) -> dict[str, Any] | None:
    """An ``exit`` event as the agent writes it (see _record_exit), else None."""
    ended = {key: record.get(key) for key in (
        "run_id", "returncode", "signal", "class", "message", "at", "was_ready",
    )}  # fmt: skip
    shaped = (
        isinstance(ended["returncode"], int) and not isinstance(ended["returncode"], bool)
        and isinstance(ended["class"], str) and isinstance(ended["message"], str)
        and isinstance(ended["at"], (int, float)) and isinstance(ended["was_ready"], bool)
        and (ended["signal"] is None or isinstance(ended["signal"], str))
    )  # fmt: skip
    return dict(ended, swept_pids=[]) if shaped else None


def _scalar(value: Any) -> Any:
    """A field of an event as the agent writes them (text, a number, a flag): anything else is
    nobody's event field and is answered as None."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else None


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


def cmd_probe(
    port: int,
    model: str | None,
    bind: str,
    env_file: str | None,
    deployment_dir: str | None = None,
) -> dict[str, Any]:
    """Facts orch checks before a launch; secrets are never part of them. ``env_file``: the
    server's environment (0600, removed once read), so that ``import sglang`` is checked the
    way the server will import it (PYTHONPATH, LD_LIBRARY_PATH ...). With ``deployment_dir``,
    the deployment's status (cmd_status) comes with them, in one command; while something of
    that deployment runs (or died without an end) only the status: the facts would be those
    of a host the next step changes (``"facts": "skipped"``)."""
    import socket

    env = dict(os.environ)
    inherited = distributed_env(env)  # before the spec's own: what this host adds by itself
    if env_file == "-":  # with the command, on stdin: never in a file, never in an argv
        given = json.loads(sys.stdin.buffer.read().decode("utf-8") or "{}")
        env.update({str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {})
    elif env_file is not None:
        try:
            check_file(env_file, "the probe's environment file")
            env.update(read_json(env_file) or {})
        finally:
            remove_env_file(env_file)

    status = cmd_status(deployment_dir) if deployment_dir is not None else None
    if status is not None and (
        status.get("agent_alive") or status.get("server_alive") or status.get("stale")
    ):
        return {"protocol": PROTOCOL, "facts": "skipped", "status": status}
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
    facts["env"] = inherited
    if status is not None:
        facts["status"] = status
    return facts


# Variables of the host's own environment that shape a distributed run: a launch group's nodes
# must agree on them (orch compares them across nodes), and a server inherits them silently.
DISTRIBUTED_ENV_PREFIXES = (
    "NCCL_", "GLOO_", "SGLANG_", "TORCH_", "PYTORCH_", "CUDA_", "NVSHMEM_", "UCX_", "HF_",
    "TRANSFORMERS_", "FLASHINFER_", "TRITON_", "NVIDIA_", "MC_", "TP_SOCKET_IFNAME",
    "MASTER_ADDR", "MASTER_PORT", "LD_LIBRARY_PATH", "OMP_NUM_THREADS",
)  # fmt: skip
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL", re.IGNORECASE)


def distributed_env(environ: dict[str, str]) -> dict[str, str]:
    """``environ``'s variables of DISTRIBUTED_ENV_PREFIXES; a secret-looking one (HF_TOKEN) as a
    digest of its value: enough to tell two nodes apart, nothing to read."""
    import hashlib

    found = {}
    for name, value in environ.items():
        if not name.startswith(DISTRIBUTED_ENV_PREFIXES):
            continue
        if _SECRET_NAME.search(name):
            value = "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:12]
        found[name] = value
    return dict(sorted(found.items()))


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


# -- the rendezvous reachability probe ------------------------------------------------------------
# Before a group starts, orch checks that rank 0's rendezvous (and control) port is reachable over
# TCP from every other node: a wrong address, a firewall or a wrong NIC then fail by name instead
# of as a silent hang at ``Init torch distributed begin``. A short-lived listener on rank 0's node
# stands in for the server; each other node connects and exchanges a token with it.

PROBE_LINE_MAX = 1024  # the token line either way
PROBE_IO_S = 5.0  # one exchange, once connected


def cmd_listen(bind: str, port: int, token: str, seconds: float, expect: int) -> dict[str, Any]:
    """Bind ``bind:port`` (here, so that a port in use is answered at once), then detach (double
    fork, like the supervisor, so that an SSH exec returns) a listener that answers each
    connection sending the token line with ``ok <token>``, for at most ``seconds``, or until
    ``expect`` (> 0) connections were answered: the port is the server's right after."""
    import socket

    address = host_port(bind, port)
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn and the coordinator do: a previous holder's connections in TIME_WAIT are no
    # reason to fail (the server will bind despite them); a listener holding the port is.
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((bind, port))
        listener.listen(64)
    except OSError as exc:
        listener.close()
        return {
            "protocol": PROTOCOL, "ok": False,
            "reason": f"cannot listen on {address}: {exc.strerror or exc}",
        }  # fmt: skip
    reader, writer = os.pipe()
    first = os.fork()
    if first:
        os.close(writer)
        listener.close()
        with os.fdopen(reader, "rb") as pipe:
            answer = pipe.read()
        os.waitpid(first, 0)
        if not answer.strip().isdigit():
            return {"protocol": PROTOCOL, "ok": False, "reason": "the listener died detaching"}
        return {"protocol": PROTOCOL, "ok": True, "pid": int(answer), "address": address}
    try:
        os.close(reader)
        os.setsid()
        if os.fork():
            os._exit(0)
        # No terminal, no SSH channel: the caller's pipes close once the parent answered.
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        os.write(writer, str(os.getpid()).encode())
        os.close(writer)
        _answer_probes(listener, token.encode(), seconds, expect, RealClock())
    finally:
        os._exit(0)


def _answer_probes(
    listener: socket.socket, token: bytes, seconds: float, expect: int, clock: Clock
) -> None:
    """Answer the token line on each connection, each in its own thread (a connection that
    sends nothing holds no other up), until ``seconds`` passed or ``expect`` were answered."""
    deadline = clock.monotonic() + seconds
    lock = threading.Lock()
    enough = threading.Event()
    answered = 0

    def answer(connection: socket.socket) -> None:
        nonlocal answered
        with connection:
            try:
                connection.settimeout(PROBE_IO_S)
                if not hmac.compare_digest(_read_probe_line(connection).strip(), token):
                    return
                connection.sendall(b"ok " + token + b"\n")
            except OSError:
                return
        with lock:
            answered += 1
            if 0 < expect <= answered:
                enough.set()

    while not enough.is_set():
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            break
        listener.settimeout(min(remaining, 0.2))
        try:
            connection, _ = listener.accept()
        except OSError:  # the timeout: look at the clock and at ``enough`` again
            continue
        threading.Thread(target=answer, args=(connection,), daemon=True).start()
    listener.close()


def _read_probe_line(connection: socket.socket) -> bytes:
    """Up to the first newline (or PROBE_LINE_MAX bytes, or the end)."""
    received = b""
    while b"\n" not in received and len(received) < PROBE_LINE_MAX:
        chunk = connection.recv(PROBE_LINE_MAX)
        if not chunk:
            break
        received += chunk
    return received.split(b"\n", 1)[0]


def cmd_reach(host: str, port: int, token: str, timeout: float) -> dict[str, Any]:
    """From this node: connect to ``host:port``, send the token line, expect ``ok <token>``
    from ``agent.py listen``. Always an answer (the caller decides): ok and the time to
    connect, or why not."""
    import socket

    address = host_port(host, port)
    clock = RealClock()
    began = clock.monotonic()
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return {"protocol": PROTOCOL, "ok": False, "reason": _connect_failure(exc, timeout)}
    connect_ms = round((clock.monotonic() - began) * 1000.0, 3)
    with connection:
        try:
            connection.settimeout(max(timeout - (clock.monotonic() - began), 0.1))
            connection.sendall(token.encode() + b"\n")
            answer = _read_probe_line(connection)
        except OSError as exc:
            return {
                "protocol": PROTOCOL, "ok": False, "connect_ms": connect_ms,
                "reason": f"connected, then no answer: {_connect_failure(exc, timeout)}",
            }  # fmt: skip
    if not hmac.compare_digest(answer.strip(), b"ok " + token.encode()):
        return {
            "protocol": PROTOCOL, "ok": False, "connect_ms": connect_ms,
            "reason": f"wrong answer from {address}: another program holds the port, not "
            "orch's probe listener",
        }  # fmt: skip
    return {"protocol": PROTOCOL, "ok": True, "connect_ms": connect_ms}


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
    if arguments[:1] == ["reach"]:
        return 0  # an unreachable port is an answer, not the agent's failure: the caller decides
    return 0 if result.get("ok", True) else 3


def _dispatch(argv: Sequence[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="orch-agent", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=f"orch-agent protocol {PROTOCOL}")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start")
    start.add_argument("--dir", required=True)
    start.add_argument("--spec", required=True)
    # then watch the new run on the same channel (its answer first, as {"start": ...})
    start.add_argument("--watch", type=float, metavar="SECONDS")
    for name in ("status", "runs", "adopt"):
        commands.add_parser(name).add_argument("--dir", required=True)
    watch = commands.add_parser("watch")
    watch.add_argument("--dir", required=True)
    watch.add_argument("--run", required=True)
    watch.add_argument("--offset", type=int, default=0)
    watch.add_argument("--seconds", type=float, default=3600.0)
    for watching in (start, watch):  # inspect once READY (see cmd_watch)
        watching.add_argument("--inspect-port", type=int)
        watching.add_argument("--inspect-host", default="127.0.0.1")
        watching.add_argument("--inspect-env", action="append", default=[])
    tail = commands.add_parser("tail")
    tail.add_argument("--dir", required=True)
    tail.add_argument("--run")
    tail.add_argument("--lines", type=int, default=100)
    tail.add_argument("--bytes-per-line", type=int, default=512)
    stop = commands.add_parser("stop")
    stop.add_argument("--dir", required=True)
    stop.add_argument("--timeout", type=float, default=30.0)
    probe = commands.add_parser("probe")
    probe.add_argument("--port", type=int, required=True)
    probe.add_argument("--model")
    probe.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - checking that nobody holds it
    probe.add_argument("--env-file")
    probe.add_argument("--dir")  # the deployment's status with the facts
    inspect = commands.add_parser("inspect")
    inspect.add_argument("--dir", required=True)
    inspect.add_argument("--pid", type=int)
    inspect.add_argument("--port", type=int)
    inspect.add_argument("--host", default="127.0.0.1")
    inspect.add_argument("--env", action="append", default=[])
    inspect.add_argument("--log")
    listen = commands.add_parser("listen")
    listen.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - the other nodes connect
    listen.add_argument("--port", type=int, required=True)
    listen.add_argument("--token", required=True)
    listen.add_argument("--seconds", type=float, default=60.0)
    listen.add_argument("--expect", type=int, default=0)  # end after this many answers (0: none)
    reach = commands.add_parser("reach")
    reach.add_argument("--host", required=True)
    reach.add_argument("--port", type=int, required=True)
    reach.add_argument("--token", required=True)
    reach.add_argument("--timeout", type=float, default=5.0)
    args = parser.parse_args(argv)
    at_ready = None
    if args.command in ("start", "watch") and args.inspect_port is not None:
        at_ready = InspectAtReady(args.inspect_port, args.inspect_host, tuple(args.inspect_env))
    if args.command == "start":
        result = cmd_start(args.dir, args.spec)
        run_id = (result.get("state") or {}).get("run_id") if result.get("ok") else None
        if args.watch is not None and isinstance(run_id, str):
            sys.stdout.write(json.dumps({"start": result}, sort_keys=True) + "\n")
            sys.stdout.flush()
            result = cmd_watch(args.dir, run_id, 0, args.watch, at_ready)
    elif args.command == "adopt":
        result = cmd_adopt(args.dir)
    elif args.command == "status":
        result = cmd_status(args.dir)
    elif args.command == "watch":
        result = cmd_watch(args.dir, args.run, args.offset, args.seconds, at_ready)
    elif args.command == "stop":
        result = cmd_stop(args.dir, args.timeout)
    elif args.command == "runs":
        result = cmd_runs(args.dir)
    elif args.command == "tail":
        result = cmd_tail(args.dir, args.run, args.lines, args.bytes_per_line)
    elif args.command == "inspect":
        result = cmd_inspect(args.dir, args.pid, args.port, args.host, args.env, args.log)
    elif args.command == "listen":
        result = cmd_listen(args.bind, args.port, args.token, args.seconds, args.expect)
    elif args.command == "reach":
        result = cmd_reach(args.host, args.port, args.token, args.timeout)
    else:
        result = cmd_probe(args.port, args.model, args.bind, args.env_file, args.dir)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
