"""A launch group: one SGLang server over N nodes, started, checked, stopped and restarted
together.

``up``: every node's deployment state; preflight on every node (in parallel: each node is its own
round trips); the nodes against each other (``orchestrator.fleet.groups``); rank 0's rendezvous and
control ports reached from every other node through a short-lived listener (not the server);
SGLang's plan (rank 0's command); then every rank's supervisor is started at once (rank 0's
coordinates the others over the control port: ``remote/agent/group``); rank 0's startup is followed,
then every other rank to READY.

``down``: rank 0 first (SGLang's rank 0 drains and broadcasts the shutdown, its supervisor tells
the others'), then every other node's supervisor, so that nothing of the group is left anywhere.
"""

from __future__ import annotations

import dataclasses
import queue
import secrets
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator import render
from orchestrator.commands import ownership, planning, preflight
from orchestrator.commands.context import Context, HostAgent, Launch, Member, UpOptions
from orchestrator.commands.effective import verify_ready
from orchestrator.commands.events import (
    Attached,
    LogChunk,
    Outcome,
    RunEnded,
    Started,
    Step,
    Stopped,
    Stopping,
    UpEvent,
    Warn,
)
from orchestrator.commands.fanout import parallel
from orchestrator.commands.follow import (
    POLL_S,
    Clock,
    StartupLog,
    ended_class,
    failure_outcome,
    follow,
)
from orchestrator.commands.logs import LogTail, logs
from orchestrator.errors import Conflict, ExitCode, PreflightError, SupervisorError
from orchestrator.fleet import groups
from orchestrator.fleet.protocol.reach import ProbeAnswer
from orchestrator.fleet.protocol.start import build_spec, health_host
from orchestrator.fleet.protocol.stop import StopReply
from orchestrator.model import Group, Profile, RunState
from orchestrator.remote.agent.states import READY

REACH_TIMEOUT_S = 5.0  # one TCP connect between two nodes of a group: seconds, not minutes
LISTEN_S = 60.0  # the probe listener's life at most; it ends once every node has reached it
GATE_CHECK_S = 0.2  # the gate port is only bound to see that it can be: then freed at once
MEMBER_STOP_GRACE_S = 5.0  # SIGTERM -> SIGKILL on ranks >= 1 (SGLang >= 0.5.21 ignores SIGTERM)


@dataclass(frozen=True)
class Node:
    """One rank of the launch: its member (its profile as its node runs it, its command), its
    agent."""

    member: Member
    agent: HostAgent

    @property
    def profile(self) -> Profile:
        return self.member.profile

    @property
    def rank(self) -> int:
        return self.member.rank

    @property
    def name(self) -> str:
        return f"rank {self.rank} ({self.profile.host.name})"


def nodes_of(ctx: Context, launch: Launch) -> list[Node]:
    """Every rank's node, its connection opened (in parallel)."""

    def open_node(member: Member) -> Node:
        return Node(member, ctx.agent(member.profile))

    return parallel(open_node, launch.members)


def _group(launch: Launch) -> Group:
    group = launch.profile.group
    if group is None:
        raise ValueError(f"{launch.profile.name} is not a launch group")
    return group


# -- up ------------------------------------------------------------------------------------------


