"""Frozen values handed from one stage to the next: profile -> render -> (later) transport.

Nothing here does I/O. Mappings are wrapped read-only so that a frozen dataclass is frozen all the
way down; their order is the order the profile gave, which is the order flags are rendered in.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TypeAlias, TypeVar

# The agent defines its states once (its vocabulary, pushed to hosts, importing nothing of orch).
from orchestrator.remote.agent.states import TERMINAL_STATES, UNSUPERVISED

K = TypeVar("K")
V = TypeVar("V")


def frozen_map(items: Mapping[K, V] | None = None) -> Mapping[K, V]:
    """A read-only copy that keeps insertion order."""
    return MappingProxyType(dict(items or {}))


@dataclass(frozen=True)
class SecretRef:
    """A value taken from the local environment when orch launches, never stored in git.

    Written in a profile as ``{from_env: NAME}``. Renders for display as ``$NAME`` and is
    resolved only at the moment a launch needs it, so that no rendered command, golden file or
    log holds it.
    """

    env_var: str

    def display(self) -> str:
        return f"<redacted: from_env {self.env_var}>"


ArgScalar: TypeAlias = str | int | float | bool
ArgValue: TypeAlias = ArgScalar | tuple[ArgScalar, ...] | SecretRef
EnvValue: TypeAlias = str | SecretRef
ArgvToken: TypeAlias = str | SecretRef


class Launcher(enum.StrEnum):
    MODULE = "module"  # <python> -m sglang.launch_server ...
    SERVE = "serve"  # <venv>/bin/sglang serve ...


@dataclass(frozen=True)
class GpuType:
    """A GPU model orch knows: what planning and preflight compare the host against."""

    name: str
    memory_gb: int  # nominal, as sold (decimal GB); NVML reports somewhat less
    compute_capability: tuple[int, int]
    architecture: str
    nvml_names: tuple[str, ...]  # substrings of NVML's device name that identify this model


@dataclass(frozen=True)
class Host:
    """Where a profile runs. ``address is None`` means this machine, without SSH."""

    name: str
    address: str | None = None  # a hostname, an IP, or an ~/.ssh/config Host alias
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    known_hosts: str | None = None
    python: str | None = None  # the venv interpreter that imports sglang; None: orch's own (local)
    workdir: str = "~/.local/state/orch"
    # Keep the SSH connection open this long after a command, for the next (transport/mux/);
    # 0: each command connects by itself.
    persist_s: float = 0.0

    @property
    def is_local(self) -> bool:
        return self.address is None


@dataclass(frozen=True)
class ModelSpec:
    path: str
    served_model_name: str | None = None


@dataclass(frozen=True)
class GpuSpec:
    type: GpuType | None = None
    devices: tuple[str, ...] = ()  # CUDA_VISIBLE_DEVICES entries: indices, GPU-/MIG- UUIDs


@dataclass(frozen=True)
class SpecDecode:
    algorithm: str
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    draft_model_path: str | None = None


class RestartMode(enum.StrEnum):
    """systemd's Restart= vocabulary."""

    NO = "no"
    ON_FAILURE = "on-failure"
    ALWAYS = "always"


@dataclass(frozen=True)
class RestartPolicy:
    mode: RestartMode = RestartMode.ON_FAILURE
    delay_s: float = 5.0  # first delay; each further restart multiplies it
    multiplier: float = 2.0
    max_delay_s: float = 300.0
    start_limit: int = 5  # at most this many starts ...
    start_limit_interval_s: float = 600.0  # ... within this window, then FATAL


@dataclass(frozen=True)
class HealthPolicy:
    startup_timeout_s: float = 1800.0  # 27B weights over a slow disk plus CUDA graphs
    interval_s: float = 5.0
    endpoint: str = "/health"
    failures: int = 3  # consecutive failed probes after READY that make the server UNHEALTHY


@dataclass(frozen=True)
class GroupNode:
    """One node of a multi-node launch group: its host and what differs on it."""

    host: Host
    address: str | None = None  # how the other nodes reach this one; None: the host's address
    port: int | None = None  # --port on this node (the dummy health server on ranks >= 1)
    env: Mapping[str, EnvValue] = field(default_factory=frozen_map)  # NIC names ...


