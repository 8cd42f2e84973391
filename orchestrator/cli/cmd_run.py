"""The commands that run and watch a profile's server on its host: up, down, restart, status,
logs, runs."""

from __future__ import annotations

import argparse
import dataclasses
import json
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

from orchestrator.cli import arguments
from orchestrator.cli.inputs import context_for
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode, OrchError

if TYPE_CHECKING:
    from orchestrator.commands.context import Context, Launch, UpOptions
    from orchestrator.commands.locking import PendingHold


def handle_up(args: argparse.Namespace, output: Output) -> int:
    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile)
        if launch.replicas or launch.is_group or getattr(args, "replica", None) is not None:
            with _holding(ctx, launch, args, output, "orch up"):
                return _up(ctx, launch, args, output)
        # one server: its lock is granted while up reads the deployment (no round trip more)
        with _pending_hold(ctx, launch, args, output, "orch up") as lock:
            return _up(ctx, launch, args, output, lock=lock)
    finally:
        ctx.close()


def _pending_hold(
    ctx: Context, launch: Launch, args: argparse.Namespace, output: Output, command: str
) -> AbstractContextManager[PendingHold]:
    from orchestrator.cli.show import core as show
    from orchestrator.commands.locking import pending_hold

    wait_s = args.lock_wait
    return pending_hold(
        ctx,
        launch.profile,
        command,
        wait_s=wait_s,
        on_wait=lambda label, holder: output.write(show.waiting_for_lock(label, holder, wait_s)),
    )


def _holding(
    ctx: Context, launch: Launch, args: argparse.Namespace, output: Output, command: str
) -> AbstractContextManager[None]:
    """The operation lock of every deployment the command acts on (commands/locking.py),
    waiting ``--lock-wait`` seconds for another orch's, saying once who holds it."""
    from orchestrator.cli.show import core as show
    from orchestrator.commands.locking import deployments_of, holding

    wait_s = args.lock_wait
    profiles = deployments_of(launch, getattr(args, "replica", None))
    return holding(
        ctx,
        profiles,
        command,
        wait_s=wait_s,
        on_wait=lambda label, holder: output.write(show.waiting_for_lock(label, holder, wait_s)),
    )


def _up(
    ctx: Context,
    launch: Launch,
    args: argparse.Namespace,
    output: Output,
    *,
    lock: PendingHold | None = None,
) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands.context import UpOptions
    from orchestrator.commands.up import up

    options = UpOptions(
        replace=args.replace,
        check_plan=not args.no_plan,
        force=args.force,
        take_over=args.take_over,
        plan_cache=not args.no_cache,
        lock=lock,
    )
    replica = getattr(args, "replica", None)
    if launch.replicas or replica is not None:
        return _up_replicas(ctx, launch, options, replica, output)
    view = show.UpView(tty=output.out.isatty())
    for event in up(ctx, launch, options):
        output.write(view.event(event))
    return view.exit_code


def _up_replicas(
    ctx: Context, launch: Launch, options: UpOptions, replica: int | None, output: Output
) -> int:
    """Every replica (or one) at once, each line tagged ``NAME@I| ``; once all ended, which
    are up and which failed. The exit code is the first failed replica's (by index)."""
    from orchestrator.cli.show import core as show
    from orchestrator.cli.show.text import error
    from orchestrator.commands.events import ReplicaEvent
    from orchestrator.commands.up import up_replicas

    views: dict[int, show.UpView] = {}
    ended: dict[int, tuple[str, str, int]] = {}
    for item in up_replicas(ctx, launch, options, replica):
        view = views.setdefault(item.replica, show.UpView(tty=False))
        if isinstance(item, ReplicaEvent):
            output.write(show.tagged(item.deployment, view.event(item.event)))
            continue
        code = view.exit_code
        if item.error is not None:
            output.write(show.tagged(item.deployment, error(item.error.message, item.error.hint)))
            code = item.error.exit_code
        ended[item.replica] = (item.deployment, item.host, code)
    done = [ended[index] for index in sorted(ended)]
    output.write(show.replicas_up(launch.profile.name, done))
    return next((code for _, _, code in done if code != ExitCode.OK), ExitCode.OK)


def handle_down(args: argparse.Namespace, output: Output) -> int:
    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        with _holding(ctx, launch, args, output, "orch down"):
            return _down(ctx, args, output)
    finally:
        ctx.close()


def _down(ctx: Context, args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import events, ops
    from orchestrator.commands.routing import Routed

    stopped = False
    # restart comes through here too, without a --timeout of its own
    for step in ops.down(
        ctx,
        args.profile,
        timeout_s=getattr(args, "timeout", None),
        take_over=args.take_over,
        replica=getattr(args, "replica", None),
    ):
        if isinstance(step, events.Stopping):
            output.write(show.stopping(step))
        elif isinstance(step, Routed):
            output.write(show.routed(step))
        else:
            stopped = True
            output.write(show.down(step.label, step.reply))
    if not stopped:
        output.write(show.down(args.profile, None))
    return ExitCode.OK


def handle_restart(args: argparse.Namespace, output: Output) -> int:
    """down, then up, under ONE hold of the deployments: no other orch acts in between."""
    if args.rolling:
        return _rolling(args, output)
    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile)
        with _holding(ctx, launch, args, output, "orch restart"):
            _down(ctx, args, output)
            return _up(ctx, launch, args, output)
    finally:
        ctx.close()


