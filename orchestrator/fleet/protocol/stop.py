"""``stop``: the deployment stopped (SIGTERM to the group, SIGKILL after the timeout, then the
sweep of descendants that escaped it), its state after, and what the sweep killed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, refused
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.model import RunState


def stop_request(directory: str, timeout: float) -> Request:
    """Orch waits a minute past the agent's own ``timeout`` for its answer."""
    return Request(
        ("stop", "--dir", directory, "--timeout", f"{timeout:g}"), timeout=timeout + 60.0
    )


@dataclass(frozen=True)
class StopReply:
    state: RunState
    leftovers_killed: tuple[int, ...]
    notes: tuple[str, ...] = ()  # what the stop could not do or write (a full disk)


def decode_stop(document: Any) -> StopReply:
    refused(document)
    reader = Reader(document, "agent stop")
    killed = tuple(int(pid) for pid in reader.items("leftovers_killed"))
    notes = tuple(str(note) for note in reader.items("notes"))
    return StopReply(decode_state(document), killed, notes)
