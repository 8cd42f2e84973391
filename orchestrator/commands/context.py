"""``Context``: what every command shares (the profiles, the local environment, open connections,
the redaction of the output stream). ``Launch``: one profile made concrete, built ONCE per
command and handed down; each stage's signature says what of it it consumes.

A launch is a tuple of members, one server each. Today every profile has one member; a group of
N ranks on N hosts is the same value with N members, each with its own host and command.
"""

from __future__ import annotations

import dataclasses
import getpass
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from orchestrator import __version__, render
from orchestrator.effective.plan import PlanAnswer
from orchestrator.effective.verify import Observation
from orchestrator.fleet.client import Agent, Deployment, locate
from orchestrator.fleet.protocol.inspect import InspectRequest, LastRun
from orchestrator.fleet.protocol.probe import HostFacts
from orchestrator.fleet.protocol.reach import ProbeAnswer
from orchestrator.fleet.protocol.reconfigure import LiveChanges, ReconfigureReply
from orchestrator.fleet.protocol.runs import RunInfo, RunsReply
from orchestrator.fleet.protocol.start import StartReply
from orchestrator.fleet.protocol.stop import StopReply
from orchestrator.fleet.protocol.survey import HostSurvey
from orchestrator.fleet.protocol.tail import TailReply
from orchestrator.model import Host, LockHolder, Profile, RunState, ServerCommand
from orchestrator.profile.fields import RequestedField, requested_fields
from orchestrator.profile.store import LoadedProfile, ProfileStore
from orchestrator.sglang.argtable import ArgTable
from orchestrator.transport import Transport

KNOWN_HOSTS_FILE = "known_hosts"  # the team's pinned host keys, beside the profiles

Events = Generator[dict[str, Any], None, None]  # an agent's stream, one JSON document a line


class StartChannel(Protocol):
    """``start --watch`` opened before its spec is known (``fleet.client.PendingStart``)."""

    def send(
        self, spec: Mapping[str, Any], launch_script: str
    ) -> tuple[StartReply, Events | None]: ...

    def cancel(self) -> None: ...


class HostAgent(Protocol):
    """What commands ask of a deployment's agent: ``fleet.client.Agent`` on the host, each
    answer decoded; in the unit tests, a fake that answers what the agent answered
    (tests/unit/commands/fake_agent.py)."""

    deployment: Deployment
    transport: Transport  # the deployment's files (logs) are read over it

    def status(self, *, load: bool = False) -> RunState: ...

    def read_state(self) -> RunState | None: ...

    def status_and_probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str]
    ) -> tuple[RunState, HostFacts | None]: ...

    def probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str]
    ) -> HostFacts: ...

    def open_start(self, seconds: float, inspect: InspectRequest | None = None) -> StartChannel: ...

    def start(self, spec: Mapping[str, Any], launch_script: str) -> StartReply: ...

    def adopt(self) -> StartReply: ...

    def start_previous(self) -> StartReply: ...

    def stop(self, timeout: float) -> StopReply: ...

    def watch(
        self, run_id: str, offset: int, seconds: float, inspect: InspectRequest | None = None
    ) -> Events: ...

    def tail(self, lines: int, bytes_per_line: int, run_id: str | None = None) -> TailReply: ...

    def runs(self) -> tuple[RunInfo, ...]: ...

    def runs_reply(self) -> RunsReply: ...

    def plan(self, request: Mapping[str, Any], timeout: float = 300.0) -> PlanAnswer: ...

    def inspect(
        self,
        *,
        port: int,
        host: str,
        env_names: Sequence[str],
        pid: int | None = None,
        log: str | None = None,
    ) -> tuple[Observation, LastRun | None]: ...

    def listen(
        self, bind: str, port: int, token: str, seconds: float, *, expect: int
    ) -> ProbeAnswer: ...

    def reach(self, host: str, port: int, token: str, timeout: float) -> ProbeAnswer: ...

    def survey(self) -> HostSurvey: ...

    def reconfigure(
        self,
        spec: Mapping[str, Any],
        launch_script: str,
        live: LiveChanges | None = None,
    ) -> ReconfigureReply: ...
    def hold(
        self,
        holder: LockHolder,
        wait_s: float,
        on_wait: Callable[[LockHolder], None] | None = None,
    ) -> LockHandle: ...