@dataclass(frozen=True)
class Group:
    """One SGLang server spread over several nodes: rank r runs on ``nodes[r]``. orch sets
    ``--dist-init-addr``, ``--nnodes`` and ``--node-rank``; the supervisors of the nodes
    coordinate over ``control_port`` on rank 0's node (remote/agent/group/)."""

    nodes: tuple[GroupNode, ...]
    rendezvous_port: int  # --dist-init-addr <rank 0>:<port>: torch's TCPStore on rank 0
    control_port: int  # rank 0's supervisor, which stops and restarts the group together
    join_timeout_s: float = 300.0  # how long the supervisors wait for each other, and the ranks
    # for the rendezvous (through SGLang's gated launch, where the version has it)
    gated_launch: bool = True  # --gated-launch-port on SGLang >= 0.5.19 (orch activates the gate)
    gate_port: int | None = None  # None: the rendezvous port + DEFAULT_GATE_OFFSET
    active_gate_port: int | None = None  # set per launch, where the SGLang version has the gate

    @property
    def nnodes(self) -> int:
        return len(self.nodes)

    @property
    def leader(self) -> GroupNode:
        return self.nodes[0]

    @property
    def wanted_gate_port(self) -> int | None:
        """The gated launch port the group asks for, whether or not its SGLang has the gate."""
        if not self.gated_launch:
            return None
        if self.gate_port is not None:
            return self.gate_port
        return self.rendezvous_port + DEFAULT_GATE_OFFSET

    @property
    def rendezvous_host(self) -> str:
        """Where the other ranks reach rank 0: its declared address, else its host's."""
        leader = self.leader
        return leader.address or leader.host.address or "127.0.0.1"

    @property
    def rendezvous(self) -> str:
        """``--dist-init-addr``: ``host:port``, an IPv6 address in brackets (SGLang splits it
        at the last colon)."""
        host = self.rendezvous_host
        shown = f"[{host}]" if ":" in host else host
        return f"{shown}:{self.rendezvous_port}"


@dataclass(frozen=True)
class Replica:
    """One of a profile's ``replicas:``: an independent server of the same launch, on its host,
    with what differs on it (its --port, its env, its GPUs). Each replica is its own deployment
    there, named ``Profile.deployment`` (``NAME@I``)."""

    host: Host
    port: int | None = None  # None: the profile's port
    env: Mapping[str, EnvValue] = field(default_factory=frozen_map)  # over the profile's
    devices: tuple[str, ...] | None = None  # gpu.devices; None: the profile's


# A replica's deployment is ``NAME@I``: '@' is no character of a profile name
# (profile/inventory.py NAME_RE), so it never meets another profile's deployment, and it is
# safe in a directory name.
REPLICA_SEPARATOR = "@"


def deployment_name(profile: str, replica: int | None) -> str:
    """Where a server of ``profile`` lives on its host: the profile's name, or ``NAME@I``."""
    return profile if replica is None else f"{profile}{REPLICA_SEPARATOR}{replica}"


def split_deployment(deployment: str) -> tuple[str, int | None]:
    """``deployment_name`` read back: (the profile, the replica or None)."""
    profile, separator, index = deployment.rpartition(REPLICA_SEPARATOR)
    if not separator or not index.isdigit():
        return deployment, None
    return profile, int(index)


# What ``orch export`` writes (orchestrator/export/): Kubernetes LeaderWorkerSet, Deployment,
# SkyPilot task, dstack run configuration, Slurm batch script.
EXPORT_ENGINES = ("k8s-lws", "k8s", "skypilot", "dstack", "slurm")
# exports of what runs now (the hosts' surveys), not of one profile: ``orch export prometheus-sd``
FLEET_EXPORTS = ("prometheus-sd",)


@dataclass(frozen=True)
class ExportSettings:
    """``export:``: what ``orch export`` needs beyond the launch itself (docs/export.md)."""

    image: str | None = None  # None: lmsysorg/sglang:v<sglang>
    python: str = "python3"  # the interpreter inside the image (the host's ``python`` is not there)
    secret: str | None = None  # the Kubernetes Secret holding from_env values; None: <name>-secrets
    secret_keys: Mapping[str, str] = field(default_factory=frozen_map)  # from_env NAME -> key
    replicas: int = 1  # Kubernetes: servers (Deployment pods, LeaderWorkerSet groups)


