"""diff-effective: the launch compared with what its server received (``/proc``) and what SGLang
resolved (``/server_info``, else the ``server_args=`` line), and with the profile's lock."""

from __future__ import annotations

import dataclasses
import json
import posixpath
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.commands import lockfile
from orchestrator.commands.by_url import URL_TIMEOUT_S, observe_url
from orchestrator.commands.context import Context, Launch
from orchestrator.commands.events import Effective, Outcome, UpEvent, Warn
from orchestrator.commands.fanout import parallel
from orchestrator.commands.follow import StartupLog
from orchestrator.effective import verify
from orchestrator.errors import ExitCode, NotDeployed, NotResolved, OrchError
from orchestrator.fleet import groups
from orchestrator.fleet.protocol.inspect import InspectRequest, LastRun
from orchestrator.fleet.protocol.start import health_host
from orchestrator.model import Profile, SecretRef
from orchestrator.remote.agent.protocol import CONFIG_FILE
from orchestrator.sglang import argtable, observe
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang.memory.measured import compare_figures


def diff_effective(
    ctx: Context,
    launch: Launch,
    *,
    include_defaulted: bool = False,
    pid: int | None = None,
    log: str | None = None,
    rank: int = 0,
    inspected: Inspected | None = None,
) -> verify.Report:
    """Compare the launch with what its server received and what SGLang resolved; ``rank``:
    which node of a launch group (its own host, port, env and ``--node-rank``). ``inspected``:
    the agent's inspection already at hand (``up``'s stream brings it with READY), else asked."""
    member = launch.members[rank]
    profile = member.profile
    request = inspect_request(profile, sorted(member.env))
    observed, last_run = inspected or ctx.agent(profile).inspect(
        port=request.port, host=request.host, env_names=request.env_names, pid=pid, log=log
    )
    where = f"{profile.name} on {profile.host.name}"
    if launch.is_group:
        where = f"{profile.name} rank {rank} on {profile.host.name}"
    if observed.pid is None and observed.resolved is None and last_run is not None:
        ended = f"; {last_run.exit_class}: {last_run.exit_message}" if last_run.exit_class else ""
        raise NotResolved(
            f"{where}: no server runs; its last run ({last_run.run_id}, {last_run.state}{ended}) "
            "logged no server_args= line and kept no record of what it received",
            f"orch logs {profile.name} shows how it ended",
        )
    if observed.pid is None and observed.resolved is None:
        raise NotDeployed(
            f"no server for {where}: none started by orch, nothing listens on port {profile.port}",
            f"orch up {profile.name}; for a server started another way: --pid PID",
        )
    if observed.argv is None and observed.resolved is None:
        raise NotResolved(
            f"{where}: server pid {observed.pid} is gone and logged no server_args= line",
            f"orch logs {profile.name} shows how it ended",
        )
    return _compared(ctx, launch, rank, observed, include_defaulted=include_defaulted)


Inspected = tuple[verify.Observation, LastRun | None]


def inspect_request(profile: Profile, env_names: Sequence[str]) -> InspectRequest:
    """What is inspected of a profile's server: its port, the address its health is asked on,
    the environment variables the launch sets (only those are read from /proc)."""
    return InspectRequest(profile.port, health_host(profile.bind), tuple(env_names))


def diff_url(
    ctx: Context,
    launch: Launch,
    url: str,
    *,
    include_defaulted: bool = False,
    rank: int = 0,
    timeout_s: float = URL_TIMEOUT_S,
) -> verify.Report:
    """Compare the launch (rank ``rank`` of a group) with the server that answers at ``url``,
    asked from this machine: a pod behind ``kubectl port-forward``, a SkyPilot cluster, a
    server someone started by hand. No SSH and no ``/proc``: what SGLang resolved
    (``/server_info``) and, from 0.5.20, the arguments it says it got (``launch_command``)."""
    profile = launch.members[rank].profile
    observed = observe_url(url, api_key=_api_key(profile, launch.secrets), timeout_s=timeout_s)
    return _compared(ctx, launch, rank, observed, include_defaulted=include_defaulted)


def _compared(
    ctx: Context,
    launch: Launch,
    rank: int,
    observed: verify.Observation,
    *,
    include_defaulted: bool,
) -> verify.Report:
    """The observation against rank ``rank``'s profile, then the lock, then memory figures."""
    member = launch.members[rank]
    profile = member.profile
    table = launch.table
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
    secret_env = frozenset(
        key for key, value in member.command.env.items() if isinstance(value, SecretRef)
    )
    report = verify.compare(
        profile,
        table,
        observed,
        requested=member.requested,
        env=member.env,
        secret_env=secret_env,
        secrets=launch.secrets,
        include_defaulted=include_defaulted,
    )
    lock = lockfile.read_lock(ctx.store.root, profile.name)
    if lock is not None and observed.resolved is not None:
        locked = lock.get("effective")
        if lock.get("sglang") != table.version or not isinstance(locked, dict):
            name_of_lock = lockfile.lock_path(ctx.store.root, profile.name).name
            note = f"{name_of_lock} is for SGLang {lock.get('sglang')}: not compared"
            report = dataclasses.replace(report, notes=(*report.notes, note))
        else:
            report = verify.compare_lock(report, locked, observed.resolved)
    report = dataclasses.replace(report, resolved=observed.resolved)
    measured = observe.memory_figures(observed.memory_lines)
    if measured:
        report = dataclasses.replace(
            report,
            memory_measured=measured,
            memory_rows=compare_figures(observed.memory_plan or {}, measured[0]),
            memory_predicted=observed.memory_plan is not None,
        )
    return report


