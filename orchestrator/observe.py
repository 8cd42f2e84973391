"""SGLang's log lines -> LogEvents: phases, weight-loading progress, readiness, errors.  [pure]

Formats are SGLang's real ones (docs/sglang-facts.md §2):
``[YYYY-mm-dd HH:MM:SS(.mmm)( TP0)] message``;
tqdm progress redrawn with ``\\r``. The log vocabulary (the record prefix, the config line, the
ready line) and exit classification live in the agent (it decides states and restarts on the
host) and are used here, so that orch and its agent read a log the same way.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.model import frozen_map
from orchestrator.remote.agent import (
    LOG_RECORD,
    ExitVerdict,
    LogRecord,
    classify_exit,
    config_line_payload,
    is_ready_line,
    last_exception_line,
    log_record,
    strip_log_prefix,
)

__all__ = [
    "LINE_RE",
    "ExitVerdict",
    "LineSplitter",
    "LogEvent",
    "LogRecord",
    "classify_exit",
    "config_line_payload",
    "is_ready_line",
    "last_exception_line",
    "log_record",
    "parse_line",
    "strip_log_prefix",
]

# SGLang's log-record prefix, groups timestamp (1), rank (2) and message (3): the agent's one
# regex under the name orch has used for it.
LINE_RE = LOG_RECORD
_PROGRESS_RE = re.compile(
    r"Loading (?:safetensors )?checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)"
)
_KEY_VALUE_RE = re.compile(r"([a-z_ ]+?)=([^,]+?)(?:,|\.?$)")


@dataclass(frozen=True)
class LogEvent:
    kind: str  # config, load_begin, load_progress, load_end, memory_pool, graph_begin,
    #            graph_end, capacity, http_up, ready, error, warning
    text: str  # the message, without SGLang's timestamp prefix
    timestamp: str | None = None
    rank: str | None = None  # TP0, DP1 TP3 ... on scheduler lines of parallel runs
    done: int | None = None
    total: int | None = None
    fields: Mapping[str, str] = field(default_factory=frozen_map)


def parse_line(line: str) -> LogEvent | None:
    """The event a line of SGLang output stands for, or None for ordinary chatter."""
    record = log_record(line)
    timestamp = rank = None
    text = line.strip()
    if record is not None:
        timestamp, rank, text = record

    def event(kind: str, **extra: object) -> LogEvent:
        return LogEvent(kind, text, timestamp, rank, **extra)  # type: ignore[arg-type]

    if (progress := _PROGRESS_RE.search(text)) is not None:
        return event("load_progress", done=int(progress.group(2)), total=int(progress.group(3)))
    if config_line_payload(line) is not None:
        return event("config")
    if is_ready_line(line):
        return event("ready")
    if text.startswith("Load weight begin."):
        return event("load_begin", fields=_key_values(text))
    if text.startswith("Load weight end."):
        return event("load_end", fields=_key_values(text))
    if text.startswith("Memory pool end."):
        return event("memory_pool", fields=_key_values(text))
    lowered = text.lower()
    if lowered.startswith("capture") and "graph begin" in lowered:
        return event("graph_begin", fields=_key_values(text))
    if lowered.startswith("capture") and "graph end" in lowered:
        return event("graph_end", fields=_key_values(text))
    if text.startswith("max_total_num_tokens="):
        return event("capacity", fields=_key_values(text))
    if "Uvicorn running on " in text:
        return event("http_up")
    if text.startswith("Scheduler hit an exception") or _is_exception_line(text, record):
        return event("error")
    if text.startswith(("WARNING", "Warning")) or " warning" in lowered[:40]:
        return event("warning")
    return None


def _is_exception_line(text: str, record: LogRecord | None) -> bool:
    return record is None and last_exception_line([text]) is not None


def _key_values(text: str) -> Mapping[str, str]:
    """``avail mem=88.10 GB, mem usage=51.10 GB.`` -> {"avail_mem": "88.10 GB", ...}."""
    body = text.split(". ", 1)[1] if ". " in text else text
    found = {
        key.strip().replace(" ", "_"): value.strip().rstrip(".")
        for key, value in _KEY_VALUE_RE.findall(body)
        if "[" not in value and "]" not in value  # lists (num_tokens=[1, 2, ...]) are noise here
    }
    return frozen_map(found)


class LineSplitter:
    """Bytes as they arrive -> complete lines, split on ``\\n`` and tqdm's ``\\r``."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[str]:
        pieces = re.split(rb"[\r\n]", self._partial + chunk)
        self._partial = pieces.pop()
        return [piece.decode("utf-8", "replace") for piece in pieces if piece]

    def flush(self) -> list[str]:
        rest, self._partial = self._partial, b""
        return [rest.decode("utf-8", "replace")] if rest else []