def up(ctx: Context, launch: Launch, options: UpOptions) -> Iterator[UpEvent]:
    """Preflight every node, start every rank, follow the group to READY; the last event is an
    Outcome."""
    profile = launch.profile
    group = _group(launch)
    yield Step(
        f"{profile.name}: one server over {group.nnodes} nodes, rendezvous {group.rendezvous}, "
        f"control port {group.control_port}"
    )
    nodes = nodes_of(ctx, launch)
    for node in nodes:
        host = node.profile.host
        where = "this machine" if host.is_local else f"ssh {host.address}"
        workdir = node.agent.deployment.dir
        yield Step(f"rank {node.rank} on {host.name} ({where}), workdir {workdir}")

    states = parallel(lambda node: node.agent.status(), nodes)
    for node, state in zip(nodes, states, strict=True):
        if state.deployed:
            note = ownership.check(
                node.profile, state, ctx.origin(), "up", take_over=options.take_over
            )
            if note is not None:
                yield Step(f"rank {node.rank}: {note}")
    running = [(node, state) for node, state in zip(nodes, states, strict=True) if _holds(state)]
    if running:
        everyone_same = len(running) == len(nodes) and all(
            state.alive and state.launch_digest == launch.digest for _, state in running
        )
        if everyone_same:
            yield Attached(states[0])
            yield from _follow(ctx, launch, nodes, states[0])
            return
        if not options.replace:
            names = ", ".join(
                f"{node.name}: {state.state}, launch {state.launch_digest}"
                for node, state in running
            )
            raise Conflict(
                f"{profile.name} already runs ({names}); this launch is {launch.digest}",
                "orch up --replace stops the whole group first; orch status shows what runs",
            )
    for node, state in zip(nodes, states, strict=True):
        if state.stale and not _holds(state):
            yield Warn(f"{node.name}: the previous supervisor died without an end; sweeping")
            node.agent.stop(node.profile.stop_timeout_s)

    # Every node checked before anything starts: one failing node fails the group, by name.
    facts = parallel(
        lambda node: node.agent.probe(
            node.profile.port, profile.model.path or None, profile.bind, node.member.env
        ),
        nodes,
    )
    replacing = {node.rank: state for node, state in running}
    for node, host_facts in zip(nodes, facts, strict=True):
        launch = yield from preflight.check(
            launch, host_facts, ctx.environ, replacing=replacing.get(node.rank), rank=node.rank
        )
    nodes = [dataclasses.replace(node, member=launch.members[node.rank]) for node in nodes]
    differences = groups.compare_nodes(
        [node.profile.host.name for node in nodes], facts, groups.declared_env(profile)
    )
    if differences:
        for difference in differences[1:]:
            yield Warn(difference.text)
        first = differences[0]
        raise PreflightError(
            f"the nodes of {profile.name} differ: {first.text}"
            + (f" (and {len(differences) - 1} more above)" if len(differences) > 1 else ""),
            first.hint,
        )
    yield Step(
        f"{group.nnodes} nodes agree: SGLang {facts[0].sglang_version}, python {facts[0].python}"
    )
    yield from _check_reachable(nodes, group, bool(running))

    if options.check_plan:
        yield from planning.gate(
            ctx, launch, force=options.force, replacing=bool(running), cache=options.plan_cache
        )
    if running:
        yield Step(f"stopping the running group (--replace): {len(running)} node(s)")
        stop_group(nodes, profile.name)

    key = secrets.token_hex(32)  # the supervisors' control messages: spec.json is 0600
    meta = launch.meta(ctx.origin())

    def start(node: Node) -> Any:
        spec = build_spec(
            node.profile,
            node.member.argv,
            node.member.env,
            meta,
            group=group_spec(launch, node.rank, key),
        )
        return node.agent.start(spec, render.launcher_script(node.member.command))

    replies = parallel(start, nodes)
    refused = [(node, reply) for node, reply in zip(nodes, replies, strict=True) if not reply.ok]
    if refused:
        started = [node for node, reply in zip(nodes, replies, strict=True) if reply.ok]
        stop_group(started, profile.name)
        node, reply = refused[0]
        raise Conflict(
            f"{node.name}: {reply.reason}",
            f"another orch up got there first: orch status {profile.name}",
        )
    for node, reply in zip(nodes, replies, strict=True):
        state = reply.state
        if state is not None and state.pid is not None:
            yield Started(f"{state.run_id} ({node.name})", state.pid, state.log or "")
    first = replies[0].state
    if first is None:
        raise SupervisorError(
            f"the agent of rank 0 on {nodes[0].profile.host.name} started without a state",
            f"orch status {profile.name}; orch down {profile.name}",
        )
    yield from _follow(ctx, launch, nodes, first)


