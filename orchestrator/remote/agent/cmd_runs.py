"""``runs``: every run of a deployment, with its log and, from events.jsonl, how it went."""

from __future__ import annotations

import json
import os
from typing import Any

from .files import NOFOLLOW, Paths
from .protocol import PROTOCOL
from .trust import secure_deployment
from .world import RealClock


def cmd_runs(deployment_dir: str, events_bytes: int = 4 << 20) -> dict[str, Any]:
    """Every run of the deployment (its directory under ``runs/``) with its log, and from the
    last ``events_bytes`` of events.jsonl (whatever its size) its start, READY and exit (class,
    status, message); ``now`` is this host's clock, for the length of a run still going."""
    paths = Paths(deployment_dir)
    secure_deployment(paths)
    events: dict[str, dict[str, Any]] = {}
    tail: list[bytes] = []
    try:
        handle = os.fdopen(os.open(paths.events, os.O_RDONLY | NOFOLLOW), "rb")
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
        runs.append(
            {
                "run_id": name,
                "log": log,
                "size": size,
                "started_at": known.get("started_at"),
                "ready_at": known.get("ready_at"),
                "pid": known.get("pid"),
                "exit": known.get("exit"),
            }
        )
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
    """An ``exit`` event as the agent writes it (see Supervisor.record_exit), else None."""
    ended = {
        key: record.get(key)
        for key in (
            "run_id",
            "returncode",
            "signal",
            "class",
            "message",
            "at",
            "was_ready",
        )
    }
    shaped = (
        isinstance(ended["returncode"], int)
        and not isinstance(ended["returncode"], bool)
        and isinstance(ended["class"], str)
        and isinstance(ended["message"], str)
        and isinstance(ended["at"], (int, float))
        and isinstance(ended["was_ready"], bool)
        and (ended["signal"] is None or isinstance(ended["signal"], str))
    )
    return dict(ended, swept_pids=[]) if shaped else None


def _scalar(value: Any) -> Any:
    """A field of an event as the agent writes them (text, a number, a flag): anything else is
    nobody's event field and is answered as None."""
    return value if value is None or isinstance(value, (str, int, float, bool)) else None
