"""The commands that read the profiles directory and touch no server: render, export, import,
validate, profiles, init, hosts trust."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.inputs import node_rank, store_for
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode, InvalidProfile, OrchError, ProfileError, UsageError
from orchestrator.model import Profile, Severity
from orchestrator.sglang.argtable import ArgTable

if TYPE_CHECKING:
    from orchestrator.export.slurm import SlurmOptions


def handle_render(args: argparse.Namespace, output: Output) -> int:
    from orchestrator import render

    loaded = store_for(args).load(args.profile)
    for found in loaded.findings:
        output.finding(found)
    profile = render.gated(loaded.profile, loaded.table)
    if profile.replicas or args.replica is not None:
        return _render_replicas(args, output, profile, loaded.table)
    commands = render.render_members(profile, loaded.table)
    group = profile.group
    if args.node is not None:
        commands = (commands[node_rank(args.node, args.profile, len(commands))],)
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


def _render_replicas(
    args: argparse.Namespace, output: Output, profile: Profile, table: ArgTable
) -> int:
    """Every replica's command (each a server of its own), or ``--replica I``'s alone."""
    from orchestrator import render

    count = len(profile.replicas)
    if not count:
        raise UsageError(
            f"--replica {args.replica}: {args.profile} has no replicas", "leave --replica out"
        )
    if args.replica is not None and not 0 <= args.replica < count:
        raise UsageError(
            f"--replica {args.replica}: {args.profile} has replicas 0-{count - 1}",
            "a replica's index in `replicas:`",
        )
    if args.node not in (None, 0):
        raise UsageError(f"--node {args.node}: {args.profile}'s replicas are single servers")
    if args.replica is not None:
        command = render.render(profile.for_replica(args.replica), table)
        if args.json:
            output.print(render.command_json(command))
        elif args.script:
            output.out.write(render.launcher_script(command))
        else:
            output.print(render.format_command(command, multiline=not args.one_line))
        return ExitCode.OK
    if args.script:
        raise UsageError(
            f"{args.profile} has {count} replicas: one script per replica",
            f"orch render {args.profile} --script --replica 0",
        )
    commands = render.render_replicas(profile, table)
    if args.json:
        output.print(render.replicas_json(profile, commands))
        return ExitCode.OK
    from orchestrator.cli.show import core as show

    for text in show.replica_commands(profile, commands, one_line=args.one_line):
        output.print(text)
    return ExitCode.OK


def handle_export(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.commands.context import profiles_origin
    from orchestrator.export import export
    from orchestrator.export.common import Provenance

    if args.engine == "prometheus-sd":
        return _export_prometheus_sd(args, output)
    if args.all_profiles or len(args.profile) != 1:
        raise UsageError(
            f"orch export {args.engine} takes one PROFILE",
            f"orch export {args.engine} PROFILE [-o FILE]",
        )
    args.profile = args.profile[0]
    store = store_for(args)
    loaded = store.load(args.profile)
    for found in loaded.findings:
        output.finding(found)
    origin = profiles_origin(store.root)
    provenance = Provenance(loaded.profile.source, origin.commit, origin.dirty)
    result = export(loaded.profile, loaded.table, args.engine, provenance, _slurm_options(args))
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


def _export_prometheus_sd(args: argparse.Namespace, output: Output) -> int:
    """The running servers' Prometheus file_sd targets (docs/export.md), written atomically."""
    from orchestrator.cli.inputs import context_for
    from orchestrator.commands import prometheus_sd

    if args.all_profiles and args.profile:
        raise UsageError(
            "--all or PROFILE names, not both", "orch export prometheus-sd --all -o targets.json"
        )
    _slurm_options(args)  # --partition and the rest: a usage error here
    ctx = context_for(args, output)
    try:
        found = prometheus_sd.export(ctx, prometheus_sd.Request(tuple(args.profile)))
    finally:
        ctx.close()
    if args.output is None:
        output.out.write(found.text)
    else:
        from orchestrator.files import replace_file

        # no secret in it (addresses, ports, names, commits): a Prometheus user reads it, 0644
        written = replace_file(
            args.output, found.text, hint="leave out -o to write to stdout, or -o a regular file"
        )
        shown = args.output if written == args.output else f"{args.output} (-> {written})"
        output.print(f"wrote {shown}: {len(found.groups)} Prometheus target(s)")
    for note in found.notes:  # on stderr when the document is stdout: it stays valid JSON
        if args.output is None:
            output.err.write(f"orch: note: {note}\n")
        else:
            output.print(f"  note: {note}")
    return ExitCode.OK


def _slurm_options(args: argparse.Namespace) -> SlurmOptions | None:
    """``--partition`` and the rest: for ``orch export slurm`` only (else a usage error)."""
    from orchestrator.export.slurm import SlurmOptions

    given = {
        "--partition": args.partition,
        "--account": args.account,
        "--time": args.time,
        "--no-gres": args.no_gres or None,
        "--exclusive": args.exclusive or None,
    }
    if args.engine != "slurm":
        flags = [flag for flag, value in given.items() if value is not None]
        if flags:
            raise UsageError(
                f"{', '.join(flags)}: for orch export slurm only, not {args.engine}",
                f"leave {flags[0]} out",
            )
        return None
    return SlurmOptions(
        partition=args.partition,
        account=args.account,
        time=args.time,
        gres=not args.no_gres,
        exclusive=args.exclusive,
    )


def handle_import(args: argparse.Namespace, output: Output) -> int:
    """Scripts -> profiles (``--check``: findings only, exit 1 when there are any)."""
    from orchestrator.cli.show import importing as show_import
    from orchestrator.commands import importing
    from orchestrator.importing.check import check_scripts
    from orchestrator.importing.scripts import script_secrets
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
        files,
        store_for(args),
        name=args.name,
        host=args.host,
        sglang=args.sglang,
        given=given,
        extends=args.extends,
        launch=args.launch,
        output=args.output,
        redactor=output.redact,
    )
    output.write(show_import.written(written))
    return ExitCode.OK


def handle_validate(args: argparse.Namespace, output: Output) -> int:
    """Every profile named (else every file of the directory) is checked and reported; one bad
    file never stops the others. CONFIG when any is invalid (docs/exit-codes.md)."""
    from orchestrator.commands.lockfile import stale_lock
    from orchestrator.profile.inventory import INVENTORY_FILE

    store = store_for(args)
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


def handle_profiles(args: argparse.Namespace, output: Output) -> int:
    """Every profile, an invalid one as a row with its first error; CONFIG when any is invalid
    (after listing all of them), so that scripts notice."""
    store = store_for(args)
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


def handle_init(args: argparse.Namespace, output: Output) -> int:
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


def handle_hosts_trust(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.transport import ssh

    store = store_for(args)
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


def handle_hosts(args: argparse.Namespace, output: Output) -> int:
    """``orch hosts`` without a subcommand."""
    raise UsageError("orch hosts needs a subcommand", "orch hosts trust HOST (see orch hosts -h)")
