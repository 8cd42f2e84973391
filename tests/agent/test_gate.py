"""SGLang's gated launch in a launch group: every rank logs that it waits at the gate, the
members tell the coordinator, and the coordinator activates the gate once every global rank is
there (or fails the generation). Ranks run as in tests/agent/test_group.py: in-process
Supervisors over real TCP on 127.0.0.1, their servers small Python programs printing SGLang's
lines; rank 0's also serves a tiny gate (``POST /gate/activate``, as SGLang's world rank 0 does)
and rank 1's learns the activation from it (SGLang broadcasts it over torch.distributed)."""

from __future__ import annotations

import secrets
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.agent.cmd_status import cmd_status
from orchestrator.remote.agent.group.control import ControlLink, greet_coordinator
from orchestrator.remote.agent.group.coordinator_link import GroupCoordinator
from orchestrator.remote.agent.group.failure import GROUP_GATE_UNREACHABLE, GROUP_RENDEZVOUS_TIMEOUT
from orchestrator.remote.agent.group.gate import GateProgress, rank_runs, rendezvous_shortfall
from orchestrator.remote.agent.output import LogSink, OutputWatcher
from orchestrator.remote.agent.spec import GateSpec, GroupSpec, Spec
from orchestrator.remote.agent.states import EXITED, FATAL
from orchestrator.remote.agent.world import RealClock
from tests.agent.test_group import (
    NODES,
    WORKER_READY,
    WORKS,
    GroupPlan,
    Rank,
    Ranks,
    both_ready,
    gone,
    wait_until,
)
from tests.agent.test_supervisor import CONFIG_LINE, READY, _free_port

WORLD = [[0, 1], [2, 3]]  # the global ranks of node-a and node-b: tp 2 x pp 2 over two nodes


def gate_spec(port: int, **changes: Any) -> dict[str, Any]:
    """The spec's ``group.gate`` as orch writes it, with short request timeouts."""
    gate = {
        "port": port,
        "host": "127.0.0.1",
        "world_size": 4,
        "node_ranks": WORLD,
        "timeout_s": 10.0,
        "request_timeout_s": 0.3,
        "attempts": 2,
    }
    gate.update(changes)
    return gate


def logged(message: str, rank: str = "TP0") -> str:
    """A line of the child that prints ``message`` as a record of SGLang's logger."""
    return f"print({f'[2026-11-29 07:42:57 {rank}] {message}'!r})\n"


def waiting(*ranks: int) -> str:
    return "".join(
        logged(f"Gated launch waiting for activation. rank={rank}", f"TP{rank % 2} PP{rank // 2}")
        for rank in ranks
    )


ACTIVATED = logged("Gated launch activated. elapsed=0.42 s")


def gate_server(port: int) -> str:
    """Rank 0's gate as SGLang's: POST /gate/activate, GET /health; and GET /activated, which
    stands for SGLang's broadcast of the activation to the other ranks."""
    return (
        "import http.server, threading\n"
        "activated = threading.Event()\n"
        "class G(http.server.BaseHTTPRequestHandler):\n"
        "    def do_POST(self):\n"
        "        ok = self.path == '/gate/activate'\n"
        "        if ok:\n"
        "            print('fake gate: activation received')\n"
        "            activated.set()\n"
        "        self.send_response(200 if ok else 404); self.end_headers(); self.wfile.write(b'OK')\n"
        "    def do_GET(self):\n"
        "        ok = self.path == '/health' or (self.path == '/activated' and activated.is_set())\n"
        "        self.send_response(200 if ok else 404); self.end_headers()\n"
        "    def log_message(self, *a): pass\n"
        f"g = http.server.ThreadingHTTPServer(('127.0.0.1', {port}), G)\n"
        "threading.Thread(target=g.serve_forever, daemon=True).start()\n"
        + logged(f"Gated launch control server started on 127.0.0.1:{port}")
    )


def await_activation(port: int) -> str:
    """A member's rank waiting for rank 0's gate to open."""
    return (
        "import http.client\n"
        "def gate_open():\n"
        "    try:\n"
        f"        c = http.client.HTTPConnection('127.0.0.1', {port}, timeout=1)\n"
        "        c.request('GET', '/activated')\n"
        "        return c.getresponse().status == 200\n"
        "    except OSError:\n"
        "        return False\n"
        "while not gate_open():\n"
        "    time.sleep(0.02)\n"
    )


def coordinator_program(port: int) -> str:
    """Rank 0: its gate server, its ranks at the gate (one of them still waiting 10 s later),
    then, activated, READY."""
    still = logged("Gated launch still waiting for activation. rank=0 elapsed=10 s")
    return (
        CONFIG_LINE
        + gate_server(port)
        + waiting(0, 1)
        + still
        + waiting(0)
        + "activated.wait()\n"
        + ACTIVATED
        + READY
        + "time.sleep(60)\n"
    )