class LockHandle(Protocol):
    """A deployment's operation lock held on its host (``fleet.client.HeldLock``)."""

    @property
    def generation(self) -> int | None:
        """The hold's number on its host (``LockView.consistent_with``); None: not said."""
        ...

    def release(self) -> None: ...

    def __enter__(self) -> LockHandle: ...

    def __exit__(self, *exc: object) -> None: ...


@dataclass(frozen=True)
class Member:
    """One server of a launch, on one host."""

    rank: int
    profile: Profile  # the profile as this member's node runs it (its host, port, env)
    # The SGLang fields it sets, read once: rendered into ``command``, and what the plan and the
    # server's effective configuration are compared with.
    requested: tuple[RequestedField, ...]
    command: ServerCommand  # secrets as references: printed, hashed, stored
    argv: tuple[str, ...]  # concrete: secrets resolved, what the process receives
    env: Mapping[str, str]

    @property
    def host(self) -> Host:
        return self.profile.host


@dataclass(frozen=True)
class Launch:
    """A profile, validated, rendered and with its secrets resolved: what every stage needs."""

    loaded: LoadedProfile
    members: tuple[Member, ...]
    secrets: Mapping[str, str]  # from_env name -> value, for the ones that are set
    digest: str  # render.launch_digest of the command: identifies what runs on the host
    # ``replicas:``: each replica's own launch (its profile ``Profile.for_replica``, its own
    # deployment and digest), walked by the commands one by one; empty: one server.
    replicas: tuple[Launch, ...] = ()

    @property
    def profile(self) -> Profile:
        return self.loaded.profile

    @property
    def table(self) -> ArgTable:
        """The argument table the command is spelled for."""
        return self.loaded.table

    @property
    def unset_secrets(self) -> tuple[str, ...]:
        """The from_env variables the profile names that are not set where orch runs."""
        names = dict.fromkeys(n for m in self.members for n in m.command.secret_names())
        return tuple(name for name in names if name not in self.secrets)

    @property
    def primary(self) -> Member:
        return self.members[0]

    @property
    def is_group(self) -> bool:
        return self.profile.group is not None

    def spelled_for(self, table: ArgTable, environ: Mapping[str, str]) -> Launch:
        """The same launch with the flags spelled for another SGLang version (an unpinned
        profile meets the host's version at preflight)."""
        loaded = dataclasses.replace(self.loaded, table=table)
        return _make_launch(loaded, environ, require_secrets=True)

    def edited(self, profile: Profile, environ: Mapping[str, str]) -> Launch:
        """The launch of an edited profile (``orch plan --fit``), rendered as it would load;
        an unset secret is a placeholder, as for plan."""
        loaded = dataclasses.replace(self.loaded, profile=profile)
        return _make_launch(loaded, environ, require_secrets=False)

    def meta(self, origin: ProfilesOrigin) -> dict[str, object]:
        """What the agent keeps beside the run and echoes in its state: who launched what, from
        which profiles repository (``commands/ownership.py`` compares it before touching a
        deployment)."""
        return {
            "launch_digest": self.digest,
            "git_commit": origin.commit,
            "git_dirty": origin.dirty,
            "profiles_repo": origin.repo,
            "profiles_dir": origin.directory,
            "profile_source": self.profile.source,
            "orch_version": __version__,
            "launched_by": f"{getpass.getuser()}@{socket.gethostname()}",
        }