@dataclass(frozen=True)
class Router:
    """``router:``: the SGLang Model Gateway (``smg``, or the older sglang-router) the team
    runs in front of the profile's servers. orch registers a server there once it is READY and
    checked, and takes it out before stopping it (docs/gateway.md)."""

    url: str  # http(s)://host:port of the gateway's HTTP API (its worker API on the same port)
    api_key: SecretRef | None = None  # its control plane's key (--control-plane-api-keys)
    labels: Mapping[str, str] = field(default_factory=frozen_map)  # added to orch's own labels
    drain_timeout_s: float = 300.0  # how long a server out of the gateway may take to go idle
    ready_timeout_s: float = 120.0  # how long the gateway may take to add or remove it
    # where the gateway serves its Prometheus metrics (smg --prometheus-host/--prometheus-port,
    # its own listener, default :29000); None: not said (orch export prometheus-sd leaves it out)
    metrics_url: str | None = None


DEFAULT_CONTROL_OFFSET = 100  # control port = rendezvous port + this, unless given
DEFAULT_GATE_OFFSET = 50  # gated launch port = rendezvous port + this, unless given


@dataclass(frozen=True)
class Profile:
    """A validated, fully inherited deployment description."""

    name: str
    source: str  # the profile's own file, as shown in messages
    chain: tuple[str, ...]  # the profile and its ancestors, nearest first
    host: Host
    model: ModelSpec
    sglang_version: str | None = None  # None: detected on the host at launch
    abstract: bool = False  # a base for other profiles; validated, never launched
    description: str = ""
    launcher: Launcher = Launcher.MODULE
    gpu: GpuSpec = GpuSpec()
    spec_decode: SpecDecode | None = None
    port: int = 30000
    bind: str = "127.0.0.1"
    env: Mapping[str, EnvValue] = field(default_factory=frozen_map)
    args: Mapping[str, ArgValue] = field(default_factory=frozen_map)
    restart: RestartPolicy = RestartPolicy()
    health: HealthPolicy = HealthPolicy()
    stop_timeout_s: float = 30.0  # SIGTERM, then this long, then SIGKILL
    pin: tuple[str, ...] = ()
    group: Group | None = None  # a multi-node launch group; ``host`` is then its rank 0's
    rank: int = 0  # the group's rank this profile is, as its node runs it (``for_rank``)
    export: ExportSettings = ExportSettings()
    router: Router | None = None
    # ``replicas:``: independent servers of this launch, each its own deployment (``host`` is
    # then replica 0's); empty: one server. ``for_replica`` gives each as it runs.
    replicas: tuple[Replica, ...] = ()
    replica: int | None = None  # the replica this profile is (``for_replica``); None: not one
    # ``labels:``: words that select the profile (``orch sync --on LABEL``); they change nothing
    # on the host (not in the launch, not in its digest)
    labels: tuple[str, ...] = ()
    # ``metrics: true``: SGLang's Prometheus metrics (--enable-metrics; a group's every rank's
    # schedulers too: --enable-metrics-for-all-schedulers), for ``orch export prometheus-sd``
    metrics: bool = False

    @property
    def deployment(self) -> str:
        """The name of this server's deployment on its host (its directory under the host's
        workdir, the agent's ``deployment``): the profile's name, ``NAME@I`` for replica I."""
        return deployment_name(self.name, self.replica)

    def for_replica(self, index: int) -> Profile:
        """The profile as replica ``index`` runs it: that replica's host, port, env (its own
        variables over the profile's) and GPUs, with ``replica`` set and no replicas of its own
        (it is one server, launched as a profile without ``replicas:`` is)."""
        if not self.replicas:
            raise ValueError(f"{self.name} has no replicas: replica {index} does not exist")
        entry = self.replicas[index]
        env = {**self.env, **entry.env}
        gpu = self.gpu
        if entry.devices is not None:
            gpu = dataclasses.replace(gpu, devices=entry.devices)
            env["CUDA_VISIBLE_DEVICES"] = ",".join(entry.devices)
        return dataclasses.replace(
            self,
            host=entry.host,
            port=entry.port if entry.port is not None else self.port,
            env=frozen_map(env),
            gpu=gpu,
            replicas=(),
            replica=index,
        )

    def for_rank(self, rank: int) -> Profile:
        """The profile as rank ``rank`` of its group runs it: that node's host, port and env
        (the node's variables over the profile's). A profile without a group is its rank 0."""
        if self.group is None:
            if rank != 0:
                raise ValueError(f"{self.name} has no group: rank {rank} does not exist")
            return self
        node = self.group.nodes[rank]
        return dataclasses.replace(
            self,
            rank=rank,
            host=node.host,
            port=node.port if node.port is not None else self.port,
            env=frozen_map({**self.env, **node.env}),
        )

    @property
    def nnodes(self) -> int:
        return self.group.nnodes if self.group is not None else 1

    @property
    def parallel_sizes(self) -> tuple[int, int]:
        """(tp_size, pp_size) as ``args`` sets them, by either spelling (1 where unset)."""
        sizes = []
        for name, alias in (
            ("tp_size", "tensor_parallel_size"),
            ("pp_size", "pipeline_parallel_size"),
        ):
            value = self.args.get(name, self.args.get(alias))
            sizes.append(value if isinstance(value, int) and not isinstance(value, bool) else 1)
        return sizes[0], sizes[1]


