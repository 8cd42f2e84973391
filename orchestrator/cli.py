"""``orch``: the only module that reads sys.argv, prints, or exits.

argparse, dispatch, main. Commands (``commands/``) return values or yield events; ``show.py``
words them; this module writes the words, every byte through one ``Redactor`` that holds the
secrets the command read, errors included. Heavy modules are imported inside the handlers that need
them, so ``orch --help``, ``orch render`` and ``orch validate`` start fast and never import
paramiko.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from orchestrator import __version__
from orchestrator.errors import ExitCode, InvalidProfile, OrchError, ProfileError
from orchestrator.model import Finding, Severity

if TYPE_CHECKING:
    from orchestrator.commands.context import Context
    from orchestrator.commands.planning import LocalSGLang
    from orchestrator.profile import ProfileStore
    from orchestrator.render import Redactor
    from orchestrator.show import Text

PROFILES_ENV = "ORCH_PROFILES"


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
    return bundled_profiles()


def bundled_profiles() -> Path:
    """The example profiles shipped with orch (package data; the repository's profiles/)."""
    import importlib.resources

    return Path(str(importlib.resources.files("orchestrator") / "examples"))


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

    up = commands.add_parser(
        "up",
        help="preflight, push and start a profile's server under the remote agent; follow it",
        description="Start a profile's server supervised on its host and stream its startup. "
        "Idempotent: the same plan already running is followed, not started twice.",
    )
    up.add_argument("profile", metavar="PROFILE")
    up.add_argument("--replace", action="store_true", help="stop a different running launch first")
    _launch_options(up)
    up.set_defaults(handler=_cmd_up)

    down = commands.add_parser(
        "down",
        help="stop a profile's server and sweep its processes",
        description="SIGTERM to the server's process group, up to the profile's stop_timeout_s "
        "seconds for it to drain, then SIGKILL, then a sweep of any process of the run that "
        "escaped the group. Says what it sent and how long it may wait before it waits.",
    )
    down.add_argument("profile", metavar="PROFILE")
    _take_over_option(down)
    down.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds to let the server drain before SIGKILL, for this stop "
        "(default: the profile's stop_timeout_s)",
    )
    down.set_defaults(handler=_cmd_down)

    restart = commands.add_parser(
        "restart",
        help="stop a profile's server, then up with up's checks",
        description="orch down, then orch up: the same preflight, plan gate and follow.",
    )
    restart.add_argument("profile", metavar="PROFILE")
    _launch_options(restart)
    restart.set_defaults(handler=_cmd_restart, replace=False)

    status = commands.add_parser("status", help="state of deployments: pid, uptime, restarts ...")
    status.add_argument("names", metavar="PROFILE", nargs="*")
    status.add_argument("--all", action="store_true", help="every launchable profile")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--wide", action="store_true", help="the whole last failure, the origin of each launch"
    )
    status.set_defaults(handler=_cmd_status)

    logs = commands.add_parser(
        "logs",
        help="a run's server log (reads only what it shows)",
        description="The tail of a run's server.log. With -f, what follows, across the "
        "deployment's restarts (a marker line between runs, each new run from its start) and "
        "log rotations, until the deployment ends: then the exit code is the last run's crash "
        "class (docs/exit-codes.md), 0 when it was stopped on request.",
    )
    logs.add_argument("profile", metavar="PROFILE")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines, and the next runs"
    )
    logs.add_argument(
        "--run",
        metavar="ID",
        help="a run id or a unique prefix of one (0003), or -1 for the last run, -2 for the one "
        "before (default: the current run); `orch runs PROFILE` lists them",
    )
    logs.add_argument("-n", "--lines", type=int, default=100, help="lines of the tail to show")
    logs.set_defaults(handler=_cmd_logs)

    runs = commands.add_parser(
        "runs",
        help="a deployment's runs (server starts): start, end, duration, verdict",
        description="Every run of a profile's deployment, from the agent's events: when it "
        "started and ended, how long it ran, how long it took to READY, and its verdict "
        "(crash class and exit status or signal). Run ids (or a prefix, -1, -2) go to "
        "`orch logs --run`.",
    )
    runs.add_argument("profile", metavar="PROFILE")
    runs.add_argument("--json", action="store_true", help="machine-readable output")
    runs.set_defaults(handler=_cmd_runs)

    plan = commands.add_parser(
        "plan",
        help="predict the effective configuration with the target's real SGLang, no server",
        description="Run the rendered command line through SGLang's own parsing and resolution "
        "(on the host with the profile's python, or with --local-sglang in a local venv of the "
        "same version, the GPU simulated from gpu.type): argparse and resolution errors with "
        "the function that raised, the predicted value of every field the profile sets, and "
        "the SGLang step behind each change.",
    )
    plan.add_argument("profile", metavar="PROFILE")
    plan.add_argument("--json", action="store_true", help="the stable machine-readable format")
    plan.add_argument("--all", action="store_true", help="also the defaults SGLang fills in")
    plan.add_argument("--wide", action="store_true", help="values whole, never cut")
    _local_sglang_arguments(plan)
    plan.set_defaults(handler=_cmd_plan)

    lock = commands.add_parser(
        "lock",
        help="write profiles/<name>.lock.json: the predicted effective values, for review in git",
    )
    lock.add_argument("profile", metavar="PROFILE")
    _local_sglang_arguments(lock)
    lock.set_defaults(handler=_cmd_lock)

    diff = commands.add_parser(
        "diff-effective",
        help="compare the profile with what the server received and what SGLang resolved",
        description="Field by field: the profile, the server process's command line and "
        "environment (/proc on the host), and SGLang's resolved configuration (/server_info, "
        "else the server_args= log line). Exit 0 when every field the profile sets matches, "
        "1 on drift.",
    )
    diff.add_argument("profile", metavar="PROFILE")
    diff.add_argument("--json", action="store_true", help="the stable machine-readable format")
    diff.add_argument(
        "--all", action="store_true", help="also the fields left to SGLang that it filled in"
    )
    diff.add_argument("--wide", action="store_true", help="values whole, never cut")
    diff.add_argument("--pid", type=int, help="the server's pid (a server not started by orch)")
    diff.add_argument("--log", metavar="PATH", help="its log on the host, for the server_args line")
    diff.set_defaults(handler=_cmd_diff_effective)

    init = commands.add_parser(
        "init",
        help="scaffold a team's profiles repository (profiles/, known_hosts, a pre-commit hook)",
        description="Write profiles/hosts.yaml, an example profile, profiles/known_hosts and a "
        "pre-commit hook running `orch validate --strict` into DIR. Never overwrites a file.",
    )
    init.add_argument("directory", metavar="DIR", nargs="?", default=".", type=Path)
    init.set_defaults(handler=_cmd_init)

    hosts = commands.add_parser("hosts", help="host keys: orch hosts trust HOST")
    host_commands = hosts.add_subparsers(dest="hosts_command", required=True)
    trust = host_commands.add_parser(
        "trust", help="show a host's key fingerprint and pin it in profiles/known_hosts"
    )
    trust.add_argument("host", metavar="HOST")
    trust.add_argument("--yes", action="store_true", help="pin without asking")
    trust.set_defaults(handler=_cmd_hosts_trust)
    _describe(commands)
    return parser


