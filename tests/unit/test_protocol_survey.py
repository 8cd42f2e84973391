"""``survey`` and ``reconfigure`` in both directions: what this agent answers decodes (the
survey of a workdir holding a supervised deployment, in-process), what orch sends is what the
agent reads (the live changes), and refusals are the errors every command's are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.errors import PreflightError, SupervisorError
from orchestrator.fleet.protocol.reconfigure import (
    decode_reconfigure,
    live_changes,
    reconfigure_request,
)
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.fleet.protocol.survey import decode_survey, survey_request
from orchestrator.remote.agent.cmd_status import cmd_status
from orchestrator.remote.agent.cmd_survey import cmd_survey
from orchestrator.remote.agent.files import Paths
from orchestrator.remote.agent.live import check_changes, fields_of, server_key
from orchestrator.remote.agent.spec import Spec
from orchestrator.remote.agent.states import EXITED
from tests.unit.test_protocol import supervised

__all__ = ["supervised"]  # the fixture: a deployment as this agent's supervisor leaves it


def test_this_agents_survey_decodes_as_status_does(supervised: Paths) -> None:
    workdir = str(Path(supervised.root).parent)
    Path(workdir, "empty").mkdir()  # no spec.json, no state.json: no deployment
    survey = decode_survey("gpu-1", cmd_survey(workdir))
    assert survey.host == "gpu-1"
    assert survey.workdir == workdir
    assert list(survey.deployments) == ["p"]
    assert survey.unreadable == {}
    assert survey.hostname
    alone = decode_state(cmd_status(supervised.root))
    surveyed = survey.deployments["p"]
    assert surveyed.state == EXITED
    assert (surveyed.launch_digest, surveyed.starts) == (alone.launch_digest, alone.starts)
    assert surveyed.last_exit == alone.last_exit


def test_a_survey_request_names_the_workdir_in_its_argv() -> None:
    assert survey_request("/data/orch").args == ("survey", "--workdir", "/data/orch")


def test_a_refused_survey_is_a_preflight_error() -> None:
    refusal = {"protocol": 1, "ok": False, "refused": "unsafe-path", "reason": "the workdir x"}
    with pytest.raises(PreflightError, match="the workdir x"):
        decode_survey("gpu-1", refusal)


def test_a_survey_with_a_malformed_deployment_names_the_key() -> None:
    answer = {"protocol": 1, "workdir": "/w", "deployments": {"a": {"deployed": True, "pid": "x"}}}
    with pytest.raises(SupervisorError, match="pid: expected an integer"):
        decode_survey("gpu-1", answer)


@pytest.mark.parametrize(
    "live",
    [
        [{"endpoint": "/configure_logging", "body": {"log_requests": True}}],
        {"endpoint": "/configure_logging", "body": {"log_requests": True}},
        {"/configure_logging": {"log_requests": True}},
    ],
)
def test_every_spelling_of_the_live_changes_reaches_the_agent_as_its_list(live: object) -> None:
    request = reconfigure_request("/d/x", {"meta": {}}, "#!/bin/sh\n", live)  # type: ignore[arg-type]
    sent = json.loads(request.stdin or b"")
    assert request.args == ("reconfigure", "--dir", "/d/x", "--spec", "-")
    assert check_changes(sent["live"]) == [
        {"endpoint": "/configure_logging", "body": {"log_requests": True}}
    ]
    assert fields_of(sent["live"]) == {"log_requests": True}


def test_a_live_change_to_another_endpoint_is_refused_before_it_is_sent() -> None:
    with pytest.raises(ValueError, match="/configure_logging"):
        live_changes([{"endpoint": "/flush_cache", "body": {}}])


def test_internal_state_fields_are_read_from_under_server_args() -> None:
    changes = [{"endpoint": "/set_internal_state", "body": {"server_args": {"x": 2}}}]
    assert fields_of(changes) == {"x": 2}


def test_the_admin_key_is_the_one_the_live_endpoints_take() -> None:
    base = {
        "protocol": 1,
        "deployment": "d",
        "env": {},
        "port": 1,
        "health": {},
        "restart": {},
    }
    with_both = Spec.from_json(dict(base, argv=["sglang", "--api-key", "k1", "--admin-api-key=k2"]))
    assert server_key(with_both) == "k2"
    assert server_key(Spec.from_json(dict(base, argv=["sglang", "--api-key=k1"]))) == "k1"
    assert server_key(Spec.from_json(dict(base, argv=["sglang"]))) is None


def test_a_reconfigure_answer_decodes_with_its_state_and_what_was_applied(
    supervised: Paths,
) -> None:
    answer = {
        "protocol": 1,
        "ok": True,
        "reason": "",
        "live_applied": {"log_requests": True},
        "state": cmd_status(supervised.root),
    }
    reply = decode_reconfigure(answer)
    assert reply.ok
    assert reply.live_applied == {"log_requests": True}
    assert reply.state is not None
    assert reply.state.state == EXITED
    refused = decode_reconfigure({"protocol": 1, "ok": False, "reason": "moved"})
    assert (refused.ok, refused.reason, refused.state) == (False, "moved", None)
