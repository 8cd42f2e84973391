"""Faults through orch's CLI on this machine (host: local) against the SGLang stand-in (NOT
SGLang): the supervisor killed with -9 (before and after READY), a pid reused by a stranger, a
hung server, a server that cannot be spawned, and a wrapper that drops a flag before exec-ing
the server. Each measures how fast orch notices and prints it (``-s``: docs/faults.md)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import yaml

from orchestrator.errors import ExitCode
from tests.agent.test_disk_full import fill, small_fs
from tests.e2e.conftest import Workspace, add_host

__all__ = ["small_fs"]  # the fixture, shared with tests/agent/test_disk_full.py

LIVENESS = {"startup_timeout_s": 60, "interval_s": 0.5, "failures": 3}


def _with_health(space: Workspace, name: str, health: dict[str, Any]) -> str:
    path = space.profiles / f"{name}.yaml"
    document = yaml.safe_load(path.read_text())
    document["health"] = health
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return name


def _status(space: Workspace, name: str) -> dict[str, Any]:
    (row,) = space.orch("status", name, "--json").json()
    return dict(row)


def _state_file(space: Workspace, name: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((space.deployment_dir(name) / "state.json").read_text())
    return document


def _kill_agent(space: Workspace, name: str) -> int:
    agent_pid = int(_state_file(space, name)["agent_pid"])
    os.kill(agent_pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while psutil.pid_exists(agent_pid) and psutil.Process(agent_pid).status() != "zombie":
        assert time.monotonic() < deadline
        time.sleep(0.02)
    return agent_pid


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_agent_killed_after_ready_status_up_readopts_down_stops_once(
    local_workspace: Workspace,
) -> None:
    name = _with_health(local_workspace, local_workspace.profile("orphaned"), LIVENESS)
    assert local_workspace.orch("up", name).code == ExitCode.OK
    server_pid = _status(local_workspace, name)["pid"]
    _kill_agent(local_workspace, name)

    row = _status(local_workspace, name)
    assert row["state"] == "UNSUPERVISED"
    assert row["unsupervised"] is True
    assert row["pid"] == server_pid
    table = local_workspace.orch("status", name).out
    assert "UNSUPERVISED (was READY; no supervisor, output lost)" in table

    again = local_workspace.orch("up", name)  # the same launch: adopted, not restarted
    assert again.code == ExitCode.OK, again.err
    assert "adopted the running server" in again.out
    row = _status(local_workspace, name)
    assert (row["state"], row["pid"], row["starts"], row["adopted"]) == (
        "READY",
        server_pid,
        1,
        True,
    )
    assert "READY (adopted; output lost)" in local_workspace.orch("status", name).out

    _kill_agent(local_workspace, name)  # and once more: down without any supervisor
    down = local_workspace.orch("down", name)
    assert down.code == ExitCode.OK
    assert "EXITED (stopped; its supervisor" in down.out
    assert _gone(server_pid)
    assert local_workspace.orch("down", name).out.strip() == f"{name}: not running"


def test_a_pid_reused_by_a_stranger_is_never_touched(local_workspace: Workspace) -> None:
    name = local_workspace.profile("reused")
    assert local_workspace.orch("up", name).code == ExitCode.OK
    server_pid = _status(local_workspace, name)["pid"]
    _kill_agent(local_workspace, name)
    os.killpg(server_pid, signal.SIGKILL)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        state = _state_file(local_workspace, name)
        state.update(pid=stranger.pid, pgid=stranger.pid)
        state["server"]["pid"] = stranger.pid
        (local_workspace.deployment_dir(name) / "state.json").write_text(json.dumps(state))

        row = _status(local_workspace, name)
        assert row["state"] == "READY"
        assert row["stale"] is True
        assert row["pid"] is None
        assert row["recorded_pid"] == stranger.pid
        assert "(supervisor died; server gone)" in local_workspace.orch("status", name).out
        up = local_workspace.orch("up", name, "--no-plan")  # not adopted: a new start
        assert up.code == ExitCode.OK, up.err
        assert "previous supervisor died" in up.err
        assert stranger.poll() is None
        assert local_workspace.orch("down", name).code == ExitCode.OK
        assert local_workspace.orch("down", name).out.strip() == f"{name}: not running"
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_a_stopped_server_is_unhealthy_in_status_then_restarted(
    local_workspace: Workspace,
) -> None:
    name = _with_health(local_workspace, local_workspace.profile("frozen"), LIVENESS)
    assert local_workspace.orch("up", name).code == ExitCode.OK
    row = _status(local_workspace, name)
    os.kill(row["pid"], signal.SIGSTOP)
    began = time.monotonic()
    seen: list[str] = []
    while "UNHEALTHY" not in seen and not (seen and seen[-1] in ("BACKOFF", "STARTING")):
        assert time.monotonic() - began < 10, seen
        seen.append(_status(local_workspace, name)["state"])
    noticed = time.monotonic() - began
    print(f"\nkill -STOP: orch status left READY after {noticed:.2f} s (0.5 s x 3): {seen[-1]}")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert noticed <= 0.5 * 3 + 2.0
    deadline = time.monotonic() + 20
    while (current := _status(local_workspace, name))["state"] != "READY" or current[
        "run_id"
    ] == row["run_id"]:
        assert time.monotonic() < deadline, current
        time.sleep(0.1)
    assert current["last_exit"]["cls"] == "hung"
    assert current["restarts"] == 1
    assert _gone(row["pid"])


def test_up_of_a_server_that_cannot_be_spawned_ends_at_once(local_workspace: Workspace) -> None:
    name = local_workspace.profile("huge", served_model_name="m" * (128 * 1024 + 16))
    began = time.monotonic()
    up = local_workspace.orch("up", name, "--no-plan")
    took = time.monotonic() - began
    print(f"\nspawn-failed: the whole up (status, probe, start, verdict) took {took:.2f} s")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert up.code == ExitCode.SPAWN_FAILED, up.err
    assert "spawn-failed: cannot start" in up.err
    assert "MAX_ARG_STRLEN" in up.err
    assert "pid None" not in up.out
    assert "started run" not in up.out
    assert _status(local_workspace, name)["state"] == "FATAL"


def test_agent_killed_during_startup_up_reports_it_within_a_second(
    local_workspace: Workspace,
) -> None:
    name = local_workspace.profile("stuck", env={"ORCH_STANDIN_FAIL": "hang"})
    up = local_workspace.spawn("up", name, "--no-plan")
    try:
        state_file = local_workspace.deployment_dir(name) / "state.json"
        deadline = time.monotonic() + 30
        while not (state_file.exists() and json.loads(state_file.read_text()).get("pid")):
            assert time.monotonic() < deadline
            assert up.poll() is None
            time.sleep(0.05)
        # Kill it once the server has printed its last line before the hang: a server that
        # writes after its supervisor (the reader of its output pipe) died gets EPIPE, and the
        # stand-in's scheduler, like any process whose print() raises, dies of it.
        log = Path(json.loads(state_file.read_text())["log"])
        while "Load weight begin" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline
            assert up.poll() is None
            time.sleep(0.05)
        time.sleep(0.2)  # up is following the startup
        _kill_agent(local_workspace, name)
        killed = time.monotonic()
        _, err = up.communicate(timeout=30)
        noticed = time.monotonic() - killed
    finally:
        if up.poll() is None:
            up.kill()
            up.communicate()
    print(f"\nagent kill -9 during startup: up ended after {noticed:.2f} s")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert noticed < 2.0
    assert up.returncode == ExitCode.SUPERVISOR, err
    assert "the supervisor died during startup" in err
    assert "runs on unsupervised" in err
    assert _status(local_workspace, name)["state"] == "UNSUPERVISED"
    assert local_workspace.orch("down", name).code == ExitCode.OK
    assert _status(local_workspace, name)["state"] == "EXITED"


# A site launcher that "cleans up" the command line before exec-ing python: the incident's flag
# never reaches the server, which dies in resolution before logging server_args=.
DROPPING_WRAPPER = """\
#!/bin/sh
for a do
  shift
  if [ -n "$skip" ]; then skip=; continue; fi
  if [ "$a" = --mamba-scheduler-strategy ]; then skip=1; continue; fi
  set -- "$@" "$a"
