"""SGLang's gated launch (``--gated-launch-port``, 0.5.19+) in the stand-in: every rank waits after
the parallel init until ``POST /gate/activate`` reaches world rank 0's control server, on one node
and across a multi-node group. Real processes on 127.0.0.1, free ports."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.standin.conftest import (
    LOG_LINE,
    READY,
    Launcher,
    Running,
    free_port,
    log_messages,
    run_to_exit,
    segments,
    standin_env,
)

INIT_BEGIN = "Init torch distributed begin."
INIT_END = "Init torch distributed ends. mem usage=0.00 GB"
LOAD_BEGIN = "Load weight begin."
DUMMY = "Dummy health check server started in background thread at 127.0.0.1:{port}"
ACTIVATED = re.compile(r"^Gated launch activated\. elapsed=\d+\.\d\d s$")
STARTED = "Gated launch control server started on 127.0.0.1:{port}"


def _waiting(rank: int) -> str:
    return f"Gated launch waiting for activation. rank={rank}"


def _gate_call(port: int, path: str, method: str) -> tuple[int, bytes]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=b"" if method == "POST" else None, method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310 - loopback
            return int(response.status), bytes(response.read())
    except urllib.error.HTTPError as error:
        return int(error.code), bytes(error.read())


def _refused(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def _gate_lines(running: Running) -> list[str]:
    return [m for m in log_messages(running.err()) if m.startswith("Gated launch")]


def _by_prefix(running: Running, prefix: str) -> list[str]:
    """The messages of one scheduler (`` TP1``...), also where one follows another rank's tqdm bar
    on the same line (the ranks share stderr)."""
    found = []
    for part in segments(running.err()):
        start = re.search(r"\[\d{4}-\d\d-\d\d ", part)
        if start and (m := LOG_LINE.match(part[start.start() :])) and m.group(2) == prefix:
            found.append(m.group(3))
    return found


def _start_node(
    launcher: Launcher,
    model_dir: Path,
    rank: int,
    dist_port: int,
    gate_port: int,
    tp: int = 2,
) -> Running:
    args = ["--model-path", str(model_dir), "--tp", str(tp), "--nnodes", "2"]
    args += ["--node-rank", str(rank), "--dist-init-addr", f"127.0.0.1:{dist_port}"]
    args += ["--gated-launch-port", str(gate_port)]
    return launcher.start("0.5.23", args)


def test_a_single_node_waits_at_the_gate_until_activated(
    launcher: Launcher, model_dir: Path
) -> None:
    gate_port = free_port()
    args = ["--model-path", str(model_dir), "--tp", "2", "--gated-launch-port", str(gate_port)]
    running = launcher.start("0.5.23", args)
    running.wait_for(_waiting(0))
    running.wait_for(_waiting(1))
    time.sleep(1.2)  # rank 0 has polled its flag at least once more
    assert LOAD_BEGIN not in running.err()
    assert _refused(running.port)  # no API server before the weights
    assert _gate_call(gate_port, "/health", "GET") == (200, b"OK")
    assert _gate_call(gate_port, "/gate/activate", "GET")[0] == 405
    assert _gate_call(gate_port, "/nothing", "GET")[0] == 404
    assert LOAD_BEGIN not in running.err()

    assert _gate_call(gate_port, "/gate/activate", "POST") == (200, b"OK")
    running.wait_for(READY)
    tp0, tp1 = _by_prefix(running, " TP0"), _by_prefix(running, " TP1")
    started, waiting, activated, load = tp0[tp0.index(INIT_END) + 1 : tp0.index(INIT_END) + 5]
    assert started == STARTED.format(port=gate_port)
    assert waiting == _waiting(0)
    assert ACTIVATED.match(activated)
    assert load.startswith(LOAD_BEGIN)
    waiting, activated, load = tp1[tp1.index(INIT_END) + 1 : tp1.index(INIT_END) + 4]
    assert waiting == _waiting(1)
    assert ACTIVATED.match(activated)
    assert load.startswith(LOAD_BEGIN)
    assert not any("control server" in m for m in tp1)  # world rank 0 only
    assert running.out().count("/gate/") == 0  # uvicorn at level warning: no access log
    assert running.get("/health")[0] == 200


def test_one_activation_reaches_every_node_of_a_group(launcher: Launcher, model_dir: Path) -> None:
    dist_port, gate_port = free_port(), free_port()
    worker = _start_node(launcher, model_dir, 1, dist_port, gate_port, tp=4)
    leader = _start_node(launcher, model_dir, 0, dist_port, gate_port, tp=4)
    for running, ranks in ((leader, (0, 1)), (worker, (2, 3))):
        for rank in ranks:
            running.wait_for(_waiting(rank))  # the world rank: node 1 runs TP2, TP3
    time.sleep(1.2)
    assert not any(m.startswith(LOAD_BEGIN) for m in log_messages(leader.err() + worker.err()))
    assert not any("control server" in m for m in _gate_lines(worker))
    assert _refused(worker.port)  # no dummy health server before the schedulers are ready

    assert _gate_call(gate_port, "/gate/activate", "POST") == (200, b"OK")
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))
    for running, prefixes in ((leader, (" TP0", " TP1")), (worker, (" TP2", " TP3"))):
        for prefix in prefixes:
            messages = _by_prefix(running, prefix)
            activated = next(i for i, m in enumerate(messages) if ACTIVATED.match(m))
            assert messages[activated - 1].startswith("Gated launch waiting for activation.")
            assert messages[activated + 1].startswith(LOAD_BEGIN)
    assert worker.get("/health")[0] == 200


def test_a_two_node_group_with_one_rank_each(launcher: Launcher, model_dir: Path) -> None:
    """``--tp 2 --nnodes 2``: rank=0 on node 0, rank=1 on node 1, one POST for both."""
    dist_port, gate_port = free_port(), free_port()
    leader = _start_node(launcher, model_dir, 0, dist_port, gate_port)
    worker = _start_node(launcher, model_dir, 1, dist_port, gate_port)
    leader.wait_for(_waiting(0))
    worker.wait_for(_waiting(1))
    leader.wait_for(STARTED.format(port=gate_port))
    time.sleep(0.5)
    for running in (leader, worker):
        assert LOAD_BEGIN not in running.err()
    assert _gate_call(gate_port, "/gate/activate", "POST") == (200, b"OK")
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))
    assert any(ACTIVATED.match(m) for m in _gate_lines(worker))


def test_a_group_missing_a_node_never_reaches_the_gate(launcher: Launcher, model_dir: Path) -> None:
    gate_port = free_port()
    leader = _start_node(launcher, model_dir, 0, free_port(), gate_port)
    leader.wait_for(INIT_BEGIN)
    time.sleep(2)
    assert leader.proc.poll() is None
    assert _gate_lines(leader) == []
    assert "Gated launch" not in leader.err()
    assert _refused(gate_port)


def test_the_gate_port_in_use_is_logged_by_uvicorns_thread_and_everyone_waits(
    launcher: Launcher, model_dir: Path
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        gate_port = taken.getsockname()[1]
        args = ["--model-path", str(model_dir), "--gated-launch-port", str(gate_port)]
        running = launcher.start("0.5.23", args)
        running.wait_for(_waiting(0))
        time.sleep(1.5)
        assert running.proc.poll() is None
        error = (
            "ERROR:    [Errno 98] error while attempting to bind on address "
            f"('127.0.0.1', {gate_port}): address already in use"
        )
        lines = segments(running.err())
        assert error in lines  # uvicorn's own format: no timestamp, no prefix
        before = LOG_LINE.match(lines[lines.index(error) - 1])
        assert before is not None  # "started" first, as SGLang logs it when the thread starts
        assert before.group(3) == STARTED.format(port=gate_port)
        assert LOAD_BEGIN not in running.err()
        assert _gate_lines(running)[-1] == _waiting(0)


def test_without_the_flag_nothing_is_gated(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start("0.5.23", ["--model-path", str(model_dir), "--tp", "2"])
    running.wait_for(READY)
    assert "Gated launch" not in running.err()


def test_0514_does_not_know_the_flag(model_dir: Path) -> None:
    args = ["--model-path", str(model_dir), "--gated-launch-port", str(free_port())]
    result = run_to_exit("0.5.14", args)
    assert result.returncode == 2
    assert "unrecognized arguments: --gated-launch-port" in result.stderr


def test_0519_gates_too(launcher: Launcher, model_dir: Path) -> None:
    gate_port = free_port()
    args = ["--model-path", str(model_dir), "--gated-launch-port", str(gate_port)]
    running = launcher.start("0.5.19", args)
    running.wait_for(_waiting(0))
    assert _gate_call(gate_port, "/gate/activate", "POST") == (200, b"OK")
    running.wait_for(READY)


# The wait loop and the control server in a process of their own (sglang._standin is the
# stand-in's package: it is importable only with standin/ on the path, as the servers run it).
_UNITS = textwrap.dedent(
    """
    import json, sys, time, urllib.request
    from sglang._standin import gate

    lines = []
    polls = iter([False] * 5 + [True])
    elapsed = gate.wait_until_activated(
        lambda: next(polls), time.sleep, lines.append, rank=3, poll_s=0.01, log_s=0.02
    )
    server = gate.GateServer()
    port = int(sys.argv[1])
    bound = server.serve("127.0.0.1", port) is None
    before = server.flag.is_set()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/gate/activate", data=b"", method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        answer = [response.status, response.read().decode()]
    again = gate.GateServer().serve("127.0.0.1", port)
    print(json.dumps({
        "elapsed": elapsed, "lines": lines, "activated": gate.activated(1.234),
        "bound": bound, "before": before, "after": server.flag.is_set(), "answer": answer,
        "again": None if again is None else again.errno,
    }))
    """
)


def test_the_wait_loop_and_the_control_server_in_process() -> None:

    result = subprocess.run(
        [sys.executable, "-c", _UNITS, str(free_port())],
        env=standin_env("0.5.23"),
        capture_output=True,
        text=True,
        timeout=15,
        check=True,
    )
    found = json.loads(result.stdout)
    assert found["elapsed"] >= 0.05
    assert found["lines"]
    assert all(
        re.fullmatch(r"Gated launch still waiting for activation\. rank=3 elapsed=\d+ s", line)
        for line in found["lines"]
    )
    assert found["activated"] == "Gated launch activated. elapsed=1.23 s"
    assert (found["bound"], found["before"], found["after"]) == (True, False, True)
    assert found["answer"] == [200, "OK"]
    assert found["again"] == 98  # EADDRINUSE: what uvicorn's thread would log