def _holds(state: RunState) -> bool:
    """A deployment with a server that is ours to stop before another launch."""
    return state.deployed and (state.alive or state.unsupervised)


def group_spec(launch: Launch, rank: int, key: str) -> dict[str, Any]:
    """The ``group`` part of rank ``rank``'s spec (the agent's Spec.from_json reads it)."""
    group = _group(launch)
    spec: dict[str, Any] = {
        "id": launch.digest,
        "rank": rank,
        "nnodes": group.nnodes,
        "nodes": [node.host.name for node in group.nodes],
        "control_host": group.rendezvous_host,
        "control_bind": "0.0.0.0",  # noqa: S104 - the other nodes connect from elsewhere
        "control_port": group.control_port,
        "key": key,
        "join_timeout_s": group.join_timeout_s,
        "member_stop_grace_s": MEMBER_STOP_GRACE_S,
    }
    if group.active_gate_port is not None:
        profile = launch.profile
        tp, pp = profile.parallel_sizes
        spec["gate"] = {
            "port": group.active_gate_port,
            "host": health_host(profile.bind),
            "world_size": tp * pp,
            "node_ranks": groups.node_ranks(tp, pp, group.nnodes),
            "timeout_s": group.join_timeout_s,
        }
    return spec


def _check_reachable(nodes: Sequence[Node], group: Group, replacing: bool) -> Iterator[UpEvent]:
    """Rank 0's rendezvous port (torch's TCPStore) and control port (its supervisor) reached
    from every other node, through a listener that lives only for the check: a wrong address,
    a firewall or a wrong NIC fail here, not as a silent hang at ``Init torch distributed
    begin``. A group being replaced holds these ports: it is trusted to have reached them."""
    if replacing:
        return
    leader, others = nodes[0], nodes[1:]
    host = group.rendezvous_host
    for what, port in (("rendezvous", group.rendezvous_port), ("control", group.control_port)):
        token = secrets.token_hex(8)
        opened = leader.agent.listen("0.0.0.0", port, token, LISTEN_S, expect=len(others))  # noqa: S104
        if not opened.ok:
            raise PreflightError(
                f"the {what} port {port} on {leader.profile.host.name} cannot be opened: "
                f"{opened.reason}",
                "stop what holds it, or choose another group."
                + ("rendezvous_port" if what == "rendezvous" else "control_port"),
            )

        def reach(node: Node, port: int = port, token: str = token) -> ProbeAnswer:
            return node.agent.reach(host, port, token, REACH_TIMEOUT_S)

        answers = parallel(reach, others)
        slowest = 0.0
        for node, answer in zip(others, answers, strict=True):
            if not answer.ok:
                raise PreflightError(
                    f"{node.name} cannot reach rank 0's {what} port {host}:{port}: {answer.reason}",
                    f"open TCP {port} from {node.profile.host.name} to "
                    f"{leader.profile.host.name}, or set group.nodes[0].address to the address "
                    "the other nodes reach it at",
                )
            slowest = max(slowest, answer.connect_ms or 0.0)
        yield Step(f"{what} {host}:{port} reached from every node (slowest {slowest:.1f} ms)")
    gate = group.active_gate_port
    if gate is not None:  # rank 0's scheduler binds it on --host once the rendezvous is done
        bind = leader.profile.bind
        opened = leader.agent.listen(bind, gate, secrets.token_hex(8), GATE_CHECK_S, expect=0)
        if not opened.ok:
            raise PreflightError(
                f"the gated launch port {gate} on {leader.profile.host.name} cannot be opened: "
                f"{opened.reason}",
                "SGLang's gate server would fail to bind and every rank wait at the gate: "
                "stop what holds it, or choose another group.gate_port",
            )


