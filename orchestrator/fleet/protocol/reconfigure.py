"""``reconfigure``: a running supervisor takes a new launch's spec without its server being
touched (orch sync's ``agent-only`` and ``live`` changes). The spec and the launch script travel
on stdin as ``start``'s do, with the live changes: ``{"endpoint": "/configure_logging" |
"/set_internal_state", "body": {...}}`` each, applied by the agent to the server over HTTP first
and verified in ``/get_server_info``; any failure and nothing is recorded."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, refused
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.model import RunState

# The endpoints the agent applies (orchestrator/sglang/live.py says which field each changes).
LIVE_ENDPOINTS = ("/configure_logging", "/set_internal_state")

LiveChanges = Mapping[str, Any] | Sequence[Mapping[str, Any]]


def live_changes(live: LiveChanges | None) -> list[dict[str, Any]]:
    """The live changes as the agent reads them (a list of ``{"endpoint", "body"}``), from that
    list, one such change, or a mapping endpoint -> body. ValueError for another endpoint."""
    if live is None:
        return []
    if isinstance(live, Mapping):
        if "endpoint" in live:
            changes = [dict(live)]
        else:
            changes = [{"endpoint": endpoint, "body": body} for endpoint, body in live.items()]
    else:
        changes = [dict(change) for change in live]
    for change in changes:
        if change.get("endpoint") not in LIVE_ENDPOINTS or not isinstance(change.get("body"), dict):
            raise ValueError(
                f"a live change is {{endpoint: one of {', '.join(LIVE_ENDPOINTS)}, body: {{...}}}},"
                f" not {sorted(change)}"
            )
    return [{"endpoint": c["endpoint"], "body": dict(c["body"])} for c in changes]


def reconfigure_request(
    directory: str,
    spec: Mapping[str, Any],
    launch_script: str,
    live: LiveChanges | None = None,
) -> Request:
    """The spec (the server's environment, secrets included) on stdin, never in an argv."""
    stdin = json.dumps(
        {"spec": dict(spec), "launch_script": launch_script, "live": live_changes(live)}
    ).encode()
    return Request(("reconfigure", "--dir", directory, "--spec", "-"), stdin, timeout=120.0)


@dataclass(frozen=True)
class ReconfigureReply:
    ok: bool
    reason: str  # why not, when not ok
    state: RunState | None  # the deployment's state after (when ok)
    live_applied: Mapping[str, Any] = field(default_factory=dict)  # field -> value, verified


def decode_reconfigure(document: Any) -> ReconfigureReply:
    refused(document)
    reader = Reader(document, "agent reconfigure")
    state = reader.document.get("state")
    return ReconfigureReply(
        ok=reader.flag("ok", False),
        reason=reader.text("reason", ""),
        state=decode_state(state) if isinstance(state, dict) else None,
        live_applied=dict(reader.mapping("live_applied")),
    )