@dataclass(frozen=True)
class GroupReport:
    """diff-effective of a launch group: every rank against the profile, and the ranks'
    resolved configurations against each other."""

    ranks: tuple[tuple[str, verify.Report], ...]  # (node, report) in rank order
    between: tuple[groups.RankDifference, ...]

    @property
    def drift(self) -> bool:
        return any(report.drift for _, report in self.ranks) or any(
            difference.drift for difference in self.between
        )


def diff_group(ctx: Context, launch: Launch, *, include_defaulted: bool = False) -> GroupReport:
    """Every rank compared (each node asked in parallel), then with each other."""

    def compare_rank(rank: int) -> verify.Report:
        return diff_effective(ctx, launch, include_defaulted=include_defaulted, rank=rank)

    ranks = list(range(len(launch.members)))
    reports = parallel(compare_rank, ranks)
    nodes = [member.host.name for member in launch.members]
    # Like with like: every rank's own server_args= line (rank 0 also answers /server_info,
    # whose shapes differ from the line's; workers have only the line).
    logged = parallel(lambda rank: logged_config(ctx, launch, rank), ranks)
    between = groups.compare_resolved(logged, launch.table.fields)
    return GroupReport(tuple(zip(nodes, reports, strict=True)), tuple(between))


def logged_config(ctx: Context, launch: Launch, rank: int) -> dict[str, Any] | None:
    """What rank ``rank``'s current run logged it resolved (its ``server_args=`` line, which
    the agent keeps beside the run's log), None when it logged none (yet)."""
    agent = ctx.agent(launch.members[rank].profile)
    state = agent.read_state()
    if state is None or state.run_dir is None:
        return None
    try:
        kept = json.loads(agent.transport.read(posixpath.join(state.run_dir, CONFIG_FILE)))
        return sglang_config.parse_server_args_line(kept["server_args_line"])
    except (FileNotFoundError, ValueError, KeyError, TypeError, sglang_config.UnreadableConfig):
        return None


def compare_logged(launch: Launch, startup: StartupLog) -> verify.Report:
    """The dead server's configuration as its log recorded it (no process left to read).
    Raises ``sglang_config.UnreadableConfig`` when the line cannot be read."""
    resolved = sglang_config.parse_server_args_line(startup.config_line or "")
    observed = verify.Observation(
        pid=None,
        found_by="orch",
        alive=False,
        argv=None,
        env=None,
        resolved=resolved,
        resolved_source="server_args line",
        launch_command=None,
        log_lines=tuple(startup.before),
        notes=("the server is not running: compared with what its log recorded",),
    )
    return verify.compare(
        launch.primary.profile,
        launch.table,
        observed,
        requested=launch.primary.requested,
        env=launch.primary.env,
        secret_env=frozenset(),
        secrets=launch.secrets,
    )


def _api_key(profile: Profile, secrets: Mapping[str, str]) -> tuple[str | None, str]:
    """The server's API key as the profile knows it here, and how it is named in messages
    (never the key itself)."""
    value = profile.args.get("api_key")
    if isinstance(value, SecretRef):
        return secrets.get(value.env_var), f"args.api_key (from_env {value.env_var})"
    if isinstance(value, str) and value:
        return value, "args.api_key"
    return None, "args.api_key"


def verify_ready(
    ctx: Context, launch: Launch, ready: Outcome, inspected: Inspected | None = None
) -> Iterator[UpEvent]:
    profile = launch.profile
    try:
        report = diff_effective(ctx, launch, inspected=inspected)
    except (NotDeployed, NotResolved):
        yield ready
        return
    except OrchError as exc:
        yield Warn(f"could not compare the effective configuration: {exc.message}", exc.hint)
        yield ready
        return
    pinned = report.pinned_drift(profile.pin, launch.table)
    yield Effective(report, pinned)
    if not pinned:
        yield ready
        return
    names = ", ".join(row.field for row in pinned)
    yield Outcome(
        ok=False,
        exit_code=ExitCode.DRIFT,
        state=ready.state,
        summary=f"pinned field{'s' if len(pinned) > 1 else ''} drifted: {names} "
        f"(run {ready.state.run_id} is READY and keeps running)",
        hint=f"orch diff-effective {profile.name} shows why; orch down {profile.name} to stop it",
    )
