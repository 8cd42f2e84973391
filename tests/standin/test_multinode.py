"""Multi-node groups (``--nnodes N``): the stand-in's rendezvous over real TCP on 127.0.0.1, the
dummy health server of the other nodes, a peer's death, and the shutdown broadcast."""

from __future__ import annotations

import os
import signal
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.standin.conftest import (
    READY,
    Launcher,
    Running,
    free_port,
    is_gone,
    log_messages,
    run_to_exit,
    segments,
)

INIT_BEGIN = "Init torch distributed begin."
INIT_END = "Init torch distributed ends."
DUMMY = "Dummy health check server started in background thread at 127.0.0.1:{port}"
WORKER_SIGTERM = (
    "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq broadcast to stop the "
    "schedulers."
)
SPANS = "CustomAllreduce is disabled because this process group spans across nodes."


def _start_node(
    launcher: Launcher,
    model_dir: Path,
    rank: int,
    dist_port: int,
    *,
    version: str = "0.5.23",
    tp: int = 2,
    nnodes: int = 2,
    fail: str | None = None,
    **env: str,
) -> Running:
    args = [
        "--model-path",
        str(model_dir),
        "--tp",
        str(tp),
        "--nnodes",
        str(nnodes),
        "--node-rank",
        str(rank),
        "--dist-init-addr",
        f"127.0.0.1:{dist_port}",
    ]
    return launcher.start(version, args, fail, "launch_server", None, **env)


def _prefixes(stderr: str) -> set[str]:
    """The `` TPn`` parts of the bracketed log lines."""
    found: set[str] = set()
    for part in segments(stderr):
        if part.startswith("[") and "]" in part:
            head = part[1 : part.index("]")]
            found.update(word for word in head.split()[2:])
    return found


def _titles(running: Running) -> list[str]:
    return sorted(child.name() for child in running.children())


def _refused(running: Running) -> bool:
    try:
        urllib.request.urlopen(running.url("/health"), timeout=1)  # noqa: S310 - loopback
    except urllib.error.URLError:
        return True
    return False


@pytest.fixture
def group(launcher: Launcher, model_dir: Path) -> tuple[Running, Running]:
    """A ready 2-node group (``--tp 2 --nnodes 2``); node 1 starts first and waits for node 0."""
    dist_port = free_port()
    worker = _start_node(launcher, model_dir, 1, dist_port, ORCH_STANDIN_HEALTH_TIMEOUT_S="0.5")
    worker.wait_for(INIT_BEGIN)
    time.sleep(0.3)  # node 1 is retrying the connection to a store nobody serves yet
    leader = _start_node(launcher, model_dir, 0, dist_port, ORCH_STANDIN_HEALTH_TIMEOUT_S="0.5")
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))
    return leader, worker


def test_a_two_node_group_gets_ready_on_both_nodes(group: tuple[Running, Running]) -> None:
    leader, worker = group
    assert leader.get("/health")[0] == 200
    assert worker.get("/health") == (200, b"")
    assert worker.get("/health_generate")[0] == 200
    assert worker.get("/ping")[0] == 200
    assert worker.get("/server_info")[0] == 404  # no API server on a worker

    leader_log, worker_log = leader.err(), worker.err()
    assert _prefixes(leader_log) == {"TP0"}
    assert _prefixes(worker_log) == {"TP1"}
    for text in (leader_log, worker_log):
        messages = log_messages(text)
        assert messages.index(INIT_BEGIN) < messages.index(SPANS)
        assert any(m.startswith(INIT_END) for m in messages)
    assert "Loading safetensors checkpoint shards" in leader_log  # tqdm only on TP rank 0
    assert "Loading safetensors checkpoint shards" not in worker_log
    assert "max_total_num_tokens=" not in worker_log  # the summary too
    assert "Uvicorn running on" not in worker_log  # the dummy server runs at level warning
    assert READY not in worker_log
    assert worker.out() == ""  # no access log either
    assert _titles(leader) == ["sglang::detokenizer", "sglang::scheduler_TP0"]
    assert _titles(worker) == ["sglang::scheduler_TP1"]  # no tokenizer, no detokenizer


