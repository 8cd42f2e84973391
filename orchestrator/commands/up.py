"""``up``: one launch walked through the stages once: the deployment's state, preflight, the plan
gate, start under the agent, follow the startup, then the effective configuration."""

from __future__ import annotations

import queue
import threading
from collections.abc import Generator, Iterator
from typing import Any

from orchestrator import render
from orchestrator.commands import (
    effective,
    group,
    ownership,
    planning,
    preflight,
    replicas,
    routing,
)
from orchestrator.commands.context import Context, HostAgent, Launch, StartChannel, UpOptions
from orchestrator.commands.effective import verify_ready
from orchestrator.commands.events import (
    Attached,
    Effective,
    MemoryMeasured,
    Outcome,
    ReplicaDone,
    ReplicaEvent,
    Started,
    Step,
    UpEvent,
    Warn,
)
from orchestrator.commands.fanout import parallel
from orchestrator.commands.follow import Clock, StartupLog, follow, follow_seconds
from orchestrator.errors import Conflict, OrchError
from orchestrator.fleet.protocol.inspect import decode_inspect
from orchestrator.fleet.protocol.start import build_spec
from orchestrator.model import RunState
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang import observe
from orchestrator.sglang.memory.budget import Budget
from orchestrator.sglang.memory.measured import compare, predicted_figures

SAME_LAUNCH_WAIT_S = 5.0  # how long a loser of the start lock waits for the winner's state


def up(ctx: Context, launch: Launch, options: UpOptions) -> Iterator[UpEvent]:
    """Preflight, push, start, follow the startup; the last event is an Outcome. Behind a
    gateway (``router:``), the server is registered there once READY and checked, before the
    Outcome: ``up`` ends when the gateway routes to it."""
    if launch.profile.router is None:
        yield from up_server(ctx, launch, options)
        return
    for event in up_server(ctx, launch, options):
        if isinstance(event, Outcome) and event.ok:
            try:
                routed = routing.register(ctx, launch)
            except OrchError as exc:
                yield Outcome(
                    False,
                    exc.exit_code,
                    event.state,
                    f"{launch.profile.deployment}: READY, but not in its gateway: {exc.message}",
                    hint=exc.hint,
                )
                return
            if routed is not None:
                yield Step(f"gateway {routed.gateway}: {routed.what} as {routed.worker_url}")
        yield event


def up_server(ctx: Context, launch: Launch, options: UpOptions) -> Iterator[UpEvent]:
    """``up`` without the gateway: the server READY and checked (a rolling restart registers
    it itself, after its own checks)."""
    if launch.is_group:
        yield from group.up(ctx, launch, options)
        return
    profile = launch.profile
    agent = ctx.agent(profile)
    where = "this machine" if profile.host.is_local else f"ssh {profile.host.address}"
    yield Step(f"{profile.name} on {profile.host.name} ({where}), workdir {agent.deployment.dir}")

    member = launch.primary
    # The start's command is opened now and waits for its spec while the launch is checked:
    # its round trips overlap the probe's. Called off (it then does nothing) unless sent.
    pending = agent.open_start(
        follow_seconds(profile), effective.inspect_request(profile, sorted(member.env))
    )
    try:
        yield from _up(ctx, launch, agent, pending, options)
    finally:
        pending.cancel()


