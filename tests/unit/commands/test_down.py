"""``down``'s branches against the deployment's situation as the agent answered it: nothing to
stop, ours stopped, another repository's refused, a launch group stopped rank 0 first."""

from __future__ import annotations

import pytest

from orchestrator.commands.events import Stopped, Stopping
from orchestrator.commands.group import MEMBER_STOP_GRACE_S
from orchestrator.commands.ops import down
from orchestrator.errors import Conflict
from tests.conftest import HOSTS
from tests.unit.commands.conftest import THEIRS, Commands
from tests.unit.commands.fake_agent import READY, STALE, STOPPED, UNDEPLOYED, UNSUPERVISED

# one server over two hosts (the agent answers each rank as it answered the demo's)
PAIR = """\
sglang: "0.5.23"
model: {path: Qwen/Qwen3.6-27B}
port: 30000
args: {tp_size: 2}
stop_timeout_s: 30
group:
  nodes:
    - host: gpu-1
    - host: gpu-2
  rendezvous_port: 20000
  control_port: 20100
"""
GPU_2 = """\
  gpu-2:
    address: 10.0.0.8
    python: /opt/venv/bin/python
    workdir: /data/orch
"""


@pytest.mark.parametrize("situation", [UNDEPLOYED, STOPPED])
def test_down_with_nothing_running_stops_nothing(commands: Commands, situation: str) -> None:
    if situation != UNDEPLOYED:
        commands.deploy("demo", situation)
    assert list(down(commands.ctx, "demo")) == []
    assert commands.deployment("demo").situation == situation


@pytest.mark.parametrize("situation", [READY, UNSUPERVISED, STALE])
def test_down_stops_what_runs_of_ours(commands: Commands, situation: str) -> None:
    commands.deploy("demo", situation)
    stopping, stopped = list(down(commands.ctx, "demo"))
    assert isinstance(stopping, Stopping)
    assert stopping.timeout_s == commands.launch("demo").profile.stop_timeout_s
    assert isinstance(stopped, Stopped)
    assert stopped.reply.state.state == "EXITED"
    assert commands.deployment("demo").situation == STOPPED


def test_down_timeout_overrides_the_profiles(commands: Commands) -> None:
    commands.deploy("demo", READY)
    stopping, _ = list(down(commands.ctx, "demo", timeout_s=42.0))
    assert isinstance(stopping, Stopping)
    assert stopping.timeout_s == 42.0


def test_down_refuses_another_repositorys_deployment_unless_taken_over(
    commands: Commands,
) -> None:
    deployment = commands.deploy("demo", READY, origin=THEIRS)
    with pytest.raises(Conflict, match="refusing to stop it") as caught:
        list(down(commands.ctx, "demo"))
    assert "--take-over to stop it anyway" in (caught.value.hint or "")
    assert deployment.situation == READY
    events = list(down(commands.ctx, "demo", take_over=True))
    assert [type(e) for e in events] == [Stopping, Stopped]
    assert deployment.situation == STOPPED


def test_down_of_a_group_stops_rank_0_first_then_each_other_rank_quickly(
    commands: Commands,
) -> None:
    commands.profiles.write("hosts.yaml", HOSTS + GPU_2)
    commands.profiles.write("pair", PAIR)
    for host in ("gpu-1", "gpu-2"):
        commands.deploy("pair", READY, host=host)
    events = list(down(commands.ctx, "pair"))
    stopping = [e for e in events if isinstance(e, Stopping)]
    assert [e.profile for e in stopping] == ["pair rank 0 (gpu-1)", "pair rank 1 (gpu-2)"]
    # rank 0 drains for the profile's timeout; the others have only a short grace
    assert [e.timeout_s for e in stopping] == [30.0, MEMBER_STOP_GRACE_S]
    assert [type(e) for e in events] == [Stopping, Stopped, Stopping, Stopped]
    for host in ("gpu-1", "gpu-2"):
        assert commands.deployment("pair", host).situation == STOPPED


def test_down_of_a_group_stops_only_the_ranks_that_run(commands: Commands) -> None:
    commands.profiles.write("hosts.yaml", HOSTS + GPU_2)
    commands.profiles.write("pair", PAIR)
    commands.deploy("pair", STOPPED, host="gpu-1")  # rank 0 ended the group a moment ago
    commands.deploy("pair", UNSUPERVISED, host="gpu-2")
    events = list(down(commands.ctx, "pair"))
    assert [(type(e).__name__, getattr(e, "label", getattr(e, "profile", ""))) for e in events] == [
        ("Stopped", "pair rank 0 (gpu-1)"),  # said as it is: nothing to stop there
        ("Stopping", "pair rank 1 (gpu-2)"),
        ("Stopped", "pair rank 1 (gpu-2)"),
    ]
    assert commands.deployment("pair", "gpu-2").situation == STOPPED