class Severity(enum.StrEnum):
    WARNING = "warning"
    NOTICE = "notice"


@dataclass(frozen=True)
class Finding:
    """Something validation wants the user to know that does not stop a launch."""

    severity: Severity
    message: str  # already located: file:line:col: key.path: ...
    hint: str | None = None


@dataclass(frozen=True)
class ServerCommand:
    """Exactly what the server will be started with: no shell is ever involved.

    ``argv[0]`` is the program. ``env`` is added on top of the host's environment. Secret values
    are ``SecretRef`` placeholders until the moment of launch, so a command can be printed, hashed
    and stored without leaking anything.
    """

    profile: str
    sglang_version: str | None
    argtable_version: str  # the SGLang version whose flag spellings the argv uses
    argv: tuple[ArgvToken, ...]
    env: Mapping[str, EnvValue]
    cwd: str
    port: int

    def secret_names(self) -> tuple[str, ...]:
        names = [v.env_var for v in self.argv if isinstance(v, SecretRef)]
        names += [v.env_var for v in self.env.values() if isinstance(v, SecretRef)]
        return tuple(dict.fromkeys(names))


@dataclass(frozen=True)
class ExitInfo:
    """How a server process ended, as the agent classified it."""

    run_id: str
    returncode: int
    cls: str  # config-error, cuda-oom, kernel-error, killed, ... hung, spawn-failed, stopped
    message: str
    at: float  # the host's wall clock
    was_ready: bool
    signal: str | None = None
    swept_pids: tuple[int, ...] = ()
    # Whether starting the same argv again can end otherwise, and the evidence (the agent's
    # restart verdict; an older agent's is what its class says).
    restart_helps: bool = True
    restart_why: str = ""


@dataclass(frozen=True)
class MemoryLoad:
    """One DP rank's memory as the running server reports it (``/v1/loads?include=memory``):
    SGLang's GB are GiB."""

    dp_rank: int | None
    weight_gib: float | None
    kv_cache_gib: float | None
    graph_gib: float | None
    token_capacity: int | None
    max_running_requests: int | None
    running_requests: int | None
    token_usage: float | None


@dataclass(frozen=True)
class GroupMember:
    """Another rank of a group, as its coordinator (rank 0's supervisor) last heard of it."""

    rank: int
    node: str
    connected: bool
    state: str | None
    run_id: str | None
    pid: int | None


@dataclass(frozen=True)
class GroupFailure:
    """The rank whose end took its group down, and why."""

    rank: int
    node: str
    cls: str
    message: str


@dataclass(frozen=True)
class GroupView:
    """A node's supervisor's view of its launch group (state.json's ``group``)."""

    rank: int
    nnodes: int
    generation: int  # the group's starts: every rank's server of one start shares it
    members: tuple[GroupMember, ...] = ()  # on the coordinator only
    failure: GroupFailure | None = None  # the last group failure
    gate: GateView | None = None  # SGLang's gated launch, on the coordinator


@dataclass(frozen=True)
class GateView:
    """The gated launch of a group's current generation, as its coordinator sees it."""

    status: str  # waiting, activated, timed-out, unreachable
    world_size: int
    missing: tuple[int, ...]  # global ranks not (yet) at the gate
    activated_after_s: float | None  # from the generation's start


@dataclass(frozen=True)
class LockView:
    """A deployment's operation lock as read, no lock taken: how many holds it has had, and
    whether a holder was named then."""

    generation: int
    held: bool

    def consistent_with(self, granted: int | None) -> bool:
        """A state read at this view is the deployment as it is under the hold granted as
        ``granted``: the read came while nobody held the lock and that hold is the very next
        one (nothing acted between), or while that very hold was already ours."""
        if granted is None:
            return False
        if self.held:
            return granted == self.generation
        return granted == self.generation + 1