def _up(
    ctx: Context,
    launch: Launch,
    agent: HostAgent,
    pending: StartChannel,
    options: UpOptions,
) -> Iterator[UpEvent]:
    profile = launch.profile
    member = launch.primary
    # One command: the deployment's status, and the host's facts when nothing of it runs.
    current, facts = agent.status_and_probe(
        profile.port, profile.model.path or None, profile.bind, member.env
    )
    if options.lock is not None:  # read while the lock was being granted: wait for it now
        granted = options.lock.granted()
        if current.lock is None or not current.lock.consistent_with(granted):
            # another orch held it between that read and this hold: read again, now ours
            current, facts = agent.status_and_probe(
                profile.port, profile.model.path or None, profile.bind, member.env
            )
    replacing: RunState | None = None  # stopped only once the new launch passed its checks
    if current.deployed:
        note = ownership.check(profile, current, ctx.origin(), "up", take_over=options.take_over)
        if note is not None:
            yield Step(note)
    if current.unsupervised:
        if current.launch_digest == launch.digest:
            pending.cancel()  # nothing new starts here
            adopted = _adopt(agent)
            if adopted is not None:
                yield Step(
                    f"its supervisor had died; a new one adopted the running server (pid "
                    f"{adopted.pid}) without restarting it: its output since then is lost"
                )
                yield Attached(adopted)
                yield from _follow_and_verify(ctx, launch, agent, adopted)
                return
        elif not options.replace:
            raise Conflict(
                f"{profile.name} runs unsupervised on {profile.host.name} (its supervisor "
                f"died) with another launch (digest {current.launch_digest}, run "
                f"{current.run_id})",
                "orch up --replace stops it first; orch down stops it",
            )
        replacing = current
    elif current.alive:
        if current.launch_digest == launch.digest:
            pending.cancel()  # nothing new starts here
            yield Attached(current)
            yield from _follow_and_verify(ctx, launch, agent, current)
            return
        if not options.replace:
            raise Conflict(
                f"{profile.name} already runs on {profile.host.name} with another launch "
                f"(digest {current.launch_digest}, run {current.run_id}, {current.state})",
                "orch up --replace stops it first; orch status shows what runs",
            )
        replacing = current
    elif current.stale:
        yield Warn("the previous supervisor died without an end; sweeping its run")
        agent.stop(profile.stop_timeout_s)

    # The new launch is checked whole (preflight, SGLang's plan) before a running server is
    # stopped for it: a launch that would be refused never costs the one that works.
    if facts is None:  # not asked while something of the deployment ran
        facts = agent.probe(profile.port, profile.model.path or None, profile.bind, member.env)
    launch = yield from preflight.check(launch, facts, ctx.environ, replacing=replacing)
    member = launch.primary
    budget: Budget | None = None
    standin = False
    if options.check_plan:
        planned = yield from planning.gate(
            ctx,
            launch,
            force=options.force,
            replacing=replacing is not None,
            cache=options.plan_cache,
        )
        budget, standin = planned.budget, planned.standin
    if replacing is not None:
        yield Step(f"stopping the running launch {replacing.launch_digest} (--replace)")
        agent.stop(profile.stop_timeout_s)

    meta = launch.meta(ctx.origin())
    if budget is not None:  # kept with the run: diff-effective compares SGLang's figures with it
        meta["memory_plan"] = predicted_figures(budget)
        meta["max_running_requests_by"] = budget.limited_by  # status's CAP column says it
    spec = build_spec(
        profile, member.argv, member.env, meta, gateway=routing.spec_gateway(ctx, launch)
    )
    # Started and followed on one channel; the inspection of the server comes with its READY.
    reply, events = pending.send(spec, render.launcher_script(member.command))
    if not reply.ok or reply.state is None:
        winner = _same_launch_winner(ctx, agent, launch.digest)
        if winner is not None:
            yield Step("a concurrent orch up started this same launch first; following it")
            yield Attached(winner)
            yield from _follow_and_verify(ctx, launch, agent, winner)
            return
        holder = reply.holder
        raise Conflict(
            f"{profile.name}: {reply.reason}"
            + (f" (run {holder.run_id}, {holder.state})" if holder else ""),
            "another orch up got there first: orch status " + profile.name,
        )
    state = reply.state
    ended = state.last_exit is not None and state.last_exit.run_id == state.run_id
    if state.pid is not None or not ended:  # a server that could not be spawned has no pid
        yield Started(state.run_id or "?", state.pid, state.log or "")
    yield from _follow_and_verify(ctx, launch, agent, state, budget, standin=standin, events=events)


def _adopt(agent: HostAgent) -> RunState | None:
    """A new supervisor for the running server whose supervisor died (``agent adopt``);
    None when it cannot be adopted (it ended meanwhile ...): then it is stopped and started."""
    reply = agent.adopt()
    return reply.state if reply.ok else None


