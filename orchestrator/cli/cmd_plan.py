"""The commands that ask SGLang about a launch (its prediction, its release's changes, what a
running server resolved): plan, lock, upgrade, diff-effective."""

from __future__ import annotations

import argparse
import json

from orchestrator.cli.inputs import context_for, local_sglang, node_rank
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode, OrchError, UsageError


def handle_plan(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import reports as show_reports
    from orchestrator.commands import planning

    if args.fit:
        return _handle_fit(args, output)
    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        report = planning.predict(ctx, launch, local=local_sglang(args), cache=not args.no_cache)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show_reports.plan_json(report, args.all), indent=2, default=str))
    else:
        output.write(
            show_reports.plan_text(report, args.all, wide=args.wide, tty=output.out.isatty())
        )
    blocking = report.blocking_pitfalls
    if blocking:
        if not args.json:
            for pitfall in blocking:  # orch's reading first: SGLang's own error says less
                output.error(OrchError(f"{pitfall.message} [{pitfall.kind}]", pitfall.hint))
            if report.error is not None:
                output.error(OrchError(report.refusal(), report.error.hint))
        return ExitCode.PLAN_REFUSED
    if report.error is not None:
        if not args.json:
            output.error(OrchError(report.refusal(), report.error.hint))
        return ExitCode.PLAN_REFUSED
    budget = report.budget
    if budget is not None and budget.refusal is not None:
        if not args.json:
            output.error(OrchError(budget.refusal, budget.hints[0] if budget.hints else None))
        return ExitCode.PLAN_REFUSED
    if report.pinned_changes(launch.profile.pin, launch.table):
        return ExitCode.DRIFT
    return ExitCode.OK


def _handle_fit(args: argparse.Namespace, output: Output) -> int:
    """``plan --fit``: edits of the profile that plan as not will fail (exit 0), or none
    (``NO_FIT``)."""
    from orchestrator.cli.show import fit as show_fit
    from orchestrator.commands import fitting

    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        result = fitting.fit_launch(ctx, launch, local=local_sglang(args))
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show_fit.fit_json(result), indent=2, default=str))
    else:
        output.write(show_fit.fit_text(result))
    if result.suggestions:
        return ExitCode.OK
    if not args.json:
        problem, hint = show_fit.nothing_found(result)
        output.error(OrchError(problem, hint))
    return ExitCode.NO_FIT


def handle_lock(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import reports as show_reports
    from orchestrator.commands import planning

    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile)
        target, document, report = planning.write_lock(
            ctx, launch, local=local_sglang(args), cache=not args.no_cache
        )
    finally:
        ctx.close()
    output.print(show_reports.lock_written(target, document, report))
    return ExitCode.OK


def handle_upgrade(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import upgrade as show_upgrade
    from orchestrator.commands import upgrading

    ctx = context_for(args, output)
    request = upgrading.Request(
        args.profile,
        args.to,
        source_python=args.from_sglang,
        target_python=args.to_sglang,
        model_config=args.model_config,
        write=args.write,
    )
    try:
        result = upgrading.run(ctx, request)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show_upgrade.as_json(result), indent=2, default=str))
    else:
        output.print(show_upgrade.text(result, wide=args.wide).rstrip("\n"))
    if result.refused is not None:
        return ExitCode.PLAN_REFUSED
    return ExitCode.UPGRADE if result.blocked else ExitCode.OK


def handle_diff_effective(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import reports as show_reports
    from orchestrator.commands import effective

    if args.url is not None and (args.pid is not None or args.log is not None):
        raise UsageError(
            "--url asks the server over HTTP; --pid and --log read a process and a log on the "
            "profile's host: give one or the other"
        )
    ctx = context_for(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        rank = node_rank(args.node, launch.profile.name, len(launch.members))
        whole_group = launch.is_group and args.node is None and args.url is None
        if whole_group and args.pid is None and args.log is None:
            group_report = effective.diff_group(ctx, launch, include_defaulted=args.all)
        elif args.url is not None:
            report = effective.diff_url(
                ctx, launch, args.url, include_defaulted=args.all, rank=rank
            )
        else:
            report = effective.diff_effective(
                ctx, launch, include_defaulted=args.all, pid=args.pid, log=args.log, rank=rank
            )
    finally:
        ctx.close()
    if whole_group and args.pid is None and args.log is None:
        if args.json:
            document = show_reports.group_diff_json(group_report)
            output.print(json.dumps(document, indent=2, default=str))
        else:
            output.print(show_reports.group_diff_text(group_report, wide=args.wide))
        return ExitCode.DRIFT if group_report.drift else ExitCode.OK
    if args.json:
        output.print(json.dumps(show_reports.diff_json(report), indent=2, default=str))
    else:
        output.print(show_reports.diff_text(report, wide=args.wide))
    return ExitCode.DRIFT if report.drift else ExitCode.OK