def test_node_0_alone_hangs_silently_at_init(launcher: Launcher, model_dir: Path) -> None:
    leader = _start_node(launcher, model_dir, 0, free_port())
    leader.wait_for(INIT_BEGIN)
    time.sleep(2)
    assert leader.proc.poll() is None
    assert log_messages(leader.err())[-1] == INIT_BEGIN
    assert _refused(leader)


def test_a_worker_runs_its_share_of_tp_ranks_and_retries_silently(
    launcher: Launcher, model_dir: Path
) -> None:
    worker = _start_node(launcher, model_dir, 1, free_port(), tp=16)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and log_messages(worker.err()).count(INIT_BEGIN) < 8:
        time.sleep(0.05)
    time.sleep(0.5)
    assert _prefixes(worker.err()) == {f"TP{rank}" for rank in range(8, 16)}
    assert log_messages(worker.err())[-8:] == [INIT_BEGIN] * 8
    assert _titles(worker) == sorted(f"sglang::scheduler_TP{rank}" for rank in range(8, 16))
    assert _refused(worker)


def test_a_world_that_does_not_add_up_hangs(launcher: Launcher, model_dir: Path) -> None:
    """``--tp 3 --nnodes 2``: one rank per node, TP rank 2 is never started; SGLang accepts it."""
    dist_port = free_port()
    nodes = [_start_node(launcher, model_dir, rank, dist_port, tp=3) for rank in (0, 1)]
    for node in nodes:
        node.wait_for(INIT_BEGIN)
    time.sleep(1.5)
    for node in nodes:
        assert node.proc.poll() is None
        assert INIT_END not in node.err()


def test_losing_a_worker_hangs_node_0_and_its_health_fails(
    group: tuple[Running, Running],
) -> None:
    leader, worker = group
    os.killpg(worker.proc.pid, signal.SIGKILL)
    worker.wait()
    time.sleep(0.2)
    status, _ = leader.get("/health")
    assert status == 503
    assert leader.proc.poll() is None
    assert any(
        m.startswith("Health check failed. Server couldn't get a response from detokenizer for")
        for m in log_messages(leader.err())
    )
    assert all(not is_gone(child.pid) for child in leader.children())  # hung, not dead
    request = urllib.request.Request(leader.url("/generate"), data=b"{}", method="POST")  # noqa: S310
    with pytest.raises(TimeoutError):  # a generation never comes back from a hung group
        urllib.request.urlopen(request, timeout=1)  # noqa: S310 - loopback


def test_losing_node_0_leaves_the_worker_hung_but_healthy(
    group: tuple[Running, Running],
) -> None:
    leader, worker = group
    os.killpg(leader.proc.pid, signal.SIGKILL)
    leader.wait()
    time.sleep(0.5)
    assert worker.proc.poll() is None
    assert worker.get("/health")[0] == 200  # the trap: a worker's /health proves nothing
    assert [p.name() for p in worker.children()] == ["sglang::scheduler_TP1"]


def test_sigterm_on_node_0_stops_the_whole_group(group: tuple[Running, Running]) -> None:
    leader, worker = group
    scheduler = worker.children()[0].pid
    os.kill(leader.proc.pid, signal.SIGTERM)
    assert leader.wait() == -signal.SIGKILL  # as single-node: kill_process_tree(include_parent)
    assert worker.wait(5) == 0  # the ShutdownReq broadcast
    assert f"Scheduler or DataParallelController {scheduler} terminated with 0" in log_messages(
        worker.err()
    )