def _follow(
    ctx: Context, launch: Launch, nodes: Sequence[Node], first: RunState
) -> Iterator[UpEvent]:
    """Rank 0's startup, streamed as a single server's; then every other rank to READY. The
    group's verdict is rank 0's supervisor's: it names the rank whose end took the group down."""
    leader = nodes[0]
    startup = StartupLog()
    clock = Clock(ctx.clock, ctx.sleep)
    for event in follow(leader.agent, first, launch.profile, clock, startup):
        if not isinstance(event, Outcome):
            yield event
            continue
        if not event.ok:
            yield _with_failed_rank_tail(nodes, _named(event), ctx.sleep)
            return
        outcome = _members_ready(ctx, launch, nodes, event)
        if not outcome.ok:
            yield outcome
            return
        yield from verify_ready(ctx, launch, outcome)
        return


def _named(outcome: Outcome) -> Outcome:
    """A group's failure outcome, with the failed rank's own words when the coordinator has
    them (its message already names the rank and node)."""
    view = outcome.state.group
    if view is None or view.failure is None or view.failure.message in outcome.summary:
        return outcome
    failure = view.failure
    return dataclasses.replace(
        outcome, summary=f"{outcome.summary}; rank {failure.rank} ({failure.node}) {failure.cls}"
    )


TAIL_LINES = 30
FAILURE_WAITS, FAILURE_WAIT_S = 20, 0.05


def _with_failed_rank_tail(
    nodes: Sequence[Node], outcome: Outcome, sleep: Callable[[float], None]
) -> Outcome:
    """The last lines of the rank whose end took the group down, rather than rank 0's (which
    only show it waiting): where a user looks for the cause."""
    view = outcome.state.group
    for _ in range(FAILURE_WAITS):
        if view is not None and view.failure is not None:
            break
        # followed as it happened, the run's end can come a moment before the coordinator
        # names the rank that caused it: ask rank 0's state again
        sleep(FAILURE_WAIT_S)
        current = nodes[0].agent.read_state()
        view = current.group if current is not None else None
    if view is None or view.failure is None or not 0 < view.failure.rank < len(nodes):
        return outcome
    node = nodes[view.failure.rank]
    state = node.agent.read_state()
    if state is None or state.log is None:
        return outcome
    text = LogTail(node.agent.transport, state.log).last_lines(TAIL_LINES)
    if not text:
        return outcome
    return dataclasses.replace(
        outcome,
        last_lines=tuple(text.splitlines()),
        lines_of=f"rank {node.rank}'s log ({node.profile.host.name})",
    )


def _members_ready(ctx: Context, launch: Launch, nodes: Sequence[Node], ready: Outcome) -> Outcome:
    """After rank 0's READY: every other rank READY (its worker line and its supervisor's
    checks), or the group's failure as rank 0's supervisor recorded it."""
    profile = launch.profile
    deadline = ctx.clock() + profile.health.startup_timeout_s
    leader = nodes[0]
    waiting = list(nodes[1:])
    while True:
        states = [node.agent.read_state() for node in waiting]
        waiting = [
            node
            for node, state in zip(waiting, states, strict=True)
            if state is None or state.state != READY
        ]
        current = leader.agent.read_state() or ready.state
        ended = current.last_exit
        run = ready.state.run_id
        # the coordinator records the failure at once, its state only once the group stopped
        if current.state != READY or current.run_id != run or (ended and ended.run_id == run):
            cls = ended.cls if ended is not None else ended_class(current)
            message = ended.message if ended is not None else current.message
            failed = _named(failure_outcome(current, cls, message, ()))
            return _with_failed_rank_tail(nodes, failed, ctx.sleep)
        if not waiting:
            summary = f"{ready.summary}  ({len(nodes)} nodes READY)"
            return dataclasses.replace(ready, state=current, summary=summary)
        if ctx.clock() > deadline:
            names = ", ".join(node.name for node in waiting)
            return Outcome(
                ok=False,
                exit_code=ExitCode.STARTUP_TIMEOUT,
                state=current,
                summary=f"rank 0 is READY but {names} not after "
                f"{profile.health.startup_timeout_s:g} s",
                hint=f"orch status {profile.name}; orch logs {profile.name} --node N",
            )
        ctx.sleep(POLL_S)


# -- down ----------------------------------------------------------------------------------------


