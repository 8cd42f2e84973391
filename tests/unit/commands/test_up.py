"""``up``'s branches, each against the deployment's situation as the agent answered it (the fake
agent of fake_agent.py): what runs there decides between starting, following, adopting,
replacing and refusing; the plan gates the start; a pinned field SGLang changed fails it."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from orchestrator.commands.context import UpOptions
from orchestrator.commands.events import (
    Attached,
    Effective,
    Outcome,
    Planned,
    Started,
    Step,
    UpEvent,
    Warn,
)
from orchestrator.commands.up import up
from orchestrator.errors import Conflict, ExitCode, PlanRefused
from tests.unit.commands.conftest import OTHER_DIGEST, OURS, THEIRS, Commands
from tests.unit.commands.fake_agent import (
    ADOPTED,
    CRASHED,
    READY,
    STALE,
    STOPPED,
    UNDEPLOYED,
    UNSUPERVISED,
)

NO_PLAN = UpOptions(check_plan=False)


def _up(commands: Commands, name: str, options: UpOptions = NO_PLAN) -> list[UpEvent]:
    return list(up(commands.ctx, commands.launch(name), options))


def _outcome(events: Sequence[UpEvent]) -> Outcome:
    last = events[-1]
    assert isinstance(last, Outcome), last
    return last


def _steps(events: Sequence[UpEvent]) -> list[str]:
    return [event.message for event in events if isinstance(event, Step | Warn)]


# -- nothing of it runs: started ------------------------------------------------------------------


def test_up_starts_a_new_deployment_and_follows_it_to_ready(commands: Commands) -> None:
    launch = commands.launch("demo")
    events = _up(commands, "demo")
    outcome = _outcome(events)
    assert outcome.ok
    assert outcome.exit_code == ExitCode.OK
    assert outcome.summary.startswith("READY in ")
    assert [e for e in events if isinstance(e, Started)]
    (effective,) = [e for e in events if isinstance(e, Effective)]
    assert not effective.report.drift  # what the server got and resolved is what was asked
    deployment = commands.deployment("demo")
    assert deployment.situation == READY
    (spec,) = deployment.started
    assert tuple(spec["argv"]) == launch.primary.argv
    assert deployment.launch_digest == launch.digest


def test_up_with_its_plan_launches_what_sglang_accepts(commands: Commands) -> None:
    events = _up(commands, "demo", UpOptions())
    (planned,) = [e for e in events if isinstance(e, Planned)]
    assert planned.report.ok
    assert _outcome(events).ok
    assert commands.deployment("demo").situation == READY


def test_up_starts_in_place_of_another_repositorys_stopped_deployment(commands: Commands) -> None:
    commands.deploy("demo", STOPPED, origin=THEIRS)
    events = _up(commands, "demo")
    (note,) = [s for s in _steps(events) if "another profiles repository" in s]
    assert "nothing of it runs (EXITED): this one goes in its place" in note
    assert "serving.git" in note
    assert _outcome(events).ok
    assert commands.deployment("demo").meta["profiles_repo"] == OURS.repo


def test_up_sweeps_a_run_whose_supervisor_died_without_an_end_then_starts(
    commands: Commands,
) -> None:
    deployment = commands.deploy("demo", STALE)
    events = _up(commands, "demo")
    assert "the previous supervisor died without an end; sweeping its run" in _steps(events)
    assert _outcome(events).ok
    assert deployment.history == [STALE, STOPPED, READY]  # its end recorded before the start
    assert len(deployment.started) == 1


# -- the same launch runs: followed, never started again -----------------------------------------


def test_up_follows_the_same_launch_already_running(commands: Commands) -> None:
    deployment = commands.deploy("demo", READY)
    events = _up(commands, "demo")
    assert any(isinstance(e, Attached) for e in events)
    assert not any(isinstance(e, Started) for e in events)
    assert _outcome(events).ok
    assert deployment.started == []


def test_up_adopts_the_same_launch_running_unsupervised(commands: Commands) -> None:
    deployment = commands.deploy("demo", UNSUPERVISED)
    events = _up(commands, "demo")
    (adopted,) = [s for s in _steps(events) if "its supervisor had died" in s]
    assert "adopted the running server" in adopted
    assert "without restarting it" in adopted
    assert any(isinstance(e, Attached) for e in events)
    assert _outcome(events).ok
    assert deployment.situation == ADOPTED
    assert deployment.started == []


def test_up_follows_the_same_launch_a_concurrent_up_started_first(commands: Commands) -> None:
    launch = commands.launch("demo")
    deployment = commands.deployment("demo")
    deployment.concurrent = launch.meta(OURS)  # its start lands between our probe and ours
    events = _up(commands, "demo")
    assert "a concurrent orch up started this same launch first; following it" in _steps(events)
    assert any(isinstance(e, Attached) for e in events)
    assert _outcome(events).ok
    assert deployment.started == []


# -- another launch runs: refused, or replaced when told -----------------------------------------


def test_up_refuses_while_another_launch_of_it_runs(commands: Commands) -> None:
    deployment = commands.deploy("demo", READY, digest=OTHER_DIGEST)
    with pytest.raises(
        Conflict, match=f"already runs on gpu-1 with another launch .*{OTHER_DIGEST}"
    ):
        _up(commands, "demo")
    assert deployment.launch_digest == OTHER_DIGEST
    assert deployment.started == []


def test_up_refuses_while_another_launch_runs_unsupervised(commands: Commands) -> None:
    deployment = commands.deploy("demo", UNSUPERVISED, digest=OTHER_DIGEST)
    with pytest.raises(
        Conflict, match=r"runs unsupervised on gpu-1 .* with another launch"
    ) as caught:
        _up(commands, "demo")
    assert "orch up --replace stops it first" in (caught.value.hint or "")
    assert deployment.situation == UNSUPERVISED


def test_up_replace_stops_the_other_launch_then_starts_this_one(commands: Commands) -> None:
    launch = commands.launch("demo")
    commands.deploy("demo", READY, digest=OTHER_DIGEST)
    events = _up(commands, "demo", UpOptions(replace=True, check_plan=False))
    assert f"stopping the running launch {OTHER_DIGEST} (--replace)" in _steps(events)
    assert _outcome(events).ok
    deployment = commands.deployment("demo")
    assert deployment.launch_digest == launch.digest
    assert deployment.history == [READY, STOPPED, READY]


def test_up_loses_the_start_to_a_concurrent_up_of_another_launch(commands: Commands) -> None:
    deployment = commands.deployment("demo")
    deployment.concurrent = {**commands.launch("demo").meta(OURS), "launch_digest": OTHER_DIGEST}
    with pytest.raises(Conflict, match="demo: locked: another supervisor holds the deployment"):
        _up(commands, "demo")
    assert deployment.launch_digest == OTHER_DIGEST


# -- another repository's deployment -----------------------------------------------------------


def test_up_refuses_another_repositorys_running_deployment(commands: Commands) -> None:
    deployment = commands.deploy("demo", READY, origin=THEIRS)
    with pytest.raises(Conflict, match="launched from another profiles repository") as caught:
        _up(commands, "demo")
    assert "refusing to up it" in caught.value.message
    assert "--take-over" in (caught.value.hint or "")
    assert deployment.meta["profiles_repo"] == THEIRS.repo


def test_up_take_over_follows_another_repositorys_same_launch(commands: Commands) -> None:
    commands.deploy("demo", READY, origin=THEIRS)
    events = _up(commands, "demo", UpOptions(check_plan=False, take_over=True))
    assert any(isinstance(e, Attached) for e in events)
    assert _outcome(events).ok


# -- the plan gate ---------------------------------------------------------------------------------


def test_up_refused_by_the_plan_when_sglang_would_change_a_pinned_field(
    commands: Commands,
) -> None:
    with pytest.raises(PlanRefused, match="SGLang would change pinned field") as caught:
        _up(commands, "drift", UpOptions())
    assert "speculative_num_draft_tokens 8 -> 4" in caught.value.message
    assert "--force launches anyway" in (caught.value.hint or "")
    assert commands.deployment("drift").situation == UNDEPLOYED  # nothing started


def test_up_refused_by_the_plan_when_sglang_rejects_the_launch(commands: Commands) -> None:
    with pytest.raises(PlanRefused) as caught:
        _up(commands, "incident", UpOptions())
    assert "ValueError" in caught.value.message
    assert commands.deployment("incident").started == []


def test_up_force_launches_what_the_plan_refuses_and_says_so(commands: Commands) -> None:
    events = _up(commands, "drift", UpOptions(force=True))
    (warned,) = [s for s in _steps(events) if "--force: launching anyway" in s]
    assert "speculative_num_draft_tokens" in warned
    assert commands.deployment("drift").situation == READY


# -- after the start --------------------------------------------------------------------------


def test_up_fails_when_sglang_changed_a_pinned_field_after_ready(commands: Commands) -> None:
    events = _up(commands, "drift")
    (effective,) = [e for e in events if isinstance(e, Effective)]
    assert [row.field for row in effective.pinned] == ["speculative_num_draft_tokens"]
    (row,) = effective.pinned
    assert (row.profile, row.resolved) == (8, 4)
    outcome = _outcome(events)
    assert not outcome.ok
    assert outcome.exit_code == ExitCode.DRIFT
    assert outcome.summary.startswith("pinned field drifted: speculative_num_draft_tokens")
    assert "is READY and keeps running" in outcome.summary
    assert commands.deployment("drift").situation == READY


def test_up_reports_a_startup_failure_with_its_class_and_exit_code(commands: Commands) -> None:
    outcome = _outcome(_up(commands, "crash"))
    assert not outcome.ok
    assert outcome.exit_code == ExitCode.CONFIG_ERROR
    assert outcome.summary.startswith("config-error: ValueError: Speculative decoding")
    assert outcome.hint is not None
    assert outcome.hint.startswith("not restarted: SGLang rejects this configuration")
    assert any("ValueError" in line for line in outcome.last_lines)
    assert commands.deployment("crash").situation == CRASHED
