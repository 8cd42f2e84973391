"""``up`` and friends: the stages wired together. No parsing, no formatting, no printing.

Each command is a generator of events (or returns values); ``cli.py`` turns them into text.
Connections are opened once per host per command and reused for everything in it.
"""

from __future__ import annotations

import dataclasses
import getpass
import json
import os
import posixpath
import socket
import subprocess
import time
from collections import deque
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator import __version__, argtable, render, verify
from orchestrator import plan as plan_module
from orchestrator.remote.agent import CONFIG_ERROR, DETERMINISTIC
from orchestrator.errors import (
    Conflict,
    ExitCode,
    NotDeployed,
    NotResolved,
    OrchError,
    PlanRefused,
    PreflightError,
    ProfileError,
    StartupTimeout,
    TransportError,
)
from orchestrator.model import Host, LaunchPlan, Profile, RunState
from orchestrator.observe import LineSplitter, LogEvent, parse_line
from orchestrator.profile import LoadedProfile, ProfileStore
from orchestrator.supervise import Agent, Deployment, locate, run_state
from orchestrator.transport import Transport

KNOWN_HOSTS_FILE = "known_hosts"  # the team's pinned host keys, beside the profiles
POLL_S = 0.1

VERDICT_EXIT_CODES = {
    "config-error": ExitCode.CONFIG_ERROR,
    "cuda-oom": ExitCode.CUDA_OOM,
    "killed": ExitCode.KILLED,
    "port-in-use": ExitCode.PORT_IN_USE,
    "import-error": ExitCode.IMPORT_ERROR,
    "model-not-found": ExitCode.MODEL_NOT_FOUND,
    "nccl": ExitCode.NCCL,
    "crashed": ExitCode.CRASHED,
}


@dataclass
class Context:
    """What every command needs: the profiles, the local environment, open connections."""

    store: ProfileStore
    environ: Mapping[str, str]
    local_python: str
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    _transports: dict[str, Transport] = field(default_factory=dict)

    def known_hosts_files(self, host: Host) -> list[Path]:
        files = [Path("~/.ssh/known_hosts").expanduser(), self.store.root / KNOWN_HOSTS_FILE]
        if host.known_hosts:
            files.append((self.store.root / Path(host.known_hosts).expanduser()).resolve())
        return files

    def transport(self, host: Host) -> Transport:
        if host.name not in self._transports:
            self._transports[host.name] = self._open(host)
        return self._transports[host.name]

    def _open(self, host: Host) -> Transport:
        if host.is_local:
            from orchestrator.transport.local import LocalTransport

            return LocalTransport(host)
        from orchestrator.transport.ssh import SSHTransport  # paramiko: only when needed

        return SSHTransport(host, known_hosts_files=self.known_hosts_files(host))

    def python_for(self, host: Host) -> str:
        return host.python or self.local_python

    def close(self) -> None:
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()


# -- events of `up` -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Step:
    message: str


@dataclass(frozen=True)
class Warn:
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Started:
    run_id: str
    pid: int | None
    log: str


@dataclass(frozen=True)
class Attached:
    """An identical plan already runs there: ``up`` follows it instead of starting another."""

    state: RunState


@dataclass(frozen=True)
class LogLine:
    event: LogEvent


@dataclass(frozen=True)
class Verdict:
    ok: bool
    exit_code: ExitCode
    state: RunState
    summary: str
    last_lines: tuple[str, ...] = ()
    hint: str | None = None


@dataclass(frozen=True)
class Effective:
    """diff-effective, run by ``up`` once the server is ready (or has died after resolving)."""

    report: verify.Report
    pinned: tuple[verify.FieldRow, ...]


@dataclass(frozen=True)
class Planned:
    """The plan ``up`` ran before launching (SGLang's own parsing and resolution)."""

    report: plan_module.PlanReport


UpEvent = Step | Warn | Planned | Started | Attached | LogLine | Effective | Verdict


# -- helpers ------------------------------------------------------------------------------------


def load(ctx: Context, name: str) -> LoadedProfile:
    return ctx.store.load(name)


def deployment_for(ctx: Context, profile: Profile) -> tuple[Transport, Deployment, Agent]:
    transport = ctx.transport(profile.host)
    deployment = locate(transport, profile.name, ctx.python_for(profile.host))
    return transport, deployment, Agent(transport, deployment)


