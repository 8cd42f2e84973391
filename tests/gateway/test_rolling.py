"""Two replicas of orch's stand-in behind a real smg on loopback, 4 client threads of load
through the gateway: ``orch restart --rolling`` loses no request and never leaves fewer than
N - 1 replicas ready at the gateway; the same roll without the gateway steps (stop and relaunch
in place, as a restart without orch does) loses some, so the test can fail. ``orch up``
registers, ``orch down`` deregisters before the SIGTERM; a failed relaunch is put back."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from orchestrator.commands.context import Context
from orchestrator.commands.restarting import GatewayReplicas
from orchestrator.commands.rolling import RollOptions, roll
from orchestrator.errors import ExitCode
from orchestrator.profile.store import ProfileStore
from tests.e2e.conftest import Workspace, free_port
from tests.gateway.conftest import Gateway, generate

KEY_VARIABLE = "ORCH_TEST_GATEWAY_KEY"
CLIENTS = 4
# Each request ~0.4 s (ORCH_STANDIN_TOKEN_S x max_new_tokens): with 4 clients on 2 replicas a
# replica always has one in flight, so one stopped while the gateway routes to it is never idle
# within its stop_timeout_s (3 s here) and is killed with requests in flight, as a real server is.
NEW_TOKENS = 40


@dataclass
class Load:
    """Client threads sending /generate through the gateway until stopped; every status."""

    url: str
    statuses: list[int] = field(default_factory=list)
    ready_seen: list[int] = field(default_factory=list)  # ready workers, polled meanwhile
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def failed(self) -> list[int]:
        return [status for status in self.statuses if status != 200]


@contextmanager
def load_through(gateway: Gateway) -> Iterator[Load]:
    load = Load(gateway.url)
    client = gateway.client()

    def send() -> None:
        while not load.stop.is_set():
            load.statuses.append(generate(gateway.url, max_new_tokens=NEW_TOKENS, timeout_s=30))
            time.sleep(0.02)

    def watch() -> None:
        while not load.stop.is_set():
            load.ready_seen.append(sum(w.ready for w in client.workers()))
            time.sleep(0.2)

    threads = [threading.Thread(target=send) for _ in range(CLIENTS)]
    threads.append(threading.Thread(target=watch))
    for thread in threads:
        thread.start()
    try:
        yield load
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(timeout=60)


def _fleet(space: Workspace, gateway: Gateway, monkeypatch: pytest.MonkeyPatch) -> str:
    assert gateway.key is not None
    monkeypatch.setenv(KEY_VARIABLE, gateway.key)
    ports = [free_port(), free_port()]
    return space.profile(
        "fleet",
        "replicas:\n"
        + "".join(f"  - {{port: {port}}}\n" for port in ports)
        + f"router:\n  url: {gateway.url}\n  api_key: {{from_env: {KEY_VARIABLE}}}\n"
        "  drain_timeout_s: 20\n",
        env={"ORCH_STANDIN_DRAIN_POLL_S": "0.2", "ORCH_STANDIN_TOKEN_S": "0.01"},
    )


def _ready(gateway: Gateway) -> list[str]:
    return sorted(w.url for w in gateway.client().workers() if w.ready)


def _up(space: Workspace, name: str, gateway: Gateway) -> None:
    outcome = space.orch("up", name)
    assert outcome.code == ExitCode.OK, outcome.out + outcome.err
    assert "registered as http://127.0.0.1:" in outcome.out
    assert len(_ready(gateway)) == 2


def _running(
    space: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
    *,
    fast_health: bool = True,
) -> tuple[Gateway, str]:
    """A gateway and the two-replica profile up behind it: (the gateway, the profile)."""
    gateway = start_gateway(fast_health=fast_health)
    name = _fleet(space, gateway, monkeypatch)
    _up(space, name, gateway)
    return gateway, name


def test_a_rolling_restart_loses_no_request(
    local_workspace: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # smg's own health checks: every 60 s
    gateway, name = _running(local_workspace, start_gateway, monkeypatch, fast_health=False)
    status = local_workspace.orch("status", name)
    assert status.code == ExitCode.OK, status.err
    for replica in ("fleet@0", "fleet@1"):  # the gateway's view beside the agent's
        assert f"{replica}: gateway {gateway.url}: ready" in status.out
    before = _ready(gateway)
    with load_through(gateway) as load:
        time.sleep(1)
        rolled = local_workspace.orch("restart", name, "--rolling", "--soak", "1")
        time.sleep(1)
    assert rolled.code == ExitCode.OK, rolled.out + rolled.err
    assert "fleet: rolled fleet@0, fleet@1" in rolled.out
    out = rolled.out
    for replica in ("fleet@0", "fleet@1"):  # out of the gateway before the stop, back after
        assert out.index(f"{replica}: deregistered") < out.index(f"{replica}: stopped")
        assert out.index(f"{replica}: launched") < out.index(f"{replica}: registered")
    assert out.index("fleet@0: soaked") < out.index("fleet@1: deregistered")  # one at a time
    assert len(load.statuses) > 100
    assert load.failed == [], f"{len(load.failed)} of {len(load.statuses)} failed"
    assert min(load.ready_seen) >= 1  # never fewer than N - 1 ready at the gateway
    assert _ready(gateway) == before  # both back, registered and ready
    assert local_workspace.orch("down", name).code == ExitCode.OK


class _InPlace(GatewayReplicas):
    """The same roll without the gateway's steps: each replica stopped and relaunched at its
    URL while the gateway still routes to it (a restart by hand, or by an orchestrator that
    does not know the gateway)."""

    def ready_at_gateway(self) -> frozenset[int]:
        return frozenset(self.launches)  # nobody asks the gateway

    def deregister(self, i: int, timeout: float) -> bool:
        return True

    def wait_idle(self, i: int, timeout: float) -> tuple[bool, str]:
        return True, "not waited for"

    def register(self, i: int, timeout: float) -> bool:
        return True


def test_the_same_roll_in_place_loses_requests(
    local_workspace: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # smg's own health checks: every 60 s
    gateway, name = _running(local_workspace, start_gateway, monkeypatch, fast_health=False)
    ctx = Context(
        store=ProfileStore(local_workspace.profiles),
        environ=os.environ,
        local_python=sys.executable,
    )
    try:
        launch = ctx.launch(name)
        ops = _InPlace(ctx, launch, gateway.client())
        with load_through(gateway) as load:
            time.sleep(1)
            result = roll(ops, [0, 1], RollOptions(soak_s=0))
            time.sleep(3)
    finally:
        ctx.close()
    assert result.ok
    assert load.failed, f"none of {len(load.statuses)} requests failed: the test cannot tell"
    assert local_workspace.orch("down", name).code == ExitCode.OK


def _events(space: Workspace, deployment: str) -> list[dict[str, object]]:
    import json

    path = space.deployment_dir(deployment) / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _pids(space: Workspace, name: str) -> dict[str, int]:
    outcome = space.orch("status", name, "--json")
    assert outcome.code == ExitCode.OK, outcome.err
    document = outcome.json()
    rows = document if isinstance(document, list) else document.get("deployments", [document])
    return {row["deployment"]: row["pid"] for row in rows if row.get("pid")}


def test_down_takes_each_replica_out_of_the_gateway_before_its_sigterm(
    local_workspace: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import psutil

    gateway, name = _running(local_workspace, start_gateway, monkeypatch)
    pids = _pids(local_workspace, name)
    assert len(pids) == 2
    client = gateway.client(poll_s=0.05)
    gone_at: dict[str, float] = {}
    stop = threading.Event()

    def watch() -> None:  # the gateway's record: when each worker left its list
        while not stop.is_set():
            listed = {w.url for w in client.workers()}
            for deployment, port in _ports(local_workspace, name).items():
                url = f"http://127.0.0.1:{port}"
                if url not in listed:
                    gone_at.setdefault(deployment, time.time())
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        down = local_workspace.orch("down", name)
    finally:
        stop.set()
        watcher.join(timeout=30)
    assert down.code == ExitCode.OK, down.out + down.err
    for deployment in ("fleet@0", "fleet@1"):
        assert down.out.index(f"{deployment}: deregistered") < down.out.index("SIGTERM sent")
        stopping = [
            e["at"]
            for e in _events(local_workspace, deployment)
            if e.get("event") == "state" and e.get("to") == "STOPPING"
        ]
        assert stopping, _events(local_workspace, deployment)
        assert gone_at[deployment] <= float(str(stopping[-1]))  # out of the gateway, then stopped
    assert _ready(gateway) == []
    assert gateway.client().workers() == ()
    assert not any(psutil.pid_exists(pid) for pid in pids.values())


def _ports(space: Workspace, name: str) -> dict[str, int]:
    import yaml

    document = yaml.safe_load((space.profiles / f"{name}.yaml").read_text())
    return {f"{name}@{i}": entry["port"] for i, entry in enumerate(document["replicas"])}


def test_a_failed_relaunch_puts_the_canary_back_and_leaves_the_other_untouched(
    local_workspace: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    gateway, name = _running(local_workspace, start_gateway, monkeypatch)
    before = _pids(local_workspace, name)
    profile = local_workspace.profiles / f"{name}.yaml"
    launched = profile.read_text()
    profile.write_text(
        launched.replace(
            "ORCH_STANDIN_DRAIN_POLL_S:",
            "ORCH_STANDIN_FAIL: config-error\n  ORCH_STANDIN_DRAIN_POLL_S:",
        )
    )
    rolled = local_workspace.orch("restart", name, "--rolling", "--soak", "1")
    assert rolled.code == ExitCode.ROLL, rolled.out + rolled.err
    assert "fleet@0: launch-failed" in rolled.out
    assert "fleet@0: restored: its previous launch" in rolled.out
    assert "fleet@1: deregistered" not in rolled.out
    assert "untouched fleet@1" in rolled.out
    after = _pids(local_workspace, name)
    assert after["fleet@1"] == before["fleet@1"]  # never touched
    assert after["fleet@0"] != before["fleet@0"]  # the previous launch, started again
    assert len(_ready(gateway)) == 2
    profile.write_text(launched)
    assert local_workspace.orch("down", name).code == ExitCode.OK


def test_a_drain_that_never_ends_is_cut_at_the_drain_timeout(
    local_workspace: Workspace,
    start_gateway: Callable[..., Gateway],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, name = _running(local_workspace, start_gateway, monkeypatch)
    port = _ports(local_workspace, name)["fleet@0"]
    held = threading.Thread(  # ~30 s of generation on replica 0, straight to it
        target=generate, args=(f"http://127.0.0.1:{port}",), kwargs={"max_new_tokens": 3000}
    )
    held.start()
    time.sleep(0.5)
    started = time.monotonic()
    rolled = local_workspace.orch(
        "restart", name, "--rolling", "--soak", "0", "--drain-timeout", "2"
    )
    took = time.monotonic() - started
    held.join(timeout=60)
    assert rolled.code == ExitCode.OK, rolled.out + rolled.err
    assert "fleet@0: drain-cut: 1 request(s) still in flight after 2 s: stopped" in rolled.out
    assert "fleet@1: drained" in rolled.out
    assert took < 28  # not the held request's 30 s
    assert local_workspace.orch("down", name).code == ExitCode.OK
