"""Where a profile's ranks run: the ``group:`` section (its nodes in rank order, each a host of
the inventory, and the ports SGLang does not check), and the built profile's tp x pp layout
over its nodes and GPUs, which SGLang finds wrong only at init."""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from orchestrator.model import (
    DEFAULT_CONTROL_OFFSET,
    GpuSpec,
    Group,
    GroupNode,
    Host,
    Profile,
    frozen_map,
)
from orchestrator.profile.doccheck import MISSING, DocChecker, kind
from orchestrator.profile.inventory import INVENTORY_FILE
from orchestrator.profile.values import MAX_SECONDS, env_section
from orchestrator.profile.yamldoc import KeyPath

_NODE_KEYS = ("host", "address", "port", "env")
# What orch sets on every rank of a group from ``group:``; a profile never writes them.
GROUP_FIELDS = ("dist_init_addr", "nccl_init_addr", "nnodes", "node_rank", "gated_launch_port")
DEFAULT_RENDEZVOUS_PORT = 20000  # SGLang's docs and LWS examples use it


def group_section(checker: DocChecker, inventory: Mapping[str, Host], port: int) -> Group | None:
    """``group:``: the nodes in rank order, each a host of the inventory, with what may
    differ per node (the address others reach it at, its --port, its NIC variables)."""
    if checker.mapping(("group",)) is None:
        return None
    raw = checker.get(("group", "nodes"))
    if raw is MISSING:
        checker.error(("group",), "missing `nodes`", "the hosts of the group, rank 0 first")
        return None
    if not isinstance(raw, list) or len(raw) < 2:
        got = f"{len(raw)} node" if isinstance(raw, list) else kind(raw)
        checker.error(
            ("group", "nodes"),
            f"expected a list of at least 2 nodes, got {got}",
            "a single node needs no group: use `host:`",
        )
        return None
    nodes: list[GroupNode] = []
    where: dict[tuple[str | None, int | None, str], int] = {}
    for rank, item in enumerate(raw):
        path: KeyPath = ("group", "nodes", rank)
        if isinstance(item, str):  # `- gpu-a`: a host name alone
            item = {"host": item}
        elif not isinstance(item, dict):
            checker.error(path, f"expected a host name or a mapping, got {kind(item)}")
            continue
        else:
            checker.keys(path, _NODE_KEYS)
        name = item.get("host")
        host = node_host(checker, path, name, inventory)
        node_port = checker.integer((*path, "port"), 1, 65535)
        address = checker.text((*path, "address"))
        if address is not None and (not address or any(c.isspace() for c in address)):
            checker.error((*path, "address"), f"expected a hostname or IP, got {address!r}")
        env = env_section(checker, (*path, "env"), GpuSpec())
        if host is None:
            continue
        if any(node.host.name == host.name for node in nodes):
            checker.error(
                (*path, "host"),
                f"host {host.name} is in the group twice",
                "each node is its own host entry in hosts.yaml (two entries may share a "
                "machine with different workdirs and ports)",
            )
            continue
        machine = (host.address, host.port, host.workdir)
        if machine in where:
            checker.error(
                (*path, "host"),
                f"host {host.name} has the address and workdir of rank {where[machine]}'s "
                "host: both nodes would share one deployment directory",
                "give one of them another `workdir:` in hosts.yaml",
            )
            continue
        where[machine] = rank
        nodes.append(GroupNode(host, address, node_port, frozen_map(env)))
    rendezvous = checker.integer(("group", "rendezvous_port"), 1, 65535)
    rendezvous = rendezvous if rendezvous is not None else DEFAULT_RENDEZVOUS_PORT
    control = checker.integer(("group", "control_port"), 1, 65535)
    if control is None:
        control = rendezvous + DEFAULT_CONTROL_OFFSET
    join = checker.number(("group", "join_timeout_s"), 1.0, MAX_SECONDS)
    gated = checker.get(("group", "gated_launch"))
    if gated is not MISSING and not isinstance(gated, bool):
        checker.error(("group", "gated_launch"), "expected true or false")
    gate_port = checker.integer(("group", "gate_port"), 1, 65535)
    if len(nodes) != len(raw):
        return None
    group = Group(
        tuple(nodes),
        rendezvous,
        control,
        join if join is not None else Group.join_timeout_s,
        gated_launch=gated is not False,
        gate_port=gate_port,
    )
    _group_ports(checker, group, port)
    return group


def node_host(
    checker: DocChecker, path: KeyPath, name: object, inventory: Mapping[str, Host]
) -> Host | None:
    """The inventory's host named at ``path`` (a group node's, a replica's)."""
    if name is None:
        checker.error(path, "missing `host`", f"a host from {INVENTORY_FILE}")
        return None
    if not isinstance(name, str):
        checker.error((*path, "host"), f"expected a host name, got {kind(name)}")
        return None
    if name not in inventory:
        close = difflib.get_close_matches(name, list(inventory), n=1)
        checker.error(
            (*path, "host"),
            f"unknown host {name!r}",
            (f"did you mean {close[0]}? " if close else "")
            + f"hosts in {INVENTORY_FILE}: {', '.join(sorted(inventory))}",
        )
        return None
    return inventory[name]


