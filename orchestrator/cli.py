"""``orch``: the only module that reads sys.argv, prints, or exits.

Stages return values; this module turns them into text (or ``--json``) and exit codes. Heavy
modules are imported inside the commands that need them, so ``orch --help``, ``orch render``
and ``orch validate`` start fast and never import paramiko.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar, TextIO

from orchestrator import __version__
from orchestrator.errors import ExitCode, OrchError, ProfileError, ProfileErrors
from orchestrator.model import Finding, Severity

if TYPE_CHECKING:
    from orchestrator import pipeline, plan, verify
    from orchestrator.observe import LogEvent
    from orchestrator.pipeline import Context, UpEvent
    from orchestrator.profile import LoadedProfile, ProfileStore

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

    up = commands.add_parser(
        "up",
        help="preflight, push and start a profile's server under the remote agent; follow it",
        description="Start a profile's server supervised on its host and stream its startup. "
        "Idempotent: the same plan already running is followed, not started twice.",
    )
    up.add_argument("profile", metavar="PROFILE")
    up.add_argument("--replace", action="store_true", help="stop a different running plan first")
    up.add_argument(
        "--no-plan", action="store_true", help="skip SGLang's own parse-and-resolve preflight"
    )
    up.add_argument(
        "--force", action="store_true", help="launch even when the plan fails or moves a pin"
    )
    up.set_defaults(handler=_cmd_up)

    down = commands.add_parser("down", help="stop a profile's server and sweep its processes")
    down.add_argument("profile", metavar="PROFILE")
    down.set_defaults(handler=_cmd_down)

    restart = commands.add_parser("restart", help="down, then up")
    restart.add_argument("profile", metavar="PROFILE")
    restart.set_defaults(handler=_cmd_restart)

    status = commands.add_parser("status", help="state of deployments: pid, uptime, restarts ...")
    status.add_argument("names", metavar="PROFILE", nargs="*")
    status.add_argument("--all", action="store_true", help="every launchable profile")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(handler=_cmd_status)

    logs = commands.add_parser("logs", help="a run's server log (reads only what it shows)")
    logs.add_argument("profile", metavar="PROFILE")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new lines")
    logs.add_argument("--run", metavar="ID", help="a run id (default: the current or last run)")
    logs.add_argument("-n", "--lines", type=int, default=100, help="lines of the tail to show")
    logs.set_defaults(handler=_cmd_logs)

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
    diff.add_argument("--pid", type=int, help="the server's pid (a server not started by orch)")
    diff.add_argument("--log", metavar="PATH", help="its log on the host, for the server_args line")
    diff.set_defaults(handler=_cmd_diff_effective)

    hosts = commands.add_parser("hosts", help="host keys: orch hosts trust HOST")
    host_commands = hosts.add_subparsers(dest="hosts_command", required=True)
    trust = host_commands.add_parser(
        "trust", help="show a host's key fingerprint and pin it in profiles/known_hosts"
    )
    trust.add_argument("host", metavar="HOST")
    trust.add_argument("--yes", action="store_true", help="pin without asking")
    trust.set_defaults(handler=_cmd_hosts_trust)
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


class _RedactingStream:
    """A text stream that replaces the profile's secret values before writing (server logs and
    SGLang's own lines may echo what they were given)."""

    def __init__(self, stream: TextIO, redact: Callable[[str], str]) -> None:
        self._stream = stream
        self._redact = redact

    def write(self, text: str) -> int:
        return self._stream.write(self._redact(text))

    def flush(self) -> None:
        self._stream.flush()

    def isatty(self) -> bool:
        return self._stream.isatty()


def _guarded(output: _Output, args: argparse.Namespace) -> _Output:
    """``output``, redacting the values of the profile's ``from_env`` secrets that are set."""
    from orchestrator import render

    try:
        loaded = _store(args).load(args.profile)
        if loaded.profile.abstract:
            return output
        launch = render.render(loaded.profile, loaded.table)
    except OrchError:
        return output  # the command itself reports it
    secrets = {name: os.environ[name] for name in launch.secret_names() if os.environ.get(name)}
    if not secrets:
        return output
    redact = render.Redactor(secrets)
    return _Output(
        _RedactingStream(output.out, redact),  # type: ignore[arg-type]
        _RedactingStream(output.err, redact),  # type: ignore[arg-type]
    )


