"""The agent on a full disk (issue 26): the deployment's workdir on a real small filesystem (a
tmpfs mounted for the test), filled by the test while a real detached supervisor runs a server
that prints without pause. The supervisor and its server must live on: the output pipe drained
(the server never blocks on it), the output dropped and counted, one marker line in the log once
there is room again, the crash verdict still taken from the last lines (kept in memory), the
previous state.json kept whole (no temp file left), ``status`` saying ``disk full``, and ``stop``
working on the full disk.

Mounting needs root (CI runs the tests as root): elsewhere, or where the mount is refused (a
container without CAP_SYS_ADMIN), the tests are skipped with the reason."""

from __future__ import annotations

import errno
import json
import os
import re
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.cli.show.status import state_cell
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.fleet.protocol.stop import decode_stop
from orchestrator.remote.agent import states as agent_states
from orchestrator.remote.agent.states import EXITED
from orchestrator.remote.agent.verdict import CRASHED
from tests.agent.test_supervisor import CONFIG_LINE, READY, Deployment, _agent, _free_port

FS_SIZE = "4m"
LINE_BYTES = 2000  # a pipe (64 KiB) holds 32 such lines: a server not drained blocks at once
# The server prints a line every millisecond, notes how many it printed in PROGRESS (outside the
# small filesystem), and crashes with a traceback once when CRASH_FILE appears.
NOISY = (
    CONFIG_LINE
    + READY
    + f"""
progress, crash = os.environ['PROGRESS'], os.environ['CRASH_FILE']
n = 0
while True:
    n += 1
    print('line', n, 'x' * {LINE_BYTES})
    if n % 20 == 0:
        with open(progress + '.tmp', 'w') as f:
            f.write(str(n))
        os.replace(progress + '.tmp', progress)
    if os.path.exists(crash):
        os.unlink(crash)
        print('Traceback (most recent call last):', file=sys.stderr)
        print('RuntimeError: boom on a full disk', file=sys.stderr)
        sys.exit(1)
    time.sleep(0.001)
"""
)


@pytest.fixture
def small_fs(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of FS_SIZE mounted at a directory of its own (0700), unmounted afterwards."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs the tests as root)")
    mount = tmp_path / "small-fs"
    mount.mkdir()
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={FS_SIZE},mode=0700", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        pytest.skip(f"mount -t tmpfs refused here: {done.stderr.strip() or done.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem refuses (ENOSPC); its path."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * (1 << 16))
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
    finally:
        os.close(fd)
    # the server may have freed nothing meanwhile: top up the last pages byte by byte
    fd = os.open(filler, os.O_WRONLY | os.O_APPEND)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    finally:
        os.close(fd)
    return filler


def noisy_spec(counter: Path, crash: Path) -> dict[str, Any]:
    port = _free_port()
    env = {"TEST_PORT": str(port), "PROGRESS": str(counter), "CRASH_FILE": str(crash)}
    return {"port": port, "env": env}


def progress(path: Path) -> int:
    return int(path.read_text()) if path.exists() else 0


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def wait_until(what: str, predicate: Any, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"not {what} after {timeout:g} s"
        time.sleep(0.05)


def leftover_temps(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.rglob("*.tmp"))


def test_a_full_disk_drops_output_with_a_marker_and_the_supervisor_serves_on(
    small_fs: Path, tmp_path: Path
) -> None:
    deployment = Deployment(small_fs)
    counter, crash = tmp_path / "progress", tmp_path / "crash"
    deployment.start(NOISY, **noisy_spec(counter, crash))
    try:
        first = deployment.wait_for(agent_states.READY)
        supervisor, server = first["agent_pid"], first["pid"]
        filler = fill(small_fs)
        time.sleep(0.5)  # a server whose pipe nobody drains has blocked by now
        before = progress(counter)
        time.sleep(1.5)
        printed = progress(counter) - before
        assert printed >= 100, f"the server printed {printed} lines in 1.5 s: blocked on its pipe?"
        print(f"\ndisk full: the server printed {printed} lines of {LINE_BYTES} bytes in 1.5 s")  # noqa: T201 - measured, for docs/faults.md (-s)
        full = deployment.status()
        assert full["agent_alive"], full
        assert full["server_alive"], full
        assert full["pid"] == server
        assert full["disk"]["full"] is True
        assert decode_state(full).disk_full
        assert "disk full" in state_cell(decode_state(full))  # orch status's text
        json.loads((deployment.dir / "state.json").read_text())  # the previous one, whole
        assert leftover_temps(deployment.dir) == []

        # it crashes while the disk is still full: the verdict comes from the lines in memory
        crash.touch()
        wait_until("the server crashed", lambda: gone(server))
        time.sleep(1.0)  # its restart, on the full disk
        assert not gone(supervisor)
        assert leftover_temps(deployment.dir) == []
        filler.unlink()  # room again

        def restarted() -> bool:
            status = deployment.status()
            return bool(status["state"] == agent_states.READY and status["restarts"] == 1)

        freed = time.monotonic()
        wait_until("READY again after the restart", restarted)
        print(f"room again: state.json READY (restarts 1) {time.monotonic() - freed:.2f} s later")  # noqa: T201 - measured, for docs/faults.md (-s)
        status = deployment.status()
        assert status["agent_pid"] == supervisor  # the same supervisor throughout
        assert status["last_exit"]["class"] == CRASHED
        assert status["last_exit"]["message"] == "RuntimeError: boom on a full disk"
        assert status["disk"]["full"] is False
        assert status["disk"]["dropped_bytes"] > 0
        assert status["disk"]["last_error"] == "no space left on device"
        assert decode_state(status).output_dropped_bytes == status["disk"]["dropped_bytes"]
        log = Path(status["log"])
        wait_until("the marker in the current run's log", lambda: b"[orch: " in log.read_bytes())
        text = log.read_text(errors="replace")
        marker = re.search(
            r"\[orch: (\d+) bytes of output dropped: no space left on device\]\n", text
        )
        assert marker is not None, text[-2000:]
        assert int(marker.group(1)) > 0
        wait_until("output after the marker", lambda: "line" in log.read_text()[marker.end() :])
    finally:
        deployment.stop()


def test_stop_works_on_a_full_disk_and_says_what_it_could_not_record(
    small_fs: Path, tmp_path: Path
) -> None:
    deployment = Deployment(small_fs)
    deployment.start(NOISY, **noisy_spec(tmp_path / "progress", tmp_path / "crash"))
    ready = deployment.wait_for(agent_states.READY)
    time.sleep(0.5)  # what it records just after READY (the server's memory figures) is written
    before = (deployment.dir / "state.json").read_text()
    filler = fill(small_fs)
    try:
        answer = _agent("stop", "--dir", str(deployment.dir), "--timeout", "2")
        stopped = decode_stop(answer)
        assert gone(ready["pid"])
        assert gone(ready["agent_pid"])
        assert not stopped.state.server_alive
        assert any("no space left on device" in note for note in stopped.notes), answer
        assert leftover_temps(deployment.dir) == []
        assert json.loads((deployment.dir / "state.json").read_text()) == json.loads(before)
    finally:
        filler.unlink()
    # with room again, a second stop records the end
    again = decode_stop(_agent("stop", "--dir", str(deployment.dir), "--timeout", "2"))
    assert again.state.state == EXITED
    assert again.notes == ()
