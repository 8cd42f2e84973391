"""``orch``: the only module that reads sys.argv, prints, or exits.

argparse, dispatch, main. Commands (``commands/``) return values or yield events; ``show.py``
words them; this module writes the words, every byte through one ``Redactor`` that holds the
secrets the command read, errors included, and through :func:`terminal_safe`, so that no
control character from a server, a log, a profile or a file name reaches the terminal raw.
Heavy modules are imported inside the handlers that need
them, so ``orch --help``, ``orch render`` and ``orch validate`` start fast and never import
paramiko.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import re
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from orchestrator.cli import arguments
from orchestrator.cli.arguments import find_profiles_dir
from orchestrator.errors import ExitCode, InvalidProfile, OrchError, ProfileError, UsageError
from orchestrator.model import Finding, Severity

if TYPE_CHECKING:
    from orchestrator.cli.show.text import Text
    from orchestrator.commands.context import Context
    from orchestrator.commands.planning import LocalSGLang
    from orchestrator.profile.store import ProfileStore
    from orchestrator.render import Redactor


# C0 but tab and newline, DEL, C1: what a terminal acts on (ESC starts CSI, OSC and the rest;
# 0x9b is CSI alone). A carriage return is a line break unless a newline follows it.
_CONTROL = re.compile(r"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character written as a ``\\uXXXX`` escape (also a valid
    JSON escape of the same character, so JSON output stays JSON), a lone carriage return as a
    line break (a progress bar's redraws read as lines; no line can be overwritten)."""
    return _CONTROL.sub(lambda found: "\n" if found[0] == "\r" else f"\\u{ord(found[0]):04x}", text)


class RedactingStream:
    """A text stream that writes through the Redactor, across writes: a tail that could be the
    start of a secret is held back until the next write shows whether it is one (``close``
    writes what is left). ``flush`` flushes the stream, not the held-back tail. What it writes
    is :func:`terminal_safe` (a carriage return at the end waits for the next write, which
    tells whether a newline follows); only :meth:`control` writes orch's own sequences."""

    def __init__(self, stream: TextIO, redact: Redactor) -> None:
        self._stream = stream
        self._redact = redact
        self._held = ""

    def write(self, text: str) -> None:
        text = self._redact(self._held + text)
        keep = self._redact.unsafe_tail(text)
        if not keep and text.endswith("\r"):
            keep = 1
        self._held = text[len(text) - keep :] if keep else ""
        if keep:
            text = text[: len(text) - keep]
        if text:
            self._stream.write(terminal_safe(text))

    def control(self, sequence: str) -> None:
        """orch's own terminal control (a colour, a progress bar's carriage return), written as
        is after what is held back: never a value from outside (show.py builds it from
        constants)."""
        self._release()
        self._stream.write(sequence)

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._release()
        self._stream.flush()

    def _release(self) -> None:
        if self._held:
            self._stream.write(terminal_safe(self._redact(self._held)))
            self._held = ""

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
            if text.control:
                stream.control(text.text)
            elif text.text:
                stream.write(text.text)
            if text.flush:
                stream.flush()

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, error: OrchError) -> None:
        from orchestrator.cli.show import text

        self.write(text.error(error.message, error.hint))

    def traceback(self, exc: BaseException) -> None:
        """``--debug``: the exception's traceback, through the same redacting stream (a
        secret in a frame's text is replaced like anywhere else); the exit code stays the
        error's."""
        import traceback

        self.err.write("".join(traceback.format_exception(exc)))

    def finding(self, found: Finding) -> None:
        from orchestrator.cli.show import text

        self.write(text.finding(found))

    def close(self) -> None:
        self.out.close()
        self.err.close()


def _store(args: argparse.Namespace) -> ProfileStore:
    from orchestrator.profile.store import ProfileStore

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
    profile = render.gated(loaded.profile, loaded.table)
    commands = render.render_members(profile, loaded.table)
    group = profile.group
    if args.node is not None:
        commands = (commands[_node(args.node, args.profile, len(commands))],)
    elif group is not None and args.script:
        raise UsageError(
            f"{args.profile} is a group of {group.nnodes} nodes: one script per rank",
            f"orch render {args.profile} --script --node 0",
        )
    if args.json:
        if group is None or args.node is not None:
            output.print(render.command_json(commands[0]))
        else:
            output.print(render.group_json(profile, loaded.table))
    elif args.script:
        output.out.write(render.launcher_script(commands[0]))
    elif group is None or args.node is not None:
        output.print(render.format_command(commands[0], multiline=not args.one_line))
    else:
        from orchestrator.cli.show import (
            core as show,  # the event formatters: only a group's commands need it
        )

        for text in show.group_commands(profile, commands, one_line=args.one_line):
            output.print(text)
    return ExitCode.OK