def _store(args: argparse.Namespace) -> ProfileStore:
    from orchestrator.profile import ProfileStore

    cwd = Path.cwd()
    return ProfileStore(
        find_profiles_dir(args.profiles, cwd), display_root=cwd, local_python=sys.executable
    )


def _context(args: argparse.Namespace) -> Context:
    from orchestrator.pipeline import Context

    return Context(store=_store(args), environ=os.environ, local_python=sys.executable)


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
        stale = _stale_lock(store, loaded)
        if stale is not None:
            failed += 1
            output.error(stale)
            continue
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


def _stale_lock(store: ProfileStore, loaded: LoadedProfile) -> ProfileError | None:
    """A ``<name>.lock.json`` beside the profile that no longer matches it."""
    import json

    from orchestrator import plan, render

    profile = loaded.profile
    path = store.root / f"{profile.name}.lock.json"
    if profile.abstract or not path.exists():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        document = None
        problems = [f"unreadable: {exc}"]
    else:
        digest = render.plan_hash(render.render(profile, loaded.table))
        problems = plan.lock_problems(profile, digest, document, profile.sglang_version)
    if not problems:
        return None
    return ProfileError(
        f"{path}: the lock no longer matches profile {profile.name}: {'; '.join(problems)}",
        f"orch lock {profile.name} (with --local-sglang PYTHON where the host is not at hand), "
        "then review the diff",
    )


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