def git_info(directory: Path) -> tuple[str | None, bool | None]:
    """The commit the profiles were launched from, and whether they had local changes."""
    try:
        head = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
        if head.returncode != 0:
            return None, None
        dirty = subprocess.run(
            ["git", "-C", str(directory), "status", "--porcelain", "--", "."],
            capture_output=True, text=True, timeout=10, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None, None
    return head.stdout.strip(), bool(dirty.stdout.strip())


def read_state(transport: Transport, deployment: Deployment) -> RunState | None:
    """state.json read directly (one SFTP read, no process started): for fast polling."""
    try:
        raw = transport.read(posixpath.join(deployment.dir, "state.json"))
    except FileNotFoundError:
        return None
    try:
        document = json.loads(raw)
    except ValueError:
        return None  # never partial (replaced atomically), but be safe
    document["deployed"] = True
    document["agent_alive"] = True
    return run_state(document)


def build_spec(
    profile: Profile, plan: LaunchPlan, argv: Sequence[str], env: Mapping[str, str],
    meta: Mapping[str, Any],
) -> dict[str, Any]:  # fmt: skip
    return {
        "protocol": 1,
        "deployment": profile.name,
        "argv": list(argv),
        "env": dict(env),
        "port": plan.port,
        "health_host": _health_host(profile),
        "health": {
            "endpoint": profile.health.endpoint,
            "interval_s": profile.health.interval_s,
            "startup_timeout_s": profile.health.startup_timeout_s,
        },
        "restart": {
            "mode": str(profile.restart.mode),
            "delay_s": profile.restart.delay_s,
            "multiplier": profile.restart.multiplier,
            "max_delay_s": profile.restart.max_delay_s,
            "start_limit": profile.restart.start_limit,
            "start_limit_interval_s": profile.restart.start_limit_interval_s,
        },
        "stop_timeout_s": profile.stop_timeout_s,
        "meta": dict(meta),
    }


# -- up -----------------------------------------------------------------------------------------


def up(
    ctx: Context,
    name: str,
    *,
    replace_running: bool = False,
    run_plan: bool = True,
    force: bool = False,
) -> Iterator[UpEvent]:
    """Preflight, push, start, follow the startup; the last event is a Verdict."""
    loaded = load(ctx, name)
    profile = loaded.profile
    plan = render.render(profile, loaded.table)
    argv, env, redact = render.resolve_secrets(plan, ctx.environ)
    _, deployment, agent = deployment_for(ctx, profile)
    where = "this machine" if profile.host.is_local else f"ssh {profile.host.address}"
    yield Step(f"{profile.name} on {profile.host.name} ({where}), workdir {deployment.dir}")

    current = agent.status()
    digest = render.plan_hash(plan)
    if current.alive:
        if current.plan_hash == digest:
            yield Attached(current)
            yield from _follow_and_verify(ctx, loaded, agent, current, redact)
            return
        if not replace_running:
            raise Conflict(
                f"{profile.name} already runs on {profile.host.name} with another plan "
                f"(plan {current.plan_hash}, run {current.run_id}, {current.state})",
                "orch up --replace stops it first; orch status shows what runs",
            )
        yield Step(f"stopping the running plan {current.plan_hash} (--replace)")
        agent.stop(profile.stop_timeout_s)
    elif current.stale:
        yield Warn("the previous supervisor died without an end; sweeping its run")
        agent.stop(profile.stop_timeout_s)

    probe = agent.probe(plan.port, _model_to_check(profile), profile.bind, env)
    plan, argv = yield from _preflight(profile, loaded, plan, argv, probe, ctx.environ)
    digest = render.plan_hash(plan)
    if run_plan:
        yield from _plan_gate(ctx, loaded, plan, force)

    commit, dirty = git_info(ctx.store.root)
    meta = {
        "plan_hash": digest,
        "git_commit": commit,
        "git_dirty": dirty,
        "profile_source": profile.source,
        "orch_version": __version__,
        "launched_by": f"{getpass.getuser()}@{socket.gethostname()}",
    }
    spec = build_spec(profile, plan, argv, env, meta)
    reply = agent.start(spec, render.launcher_script(plan))
    if not reply.get("ok"):
        winner = _same_plan_winner(ctx, agent, digest)
        if winner is not None:
            yield Step("a concurrent orch up started this same plan first; following it")
            yield Attached(winner)
            yield from _follow_and_verify(ctx, loaded, agent, winner, redact)
            return
        holder = reply.get("holder") or {}
        raise Conflict(
            f"{profile.name}: {reply.get('reason', 'the agent refused to start')}"
            + (f" (run {holder.get('run_id')}, {holder.get('state')})" if holder else ""),
            "another orch up got there first: orch status " + profile.name,
        )
    state = run_state({**reply["state"], "deployed": True, "agent_alive": True})
    yield Started(state.run_id or "?", state.pid, state.log or "")
    yield from _follow_and_verify(ctx, loaded, agent, state, redact)


def _follow_and_verify(
    ctx: Context,
    loaded: LoadedProfile,
    agent: Agent,
    state: RunState,
    redact: Callable[[str], str],
) -> Iterator[UpEvent]:
    """Follow the startup; then compare what the server got with the profile. Drift in a
    pinned field fails ``up``; other drift is a warning (``diff-effective`` fails on it).
    After a crash the verdict comes first, then what the followed log recorded."""
    profile = loaded.profile
    startup = StartupLog()
    for event in follow(ctx, agent.transport, agent.deployment, state, profile, redact, startup):
        if not isinstance(event, Verdict):
            yield event
            continue
        if not event.ok:
            yield event  # within a fraction of a second of the death: compare afterwards
            if startup.config_line is not None:
                yield from _compare_logged(ctx, loaded, startup)
            return
        try:
            report = diff_effective(ctx, profile.name, loaded=loaded)
        except (NotDeployed, NotResolved):
            yield event
            return
        except OrchError as exc:
            yield Warn(f"could not compare the effective configuration: {exc.message}", exc.hint)
            yield event
            return
        pinned = report.pinned_drift(profile.pin, loaded.table)
        yield Effective(report, pinned)
        if pinned:
            names = ", ".join(row.field for row in pinned)
            yield Verdict(
                ok=False,
                exit_code=ExitCode.DRIFT,
                state=event.state,
                summary=f"pinned field{'s' if len(pinned) > 1 else ''} drifted: {names} "
                f"(run {event.state.run_id} is READY and keeps running)",
                hint=f"orch diff-effective {profile.name} shows why; "
                f"orch down {profile.name} to stop it",
            )
            return
        yield event
        return


@dataclass
class StartupLog:
    """What ``follow`` saw up to SGLang's ``server_args=`` line: the line and those before it."""

    config_line: str | None = None
    before: list[str] = field(default_factory=list)

    def add(self, line: str, event: LogEvent | None) -> None:
        if self.config_line is not None:
            return
        if event is not None and event.kind == "config":
            self.config_line = line
        elif len(self.before) < EXPLAINING_LINES:
            self.before.append(line)


EXPLAINING_LINES = 400


def _compare_logged(ctx: Context, loaded: LoadedProfile, startup: StartupLog) -> Iterator[UpEvent]:
    """The dead server's configuration, as its log recorded it (no process left to read)."""
    profile = loaded.profile
    try:
        resolved = verify.parse_server_args_line(startup.config_line or "")
    except verify.UnreadableConfig as exc:
        yield Warn(f"could not read the server_args line: {exc}")
        return
    launch = render.render(profile, loaded.table)
    _, env, _ = render.resolve_secrets(launch, ctx.environ)
    observed = verify.Observation(
        pid=None, found_by="orch", alive=False, argv=None, env=None, resolved=resolved,
        resolved_source="server_args line", launch_command=None,
        log_lines=tuple(startup.before),
        notes=("the server is not running: compared with what its log recorded",),
    )  # fmt: skip
    secrets = {secret: ctx.environ[secret] for secret in launch.secret_names()}
    report = verify.compare(
        profile, loaded.table, observed, env=env, secret_env=frozenset(), secrets=secrets
    )
    yield Effective(report, report.pinned_drift(profile.pin, loaded.table))


def diff_effective(
    ctx: Context,
    name: str,
    *,
    include_defaulted: bool = False,
    pid: int | None = None,
    log: str | None = None,
    loaded: LoadedProfile | None = None,
) -> verify.Report:
    """Compare the profile with what its server received and what SGLang resolved."""
    loaded = loaded or load(ctx, name)
    profile = loaded.profile
    plan = render.render(profile, loaded.table)
    _, env, _ = render.resolve_secrets(plan, ctx.environ)
    _, _, agent = deployment_for(ctx, profile)
    document = agent.inspect(
        port=plan.port, host=_health_host(profile), env_names=sorted(env), pid=pid, log=log
    )
    observed = verify.observation(document)
    where = f"{profile.name} on {profile.host.name}"
    last_run = document.get("last_run") or {}
    if observed.pid is None and observed.resolved is None and last_run.get("run_id"):
        raise NotResolved(
            f"{where}: no server runs; its last run ({last_run['run_id']}, "
            f"{last_run.get('state')}) logged no server_args= line",
            f"orch logs {profile.name} shows how it ended",
        )
    if observed.pid is None and observed.resolved is None:
        raise NotDeployed(
            f"no server for {where}: none started by orch, nothing listens on port {plan.port}",
            f"orch up {profile.name}; for a server started another way: --pid PID",
        )
    if observed.argv is None and observed.resolved is None:
        raise NotResolved(
            f"{where}: server pid {observed.pid} is gone and logged no server_args= line",
            f"orch logs {profile.name} shows how it ended",
        )
    table = loaded.table
    if observed.server_version and observed.server_version != table.version:
        if profile.sglang_version is None:  # launched with the host's version's spelling
            table = argtable.table_for(observed.server_version).table
        else:
            observed = dataclasses.replace(
                observed,
                notes=(
                    *observed.notes,
                    f"the server runs SGLang {observed.server_version}, the profile targets "
                    f"{profile.sglang_version}",
                ),
            )
    secrets = {secret: ctx.environ[secret] for secret in plan.secret_names()}
    secret_env = frozenset(key for key, value in plan.env.items() if not isinstance(value, str))
    report = verify.compare(
        profile,
        table,
        observed,
        env=env,
        secret_env=secret_env,
        secrets=secrets,
        include_defaulted=include_defaulted,
    )
    lock = read_lock(ctx, profile.name)
    if lock is not None and observed.resolved is not None:
        locked = lock.get("effective")
        if lock.get("sglang") != table.version or not isinstance(locked, dict):
            name_of_lock = lock_path(ctx, profile.name).name
            note = f"{name_of_lock} is for SGLang {lock.get('sglang')}: not compared"
            report = dataclasses.replace(report, notes=(*report.notes, note))
        else:
            report = verify.compare_lock(report, locked, observed.resolved)
    return report


def _health_host(profile: Profile) -> str:
    local = profile.bind in ("0.0.0.0", "::", "localhost") or profile.bind.startswith("127.")  # noqa: S104
    return "127.0.0.1" if local else profile.bind


def _plan_gate(
    ctx: Context, loaded: LoadedProfile, plan: LaunchPlan, force: bool
) -> Iterator[UpEvent]:
    """Refuse to launch what SGLang itself rejects, or what would change a pinned field."""
    profile = loaded.profile
    table = argtable.table_for(plan.argtable_version).table
    report = plan_profile(ctx, profile.name, loaded=loaded, table=table)
    yield Planned(report)
    problem: str | None = None
    if report.error is not None:
        problem = report.refusal()
        hint = report.error.hint or "the server would fail the same way at startup"
    else:
        pinned = report.pinned_changes(profile.pin, table)
        if pinned:
            names = ", ".join(
                f"{f.field} {verify.show(f.profile)} -> {verify.show(f.effective)}" for f in pinned
            )
            problem = f"SGLang would change pinned field(s): {names}"
            hint = f"orch plan {profile.name} shows which SGLang step changes them"
    if problem is None:
        return
    if not force:
        raise PlanRefused(f"{profile.name}: {problem}", f"{hint}; --force launches anyway")
    yield Warn(f"{problem} (--force: launching anyway)")


def _same_plan_winner(ctx: Context, agent: Agent, digest: str) -> RunState | None:
    """After losing the start lock: the winner's state once it has written it, when it runs the
    same plan. The winner holds the lock before its first state write, so wait a moment."""
    deadline = ctx.clock() + 5.0
    while True:
        current = agent.status()
        if current.alive and current.plan_hash is not None:
            return current if current.plan_hash == digest else None
        if ctx.clock() >= deadline:
            return None
        ctx.sleep(0.1)


def _model_to_check(profile: Profile) -> str | None:
    return profile.model.path or None


def _preflight(
    profile: Profile,
    loaded: LoadedProfile,
    plan: LaunchPlan,
    argv: tuple[str, ...],
    probe: dict[str, Any],
    environ: Mapping[str, str],
) -> Generator[UpEvent, None, tuple[LaunchPlan, tuple[str, ...]]]:
    """Check the host against the profile; returns the (possibly re-spelled) plan and argv."""
    sglang = probe.get("sglang") or {}
    host_version = sglang.get("version")
    yield Step(
        f"python {probe.get('python')} ({probe.get('executable')}), sglang {host_version or '-'}"
    )
    if host_version is None:
        raise PreflightError(
            f"sglang is not importable with {probe.get('executable')} on {profile.host.name}: "
            f"{sglang.get('error', 'unknown error')}",
            f"point hosts.{profile.host.name}.python at the venv that holds sglang",
        )
    if profile.sglang_version is not None and host_version != profile.sglang_version:
        raise PreflightError(
            f"profile targets SGLang {profile.sglang_version}, the host has {host_version}",
            "flags are spelled per version: fix `sglang:` in the profile, or the host's python",
        )
    if profile.sglang_version is None:
        choice = argtable.table_for(host_version)
        if choice.table.version != loaded.table.version:
            plan = render.render(profile, choice.table)
            argv, _, _ = render.resolve_secrets(plan, environ)
            yield Step(f"flags spelled for the host's SGLang {host_version}")
    port = probe.get("port") or {}
    if not port.get("free", True):
        holder = port.get("holder") or {}
        who = (
            f" by pid {holder['pid']} ({' '.join(holder.get('cmdline') or [])})"
            if holder.get("pid")
            else ""
        )
        raise PreflightError(
            f"port {plan.port} on {profile.host.name} is in use{who}",
            "stop what holds it, or set another `port:`",
        )
    model = probe.get("model") or {}
    if model and not model.get("exists") and not model.get("looks_like_hub_id"):
        raise PreflightError(
            f"model path {profile.model.path} does not exist on {profile.host.name}",
            "model.path is a directory on the host (or a Hub id org/name)",
        )
    yield from _gpu_report(profile, probe.get("gpus") or {})
    return plan, argv


def _gpu_report(profile: Profile, gpus: dict[str, Any]) -> Iterator[UpEvent]:
    if not gpus.get("available"):
        yield Warn(
            f"no GPU information on {profile.host.name}: {gpus.get('reason', 'NVML unavailable')}",
            "SGLang needs an NVIDIA driver to serve; fine for a stand-in or a dry run",
        )
        return
    devices = gpus.get("devices") or []
    wanted = set(profile.gpu.devices) or {str(d["index"]) for d in devices}
    for device in devices:
        if str(device["index"]) not in wanted and device.get("uuid") not in wanted:
            continue
        total, free = device["memory_total"] / 1e9, device["memory_free"] / 1e9
        yield Step(f"GPU{device['index']} {device['name']}: {free:.0f} of {total:.0f} GB free")
        gpu_type = profile.gpu.type
        if gpu_type is not None and not any(n in device["name"] for n in gpu_type.nvml_names):
            yield Warn(f"profile says {gpu_type.name}, GPU{device['index']} is {device['name']}")
        for process in device.get("processes") or []:
            yield Warn(
                f"GPU{device['index']} is in use by pid {process['pid']} "
                f"({' '.join(process.get('cmdline') or [])}, {process['used_bytes'] / 1e9:.1f} GB)",
                "another server may hold memory SGLang expects to be free",
            )
    indices = {str(d["index"]) for d in devices} | {d.get("uuid") for d in devices}
    absent = [device for device in profile.gpu.devices if device not in indices]
    if absent:
        raise PreflightError(
            f"gpu.devices lists {', '.join(absent)}, which {profile.host.name} does not have",
            f"the host has {len(devices)} GPU(s)",
        )


def follow(
    ctx: Context,
    transport: Transport,
    deployment: Deployment,
    state: RunState,
    profile: Profile,
    redact: Callable[[str], str],
    startup: StartupLog | None = None,
) -> Iterator[UpEvent]:
    """Stream a run's startup from its log and state until ready, dead or timed out."""
    run_id = state.run_id
    if state.ready and state.state == "READY":
        yield _ready_verdict(state, profile)
        return
    log = deployment.run_log(run_id) if run_id else None
    splitter = LineSplitter()
    offset = 0
    tail: deque[str] = deque(maxlen=30)
    deadline = ctx.clock() + profile.health.startup_timeout_s
    while True:
        if log is not None:
            offset = yield from _read_new(transport, log, offset, splitter, tail, redact, startup)
        current = read_state(transport, deployment) or state
        ended = (
            current.last_exit if current.last_exit and current.last_exit.run_id == run_id else None
        )
        if ended is not None:
            if log is not None:
                offset = yield from _read_new(
                    transport, log, offset, splitter, tail, redact, startup
                )
            for line in splitter.flush():
                tail.append(redact(line))
            yield _failure_verdict(current, ended.cls, redact(ended.message), tuple(tail))
            return
        if current.run_id == run_id and current.state == "READY":
            yield _ready_verdict(current, profile)
            return
        if current.state in ("EXITED", "FATAL") and ended is None and current.run_id != run_id:
            yield _failure_verdict(current, "crashed", current.message, tuple(tail))
            return
        if ctx.clock() > deadline:
            raise StartupTimeout(
                f"{profile.name} not ready after {profile.health.startup_timeout_s:g} s "
                f"(state {current.state}); it keeps running",
                tuple(tail),
                f"orch logs {profile.name} -f to watch it, orch down {profile.name} to stop it",
            )
        ctx.sleep(POLL_S)


def _read_new(
    transport: Transport,
    log: str,
    offset: int,
    splitter: LineSplitter,
    tail: deque[str],
    redact: Callable[[str], str],
    startup: StartupLog | None = None,
) -> Generator[UpEvent, None, int]:
    """Yield the events of the log's new lines; returns the new offset."""
    try:
        data = transport.read(log, offset, 1 << 20)
    except FileNotFoundError:
        return offset
    for line in splitter.feed(data):
        line = redact(line)
        tail.append(line)
        event = parse_line(line)
        if startup is not None:
            startup.add(line, event)
        if event is not None:
            yield LogLine(event)
    return offset + len(data)


def _ready_verdict(state: RunState, profile: Profile) -> Verdict:
    took = ""
    if state.ready_at is not None and state.started_at is not None:
        took = f" in {state.ready_at - state.started_at:.1f} s"
    return Verdict(
        ok=True,
        exit_code=ExitCode.OK,
        state=state,
        summary=f"READY{took}  {profile.name}  http://{profile.bind}:{profile.port}"
        f"  run {state.run_id}",
    )


def _failure_verdict(
    state: RunState, cls: str, message: str, last_lines: tuple[str, ...]
) -> Verdict:
    code = VERDICT_EXIT_CODES.get(cls, ExitCode.CRASHED)
    hint: str | None
    if cls in DETERMINISTIC:
        hint = (
            "a configuration error is deterministic: not restarted"
            if cls == CONFIG_ERROR
            else f"{cls} is deterministic: not restarted"
        )
    elif state.state == "BACKOFF":
        hint = f"the agent restarts it ({state.message}); orch status / orch down"
    else:
        hint = state.message or None
    run = state.last_exit.run_id if state.last_exit else state.run_id
    return Verdict(
        ok=False,
        exit_code=code,
        state=state,
        summary=f"{cls}: {message} (run {run}, {state.state})",
        last_lines=last_lines,
        hint=hint,
    )


# -- down, status, logs -------------------------------------------------------------------------


def down(ctx: Context, name: str) -> tuple[RunState, tuple[int, ...]] | None:
    """Stop a profile's server; None when nothing was running."""
    profile = load(ctx, name).profile
    _, _, agent = deployment_for(ctx, profile)
    current = agent.status()
    if not current.deployed or (not current.alive and not current.stale):
        return None
    return agent.stop(profile.stop_timeout_s)


@dataclass(frozen=True)
class StatusRow:
    profile: str
    host: str
    state: RunState | None
    error: OrchError | None = None


def status(ctx: Context, names: Sequence[str]) -> list[StatusRow]:
    """State of each profile's deployment; hosts are asked in parallel, one connection each."""
    profiles = [load(ctx, name).profile for name in names]
    by_host: dict[str, list[Profile]] = {}
    for profile in profiles:
        by_host.setdefault(profile.host.name, []).append(profile)

    def ask(group: list[Profile]) -> list[StatusRow]:
        rows = []
        for profile in group:
            try:
                _, _, agent = deployment_for(ctx, profile)
                rows.append(StatusRow(profile.name, profile.host.name, agent.status()))
            except TransportError as exc:
                rows.extend(StatusRow(p.name, p.host.name, None, exc) for p in group[len(rows) :])
                break
            except OrchError as exc:
                rows.append(StatusRow(profile.name, profile.host.name, None, exc))
        return rows

    with ThreadPoolExecutor(max_workers=min(16, max(len(by_host), 1))) as pool:
        results = list(pool.map(ask, by_host.values()))
    order = {name: index for index, name in enumerate(names)}
    return sorted((row for rows in results for row in rows), key=lambda r: order[r.profile])


@dataclass(frozen=True)
class LogChunk:
    text: str
    run_id: str
    path: str


def logs(
    ctx: Context, name: str, *, run_id: str | None, follow_log: bool, lines: int,
) -> Iterator[LogChunk]:  # fmt: skip
    """The last ``lines`` of a run's log, then (``follow_log``) what is appended to it.
    Reads only what it shows, from an offset, whatever the log's size."""
    profile = load(ctx, name).profile
    transport, deployment, agent = deployment_for(ctx, profile)
    if run_id is None:
        current = read_state(transport, deployment)
        run_id = current.run_id if current else None
    if run_id is None:  # no state yet: the newest run on disk
        runs = agent.runs()
        if not runs:
            raise NotDeployed(f"{name} has no runs on {profile.host.name}", f"orch up {name}")
        run_id = str(runs[-1]["run_id"])
    path = deployment.run_log(run_id)
    size = transport.size(path)
    if size is None:
        known = ", ".join(str(r["run_id"]) for r in agent.runs()[-5:])
        raise NotDeployed(f"no log for run {run_id} of {name}", f"recent runs: {known or 'none'}")
    window = max(lines, 1) * 512
    start = max(size - window, 0)
    data = transport.read(path, start, size - start)
    text = data.decode("utf-8", "replace")
    if start > 0:
        text = text.split("\n", 1)[1] if "\n" in text else ""
    shown = text.splitlines(keepends=True)[-lines:] if lines else []
    yield LogChunk("".join(shown), run_id, path)
    offset = size
    while follow_log:
        now_size = transport.size(path)
        if now_size is not None and now_size < offset:
            offset = 0  # rotated: the new file starts over
        if now_size is not None and now_size > offset:
            data = transport.read(path, offset, now_size - offset)
            offset += len(data)
            yield LogChunk(data.decode("utf-8", "replace"), run_id, path)
        else:
            ctx.sleep(0.25)


def plan_for(ctx: Context, name: str) -> LaunchPlan:
    loaded = load(ctx, name)
    return render.render(loaded.profile, loaded.table)


# -- plan and lock ------------------------------------------------------------------------------


@dataclass(frozen=True)
class LocalSGLang:
    """Plan in a local venv of the same SGLang version, the GPU simulated from ``gpu.type``."""

    python: str
    model_config: Path | None = None  # the model's config.json when its path is not local


def plan_profile(
    ctx: Context,
    name: str,
    *,
    local: LocalSGLang | None = None,
    loaded: LoadedProfile | None = None,
    table: argtable.ArgTable | None = None,
) -> plan_module.PlanReport:
    """What SGLang will make of the profile: its own parsing and resolution, no server."""
    loaded = loaded or load(ctx, name)
    profile = loaded.profile
    table = table or loaded.table
    launch = render.render(profile, table)
    argv, env, _ = render.resolve_secrets(launch, ctx.environ)
    arguments = verify.sglang_arguments(argv) or ()
    secrets = {secret: ctx.environ[secret] for secret in launch.secret_names()}
    if local is None:
        _, _, agent = deployment_for(ctx, profile)
        request = plan_module.probe_request(arguments, env)
        answer = agent.plan(request)
        where = f"host {profile.host.name}"
    else:
        gpu = profile.gpu.type
        if gpu is None:
            raise ProfileError(
                f"{profile.name}: planning with a local SGLang simulates the profile's GPU, "
                "and it names none",
                "set gpu.type (B200, H200, ...), or plan on the host without --local-sglang",
            )
        model_config = _model_config_for(ctx, profile, local)
        request = plan_module.probe_request(arguments, env, simulate=gpu, model_config=model_config)
        answer = _run_local_probe(local.python, request)
        where = f"local {local.python}"
    answered = str(answer.get("sglang_version") or "")
    if answered and answered != table.version and not answer.get("standin"):
        table = argtable.table_for(answered).table  # read the answer in the answering version
    report = plan_module.report(profile, table, answer, where=where, secrets=secrets)
    if answered and answered != launch.argtable_version and not report.standin:
        report = dataclasses.replace(
            report,
            notes=(
                *report.notes,
                f"planned with SGLang {answered}; the command line is spelled for "
                f"{launch.argtable_version}",
            ),
        )
    return report


def _model_config_for(
    ctx: Context, profile: Profile, local: LocalSGLang
) -> tuple[str, dict[str, Any]] | None:
    """SGLang reads the model's config.json during resolution: find one for a local plan."""
    path = profile.model.path
    if local.model_config is not None:
        source = local.model_config
    elif Path(path).is_dir():
        return None  # SGLang reads it where it is
    elif not path.startswith(("/", "~", ".")):
        return None  # a Hub id: SGLang asks the Hub (needs network where it runs)
    elif profile.host.is_local:
        raise PreflightError(
            f"model path {path} does not exist on this machine",
            "give its config.json with --model-config FILE",
        )
    else:
        transport = ctx.transport(profile.host)
        try:
            data = transport.read(posixpath.join(path, "config.json"))
        except FileNotFoundError as exc:
            raise PreflightError(
                f"{path}/config.json not found on {profile.host.name}",
                "give the model's config.json with --model-config FILE",
            ) from exc
        return path, _json_object(data.decode("utf-8", "replace"), f"{path}/config.json")
    try:
        text = source.read_text(encoding="utf-8")
    except OSError as exc:
        raise ProfileError(f"--model-config {source}: {exc.strerror or exc}") from exc
    return path, _json_object(text, str(source))


def _json_object(text: str, where: str) -> dict[str, Any]:
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ProfileError(f"{where}: not JSON: {exc}") from exc
    if not isinstance(document, dict):
        raise ProfileError(f"{where}: expected a JSON object")
    return document


def _run_local_probe(python: str, request: dict[str, Any]) -> dict[str, Any]:
    import tempfile

    from orchestrator.supervise import PROBE_FILE, answer_of

    descriptor, path = tempfile.mkstemp(prefix="orch-plan-", suffix=".json")
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:  # 0600: may hold tokens
        json.dump(request, handle)
    try:
        done = subprocess.run(
            [python, str(PROBE_FILE), path], capture_output=True, timeout=600, check=False
        )
    except FileNotFoundError as exc:
        raise PreflightError(
            f"--local-sglang {python}: no such interpreter",
            "scripts/build-sglang-venv.sh VERSION builds one (prints its path)",
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise PreflightError(f"planning with {python} took over 600 s") from exc
    finally:
        Path(path).unlink(missing_ok=True)
    return answer_of(done.stdout, done.stderr, done.returncode, f"{python} sglang_probe.py")


def lock_path(ctx: Context, name: str) -> Path:
    return ctx.store.root / f"{name}.lock.json"


def write_lock(
    ctx: Context, name: str, *, local: LocalSGLang | None = None
) -> tuple[Path, dict[str, Any], plan_module.PlanReport]:
    loaded = load(ctx, name)
    report = plan_profile(ctx, name, local=local, loaded=loaded)
    if report.error is not None:
        raise PlanRefused(
            f"{name}: cannot lock a plan SGLang rejects: {report.error.kind}: "
            f"{report.error.message}",
            report.error.hint or f"orch plan {name} shows the details",
        )
    digest = render.plan_hash(render.render(loaded.profile, loaded.table))
    document = plan_module.lock_document(loaded.profile, report, digest, loaded.profile.gpu.type)
    target = lock_path(ctx, name)
    target.write_text(plan_module.lock_text(document), encoding="utf-8")
    return target, document, report


def read_lock(ctx: Context, name: str) -> dict[str, Any] | None:
    target = lock_path(ctx, name)
    try:
        document = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ProfileError(f"{target}: not JSON: {exc}", f"orch lock {name} rewrites it") from exc
    return document if isinstance(document, dict) else None


__all__ = [
    "Attached", "Context", "LogChunk", "LogLine", "Started", "StatusRow", "Step", "Verdict",
    "Warn", "down", "logs", "plan_for", "status", "up",
]  # fmt: skip
