"""``commands.locking.holding``: the operation lock of every deployment a command acts on, held
on its host (the fake agent keeps the locks of its fake hosts as ``agent hold`` does)."""

from __future__ import annotations

import getpass
import os

import pytest

from orchestrator.commands.locking import deployments_of, holding
from orchestrator.errors import ExitCode, Locked
from orchestrator.model import LockHolder
from tests.unit.commands.conftest import HOST, Commands

ALICE = LockHolder("alice", "laptop", 4242, "orch sync", 1_700_000_000.0)

HOSTS = """\
hosts:
  gpu-1: {address: 10.0.0.7, user: ubuntu, python: /opt/venv/bin/python, workdir: /data/orch}
  gpu-2: {address: 10.0.0.8, user: ubuntu, python: /opt/venv/bin/python, workdir: /data/orch}
"""

FLEET = """\
sglang: 0.5.23
model: {path: Qwen/Qwen3.6-27B}
port: 30000
replicas:
  - {host: gpu-1, port: 30001, gpu: {devices: [0]}}
  - {host: gpu-2, port: 30001, gpu: {devices: [0]}}
  - {host: gpu-1, port: 30002, gpu: {devices: [1]}}
"""


@pytest.fixture
def fleet(commands: Commands) -> Commands:
    commands.profiles.write("hosts.yaml", HOSTS)
    commands.profiles.write("fleet.yaml", FLEET)
    return commands


def test_holding_takes_each_deployment_in_order_and_lets_go_after(commands: Commands) -> None:
    launch = commands.launch("demo")
    with holding(commands.ctx, deployments_of(launch), "orch up", wait_s=0):
        held = commands.fleet.locks[(HOST, "demo")]
        assert held.holder.user == getpass.getuser()
        assert held.holder.pid == os.getpid()
        assert held.holder.command == "orch up"
    assert commands.fleet.locks == {}
    assert commands.fleet.lock_log == [("hold", HOST, "demo"), ("release", HOST, "demo")]


def test_holding_every_replica_sorted_per_host(fleet: Commands) -> None:
    launch = fleet.launch("fleet", require_secrets=False)
    with holding(fleet.ctx, deployments_of(launch), "orch restart --rolling", wait_s=0):
        assert set(fleet.fleet.locks) == {
            ("gpu-1", "fleet@0"),
            ("gpu-2", "fleet@1"),
            ("gpu-1", "fleet@2"),
        }
    holds = [entry for entry in fleet.fleet.lock_log if entry[0] == "hold"]
    on_gpu_1 = [name for _, host, name in holds if host == "gpu-1"]
    assert on_gpu_1 == ["fleet@0", "fleet@2"]  # sorted: never a deadlock
    assert fleet.fleet.locks == {}


def test_holding_one_replica_holds_only_its_deployment(fleet: Commands) -> None:
    launch = fleet.launch("fleet", require_secrets=False)
    with holding(fleet.ctx, deployments_of(launch, 1), "orch up", wait_s=0):
        assert set(fleet.fleet.locks) == {("gpu-2", "fleet@1")}


def test_holding_lets_go_when_the_block_raises(commands: Commands) -> None:
    launch = commands.launch("demo")
    with pytest.raises(KeyboardInterrupt):
        with holding(commands.ctx, deployments_of(launch), "orch down", wait_s=0):
            raise KeyboardInterrupt
    assert commands.fleet.locks == {}


def test_a_lock_held_elsewhere_is_waited_for_saying_who_holds_it(commands: Commands) -> None:
    commands.fleet.hold_elsewhere(HOST, "demo", ALICE, for_s=5.0)
    said: list[tuple[str, LockHolder]] = []
    launch = commands.launch("demo")
    start = commands.fleet.monotonic()
    with holding(
        commands.ctx,
        deployments_of(launch),
        "orch up",
        wait_s=60,
        on_wait=lambda label, holder: said.append((label, holder)),
    ):
        assert commands.fleet.locks[(HOST, "demo")].holder.user == getpass.getuser()
    assert said == [(f"demo on {HOST}", ALICE)]
    assert commands.fleet.monotonic() - start == 5.0  # waited for alice, not the whole minute


def test_a_lock_held_past_the_wait_is_locked_naming_the_holder(fleet: Commands) -> None:
    fleet.fleet.hold_elsewhere("gpu-1", "fleet@2", ALICE)
    launch = fleet.launch("fleet", require_secrets=False)
    ran = False
    with pytest.raises(Locked) as raised:
        with holding(fleet.ctx, deployments_of(launch), "orch up", wait_s=30):
            ran = True
    assert not ran
    error = raised.value
    assert error.exit_code == ExitCode.LOCKED
    assert int(error.exit_code) == 35
    assert (error.deployment, error.host) == ("fleet@2", "gpu-1")
    assert "fleet@2 on gpu-1 is locked by alice@laptop's orch sync" in error.message
    assert "pid 4242" in error.message
    assert error.hint is not None
    assert "--lock-wait" in error.hint
    assert "ask alice" in error.hint
    # the ones it held are let go; alice's stays hers
    assert set(fleet.fleet.locks) == {("gpu-1", "fleet@2")}
    assert fleet.fleet.locks[("gpu-1", "fleet@2")].holder == ALICE