def member_program(port: int, pause: float = 0.0) -> str:
    """Rank 1: its ranks at the gate (the second ``pause`` s after the first), then, activated,
    its worker line."""
    return (
        CONFIG_LINE
        + waiting(2)
        + f"time.sleep({pause})\n"
        + waiting(3)
        + await_activation(port)
        + ACTIVATED
        + WORKER_READY
        + "time.sleep(60)\n"
    )


STUCK = CONFIG_LINE + "time.sleep(60)\n"  # a node that never reaches the gate (the rendezvous)


def start(ranks: Ranks, rank: int, program: str, start_limit: int = 5, **group: Any) -> Rank:
    """Ranks.start with rank 0's start limit given positionally (the tests vary it)."""
    return ranks.start(rank, program, start_limit=start_limit, **group)


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[Ranks]:
    made = Ranks(tmp_path)
    yield made
    made.stop_all()


def failures(rank: Rank) -> list[dict[str, Any]]:
    return [event for event in rank.events() if event["event"] == "group-failure"]


# -- the vocabulary and the spec ------------------------------------------------------------------


def test_the_watcher_counts_each_rank_logged_waiting_at_the_gate_once(tmp_path: Path) -> None:
    watcher = OutputWatcher(LogSink(str(tmp_path / "server.log"), 1 << 20, 1))
    watcher.feed(b"[2026-11-29 07:42:57 TP1] Gated launch waiting for activation. rank=1\n")
    watcher.feed(b"[2026-11-29 07:42:57 TP0 PP1] Gated launch waiting for act")  # split
    watcher.feed(b"ivation. rank=3\r\n")
    watcher.feed(b"[2026-11-29 07:43:07 TP1] Gated launch still waiting for activation. ")
    watcher.feed(b"rank=5 elapsed=10 s\n")
    watcher.feed(b"Gated launch waiting for activation. rank=6\n")  # printed, not logged
    watcher.feed(b"[2026-11-29 07:43:07 TP1] Gated launch waiting for activation. rank=1\n")
    assert watcher.gate_waiting == frozenset({1, 3})
    before = watcher.gate_activated
    watcher.feed(b"[2026-11-29 07:43:08 TP1] Gated launch activated. elapsed=11.02 s\n")
    assert (before, watcher.gate_activated) == (False, True)
    watcher.close()


def test_the_gate_spec_reads_orchs_keys_and_refuses_ranks_that_do_not_add_up() -> None:
    plan = GroupPlan(20100, "ab" * 32)
    spec = Spec.from_json(plan.spec(1, "", gate=gate_spec(20050, host="0.0.0.0")))
    assert spec.group is not None
    gate = spec.group.gate
    assert gate is not None
    assert (gate.url, gate.world_size, gate.node_ranks) == (
        "http://127.0.0.1:20050/gate/activate",
        4,
        ((0, 1), (2, 3)),
    )
    ipv6 = GateSpec.from_json(gate_spec(20050, host="::"), 2)
    assert ipv6.url == "http://[::1]:20050/gate/activate"
    ungated = Spec.from_json(plan.spec(1, "")).group
    assert ungated is not None
    assert ungated.gate is None
    for bad in (
        {"node_ranks": [[0, 1]]},  # one node's for two
        {"node_ranks": [[0, 1], [1, 2]]},  # rank 1 twice, rank 3 nowhere
        {"world_size": 8},
        {"port": 70000},
        {"timeout_s": 0},
    ):
        document = plan.spec(1, "", gate=gate_spec(20050))
        document["group"]["gate"].update(bad)
        with pytest.raises(ValueError, match=r"group\.gate"):
            Spec.from_json(document)