@dataclass(frozen=True)
class RankLoad:
    """One DP rank's load as SGLang's ``/v1/loads`` says it (None: not reported)."""

    dp_rank: int
    running: int | None = None  # num_running_reqs
    waiting: int | None = None  # num_waiting_reqs
    used_tokens: int | None = None
    token_capacity: int | None = None  # max_total_num_tokens
    max_running_requests: int | None = None  # the scheduler's own, after every cap
    token_usage: float | None = None  # 0..1, the fullest pool (KV, SWA, mamba)
    gen_throughput: float | None = None  # tokens/s
    cache_hit_rate: float | None = None  # 0..1
    utilization: float | None = None
    accept_length: float | None = None  # speculative decoding, once a speculative forward ran
    accept_rate: float | None = None


@dataclass(frozen=True)
class ServerLoad:
    """A server's load: read now (``live``, ``orch status --load``) or the last figures its
    supervisor sampled (every 15 s while READY), ``age_s`` old on the host's clock."""

    live: bool
    at: float | None  # the host's wall clock when the figures were taken
    age_s: float | None
    ranks: tuple[RankLoad, ...] = ()
    error: str | None = None  # the last read that failed, beside the last figures
    version: str | None = None  # SGLang's, as /v1/loads says it


@dataclass(frozen=True)
class RunState:
    """One deployment's state on its host, as its agent reports it."""

    deployed: bool
    state: str | None = None  # one of remote/agent/states.py's STATES
    pid: int | None = None
    run_id: str | None = None
    run_dir: str | None = None
    log: str | None = None
    port: int | None = None
    starts: int = 0
    restarts: int = 0
    ready: bool = False
    uptime_s: float | None = None
    started_at: float | None = None  # the host's wall clock
    ready_at: float | None = None
    message: str = ""
    last_exit: ExitInfo | None = None
    agent_alive: bool = False
    stale: bool = False  # the agent died without recording an end
    server_alive: bool = False  # its recorded identity (pid + start time) matches a process
    recorded_state: str | None = None  # what state.json says, when ``state`` is UNSUPERVISED
    recorded_pid: int | None = None  # a pid recorded for a server that is gone (never "ours")
    adopted: bool = False  # a supervisor took the server over after its own died
    output_lost: bool = False  # the server's output since its supervisor died went nowhere
    health_failures: int = 0  # consecutive failed /health probes after READY
    next_start_at: float | None = None
    launch_digest: str | None = None  # of the ServerCommand it runs (render.launch_digest)
    git_commit: str | None = None
    git_dirty: bool | None = None
    launched_by: str | None = None
    profiles_repo: str | None = None  # the identity of the profiles' repository it came from
    profiles_dir: str | None = None
    memory_loads: tuple[MemoryLoad, ...] = ()  # GET /v1/loads?include=memory, once READY
    memory_loads_error: str | None = None
    load: ServerLoad | None = None  # GET /v1/loads: read now (status --load) or the last kept
    # what ``orch up``'s memory plan said decides max_running_requests (meta), and its value
    planned_requests: int | None = None
    planned_requests_by: str | None = None
    group: GroupView | None = None  # a rank of a launch group
    disk_full: bool = False  # the deployment's filesystem has (almost) no room left now
    output_dropped_bytes: int = 0  # server output its supervisor could not write (no room)
    corrupt_state: str | None = None  # state.json is corrupt: this state was rebuilt, and why
    # what the agent did at the server's gateway (router:) on its own, after a failure:
    # untouched, deregistered, registering, registered, failed; and its last trouble there
    gateway_status: str | None = None
    gateway_error: str | None = None
    # the deployment's operation lock as the agent read it just before this state (None: not
    # said): a state read before orch's own hold was granted is trusted only when that hold is
    # the next one after this view, or held already (``LockView.consistent_with``)
    lock: LockView | None = None

    @property
    def alive(self) -> bool:
        return self.deployed and self.agent_alive and self.state not in TERMINAL_STATES

    @property
    def unsupervised(self) -> bool:
        """Its supervisor died and its server, verified by identity, still runs."""
        return self.deployed and self.state == UNSUPERVISED


@dataclass(frozen=True)
class LockHolder:
    """Who holds (or asks for) a deployment's operation lock on its host (``agent hold``):
    what a second orch is told while it waits, or when it gives up."""

    user: str
    machine: str
    pid: int
    command: str  # "orch up", "orch sync" ...
    since: float  # the holder's wall clock when it asked

    @property
    def who(self) -> str:
        return f"{self.user}@{self.machine}"