# What each subcommand's --help ends with: examples a user can paste.
EXAMPLES: dict[str, str] = {
    "render": "orch render qwen36-mtp-b200\n  orch render qwen36-mtp-b200 --script > launch.sh",
    "validate": "orch validate\n  orch validate --strict qwen36-mtp-b200   # in CI",
    "profiles": "orch profiles",
    "up": "orch up qwen36-mtp-b200\n  orch up qwen36-mtp-b200 --replace      # a changed profile",
    "down": "orch down qwen36-mtp-b200\n  orch down qwen36-mtp-b200 --timeout 60",
    "restart": "orch restart qwen36-mtp-b200",
    "status": "orch status\n  orch status qwen36-mtp-b200 --json",
    "logs": "orch logs qwen36-mtp-b200 -f\n  orch logs qwen36-mtp-b200 --run -2 -n 500",
    "runs": "orch runs qwen36-mtp-b200",
    "plan": "orch plan qwen36-mtp-b200\n  orch plan qwen36-mtp-b200 --local-sglang "
    "~/.cache/orch/sglang-venvs/0.5.11/bin/python --model-config config.json",
    "lock": "orch lock qwen36-mtp-b200 && git diff profiles/qwen36-mtp-b200.lock.json",
    "diff-effective": "orch diff-effective qwen36-mtp-b200\n"
    "  orch diff-effective qwen36-mtp-b200 --json --all",
    "hosts": "orch hosts trust b200-1",
    "init": "orch init ~/src/team-profiles",
}


