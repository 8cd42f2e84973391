"""``agent hold``'s lines, as the agent writes them (cmd_hold run in-process in a private
directory) decoded by orch's own decoder (fleet/protocol/hold.py): held, waiting with the
holder, refused as errors.Locked naming the holder, an unsafe place as a preflight error."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ExitCode, Locked, PreflightError, SupervisorError
from orchestrator.fleet.protocol.hold import decode_hold_line, hold_args, holder_text
from orchestrator.model import LockHolder
from orchestrator.remote.agent.cmd_hold import cmd_hold, lock_paths

ALICE = LockHolder("alice", "laptop", 4242, "orch sync", 1_700_000_000.0)
BOB = LockHolder("bob", "desk", 77, "orch up", 1_700_000_100.0)


class StillClock:
    """A waiter's clock that moves only when it sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir(mode=0o700)
    return root


def _run(
    workdir: Path, holder: LockHolder, capsys: pytest.CaptureFixture[str], wait_s: float = 0.0
) -> list[dict[str, Any]]:
    """cmd_hold's lines and its final answer (main writes that one), as JSON."""
    args = hold_args(str(workdir), "web", holder, wait_s)
    final = cmd_hold(str(workdir), "web", args[6], wait_s, StillClock(), lambda: b"")
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    return [*lines, final]


def test_held_then_released_decodes(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    held, released = _run(workdir, BOB, capsys)
    line = decode_hold_line(held, "web", "gpu-1")
    assert line.held
    assert line.holder == BOB
    assert line.generation == 1
    assert not decode_hold_line(released, "web", "gpu-1").held
    assert released["released"] is True
    _, _, holder_file = lock_paths(str(workdir), "web")
    # no holder named once let go; the count kept for the next hold
    assert json.loads(Path(holder_file).read_text()) == {"generation": 1, "released": True}


def test_held_elsewhere_waits_then_is_locked_naming_the_holder(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    directory, lock_file, holder_file = lock_paths(str(workdir), "web")
    Path(directory).mkdir(mode=0o700, parents=True)
    Path(directory).parent.chmod(0o700)
    Path(holder_file).write_text(json.dumps(asdict(ALICE)))
    fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # alice's orch holds it
        waiting, refused = _run(workdir, BOB, capsys, wait_s=2.0)
    finally:
        os.close(fd)
    line = decode_hold_line(waiting, "web", "gpu-1")
    assert line.waiting
    assert line.holder == ALICE
    with pytest.raises(Locked) as raised:
        decode_hold_line(refused, "web", "gpu-1")
    assert raised.value.exit_code == ExitCode.LOCKED
    assert raised.value.message.startswith("web on gpu-1 is locked by alice@laptop's orch sync")
    assert "pid 4242" in raised.value.message


def test_a_holder_not_yet_written_is_said_as_unknown() -> None:
    with pytest.raises(Locked) as raised:
        decode_hold_line({"protocol": 1, "ok": False, "refused": "held", "holder": {}}, "w", "h")
    assert "another orch (it has not said who yet)" in raised.value.message
    assert holder_text(None) == "another orch (it has not said who yet)"


def test_an_unsafe_locks_directory_is_a_preflight_error(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from orchestrator.remote.agent.trust import UnsafePath

    directory, _, _ = lock_paths(str(workdir), "web")
    Path(directory).mkdir(mode=0o700, parents=True)
    Path(directory).chmod(0o777)
    with pytest.raises(UnsafePath) as raised:
        _run(workdir, BOB, capsys)
    answer = {"protocol": 1, "ok": False, "refused": "unsafe-path", "reason": raised.value.message}
    with pytest.raises(PreflightError, match="writable by group or others"):
        decode_hold_line(answer, "web", "gpu-1")


def test_a_holder_of_another_shape_is_a_supervisor_error() -> None:
    with pytest.raises(SupervisorError, match="pid: expected an integer"):
        decode_hold_line({"protocol": 1, "waiting": True, "holder": {"pid": "x"}}, "w", "h")


def test_a_read_is_trusted_only_when_no_other_hold_came_between_it_and_ours() -> None:
    from orchestrator.model import LockView

    assert LockView(generation=4, held=False).consistent_with(5)  # free, and ours the next
    assert not LockView(generation=4, held=False).consistent_with(6)  # another came between
    assert not LockView(generation=4, held=True).consistent_with(5)  # read while another held
    assert LockView(generation=5, held=True).consistent_with(5)  # read while ours was held
    assert not LockView(generation=4, held=False).consistent_with(None)  # the agent said none