def _group_ports(checker: DocChecker, group: Group, port: int) -> None:
    """Ports SGLang does not check: the rendezvous port is not a server's --port, orch's
    control port is neither, and nodes that share a machine do not share a port."""
    taken: dict[tuple[str | None, int], str] = {}
    leader = group.leader.host.address
    for rank, node in enumerate(group.nodes):
        path: KeyPath = ("group", "nodes", rank, "port") if node.port else ("port",)
        node_port = node.port or port
        if node.host.address == leader and node_port in (
            group.rendezvous_port,
            group.control_port,
        ):
            which = "rendezvous" if node_port == group.rendezvous_port else "control"
            checker.error(
                path,
                f"rank {rank}'s --port {node_port} is the group's {which} port "
                f"on {group.leader.host.name}",
                "SGLang needs --port and the --dist-init-addr port to differ; pick "
                "another port or group.rendezvous_port",
            )
        key = (node.host.address, node_port)
        if key in taken:
            checker.error(
                path,
                f"rank {rank} on {node.host.name} and {taken[key]} share a machine "
                f"and --port {node_port}",
                f"give this node its own port: group.nodes[{rank}].port",
            )
        taken.setdefault(key, f"rank {rank}")
    gate = group.wanted_gate_port
    if gate is not None and gate in (group.rendezvous_port, group.control_port):
        checker.error(
            ("group", "gate_port"),
            f"the gated launch port {gate} is the group's "
            + ("rendezvous" if gate == group.rendezvous_port else "control")
            + " port",
            "give group.gate_port a port of its own (or gated_launch: false)",
        )
    if gate is not None and (leader, gate) in taken:
        checker.error(
            ("group", "gate_port"),
            f"the gated launch port {gate} is {taken[(leader, gate)]}'s --port on "
            f"{group.leader.host.name}",
            "give group.gate_port a port of its own (or gated_launch: false)",
        )
    if group.control_port == group.rendezvous_port:
        checker.error(
            ("group", "control_port"),
            f"the control port {group.control_port} is the rendezvous port",
            "orch's supervisors and torch's TCPStore need a port each",
        )


def check_parallelism(checker: DocChecker, profile: Profile) -> None:
    """A tp x pp layout needs that many GPUs, spread evenly over a group's nodes; SGLang finds
    out only at init (a world that never completes hangs at ``Init torch distributed begin``).
    The group's own fields are orch's to set."""
    for name in GROUP_FIELDS:
        if name in profile.args:
            checker.error(
                ("args", name),
                f"orch sets {name} from `group:`",
                "declare the nodes under group.nodes (rank 0 first); orch renders "
                "--dist-init-addr, --nnodes and --node-rank for each",
            )
    tp, pp = profile.parallel_sizes
    needed = tp * pp
    group = profile.group
    nnodes = group.nnodes if group is not None else 1
    if needed % nnodes:
        checker.error(
            ("group", "nodes"),
            f"tp_size x pp_size = {needed} GPUs cannot be split evenly over {nnodes} nodes",
            f"SGLang would start {needed // nnodes or 1} rank(s) per node and hang at init: "
            f"use a multiple of {nnodes}, or {nnodes} nodes that divide {needed}",
        )
        return
    if group is not None:
        _check_dp_attention_ports(checker, profile, group)
    if not profile.gpu.devices:
        return
    per_node = needed // nnodes
    if per_node > len(profile.gpu.devices):
        on = f" per node ({needed} over {nnodes} nodes)" if nnodes > 1 else ""
        checker.error(
            ("args", "tp_size"),
            f"tp_size x pp_size = {per_node} GPUs{on}, but gpu.devices lists "
            f"{len(profile.gpu.devices)}",
            "list more devices or lower tp_size",
        )


# With DP attention SGLang takes the rendezvous port + 1 .. + 6 on rank 0's host for its own
# sockets (0.5.23 server_args.py: tokenizer, detokenizer, rpc, metrics, scheduler input, load).
DP_ATTENTION_PORTS = 6


def _check_dp_attention_ports(checker: DocChecker, profile: Profile, group: Group) -> None:
    if profile.args.get("enable_dp_attention") is not True:
        return
    first = group.rendezvous_port + 1
    last = group.rendezvous_port + DP_ATTENTION_PORTS
    for rank, node in enumerate(group.nodes):
        if node.host.address != group.leader.host.address:
            continue
        ports = [("--port", node.port or profile.port)]
        if rank == 0:
            ports.append(("control", group.control_port))
            if group.wanted_gate_port is not None:
                ports.append(("gated launch", group.wanted_gate_port))
        clash = [(what, port) for what, port in ports if first <= port <= last]
        for what, port in clash:
            checker.error(
                ("group", "rendezvous_port"),
                f"with DP attention SGLang takes ports {first}-{last} after the rendezvous "
                f"port on {group.leader.host.name}; rank {rank}'s {what} port {port} is one",
                "move group.rendezvous_port or the other port at least 7 apart",
            )
