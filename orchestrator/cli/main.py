"""``orch``: the entry point, the only place that reads sys.argv or exits.

The arguments are parsed (``arguments``), then the command's handler runs: ``cmd_profiles``
(render, export, import, validate, profiles, init, hosts), ``cmd_run`` (up, down, restart,
status, logs, runs) and ``cmd_plan`` (plan, lock, upgrade, diff-effective). Commands
(``commands/``) return values or yield events; ``show/`` words them; the handlers write the
words through ``output.Output``, every byte through one ``Redactor`` that holds the secrets the
command read, errors included. An error is an ``OrchError`` caught here, shown as ``orch: error:``
and its hint, its exit code returned. Heavy modules are imported inside the handlers that need
them, so ``orch --help``, ``orch render`` and ``orch validate`` start fast and never import
paramiko.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable, Sequence
from typing import TextIO

from orchestrator.cli import arguments, cmd_plan, cmd_profiles, cmd_review, cmd_run, cmd_sync
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode, InvalidProfile, OrchError


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    try:
        args = arguments.parser().parse_args(argv)  # --help and usage errors end here
    except SystemExit as exc:
        # `orch diff`'s 2 means "changes" (terraform's -detailed-exitcode): its usage errors
        # must not read as that
        if exc.code == ExitCode.USAGE and _command_word(argv) in CHANGES_CODED:
            return ExitCode.DIFF_USAGE
        raise
    from orchestrator.render import Redactor  # render loads the profile store: not for --help

    output = Output(out or sys.stdout, err or sys.stderr, Redactor())
    handler = HANDLERS[args.command]
    try:
        return handler(args, output)
    except InvalidProfile as exc:
        if args.debug:
            output.traceback(exc)
        for error in exc.errors:
            output.error(error)
        return exc.exit_code
    except OrchError as exc:
        if args.debug:
            output.traceback(exc)
        output.error(exc)
        if exc.exit_code == ExitCode.USAGE and args.command in CHANGES_CODED:
            return ExitCode.DIFF_USAGE
        return exc.exit_code
    except KeyboardInterrupt:
        output.err.write("orch: interrupted\n")
        return ExitCode.INTERRUPTED
    except BrokenPipeError:
        # The reader went away (`orch logs -f | head`): end quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    except Exception as exc:  # noqa: BLE001 - the last resort: one redacted line (--debug: and the traceback)
        if args.debug:
            output.traceback(exc)
        output.error(
            OrchError(
                f"internal error: {type(exc).__name__}: {exc}",
                "this is a bug in orch; run with --debug for the traceback",
            )
        )
        return ExitCode.INTERNAL
    finally:
        with contextlib.suppress(BrokenPipeError):
            output.close()


def _command_word(argv: Sequence[str] | None) -> str | None:
    """The subcommand of a command line argparse refused: the first word that is neither a
    root option nor its value."""
    words = list(sys.argv[1:] if argv is None else argv)
    index = 0
    while index < len(words):
        word = words[index]
        if word == "--profiles":
            index += 2
            continue
        if word.startswith("-"):
            index += 1
            continue
        return word
    return None


# the commands whose exit 2 means "changes" (terraform's -detailed-exitcode): their usage errors
# exit EX_USAGE (64) instead, so that a mistyped command line never reads as a change
CHANGES_CODED = ("diff", "sync")

HANDLERS: dict[str, Callable[[argparse.Namespace, Output], int]] = {
    "render": cmd_profiles.handle_render,
    "export": cmd_profiles.handle_export,
    "import": cmd_profiles.handle_import,
    "validate": cmd_profiles.handle_validate,
    "profiles": cmd_profiles.handle_profiles,
    "up": cmd_run.handle_up,
    "down": cmd_run.handle_down,
    "restart": cmd_run.handle_restart,
    "status": cmd_run.handle_status,
    "logs": cmd_run.handle_logs,
    "runs": cmd_run.handle_runs,
    "plan": cmd_plan.handle_plan,
    "lock": cmd_plan.handle_lock,
    "upgrade": cmd_plan.handle_upgrade,
    "diff-effective": cmd_plan.handle_diff_effective,
    "diff": cmd_review.handle_diff,
    "sync": cmd_sync.handle_sync,
    "init": cmd_profiles.handle_init,
    "hosts": cmd_profiles.handle_hosts,
    "hosts-trust": cmd_profiles.handle_hosts_trust,
}


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