@dataclass(frozen=True)
class UpOptions:
    """What ``orch up`` is told beside the profile (its flags), handed down as one value."""

    replace: bool = False  # --replace: stop the deployment's running launch for this one
    check_plan: bool = True  # not --no-plan: SGLang's own plan gates the launch
    force: bool = False  # --force: launch what the plan refuses
    take_over: bool = False  # --take-over: a deployment launched from another repository
    plan_cache: bool = True  # not --no-cache: the plan may come from the probe's cache
    # the deployment's operation lock while it is being granted (``locking.PendingHold``), for
    # ``up`` to wait for before it acts, its first read of the state done meanwhile; None: the
    # caller holds it already (or nothing does)
    lock: PendingLock | None = None


class PendingLock(Protocol):
    """An operation lock asked for and not yet awaited."""

    def granted(self) -> int | None:
        """Wait until it is held: its generation (None: not said); errors.Locked when another
        orch keeps it past the wait."""
        ...


def _make_launch(
    loaded: LoadedProfile, environ: Mapping[str, str], *, require_secrets: bool
) -> Launch:
    profile = render.gated(loaded.profile, loaded.table)
    loaded = dataclasses.replace(loaded, profile=profile)
    unset = None if require_secrets else UNSET_SECRET
    members: list[Member] = []
    secrets: dict[str, str] = {}
    for rank in range(profile.nnodes):  # as render.render_members, keeping what it reads
        node = profile.for_rank(rank)
        requested = requested_fields(node)
        command = render.render(node, loaded.table, requested)
        argv, env, read = render.resolve_secrets(command, environ, unset=unset)
        members.append(Member(rank, node, requested, command, argv, env))
        secrets.update(read)
    digest = render.launch_digest(*(member.command for member in members))
    replicas = tuple(
        _make_launch(
            dataclasses.replace(loaded, profile=profile.for_replica(index)),
            environ,
            require_secrets=require_secrets,
        )
        for index in range(len(profile.replicas))
    )
    return Launch(loaded, tuple(members), secrets, digest, replicas)


UNSET_SECRET = "orch-unset-secret"  # noqa: S105 - a placeholder for an unset from_env value


@dataclass(frozen=True)
class ProfilesOrigin:
    """Where the profiles of a command come from: their repository's identity (its ``origin``
    remote, else its first commit, else the directory itself), the directory, the commit."""

    repo: str
    directory: str
    commit: str | None
    dirty: bool | None


