"""orch up / status / logs / down on this machine (host: local) against the SGLang stand-in."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import MODEL, Workspace, free_port


def test_up_ready_status_logs_down(local_workspace: Workspace) -> None:
    name = local_workspace.profile("svc")
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    assert "READY" in up.out
    assert "shards" in up.out  # the weight-loading progress was followed

    status = local_workspace.orch("status", name, "--json")
    assert status.code == ExitCode.OK
    (row,) = status.json()
    assert row["state"] == "READY"
    assert row["restarts"] == 0
    pid = row["pid"]
    assert psutil.pid_exists(pid)

    logs = local_workspace.orch("logs", name, "-n", "20")
    assert "The server is fired up and ready to roll!" in logs.out

    model = str(MODEL)  # longer than a table cell: cut, unless --wide
    assert model not in local_workspace.orch("diff-effective", name).out
    assert model in local_workspace.orch("diff-effective", name, "--wide").out
    assert model in local_workspace.orch("plan", name, "--wide").out

    down = local_workspace.orch("down", name)
    assert down.code == ExitCode.OK
    assert "EXITED" in down.out

    def leftovers() -> list[psutil.Process]:
        return [
            p
            for p in psutil.process_iter(["environ", "status"])
            if (p.info["environ"] or {}).get("ORCH_RUN_ID") == row["run_id"]
            and p.info["status"] != psutil.STATUS_ZOMBIE
        ]

    # killed by the stop; on 2 busy cores the kernel may take a moment to end them
    deadline = time.monotonic() + 5.0
    while leftovers() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers() == []


def test_up_config_error_is_fatal_with_the_exception_line(local_workspace: Workspace) -> None:
    name = local_workspace.profile("bad", env={"ORCH_STANDIN_FAIL": "config-error"})
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.CONFIG_ERROR
    assert "config-error: ValueError: Speculative decoding" in up.err
    assert "not restarted" in up.err
    (row,) = local_workspace.orch("status", name, "--json").json()
    assert row["state"] == "FATAL"
    assert row["restarts"] == 0


def test_up_twice_attaches_to_the_same_plan(local_workspace: Workspace) -> None:
    name = local_workspace.profile("twice")
    assert local_workspace.orch("up", name).code == ExitCode.OK
    again = local_workspace.orch("up", name)
    assert again.code == ExitCode.OK
    assert "the same launch already runs" in again.out
    (row,) = local_workspace.orch("status", name, "--json").json()
    assert row["starts"] == 1


def test_up_of_a_changed_plan_is_refused_without_replace(local_workspace: Workspace) -> None:
    port = free_port()
    name = local_workspace.profile("changing", port=port)
    assert local_workspace.orch("up", name).code == ExitCode.OK
    local_workspace.profile("changing", port=port, env={"CHANGED": "1"})
    refused = local_workspace.orch("up", name)
    assert refused.code == ExitCode.CONFLICT
    assert "--replace" in refused.err
    replaced = local_workspace.orch("up", name, "--replace")
    assert replaced.code == ExitCode.OK, replaced.err
    (row,) = local_workspace.orch("status", name, "--json").json()
    assert row["state"] == "READY"


def test_up_walks_one_profile_through_each_stage_once(
    local_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One Launch is built and handed down: the profile is loaded, rendered and its secrets
    resolved once; preflight, the plan, the start and the comparison run once each. The host
    is asked in two agent commands: the status with the probe, the start with the follow (the
    inspection at READY comes on that stream: no inspect, status or watch command of its own)."""
    from orchestrator import render
    from orchestrator.commands import effective, planning
    from orchestrator.fleet.client import Agent, PendingStart
    from orchestrator.profile.store import ProfileStore

    calls: Counter[str] = Counter()

    def counted(owner: object, attribute: str) -> None:
        real = getattr(owner, attribute)

        def spy(*args: object, **kwargs: object) -> object:
            calls[attribute] += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, spy)

    for owner, attribute in [
        (ProfileStore, "load"),
        (render, "render"),
        (render, "resolve_secrets"),
        (Agent, "status_and_probe"),
        (planning, "predict"),
        (PendingStart, "send"),
        (effective, "diff_effective"),
        (Agent, "call"),
        (Agent, "_stream"),
        (Agent, "inspect"),
        (Agent, "status"),
        (Agent, "watch"),
        (Agent, "probe"),
    ]:
        counted(owner, attribute)
    name = local_workspace.profile("walk", env={"API_TOKEN": {"from_env": "WALK_TOKEN"}})
    monkeypatch.setenv("WALK_TOKEN", "s3cret-walk-token")
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    assert ", 0 drift" in up.out  # the inspection that came with READY was compared
    assert calls == Counter(
        load=1,
        render=1,
        resolve_secrets=1,
        status_and_probe=1,
        predict=1,
        send=1,
        diff_effective=1,
        call=1,
        _stream=1,
    )