def _cmd_export(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.commands.context import profiles_origin
    from orchestrator.export import engines as export

    store = _store(args)
    loaded = store.load(args.profile)
    for found in loaded.findings:
        output.finding(found)
    origin = profiles_origin(store.root)
    provenance = export.Provenance(loaded.profile.source, origin.commit, origin.dirty)
    result = export.export(loaded.profile, loaded.table, args.engine, provenance)
    if args.output is None:
        output.out.write(result.text)  # the notes are its header's comments
        return ExitCode.OK
    from orchestrator.files import replace_file

    written = replace_file(
        args.output, result.text, hint="leave out -o to write to stdout, or -o a regular file"
    )  # it holds no secret values; a reader never sees half a manifest
    shown = args.output if written == args.output else f"{args.output} (-> {written})"
    output.print(f"wrote {shown}: {args.engine} for {result.profile}")
    for note in result.notes:
        output.print(f"  note: {note}")
    return ExitCode.OK


def _cmd_import(args: argparse.Namespace, output: _Output) -> int:
    """Scripts -> profiles (``--check``: findings only, exit 1 when there are any)."""
    from orchestrator.cli.show import importing as show_import
    from orchestrator.commands import importing
    from orchestrator.importing.check import check_scripts
    from orchestrator.importing.profiles import script_secrets
    from orchestrator.sglang.argtable import parse_version

    if args.sglang is not None and parse_version(args.sglang) is None:
        raise UsageError(
            f"--sglang {args.sglang!r} is not an SGLang version",
            "a release like 0.5.23 (`orch import --help`)",
        )
    stdin = getattr(sys.stdin, "buffer", sys.stdin)  # bytes where there are bytes
    stdin_text = importing.read_stdin(stdin) if importing.STDIN in args.scripts else None
    files = importing.read_scripts(args.scripts, stdin_text)
    given = importing.parse_settings(args.settings)
    # every secret the scripts hold, before anything is shown (import's notes never quote one;
    # this also covers --check's quotes of the script, and errors)
    output.redact.add_found((secret.name, secret.value) for secret in script_secrets(files, given))
    if args.check:
        report = check_scripts(files, sglang=args.sglang, given=given)
        if args.json:
            output.print(json.dumps(show_import.check_json(report), indent=2))
        else:
            output.write(show_import.check_report(report))
        return ExitCode.DRIFT if report.problems else ExitCode.OK
    if args.json:
        raise UsageError("--json goes with --check", "orch import --check --json SCRIPT")
    written = importing.run_import(
        files, _store(args), name=args.name, host=args.host, sglang=args.sglang, given=given,
        extends=args.extends, launch=args.launch, output=args.output, redactor=output.redact,
    )  # fmt: skip
    output.write(show_import.written(written))
    return ExitCode.OK


def _cmd_validate(args: argparse.Namespace, output: _Output) -> int:
    """Every profile named (else every file of the directory) is checked and reported; one bad
    file never stops the others. CONFIG when any is invalid (docs/exit-codes.md)."""
    from orchestrator.commands.lockfile import stale_lock
    from orchestrator.profile.checks import INVENTORY_FILE

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
    from orchestrator.cli.show import core as show
    from orchestrator.commands.context import UpOptions
    from orchestrator.commands.up import up

    ctx = _context(args, output)
    options = UpOptions(
        replace=args.replace,
        check_plan=not args.no_plan,
        force=args.force,
        take_over=args.take_over,
    )
    try:
        launch = ctx.launch(args.profile)
        view = show.UpView(tty=output.out.isatty())
        for event in up(ctx, launch, options):
            output.write(view.event(event))
        return view.exit_code
    finally:
        ctx.close()


def _cmd_down(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import events, ops

    ctx = _context(args, output)
    stopped = False
    try:
        # restart comes through here too, without a --timeout of its own
        for step in ops.down(
            ctx, args.profile, timeout_s=getattr(args, "timeout", None), take_over=args.take_over
        ):
            if isinstance(step, events.Stopping):
                output.write(show.stopping(step))
            else:
                stopped = True
                output.write(show.down(step.label, step.reply))
    finally:
        ctx.close()
    if not stopped:
        output.write(show.down(args.profile, None))
    return ExitCode.OK


def _cmd_restart(args: argparse.Namespace, output: _Output) -> int:
    _cmd_down(args, output)
    return _cmd_up(args, output)


def _cmd_status(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import core as show
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
    from orchestrator.cli.show import core as show
    from orchestrator.commands import events
    from orchestrator.commands import logs as logs_

    ctx = _context(args, output)
    at_line_start = True
    if args.node == arguments.ALL_NODES:
        return _logs_every_node(args, output)
    try:
        for item in logs_.logs(
            ctx, args.profile, run=args.run, follow_log=args.follow, lines=args.lines,
            rank=args.node,
        ):  # fmt: skip
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


def _logs_every_node(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import events, group

    ctx = _context(args, output)
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


def _cmd_runs(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import core as show
    from orchestrator.commands import logs as logs_

    ctx = _context(args, output)
    try:
        view = logs_.runs(ctx, args.profile, rank=args.node)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show.runs_json(view), indent=2))
    else:
        output.print(show.runs_table(view))
    return ExitCode.OK


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
    from orchestrator.cli.show import reports as show_reports
    from orchestrator.commands import planning

    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        report = planning.predict(ctx, launch, local=_local(args))
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(show_reports.plan_json(report, args.all), indent=2, default=str))
    else:
        output.write(
            show_reports.plan_text(report, args.all, wide=args.wide, tty=output.out.isatty())
        )
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


def _cmd_lock(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import reports as show_reports
    from orchestrator.commands import planning

    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile)
        target, document, report = planning.write_lock(ctx, launch, local=_local(args))
    finally:
        ctx.close()
    output.print(show_reports.lock_written(target, document, report))
    return ExitCode.OK


def _cmd_upgrade(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import upgrade as show_upgrade
    from orchestrator.commands import upgrading

    ctx = _context(args, output)
    request = upgrading.Request(
        args.profile, args.to, source_python=args.from_sglang, target_python=args.to_sglang,
        model_config=args.model_config, write=args.write,
    )  # fmt: skip
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


def _cmd_diff_effective(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.cli.show import reports as show_reports
    from orchestrator.commands import effective

    if args.url is not None and (args.pid is not None or args.log is not None):
        raise UsageError(
            "--url asks the server over HTTP; --pid and --log read a process and a log on the "
            "profile's host: give one or the other"
        )
    ctx = _context(args, output)
    try:
        launch = ctx.launch(args.profile, require_secrets=False)
        rank = _node(args.node, launch.profile.name, len(launch.members))
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


def _node(rank: int | None, profile: str, nodes: int) -> int:
    """``--node RANK`` checked against the profile's nodes (0 when not given)."""
    if rank is None:
        return 0
    if not 0 <= rank < nodes:
        raise UsageError(
            f"--node {rank}: {profile} has rank(s) 0-{nodes - 1}",
            "a rank of group.nodes, 0 for the first",
        )
    return rank


def _cmd_init(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator.commands.scaffold import init

    done = init(args.directory)
    for path in done.written:
        output.print(f"wrote {path}")
    output.print(f"git: {done.git}")
    output.print(
        f"next: cd {done.root} && orch validate && orch up demo (this machine, orch's SGLang "
        "stand-in); edit profiles/ for your hosts and models, then commit"
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


def _cmd_hosts(args: argparse.Namespace, output: _Output) -> int:
    """``orch hosts`` without a subcommand."""
    raise UsageError("orch hosts needs a subcommand", "orch hosts trust HOST (see orch hosts -h)")


def main(
    argv: Sequence[str] | None = None, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    from orchestrator.render import Redactor

    args = arguments.parser().parse_args(argv)
    output = _Output(out or sys.stdout, err or sys.stderr, Redactor())
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


HANDLERS: dict[str, Callable[[argparse.Namespace, _Output], int]] = {
    "render": _cmd_render,
    "export": _cmd_export,
    "import": _cmd_import,
    "validate": _cmd_validate,
    "profiles": _cmd_profiles,
    "up": _cmd_up,
    "down": _cmd_down,
    "restart": _cmd_restart,
    "status": _cmd_status,
    "logs": _cmd_logs,
    "runs": _cmd_runs,
    "plan": _cmd_plan,
    "lock": _cmd_lock,
    "upgrade": _cmd_upgrade,
    "diff-effective": _cmd_diff_effective,
    "init": _cmd_init,
    "hosts": _cmd_hosts,
    "hosts-trust": _cmd_hosts_trust,
}


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
