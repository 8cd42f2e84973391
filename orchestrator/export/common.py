"""What every export engine builds from: the profile as it runs there (``exported_profile``), its
commands split into words (literals, secrets, rank fields), and the provenance written into its
header and annotations.  [pure]"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator import render
from orchestrator.errors import RenderError
from orchestrator.model import EnvValue, Profile, SecretRef, ServerCommand, frozen_map
from orchestrator.profile.yamldoc import KeyPath, format_path
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable

LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - a pod or cloud VM serves its port on its own address
IMAGE_REPOSITORY = "lmsysorg/sglang"  # SGLang's own images, tagged v<version>

# The fields that say where a rank sits in its group: the only ones an export takes from the
# engine's variables (the other nodes' addresses are the engine's, not the profile's).
RANK_FIELDS = ("dist_init_addr", "nnodes", "node_rank")

READINESS_PROBE = "/health_generate"  # a real generation: ready means it serves tokens


@dataclass(frozen=True)
class Provenance:
    """Where an export came from, written into its annotations and header."""

    source: str  # the profile's file, as shown in messages
    commit: str | None  # the profiles repository's commit, None outside git
    dirty: bool | None = None


@dataclass(frozen=True)
class Export:
    """One engine's documents for one profile."""

    engine: str
    profile: str
    documents: tuple[dict[str, Any], ...]
    text: str  # the YAML to write: a header of comments, then the documents
    notes: tuple[str, ...]  # what was translated on the way, one line each
    commands: tuple[ServerCommand, ...]  # what each rank runs there (the exported view)
    rank_variables: Mapping[str, str]  # the engine's variable for each of RANK_FIELDS


@dataclass
class Plan:
    """What every engine builds from: the exported view's commands, split into words."""

    engine: str
    profile: Profile  # the exported view
    table: ArgTable
    provenance: Provenance
    name: str  # the object / task name
    image: str
    gpus_per_node: int
    commands: tuple[ServerCommand, ...]
    words: tuple[tuple[Word, ...], ...]  # per rank: argv as literals, secrets and rank fields
    notes: list[str]

    @property
    def nnodes(self) -> int:
        return len(self.commands)

    @property
    def digest(self) -> str:
        return render.launch_digest(*self.commands)

    def program_length(self) -> int:
        """How many argv tokens are the program (``python3 -m sglang.launch_server``, ``sglang
        serve``): Kubernetes' ``command``, the rest its ``args``."""
        argv = self.commands[0].argv
        return next(
            i for i, token in enumerate(argv) if isinstance(token, str) and token[:2] == "--"
        )


@dataclass(frozen=True)
class Word:
    """One argv token: a literal, a secret (its from_env name) or a rank field's value."""

    literal: str | None = None
    secret: str | None = None
    rank_field: str | None = None
    port: int | None = None  # dist_init_addr's port (the address is the engine's)


