"""``Context.survey`` over the fake fleet: one answer per host, built as the agent builds it
from each deployment's recorded status; and the fake's ``reconfigure``."""

from __future__ import annotations

import pytest

from orchestrator.errors import ConnectError
from tests.unit.commands.conftest import HOST, Commands
from tests.unit.commands.fake_agent import READY, STOPPED, UNSAFE


def test_a_survey_lists_every_deployment_of_the_host_once_per_command(commands: Commands) -> None:
    commands.deploy("demo", READY)
    commands.deploy("drift", STOPPED)
    commands.deploy("crash", UNSAFE)
    host = commands.launch("demo", require_secrets=False).profile.host
    survey = commands.ctx.survey(host)
    assert commands.ctx.survey(host) is survey
    assert survey.host == HOST
    assert sorted(survey.deployments) == ["demo", "drift"]
    assert survey.deployments["demo"].state == "READY"
    assert survey.deployments["drift"].state == "EXITED"
    assert "writable by group or others" in survey.unreadable["crash"]
    assert survey.sglang_version == "0.5.23"
    digest = commands.launch("demo", require_secrets=False).meta(commands.ctx.origin())
    assert survey.deployments["demo"].launch_digest == digest["launch_digest"]


def test_an_unreachable_host_is_its_transport_error(commands: Commands) -> None:
    commands.fleet.unreachable[HOST] = ConnectError("no route", "check the address")
    host = commands.launch("demo", require_secrets=False).profile.host
    with pytest.raises(ConnectError):
        commands.ctx.survey(host)


def test_the_fake_reconfigure_takes_a_running_deployments_spec_and_refuses_a_stopped_one(
    commands: Commands,
) -> None:
    commands.deploy("demo", READY)
    commands.deploy("drift", STOPPED)
    demo = commands.launch("demo", require_secrets=False).profile
    drift = commands.launch("drift", require_secrets=False).profile
    spec = {"meta": {"launch_digest": "new"}}
    live = [{"endpoint": "/configure_logging", "body": {"log_requests": True}}]
    taken = commands.ctx.agent(demo).reconfigure(spec, "", live)
    assert taken.ok
    assert taken.live_applied == {"log_requests": True}
    assert taken.state is not None
    assert taken.state.launch_digest == "new"
    refused = commands.ctx.agent(drift).reconfigure(spec, "")
    assert not refused.ok
    assert "no supervisor runs" in refused.reason
    assert commands.deployment("drift").reconfigured == []