def test_a_0523_worker_ignores_sigterm(group: tuple[Running, Running]) -> None:
    _, worker = group
    os.kill(worker.proc.pid, signal.SIGTERM)
    worker.wait_for(WORKER_SIGTERM)
    time.sleep(0.3)
    assert worker.proc.poll() is None
    assert worker.get("/health")[0] == 200
    os.kill(worker.proc.pid, signal.SIGKILL)
    assert worker.wait() == -signal.SIGKILL


def test_a_0511_group_has_no_shutdown_broadcast_and_workers_die_of_sigterm(
    launcher: Launcher, model_dir: Path
) -> None:
    dist_port = free_port()
    leader = _start_node(launcher, model_dir, 0, dist_port, version="0.5.11")
    worker = _start_node(launcher, model_dir, 1, dist_port, version="0.5.11")
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))

    os.kill(leader.proc.pid, signal.SIGTERM)
    assert leader.wait() == -signal.SIGKILL
    time.sleep(0.5)
    assert worker.proc.poll() is None  # no ShutdownReq before 0.5.14: the worker hangs
    os.kill(worker.proc.pid, signal.SIGTERM)
    assert worker.wait() == -signal.SIGTERM  # a plain process before 0.5.21
    assert "SIGTERM received on node_rank" not in worker.err()


def test_a_failure_knob_strikes_only_its_node(launcher: Launcher, model_dir: Path) -> None:
    dist_port = free_port()
    leader = _start_node(launcher, model_dir, 0, dist_port, ORCH_STANDIN_HEALTH_TIMEOUT_S="0.3")
    worker = _start_node(launcher, model_dir, 1, dist_port, fail="crash-after-ready:0.3")
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))
    assert worker.wait() == -signal.SIGKILL
    assert "Received sigquit from a child process." in worker.err()
    assert "Scheduler hit an exception" not in leader.err()
    assert leader.proc.poll() is None
    leader.wait_for("Uvicorn running on")  # skip-server-warmup: ready is said before the bind
    assert leader.get("/health")[0] == 503


def test_die_after_on_a_worker_kills_that_node_only(launcher: Launcher, model_dir: Path) -> None:
    dist_port = free_port()
    leader = _start_node(launcher, model_dir, 0, dist_port)
    worker = _start_node(launcher, model_dir, 1, dist_port, fail="die-after:1.5")
    assert worker.wait() == 1
    time.sleep(0.3)
    assert leader.proc.poll() is None  # hung, wherever the group was when node 1 went
    assert "Scheduler hit an exception" not in leader.err()


def test_the_dist_init_port_in_use_fails_in_the_tp0_scheduler(model_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = ["--model-path", str(model_dir), "--tp", "2", "--nnodes", "2"]
        args += ["--node-rank", "0", "--dist-init-addr", f"127.0.0.1:{port}"]
        result = run_to_exit("0.5.23", args)
    assert result.returncode == -signal.SIGKILL
    messages = log_messages(result.stderr)
    assert messages.index(INIT_BEGIN) < next(
        i for i, m in enumerate(messages) if m.startswith("Scheduler hit an exception: Traceback")
    )
    assert (
        "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
        f"network address. port: {port}, useIpv6: false, code: -98, name: EADDRINUSE, "
        "message: address already in use"
    ) in result.stderr
    assert "Received sigquit from a child process. It usually means the child failed." in messages


def test_a_port_probe_does_not_disturb_the_rendezvous(launcher: Launcher, model_dir: Path) -> None:
    """orch checks that the rendezvous port is reachable with a bare TCP connect."""
    dist_port = free_port()
    leader = _start_node(launcher, model_dir, 0, dist_port)
    leader.wait_for(INIT_BEGIN)
    for payload in (b"", b"GET / HTTP/1.0\r\n\r\n"):
        with socket.create_connection(("127.0.0.1", dist_port), timeout=2) as probe:
            probe.sendall(payload)
    worker = _start_node(launcher, model_dir, 1, dist_port)
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))
    assert leader.proc.poll() is None
