"""SGLang's log vocabulary (docs/sglang-facts.md §2): the record prefix, the config line, the
ready lines, the gated launch's lines, the line that ends a traceback. Defined once: the
supervisor, orch's observe stage and diff-effective read a log the same way."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import NamedTuple

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


# The scheduler's batch lines (0.5.11 to 0.5.23: observability/scheduler_metrics_mixin.py,
# managers/scheduler_components/metrics_reporter.py): ``Prefill batch, #new-seq: ...`` for each
# prefill (each chunk of a chunked one), ``Decode batch, #running-req: ...`` every
# --decode-log-interval (40) decode steps; `` [N]`` after ``batch`` with SGLANG_LOG_FORWARD_ITERS.
BATCH_LINE_MARK = " batch"
_BATCH_MESSAGE = re.compile(r"(?:Prefill|Decode) batch(?: \[\d+\])?, ")


def is_batch_line(line: str) -> bool:
    """A scheduler logged a prefill or decode batch: the server is making progress."""
    if BATCH_LINE_MARK not in line:
        return False
    record = log_record(line.rstrip("\r\n"))
    return record is not None and _BATCH_MESSAGE.match(record.message) is not None


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


# ``ExcType: message`` (``Exception: ...`` and a message starting on the next line included).
# Triton's OutOfResources is the one failure type whose name ends in none of the usual words.
EXCEPTION_LINE = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*)?(?:Error|Exception|Exit|Interrupt|Warning|OutOfResources)"
    r"(?::(?: .*)?)?$"
)


def last_exception_line(lines: Sequence[str]) -> str | None:
    """The ``ExcType: message`` line that ends the last traceback, if any."""
    for line in reversed(lines):
        text = strip_log_prefix(line)
        if EXCEPTION_LINE.match(text):
            return text
    return None