def profiles_origin(directory: Path) -> ProfilesOrigin:
    """The profiles directory's repository, read with git (not a repository: the directory)."""
    resolved = str(directory.resolve())

    def git(*argv: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", "-C", resolved, *argv],
                capture_output=True,
                text=True,
                timeout=10,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return ProfilesOrigin(f"dir:{resolved}", resolved, None, None)
    remote = git("config", "--get", "remote.origin.url")
    roots = git("rev-list", "--max-parents=0", "HEAD")
    repo = f"git:{remote}" if remote else f"git-root:{(roots or commit).splitlines()[-1]}"
    dirty = git("status", "--porcelain", "--", ".")
    return ProfilesOrigin(repo, resolved, commit, dirty is not None)


@dataclass
class Context:
    """What every command needs: the profiles, the local environment, open connections."""

    store: ProfileStore
    environ: Mapping[str, str]
    local_python: str
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    redactor: render.Redactor = field(default_factory=render.Redactor)  # of the output
    # The agent of a profile's deployment: None, the real one over the host's transport; the
    # unit tests hand in a fake that answers as the agent answered (tests/unit/commands/).
    agent_factory: Callable[[Profile], HostAgent] | None = None
    # the agent of a host bound to no deployment (``host_agent``); None: the real one
    host_agent_factory: Callable[[Host], HostAgent] | None = None
    known_origin: ProfilesOrigin | None = None  # else read with git, once, when first asked
    _transports: dict[str, Transport] = field(default_factory=dict)
    _agents: dict[tuple[str, str], HostAgent] = field(default_factory=dict)
    _surveys: dict[str, HostSurvey] = field(default_factory=dict)
    _locks: dict[str, threading.Lock] = field(default_factory=dict)
    _locks_guard: threading.Lock = field(default_factory=threading.Lock)

    def launch(self, name: str, *, require_secrets: bool = True) -> Launch:
        """Load, render and resolve ``name`` once; its secrets join the output's redactor.
        ``require_secrets=False`` for commands that can do without (status, logs, down; plan
        and diff-effective, which compare an unset secret as unverifiable)."""
        loaded = self.store.load(name)
        launch = _make_launch(loaded, self.environ, require_secrets=require_secrets)
        self.redactor.add(launch.secrets)
        return launch

    def known_hosts_files(self, host: Host) -> list[Path]:
        files = [Path("~/.ssh/known_hosts").expanduser(), self.store.root / KNOWN_HOSTS_FILE]
        if host.known_hosts:
            files.append((self.store.root / Path(host.known_hosts).expanduser()).resolve())
        return files

    def transport(self, host: Host) -> Transport:
        with self._lock(f"transport:{host.name}"):
            if host.name not in self._transports:
                self._transports[host.name] = self._open(host)
            return self._transports[host.name]

    def _open(self, host: Host) -> Transport:
        if host.is_local:
            from orchestrator.transport.local import LocalTransport

            return LocalTransport(host)
        known_hosts = self.known_hosts_files(host)

        def direct() -> Transport:
            from orchestrator.transport.ssh import SSHTransport  # paramiko: only when needed

            return SSHTransport(host, known_hosts_files=known_hosts)

        if host.persist_s > 0:
            from orchestrator.transport import mux

            kept = mux.open_persistent(host, known_hosts, direct)
            if kept is not None:
                return kept
        return direct()

    def agent(self, profile: Profile) -> HostAgent:
        """The agent of ``profile``'s deployment on its host (one per command): the profile's,
        or a replica's (``Profile.deployment``)."""
        key = (profile.host.name, profile.deployment)
        with self._lock(f"agent:{key}"):
            if key not in self._agents:
                if self.agent_factory is not None:
                    self._agents[key] = self.agent_factory(profile)
                else:
                    transport = self.transport(profile.host)
                    python = profile.host.python or self.local_python
                    deployment = locate(transport, profile.deployment, python)
                    self._agents[key] = Agent(transport, deployment)
            return self._agents[key]

    def survey(self, host: Host) -> HostSurvey:
        """Every deployment on ``host`` (``agent survey``: one command, nothing written there),
        asked once per command, through the host's agent (the survey is its workdir's, no one
        deployment's)."""
        with self._lock(f"survey:{host.name}"):
            if host.name not in self._surveys:
                self._surveys[host.name] = self.host_agent(host).survey()
            return self._surveys[host.name]

    def host_agent(self, host: Host) -> HostAgent:
        """The agent of ``host`` bound to no deployment (its ``deployment.name`` is empty):
        for what is asked of the host as a whole (``survey``)."""
        if self.host_agent_factory is not None:
            return self.host_agent_factory(host)
        transport = self.transport(host)
        return Agent(transport, locate(transport, "", host.python or self.local_python))

    def _lock(self, key: str) -> threading.Lock:
        """One lock per connection or agent: replicas on one host are walked on threads, and
        each opens its host's connection once, not once per thread."""
        with self._locks_guard:
            return self._locks.setdefault(key, threading.Lock())

    def origin(self) -> ProfilesOrigin:
        """The profiles' origin, read once per command."""
        if self.known_origin is None:
            self.known_origin = profiles_origin(self.store.root)
        return self.known_origin

    def close(self) -> None:
        for transport in self._transports.values():
            transport.close()
        self._transports.clear()
        self._agents.clear()
        self._surveys.clear()