def test_the_rendezvous_shortfall_names_what_each_node_lacks_first_node_short_first() -> None:
    group = GroupSpec.from_json(
        GroupPlan(20100, "ab" * 32).spec(0, "", nodes=["node-a", "node-b", "node-c"], nnodes=3)[
            "group"
        ]
    )
    spread = ((0, 1, 2, 3, 4, 5, 6, 7), (8, 9, 10, 11, 12, 13, 14, 15), (16, 17))
    gate = GateSpec(20050, "127.0.0.1", 18, spread, timeout_s=300.0)
    progress = GateProgress.begin(gate, 1, 0.0).arrive(0, range(8)).arrive(2, [16])
    assert not progress.complete
    assert rendezvous_shortfall(progress, group) == (
        1,
        "the group did not rendezvous within 300 s: rank 1 (node-b) has none of its ranks 8-15 "
        "at the gate; rank 2 (node-c) lacks 17 of its ranks 16-17 at the gate; "
        "rank 0 (node-a) has all",
    )
    rank0_short = GateProgress.begin(gate, 1, 0.0).arrive(0, [0, 1, 4]).arrive(1, spread[1])
    rank, message = rendezvous_shortfall(rank0_short.arrive(2, spread[2]), group)
    assert rank == 0
    assert message == (
        "the group did not rendezvous within 300 s: rank 0 (node-a) lacks 2-3, 5-7 of its ranks "
        "0-7 at the gate; rank 1 (node-b) has all; rank 2 (node-c) has all"
    )
    assert rank_runs([3, 0, 2, 9]) == "0, 2-3, 9"


def test_the_coordinator_counts_only_this_generations_gate_reports() -> None:
    plan = GroupPlan(_free_port(), secrets.token_hex(32))
    gate = gate_spec(_free_port())
    group = GroupSpec.from_json(plan.spec(0, "", gate=gate, lost_after_s=10)["group"])
    coordinator = GroupCoordinator(
        group, RealClock(), on_change=lambda: None, on_event=lambda kind, **details: None
    )
    assert coordinator.open() is None
    member = GroupSpec.from_json(plan.spec(1, "", gate=gate, lost_after_s=10)["group"])
    link = ControlLink(
        socket.create_connection(("127.0.0.1", plan.control_port), timeout=5), member
    )
    try:
        assert greet_coordinator(link) == 0
        wait_until("rank 1 joined", lambda: not coordinator.missing())
        assert coordinator.gate() is None  # no generation yet
        assert coordinator.begin() == 1
        link.send("gate", generation=1, ranks=[2])
        wait_until("rank 2 at the gate", lambda: coordinator.gate_view()["waiting"] == [2])  # type: ignore[index]
        coordinator.finish()
        assert coordinator.begin() == 2
        link.send("gate", generation=1, ranks=[3])  # the old generation's: in flight, ignored
        link.send("gate", generation=2, ranks=[3, 99, "2", True])  # only ranks of the world
        wait_until("rank 3 at the gate", lambda: coordinator.gate_view()["waiting"] == [3])  # type: ignore[index]
        view = coordinator.gate_view()
        assert view is not None
        assert (view["generation"], view["status"], view["by_node"], view["missing"]) == (
            2,
            "waiting",
            {"0": [], "1": [3]},
            [0, 1, 2],
        )
    finally:
        link.close()
        coordinator.close()


# -- the group at the gate --------------------------------------------------------------------------


def test_the_gate_opens_once_when_every_rank_of_every_node_waits_then_both_are_ready(
    ranks: Ranks,
) -> None:
    port = _free_port()
    coordinator = start(ranks, 0, coordinator_program(port), gate=gate_spec(port))
    member = start(ranks, 1, member_program(port, pause=0.5), gate=gate_spec(port))
    wait_until("both ranks READY", lambda: both_ready(coordinator, member))
    rank0, rank1 = coordinator.state, member.state
    gate = rank0["group"]["gate"]
    assert (gate["generation"], gate["status"], gate["waiting"], gate["missing"]) == (
        1,
        "activated",
        [0, 1, 2, 3],
        [],
    )
    assert gate["by_node"] == {"0": [0, 1], "1": [2, 3]}
    assert gate["activated_at"] is not None
    assert gate["activated_after_s"] >= 0.5  # not before rank 3 arrived
    activations = [e for e in coordinator.events() if e["event"] == "group-gate-activated"]
    assert len(activations) == 1
    assert activations[0]["generation"] == 1
    assert activations[0]["elapsed_s"] == pytest.approx(gate["activated_after_s"], abs=1e-3)
    assert activations[0]["url"] == f"http://127.0.0.1:{port}/gate/activate"
    assert Path(rank0["log"]).read_text().count("fake gate: activation received") == 1
    wait_until("rank 1 shows its gate", lambda: member.state["group"]["gate"]["activated"])
    assert member.state["group"]["gate"] == {
        "generation": 1,
        "ranks": [2, 3],
        "waiting": [2, 3],
        "activated": True,
    }
    assert rank1["group"]["failure"] is None
    status = cmd_status(coordinator.supervisor.paths.root)  # what `agent status` shows
    assert status["group"]["gate"]["status"] == "activated"


