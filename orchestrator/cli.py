"""``orch``: the only module that reads sys.argv, prints, or exits.

Stages return values; this module turns them into text (or ``--json``) and exit codes. Heavy
modules are imported inside the commands that need them, so ``orch --help``, ``orch render``
and ``orch validate`` start fast and never import paramiko.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from orchestrator import __version__
from orchestrator.errors import ExitCode, OrchError, ProfileError, ProfileErrors
from orchestrator.model import Finding, Severity

if TYPE_CHECKING:
    from orchestrator.profile import ProfileStore

PROFILES_ENV = "ORCH_PROFILES"
BUNDLED_PROFILES = Path(__file__).resolve().parent.parent / "profiles"


def find_profiles_dir(explicit: str | None, cwd: Path) -> Path:
    """``--profiles`` > ``$ORCH_PROFILES`` > the nearest ``profiles/`` above the working
    directory (a team's repo) > the profiles shipped with orch (the embedded default)."""
    if explicit:
        return Path(explicit).expanduser()
    if from_env := os.environ.get(PROFILES_ENV):
        return Path(from_env).expanduser()
    for directory in (cwd, *cwd.parents):
        candidate = directory / "profiles"
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return BUNDLED_PROFILES


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orch",
        description="Launch SGLang servers from profiles in git, and verify what they received.",
        epilog="Exit codes: docs/exit-codes.md. Profile format: docs/profiles.md.",
    )
    parser.add_argument("--version", action="version", version=f"orch {__version__}")
    parser.add_argument(
        "--profiles",
        metavar="DIR",
        help=f"profile directory (default: ${PROFILES_ENV}, else the nearest profiles/ above "
        "the working directory, else orch's bundled profiles)",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    render = commands.add_parser(
        "render",
        help="show exactly what a profile launches: argv and env, no shell involved",
        description="Render a profile into the argv and environment the server will receive.",
    )
    render.add_argument("profile", metavar="PROFILE")
    form = render.add_mutually_exclusive_group()
    form.add_argument(
        "--json", action="store_true", help='print {"argv": [...], "env": {...}} (secrets redacted)'
    )
    form.add_argument(
        "--script", action="store_true", help="print the bash launcher script for running by hand"
    )
    form.add_argument("--one-line", action="store_true", help="print the command on one line")
    render.set_defaults(handler=_cmd_render)

    validate = commands.add_parser(
        "validate",
        help="check profiles before anything runs (all of them when none is named)",
        description="Validate profiles against SGLang's argument table of their version.",
    )
    validate.add_argument("names", metavar="PROFILE", nargs="*")
    validate.add_argument("--strict", action="store_true", help="treat warnings as errors (for CI)")
    validate.set_defaults(handler=_cmd_validate)

    listing = commands.add_parser("profiles", help="list the profiles and the hosts they run on")
    listing.set_defaults(handler=_cmd_profiles)
    return parser


class _Output:
    """Where the CLI writes; tests pass their own streams through ``main``."""

    def __init__(self, out: TextIO, err: TextIO) -> None:
        self.out = out
        self.err = err

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, error: OrchError) -> None:
        self.err.write(f"orch: error: {error.message}\n")
        if error.hint:
            self.err.write(f"orch: hint: {error.hint}\n")

    def finding(self, finding: Finding) -> None:
        self.err.write(f"orch: {finding.severity}: {finding.message}\n")
        if finding.hint:
            self.err.write(f"orch: hint: {finding.hint}\n")


def _store(args: argparse.Namespace) -> ProfileStore:
    from orchestrator.profile import ProfileStore

    cwd = Path.cwd()
    return ProfileStore(find_profiles_dir(args.profiles, cwd), display_root=cwd)


def _cmd_render(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import render

    loaded = _store(args).load(args.profile)
    for finding in loaded.findings:
        output.finding(finding)
    plan = render.render(loaded.profile, loaded.table)
    if args.json:
        output.print(render.plan_json(plan))
    elif args.script:
        output.out.write(render.launcher_script(plan))
    else:
        output.print(render.format_command(plan, multiline=not args.one_line))
    return ExitCode.OK


def _cmd_validate(args: argparse.Namespace, output: _Output) -> int:
    store = _store(args)
    names = args.names or store.names()
    if not names:
        raise ProfileError(
            f"no profiles in {store.root}", f"create {store.root}/<name>.yaml, or pass --profiles"
        )
    failed = warned = 0
    for name in names:
        try:
            loaded = store.load(name)
        except ProfileErrors as exc:
            failed += 1
            for error in exc.errors:
                output.error(error)
            continue
        except ProfileError as exc:
            failed += 1
            output.error(exc)
            continue
        for finding in loaded.findings:
            output.finding(finding)
        warned += any(f.severity is Severity.WARNING for f in loaded.findings)
        profile = loaded.profile
        version = profile.sglang_version or f"unpinned, checked as {loaded.table.version}"
        where = "abstract base" if profile.abstract else f"host {profile.host.name}"
        output.print(f"ok  {name}  (SGLang {version}, {where})")
    if failed or (args.strict and warned):
        output.err.write(
            f"orch: {failed} of {len(names)} profile(s) invalid"
            + (f", {warned} with warnings (--strict)" if args.strict and warned else "")
            + "\n"
        )
        return ExitCode.CONFIG
    return ExitCode.OK


def _cmd_profiles(args: argparse.Namespace, output: _Output) -> int:
    store = _store(args)
    output.print(f"# {store.root}")
    for name in store.names():
        try:
            loaded = store.load(name)
        except OrchError as exc:
            output.print(f"{name:32} INVALID: {exc.message}")
            continue
        profile = loaded.profile
        where = "(abstract)" if profile.abstract else profile.host.name
        summary = profile.description.splitlines()[0] if profile.description else ""
        output.print(f"{name:32} {where:16} {summary}")
    return ExitCode.OK


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    output = _Output(out or sys.stdout, err or sys.stderr)
    args = _parser().parse_args(argv)
    handler: Callable[[argparse.Namespace, _Output], int] = args.handler
    try:
        return handler(args, output)
    except ProfileErrors as exc:
        for error in exc.errors:
            output.error(error)
        if args.debug:
            raise
        return exc.exit_code
    except OrchError as exc:
        output.error(exc)
        if args.debug:
            raise
        return exc.exit_code
    except KeyboardInterrupt:
        output.err.write("orch: interrupted\n")
        return ExitCode.INTERRUPTED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
