"""``orch sync`` over the fake agent (fake_agent.py) and a real git repository of the recorded
profiles: the dry run's states from what the hosts answer and what the repository says, and the
apply acting on the pending ones only."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator import render
from orchestrator.cli.main import main
from orchestrator.commands import sync
from orchestrator.commands.context import HostAgent, ProfilesOrigin, profiles_origin
from orchestrator.effective import sync as esync
from orchestrator.errors import ConnectError, ExitCode
from orchestrator.fleet.protocol.start import StartReply, decode_start
from orchestrator.model import Host, Profile
from tests.conftest import HOSTS
from tests.unit.commands.fake_agent import (
    READY,
    RECORDED_PROFILES,
    STOPPED,
    FakeAgent,
    FakeFleet,
    recorded,
)
from tests.unit.review.repo import ProfilesRepo


class Repo(ProfilesRepo):
    """The recorded profiles committed in a git repository (``profiles/`` inside it), on the
    recorded answers' host."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.write("hosts.yaml", HOSTS)
        for name in ("demo", "drift"):
            self.write(f"{name}.yaml", (RECORDED_PROFILES / f"{name}.yaml").read_text())

    def edit(self, name: str, old: str, new: str) -> None:
        super().edit(f"{name}.yaml", old, new)

    def add_env(self, name: str) -> None:
        """A new variable in the server's environment: a restart."""
        self.edit(name, "env:\n", "env:\n  TOKENIZERS_PARALLELISM: 'false'\n")

    def append_hosts(self, text: str) -> None:
        """More inventory entries (indented under ``hosts:``)."""
        path = self.profiles / "hosts.yaml"
        path.write_text(path.read_text() + text)

    def append(self, name: str, text: str) -> None:
        path = self.profiles / f"{name}.yaml"
        path.write_text(path.read_text() + textwrap.dedent(text))


class Agent(FakeAgent):
    """The fake agent, whose ``start_previous`` puts back the launch a test set as previous."""

    def start_previous(self) -> StartReply:
        """The agent starts the launch it ran before (its meta, READY again)."""
        deployment = self._reach()
        deployment.meta = dict(getattr(deployment, "previous"))  # noqa: B009 - set by the test
        deployment.become("previous " + READY)
        deployment.situation = READY
        return decode_start(recorded("adopt", deployment.meta))


@dataclasses.dataclass
class World:
    repo: Repo
    fleet: FakeFleet

    def factory(self, profile: Profile) -> HostAgent:
        return Agent(self.fleet, profile.host, profile.name)

    def host_factory(self, host: Host) -> HostAgent:
        return Agent(self.fleet, host, "")

    def session(self, **request: Any) -> sync.Session:
        return sync.Session(
            self.repo.profiles,
            sync.Request(**request),
            environ={},
            local_python="/usr/bin/python3",
            redactor=render.Redactor(),
            agent_factory=self.factory,
            host_agent_factory=self.host_factory,
        )

    def deploy(
        self, name: str, situation: str = READY, *, commit: str, dirty: bool = False
    ) -> None:
        """``name`` running as orch launched it from the repository at ``commit``."""
        origin = profiles_origin(self.repo.profiles)
        origin = dataclasses.replace(origin, commit=commit, dirty=dirty)
        with self.session(rev=commit) as opened:
            meta = opened.ctx.launch(name, require_secrets=False).meta(origin)
        self.fleet.deploy("gpu-1", name, situation, meta)

    def states(self, **request: Any) -> dict[str, esync.Verdict]:
        with self.session(**request) as opened:
            found = opened.dry_run()
        return {row.row.name: row.row.verdict for row in found.rows}


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(Repo(tmp_path / "team"), FakeFleet())


