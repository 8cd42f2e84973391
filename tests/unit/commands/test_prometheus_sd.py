"""``orch export prometheus-sd``'s command over the fake fleet: a READY deployment is a target
with the commit and SGLang its host reports; a stopped one is absent (a re-export after ``down``
drops it); an unreachable host is a note, not a failure."""

from __future__ import annotations

import json

from orchestrator.commands import prometheus_sd
from orchestrator.errors import ConnectError
from tests.unit.commands.conftest import HOST, OURS, Commands
from tests.unit.commands.fake_agent import READY, STOPPED


def test_only_ready_deployments_are_targets_and_a_stop_drops_one(commands: Commands) -> None:
    commands.deploy("demo", READY)
    commands.deploy("drift", STOPPED)
    found = prometheus_sd.export(commands.ctx, prometheus_sd.Request(()))
    demo = commands.launch("demo", require_secrets=False).profile
    (group,) = json.loads(found.text)
    assert group["labels"] == {
        "orch_role": "server",
        "orch_profile": "demo",
        "orch_deployment": "demo",
        "orch_host": HOST,
        "orch_rank": "0",
        "orch_commit": OURS.commit,
        "orch_sglang_version": "0.5.23",
    }
    (target,) = group["targets"]
    assert target.endswith(f":{demo.port}")
    assert target.startswith(f"{demo.host.address}:")
    # demo runs without --enable-metrics, bound to 127.0.0.1 on a remote host: both said
    assert any("runs without --enable-metrics" in note for note in found.notes)
    assert any("bound to 127.0.0.1" in note for note in found.notes)

    commands.deployment("demo").become(STOPPED)
    commands.ctx._surveys.clear()  # a new command surveys again
    again = prometheus_sd.export(commands.ctx, prometheus_sd.Request(("demo", "drift")))
    assert again.text == "[]\n"


def test_an_unreachable_host_is_a_note(commands: Commands) -> None:
    commands.deploy("demo", READY)
    commands.fleet.unreachable[HOST] = ConnectError("no route", "check the address")
    found = prometheus_sd.export(commands.ctx, prometheus_sd.Request(("demo",)))
    assert found.text == "[]\n"
    assert found.notes == (f"{HOST} not surveyed: no route",)