def stop_group(nodes: Sequence[Node], name: str) -> None:
    """Every rank stopped (``--replace``, or the ranks started before one refused)."""
    for _ in _stop_ranks(nodes, name, None, None):
        pass


def down(
    ctx: Context, launch: Launch, *, timeout_s: float | None = None, take_over: bool = False
) -> Iterator[Stopping | Stopped]:
    """Stop every rank (``_stop_ranks``) after checking that every node's deployment is this
    profiles repository's to stop; nothing when no rank runs."""
    nodes = nodes_of(ctx, launch)
    states = parallel(lambda node: node.agent.status(), nodes)
    for node, state in zip(nodes, states, strict=True):
        if state.deployed:
            ownership.check(node.profile, state, ctx.origin(), "stop", take_over=take_over)
    if any(_active(state) for state in states):
        yield from _stop_ranks(nodes, launch.profile.name, timeout_s, states[0])


def _stop_ranks(
    nodes: Sequence[Node], name: str, timeout_s: float | None, leader_state: RunState | None
) -> Iterator[Stopping | Stopped]:
    """Rank 0 first: SGLang's rank 0 drains and broadcasts the shutdown, and its supervisor
    tells the others'; then each other node's supervisor is asked too (it stops and sweeps what
    is left, SIGKILL after a short grace: workers ignore SIGTERM since 0.5.21), so that nothing
    of the group is left on any node, whatever state rank 0 was in. Each rank's state is read
    just before its turn: rank 0's supervisor may have ended it a moment ago."""
    for index, node in enumerate(nodes):
        state = leader_state if index == 0 and leader_state else node.agent.status()
        label = f"{name} {node.name}"
        if not _active(state):
            if state.deployed:
                yield Stopped(label, StopReply(state, ()))
            continue
        timeout = node.profile.stop_timeout_s if timeout_s is None else timeout_s
        if index > 0:
            timeout = min(timeout, MEMBER_STOP_GRACE_S)
        yield Stopping(label, state.pid, state.state, timeout)
        yield Stopped(label, node.agent.stop(timeout))


def _active(state: RunState) -> bool:
    return state.deployed and (state.alive or state.stale or state.unsupervised)


# -- logs of every rank --------------------------------------------------------------------------


def logs_every_node(
    ctx: Context, name: str, *, follow_log: bool, lines: int
) -> Iterator[tuple[int, LogChunk | RunEnded]]:
    """Every rank's log (``logs_.logs`` of each, read in a thread per node), whole lines only,
    each prefixed with its rank (``r1| ...``), as they come; until every rank's deployment
    ended when following."""
    profile = ctx.launch(name, require_secrets=False).profile
    found: queue.Queue[tuple[int, LogChunk | RunEnded | BaseException | None]] = queue.Queue()

    def read(rank: int) -> None:
        try:
            for item in logs(ctx, name, run=None, follow_log=follow_log, lines=lines, rank=rank):
                found.put((rank, item))
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, raised there
            found.put((rank, exc))
        found.put((rank, None))

    threads = [
        threading.Thread(target=read, args=(rank,), daemon=True) for rank in range(profile.nnodes)
    ]
    for thread in threads:
        thread.start()
    partial: dict[int, str] = {}
    running = len(threads)
    while running:
        rank, item = found.get()
        if item is None:
            running -= 1
            rest = partial.pop(rank, "")
            if rest:
                yield rank, LogChunk(f"r{rank}| {rest}\n", "", "")
            continue
        if isinstance(item, BaseException):
            raise item
        if isinstance(item, RunEnded):
            rest = partial.pop(rank, "")
            if rest:
                yield rank, LogChunk(f"r{rank}| {rest}\n", item.run_id, "")
            yield rank, item
            continue
        text = partial.pop(rank, "") + item.text
        whole, _, rest = text.rpartition("\n")
        if rest:
            partial[rank] = rest
        if whole:
            prefixed = "".join(f"r{rank}| {line}\n" for line in whole.split("\n"))
            yield rank, LogChunk(prefixed, item.run_id, item.path)
