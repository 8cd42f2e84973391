"""orch logs -f across restarts and rotations, orch runs, and what orch down says while it
waits: real agents supervising orch's SGLang stand-in on this machine (host: local)."""

from __future__ import annotations

import re
import select
import subprocess
import sys
import time
from pathlib import Path

from orchestrator.cli.output import terminal_safe
from orchestrator.commands.logs import LogTail
from orchestrator.errors import ExitCode
from orchestrator.model import Host
from orchestrator.remote.agent.output import LogSink
from orchestrator.remote.agent.verdict import CUDA_OOM, restart_for
from orchestrator.transport.local import LocalTransport
from tests.conftest import REPO
from tests.e2e.conftest import Workspace

MARKER = re.compile(
    r"^-- run (\S+) ended: (.*?); (?:restart (?:may|will not) help: [^;]*; )?(.*) --\n",
    re.MULTILINE,
)
RESTART = re.compile(r"^-- run \S+ ended: [^;]*; restart may help: GPU memory ", re.MULTILINE)
# Every start dies of CUDA OOM after loading; the third start within the window is FATAL.
OOM_LOOP = {"ORCH_STANDIN_FAIL": "cuda-oom", "ORCH_STANDIN_LOAD_S": "1.5"}
OOM_RESTART = {"mode": "on-failure", "delay_s": 0.2, "max_delay_s": 1, "start_limit": 3}


def _state(space: Workspace, name: str) -> dict[str, object]:
    (row,) = space.orch("status", name, "--json").json()
    assert isinstance(row, dict)
    return row


