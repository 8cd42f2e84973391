"""``status``'s rows: each profile's deployment (each rank of a group) as its agent answered;
an unreachable host is a row per profile on it, an answer refused is that profile's row, and
the others are still asked."""

from __future__ import annotations

from orchestrator.commands.ops import status
from orchestrator.errors import ConnectError, PreflightError
from tests.conftest import HOSTS
from tests.unit.commands.conftest import Commands
from tests.unit.commands.fake_agent import READY, STOPPED, UNSAFE, UNSUPERVISED
from tests.unit.commands.test_down import GPU_2, PAIR

ON_GPU_2 = "model: {path: Qwen/Qwen3.6-27B}\nsglang: '0.5.23'\nhost: gpu-2\nport: 31000\n"


def _setup(commands: Commands) -> None:
    commands.profiles.write("hosts.yaml", HOSTS + GPU_2)
    commands.profiles.write("pair", PAIR)
    commands.profiles.write("elsewhere", ON_GPU_2)


def test_status_rows_follow_the_names_and_each_groups_ranks(commands: Commands) -> None:
    _setup(commands)
    commands.deploy("demo", READY)
    commands.deploy("drift", UNSUPERVISED)
    commands.deploy("pair", READY, host="gpu-1")
    commands.deploy("pair", STOPPED, host="gpu-2")
    rows = status(commands.ctx, ["pair", "demo", "elsewhere", "drift"])
    assert [(r.profile, r.host, r.rank) for r in rows] == [
        ("pair", "gpu-1", 0),
        ("pair", "gpu-2", 1),
        ("demo", "gpu-1", None),
        ("elsewhere", "gpu-2", None),
        ("drift", "gpu-1", None),
    ]
    states = [(row.state.state, row.state.alive) if row.state else None for row in rows]
    assert states == [
        ("READY", True),
        ("EXITED", False),
        ("READY", True),
        (None, False),
        ("UNSUPERVISED", False),
    ]
    assert all(row.error is None for row in rows)
    assert rows[3].state is not None
    assert not rows[3].state.deployed


def test_an_unreachable_host_is_a_row_for_each_profile_on_it(commands: Commands) -> None:
    _setup(commands)
    commands.deploy("demo", READY)
    commands.fleet.unreachable["gpu-2"] = ConnectError("cannot connect to gpu-2 (10.0.0.8:22)")
    rows = {
        (row.profile, row.rank): row for row in status(commands.ctx, ["pair", "demo", "elsewhere"])
    }
    for key in (("pair", 1), ("elsewhere", None)):
        assert rows[key].state is None
        assert isinstance(rows[key].error, ConnectError)
    assert rows[("pair", 0)].error is None  # gpu-1 answered
    demo = rows[("demo", None)].state
    assert demo is not None
    assert demo.alive


def test_an_answer_refused_is_that_profiles_row_and_the_others_are_asked(
    commands: Commands,
) -> None:
    commands.deploy("demo", UNSAFE)
    commands.deploy("drift", READY)
    demo, drift = status(commands.ctx, ["demo", "drift"])
    assert demo.state is None
    assert isinstance(demo.error, PreflightError)
    assert "writable by group or others" in demo.error.message
    assert (demo.error.hint or "").startswith("chmod go-w /data/orch/demo")
    assert drift.error is None
    assert drift.state is not None
    assert drift.state.alive
