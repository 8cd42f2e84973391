"""``watch``: one run's startup as it happens, on one open channel (also what ``start --watch``
streams after its answer): the log's new bytes, each state change, the supervisor checked while
the server starts, and the inspection at READY."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.protocol.inspect import InspectRequest, inspect_at_ready_args
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.model import RunState


def watch_args(
    directory: str, run_id: str, offset: int, seconds: float, inspect: InspectRequest | None
) -> tuple[str, ...]:
    """The run's log from ``offset`` and its states, for ``seconds`` (at least one)."""
    return (
        "watch",
        "--dir",
        directory,
        "--run",
        run_id,
        "--offset",
        str(offset),
        "--seconds",
        f"{max(seconds, 1.0):.0f}",
        *inspect_at_ready_args(inspect),
    )


@dataclass(frozen=True)
class Inspected:
    """What ``inspect`` answered at READY, kept as sent (``inspect.decode_inspect`` reads it
    when the launch compares it)."""

    answer: dict[str, Any]


@dataclass(frozen=True)
class LogBytes:
    data: bytes  # the log's next bytes, as the file holds them


@dataclass(frozen=True)
class StateChanged:
    state: RunState  # the supervisor's state.json, as it changed


@dataclass(frozen=True)
class StatusChecked:
    state: RunState  # the agent's status, asked while the server starts: is the supervisor alive?


WatchEvent = Inspected | LogBytes | StateChanged | StatusChecked


def decode_watch_event(event: dict[str, Any]) -> WatchEvent | None:
    """One line of the stream; None for one this orch does not know (the heartbeat, a newer
    agent's)."""
    if "inspect" in event and isinstance(event["inspect"], dict):
        return Inspected(event["inspect"])
    if "log" in event:
        return LogBytes(base64.b64decode(str(event["log"])))
    if "state" in event and isinstance(event["state"], dict):
        return StateChanged(decode_state(event["state"], agent_alive=True))
    if "status" in event and isinstance(event["status"], dict):
        return StatusChecked(decode_state(event["status"]))
    return None