def exported_profile(profile: Profile, table: ArgTable, engine: str) -> tuple[Profile, list[str]]:
    """The profile as it runs on ``engine``, and what changed, said for the user: the image's
    interpreter, a routable bind, a GPU count instead of host device indices, no gated launch.
    Everything else is the profile's own; what an engine cannot run is a ``RenderError``."""
    notes: list[str] = []
    python = profile.export.python
    host = dataclasses.replace(profile.host, python=python)
    program = render._program(dataclasses.replace(profile, host=host))
    runs_on = "on the cluster's nodes (export.python)" if engine == "slurm" else "in the image"
    notes.append(
        f"program: {' '.join(program)} {runs_on} "
        f"(the host's interpreter is {profile.host.python or 'python3'})"
    )
    bind = profile.bind
    if bind in LOOPBACK_BINDS:
        bind = ANY_ADDRESS
        notes.append(
            f"bind: {ANY_ADDRESS} instead of {profile.bind} (probes, the Service and the other "
            "nodes reach the server on its pod or node address)"
        )
    for rank in range(profile.nnodes):
        member = profile.for_rank(rank)
        for name in member.env:
            where = _env_key_path(profile, rank, name)
            if name == "CUDA_VISIBLE_DEVICES" and not profile.gpu.devices:
                raise RenderError(
                    f"{profile.source}: {format_path(where)}: {engine} assigns a server its GPUs "
                    "and numbers them from 0: host device indices do not carry over",
                    "use gpu.devices (exported as a GPU count) or remove CUDA_VISIBLE_DEVICES",
                )
            for prefix in _RESERVED_ENV.get(engine, ()):
                if name.startswith(prefix):
                    raise RenderError(
                        f"{profile.source}: {format_path(where)}: {engine} sets {prefix}* itself",
                        "rename the variable",
                    )
    env = {
        k: v
        for k, v in profile.env.items()
        if not (k == "CUDA_VISIBLE_DEVICES" and profile.gpu.devices)
    }
    if profile.gpu.devices:
        notes.append(
            f"gpu.devices {','.join(profile.gpu.devices)}: {engine} picks the GPUs "
            "(CUDA_VISIBLE_DEVICES is not exported; the GPU count is requested instead)"
        )
    group = profile.group
    if group is not None and group.gated_launch:
        if argtable.spell(table, "gated_launch_port") is not None:
            notes.append(
                "group.gated_launch: off (orch's supervisor opens SGLang's gate; none runs "
                f"under {engine}: the ranks rendezvous directly)"
            )
        group = dataclasses.replace(group, gated_launch=False, active_gate_port=None)
    if group is not None:  # each rank runs on its node's host: the image's interpreter there too
        nodes = tuple(
            dataclasses.replace(node, host=dataclasses.replace(node.host, python=python))
            for node in group.nodes
        )
        group = dataclasses.replace(group, nodes=nodes)
    view = dataclasses.replace(
        profile,
        host=host,
        bind=bind,
        env=frozen_map(env),
        gpu=dataclasses.replace(profile.gpu, devices=()),
        group=group,
    )
    return view, notes


_RESERVED_ENV = {
    "k8s-lws": ("LWS_",),
    "skypilot": ("SKYPILOT_",),
    "dstack": ("DSTACK_",),
    "slurm": ("SLURM_", "SLURMD_", "ORCH_SLURM_"),
}


def _env_key_path(profile: Profile, rank: int, name: str) -> KeyPath:
    if profile.group is not None and name in profile.group.nodes[rank].env:
        return ("group", "nodes", rank, "env", name)
    return ("env", name)


def plan_for(profile: Profile, table: ArgTable, engine: str, provenance: Provenance) -> Plan:
    if profile.abstract:
        raise RenderError(
            f"profile {profile.name!r} is abstract (a base for others) and cannot be exported",
            "export a profile that extends it",
        )
    view, notes = exported_profile(profile, table, engine)
    commands = render.render_members(view, table)
    image = profile.export.image
    if image is None and engine == "slurm":  # runs on the nodes' own software, no image
        image = ""
    elif image is None:
        if profile.sglang_version is None:
            raise RenderError(
                f"{profile.source}: sglang: the profile pins no SGLang version, so no image "
                f"({IMAGE_REPOSITORY}:v<version>) can be chosen",
                'pin one (sglang: "0.5.23") or set export.image',
            )
        image = f"{IMAGE_REPOSITORY}:v{profile.sglang_version}"
        notes.append(f"image: {image} (from sglang:; export.image picks another build)")
    name = _object_name(profile)
    words = tuple(_words(command, table, view) for command in commands)
    gpus = _gpus_per_node(profile, notes)
    if profile.model.path.startswith(("/", "~")):  # not a Hugging Face id, which is downloaded
        notes.append(
            f"model.path {profile.model.path} must exist where the server runs "
            "(mount a volume there, or use a Hugging Face model id)"
        )
    return Plan(engine, view, table, provenance, name, image, gpus, commands, words, notes)


