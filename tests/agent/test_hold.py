"""``agent hold``: a deployment's operation lock, run as the real agent (the pushed bundle through
the checking bootstrap) in subprocesses: held until its stdin ends, refused naming the holder,
waited for, freed by a holder's death, a stale holder file ignored, an unsafe place refused."""

from __future__ import annotations

import json
import signal
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_supervisor import AGENT

ALICE = {"user": "alice", "machine": "laptop", "pid": 4242, "command": "orch up", "since": 1.7e9}
BOB = {"user": "bob", "machine": "desk", "pid": 77, "command": "orch sync", "since": 1.8e9}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir(mode=0o700)
    return root


STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _ended() -> Iterator[None]:
    """Every hold this test started ends with it, its pipes closed."""
    yield
    while STARTED:
        process = STARTED.pop()
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=10)


def _hold(workdir: Path, holder: dict[str, Any], wait: float = 0.0) -> subprocess.Popen[str]:
    argv = [*AGENT, "hold", "--workdir", str(workdir), "--deployment", "web"]
    argv += ["--holder", json.dumps(holder), "--wait", str(wait)]
    process = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    STARTED.append(process)
    return process


def _line(process: subprocess.Popen[str]) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line, process.stderr.read() if process.stderr else ""
    document: dict[str, Any] = json.loads(line)
    return document


def _held(workdir: Path, holder: dict[str, Any]) -> subprocess.Popen[str]:
    process = _hold(workdir, holder)
    answer = _line(process)
    assert answer["ok"] is True
    assert answer["held"] is True
    return process


def _release(process: subprocess.Popen[str]) -> dict[str, Any]:
    out, _ = process.communicate(timeout=10)  # stdin closed: the hold ends
    assert process.returncode == 0
    answer: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return answer


def _refused(workdir: Path, holder: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    process = _hold(workdir, holder)
    out, _ = process.communicate(timeout=30)
    return process.returncode, json.loads(out.strip().splitlines()[-1])


def _holder_file(workdir: Path) -> Path:
    return workdir / ".orch" / "locks" / "web.holder.json"


def test_hold_holds_until_stdin_ends_and_refuses_another_naming_the_holder(
    workdir: Path,
) -> None:
    alice = _held(workdir, ALICE)
    locks = workdir / ".orch" / "locks"
    assert stat.S_IMODE(locks.stat().st_mode) == 0o700
    assert stat.S_IMODE((locks / "web.lock").stat().st_mode) == 0o600
    assert stat.S_IMODE(_holder_file(workdir).stat().st_mode) == 0o600
    assert json.loads(_holder_file(workdir).read_text())["user"] == "alice"

    code, answer = _refused(workdir, BOB)
    assert code == 3
    assert answer["refused"] == "held"
    assert answer["holder"] == ALICE

    assert _release(alice) == {
        "protocol": 1,
        "ok": True,
        "released": True,
        "deployment": "web",
    }
    # no holder named any more; the count of holds kept for the next one
    assert json.loads(_holder_file(workdir).read_text()) == {"generation": 1, "released": True}
    _release(_held(workdir, BOB))  # free again


def test_hold_waits_saying_who_holds_it_then_holds_once_released(workdir: Path) -> None:
    alice = _held(workdir, ALICE)
    bob = _hold(workdir, BOB, wait=30)
    waiting = _line(bob)
    assert waiting["waiting"] is True
    assert waiting["holder"] == ALICE
    _release(alice)
    assert _line(bob)["held"] is True
    assert json.loads(_holder_file(workdir).read_text())["user"] == "bob"
    _release(bob)


def test_hold_gives_up_when_the_wait_runs_out(workdir: Path) -> None:
    alice = _held(workdir, ALICE)
    bob = _hold(workdir, BOB, wait=0.5)
    assert _line(bob)["waiting"] is True
    out, _ = bob.communicate(timeout=10)
    assert json.loads(out)["refused"] == "held"
    assert bob.returncode == 3
    _release(alice)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM, signal.SIGHUP])