def test_the_repository_at_head_running_is_clean(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.deploy("drift", commit=a)
    states = world.states()
    assert {name: v.state for name, v in states.items()} == {"demo": "clean", "drift": "clean"}


def test_a_commit_that_changes_one_profile_makes_it_pending_and_only_it(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.deploy("drift", commit=a)
    world.repo.add_env("demo")
    world.repo.commit()
    states = world.states()
    assert states["drift"].state == esync.CLEAN
    demo = states["demo"]
    assert demo.state == esync.PENDING
    assert demo.action == "restart"
    assert demo.forced_by == ("env.TOKENIZERS_PARALLELISM",)


def test_down_and_out_of_band_and_a_dirty_launch_of_the_wanted_launch(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", STOPPED, commit=a)
    world.repo.append("drift", "description: edited\n")
    world.repo.edit("drift", "stop_timeout_s: 3", "stop_timeout_s: 4")
    b = world.repo.commit()
    world.deploy("drift", commit=b, dirty=True)  # the same launch as HEAD's, from a dirty tree
    states = world.states()
    assert (states["demo"].state, states["demo"].why) == (esync.DOWN, "stopped (EXITED)")
    assert states["drift"].state == esync.CLEAN
    assert states["drift"].notes == ("launched from a dirty tree; its launch is the wanted one",)
    world.fleet.deployment("gpu-1", "drift").meta["launch_digest"] = "0123456789ab"
    assert world.states()["drift"].state == esync.OUT_OF_BAND


def test_an_agent_only_change_with_the_same_launch_is_pending_agent_only(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.repo.edit("demo", "stop_timeout_s: 3", "stop_timeout_s: 9")
    world.repo.commit()
    demo = world.states(names=("demo",))["demo"]
    assert (demo.state, demo.action, demo.forced_by) == (
        esync.PENDING,
        "agent-only",
        ("stop_timeout_s",),
    )


def test_a_commit_not_in_the_history_is_out_of_band(world: World) -> None:
    world.repo.commit()
    world.repo.git("checkout", "-q", "-b", "side")
    world.repo.edit("demo", "port: 43889", "port: 43890")
    side = world.repo.commit()
    world.repo.git("checkout", "-q", "main")
    world.deploy("demo", commit=side)
    demo = world.states(names=("demo",))["demo"]
    assert demo.state == esync.OUT_OF_BAND
    assert "not in the wanted commit's history" in demo.why


def test_an_unreachable_host_is_down_saying_so(world: World) -> None:
    world.repo.commit()
    world.fleet.unreachable["gpu-1"] = ConnectError("connection refused")
    states = world.states()
    assert {v.why for v in states.values()} == {"host unreachable: connection refused"}


def test_on_selects_by_label_or_host(world: World) -> None:
    world.repo.append("demo", "labels: [team-a]\n")
    world.repo.commit()
    assert list(world.states(on="team-a")) == ["demo"]
    assert sorted(world.states(on="gpu-1")) == ["demo", "drift"]


def test_the_dry_run_changes_nothing_on_the_host(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", STOPPED, commit=a)
    world.deploy("drift", commit=a)
    world.repo.edit("drift", "stop_timeout_s: 3", "stop_timeout_s: 4")
    world.repo.commit()
    before = {
        key: (d.situation, dict(d.meta), list(d.history))
        for key, d in world.fleet.deployments.items()
    }
    world.states()
    after = {
        key: (d.situation, dict(d.meta), list(d.history))
        for key, d in world.fleet.deployments.items()
    }
    assert after == before


def test_apply_relaunches_only_the_pending_one_then_all_is_clean(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.deploy("drift", commit=a)
    world.repo.add_env("demo")
    b = world.repo.commit()
    with world.session() as opened:
        found = opened.dry_run()
        _planned, report = opened.apply(found, esync.Options(), lock_wait_s=1)
    assert [(o.unit.name, o.result) for o in report.outcomes] == [("demo", esync.DONE)]
    assert report.ok
    demo, drift = world.fleet.deployment("gpu-1", "demo"), world.fleet.deployment("gpu-1", "drift")
    assert demo.history == [READY, STOPPED, READY]
    assert demo.meta["git_commit"] == b
    assert drift.history == [READY]  # its process kept
    assert {v.state for v in world.states().values()} == {esync.CLEAN}


def test_a_failed_relaunch_halts_the_rollout_and_is_put_back(world: World) -> None:
    """drift's new launch comes up with a pinned field SGLang changed (its recorded startup):
    up fails it; the canary (demo) went first and stays done, drift goes back to its previous
    launch, the rollout halts."""
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.deploy("drift", commit=a)
    drift = world.fleet.deployment("gpu-1", "drift")
    drift.previous = dict(drift.meta)  # type: ignore[attr-defined]
    world.repo.add_env("demo")
    world.repo.add_env("drift")
    world.repo.commit()
    with world.session() as opened:
        _, report = opened.apply(opened.dry_run(), esync.Options(), lock_wait_s=1)
    results = [(o.unit.name, o.result, o.restored) for o in report.outcomes]
    assert results == [("demo", esync.DONE, None), ("drift", esync.FAILED, True)]
    assert report.halted is not None
    assert report.halted.startswith("drift failed:")
    assert "put back on its previous launch" in report.outcomes[1].why
    assert drift.meta["git_commit"] == a
    assert drift.history[-1] == "previous " + READY


def test_apply_reconfigures_an_agent_only_change_without_a_restart(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.repo.edit("demo", "stop_timeout_s: 3", "stop_timeout_s: 9")
    b = world.repo.commit()
    with world.session(names=("demo",)) as opened:
        _, report = opened.apply(opened.dry_run(), esync.Options(), lock_wait_s=1)
    assert report.ok
    demo = world.fleet.deployment("gpu-1", "demo")
    assert demo.history == [READY]  # never stopped nor started
    [spec] = demo.reconfigured
    assert (spec["meta"]["git_commit"], spec["stop_timeout_s"]) == (b, 9)
    assert world.states(names=("demo",))["demo"].state == esync.CLEAN


def test_apply_refuses_a_dirty_tree_unless_allowed(world: World) -> None:
    world.repo.commit()
    world.repo.edit("demo", "stop_timeout_s: 3", "stop_timeout_s: 9")
    with world.session() as opened, pytest.raises(sync.DirtyTree) as caught:
        opened.apply(opened.dry_run(), esync.Options(), lock_wait_s=1)
    assert "--allow-dirty" in (caught.value.hint or "")


# -- the command line --------------------------------------------------------------------------


def _fake_hosts(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's sessions reach the fake fleet."""
    opened = sync.session

    def session(*args: Any, **kwargs: Any) -> Any:
        kwargs["agent_factory"] = world.factory
        kwargs["host_agent_factory"] = world.host_factory
        return opened(*args, **kwargs)

    monkeypatch.setattr(sync, "session", session)


def orch(world: World, *argv: str) -> tuple[int, str, str]:
    import io

    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(world.repo.profiles), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "argv",
    [
        ("sync", "--max-unavailable", "0"),
        ("sync", "--max-failures", "x"),
        ("sync", "--halt-on-failure", "--max-failures", "3"),
        ("sync", "--all", "--on", "a"),
        ("sync", "--lock-wait", "-1"),
    ],
)
def test_usage_errors_exit_64_never_2(world: World, argv: tuple[str, ...]) -> None:
    code, _, _ = orch(world, *argv)
    assert code == ExitCode.DIFF_USAGE


def test_naming_profiles_with_all_is_a_usage_error(world: World) -> None:
    world.repo.commit()
    code, _, err = orch(world, "sync", "demo", "--all", "--dry-run")
    assert code == ExitCode.DIFF_USAGE
    assert "--all selects every profile" in err


def test_an_apply_without_a_terminal_or_yes_is_refused(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = world.repo.commit()
    world.deploy("demo", STOPPED, commit=a)
    _fake_hosts(world, monkeypatch)
    code, _out, err = orch(world, "sync", "demo")
    assert code == ExitCode.DIFF_USAGE
    assert "there is no terminal to ask on" in err
    assert "--yes" in err
    assert world.fleet.deployment("gpu-1", "demo").history == [STOPPED]


def test_dry_run_json_and_exit_codes(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.deploy("drift", STOPPED, commit=a)
    _fake_hosts(world, monkeypatch)
    code, out, _ = orch(world, "sync", "--dry-run", "--json")
    assert code == ExitCode.CHANGES
    document = json.loads(out)
    assert document["format"] == "orch.sync/1"
    assert document["wanted"] == {"commit": a, "dirty": False, "rev": None}
    rows = {d["deployment"]: d for d in document["deployments"]}
    assert rows["demo"]["state"] == "clean"
    assert rows["demo"]["running"]["commit"] == a
    assert rows["drift"]["state"] == "down"
    assert rows["drift"]["action"] == "start"
    assert document["summary"] == "0 of 2 would change; 1 down"
    code, out, _ = orch(world, "sync", "demo", "--dry-run")
    assert code == ExitCode.OK
    assert out.splitlines()[0].split() == [
        "DEPLOYMENT", "HOST", "STATE", "ACTION", "FORCED-BY", "RUNNING", "WANTED", "WHY",
    ]  # fmt: skip
    assert out.rstrip().endswith("all 1 clean")


def test_apply_with_yes_reports_and_exits_0(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.repo.add_env("demo")
    world.repo.commit()
    _fake_hosts(world, monkeypatch)
    code, out, _ = orch(world, "sync", "demo", "--yes")
    assert code == ExitCode.OK, out
    assert "sync: demo: restart (relaunch) ..." in out
    assert "sync complete (1 done, 0 failed, 0 skipped, 0 not reached, 0 already clean)" in out


def test_origin_is_the_real_repository_never_the_exported_copy(world: World) -> None:
    a = world.repo.commit()
    with world.session(rev=a) as opened:
        origin: ProfilesOrigin = opened.ctx.origin()
    real = profiles_origin(world.repo.profiles)
    assert (origin.repo, origin.directory, origin.commit) == (real.repo, real.directory, a)


# -- orch status's SYNC column ------------------------------------------------------------------


def test_status_of_every_profile_has_a_sync_column(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.cli import cmd_run

    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.deploy("drift", STOPPED, commit=a)
    world.repo.add_env("demo")
    world.repo.commit()
    from orchestrator.cli.inputs import context_for as made

    def context_for(*args: Any) -> Any:
        ctx = made(*args)
        ctx.agent_factory = world.factory
        ctx.host_agent_factory = world.host_factory
        return ctx

    monkeypatch.setattr(cmd_run, "context_for", context_for)
    code, out, _ = orch(world, "status", "--all")
    assert code == ExitCode.OK
    lines = out.splitlines()
    assert lines[0].split()[-1] == "SYNC"
    sync_of = {line.split()[0]: line.split()[-1] for line in lines[1:3]}
    assert sync_of == {"demo": "pending", "drift": "down"}
    code, out, _ = orch(world, "status", "--json")
    by_profile = {d["profile"]: d["sync"] for d in json.loads(out)}
    assert by_profile["demo"]["state"] == "pending"
    assert by_profile["drift"] == {"state": "down", "why": "stopped (EXITED)"}
    code, out, _ = orch(world, "status", "demo")  # profiles named: the table as it was
    assert "SYNC" not in out.splitlines()[0]


def test_a_directory_no_profile_renders_is_unmanaged_and_an_alias_host_is_not_a_stranger(
    world: World,
) -> None:
    world.repo.append_hosts(
        "  gpu-1-alias:\n    address: 10.0.0.7\n    user: ubuntu\n"
        "    python: /opt/venv/bin/python\n    workdir: /data/orch\n"
    )
    path = world.repo.profiles / "drift.yaml"
    path.write_text(path.read_text().replace("host: gpu-1", "host: gpu-1-alias"))
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    # the same machine and workdir, seen through its other name: drift's directory is listed
    # there too, and is drift's, not a stranger's
    world.fleet.deploy("gpu-1", "drift", READY, {"git_commit": a})
    world.fleet.deploy("gpu-1", "old-test", READY, {"git_commit": a})  # nobody's profile
    with world.session() as opened:
        found = opened.dry_run()
    assert found.unmanaged == (("gpu-1", "old-test"),)


def test_a_host_whose_sglang_is_not_the_pin_is_version_skew(world: World) -> None:
    a = world.repo.commit()
    world.deploy("demo", commit=a)
    world.repo.edit("demo", "sglang: 0.5.23", "sglang: 0.5.11")  # the host has 0.5.23
    world.repo.commit()
    verdict = world.states(names=("demo",))["demo"]
    assert verdict.state == esync.VERSION_SKEW
    assert "0.5.11" in verdict.why
    assert "0.5.23" in verdict.why
