"""``diff-effective``'s verdicts on what the agent inspected: the launch as the server got and
resolved it, a pinned field SGLang changed, no server at all, a server that died unresolved."""

from __future__ import annotations

import pytest

from orchestrator.commands.effective import diff_effective
from orchestrator.effective import verify
from orchestrator.errors import NotDeployed
from tests.unit.commands.conftest import Commands
from tests.unit.commands.fake_agent import CRASHED, READY


def test_a_server_that_got_and_resolved_what_was_asked_is_no_drift(commands: Commands) -> None:
    commands.deploy("demo", READY)
    launch = commands.launch("demo")
    report = diff_effective(commands.ctx, launch)
    assert not report.drift
    rows = {row.field: row for row in report.fields}
    assert rows["served_model_name"].verdict == verify.OK
    assert rows["served_model_name"].resolved == "qwen-test"
    assert rows["port"].received == launch.profile.port
    assert report.resolved is not None


def test_a_pinned_field_sglang_changed_is_drift_with_sglangs_reason(commands: Commands) -> None:
    commands.deploy("drift", READY)
    launch = commands.launch("drift")
    report = diff_effective(commands.ctx, launch)
    assert report.drift
    (pinned,) = report.pinned_drift(launch.profile.pin, launch.table)
    assert (pinned.field, pinned.profile, pinned.received, pinned.resolved) == (
        "speculative_num_draft_tokens",
        8,
        8,
        4,
    )
    assert pinned.verdict == verify.OVERRIDDEN
    assert "speculative_num_steps + 1" in (pinned.why or "")  # SGLang's own log line, kept


def test_no_server_is_not_deployed(commands: Commands) -> None:
    with pytest.raises(NotDeployed, match="no server for demo on gpu-1") as caught:
        diff_effective(commands.ctx, commands.launch("demo"))
    assert caught.value.hint is not None
    assert "orch up demo" in caught.value.hint


def test_a_server_that_died_before_resolving_is_compared_with_what_it_was_given(
    commands: Commands,
) -> None:
    commands.deploy("crash", CRASHED)
    report = diff_effective(commands.ctx, commands.launch("crash"))
    assert not report.drift  # it got what was asked; nothing else is known of it
    assert all(row.verdict == verify.OK for row in report.fields)
    assert report.resolved is None
    (dead,) = [note for note in report.notes if note.startswith("the server is not running")]
    assert "received is what it was exec'd with" in dead
    (why,) = [note for note in report.notes if note.startswith("it resolved nothing")]
    assert "(config-error: ValueError: Speculative decoding" in why