def _describe(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Every subcommand: a description (its one-line help when it has no longer one), its
    examples, and its defaults shown in --help."""
    helps = {action.dest: action.help for action in commands._choices_actions}
    for name, sub in commands.choices.items():
        sub.formatter_class = _HelpFormatter
        if not sub.description:
            sub.description = (helps.get(name) or "").capitalize()
        if name in EXAMPLES:
            sub.epilog = "example:\n  " + EXAMPLES[name]


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; an option's default shown where it says something (not
    None, not a switch's False) and the help does not already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and action.option_strings and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _launch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-plan", action="store_true", help="skip SGLang's own parse-and-resolve preflight"
    )
    parser.add_argument(
        "--force", action="store_true", help="launch even when the plan fails or moves a pin"
    )
    _take_over_option(parser)


def _take_over_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--take-over",
        action="store_true",
        help="act on a deployment of this name launched from another profiles repository",
    )


class RedactingStream:
    """A text stream that writes through the Redactor, across writes: a tail that could be the
    start of a secret is held back until the next write shows whether it is one (``close``
    writes what is left). ``flush`` flushes the stream, not the held-back tail."""

    def __init__(self, stream: TextIO, redact: Redactor) -> None:
        self._stream = stream
        self._redact = redact
        self._held = ""

    def write(self, text: str) -> None:
        text = self._redact(self._held + text)
        keep = self._redact.unsafe_tail(text)
        self._held = text[len(text) - keep :] if keep else ""
        if keep:
            text = text[: len(text) - keep]
        if text:
            self._stream.write(text)

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        if self._held:
            self._stream.write(self._redact(self._held))
            self._held = ""
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()


class _Output:
    """Where the CLI writes: both streams through one Redactor holding the secrets the command
    read (they join it when the command builds its Launch). Tests pass their own streams."""

    def __init__(self, out: TextIO, err: TextIO, redact: Redactor) -> None:
        self.redact = redact
        self.out = RedactingStream(out, redact)
        self.err = RedactingStream(err, redact)

    def write(self, texts: Iterable[Text]) -> None:
        for text in texts:
            stream = self.err if text.err else self.out
            if text.text:
                stream.write(text.text)
            if text.flush:
                stream.flush()

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, error: OrchError) -> None:
        from orchestrator import show

        self.write(show.error(error.message, error.hint))

    def finding(self, found: Finding) -> None:
        from orchestrator import show

        self.write(show.finding(found))

    def close(self) -> None:
        self.out.close()
        self.err.close()


def _store(args: argparse.Namespace) -> ProfileStore:
    from orchestrator.profile import ProfileStore

    cwd = Path.cwd()
    return ProfileStore(
        find_profiles_dir(args.profiles, cwd), display_root=cwd, local_python=sys.executable
    )


def _context(args: argparse.Namespace, output: _Output) -> Context:
    from orchestrator.commands.context import Context

    return Context(
        store=_store(args), environ=os.environ, local_python=sys.executable,
        redactor=output.redact,
    )  # fmt: skip


def _cmd_render(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import render

    loaded = _store(args).load(args.profile)
    for found in loaded.findings:
        output.finding(found)
    command = render.render(loaded.profile, loaded.table)
    if args.json:
        output.print(render.command_json(command))
    elif args.script:
        output.out.write(render.launcher_script(command))
    else:
        output.print(render.format_command(command, multiline=not args.one_line))
    return ExitCode.OK


def _cmd_validate(args: argparse.Namespace, output: _Output) -> int:
    """Every profile named (else every file of the directory) is checked and reported; one bad
    file never stops the others. CONFIG when any is invalid (docs/exit-codes.md)."""
    from orchestrator.commands.lockfile import stale_lock
    from orchestrator.profile_checks import INVENTORY_FILE

    store = _store(args)
    names = args.names or store.names()
    strays = [] if args.names else store.strays()
    if not names and not strays:
        raise ProfileError(
            f"no profiles in {store.root}", f"create {store.root}/<name>.yaml, or pass --profiles"
        )
    for stray in strays:
        output.error(stray)
    inventory_errors = _failures(store.inventory)
    for error in inventory_errors:
        output.error(error)
    failed = warned = 0
    for name in names:
        try:
            loaded = store.load(name)
        except (InvalidProfile, ProfileError) as exc:
            failed += 1
            errors = _errors_of(exc)
            if inventory_errors and errors == inventory_errors:  # already reported above
                errors = [
                    ProfileError(
                        f"not checked: {INVENTORY_FILE} is invalid",
                        source=store.display(store.path_of(name)),
                    )
                ]
            for error in errors:
                output.error(error)
            continue
        for found in loaded.findings:
            output.finding(found)
        warned += any(f.severity is Severity.WARNING for f in loaded.findings)
        stale = stale_lock(store.root, loaded)
        if stale is not None:
            failed += 1
            output.error(stale)
            continue
        profile = loaded.profile
        version = profile.sglang_version or f"unpinned, checked as {loaded.table.version}"
        where = "abstract base" if profile.abstract else f"host {profile.host.name}"
        output.print(f"ok  {name}  (SGLang {version}, {where})")
    if failed or strays or inventory_errors or (args.strict and warned):
        parts = [f"{failed} of {len(names)} profile(s) invalid"]
        if strays:
            parts.append(f"{len(strays)} file(s) that are not profiles")
        if inventory_errors:
            parts.append(f"{INVENTORY_FILE} invalid")
        if args.strict and warned:
            parts.append(f"{warned} with warnings (--strict)")
        output.err.write(f"orch: {', '.join(parts)}\n")
        return ExitCode.CONFIG
    return ExitCode.OK


def _errors_of(exc: InvalidProfile | ProfileError) -> list[ProfileError]:
    return list(exc.errors) if isinstance(exc, InvalidProfile) else [exc]


def _failures(step: Callable[[], object]) -> list[ProfileError]:
    """The profile errors ``step`` raises, one by one; none when it succeeds."""
    try:
        step()
    except (InvalidProfile, ProfileError) as exc:
        return _errors_of(exc)
    return []


def _cmd_profiles(args: argparse.Namespace, output: _Output) -> int:
    """Every profile, an invalid one as a row with its first error; CONFIG when any is invalid
    (after listing all of them), so that scripts notice."""
    store = _store(args)
    output.print(f"# {store.root}")
    invalid = 0
    for name in store.names():
        try:
            loaded = store.load(name)
        except OrchError as exc:
            invalid += 1
            output.print(f"{name:32} INVALID: {exc.message}")
            continue
        profile = loaded.profile
        where = "(abstract)" if profile.abstract else profile.host.name
        summary = profile.description.splitlines()[0] if profile.description else ""
        output.print(f"{name:32} {where:16} {summary}")
    for stray in store.strays():
        invalid += 1
        output.print(f"{Path(stray.source or '?').name:32} INVALID: {stray.message}")
    if invalid:
        output.err.write(f"orch: {invalid} invalid; `orch validate` shows every error\n")
        return ExitCode.CONFIG
    return ExitCode.OK


def _cmd_up(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands.up import up

    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile)
        view = show.UpView(tty=output.out.isatty())
        for event in up(
            ctx, launch, replace_running=args.replace, check_plan=not args.no_plan,
            force=args.force, take_over=args.take_over,
        ):  # fmt: skip
            output.write(view.event(event))
        return view.exit_code
    finally:
        ctx.close()


def _cmd_down(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import ops

    ctx = _context(args, output)
    reply = None
    try:
        # restart comes through here too, without a --timeout of its own
        for step in ops.down(
            ctx, args.profile, timeout_s=getattr(args, "timeout", None), take_over=args.take_over
        ):
            if isinstance(step, ops.Stopping):
                output.write(show.stopping(step))
            else:
                reply = step
    finally:
        ctx.close()
    output.write(show.down(args.profile, reply))
    return ExitCode.OK


def _cmd_restart(args: argparse.Namespace, output: _Output) -> int:
    _cmd_down(args, output)
    return _cmd_up(args, output)


def _cmd_status(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import ops

    ctx = _context(args, output)
    listing = args.all or not args.names
    try:
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
        rows = (ops.status(ctx, launchable) if launchable else []) + invalid
    finally:
        ctx.close()
    order = {name: index for index, name in enumerate(names)}
    rows.sort(key=lambda row: order[row.profile])
    if args.json:
        output.print(json.dumps([show.status_json(row) for row in rows], indent=2))
    else:
        output.print(show.status_table(rows, wide=args.wide))
    if listing:  # every profile: a host that cannot be reached is a row, not a failure
        return ExitCode.CONFIG if invalid else ExitCode.OK
    failed = [row for row in rows if row.error is not None]
    return max((row.error.exit_code for row in failed if row.error), default=ExitCode.OK)


def _cmd_logs(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import ops

    ctx = _context(args, output)
    at_line_start = True
    try:
        for item in ops.logs(
            ctx, args.profile, run=args.run, follow_log=args.follow, lines=args.lines
        ):
            if isinstance(item, ops.RunEnded):
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


def _cmd_runs(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import ops

    ctx = _context(args, output)
    try:
        view = ops.runs(ctx, args.profile)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show.runs_json(view), indent=2))
    else:
        output.print(show.runs_table(view))
    return ExitCode.OK


def _local_sglang_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--local-sglang",
        metavar="PYTHON",
        help="plan with this local python (a venv of the profile's SGLang version; "
        "scripts/build-sglang-venv.sh builds one), the GPU simulated from gpu.type",
    )
    parser.add_argument(
        "--model-config",
        metavar="FILE",
        type=Path,
        help="the model's config.json, when model.path is not on this machine",
    )


def _local(args: argparse.Namespace) -> LocalSGLang | None:
    from orchestrator.commands.planning import LocalSGLang

    if args.local_sglang is None:
        if args.model_config is not None:
            raise ProfileError(
                "--model-config goes with --local-sglang", "add --local-sglang PYTHON"
            )
        return None
    return LocalSGLang(args.local_sglang, args.model_config)


def _cmd_plan(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import planning

    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        report = planning.predict(ctx, launch, local=_local(args))
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show.plan_json(report, args.all), indent=2, default=str))
    else:
        output.print(show.plan_text(report, args.all, wide=args.wide))
    if report.error is not None:
        if not args.json:
            output.error(OrchError(report.refusal(), report.error.hint))
        return ExitCode.PLAN_REFUSED
    if report.pinned_changes(launch.profile.pin, launch.table):
        return ExitCode.DRIFT
    return ExitCode.OK


def _cmd_lock(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import planning

    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile)
        target, document, report = planning.write_lock(ctx, launch, local=_local(args))
    finally:
        ctx.close()
    output.print(show.lock_written(target, document, report))
    return ExitCode.OK


def _cmd_diff_effective(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import show
    from orchestrator.commands import effective

    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        report = effective.diff_effective(
            ctx, launch, include_defaulted=args.all, pid=args.pid, log=args.log
        )
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show.diff_json(report), indent=2, default=str))
    else:
        output.print(show.diff_text(report, wide=args.wide))
    return ExitCode.DRIFT if report.drift else ExitCode.OK


def _cmd_init(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.commands.scaffold import init

    done = init(args.directory)
    for path in done.written:
        output.print(f"wrote {path}")
    output.print(
        f"next: edit {done.root / 'profiles'}, then `orch --profiles {done.root / 'profiles'} "
        "validate`; commit it, and `git config core.hooksPath .githooks` (or `pre-commit "
        "install`) so that every commit is validated"
    )
    return ExitCode.OK


def _cmd_hosts_trust(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.transport import ssh

    store = _store(args)
    inventory = store.inventory()
    if args.host not in inventory or inventory[args.host].is_local:
        raise ProfileError(
            f"no remote host {args.host!r} in hosts.yaml",
            f"hosts: {', '.join(sorted(n for n, h in inventory.items() if not h.is_local))}",
        )
    host = inventory[args.host]
    scanned = ssh.fetch_host_key(host)
    output.print(f"{args.host} ({scanned.known_hosts_name}) presents {scanned.key_type} key")
    output.print(f"  {scanned.fingerprint}")
    if not args.yes:
        output.out.write("Compare it with the host's own `ssh-keygen -lf` output. Pin it? [y/N] ")
        output.out.flush()
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            output.print("not pinned")
            return ExitCode.HOST_KEY
    target = store.root / "known_hosts"
    added = ssh.pin_host_key(target, scanned)
    output.print(f"{'pinned in' if added else 'already pinned in'} {target}")
    return ExitCode.OK


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    from orchestrator.render import Redactor

    args = _parser().parse_args(argv)
    output = _Output(out or sys.stdout, err or sys.stderr, Redactor())
    handler: Callable[[argparse.Namespace, _Output], int] = args.handler
    try:
        return handler(args, output)
    except InvalidProfile as exc:
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
    except BrokenPipeError:
        # The reader went away (`orch logs -f | head`): end quietly, and keep Python from
        # complaining when it flushes stdout at exit.
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return ExitCode.OK
    except Exception as exc:  # the last resort: one redacted line, not a traceback
        if args.debug:
            raise
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


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
