"""The nodes of a launch group checked against each other (pure: facts in, differences out).

SGLang checks none of this: every rank must run the same SGLang and python, and see the same
environment apart from what the profile declares per node (NIC names ...). A variable one node's
login environment sets and another's does not (``NCCL_IB_DISABLE=1`` in one ``.bashrc``) reaches
that node's server only, and shows up as a hang or a slow group, not as an error.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.fleet.protocol.probe import HostFacts
from orchestrator.model import Profile


@dataclass(frozen=True)
class NodeDifference:
    """One way the nodes differ, with the value on each (as shown to the user)."""

    what: str  # "sglang", "python", "env NCCL_IB_DISABLE"
    values: tuple[tuple[str, str], ...]  # (node, value) per node
    hint: str

    @property
    def text(self) -> str:
        shown = ", ".join(f"{node} {value}" for node, value in self.values)
        return f"{self.what}: {shown}"


def node_ranks(tp: int, pp: int, nnodes: int) -> list[list[int]]:
    """The global ranks (``pp_rank * tp + tp_rank``) each node runs, as SGLang lays them out
    (0.5.11 ``entrypoints/engine.py``: ``pp_per_node = max(pp // nnodes, 1)``,
    ``nnodes_per_pp_rank = max(nnodes // pp, 1)``, ``tp_per_node = tp // nnodes_per_pp_rank``)."""
    pp_per_node = max(pp // nnodes, 1)
    nnodes_per_pp_rank = max(nnodes // pp, 1)
    tp_per_node = tp // nnodes_per_pp_rank
    out = []
    for node in range(nnodes):
        tp_first = tp_per_node * (node % nnodes_per_pp_rank)
        pp_first = pp_per_node * (node // nnodes_per_pp_rank)
        out.append(
            [
                pp_rank * tp + tp_rank
                for pp_rank in range(pp_first, pp_first + pp_per_node)
                for tp_rank in range(tp_first, tp_first + tp_per_node)
            ]
        )
    return out


def declared_env(profile: Profile) -> frozenset[str]:
    """The variables the profile sets itself (the same everywhere, or per node on purpose):
    the host's own value of these never reaches the server."""
    names = set(profile.env)
    if profile.group is not None:
        for node in profile.group.nodes:
            names.update(node.env)
    return frozenset(names)


def compare_nodes(
    nodes: Sequence[str], facts: Sequence[HostFacts], declared: frozenset[str]
) -> list[NodeDifference]:
    """How the nodes' facts differ: SGLang version, python version, and every variable of the
    servers' inherited environment (the ones ``agent probe`` reports) the profile does not
    set itself."""
    out: list[NodeDifference] = []

    def differ(what: str, values: Sequence[str], hint: str) -> None:
        if len(set(values)) > 1:
            out.append(NodeDifference(what, tuple(zip(nodes, values, strict=True)), hint))

    differ(
        "sglang",
        [f.sglang_version or "(none)" for f in facts],
        "every rank must run the same SGLang: install one version on every node",
    )
    differ(
        "python",
        [f.python for f in facts],
        "the same python on every node (hosts.yaml python: of each node)",
    )
    names = sorted({name for f in facts for name in f.inherited_env} - declared)
    for name in names:
        differ(
            f"env {name}",
            [_shown(f.inherited_env, name) for f in facts],
            f"{name} comes from the nodes' own environment (login files, /etc/environment): "
            "make it the same on every node, or set it in the profile's env: (per node under "
            "group.nodes[N].env when it must differ)",
        )
    return out


def _shown(env: Mapping[str, str], name: str) -> str:
    return f"{name}={env[name]}" if name in env else "(unset)"


# Resolved fields that differ between the ranks of a healthy group: the rank itself and the port
# a node's declared --port sets. SGLang draws random_seed per process when none is given: shown,
# not drift.
PER_RANK_FIELDS = frozenset({"node_rank", "port"})
PER_PROCESS_FIELDS = frozenset({"random_seed"})


@dataclass(frozen=True)
class RankDifference:
    """A resolved field whose value is not the same on every rank."""

    field: str
    values: tuple[object, ...]  # per rank; None where the rank did not say
    drift: bool
    why: str


def compare_resolved(
    resolved: Sequence[Mapping[str, object] | None], fields: Collection[str]
) -> list[RankDifference]:
    """The SGLang fields (``fields``: the argument table's) resolved differently on different
    ranks. Rank 0 answers ``/server_info`` (with runtime keys besides the fields), the others
    only their ``server_args=`` line: a field one rank did not report is not compared, nor is a
    rank that reported nothing."""
    known = [config for config in resolved if config is not None]
    if len(known) < 2:
        return []
    out = []
    shared = set(fields).intersection(*(set(config) for config in known))
    for name in sorted(shared - PER_RANK_FIELDS):
        values = tuple(config.get(name) if config is not None else None for config in resolved)
        if len({repr(config[name]) for config in known}) == 1:
            continue
        if name in PER_PROCESS_FIELDS:
            why = "SGLang draws it per process when the profile does not set it"
            out.append(RankDifference(name, values, False, why))
        else:
            why = "the ranks resolved it differently: a group runs one configuration"
            out.append(RankDifference(name, values, True, why))
    return out
