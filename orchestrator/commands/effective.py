"""diff-effective: the launch compared with what its server received (``/proc``) and what SGLang
resolved (``/server_info``, else the ``server_args=`` line), and with the profile's lock."""

from __future__ import annotations

import dataclasses
import json
import posixpath
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator import argtable, groups, memory, observe, sglang_config, verify
from orchestrator.commands import lockfile
from orchestrator.commands.context import Context, Launch
from orchestrator.commands.follow import StartupLog
from orchestrator.errors import (
    AuthError,
    ConnectError,
    NotDeployed,
    NotResolved,
    UsageError,
)
from orchestrator.model import Profile, SecretRef
from orchestrator.protocol import LastRun, health_host
from orchestrator.remote.agent import CONFIG_FILE
from orchestrator.supervise import InspectRequest

URL_TIMEOUT_S = 10.0  # --url: /server_info comes from the tokenizer manager, fast under load
SERVER_INFO_ENDPOINTS = ("/server_info", "/get_server_info")  # the second: its older name


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
    profile = launch.profile.for_rank(rank)
    member = launch.members[rank]
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
    profile = launch.profile.for_rank(rank)
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
    profile = launch.profile.for_rank(rank)
    member = launch.members[rank]
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
            memory_rows=memory.compare_figures(observed.memory_plan or {}, measured[0]),
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
    from orchestrator.commands.group import parallel  # the group's stages import this module

    def compare_rank(rank: int) -> verify.Report:
        return diff_effective(ctx, launch, include_defaulted=include_defaulted, rank=rank)

    ranks = list(range(len(launch.members)))
    reports = parallel(compare_rank, ranks)
    nodes = [launch.profile.for_rank(rank).host.name for rank in ranks]
    # Like with like: every rank's own server_args= line (rank 0 also answers /server_info,
    # whose shapes differ from the line's; workers have only the line).
    logged = parallel(lambda rank: logged_config(ctx, launch, rank), ranks)
    between = groups.compare_resolved(logged, launch.table.fields)
    return GroupReport(tuple(zip(nodes, reports, strict=True)), tuple(between))


def logged_config(ctx: Context, launch: Launch, rank: int) -> dict[str, Any] | None:
    """What rank ``rank``'s current run logged it resolved (its ``server_args=`` line, which
    the agent keeps beside the run's log), None when it logged none (yet)."""
    agent = ctx.agent(launch.profile.for_rank(rank))
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
        pid=None, found_by="orch", alive=False, argv=None, env=None, resolved=resolved,
        resolved_source="server_args line", launch_command=None,
        log_lines=tuple(startup.before),
        notes=("the server is not running: compared with what its log recorded",),
    )  # fmt: skip
    return verify.compare(
        launch.profile,
        launch.table,
        observed,
        env=launch.primary.env,
        secret_env=frozenset(),
        secrets=launch.secrets,
    )


# -- a server asked by URL ------------------------------------------------------------------------


