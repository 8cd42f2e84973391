"""Multi-node launch groups over a real OpenSSH sshd on 127.0.0.1: two "nodes" are two host
entries for this machine with their own workdirs and ports, and the SGLang stand-in (NOT SGLang)
behaves as SGLang's ranks do (rank 0 serves the rendezvous and waits for every rank, workers log
the dummy-health line, a dead peer makes the others hang). The supervisors coordinate over the
control port for real; the tests look at the processes with psutil."""

from __future__ import annotations

import os
import signal
import socket
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.errors import ExitCode
from tests.e2e.conftest import MODEL, STANDIN, Workspace, add_host, free_port
from tests.e2e.test_ssh_up import processes_of_run, wait_for


def group_profile(
    space: Workspace,
    name: str,
    *,
    nodes: tuple[str, ...] = ("box", "node-b"),
    tp: int = 2,
    env: dict[str, str] | None = None,
    rank0_address: str | None = None,
    restart: dict[str, Any] | None = None,
) -> str:
    """A group of stand-in ranks on this machine: each node its own --port."""
    first = {"host": nodes[0]}
    if rank0_address is not None:
        first["address"] = rank0_address
    document = {
        "sglang": "0.5.23",
        "model": {"path": str(MODEL), "served_model_name": "qwen-test"},
        "port": free_port(),
        "bind": "127.0.0.1",
        "env": {
            "PYTHONPATH": str(STANDIN),
            "ORCH_STANDIN_VERSION": "0.5.23",
            "ORCH_STANDIN_LOAD_S": "0.2",
            **(env or {}),
        },
        "args": {"skip_server_warmup": True, "tp_size": tp},
        "health": {"startup_timeout_s": 60, "interval_s": 0.5},
        "restart": restart
        or {"mode": "on-failure", "delay_s": 0.5, "max_delay_s": 1, "start_limit": 5},
        "stop_timeout_s": 3,
        "group": {
            "nodes": [first] + [{"host": host, "port": free_port()} for host in nodes[1:]],
            "rendezvous_port": free_port(),
            "control_port": free_port(),
            # a free one too: the default (rendezvous + 50) may be any process's on this machine
            "gate_port": free_port(),
            "join_timeout_s": 20,
        },
    }
    (space.profiles / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return name


@pytest.fixture
def group_space(ssh_workspace: Workspace, tmp_path: Path) -> Workspace:
    """``box`` and ``node-b``: this machine over SSH twice, each node its own workdir."""
    add_host(ssh_workspace, "node-b", workdir=str(tmp_path / "node-b-workdir"))
    return ssh_workspace


def rows(space: Workspace, name: str) -> list[dict[str, Any]]:
    outcome = space.orch("status", name, "--json")
    assert outcome.code == ExitCode.OK, outcome.err
    found = outcome.json()
    assert isinstance(found, list)
    return found


def alive_pids(*run_ids: str) -> list[int]:
    return [process.pid for run_id in run_ids for process in processes_of_run(run_id)]


def test_group_reaches_ready_and_down_leaves_nothing_on_either_node(
    group_space: Workspace,
) -> None:
    name = group_profile(group_space, "pair")
    up = group_space.orch("up", name)
    assert up.code == ExitCode.OK, up.out + up.err
    assert "rendezvous 127.0.0.1:" in up.out
    assert "reached from every node" in up.out
    assert "2 nodes READY" in up.out

    ranks = rows(group_space, name)
    assert [(row["rank"], row["host"], row["state"]) for row in ranks] == [
        (0, "box", "READY"),
        (1, "node-b", "READY"),
    ]
    gate = ranks[0]["group"]["gate"]  # SGLang 0.5.23's gated launch, activated by rank 0's agent
    assert (gate["status"], gate["missing"], gate["world_size"]) == ("activated", [], 2)
    worker = ranks[1]
    log = Path(worker["log"]).read_text()
    assert "Gated launch activated" in log
    assert "Dummy health check server started in background thread" in log
    assert "TP1" in log  # rank 1 runs TP rank 1 of --tp 2 over 2 nodes
    text = group_space.orch("status", name).out
    assert f"{name} r0" in text
    assert f"{name} r1" in text
    assert "gated launch activated" in text

    logs = group_space.orch("logs", name, "--node", "1", "-n", "50")
    assert logs.code == ExitCode.OK
    assert "Dummy health check server started" in logs.out
    both = group_space.orch("logs", name, "--node", "all", "-n", "50")
    assert "r0| " in both.out
    assert "r1| " in both.out

    diff = group_space.orch("diff-effective", name, "--json")
    assert diff.code == ExitCode.OK, diff.out + diff.err
    report = diff.json()
    assert [rank["node"] for rank in report["ranks"]] == ["box", "node-b"]
    node_rank = {
        rank["node"]: next(f for f in rank["fields"] if f["field"] == "node_rank")
        for rank in report["ranks"]
    }
    assert node_rank["node-b"]["received"] == 1
    assert node_rank["node-b"]["verdict"] == "ok"
    one = group_space.orch("diff-effective", name, "--json", "--node", "1")
    assert one.code == ExitCode.OK, one.out + one.err
    assert next(f for f in one.json()["fields"] if f["field"] == "node_rank")["received"] == 1

    # Without SSH, as behind a port-forward: rank 0 answers /server_info, rank 1 only /health
    written = yaml.safe_load((group_space.profiles / f"{name}.yaml").read_text())
    leader_url = f"http://127.0.0.1:{written['port']}"
    worker_url = f"http://127.0.0.1:{written['group']['nodes'][1]['port']}"
    asked = group_space.orch("diff-effective", name, "--json", "--url", leader_url)
    assert asked.code == ExitCode.OK, asked.out + asked.err
    assert asked.json()["found_by"] == "url"
    as_rank1 = group_space.orch(
        "diff-effective", name, "--json", "--url", leader_url, "--node", "1"
    )
    assert as_rank1.code == ExitCode.DRIFT  # rank 0's server is not what rank 1's profile says
    wrong = next(f for f in as_rank1.json()["fields"] if f["field"] == "node_rank")
    assert (wrong["profile"], wrong["resolved"]) == (1, 0)
    dummy = group_space.orch("diff-effective", name, "--url", worker_url)
    assert dummy.code == ExitCode.NOT_RESOLVED
    assert "point --url at rank 0" in dummy.err

    run_ids = [row["run_id"] for row in ranks]
    assert alive_pids(*run_ids)
    down = group_space.orch("down", name)
    assert down.code == ExitCode.OK, down.err
    assert "rank 0 (box)" in down.out
    assert "rank 1 (node-b)" in down.out
    wait_for("nothing of the group left on either node", lambda: not alive_pids(*run_ids))
    assert [row["state"] for row in rows(group_space, name)] == ["EXITED", "EXITED"]


def test_group_sigkill_of_rank1_restarts_the_whole_group(group_space: Workspace) -> None:
    name = group_profile(group_space, "gang")
    assert group_space.orch("up", name).code == ExitCode.OK
    before = rows(group_space, name)
    os.kill(before[1]["pid"], signal.SIGKILL)

    def restarted() -> list[dict[str, Any]] | None:
        now = rows(group_space, name)
        again = all(
            row["state"] == "READY" and row["run_id"] != old["run_id"]
            for row, old in zip(now, before, strict=True)
        )
        return now if again else None

    after = wait_for("both ranks restarted together and READY", restarted, timeout=60)
    assert after[0]["restarts"] == 1  # rank 0 was not dead: the group took it down and up
    failure = after[0]["group"]["failure"]
    assert (failure["rank"], failure["node"], failure["cls"]) == (1, "node-b", "killed")
    # the first group start's processes are gone on both nodes
    wait_for("the first start's processes gone", lambda: not alive_pids(before[0]["run_id"]))
    assert not alive_pids(before[1]["run_id"])


def test_group_up_again_attaches_and_a_rank_dying_in_startup_is_named(
    group_space: Workspace,
) -> None:
    """The same launch already up is followed, not started twice. A rank that dies while the
    group starts fails `up` with the verdict of rank 0's supervisor, naming rank 1."""
    name = group_profile(group_space, "again")
    assert group_space.orch("up", name).code == ExitCode.OK
    first = rows(group_space, name)
    again = group_space.orch("up", name)
    assert again.code == ExitCode.OK, again.err
    assert [row["run_id"] for row in rows(group_space, name)] == [r["run_id"] for r in first]
    # another launch of it is refused while the group runs, unless --replace
    path = group_space.profiles / f"{name}.yaml"
    document = yaml.safe_load(path.read_text())
    document["env"]["ORCH_TEST_CHANGED"] = "1"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    refused = group_space.orch("up", name)
    assert refused.code == ExitCode.CONFLICT, refused.err
    assert "rank 0 (box): READY" in refused.err
    assert "rank 1 (node-b): READY" in refused.err
    replaced = group_space.orch("up", name, "--replace")
    assert replaced.code == ExitCode.OK, replaced.out + replaced.err
    assert "stopping the running group (--replace)" in replaced.out
    now = rows(group_space, name)
    assert all(row["run_id"] != old["run_id"] for row, old in zip(now, first, strict=True))
    assert not alive_pids(*(row["run_id"] for row in first))
    assert group_space.orch("down", name).code == ExitCode.OK

    dying = group_profile(
        group_space,
        "dying",
        restart={"mode": "no"},
        env={"ORCH_STANDIN_LOAD_S": "5"},
    )
    path = group_space.profiles / f"{dying}.yaml"
    document = yaml.safe_load(path.read_text())
    document["group"]["nodes"][1]["env"] = {"ORCH_STANDIN_FAIL": "die-after:1"}
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    up = group_space.orch("up", dying)
    assert up.code != ExitCode.OK, up.out
    assert "rank 1 (node-b)" in up.err
    assert "last lines of rank 1's log (node-b)" in up.err  # where the failure is, not rank 0's
    ranks = rows(group_space, dying)
    assert ranks[0]["state"] == "EXITED"
    assert ranks[0]["group"]["failure"]["rank"] == 1
    wait_for("rank 0's server stopped with the group", lambda: not alive_pids(ranks[0]["run_id"]))


def test_group_unreachable_rendezvous_is_refused_before_launch(group_space: Workspace) -> None:
    """Rank 0 declared at an address the other node cannot reach: refused at preflight, with
    the node named, and nothing started on either node."""
    name = group_profile(group_space, "astray", rank0_address="192.0.2.1")  # TEST-NET-1
    up = group_space.orch("up", name)
    assert up.code == ExitCode.PREFLIGHT, up.out + up.err
    assert "rank 1 (node-b) cannot reach rank 0's rendezvous port 192.0.2.1:" in up.err
    assert "group.nodes[0].address" in up.err
    assert [row["state"] for row in rows(group_space, name)] == [None, None]


def test_group_gate_port_in_use_is_refused_before_launch(group_space: Workspace) -> None:
    """SGLang's gate server binds rank 0's --host:gate_port in a thread: taken, it only logs and
    every rank waits at the gate. orch checks the port can be opened before anything starts."""
    name = group_profile(group_space, "gated")
    path = group_space.profiles / f"{name}.yaml"
    document = yaml.safe_load(path.read_text())
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        document["group"]["gate_port"] = holder.getsockname()[1]
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        up = group_space.orch("up", name)
    assert up.code == ExitCode.PREFLIGHT, up.out + up.err
    assert f"the gated launch port {document['group']['gate_port']} on box cannot be opened" in (
        up.err
    )
    assert [row["state"] for row in rows(group_space, name)] == [None, None]


def test_group_wrong_rank_count_is_refused_before_anything_runs(group_space: Workspace) -> None:
    name = group_profile(group_space, "uneven", tp=3)
    up = group_space.orch("up", name)
    assert up.code == ExitCode.CONFIG, up.err
    assert "cannot be split evenly over 2 nodes" in up.err
    assert not (group_space.workdir / name).exists()


def test_group_env_drift_between_nodes_is_refused_with_the_difference(
    group_space: Workspace, tmp_path: Path
) -> None:
    """node-b's python exports NCCL_IB_DISABLE=1 (as a .bashrc would): that node's server would
    inherit it, the other's not. Refused before launch, the value on each node shown."""
    wrapper = tmp_path / "python-with-env"
    wrapper.write_text(f'#!/bin/sh\nNCCL_IB_DISABLE=1 exec {sys.executable} "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IXUSR)
    add_host(
        group_space,
        "node-b",
        workdir=str(tmp_path / "node-b-workdir"),
        python=str(wrapper),
    )
    name = group_profile(group_space, "drift")
    up = group_space.orch("up", name)
    assert up.code == ExitCode.PREFLIGHT, up.out + up.err
    assert (
        "the nodes of drift differ: env NCCL_IB_DISABLE: box (unset), node-b NCCL_IB_DISABLE=1"
        in (up.err)
    )
    assert [row["state"] for row in rows(group_space, name)] == [None, None]
