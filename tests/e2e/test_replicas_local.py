"""``replicas:`` on this machine (host: local): two stand-in servers of one profile, each its own
deployment (NAME@0, NAME@1) on its own port, started and stopped at once."""

from __future__ import annotations

import time

import psutil

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace, free_port


def _replicas(*entries: str) -> str:
    return "replicas:\n" + "".join(f"  - {entry}\n" for entry in entries)


def _processes_of(run_ids: set[str]) -> list[psutil.Process]:
    return [
        process
        for process in psutil.process_iter(["environ"])
        if (process.info["environ"] or {}).get("ORCH_RUN_ID") in run_ids
    ]


def test_two_replicas_up_status_down(local_workspace: Workspace) -> None:
    ports = (free_port(), free_port())
    name = local_workspace.profile(
        "pair", _replicas(f"{{port: {ports[0]}}}", f"{{port: {ports[1]}, env: {{WHO: two}}}}")
    )
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    # each replica's startup is followed, its lines tagged with its deployment
    assert "pair@0| READY" in up.out
    assert "pair@1| READY" in up.out
    assert "pair: 2 of 2 replicas up: pair@0 on local, pair@1 on local" in up.out
    # two servers that name no GPUs on one machine: said by validate, not refused
    validate = local_workspace.orch("validate", name)
    assert validate.code == ExitCode.OK
    assert "replicas 0 and 1 share local and neither names gpu.devices" in validate.err

    status = local_workspace.orch("status", name, "--json")
    assert status.code == ExitCode.OK
    rows = status.json()
    assert [(row["replica"], row["deployment"]) for row in rows] == [(0, "pair@0"), (1, "pair@1")]
    assert all(row["state"] == "READY" for row in rows)
    assert [row["port"] for row in rows] == list(ports)
    assert rows[0]["pid"] != rows[1]["pid"]
    assert all(psutil.pid_exists(row["pid"]) for row in rows)
    table = local_workspace.orch("status", name).out.splitlines()
    assert [line.split()[0] for line in table[1:3]] == ["pair@0", "pair@1"]

    # each replica's own log and runs; the replica must be named
    # (enough lines: the server logs each /health and /v1/loads orch's agent asks of it)
    logs = local_workspace.orch("logs", name, "--replica", "1", "-n", "200")
    assert logs.code == ExitCode.OK, logs.err
    assert "fired up and ready to roll" in logs.out
    unnamed = local_workspace.orch("logs", name)
    assert unnamed.code == ExitCode.USAGE
    assert "--replica I" in unnamed.err
    runs = local_workspace.orch("runs", name, "--replica", "0", "--json")
    assert runs.code == ExitCode.OK, runs.err
    assert runs.json()["runs"][0]["run_id"] == rows[0]["run_id"]

    # up again: both already run the same launch, nothing starts twice
    again = local_workspace.orch("up", name)
    assert again.code == ExitCode.OK, again.err
    assert again.out.count("the same launch already runs") == 2

    down = local_workspace.orch("down", name)
    assert down.code == ExitCode.OK, down.err
    assert "pair@0: EXITED" in down.out
    assert "pair@1: EXITED" in down.out
    time.sleep(0.2)
    assert _processes_of({row["run_id"] for row in rows}) == []
    after = local_workspace.orch("status", name, "--json").json()
    assert [row["state"] for row in after] == ["EXITED", "EXITED"]


def test_restart_of_one_replica_leaves_the_other_running(local_workspace: Workspace) -> None:
    name = local_workspace.profile(
        "duo", _replicas(f"{{port: {free_port()}}}", f"{{port: {free_port()}}}")
    )
    assert local_workspace.orch("up", name).code == ExitCode.OK
    before = local_workspace.orch("status", name, "--json").json()
    restart = local_workspace.orch("restart", name, "--replica", "1")
    assert restart.code == ExitCode.OK, restart.err
    assert "duo@1| READY" in restart.out
    assert "duo@0" not in restart.out
    after = local_workspace.orch("status", name, "--json").json()
    assert after[0]["run_id"] == before[0]["run_id"]  # untouched
    assert after[0]["pid"] == before[0]["pid"]
    assert after[1]["run_id"] != before[1]["run_id"]
    assert after[1]["state"] == "READY"


def test_a_replica_that_fails_is_reported_beside_the_one_that_came_up(
    local_workspace: Workspace,
) -> None:
    name = local_workspace.profile(
        "halves",
        _replicas(
            f"{{port: {free_port()}}}",
            f"{{port: {free_port()}, env: {{ORCH_STANDIN_FAIL: config-error}}}}",
        ),
    )
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.CONFIG_ERROR  # the failed replica's code
    assert "halves@0| READY" in up.out
    assert "halves@1| orch: error: server failed: " in up.err
    assert "halves: 1 of 2 replicas up: halves@0 on local" in up.out
    assert "halves: 1 of 2 replicas failed: halves@1 on local (exit " in up.err
    rows = local_workspace.orch("status", name, "--json").json()
    assert [row["state"] for row in rows] == ["READY", "FATAL"]