@pytest.mark.parametrize("start_limit", [1, 5], ids=["start-limit-hit", "restarted"])
def test_a_node_never_at_the_gate_is_a_rendezvous_timeout_naming_it(
    ranks: Ranks, start_limit: int
) -> None:
    port = _free_port()
    gate = gate_spec(port, timeout_s=1.0)
    coordinator = start(ranks, 0, coordinator_program(port), start_limit, gate=gate)
    member = start(ranks, 1, STUCK, gate=gate)
    wait_until("a failure", lambda: bool(failures(coordinator)), timeout=20)
    why = (
        "the group did not rendezvous within 1 s: rank 1 (node-b) has none of its ranks 2-3 at "
        "the gate; rank 0 (node-a) has all"
    )
    failure = failures(coordinator)[0]
    assert (failure["rank"], failure["node"], failure["cls"], failure["generation"]) == (
        1,
        "node-b",
        GROUP_RENDEZVOUS_TIMEOUT,
        1,
    )
    assert failure["message"] == why
    first = coordinator.first_start()
    if start_limit == 1:
        rank0 = coordinator.ended()
        assert rank0["state"] == FATAL
        assert rank0["message"] == (
            f"group-rendezvous-timeout: start limit hit (1 starts within 60 s): {why}"
        )
        assert rank0["last_exit"]["class"] == GROUP_RENDEZVOUS_TIMEOUT
        assert rank0["group"]["gate"]["status"] == "timed-out"
        assert rank0["group"]["gate"]["missing"] == [2, 3]
        rank1 = member.ended()
        assert rank1["state"] == EXITED  # shut down by its coordinator
    else:  # the restart policy applies: the group starts again whole, the gate waits anew
        wait_until("generation 2", lambda: coordinator.state["group"]["generation"] == 2)
        rank0 = coordinator.state
        assert rank0["restarts"] == 1
        assert rank0["group"]["failure"]["cls"] == GROUP_RENDEZVOUS_TIMEOUT
        wait_until(
            "rank 0 at generation 2's gate",
            lambda: coordinator.state["group"]["gate"]["waiting"] == [0, 1],
        )
        assert coordinator.state["group"]["gate"]["generation"] == 2
        wait_until("rank 1 at generation 2", lambda: member.state["group"]["generation"] == 2)
    assert gone(first)
    members_first = member.first_start()
    wait_until("rank 1's first server gone", lambda: gone(members_first))


@pytest.mark.parametrize("holder", ["silent", "none"])
def test_a_gate_port_that_does_not_answer_is_gate_unreachable(ranks: Ranks, holder: str) -> None:
    port = _free_port()
    gate = gate_spec(port)
    # SGLang's gate server could not bind its port: another program holds it and says nothing,
    # or nothing listens at all. Its ranks wait at the gate all the same.
    rank0_program = CONFIG_LINE + waiting(0, 1) + "time.sleep(60)\n"
    with socket.socket() as squatter:
        if holder == "silent":
            squatter.bind(("127.0.0.1", port))
            squatter.listen(8)  # connections complete in the backlog, nothing ever answers
        coordinator = start(ranks, 0, rank0_program, 1, gate=gate)
        member = start(ranks, 1, member_program(port), gate=gate)
        rank0 = coordinator.ended()
    url = f"http://127.0.0.1:{port}/gate/activate"
    error = "timed out after 0.3 s" if holder == "silent" else "connection refused"
    why = (
        f"rank 0 (node-a): could not activate the gated launch at {url}: {error} (2 attempts; "
        f"another program may hold port {port}, leaving SGLang's gate server unbound)"
    )
    assert rank0["state"] == FATAL
    assert rank0["group"]["failure"]["cls"] == GROUP_GATE_UNREACHABLE
    assert rank0["group"]["failure"]["message"] == why
    assert (
        rank0["message"] == f"group-gate-unreachable: start limit hit (1 starts within 60 s): {why}"
    )
    assert rank0["group"]["gate"]["status"] == "unreachable"
    assert rank0["group"]["gate"]["waiting"] == [0, 1, 2, 3]
    assert member.ended()["state"] == EXITED


def test_without_a_gate_in_the_spec_the_group_is_as_before(ranks: Ranks) -> None:
    # a server that logs the waiting lines all the same: nothing counts them, nothing waits
    coordinator = start(ranks, 0, CONFIG_LINE + waiting(0, 1) + READY + "time.sleep(60)\n")
    member = start(ranks, 1, WORKS)
    wait_until("both ranks READY", lambda: both_ready(coordinator, member))
    assert "gate" not in coordinator.state["group"]
    assert "gate" not in member.state["group"]
    kinds = {event["event"] for event in coordinator.events()}
    assert not [kind for kind in kinds if kind.startswith("group-gate")]
    assert coordinator.state["group"]["nodes"] == NODES
