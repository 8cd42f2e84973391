"""The run spec orch sends (``start --spec``): the server's argv, environment, health checks and
restart policy, and for one rank of a launch group its part in the group (GroupSpec) and the
gated launch (GateSpec). Read once, checked here: a bad spec fails the attached ``start``."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from .files import Paths, read_json
from .gateway import GatewaySpec
from .policy import RestartPolicy
from .protocol import PROTOCOL
from .trust import check_file

# A launch group's control channel (group/control.py). Seconds unless named otherwise.
GROUP_HEARTBEAT_S = 1.0  # each end of a control connection says it is alive this often
GROUP_LOST_AFTER_S = 5.0  # a peer silent this long, or whose connection closed, is lost
GATE_REQUEST_TIMEOUT_S = 2.0  # one POST /gate/activate
GATE_ATTEMPTS = 3  # rank 0's gate server starts in a thread as its ranks log the waiting line
GATE_RETRY_S = 0.5
# What SGLang binds when told a wildcard, and where its own node reaches it then.
WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}  # noqa: S104


@dataclass(frozen=True)
class GateSpec:
    """A launch group's gated launch (the spec's ``group.gate``; absent: SGLang has none or orch
    does not use it): every rank runs with ``--gated-launch-port``, and the coordinator activates
    the gate once every global rank logged its waiting line (see GATE_LINE_MARK)."""

    port: int  # --gated-launch-port: world rank 0's gate server
    host: str  # where rank 0's node reaches it (its --host; a wildcard as loopback)
    world_size: int  # global ranks that must wait at the gate (tp * pp)
    node_ranks: tuple[tuple[int, ...], ...]  # the global ranks each node runs, by group rank
    timeout_s: float = 300.0  # from a generation's start: the rendezvous completes within it
    request_timeout_s: float = GATE_REQUEST_TIMEOUT_S  # not written by orch: tests make them
    attempts: int = GATE_ATTEMPTS  # short

    @property
    def url(self) -> str:
        return f"http://{host_port(self.host, self.port)}/gate/activate"

    @staticmethod
    def from_json(data: dict[str, Any], nnodes: int) -> GateSpec:
        port = int(data["port"])
        world_size = int(data["world_size"])
        node_ranks = tuple(tuple(int(rank) for rank in ranks) for ranks in data["node_ranks"])
        if not 0 < port < 65536:
            raise ValueError(f"group.gate.port: {port} is no TCP port")
        if len(node_ranks) != nnodes:
            raise ValueError(f"group.gate.node_ranks: {len(node_ranks)} nodes for nnodes {nnodes}")
        every = sorted(rank for ranks in node_ranks for rank in ranks)
        if world_size < 1 or every != list(range(world_size)):
            raise ValueError(
                f"group.gate.node_ranks: the nodes' ranks are not 0-{world_size - 1} once each"
            )
        timeout = float(data.get("timeout_s", 300.0))
        if not timeout > 0:
            raise ValueError(f"group.gate.timeout_s: {timeout:g} is not positive")
        host = str(data.get("host", "127.0.0.1"))
        return GateSpec(
            port=port,
            host=WILDCARDS.get(host, host),
            world_size=world_size,
            node_ranks=node_ranks,
            timeout_s=timeout,
            request_timeout_s=float(data.get("request_timeout_s", GATE_REQUEST_TIMEOUT_S)),
            attempts=max(int(data.get("attempts", GATE_ATTEMPTS)), 1),
        )


@dataclass(frozen=True)
class GroupSpec:
    """This node's part in a launch group (the spec's ``group``): one SGLang server over
    ``nnodes`` nodes, every node the same argv but ``--node-rank``. Rank 0's supervisor is the
    group's coordinator, the others are its members."""

    group_id: str  # the launch digest: a member of another launch is a stranger
    rank: int
    nnodes: int
    nodes: tuple[str, ...]  # the nodes' names by rank, for messages
    control_host: str  # where members reach the coordinator
    control_bind: str  # what the coordinator binds
    control_port: int
    key: bytes = field(repr=False)  # HMAC-SHA256 key of the control messages (spec.json: 0600)
    join_timeout_s: float = 120.0
    member_stop_grace_s: float = 5.0  # SIGTERM -> SIGKILL on ranks >= 1 (they ignore SIGTERM)
    heartbeat_s: float = GROUP_HEARTBEAT_S  # not written by orch: tests make them short
    lost_after_s: float = GROUP_LOST_AFTER_S
    gate: GateSpec | None = None  # None: no gated launch (an SGLang without it)

    @property
    def is_coordinator(self) -> bool:
        return self.rank == 0

    @property
    def control_address(self) -> str:
        return host_port(self.control_host, self.control_port)

    def name(self, rank: int) -> str:
        """``rank 1 (node-b)``: how messages name a rank."""
        return f"rank {rank} ({self.nodes[rank]})"

    @property
    def coordinator(self) -> str:
        """``the group coordinator (rank 0, node-a)``: how a member's messages name it."""
        return f"the group coordinator (rank 0, {self.nodes[0]})"

    @staticmethod
    def from_json(data: dict[str, Any]) -> GroupSpec:
        nnodes = int(data["nnodes"])
        nodes = tuple(str(node) for node in data["nodes"])
        rank = int(data["rank"])
        key = str(data["key"])
        port = int(data["control_port"])
        if nnodes < 1 or len(nodes) != nnodes:
            raise ValueError(f"group: {len(nodes)} node names for nnodes {nnodes}")
        if not 0 <= rank < nnodes:
            raise ValueError(f"group: rank {rank} of {nnodes} nodes")
        if re.fullmatch(r"[0-9a-fA-F]{64}", key) is None:
            raise ValueError("group.key: expected 64 hexadecimal characters")
        if not 0 < port < 65536:
            raise ValueError(f"group.control_port: {port} is no TCP port")
        return GroupSpec(
            group_id=str(data["id"]),
            rank=rank,
            nnodes=nnodes,
            nodes=nodes,
            control_host=str(data["control_host"]),
            control_bind=str(data.get("control_bind", "0.0.0.0")),  # noqa: S104 - other nodes
            control_port=port,
            key=bytes.fromhex(key),
            join_timeout_s=float(data.get("join_timeout_s", 120.0)),
            member_stop_grace_s=float(data.get("member_stop_grace_s", 5.0)),
            heartbeat_s=float(data.get("heartbeat_s", GROUP_HEARTBEAT_S)),
            lost_after_s=float(data.get("lost_after_s", GROUP_LOST_AFTER_S)),
            gate=None if data.get("gate") is None else GateSpec.from_json(data["gate"], nnodes),
        )