done
exec {python} "$@"
"""

INCIDENT_SPEC = """\
spec_decode: {algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}
"""


def wrapped_host(space: Workspace, python: str) -> str:
    wrapper = space.root / "dropping-python"
    wrapper.write_text(DROPPING_WRAPPER.format(python=python))
    wrapper.chmod(0o755)
    add_host(space, space.host_name, python=str(wrapper))  # a host without address is local
    return space.host_name


def assert_not_received(space: Workspace, name: str) -> None:
    outcome = space.orch("diff-effective", name, "--json")
    assert outcome.code == ExitCode.DRIFT, outcome.err
    report = outcome.json()
    assert report["found_by"] == "orch"
    rows = {row["field"]: row for row in report["fields"]}
    mamba = rows["mamba_scheduler_strategy"]
    assert mamba["verdict"] == "not-received"
    assert mamba["received_present"] is False
    assert mamba["resolved_present"] is False
    assert any("received is what it was exec'd with" in note for note in report["notes"])
    assert any("config-error" in note for note in report["notes"])
    drifted = {row["field"] for row in report["fields"] if row["verdict"] != "ok"}
    assert drifted == {"mamba_scheduler_strategy"}, report["fields"]

    text = space.orch("diff-effective", name)
    assert text.code == ExitCode.DRIFT
    line = next(row for row in text.out.splitlines() if row.startswith("mamba_scheduler"))
    assert "not-received" in line


def test_diff_effective_of_a_dead_run_compares_what_it_received(
    local_workspace: Workspace,
) -> None:
    host = wrapped_host(local_workspace, sys.executable)
    name = local_workspace.profile(
        "dropped",
        INCIDENT_SPEC,
        version="0.5.11",
        host=host,
        restart={"mode": "no"},
        args={"mamba_scheduler_strategy": "extra_buffer"},
    )
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.CONFIG_ERROR, up.err
    received = Path(_status(local_workspace, name)["run_dir"]) / "received.json"
    assert oct(received.stat().st_mode & 0o777) == "0o600"
    assert_not_received(local_workspace, name)


def test_a_full_disk_under_the_workdir_status_says_so_and_down_still_stops(
    small_fs: Path, tmp_path: Path
) -> None:
    """issue 26: the workdir on a small filesystem (a tmpfs, as root) filled while the server
    runs: the server and its supervisor live on, ``status`` says ``disk full``, ``down`` stops
    everything and says what it could not record; with room again a second ``down`` records
    the end."""
    workdir = small_fs / "workdir"
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "hosts.yaml").write_text(
        yaml.safe_dump({"hosts": {"local": {"python": sys.executable, "workdir": str(workdir)}}})
    )
    space = Workspace(tmp_path, "local", workdir)
    name = space.profile("full")
    try:
        assert space.orch("up", name).code == ExitCode.OK
        server_pid = _status(space, name)["pid"]
        for cache in (workdir / ".orch").glob("*.code"):
            cache.unlink()  # compiled again by the next command: no room to keep it then
        filler = fill(small_fs)
        row = _status(space, name)
        assert (row["state"], row["agent_alive"], row["disk_full"]) == ("READY", True, True)
        assert "READY (disk full)" in space.orch("status", name).out
        down = space.orch("down", name)
        assert down.code == ExitCode.OK, down.err
        assert f"{name}: EXITED (stopped" in down.out
        assert "note: " in down.out
        assert "no space left on device" in down.out
        assert _gone(server_pid)
        assert sorted(workdir.rglob("*.tmp")) == []  # nothing cut short left behind
        filler.unlink()
        again = space.orch("down", name)
        assert again.code == ExitCode.OK, again.err
        assert _status(space, name)["state"] == "EXITED"
    finally:
        space.cleanup()
