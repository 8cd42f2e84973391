"""``orch status --load`` of a READY stand-in whose /v1/loads answers known figures
(ORCH_STANDIN_LOADS): golden text and JSON (tests/golden/status/, what varies named: pids, times,
ports, run ids, digests); the supervisor keeps the last figures, a stopped deployment shows them
with their age; ``--watch`` in a pseudo-terminal redraws in place twice and ends on Ctrl-C."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import sys
import time
from typing import Any

import pytest

from orchestrator.cli.show.text import grid
from orchestrator.errors import ExitCode
from tests.conftest import REPO
from tests.e2e.conftest import Workspace

GOLDEN = REPO / "tests" / "golden" / "status"
LOADS = {
    "num_running_reqs": 3,
    "num_waiting_reqs": 1,
    "token_usage": 0.42,
    "gen_throughput": 1234.5,
    "cache_hit_rate": 0.615,
    "speculative": {"accept_length": 2.31, "accept_rate": 0.66},
}
VARYING = {"PID": "<pid>", "UPTIME": "<uptime>", "PORT": "<port>", "RUN": "<run>"}
VARYING |= {"DIGEST": "<digest>", "COMMIT": "<commit>"}


def normalized_table(text: str) -> str:
    """The table re-drawn with what varies named (cells are 2+ spaces apart), then the lines
    under it as they are."""
    lines = text.splitlines()
    header = re.split(r" {2,}", lines[0])
    table = [tuple(header)]
    rest: list[str] = []
    for line in lines[1:]:
        cells = re.split(r" {2,}", line)
        if len(cells) != len(header) or rest:
            rest.append(line)
            continue
        table.append(
            tuple(
                VARYING.get(name, cell) if cell != "-" else cell
                for name, cell in zip(header, cells, strict=True)
            )
        )
    return "\n".join([grid(table), *rest]) + "\n"


def normalized_json(rows: list[dict[str, Any]]) -> str:
    kept = [
        {
            "profile": row["profile"],
            "state": row["state"],
            "load": {**row["load"], "at": "<at>", "age_s": "<age>"},
        }
        for row in rows
    ]
    return json.dumps(kept, indent=2, sort_keys=True) + "\n"


def _golden(request: pytest.FixtureRequest, name: str, produced: str) -> None:
    path = GOLDEN / name
    if request.config.getoption("--update-goldens"):
        path.write_text(produced, encoding="utf-8")
    assert path.exists(), f"no golden {name}: run pytest {__file__} --update-goldens"
    assert produced == path.read_text(encoding="utf-8")


def _loaded(space: Workspace) -> str:
    return space.profile("loaded", env={"ORCH_STANDIN_LOADS": json.dumps(LOADS)})


def test_status_load_of_a_ready_standin_matches_the_goldens_and_outlives_the_stop(
    request: pytest.FixtureRequest, local_workspace: Workspace
) -> None:
    name = _loaded(local_workspace)
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    try:
        text = local_workspace.orch("status", name, "--load")
        assert text.code == ExitCode.OK, text.err
        _golden(request, "status-load.txt", normalized_table(text.out))
        document = local_workspace.orch("status", name, "--load", "--json")
        _golden(request, "status-load.json", normalized_json(document.json()))
        # the supervisor sampled the figures at READY and keeps them in state.json
        state = json.loads((local_workspace.deployment_dir(name) / "state.json").read_text())
        assert state["load"]["loads"][0]["num_running_reqs"] == 3
        assert isinstance(state["load"]["at"], float)
        # --load is the default; --no-load: no columns, the JSON's figures are the kept ones
        assert "RUN/WAIT" in local_workspace.orch("status", name).out
        plain = local_workspace.orch("status", name, "--no-load")
        assert "RUN/WAIT" not in plain.out
        (kept,) = local_workspace.orch("status", name, "--no-load", "--json").json()
        assert kept["load"]["live"] is False
        assert kept["load"]["total"]["running"] == 3
    finally:
        assert local_workspace.orch("down", name).code == ExitCode.OK
    (stopped,) = local_workspace.orch("status", name, "--load", "--json").json()
    assert stopped["state"] == "EXITED"
    assert stopped["load"]["live"] is False
    assert stopped["load"]["age_s"] >= 0.0
    assert stopped["load"]["total"]["running"] == 3
    assert stopped["load"]["cap"]["by"] == "mamba slots"
    table = local_workspace.orch("status", name, "--load").out
    (row,) = [line for line in table.splitlines() if line.startswith(name)]
    assert re.search(r"3/1\s+42%\s+1,235\s+62%\s+2\.31\s+\d+ \(mamba slots\)\s+\d+s ago", row), row


def _read_until(fd: int, pattern: bytes, count: int, timeout: float) -> bytes:
    seen = b""
    deadline = time.monotonic() + timeout
    while seen.count(pattern) < count and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.2)
        if ready:
            try:
                seen += os.read(fd, 65536)
            except OSError:
                break
    return seen


def test_status_watch_redraws_in_place_on_a_terminal_until_ctrl_c(
    local_workspace: Workspace,
) -> None:
    name = _loaded(local_workspace)
    assert local_workspace.orch("up", name).code == ExitCode.OK
    argv = [sys.executable, "-m", "orchestrator", "--profiles", str(local_workspace.profiles)]
    argv += ["status", name, "--watch", "0.5"]
    pid, fd = pty.fork()
    if pid == 0:  # the child: orch on the pseudo-terminal, its controlling terminal
        os.chdir(REPO)
        os.execve(sys.executable, argv, {**os.environ, "PYTHONPATH": str(REPO)})  # noqa: S606
    try:
        seen = _read_until(fd, b"\x1b[H\x1b[2J", 2, timeout=60.0)
        assert seen.count(b"\x1b[H\x1b[2J") >= 2, seen[-2000:]
        assert b"Every 0.5s: orch status --load" in seen
        assert b"RUN/WAIT" in seen
        assert b"3/1" in seen
        os.write(fd, b"\x03")  # Ctrl-C, through the terminal's line discipline
        seen += _read_until(fd, b"\x00never", 1, timeout=10.0)
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status), status
        assert os.WEXITSTATUS(status) == 0, seen[-2000:]
        assert b"Traceback" not in seen
    finally:
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        os.close(fd)


def test_status_watch_off_a_terminal_prints_each_refresh_after_the_previous(
    local_workspace: Workspace,
) -> None:
    name = _loaded(local_workspace)
    assert local_workspace.orch("up", name).code == ExitCode.OK
    watching = local_workspace.spawn("status", name, "--watch", "0.3")
    try:
        deadline = time.monotonic() + 60.0
        assert watching.stdout is not None
        out = ""
        while out.count("Every 0.3s") < 2 and time.monotonic() < deadline:
            out += watching.stdout.readline()
        watching.send_signal(signal.SIGINT)
        rest, err = watching.communicate(timeout=20)
    finally:
        if watching.poll() is None:
            watching.kill()
    assert watching.returncode == 0, err
    assert "\x1b[" not in out + rest  # no escape sequences in a file
    assert out.count("Every 0.3s: orch status --load") >= 2