def is_ip_address(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclass(frozen=True)
class Spec:
    deployment: str
    argv: tuple[str, ...]
    env: dict[str, str]
    port: int
    health_host: str
    health_endpoint: str
    health_interval_s: float
    startup_timeout_s: float
    restart: RestartPolicy
    health_failures: int = 3  # consecutive /health failures after READY that make it UNHEALTHY
    stop_timeout_s: float = 30.0
    log_max_bytes: int = 256 << 20
    log_keep: int = 3
    cwd: str | None = None  # None: the run's own directory
    meta: dict[str, Any] = field(default_factory=dict)  # plan hash, git commit ...: echoed
    group: GroupSpec | None = None  # None: a server on one node
    # the gateway the server sits behind (a profile's router:): the agent takes it out after a
    # failure and registers a restarted run again (gateway_duty.py); None: no gateway
    gateway: GatewaySpec | None = None

    @staticmethod
    def from_json(data: dict[str, Any]) -> Spec:
        if data.get("protocol") != PROTOCOL:
            raise ValueError(f"spec protocol {data.get('protocol')!r}, agent speaks {PROTOCOL}")
        health = data["health"]
        return Spec(
            deployment=data["deployment"],
            argv=tuple(data["argv"]),
            env=dict(data["env"]),
            port=int(data["port"]),
            health_host=data.get("health_host", "127.0.0.1"),
            health_endpoint=health.get("endpoint", "/health"),
            health_interval_s=float(health.get("interval_s", 5.0)),
            startup_timeout_s=float(health.get("startup_timeout_s", 1800.0)),
            health_failures=max(int(health.get("failures", 3)), 1),
            restart=RestartPolicy(**data["restart"]),
            stop_timeout_s=float(data.get("stop_timeout_s", 30.0)),
            log_max_bytes=int(data.get("log_max_bytes", 256 << 20)),
            log_keep=int(data.get("log_keep", 3)),
            cwd=data.get("cwd"),
            meta=dict(data.get("meta", {})),
            group=None if data.get("group") is None else GroupSpec.from_json(data["group"]),
            gateway=None if data.get("gateway") is None else GatewaySpec.from_json(data["gateway"]),
        )


def read_spec(spec_path: str) -> Spec:
    check_file(spec_path, "the run spec")
    raw = read_json(spec_path)
    if raw is None:
        raise ValueError(f"{spec_path}: no run spec")
    return Spec.from_json(raw)  # fail here, attached, on a bad spec


def spec_for(paths: Paths, state: dict[str, Any]) -> Spec:
    try:
        return read_spec(paths.spec)
    except (OSError, ValueError, KeyError, TypeError):
        return Spec(
            deployment=str(state.get("deployment") or os.path.basename(paths.root)),
            argv=(),
            env={},
            port=int(state.get("port") or 0),
            health_host="127.0.0.1",
            health_endpoint="/health",
            health_interval_s=5.0,
            startup_timeout_s=1800.0,
            restart=RestartPolicy(),
            meta=dict(state.get("meta") or {}),
        )