def test_a_holder_that_ends_by_a_signal_frees_the_lock(workdir: Path, sig: int) -> None:
    alice = _held(workdir, ALICE)
    alice.send_signal(sig)
    alice.wait(10)  # its stdin still open: the signal alone ended it
    if sig != signal.SIGKILL:  # let go as on stdin's end: no holder named any more
        assert alice.returncode == 0
        assert "user" not in json.loads(_holder_file(workdir).read_text())
    else:  # killed: its holder file stays, stale, and the next replaces it
        assert json.loads(_holder_file(workdir).read_text())["user"] == "alice"
    bob = _held(workdir, BOB)
    assert json.loads(_holder_file(workdir).read_text())["user"] == "bob"
    _release(bob)


def test_a_stale_holder_file_is_ignored(workdir: Path) -> None:
    locks = workdir / ".orch" / "locks"
    locks.mkdir(mode=0o700, parents=True)
    (workdir / ".orch").chmod(0o700)
    _holder_file(workdir).write_text(json.dumps(ALICE))  # nobody holds the lock
    bob = _held(workdir, BOB)
    assert json.loads(_holder_file(workdir).read_text())["user"] == "bob"
    _release(bob)


def test_a_locks_directory_others_can_write_is_refused(workdir: Path) -> None:
    locks = workdir / ".orch" / "locks"
    locks.mkdir(mode=0o700, parents=True)
    (workdir / ".orch").chmod(0o700)
    locks.chmod(0o777)
    code, answer = _refused(workdir, BOB)
    assert code == 3
    assert answer["refused"] == "unsafe-path"
    assert "writable by group or others" in answer["reason"]
    assert not (locks / "web.lock").exists()


def test_a_planted_lock_symlink_is_refused(workdir: Path, tmp_path: Path) -> None:
    locks = workdir / ".orch" / "locks"
    locks.mkdir(mode=0o700, parents=True)
    (workdir / ".orch").chmod(0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (locks / "web.lock").symlink_to(victim)
    code, answer = _refused(workdir, BOB)
    assert code == 3
    assert answer["refused"] == "unsafe-path"
    assert "symlink" in answer["reason"]
    assert victim.read_text() == "keep"


def test_a_deployment_name_that_leaves_the_locks_directory_is_refused(workdir: Path) -> None:
    argv = [*AGENT, "hold", "--workdir", str(workdir), "--deployment", "../web"]
    done = subprocess.run(
        [*argv, "--holder", json.dumps(BOB)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 3
    assert json.loads(done.stdout)["refused"] == "unsafe-path"
    assert not (workdir / ".orch" / "web.lock").exists()


def _status_lock(workdir: Path) -> dict[str, Any]:
    done = subprocess.run(
        [*AGENT, "status", "--dir", str(workdir / "web")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    lock: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])["lock"]
    return lock


def test_each_hold_is_numbered_and_status_says_the_lock_as_it_read_it(workdir: Path) -> None:
    """orch reads a deployment while its hold is being granted, and trusts that read only when
    the hold it got is the next one after the lock ``status`` saw (model.LockView.consistent_with)."""
    assert _status_lock(workdir) == {"generation": 0, "held": False}  # never taken
    alice = _held(workdir, ALICE)
    assert _status_lock(workdir) == {"generation": 1, "held": True}
    _release(alice)
    assert _status_lock(workdir) == {"generation": 1, "held": False}
    bob = _hold(workdir, BOB)
    answer = _line(bob)
    assert (answer["held"], answer["generation"]) == (True, 2)
    _release(bob)
    # a holder killed outright leaves its name behind: a read then is not trusted either
    carol = _held(workdir, {**ALICE, "user": "carol"})
    carol.kill()
    carol.wait(10)
    assert _status_lock(workdir) == {"generation": 3, "held": True}