def _wait_for(space: Workspace, name: str, state: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while _state(space, name)["state"] != state:
        assert time.monotonic() < deadline, _state(space, name)
        time.sleep(0.2)


def _run_log(space: Workspace, name: str, run_id: str, *, exact: bool = False) -> str:
    """A run's log as written (``exact``: tqdm's \r kept), else as a text-mode pipe reads it."""
    path = space.deployment_dir(name) / "runs" / run_id / "server.log"
    return path.read_bytes().decode() if exact else path.read_text()


def _first_line(process: subprocess.Popen[str], timeout: float) -> str:
    assert process.stdout is not None
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no line in time"
    return process.stdout.readline()


def test_logs_follow_goes_on_with_each_restart_and_ends_with_the_verdict(
    local_workspace: Workspace,
) -> None:
    name = local_workspace.profile("oomloop", env=OOM_LOOP, restart=OOM_RESTART)
    assert local_workspace.orch("up", name).code == ExitCode.CUDA_OOM  # the agent restarts it
    follower = local_workspace.spawn("logs", name, "-f", "-n", "100000")
    out, err = follower.communicate(timeout=90)
    assert follower.returncode == ExitCode.CUDA_OOM, (out, err)
    markers = MARKER.findall(out)
    assert len(markers) >= 2, out  # the follower saw at least one restart
    assert len(RESTART.findall(out)) == len(markers), out  # each with the agent's restart verdict
    runs = [run_id for run_id, _, _ in markers]
    for (_, verdict, after), following in zip(markers, [*runs[1:], None], strict=True):
        assert verdict == "cuda-oom (SIGKILL)"
        if following is None:
            assert after.startswith("FATAL: cuda-oom: start limit hit"), after
            assert after.endswith("; no new run")
        else:
            assert after == f"following run {following}"
    assert runs[-1].startswith("0003-")
    # each run's log whole and in order (the first one from -n), nothing lost or repeated
    logs = MARKER.split(out)[::4]
    assert logs[-1] == ""
    assert logs[:-1] == [_run_log(local_workspace, name, run_id) for run_id in runs]


def test_runs_lists_each_run_and_logs_picks_one_by_prefix_or_from_the_end(
    local_workspace: Workspace,
) -> None:
    name = local_workspace.profile("oomruns", env=OOM_LOOP, restart=OOM_RESTART)
    assert local_workspace.orch("up", name).code == ExitCode.CUDA_OOM
    _wait_for(local_workspace, name, "FATAL")

    listed = local_workspace.orch("runs", name, "--json")
    assert listed.code == ExitCode.OK, listed.err
    document = listed.json()
    assert document["profile"] == name
    rows = document["runs"]
    assert [row["run_id"][:4] for row in rows] == ["0001", "0002", "0003"]
    for row in rows:
        assert row["exit"]["class"] == "cuda-oom"
        assert row["exit"]["signal"] == "SIGKILL"
        assert row["started_at"] < row["ended_at"]
        assert 1.5 <= row["duration_s"] < 30
        assert row["pid"] > 0
    assert [row["current"] for row in rows] == [False, False, True]
    assert rows[-1]["state"] == "FATAL"

    table = local_workspace.orch("runs", name)
    assert table.code == ExitCode.OK
    header, *lines = table.out.splitlines()
    assert header.split() == [
        "RUN",
        "STARTED",
        "(UTC)",
        "ENDED",
        "(UTC)",
        "DURATION",
        "READY",
        "AFTER",
        "VERDICT",
        "RESTART",
    ]
    assert [line.split()[0] for line in lines] == [row["run_id"] for row in rows]
    # what happened, then whether a restart can help and why (issue 25)
    oom_restart = f"may help: {restart_for(CUDA_OOM).why}"
    assert all(line.endswith(f"cuda-oom (SIGKILL)  {oom_restart}") for line in lines), lines
    assert all(row["exit"]["restart_helps"] for row in rows)

    second = rows[1]["run_id"]
    for pick in ("0002", second, "-2"):
        shown = local_workspace.orch("logs", name, "--run", pick, "-n", "100000")
        assert shown.code == ExitCode.OK, shown.err
        # as written, but for what would act on a terminal: tqdm's lone \r reads as a line break
        assert shown.out == terminal_safe(_run_log(local_workspace, name, second, exact=True))
    last = local_workspace.orch("logs", name, "--run", "-1", "-n", "3")
    exact = _run_log(local_workspace, name, rows[2]["run_id"], exact=True)
    assert last.out == terminal_safe("".join(exact.splitlines(keepends=True)[-3:]))

    unknown = local_workspace.orch("logs", name, "--run", "0009")
    assert unknown.code == ExitCode.NOT_DEPLOYED
    assert "no run '0009'" in unknown.err
    assert f"recent runs: {', '.join(row['run_id'] for row in rows)}" in unknown.err
    ambiguous = local_workspace.orch("logs", name, "--run", "000")
    assert ambiguous.code == ExitCode.NOT_DEPLOYED
    assert "ambiguous: 3 runs start with it" in ambiguous.err
    too_far = local_workspace.orch("logs", name, "--run", "-4")
    assert too_far.code == ExitCode.NOT_DEPLOYED
    assert "it has 3 run(s)" in too_far.err


def test_logs_follow_ends_when_the_deployment_is_stopped(local_workspace: Workspace) -> None:
    name = local_workspace.profile("stopped")
    assert local_workspace.orch("up", name).code == ExitCode.OK
    run_id = _state(local_workspace, name)["run_id"]
    follower = local_workspace.spawn("logs", name, "-f", "-n", "1")
    _first_line(follower, 30)  # it follows
    assert local_workspace.orch("down", name).code == ExitCode.OK
    out, err = follower.communicate(timeout=30)
    assert follower.returncode == ExitCode.OK, (out, err)
    (marker,) = MARKER.findall(out)
    assert marker[0] == run_id
    assert marker[1] == "stopped"  # not "stopped (SIGKILL)": SGLang's own end of a drain
    assert marker[2] == "EXITED: stopped; no new run"
    assert out.endswith("; no new run --\n")


def test_down_says_what_it_sent_before_it_waits(local_workspace: Workspace) -> None:
    name = local_workspace.profile("stubborn", env={"ORCH_STANDIN_FAIL": "ignore-sigterm"})
    assert local_workspace.orch("up", name).code == ExitCode.OK
    pid = _state(local_workspace, name)["pid"]
    down = local_workspace.spawn("down", name)
    first = _first_line(down, 20)
    assert down.poll() is None  # still draining: the server ignores SIGTERM for 3 s
    assert first == f"SIGTERM sent to {name} (pid {pid}); draining, up to 3 s\n"
    out, err = down.communicate(timeout=60)
    assert down.returncode == ExitCode.OK, err
    assert f"{name}: EXITED" in out
    help_text, _ = local_workspace.spawn("down", "--help").communicate(timeout=30)
    assert "--timeout S" in help_text
    assert "stop_timeout_s" in help_text


def test_down_timeout_overrides_stop_timeout_for_this_stop(local_workspace: Workspace) -> None:
    name = local_workspace.profile("slowstop", env={"ORCH_STANDIN_FAIL": "ignore-sigterm"})
    path = local_workspace.profiles / f"{name}.yaml"
    path.write_text(path.read_text().replace("stop_timeout_s: 3", "stop_timeout_s: 8"))
    assert local_workspace.orch("up", name).code == ExitCode.OK
    started = time.monotonic()
    down = local_workspace.orch("down", name, "--timeout", "1")
    assert down.code == ExitCode.OK, down.err
    assert "draining, up to 1 s" in down.out
    assert time.monotonic() - started < 5


def test_log_tail_reads_across_rotations_without_losing_a_line(tmp_path: Path) -> None:
    """The agent's own LogSink rotates at a small cap while a LogTail reads from offsets:
    polls between writes, several rotations, a new file that grew past the old offset before
    the next poll, a character cut by a rotation."""
    path = str(tmp_path / "server.log")
    tail = LogTail(LocalTransport(Host(name="local", workdir=str(tmp_path))), path)
    assert tail.last_lines(10) is None  # no log yet
    sink = LogSink(path, max_bytes=300, keep=3)
    written: list[str] = []
    shown: list[str] = []

    def write(first: int, count: int) -> None:
        for number in range(first, first + count):
            text = f"line {number:04d} ünïcode {'x' * (number % 17)}\n"
            written.append(text)
            data = text.encode()
            cut = data.index("ü".encode()) + 1  # mid-character: the next write may rotate
            sink.write(data[:cut])
            sink.write(data[cut:])

    try:
        write(0, 5)
        assert tail.last_lines(3) == "".join(written[2:5])
        shown.extend(written[:5])
        for first, count in ((5, 3), (8, 1), (9, 6), (15, 4), (19, 7), (26, 2), (28, 5)):
            write(first, count)
            shown.append("".join(tail.read_new()))
        # rotated, and the new file already longer than the offset read up to: only the
        # rotated file's identity (server.log.1 changed) tells
        offset, rotated = tail.offset, Path(f"{path}.1").stat().st_size
        while Path(f"{path}.1").stat().st_size == rotated or Path(path).stat().st_size <= offset:
            write(len(written), 1)
        shown.append("".join(tail.read_new()) + tail.flush())
    finally:
        sink.close()
    assert Path(f"{path}.3").exists()  # it rotated more than the files kept
    assert "".join(shown) == "".join(written)


def test_log_tail_shows_lines_from_before_a_rotation(tmp_path: Path) -> None:
    path = str(tmp_path / "server.log")
    sink = LogSink(path, max_bytes=200, keep=3)
    lines = [f"line {number}\n" for number in range(30)]
    for text in lines:
        sink.write(text.encode())
    sink.close()
    tail = LogTail(LocalTransport(Host(name="local", workdir=str(tmp_path))), path)
    assert tail.last_lines(20) == "".join(lines[-20:])


def test_logs_follow_into_a_pipe_that_closes_ends_quietly(local_workspace: Workspace) -> None:
    """`orch logs -f | head -n 1`: the reader goes away; orch ends with 0 and no traceback."""
    name = local_workspace.profile("piped")
    assert local_workspace.orch("up", name).code == ExitCode.OK
    pipeline = subprocess.run(
        [
            "bash",
            "-c",
            'set -o pipefail; "$0" -m orchestrator --profiles "$1" logs "$2" -f '
            "-n 50 | head -n 1 >/dev/null",
            sys.executable,
            str(local_workspace.profiles),
            name,
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert pipeline.returncode == 0, pipeline.stderr
    assert "Traceback" not in pipeline.stderr
    assert pipeline.stderr == ""


def test_runs_skips_an_events_line_nested_too_deep_and_says_so(
    local_workspace: Workspace,
) -> None:
    """issue 26: a 100,000-deep line in events.jsonl (written by anyone who can write there, or
    a corrupted file) broke ``orch runs`` with a RecursionError. It is skipped, with a note; so
    are a line longer than any event the agent writes and an exit whose fields are not what the
    agent writes (a nested message): never the listing."""
    name = local_workspace.profile("deepevents")
    assert local_workspace.orch("up", name).code == ExitCode.OK
    events = local_workspace.deployment_dir(name) / "events.jsonl"
    (run_id,) = [p.name for p in (local_workspace.deployment_dir(name) / "runs").iterdir()]
    with events.open("a") as handle:
        handle.write("[" * 100_000 + "]" * 100_000 + "\n")
        handle.write('{"event": "start", "run_id": "x", "pad": "' + "y" * (2 << 20) + '"}\n')
        deep = "[" * 500 + "]" * 500
        handle.write(f'{{"event": "exit", "run_id": "{run_id}", "message": {deep}}}\n')
    listed = local_workspace.orch("runs", name, "--json")
    assert listed.code == ExitCode.OK, listed.err
    document = listed.json()
    assert [row["run_id"] for row in document["runs"]] == [run_id]
    assert document["runs"][0]["exit"] is None  # it runs: the forged exit is no exit of it
    assert document["skipped_events"] == 3
    table = local_workspace.orch("runs", name)
    assert table.code == ExitCode.OK, table.err
    assert "note: 3 lines of events.jsonl skipped" in table.out