def server_url(text: str) -> str:
    """``text`` checked as a server's base URL (http or https, a host, maybe a path prefix
    behind a proxy), without a trailing slash. Credentials in it are refused: they would be
    shown in messages and shell history; the profile's ``api_key`` is sent instead."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--url {_shown(text)}: expected http://HOST:PORT or https://HOST:PORT",
            "e.g. --url http://127.0.0.1:30000 after `kubectl port-forward svc/NAME 30000`",
        )
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"--url {_shown(text)}: credentials in a URL are not sent",
            "orch sends the profile's api_key (args.api_key: {from_env: NAME}) as a Bearer token",
        )
    if parts.query or parts.fragment:
        raise UsageError(
            f"--url {_shown(text)}: expected the server's base URL, without ?query or #fragment"
        )
    try:
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as exc:
        raise UsageError(f"--url {_shown(text)}: {exc}") from exc
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _shown(text: str) -> str:
    """A URL as messages show it: any ``user:password@`` removed."""
    parts = urllib.parse.urlsplit(text)
    if parts.username is None and parts.password is None:
        return text
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, ""))


def _api_key(profile: Profile, secrets: Mapping[str, str]) -> tuple[str | None, str]:
    """The server's API key as the profile knows it here, and how it is named in messages
    (never the key itself)."""
    value = profile.args.get("api_key")
    if isinstance(value, SecretRef):
        return secrets.get(value.env_var), f"args.api_key (from_env {value.env_var})"
    if isinstance(value, str) and value:
        return value, "args.api_key"
    return None, "args.api_key"


def observe_url(
    url: str, *, api_key: tuple[str | None, str], timeout_s: float = URL_TIMEOUT_S
) -> verify.Observation:
    """What the server at ``url`` says it resolved, as an observation without a process."""
    base = server_url(url)
    key, key_name = api_key
    refused: list[str] = []
    for endpoint in SERVER_INFO_ENDPOINTS:
        status, payload = _get_json(base + endpoint, key, key_name, timeout_s)
        if status == 404:
            refused.append(f"{endpoint}: HTTP 404")
            continue
        if not isinstance(payload, dict):
            raise NotResolved(
                f"{base}{endpoint} answered HTTP {status} with "
                f"{'no JSON object' if status == 200 else 'an error'}: not SGLang's server_info",
                "is it an SGLang server's HTTP port (--port), not the router's or a proxy's?",
            )
        if "model_path" not in payload and "internal_states" not in payload:
            raise NotResolved(
                f"{base}{endpoint} answered, but with no ServerArgs fields (no model_path): "
                "not SGLang's server_info",
                "is it an SGLang server's HTTP port (--port), not the router's or a proxy's?",
            )
        return _url_observation(base, endpoint, payload)
    raise NotResolved(
        f"{base} answers neither {' nor '.join(SERVER_INFO_ENDPOINTS)} ({'; '.join(refused)})",
        "in a launch group only rank 0 serves them (ranks >= 1 serve a dummy /health): point "
        "--url at rank 0 (the LeaderWorkerSet's Service), or check that it is SGLang's port",
    )


def _url_observation(base: str, endpoint: str, payload: dict[str, Any]) -> verify.Observation:
    launch_command = payload.get("launch_command")
    version = payload.get("version")
    notes = [
        f"asked {base}{endpoint} from this machine: the process's command line and "
        "environment are not visible (received and env not compared)"
    ]
    if not isinstance(launch_command, str):
        launch_command = None
        notes.append(
            "this SGLang does not report its launch_command (0.5.20+ does): a value that differs "
            "cannot be told apart from a flag the server never received"
        )
    return verify.Observation(
        pid=None,
        found_by="url",
        alive=True,
        argv=None,
        env=None,
        resolved=sglang_config.resolved_from_server_info(payload),
        resolved_source=endpoint,
        launch_command=launch_command,
        notes=tuple(notes),
        server_version=str(version) if version else None,
    )


def _get_json(url: str, key: str | None, key_name: str, timeout_s: float) -> tuple[int, Any]:
    """``GET url`` → (status, the JSON body or None); 404 and other HTTP errors are answers,
    401/403 and an unreachable server are errors."""
    import urllib.error
    import urllib.request

    # server_url() admitted http and https only; the key is not sent on across a redirect
    request = urllib.request.Request(url, headers={"Accept": "application/json"})  # noqa: S310
    if key is not None:
        request.add_unredirected_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            sent = f"the key from {key_name} was refused" if key else f"{key_name} is not set here"
            raise AuthError(
                f"{url}: HTTP {exc.code} {exc.reason}: the server wants its API key; {sent}",
                "set the profile's api_key ({from_env: NAME}) and export NAME where orch runs",
            ) from exc
        status, body = exc.code, exc.read()
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ConnectError(
            f"cannot reach {url}: {reason}",
            "is the server up, and its tunnel running (`kubectl port-forward svc/NAME "
            "30000`, `ssh -L`)? A timeout is --url's host not answering",
        ) from exc
    try:
        return status, json.loads(body)
    except ValueError:
        return status, None
