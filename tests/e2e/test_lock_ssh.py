"""The per-deployment operation lock (issue 31) over a real OpenSSH sshd on 127.0.0.1 (and one
case on host: local), against
the SGLang stand-in: while another orch process holds a deployment's lock (through orch's own
client, ``commands.locking.holding``), ``orch down`` waits for it or exits 35 naming the holder,
and a holder that is killed frees the lock by itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator

import psutil
import pytest

from orchestrator.errors import ExitCode
from tests.conftest import REPO
from tests.e2e.conftest import Workspace, free_port
from tests.e2e.test_ssh_up import status_row

# Another orch: holds NAME's lock as ``orch sync`` would, says "held", keeps it until its stdin
# ends (or it is killed).
HOLDER = """\
import sys
from pathlib import Path
from orchestrator.commands.context import Context
from orchestrator.commands.locking import deployments_of, holding
from orchestrator.profile.store import ProfileStore
root = Path(sys.argv[1])
store = ProfileStore(root, display_root=root.parent)
ctx = Context(store=store, environ={}, local_python=sys.executable)
launch = ctx.launch(sys.argv[2], require_secrets=False)
replica = int(sys.argv[3]) if len(sys.argv) > 3 else None
with holding(ctx, deployments_of(launch, replica), "orch sync", wait_s=0):
    print("held", flush=True)
    sys.stdin.read()
