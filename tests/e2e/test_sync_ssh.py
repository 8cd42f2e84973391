"""``orch sync`` over the real sshd: deployments up from commit A of a profiles repository, commit
B changes one; the dry run finds exactly that one and touches nothing on the host; the apply
relaunches only it; a stopped one is down, a dirty launch out-of-band; a new rendering that fails
at startup (the stand-in's ORCH_STANDIN_FAIL) halts the rollout and goes back to its previous
launch. (The lock's race between two syncs is the lock's own test.)"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace


def _git(space: Workspace, *argv: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", *argv],
        cwd=space.root,
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    )
    return done.stdout.strip()


def _commit(space: Workspace, message: str) -> str:
    _git(space, "add", "profiles")
    _git(space, "commit", "-q", "-m", message)
    return _git(space, "rev-parse", "HEAD")


def _host_files(workdir: Path) -> dict[str, int]:
    """Every file under the host's workdir with its mtime (ns): what a read-only run keeps.
    The servers' own logs are left out: the running servers write them, not orch."""
    return {
        str(path.relative_to(workdir)): path.stat().st_mtime_ns
        for path in sorted(workdir.rglob("*"))
        if path.is_file() and path.name != "server.log"
    }


def _pids(space: Workspace, *names: str) -> dict[str, int | None]:
    found = space.orch("status", *names, "--json")
    return {row["profile"]: row.get("pid") for row in found.json()}


def _states(space: Workspace, *argv: str) -> tuple[int, dict[str, dict[str, object]]]:
    found = space.orch("sync", "--dry-run", "--json", *argv)
    assert found.out, found.err
    return found.code, {row["deployment"]: row for row in json.loads(found.out)["deployments"]}


def _two_up_from_a(space: Workspace) -> str:
    _git(space, "init", "-q", "-b", "main")
    space.profile("one")
    space.profile("two")
    a = _commit(space, "A")
    for name in ("one", "two"):
        up = space.orch("up", name)
        assert up.code == ExitCode.OK, up.err
    return a


def test_dry_run_then_sync_relaunch_only_the_changed_one(ssh_workspace: Workspace) -> None:
    space = ssh_workspace
    _two_up_from_a(space)
    code, states = _states(space)
    assert code == ExitCode.OK
    assert {name: row["state"] for name, row in states.items()} == {"one": "clean", "two": "clean"}
    path = space.profiles / "one.yaml"
    path.write_text(
        path.read_text().replace(
            "skip_server_warmup: true", "skip_server_warmup: true\n  mem_fraction_static: 0.8"
        )
    )
    _commit(space, "B")
    files, pids = _host_files(space.workdir), _pids(space, "one", "two")
    code, states = _states(space)
    assert code == ExitCode.CHANGES
    assert (states["one"]["state"], states["one"]["action"]) == ("pending", "restart")
    assert states["one"]["forced_by"] == ["mem_fraction_static"]
    assert states["two"]["state"] == "clean"
    assert _host_files(space.workdir) == files  # the dry run wrote nothing on the host
    assert _pids(space, "one", "two") == pids
    applied = space.orch("sync", "--yes")
    assert applied.code == ExitCode.OK, applied.out + applied.err
    after = _pids(space, "one", "two")
    assert after["two"] == pids["two"]  # its process kept
    assert after["one"] != pids["one"]
    code, states = _states(space)
    assert code == ExitCode.OK, states


def test_a_stopped_one_is_down_and_a_dirty_launch_out_of_band(ssh_workspace: Workspace) -> None:
    space = ssh_workspace
    _two_up_from_a(space)
    assert space.orch("down", "one").code == ExitCode.OK
    path = space.profiles / "two.yaml"
    path.write_text(
        path.read_text().replace(
            "skip_server_warmup: true", "skip_server_warmup: true\n  mem_fraction_static: 0.7"
        )
    )
    relaunched = space.orch("up", "two", "--replace")  # from the dirty tree
    assert relaunched.code == ExitCode.OK, relaunched.err
    _git(space, "checkout", "--", "profiles")
    code, states = _states(space)
    assert code == ExitCode.CHANGES
    assert (states["one"]["state"], states["one"]["why"]) == ("down", "stopped (EXITED)")
    assert states["two"]["state"] == "out-of-band"
    assert "dirty tree" in str(states["two"]["why"])