def test_a_pinned_secret_sglang_shows_masked_is_unverifiable_not_drift(
    local_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SGLang 0.5.23 shows its watermark configuration as '<redacted>' (and an API key as
    given): the masked one cannot be compared, and is no drift; the other compares as usual.
    Neither is ever printed."""
    monkeypatch.setenv("SERVE_KEY", "sk-local-0123456789")
    monkeypatch.setenv("WATERMARK", '{"key": "wm-0123456789"}')
    name = local_workspace.profile(
        "keyed",
        "pin: [api_key, watermark_config]\n",
        args={"api_key": {"from_env": "SERVE_KEY"}, "watermark_config": {"from_env": "WATERMARK"}},
    )
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    diff = local_workspace.orch("diff-effective", name, "--json")
    assert diff.code == ExitCode.OK, diff.out
    rows = {row["field"]: row for row in diff.json()["fields"]}
    assert rows["watermark_config"]["verdict"] == "unverifiable"
    assert rows["api_key"]["verdict"] == "ok"
    assert rows["api_key"]["profile"] == rows["api_key"]["resolved"] == "<secret>"
    shown = up.out + up.err + diff.out + diff.err
    assert "sk-local-0123456789" not in shown
    assert "wm-0123456789" not in shown


def _received(pid: int, names: list[str]) -> tuple[list[str], dict[str, str]]:
    process = psutil.Process(pid)
    environ = process.environ()
    return process.cmdline(), {name: environ[name] for name in names if name in environ}


def test_the_launch_script_reproduces_what_the_agent_launched(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    name = local_workspace.profile("byhand", env={"ODD": "a 'quoted' $value; `x`"})
    env_names = ["ODD", "PYTHONPATH", "ORCH_STANDIN_VERSION"]
    assert local_workspace.orch("up", name).code == ExitCode.OK
    (row,) = local_workspace.orch("status", name, "--json").json()
    by_agent = _received(row["pid"], env_names)
    assert local_workspace.orch("down", name).code == ExitCode.OK

    script = tmp_path / "launch.sh"
    script.write_text(local_workspace.orch("render", name, "--script").out)
    by_hand = subprocess.Popen(
        ["bash", str(script)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and len(psutil.Process(by_hand.pid).cmdline()) < 3:
            time.sleep(0.05)  # until bash has exec'd the server
        assert _received(by_hand.pid, env_names) == by_agent
    finally:
        os.killpg(by_hand.pid, signal.SIGKILL)
        by_hand.wait()


def test_plan_and_diff_effective_do_without_the_secrets_set_here(
    local_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEAM_TOKEN", "tok-only-on-the-launcher")
    name = local_workspace.profile(
        "teammate",
        env={"HF_TOKEN": {"from_env": "TEAM_TOKEN"}},
        args={"api_key": {"from_env": "TEAM_TOKEN"}},
    )
    assert local_workspace.orch("up", name).code == ExitCode.OK
    monkeypatch.delenv("TEAM_TOKEN")  # a teammate who checks the deployment
    diff = local_workspace.orch("diff-effective", name, "--json")
    assert diff.code == ExitCode.OK, diff.out + diff.err
    document = diff.json()
    (key,) = [row for row in document["fields"] if row["field"] == "api_key"]
    assert key["verdict"] == "unverifiable"
    (token,) = [row for row in document["env"] if row["name"] == "HF_TOKEN"]
    assert token["verdict"] == "unverifiable"
    planned = local_workspace.orch("plan", name)
    assert planned.code == ExitCode.OK, planned.out + planned.err
    assert "TEAM_TOKEN not set here" in planned.out
    assert local_workspace.orch("up", name).code == ExitCode.RENDER  # launching needs it


def test_up_replace_with_a_launch_sglang_rejects_leaves_the_running_server(
    local_workspace: Workspace,
) -> None:
    """--replace checks the new launch whole (preflight, SGLang's plan) before it stops the
    server that works: a refused one costs nothing."""
    name = local_workspace.profile("svc", version="0.5.11")
    assert local_workspace.orch("up", name).code == ExitCode.OK
    (before,) = local_workspace.orch("status", name, "--json").json()
    port = before["port"]
    local_workspace.profile(  # the incident: 0.5.11, spec decoding, no mamba strategy
        "svc",
        "spec_decode: {algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n",
        version="0.5.11",
        port=port,
    )
    refused = local_workspace.orch("up", name, "--replace")
    assert refused.code == ExitCode.PLAN_REFUSED, refused.err
    (after,) = local_workspace.orch("status", name, "--json").json()
    assert (after["state"], after["pid"], after["run_id"]) == (
        "READY",
        before["pid"],
        before["run_id"],
    )

    local_workspace.profile("svc", version="0.5.11", port=port, args={"context_length": 4096})
    replaced = local_workspace.orch("up", name, "--replace")
    assert replaced.code == ExitCode.OK, replaced.err
    (new,) = local_workspace.orch("status", name, "--json").json()
    assert new["run_id"] != before["run_id"]
    assert not psutil.pid_exists(before["pid"])