def _cmd_up(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import pipeline

    output = _guarded(output, args)
    ctx = _context(args)
    try:
        events = pipeline.up(
            ctx, args.profile, replace_running=args.replace, run_plan=not args.no_plan,
            force=args.force,
        )  # fmt: skip
        return _show_up(events, output)
    finally:
        ctx.close()


def _show_up(events: Iterator[UpEvent], output: _Output) -> int:
    from orchestrator import pipeline

    progress = _Progress(output)
    code: int = ExitCode.INTERNAL  # up always ends with a Verdict
    for event in events:
        if isinstance(event, pipeline.Step):
            progress.line(f"  {event.message}")
        elif isinstance(event, pipeline.Warn):
            progress.end()
            output.finding(Finding(Severity.WARNING, event.message, event.hint))
        elif isinstance(event, pipeline.Started):
            progress.line(f"  started run {event.run_id} (pid {event.pid}); log {event.log}")
        elif isinstance(event, pipeline.Attached):
            state = event.state
            progress.line(
                f"  the same plan already runs: run {state.run_id}, {state.state}, "
                f"pid {state.pid}; following it"
            )
        elif isinstance(event, pipeline.LogLine):
            progress.log_event(event.event)
        elif isinstance(event, pipeline.Planned):
            progress.end()
            _show_plan_in_up(event.report, output)
        elif isinstance(event, pipeline.Effective):
            progress.end()
            _show_effective_in_up(event, output)
        else:
            progress.end()
            code = _show_verdict(event, output)
            output.err.flush()
            output.out.flush()
    return code


def _show_verdict(event: pipeline.Verdict, output: _Output) -> int:
    """Print the verdict as soon as it comes (more may follow: what the log recorded)."""
    if event.ok:
        output.print(event.summary)
    elif event.exit_code == ExitCode.DRIFT:
        output.error(OrchError(event.summary, event.hint))
    else:
        if event.last_lines:
            output.err.write("  last lines of the log:\n")
            for line in event.last_lines[-15:]:
                output.err.write(f"  | {line}\n")
        output.error(OrchError(f"server failed: {event.summary}", event.hint))
    return event.exit_code


def _show_plan_in_up(report: plan.PlanReport, output: _Output) -> None:
    from orchestrator import verify

    if report.error is not None:
        return  # the refusal (or the --force warning) says it
    who = "orch's stand-in (NOT SGLang)" if report.standin else f"SGLang {report.sglang_version}"
    changed = report.changed
    output.print(
        f"  plan: {who} accepts the command line; "
        + (
            f"{len(changed)} field(s) would change"
            if changed
            else "no field the profile sets changes"
        )
    )
    for field in changed:
        by = ", ".join(p.source for p in field.provenance) or "SGLang"
        output.finding(Finding(
            Severity.NOTICE,
            f"plan: {field.field} {verify.show(field.profile, field.secret)} -> "
            f"{verify.show(field.effective, field.secret)} ({by})",
            field.why,
        ))  # fmt: skip


def _show_effective_in_up(event: pipeline.Effective, output: _Output) -> None:
    from orchestrator import verify

    report = event.report
    fields = [row for row in report.fields if row.verdict != verify.DEFAULTED]
    drift = report.drift
    matched = sum(1 for row in fields if row.verdict == verify.OK)
    where = report.resolved_source or "no resolved configuration"
    output.print(
        f"  effective configuration ({where}): {matched}/{len(fields)} fields as the profile "
        f"says, {len(drift)} drift"
    )
    pinned = {id(row) for row in event.pinned}
    for row in drift:
        if id(row) in pinned:
            output.error(OrchError(f"pinned {_drift_sentence(row)}"))
        else:
            output.finding(Finding(Severity.WARNING, _drift_sentence(row), None))


def _drift_sentence(row: verify.FieldRow | verify.EnvRow) -> str:
    from orchestrator import verify

    if isinstance(row, verify.EnvRow):
        got = "absent" if row.received is None else row.received
        return f"env {row.name}: {row.verdict} (profile {row.profile}, process {got})"
    text = (
        f"{row.field}: {row.verdict} (profile {verify.show(row.profile, row.secret)}, "
        f"received {verify.show(row.received, row.secret)}, "
        f"resolved {verify.show(row.resolved, row.secret)})"
    )
    return text + (f": {row.why}" if row.why else "")


class _Progress:
    """Startup phases as lines; weight loading as one bar redrawn on a terminal."""

    _PHASES: ClassVar[dict[str, str]] = {
        "config": "SGLang accepted its configuration (server_args logged)",
        "load_begin": "loading weights",
        "load_end": "weights loaded",
        "memory_pool": "memory pool allocated",
        "graph_begin": "capturing CUDA graphs",
        "graph_end": "CUDA graphs captured",
        "capacity": "capacity",
        "http_up": "HTTP server up",
        "ready": "ready line logged",
    }

    def __init__(self, output: _Output) -> None:
        self.output = output
        self.tty = output.out.isatty()
        self.open_bar = False
        self.last_done: int | None = None

    def line(self, text: str) -> None:
        self.end()
        self.output.print(text)

    def end(self) -> None:
        if self.open_bar:
            self.output.out.write("\n")
            self.open_bar = False

    def log_event(self, event: LogEvent) -> None:
        if event.kind == "load_progress" and event.done is not None and event.total:
            if event.done == self.last_done:
                return
            self.last_done = event.done
            width = 30
            filled = width * event.done // event.total
            bar = f"  [{'#' * filled}{'.' * (width - filled)}] {event.done}/{event.total} shards"
            if self.tty:
                self.output.out.write("\r" + bar)
                self.output.out.flush()
                self.open_bar = True
            else:
                self.output.print(bar)
            return
        label = self._PHASES.get(event.kind)
        if label is None:
            if event.kind == "error":
                self.line(f"  ! {event.text}")
            return
        detail = ", ".join(f"{k.replace('_', ' ')}={v}" for k, v in event.fields.items())
        self.line(f"  {label}" + (f": {detail}" if detail else ""))


def _cmd_down(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import pipeline

    ctx = _context(args)
    try:
        result = pipeline.down(ctx, args.profile)
    finally:
        ctx.close()
    if result is None:
        output.print(f"{args.profile}: not running")
        return ExitCode.OK
    state, leftovers = result
    output.print(f"{args.profile}: {state.state} ({state.message})")
    if leftovers:
        output.print(f"  killed {len(leftovers)} leftover process(es): {leftovers}")
    return ExitCode.OK


def _cmd_restart(args: argparse.Namespace, output: _Output) -> int:
    _cmd_down(args, output)
    args.replace = False
    return _cmd_up(args, output)


def _cmd_status(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import pipeline

    ctx = _context(args)
    names = list(args.names)
    if args.all or not names:
        names = [n for n in ctx.store.names() if not ctx.store.load(n).profile.abstract]
    try:
        rows = pipeline.status(ctx, names)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps([_status_json(row) for row in rows], indent=2))
    else:
        output.print(_status_table(rows))
    failed = [row for row in rows if row.error is not None]
    return max((row.error.exit_code for row in failed if row.error), default=ExitCode.OK)


def _status_json(row: pipeline.StatusRow) -> dict[str, object]:
    import dataclasses

    document: dict[str, object] = {"profile": row.profile, "host": row.host}
    if row.error is not None:
        document["error"] = row.error.message
    if row.state is not None:
        document.update(dataclasses.asdict(row.state))
        document["alive"] = row.state.alive
    return document


def _status_table(rows: list[pipeline.StatusRow]) -> str:
    header = ("PROFILE", "HOST", "STATE", "PID", "UPTIME", "RESTARTS", "PORT", "RUN",
              "LAST FAILURE", "PLAN", "COMMIT")  # fmt: skip
    table = [header]
    for row in rows:
        state = row.state
        if state is None:
            error = row.error.message if row.error else "?"
            table.append(
                (row.profile, row.host, "UNKNOWN", "-", "-", "-", "-", "-", error, "-", "-")
            )
            continue
        if not state.deployed:
            table.append((row.profile, row.host, "-", "-", "-", "-", "-", "-", "-", "-", "-"))
            continue
        failure = "-"
        if state.last_exit is not None and state.last_exit.cls != "stopped":
            failure = f"{state.last_exit.cls}: {state.last_exit.message}"[:60]
        commit = (state.git_commit or "-")[:10] + ("+dirty" if state.git_dirty else "")
        table.append((
            row.profile, row.host,
            (state.state or "?") + (" (stale)" if state.stale else ""),
            str(state.pid or "-"),
            _duration(state.uptime_s),
            str(state.restarts),
            str(state.port or "-"),
            state.run_id or "-",
            failure,
            state.plan_hash or "-",
            commit,
        ))  # fmt: skip
    return _grid(table)


def _grid(table: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip()
        for r in table
    )


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(seconds)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def _cmd_logs(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import pipeline

    output = _guarded(output, args)
    ctx = _context(args)
    try:
        for chunk in pipeline.logs(
            ctx, args.profile, run_id=args.run, follow_log=args.follow, lines=args.lines
        ):
            output.out.write(chunk.text)
            output.out.flush()
    finally:
        ctx.close()
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


def _local(args: argparse.Namespace) -> pipeline.LocalSGLang | None:
    from orchestrator import pipeline

    if args.local_sglang is None:
        if args.model_config is not None:
            raise ProfileError(
                "--model-config goes with --local-sglang", "add --local-sglang PYTHON"
            )
        return None
    return pipeline.LocalSGLang(args.local_sglang, args.model_config)


def _cmd_plan(args: argparse.Namespace, output: _Output) -> int:
    import json

    from orchestrator import pipeline

    output = _guarded(output, args)
    ctx = _context(args)
    try:
        loaded = ctx.store.load(args.profile)
        report = pipeline.plan_profile(ctx, args.profile, local=_local(args), loaded=loaded)
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(_plan_json(report, args.all), indent=2, default=str))
    else:
        output.print(_plan_text(report, args.all))
    if report.error is not None:
        if not args.json:
            output.error(OrchError(report.refusal(), report.error.hint))
        return ExitCode.PLAN_REFUSED
    if report.pinned_changes(loaded.profile.pin, loaded.table):
        return ExitCode.DRIFT
    return ExitCode.OK


def _plan_text(report: plan.PlanReport, include_defaulted: bool) -> str:
    from orchestrator import verify

    simulated = f", simulated {report.simulated_gpu}" if report.simulated_gpu else ""
    standin = " -- orch's stand-in, NOT SGLang" if report.standin else ""
    lines = [
        f"{report.profile}: SGLang {report.sglang_version or '?'} ({report.where}{simulated}), "
        f"{report.mode}{standin}"
    ]
    if report.error is None:
        rows = [*report.fields, *(report.defaulted if include_defaulted else ())]
        table = [("FIELD", "PROFILE", "PREDICTED", "CHANGED BY")]
        for row in rows:
            name = row.field + (f" (as {row.requested_as})" if row.requested_as else "")
            by = ""
            if row.changed:
                by = ", ".join(p.describe() for p in row.provenance) or "SGLang (no record)"
                if row.why:
                    by += f": {row.why}"
            table.append((
                name, verify.show(row.profile, row.secret, 32),
                verify.show(row.effective, row.secret, 32), by,
            ))  # fmt: skip
        lines.append(_grid(table))
        changed = report.changed
        lines.append(
            f"{len(changed)} field{'s' if len(changed) != 1 else ''} the profile sets would change"
            if changed
            else "SGLang keeps every field the profile sets"
        )
    lines += [f"note: {note}" for note in report.notes]
    return "\n".join(lines)


def _plan_json(report: plan.PlanReport, include_defaulted: bool) -> dict[str, object]:
    from orchestrator import verify

    def row(field: plan.PlannedField) -> dict[str, object]:
        return {
            "field": field.field,
            "requested_as": field.requested_as,
            "key_path": field.key_path,
            "profile": verify.jsonable(field.profile, field.secret),
            "predicted": verify.jsonable(field.effective, field.secret),
            "changed": field.changed,
            "provenance": [
                {
                    "source": p.source,
                    "file": p.file,
                    "line": p.line,
                    "value": verify.jsonable(p.value, field.secret),
                }
                for p in field.provenance
            ],
            "why": field.why,
        }

    error = report.error
    return {
        "format": "orch.plan/1",
        "profile": report.profile,
        "sglang_version": report.sglang_version,
        "where": report.where,
        "simulated_gpu": report.simulated_gpu,
        "standin": report.standin,
        "mode": report.mode,
        "ok": error is None,
        "error": None
        if error is None
        else {
            "stage": error.stage,
            "type": error.kind,
            "message": error.message,
            "raised_in": error.raised_in,
            "hint": error.hint,
        },
        "fields": [row(f) for f in report.fields],
        "defaulted": [row(f) for f in report.defaulted] if include_defaulted else [],
        "logs": list(report.logs),
        "notes": list(report.notes),
    }


def _cmd_lock(args: argparse.Namespace, output: _Output) -> int:
    from orchestrator import pipeline

    ctx = _context(args)
    try:
        target, document, report = pipeline.write_lock(ctx, args.profile, local=_local(args))
    finally:
        ctx.close()
    effective = document["effective"]
    output.print(
        f"wrote {target}: SGLang {document['sglang']}, gpu {document['gpu_type'] or '-'}, "
        f"{len(effective)} fields differ from SGLang's defaults ({report.where})"
    )
    return ExitCode.OK


def _cmd_diff_effective(args: argparse.Namespace, output: _Output) -> int:
    import json

    from orchestrator import pipeline, verify

    output = _guarded(output, args)
    ctx = _context(args)
    try:
        report = pipeline.diff_effective(
            ctx, args.profile, include_defaulted=args.all, pid=args.pid, log=args.log
        )
    finally:
        ctx.close()
    if args.json:
        output.print(json.dumps(verify.report_json(report), indent=2, default=str))
    else:
        output.print(_diff_text(report))
    return ExitCode.DRIFT if report.drift else ExitCode.OK


def _diff_text(report: verify.Report) -> str:
    from orchestrator import verify

    found = {"orch": "run by orch", "port": "found by its port", "pid": "given pid"}
    head = (
        f"{report.profile}: SGLang {report.sglang_version}, pid {report.pid or '-'} "
        f"({found.get(report.found_by, 'not running')}), resolved from "
        f"{report.resolved_source or 'nothing'}"
    )
    table = [("FIELD", "PROFILE", "RECEIVED", "RESOLVED", "VERDICT", "WHY")]
    for row in report.fields:
        name = row.field + (f" (as {row.requested_as})" if row.requested_as else "")
        table.append((
            name,
            verify.show(row.profile, row.secret, 32),
            verify.show(row.received, row.secret, 32),
            verify.show(row.resolved, row.secret, 32),
            row.verdict,
            row.why or "",
        ))  # fmt: skip
    for env in report.env:
        table.append((
            f"env {env.name}", verify.show(env.profile, False, 32),
            "-" if env.received is None else verify.show(env.received, False, 32),
            "", env.verdict, "",
        ))  # fmt: skip
    lines = [head, _grid(table)]
    lines += [f"unrecognised on the command line: {token}" for token in report.unknown_received]
    lines += [f"note: {note}" for note in report.notes]
    drift = report.drift
    lines.append(
        f"{len(drift)} field{'s' if len(drift) != 1 else ''} drifted" if drift else "no drift"
    )
    return "\n".join(lines)


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