def _rolling(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands.restarting import rolling_restart
    from orchestrator.commands.rolling import RollOptions
    from orchestrator.errors import RollStopped, UsageError

    if args.replica is not None:
        raise UsageError("--rolling restarts every replica in turn: leave out --replica")
    if args.max_unavailable < 1:
        raise UsageError(f"--max-unavailable {args.max_unavailable}: at least 1")
    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile)
        router = launch.profile.router
        drain = args.drain_timeout
        if drain is None:
            drain = router.drain_timeout_s if router is not None else 300.0
        options = RollOptions(
            max_unavailable=args.max_unavailable,
            drain_timeout_s=drain,
            soak_s=args.soak,
            gateway_timeout_s=router.ready_timeout_s if router is not None else 120.0,
        )
        # every replica held for the whole roll: no other orch acts on one in between
        with _holding(ctx, launch, args, output, "orch restart --rolling"):
            result = rolling_restart(
                ctx,
                launch,
                options,
                take_over=args.take_over,
                say=lambda step: output.write(show.roll_step(launch.profile.name, step)),
            )
    finally:
        ctx.close()
    output.write(show.roll_result(launch.profile.name, result))
    if result.ok:
        return ExitCode.OK
    raise RollStopped(
        f"{launch.profile.name}: the rolling restart stopped: {result.verdict}",
        "the replicas not yet rolled are untouched; orch status NAME shows each, orch logs "
        "NAME --replica I the failed one's log",
    )


def handle_status(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli import status_watch
    from orchestrator.errors import UsageError

    if args.watch is not None and args.watch <= 0:
        raise UsageError("orch status --watch: SECONDS must be more than 0", "e.g. --watch 5")
    ctx = context_for(args, output)
    try:
        if args.watch is None:
            text, code = _status_once(ctx, args)
            output.print(text)
            return code
        return status_watch.watch(
            lambda: _status_once(ctx, args, load=True)[0],
            output,
            args.watch,
            json_lines=args.json,
        )
    finally:
        ctx.close()


def _status_once(
    ctx: Context, args: argparse.Namespace, *, load: bool | None = None
) -> tuple[str, int]:
    """One look at the deployments: the table (or --json) and the exit code."""
    from orchestrator.cli.show import status as show
    from orchestrator.commands import ops

    load = args.load if load is None else load
    listing = args.all or not args.names
    known = ctx.store.names()
    names = known if listing else list(args.names)
    # an invalid profile is a row with its error; the others are still asked
    invalid: list[ops.StatusRow] = []
    launchable: list[str] = []
    for name in names:
        if name not in known:
            launchable.append(name)  # not a profile: the command's error, with did-you-mean
            continue
        try:
            abstract = ctx.store.load(name).profile.abstract
        except OrchError as exc:
            invalid.append(ops.StatusRow(name, "-", None, exc))
            continue
        if not (listing and abstract):
            launchable.append(name)
    rows = (ops.status(ctx, launchable, load=load) if launchable else []) + invalid
    sync = None
    if listing:  # the fleet view: each deployment against the profiles' HEAD
        from orchestrator.commands.sync import status_verdicts

        sync = status_verdicts(ctx, rows)
    order = {name: index for index, name in enumerate(names)}
    rows.sort(key=lambda row: order[row.profile])
    if args.json:
        documents = [show.status_json(row, sync) for row in rows]
        text = json.dumps(documents, indent=None if args.watch else 2)
    else:
        text = show.status_table(rows, wide=args.wide, sync=sync, load=load)
    if listing:  # every profile: a host that cannot be reached is a row, not a failure
        return text, ExitCode.CONFIG if invalid else ExitCode.OK
    failed = [row for row in rows if row.error is not None]
    return text, max((row.error.exit_code for row in failed if row.error), default=ExitCode.OK)


def handle_logs(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import events
    from orchestrator.commands import logs as logs_

    ctx = context_for(args, output)
    at_line_start = True
    if args.node == arguments.ALL_NODES:
        return _logs_every_node(args, output)
    try:
        for item in logs_.logs(
            ctx,
            args.profile,
            run=args.run,
            follow_log=args.follow,
            lines=args.lines,
            rank=args.node,
            replica=args.replica,
        ):
            if isinstance(item, events.RunEnded):
                output.write(show.run_ended(item, at_line_start=at_line_start))
                at_line_start = True
                if item.next_run is None:
                    return item.exit_code
                continue
            output.out.write(item.text)
            output.out.flush()
            if item.text:
                at_line_start = item.text.endswith("\n")
    finally:
        ctx.close()
    return ExitCode.OK


def _logs_every_node(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import events, group

    ctx = context_for(args, output)
    code = ExitCode.OK
    try:
        for rank, item in group.logs_every_node(
            ctx, args.profile, follow_log=args.follow, lines=args.lines
        ):
            if isinstance(item, events.RunEnded):
                for text in show.run_ended(item):
                    output.write([dataclasses.replace(text, text=f"r{rank}| {text.text}")])
                if rank == 0 and item.next_run is None:
                    code = item.exit_code
                continue
            output.out.write(item.text)
            output.out.flush()
    finally:
        ctx.close()
    return code


def handle_runs(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import logs as logs_

    ctx = context_for(args, output)
    try:
        view = logs_.runs(ctx, args.profile, rank=args.node, replica=args.replica)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show.runs_json(view), indent=2))
    else:
        output.print(show.runs_table(view))
    return ExitCode.OK
