"""A replica killed by SIGKILL behind a real smg, with no orch running: its agent takes it out of
the gateway at once (smg's own health checks, every 60 s as a team runs them, would take a
minute), restarts it, and registers it again once READY (issue 30, item 5). Seen from the
gateway (``GET /workers`` with the tier's key) and from the agent's own record (events.jsonl)."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace
from tests.gateway.conftest import Gateway
from tests.gateway.test_rolling import _fleet, _ready, _up

WATCH_TIMEOUT_S = 60.0


@dataclass
class Seen:
    """What the gateway listed for one worker URL, each look stamped (monotonic seconds)."""

    looks: list[tuple[float, str | None]]  # None: not listed; else smg's status

    def first(self, check: Callable[[str | None], bool], after: float = 0.0) -> float | None:
        for at, status in self.looks:
            if at >= after and check(status):
                return at
        return None


def _rows(space: Workspace, name: str) -> list[dict[str, Any]]:
    outcome = space.orch("status", name, "--json")
    assert outcome.code == ExitCode.OK, outcome.out + outcome.err
    document = json.loads(outcome.out)
    rows = document if isinstance(document, list) else document.get("rows", document)
    assert isinstance(rows, list), document
    return rows


def _status_at(gateway: Gateway, url: str) -> str | None:
    for worker in gateway.get("/workers")["workers"]:
        if worker["url"] == url:
            healthy = worker["status"] == "ready" and worker["is_healthy"]
            return "ready" if healthy else str(worker["status"])
    return None


def _watch(gateway: Gateway, url: str, since: float) -> Seen:
    """Until the worker is listed ready again after having left (or a minute passed)."""
    seen = Seen([])
    left = False
    deadline = since + WATCH_TIMEOUT_S
    while time.monotonic() < deadline:
        status = _status_at(gateway, url)
        now = time.monotonic() - since
        seen.looks.append((now, status))
        left = left or status != "ready"
        if left and status == "ready":
            break
        time.sleep(0.05)
    return seen


def _events(log: str) -> list[dict[str, Any]]:
    """The deployment's events.jsonl (runs/<id>/server.log -> the deployment directory)."""
    path = Path(log).parents[2] / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_killed_replica_is_deregistered_restarted_and_registered_again_without_orch(
    local_workspace: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway = start_gateway(fast_health=False)  # smg's own checks: every 60 s, 3 failures
    name = _fleet(local_workspace, gateway, monkeypatch)
    _up(local_workspace, name, gateway)  # orch registered both; orch is not running from here
    rows = {row["replica"]: row for row in _rows(local_workspace, name)}
    victim, other = rows[0], rows[1]
    victim_url = f"http://127.0.0.1:{victim['port']}"
    other_url = f"http://127.0.0.1:{other['port']}"
    assert _ready(gateway) == sorted([victim_url, other_url])

    killed_at = time.monotonic()
    os.kill(victim["pid"], signal.SIGKILL)
    seen = _watch(gateway, victim_url, killed_at)

    # the gateway: out (draining, then gone) within moments, then back, ready
    out = seen.first(lambda status: status != "ready")
    assert out is not None, seen.looks
    gone = seen.first(lambda status: status is None, after=out)
    back = seen.first(lambda status: status == "ready", after=out)
    assert gone is not None, seen.looks
    assert back is not None, f"not registered again within {WATCH_TIMEOUT_S:g} s: {seen.looks}"
    # draining: a DELETE's doing (the agent's), not smg's own health checks (a minute away,
    # which would mark it unhealthy, not draining)
    assert [status for at, status in seen.looks if at == out] == ["draining"], seen.looks
    assert gone < back

    # the agent's record: out before the restart's start, back in after its READY (it looks
    # at the gateway every half second: its event may come a moment after the gateway's view)
    deadline = time.monotonic() + 10.0
    events = _events(victim["log"])
    while not [e for e in events if e["event"] == "gateway_registered"]:
        assert time.monotonic() < deadline, events
        time.sleep(0.1)
        events = _events(victim["log"])
    killed_run = victim["run_id"]
    starts = [e for e in events if e["event"] == "start" and e["run_id"] != killed_run]
    assert starts, events
    restart = starts[0]
    (deregistered,) = [
        e for e in events if e["event"] == "gateway_deregistered" and e["run_id"] == killed_run
    ]
    (ready,) = [e for e in events if e["event"] == "ready" and e["run_id"] == restart["run_id"]]
    (registered,) = [
        e for e in events if e["event"] == "gateway_registered" and e["run_id"] == restart["run_id"]
    ]
    assert deregistered["was_listed"]
    assert deregistered["removed"]
    assert deregistered["at"] < restart["at"] < ready["at"] <= registered["at"]
    assert not [e for e in events if e["event"] == "gateway_error"], events
    assert gateway.key is not None
    deployment = Path(victim["log"]).parents[2]
    for recorded in ("state.json", "events.jsonl"):
        assert gateway.key not in (deployment / recorded).read_text()

    # orch status shows it READY again, registered by the agent; the other replica untouched
    after = {row["replica"]: row for row in _rows(local_workspace, name)}
    assert after[0]["state"] == "READY"
    assert after[0]["pid"] != victim["pid"]
    assert after[0]["gateway_status"] == "registered"
    assert after[0]["gateway_error"] is None
    assert after[1]["pid"] == other["pid"]
    assert after[1]["gateway_status"] == "untouched"
    assert _ready(gateway) == sorted([victim_url, other_url])
    assert local_workspace.orch("down", name).code == ExitCode.OK
    assert gateway.get("/workers")["workers"] == []