def _follow_and_verify(
    ctx: Context,
    launch: Launch,
    agent: HostAgent,
    state: RunState,
    budget: Budget | None = None,
    *,
    standin: bool = False,
    events: Generator[dict[str, Any], None, None] | None = None,
) -> Iterator[UpEvent]:
    """Follow the startup (on ``events`` when the start opened the stream); then compare what
    the server got with the profile. Drift in a pinned field fails ``up``; other drift is a
    warning (``diff-effective`` fails on it). After a crash the outcome comes first, then what
    the followed log recorded."""
    profile = launch.profile
    startup = StartupLog()
    clock = Clock(ctx.clock, ctx.sleep)
    inspect = effective.inspect_request(profile, sorted(launch.primary.env))
    for event in follow(agent, state, profile, clock, startup, events=events, inspect=inspect):
        if not isinstance(event, Outcome):
            yield event
            continue
        if not event.ok:
            yield event  # within a fraction of a second of the death: compare afterwards
            if startup.config_line is not None:
                yield from _compare_logged(launch, startup)
            return
        measured = observe.memory_figures(startup.after)
        if measured:
            first = measured[0]
            comparisons = compare(budget, first) if budget is not None else ()
            yield MemoryMeasured(measured, budget, comparisons, standin=standin)
        yield from verify_ready(ctx, launch, event, _inspected(startup))
        return


def _inspected(startup: StartupLog) -> effective.Inspected | None:
    """The inspection the stream brought with READY, decoded; None: ask for it."""
    if startup.inspected is None:
        return None
    try:
        return decode_inspect(startup.inspected)
    except OrchError:
        return None  # asked again, where its error is said


def _compare_logged(launch: Launch, startup: StartupLog) -> Iterator[UpEvent]:
    try:
        report = effective.compare_logged(launch, startup)
    except sglang_config.UnreadableConfig as exc:
        yield Warn(f"could not read the server_args line: {exc}")
        return
    yield Effective(report, report.pinned_drift(launch.profile.pin, launch.table))


def _same_launch_winner(ctx: Context, agent: HostAgent, digest: str) -> RunState | None:
    """After losing the start lock: the winner's state once it has written it, when it runs the
    same launch. The winner holds the lock before its first state write, so wait a moment."""
    deadline = ctx.clock() + SAME_LAUNCH_WAIT_S
    while True:
        current = agent.status()
        if current.alive and current.launch_digest is not None:
            return current if current.launch_digest == digest else None
        if ctx.clock() >= deadline:
            return None
        ctx.sleep(0.1)


def up_replicas(
    ctx: Context, launch: Launch, options: UpOptions, replica: int | None = None
) -> Iterator[ReplicaEvent | ReplicaDone]:
    """A profile's replicas (every one, or ``replica``) each through ``up`` (preflight, plan
    gate, start under the agent, READY, the effective check) at once, on a thread each. One
    replica's failure never hides another's outcome: every replica's events come as they
    happen, each tagged with its replica, and one ``ReplicaDone`` each as it ends."""
    launches = replicas.chosen(launch, replica)
    if not launch.replicas:
        raise ValueError(f"{launch.profile.name} has no replicas: use up.up")
    items: queue.Queue[ReplicaEvent | ReplicaDone] = queue.Queue()
    crashed: list[BaseException] = []  # not an OrchError: a defect, raised once all ended

    def run(one: Launch) -> None:
        profile = one.profile
        index = profile.replica if profile.replica is not None else 0
        error: OrchError | None = None
        try:
            for event in up(ctx, one, options):
                items.put(ReplicaEvent(index, profile.deployment, event))
        except OrchError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - a defect: raised once every replica ended
            crashed.append(exc)
            error = OrchError(f"{profile.deployment}: internal error: {exc!r}")
        finally:
            items.put(ReplicaDone(index, profile.deployment, profile.host.name, error))

    walker = threading.Thread(target=parallel, args=(run, launches), daemon=True)
    walker.start()
    ended = 0
    while ended < len(launches):
        item = items.get()
        ended += isinstance(item, ReplicaDone)
        yield item
    walker.join()
    if crashed:
        raise crashed[0]