def test_a_failing_new_rendering_halts_after_the_first_and_goes_back(
    ssh_workspace: Workspace,
) -> None:
    space = ssh_workspace
    _two_up_from_a(space)
    for name in ("one", "two"):
        path = space.profiles / f"{name}.yaml"
        text = path.read_text()
        path.write_text(text.replace("env:\n", "env:\n  ORCH_STANDIN_FAIL: config-error\n"))
    _commit(space, "B: both fail at startup")
    pids = _pids(space, "one", "two")
    applied = space.orch("sync", "--yes")
    assert applied.code == ExitCode.SYNC, applied.out + applied.err
    assert "sync halted: the canary one failed" in applied.out
    assert "put back on its previous launch" in applied.out
    assert "not reached" in applied.out
    after = _pids(space, "one", "two")
    assert after["two"] == pids["two"]  # never reached: its process kept
    status = {row["profile"]: row for row in space.orch("status", "one", "--json").json()}
    assert status["one"]["state"] == "READY"  # its previous launch again


def _wait_for_line(process: subprocess.Popen[str], needle: str) -> list[str]:
    """The process's stdout lines until one holds ``needle`` (it still runs then)."""
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        if needle in line:
            return lines
    raise AssertionError(f"{needle!r} never said: {''.join(lines)}")


def test_two_concurrent_syncs_of_one_deployment_act_once(ssh_workspace: Workspace) -> None:
    """Two people sync the same fleet: the first relaunches the changed deployment under its
    lock; one that will not wait is refused naming the first as holder; one that waits finds it
    synced and does nothing."""
    space = ssh_workspace
    _two_up_from_a(space)
    path = space.profiles / "one.yaml"
    # the new launch loads for a while: the first sync holds the lock that long
    path.write_text(path.read_text().replace("env:\n", "env:\n  ORCH_STANDIN_LOAD_S: '4'\n"))
    _commit(space, "B: a slower load")
    runs_before = len(space.orch("runs", "one", "--json").json()["runs"])
    first = space.spawn("sync", "--yes", "one")
    try:
        said = _wait_for_line(first, "one: restart")
        refused = space.orch("sync", "--yes", "--lock-wait", "0", "one")
        waited = space.spawn("sync", "--yes", "--lock-wait", "60", "one")
        out, err = first.communicate(timeout=120)
        assert first.returncode == ExitCode.OK, "".join(said) + out + err
        waited_out, waited_err = waited.communicate(timeout=120)
    finally:
        for process in (first,):
            if process.poll() is None:
                process.kill()
    assert refused.code == ExitCode.SYNC, refused.out + refused.err
    assert "locked by" in refused.out + refused.err
    assert "orch sync" in refused.out + refused.err  # the holder named, with its command
    assert waited.returncode == ExitCode.OK, waited_out + waited_err
    assert "already clean" in waited_out
    runs = space.orch("runs", "one", "--json").json()["runs"]
    assert len(runs) == runs_before + 1  # relaunched once, by the first sync only
    code, states = _states(space)
    assert code == ExitCode.OK, states


def test_agent_only_and_live_changes_are_applied_without_a_restart(
    ssh_workspace: Workspace,
) -> None:
    """A restart policy change reaches the supervisor (agent-only), a logging change reaches
    the server over /configure_logging (live, verified by SGLang's own log line): neither
    server restarts, and the fleet reads clean afterwards."""
    space = ssh_workspace
    _two_up_from_a(space)
    pids = _pids(space, "one", "two")
    one = space.profiles / "one.yaml"
    one.write_text(one.read_text().replace("delay_s: 0.2", "delay_s: 0.5"))
    two = space.profiles / "two.yaml"
    two.write_text(
        two.read_text().replace(
            "skip_server_warmup: true", "skip_server_warmup: true\n  log_requests: true"
        )
    )
    _commit(space, "B: a restart delay, request logging")
    code, states = _states(space)
    assert code == ExitCode.CHANGES
    assert (states["one"]["state"], states["one"]["action"]) == ("pending", "agent-only")
    assert (states["two"]["state"], states["two"]["action"]) == ("pending", "live")
    applied = space.orch("sync", "--yes")
    assert applied.code == ExitCode.OK, applied.out + applied.err
    assert _pids(space, "one", "two") == pids  # neither restarted
    code, states = _states(space)
    assert code == ExitCode.OK, states
    log = (space.deployment_dir("two") / "runs").glob("*/server.log")
    assert any("log_requests=True" in path.read_text() for path in log)
