"""The ranks of one multi-node server, found among a script's launches, as a profile's group.

Launches with the same arguments but ``--node-rank``, and ``--nnodes`` > 1, are the ranks of
one server (``group_ranks``); their profile gets a ``group:`` section (``group_section``): a
host per rank, the environment each rank has of its own, the rendezvous port from
``--dist-init-addr`` (orch renders that flag, and ``--node-rank``, for each rank itself).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from orchestrator.importing.launches import Launch
from orchestrator.importing.profile_hosts import rank_host, unknown_host
from orchestrator.importing.profile_notes import ImportContext
from orchestrator.importing.profile_values import launch_environment
from orchestrator.importing.scripts import ImportRequest, ScannedScript
from orchestrator.importing.server_arguments import Occurrence, ParsedArguments
from orchestrator.sglang.argtable import ArgOption


class Member(NamedTuple):
    """One launch of a server: the script it is in, the launch, its arguments as read."""

    item: ScannedScript
    launch: Launch
    parsed: ParsedArguments


def group_ranks(parsed: list[Member]) -> list[list[Member]]:
    """Launches that are ranks of one server (same arguments but --node-rank, --nnodes > 1)
    form one group; every other launch is a profile of its own."""
    groups: list[list[Member]] = []
    keyed: dict[tuple[Any, ...], list[Member]] = {}
    for member in parsed:
        last = member.parsed.last()
        nnodes = _int(last.get("nnodes"))
        if nnodes is not None and nnodes > 1:
            key = tuple(
                (dest, tuple(v.shown() for v in o.values))
                for dest, o in sorted(last.items())
                # a rendezvous the ranks disagree on is still one server, said (group_section)
                if dest not in ("node_rank", "dist_init_addr")
            )
            if key in keyed and not any(rank_of(m) == rank_of(member) for m in keyed[key]):
                keyed[key].append(member)
                continue
            keyed[key] = [member]
            groups.append(keyed[key])
        else:
            groups.append([member])
    return groups


def _int(occurrence: Occurrence | None) -> int | None:
    """The number a flag's last value is, when it is one."""
    if occurrence is None or not occurrence.values:
        return None
    text = occurrence.values[-1].text
    return int(text) if text is not None and text.strip().isdigit() else None


def rank_of(member: Member) -> int:
    """The launch's ``--node-rank`` (0 when it gives none)."""
    return _int(member.parsed.last().get("node_rank")) or 0


def group_section(
    members: list[Member],
    fields: Mapping[str, tuple[Any, ArgOption]],
    host_name: str | None,
    request: ImportRequest,
    context: ImportContext,
) -> dict[str, Any]:
    """The ``group:`` section of the profile of ``members`` (the ranks of one server)."""
    nnodes_field = fields.get("nnodes")
    nnodes = nnodes_field[0] if nnodes_field and isinstance(nnodes_field[0], int) else len(members)
    address = fields.get("dist_init_addr")
    said = {
        rank_of(m): " ".join(v.shown() for v in m.parsed.last()["dist_init_addr"].values)
        for m in members
        if "dist_init_addr" in m.parsed.last()
    }
    if len(set(said.values())) > 1:
        context.note(
            "warning",
            "the ranks name different --dist-init-addr ("
            + ", ".join(f"rank {r}: {a}" for r, a in sorted(said.items()))
            + "): as written they would never meet; orch renders rank 0's host address for "
            "every rank",
        )
    group: dict[str, Any] = {"nodes": []}
    by_rank = {rank_of(m): m for m in members}
    common_env: dict[str, Any] | None = None
    per_node: list[dict[str, Any]] = []
    for rank in range(max(nnodes, len(members))):
        member = by_rank.get(rank)
        given = request.rank_hosts[rank] if rank < len(request.rank_hosts) else None
        if member is None:
            why = "the imported script(s) do not start it on a host orch can name"
            group["nodes"].append({"host": given or rank_host(rank, why, context)})
            per_node.append({})
            continue
        launch = member.launch
        if given is not None:
            host = given
        elif launch.remote is not None:
            host = (
                launch.remote.host if launch.remote.known else unknown_host(launch.remote, context)
            )
        elif rank == 0 and host_name is not None:
            host = host_name
        else:
            host = rank_host(rank, "the script runs it where it is started", context)
        group["nodes"].append({"host": host})
        env, _ = launch_environment(launch, context)
        per_node.append(env)
    present = [env for rank, env in enumerate(per_node) if rank in by_rank]
    if present:
        common_env = {k: v for k, v in present[0].items() if all(e.get(k) == v for e in present)}
    for node, env in zip(group["nodes"], per_node, strict=True):
        own = {k: v for k, v in env.items() if (common_env or {}).get(k) != v}
        if own:
            node["env"] = own
    if address is not None and isinstance(address[0], str) and ":" in address[0]:
        head, _, port = address[0].rpartition(":")
        if port.isdigit():
            group["rendezvous_port"] = int(port)
        context.note(
            "canonical",
            f"--dist-init-addr {address[0]}: orch renders it from rank 0's address in hosts.yaml "
            f"({head} here) and group.rendezvous_port",
        )
    return group