def _object_name(profile: Profile) -> str:
    """A DNS-1035 label from the profile's name (Services need one; LWS appends pod indices)."""
    name = re.sub(r"[^a-z0-9-]+", "-", profile.name.lower()).strip("-")
    name = re.sub(r"^[^a-z]+", "", name)[:45].rstrip("-")
    if not name:
        raise RenderError(
            f"profile name {profile.name!r} gives no valid object name",
            "name the profile with a letter first (lower-case letters, digits, '-')",
        )
    return name


def _gpus_per_node(profile: Profile, notes: list[str]) -> int:
    """GPUs one node's server uses: TP x PP (x DP without DP attention) over the nodes."""
    tp, pp = profile.parallel_sizes
    dp = profile.args.get("dp_size", profile.args.get("data_parallel_size", 1))
    if isinstance(dp, bool) or not isinstance(dp, int) or profile.args.get("enable_dp_attention"):
        dp = 1
    per_node = max(1, tp * pp * dp // profile.nnodes)
    devices = len(profile.gpu.devices)
    if devices and devices != per_node:
        notes.append(
            f"GPUs per node: {per_node} (tp x pp{' x dp' if dp > 1 else ''} / nodes), "
            f"not the {devices} of gpu.devices"
        )
    return per_node


def _words(command: ServerCommand, table: ArgTable, view: Profile) -> tuple[Word, ...]:
    """``command``'s argv with each rank field's value marked as the engine's to give."""
    options = {}
    for field in RANK_FIELDS:
        spelling = argtable.spell(table, field)
        if spelling is not None:
            options[spelling.flag] = field
    out: list[Word] = []
    pending: str | None = None
    for token in command.argv:
        if isinstance(token, SecretRef):
            out.append(Word(secret=token.env_var))
        elif pending is not None:
            port = view.group.rendezvous_port if view.group is not None else None
            out.append(Word(rank_field=pending, port=port if pending == "dist_init_addr" else None))
            pending = None
        else:
            pending = options.get(token)
            out.append(Word(literal=token))
    return tuple(out)


def secret_variable(source: str, env: Mapping[str, EnvValue]) -> str:
    """The variable that carries the secret ``source`` into the server: the profile's own
    variable holding it, else one named like its from_env source."""
    for name, value in env.items():
        if isinstance(value, SecretRef) and value.env_var == source:
            return name
    if source in env:
        raise RenderError(
            f"the secret {{from_env: {source}}} in args needs a variable {source} to carry it, "
            "but env sets that name to a plain value",
            "rename the env entry or the from_env variable",
        )
    return source


def header(plan: Plan) -> str:
    lines = [
        f"orch export {plan.engine} {plan.profile.name}: from {plan.provenance.source}"
        + (f" at {plan.provenance.commit[:12]}" if plan.provenance.commit else ""),
        f"SGLang {plan.profile.sglang_version or plan.table.version}, launch digest {plan.digest}. "
        "Re-export instead of editing;",
        f"orch diff-effective {plan.profile.name} --url URL checks a running server against it.",
    ]
    if plan.engine == "k8s-lws":
        lines.append("Needs LeaderWorkerSet v0.6.0+ (it injects LWS_WORKER_INDEX).")
    lines += [f"note: {note}" for note in plan.notes]
    return "".join(f"# {line}\n" for line in lines)


def secret_sources(plan: Plan) -> list[str]:
    return list(dict.fromkeys(name for command in plan.commands for name in command.secret_names()))


def topology_values(profile: Profile, variables: Mapping[str, str], rank: int) -> dict[str, str]:
    """The values the engine's rank variables take for rank ``rank`` where the profile's own
    nodes run it: what makes the exported command equal to ``render``'s."""
    group = profile.group
    if group is None:
        return {}
    head = group.rendezvous_host
    return {
        variables["dist_init_addr"]: f"[{head}]" if ":" in head else head,
        variables["nnodes"]: str(group.nnodes),
        variables["node_rank"]: str(rank),
    }
