"""``orch sync``: the dry run (reads only), or the apply after a yes."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.arguments import find_profiles_dir
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode, UsageError

if TYPE_CHECKING:
    from orchestrator.commands.context import HostAgent
    from orchestrator.effective.sync import Plan
    from orchestrator.model import Profile


def handle_sync(
    args: argparse.Namespace,
    output: Output,
    *,
    ask: Callable[[str], str] = input,
    agent_factory: Callable[[Profile], HostAgent] | None = None,
) -> int:
    from orchestrator.cli.show import sync as show
    from orchestrator.commands import sync
    from orchestrator.effective import sync as esync

    if args.all and args.names:
        raise UsageError("--all selects every profile: name profiles or give --all, not both")
    if args.on is not None and args.names:
        raise UsageError(f"--on {args.on} selects the profiles: do not name them as well")
    profiles = find_profiles_dir(args.profiles, Path.cwd())
    request = sync.Request(
        names=tuple(args.names), on=args.on, rev=args.rev, allow_dirty=args.allow_dirty
    )
    options = esync.Options(
        max_unavailable=args.max_unavailable,
        max_failures=1 if args.halt_on_failure else args.max_failures,
        include_out_of_band=args.include_out_of_band,
    )
    with sync.session(
        profiles,
        request,
        environ=os.environ,
        local_python=sys.executable,
        redactor=output.redact,
        agent_factory=agent_factory,
    ) as opened:
        if not args.dry_run:
            opened.refuse_dirty()  # before anything is read: an apply would refuse anyway
        found = opened.dry_run()
        planned = esync.plan([row.row for row in found.rows], options)
        if args.dry_run or not planned.units:
            if args.json:
                output.print(json.dumps(show.as_json(found), indent=2))
            else:
                output.print(show.table(found, wide=args.wide))
            if not args.dry_run and not found.changed:
                return ExitCode.OK
            if args.dry_run:
                return ExitCode.CHANGES if found.changed else ExitCode.OK
            # nothing to act on, but not everything clean (skipped ones): said, not failed
            return ExitCode.OK
        if not args.json:
            output.print(show.table(found, wide=args.wide))
        if not args.yes:
            _confirm(output, planned, ask)
        say = (lambda line: None) if args.json else (lambda line: output.print(show.said(line)))
        plan, report = opened.apply(found, options, lock_wait_s=args.lock_wait, say=say)
    if args.json:
        output.print(json.dumps(show.as_json(found, (plan, report)), indent=2))
    else:
        output.print(show.report(plan, report))
    return ExitCode.OK if report.ok else ExitCode.SYNC


def _confirm(output: Output, planned: Plan, ask: Callable[[str], str]) -> None:
    if not (sys.stdin.isatty() and output.out.isatty()):
        raise UsageError(
            "orch sync acts on running servers: it asks first, and there is no terminal to ask on",
            "give --yes to act without asking, or --dry-run to only look",
        )
    names = ", ".join(unit.name for unit in planned.units)
    answer = ask(f"act on {len(planned.units)} deployment(s) ({names})? [y/N] ")
    if answer.strip().lower() not in ("y", "yes"):
        raise UsageError("not confirmed: nothing was changed", "answer y, or give --yes")