ctx.close()
print("released", flush=True)
"""

STARTED: list[subprocess.Popen[str]] = []


@pytest.fixture(autouse=True)
def _holders_end() -> Iterator[None]:
    yield
    while STARTED:
        holder = STARTED.pop()
        if holder.poll() is None:
            holder.kill()
        if holder.stdin is not None and holder.stdin.closed:
            holder.stdin = None  # the test ended it already: its output is what is left
        holder.communicate(timeout=30)


def _hold(
    space: Workspace, name: str, *replica: str, script: str = HOLDER
) -> subprocess.Popen[str]:
    """Another orch (``script``) holding ``name``'s lock: returned once it says so."""
    holder = subprocess.Popen(
        [sys.executable, "-c", script, str(space.profiles), name, *replica],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    STARTED.append(holder)
    assert holder.stdout is not None
    line = holder.stdout.readline()
    assert line == "held\n", holder.stderr.read() if holder.stderr else ""
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    out, err = holder.communicate(timeout=30)  # its stdin closed: it lets go
    assert holder.returncode == 0, err
    assert out == "released\n"


def _up(space: Workspace, name: str) -> int:
    assert space.orch("up", name).code == ExitCode.OK
    pid = status_row(space, name)["pid"]
    assert isinstance(pid, int)
    return pid


def test_down_refuses_a_held_deployment_naming_the_holder(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile("held")
    pid = _up(ssh_workspace, name)
    holder = _hold(ssh_workspace, name)

    down = ssh_workspace.orch("down", name, "--lock-wait", "0")
    assert down.code == ExitCode.LOCKED
    assert f"{name} on box is locked by " in down.err
    assert "'s orch sync (since " in down.err
    assert f"pid {holder.pid})" in down.err
    assert "--lock-wait SECONDS" in down.err
    row = status_row(ssh_workspace, name)
    assert (row["state"], row["pid"]) == ("READY", pid)  # untouched
    assert psutil.pid_exists(pid)

    _release(holder)
    assert ssh_workspace.orch("down", name, "--lock-wait", "0").code == ExitCode.OK
    assert status_row(ssh_workspace, name)["state"] == "EXITED"


def test_down_waits_for_the_holder_then_stops(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile("waited")
    _up(ssh_workspace, name)
    holder = _hold(ssh_workspace, name)
    released = threading.Timer(2.0, _release, (holder,))
    released.start()
    try:
        down = ssh_workspace.orch("down", name, "--lock-wait", "30")
    finally:
        released.join()
    assert down.code == ExitCode.OK, down.err
    assert f"waiting for {name} on box: " in down.err
    assert "'s orch sync (since " in down.err
    assert holder.returncode == 0  # it let go before the stop went on
    assert status_row(ssh_workspace, name)["state"] == "EXITED"


def test_a_killed_holder_frees_the_lock(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile("orphaned")
    _up(ssh_workspace, name)
    holder = _hold(ssh_workspace, name)
    holder.send_signal(signal.SIGKILL)  # orch's side dies: sshd closes the hold's channel
    holder.wait(30)
    down = ssh_workspace.orch("down", name, "--lock-wait", "30")
    assert down.code == ExitCode.OK, down.err
    assert status_row(ssh_workspace, name)["state"] == "EXITED"


def test_restart_holds_across_down_and_up(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile("restarted")
    first = _up(ssh_workspace, name)
    holder = _hold(ssh_workspace, name)
    refused = ssh_workspace.orch("restart", name, "--lock-wait", "0")
    assert refused.code == ExitCode.LOCKED
    assert status_row(ssh_workspace, name)["pid"] == first  # neither stopped nor started
    _release(holder)
    restarted = ssh_workspace.orch("restart", name, "--lock-wait", "0")
    assert restarted.code == ExitCode.OK, restarted.err
    row = status_row(ssh_workspace, name)
    assert row["state"] == "READY"
    assert row["pid"] != first


def test_up_of_replicas_starts_none_while_one_is_held(local_workspace: Workspace) -> None:
    """Every replica's lock is taken before any is started: one held elsewhere, none starts
    (here on host: local, the same agent command without SSH)."""
    ports = (free_port(), free_port())
    name = local_workspace.profile(
        "pair", f"replicas:\n  - {{port: {ports[0]}}}\n  - {{port: {ports[1]}}}\n"
    )
    holder = _hold(local_workspace, name, "1")
    up = local_workspace.orch("up", name, "--lock-wait", "0")
    assert up.code == ExitCode.LOCKED
    assert f"{name}@1 on local is locked by " in up.err
    assert not (local_workspace.deployment_dir(f"{name}@0") / "state.json").exists()
    _release(holder)
    up = local_workspace.orch("up", name, "--lock-wait", "0")
    assert up.code == ExitCode.OK, up.err


# Another orch that holds NAME's lock, and once told (a line on its stdin) launches it itself
# under that hold (as orch sync would), then keeps the hold until its stdin ends.
LAUNCHER = """\
import sys
from pathlib import Path
from orchestrator.commands.context import Context, UpOptions
from orchestrator.commands.locking import deployments_of, holding
from orchestrator.commands.up import up
from orchestrator.profile.store import ProfileStore
root = Path(sys.argv[1])
ctx = Context(store=ProfileStore(root, display_root=root.parent), environ={},
              local_python=sys.executable)
launch = ctx.launch(sys.argv[2], require_secrets=False)
with holding(ctx, deployments_of(launch), "orch sync", wait_s=0):
    print("held", flush=True)
    sys.stdin.readline()
    events = list(up(ctx, launch, UpOptions()))
    print("up" if events[-1].ok else "failed", flush=True)
    sys.stdin.read()
ctx.close()
"""


def test_up_that_waited_for_the_lock_reads_the_deployment_again(ssh_workspace: Workspace) -> None:
    """``orch up`` reads the deployment while its hold is being granted (no round trip more);
    a read made while another orch held the lock is not trusted: read again under its own. Here
    it read "not deployed" while the other held the lock and then launched another rendering
    of it; ``up --replace`` replaces that launch (a stale read would have started beside it and
    been refused)."""
    name = ssh_workspace.profile("raced")
    path = ssh_workspace.profiles / f"{name}.yaml"
    theirs = path.read_text()
    other = _hold(ssh_workspace, name, script=LAUNCHER)
    assert other.stdin is not None
    assert other.stdout is not None
    # ours: another rendering (one more variable), waiting for the lock once it has read
    path.write_text(theirs.replace("env:\n", "env:\n  ORCH_TEST_RENDERING: ours\n"))
    ours = ssh_workspace.spawn("up", name, "--replace", "--lock-wait", "60")
    assert ours.stderr is not None
    waiting = ours.stderr.readline()
    assert f"waiting for {name} on box: " in waiting  # it read the deployment, then waited
    other.stdin.write("go\n")
    other.stdin.flush()
    assert other.stdout.readline() == "up\n"
    their_pid = status_row(ssh_workspace, name)["pid"]
    other.stdin.close()  # the other lets go; ours goes on
    out, err = ours.communicate(timeout=120)
    assert ours.returncode == ExitCode.OK, out + err
    assert "(--replace)" in out  # it saw the other's launch running and replaced it
    row = status_row(ssh_workspace, name)
    assert row["state"] == "READY"
    assert row["pid"] != their_pid
    assert not psutil.pid_exists(their_pid)
