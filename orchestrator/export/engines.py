"""Profile -> what another engine runs: Kubernetes (LeaderWorkerSet, Deployment), SkyPilot, dstack.

The profile already knows the exact argv and env of every rank (``render.render_members``); an
export carries that command over without retyping it, so the same server starts:

- **Kubernetes** gets exec form (``command``/``args`` lists, never ``bash -c``). Kubernetes
  expands ``$(NAME)`` and turns ``$$`` into ``$`` inside ``command``, ``args`` and ``env`` values,
  so every ``$`` of orch's text is doubled and only the references orch means are single:
  the LeaderWorkerSet's topology variables and the variables that carry secrets.
- **SkyPilot** and **dstack** run shell text (``run``/``commands``): every literal is quoted
  once, the server is ``exec``ed, and only the rank fields and the secrets are expansions.

What cannot be carried over exactly is either translated and said (``Export.notes``: the image's
interpreter for the host's, the GPU count for the host's device list, a pod's address for a
loopback bind, orch's gated launch left off since no orch supervisor runs there) or refused with
a ``RenderError`` naming the profile key: never dropped in silence. Before returning, each export
reads its own result back (``kubernetes_expand``, the shell quoting's inverse) and checks that
every rank gets exactly ``commands``: the argv and env that ``render`` gives the exported view.

Pure: no I/O. The documents are dicts; ``Export.text`` is the YAML to write.
"""

from __future__ import annotations

import dataclasses
import math
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator import __version__, render
from orchestrator.errors import RenderError
from orchestrator.model import (
    EXPORT_ENGINES,
    EnvValue,
    Profile,
    SecretRef,
    ServerCommand,
    frozen_map,
)
from orchestrator.profile.yamldoc import KeyPath, dump_yaml, format_path
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable

LOOPBACK_BINDS = ("127.0.0.1", "localhost", "::1")
ANY_ADDRESS = "0.0.0.0"  # noqa: S104 - a pod or cloud VM serves its port on its own address
IMAGE_REPOSITORY = "lmsysorg/sglang"  # SGLang's own images, tagged v<version>
ANNOTATION = "orch.dev"

# The fields that say where a rank sits in its group: the only ones an export takes from the
# engine's variables (the other nodes' addresses are the engine's, not the profile's).
RANK_FIELDS = ("dist_init_addr", "nnodes", "node_rank")

# LeaderWorkerSet injects these into every container, first in ``env`` (v0.6.0+ for the index).
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"

STARTUP_PROBE_PERIOD_S = 10
READINESS_PROBE = "/health_generate"  # a real generation: ready means it serves tokens
SHM_VOLUME = "dshm"


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


def export(profile: Profile, table: ArgTable, engine: str, provenance: Provenance) -> Export:
    """``profile`` as ``engine`` runs it; a ``RenderError`` names what the engine cannot run."""
    builders: dict[str, Callable[[_Plan], tuple[list[dict[str, Any]], dict[str, str]]]] = {
        "k8s-lws": _leader_worker_set,
        "k8s": _deployment,
        "skypilot": _skypilot,
        "dstack": _dstack,
    }
    if engine not in builders:
        raise RenderError(
            f"unknown export engine {engine!r}", f"one of {', '.join(EXPORT_ENGINES)}"
        )
    plan = _plan(profile, table, engine, provenance)
    documents, variables = builders[engine](plan)
    header = _header(plan)
    body = "---\n".join(dump_yaml(document) for document in documents)
    result = Export(
        engine=engine,
        profile=profile.name,
        documents=tuple(documents),
        text=header + body,
        notes=tuple(plan.notes),
        commands=plan.commands,
        rank_variables=variables,
    )
    _check_round_trip(result, plan)
    return result


# -- the exported view --------------------------------------------------------------------------


@dataclass
class _Plan:
    """What every engine builds from: the exported view's commands, split into words."""

    engine: str
    profile: Profile  # the exported view
    table: ArgTable
    provenance: Provenance
    name: str  # the object / task name
    image: str
    gpus_per_node: int
    commands: tuple[ServerCommand, ...]
    words: tuple[tuple[_Word, ...], ...]  # per rank: argv as literals, secrets and rank fields
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
class _Word:
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
    notes.append(
        f"program: {' '.join(program)} in the image "
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
}


def _env_key_path(profile: Profile, rank: int, name: str) -> KeyPath:
    if profile.group is not None and name in profile.group.nodes[rank].env:
        return ("group", "nodes", rank, "env", name)
    return ("env", name)


def _plan(profile: Profile, table: ArgTable, engine: str, provenance: Provenance) -> _Plan:
    if profile.abstract:
        raise RenderError(
            f"profile {profile.name!r} is abstract (a base for others) and cannot be exported",
            "export a profile that extends it",
        )
    view, notes = exported_profile(profile, table, engine)
    commands = render.render_members(view, table)
    image = profile.export.image
    if image is None:
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
    return _Plan(engine, view, table, provenance, name, image, gpus, commands, words, notes)


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


def _words(command: ServerCommand, table: ArgTable, view: Profile) -> tuple[_Word, ...]:
    """``command``'s argv with each rank field's value marked as the engine's to give."""
    options = {}
    for field in RANK_FIELDS:
        spelling = argtable.spell(table, field)
        if spelling is not None:
            options[spelling.flag] = field
    out: list[_Word] = []
    pending: str | None = None
    for token in command.argv:
        if isinstance(token, SecretRef):
            out.append(_Word(secret=token.env_var))
        elif pending is not None:
            port = view.group.rendezvous_port if view.group is not None else None
            out.append(
                _Word(rank_field=pending, port=port if pending == "dist_init_addr" else None)
            )
            pending = None
        else:
            pending = options.get(token)
            out.append(_Word(literal=token))
    return tuple(out)


def _env_name(source: str, env: Mapping[str, EnvValue]) -> str:
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


# -- Kubernetes ---------------------------------------------------------------------------------


def kubernetes_escape(text: str) -> str:
    """``text`` as a literal in a container's ``command``, ``args`` or ``env`` value."""
    return text.replace("$", "$$")


def kubernetes_expand(text: str, variables: Mapping[str, str]) -> str:
    """What the kubelet makes of ``text`` in ``command``, ``args`` or an ``env`` value: a port of
    Kubernetes' ``third_party/forked/golang/expansion/expand.go``. ``$(NAME)`` becomes the
    variable's value when the container defines it (else stays as written), ``$$`` becomes
    ``$``, and every other ``$`` is itself."""
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == "$" and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            rest = text[cursor + 1 :]
            if rest[0] == "$":
                out.append("$")
                advance = 1
            elif rest[0] == "(":
                close = rest.find(")", 1)
                if close == -1:
                    out.append("$(")
                    advance = 1
                else:
                    name = rest[1:close]
                    out.append(variables.get(name, f"$({name})"))
                    advance = close + 1
            else:
                out.append("$" + rest[0])
                advance = 1
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    out.append(text[checkpoint:])
    return "".join(out)


def _k8s_word(word: _Word, env: Mapping[str, EnvValue]) -> str:
    if word.literal is not None:
        return kubernetes_escape(word.literal)
    if word.secret is not None:
        return f"$({_env_name(word.secret, env)})"
    return {
        "dist_init_addr": f"$({LWS_LEADER_ADDRESS}):{word.port}",
        "nnodes": f"$({LWS_GROUP_SIZE})",
        "node_rank": f"$({LWS_WORKER_INDEX})",
    }[word.rank_field or ""]


def _secret_name(plan: _Plan) -> str:
    return plan.profile.export.secret or f"{plan.name}-secrets"


def _k8s_env(plan: _Plan, rank: int) -> list[dict[str, Any]]:
    """The container's env: literals escaped, secrets from the profile's Secret, and a variable
    for each secret the argv takes (``$(NAME)`` expands only a variable the container has)."""
    command = plan.commands[rank]
    entries: list[dict[str, Any]] = []
    secrets = plan.profile.export.secret_keys

    def from_secret(name: str, source: str) -> dict[str, Any]:
        key = secrets.get(source, source)
        ref = {"name": _secret_name(plan), "key": key}
        return {"name": name, "valueFrom": {"secretKeyRef": ref}}

    for name, value in command.env.items():
        if isinstance(value, SecretRef):
            entries.append(from_secret(name, value.env_var))
        else:
            entries.append({"name": name, "value": kubernetes_escape(value)})
    for word in plan.words[rank]:
        if word.secret is not None and _env_name(word.secret, command.env) not in command.env:
            carrier = _env_name(word.secret, command.env)
            if all(entry["name"] != carrier for entry in entries):
                entries.append(from_secret(carrier, word.secret))
    return entries


def _annotations(plan: _Plan) -> dict[str, str]:
    commit = plan.provenance.commit or "unknown (not in git)"
    if plan.provenance.dirty:
        commit += " (uncommitted changes)"
    return {
        f"{ANNOTATION}/profile": plan.profile.name,
        f"{ANNOTATION}/profile-source": plan.provenance.source,
        f"{ANNOTATION}/profiles-commit": commit,
        f"{ANNOTATION}/sglang-version": plan.profile.sglang_version or plan.table.version,
        f"{ANNOTATION}/launch-digest": plan.digest,
        f"{ANNOTATION}/exported-by": f"orch {__version__}",
    }


def _container(plan: _Plan, rank: int, *, leader: bool) -> dict[str, Any]:
    command = plan.commands[rank]
    env = command.env
    words = [_k8s_word(word, env) for word in plan.words[rank]]
    split = plan.program_length()
    container: dict[str, Any] = {
        "name": "sglang",
        "image": plan.image,
        "command": words[:split],
        "args": words[split:],
    }
    entries = _k8s_env(plan, rank)
    if entries:
        container["env"] = entries
    if leader:
        container["ports"] = [{"name": "http", "containerPort": command.port, "protocol": "TCP"}]
    container["resources"] = {"limits": {"nvidia.com/gpu": plan.gpus_per_node}}
    container["volumeMounts"] = [{"name": SHM_VOLUME, "mountPath": "/dev/shm"}]  # noqa: S108
    if leader:
        container.update(_probes(plan))
    return container


def _probes(plan: _Plan) -> dict[str, Any]:
    """The leader's probes: startup covers weight loading (health.startup_timeout_s), readiness
    is a real generation, liveness the profile's health endpoint (health.interval_s, failures)."""
    health = plan.profile.health
    startup_failures = max(1, math.ceil(health.startup_timeout_s / STARTUP_PROBE_PERIOD_S))
    return {
        "startupProbe": {
            "httpGet": {"path": READINESS_PROBE, "port": "http"},
            "periodSeconds": STARTUP_PROBE_PERIOD_S,
            "timeoutSeconds": STARTUP_PROBE_PERIOD_S,
            "failureThreshold": startup_failures,
        },
        "readinessProbe": {
            "httpGet": {"path": READINESS_PROBE, "port": "http"},
            "periodSeconds": 30,
            "timeoutSeconds": 30,
            "failureThreshold": 3,
        },
        "livenessProbe": {
            "httpGet": {"path": health.endpoint, "port": "http"},
            "periodSeconds": max(1, math.ceil(health.interval_s)),
            "timeoutSeconds": 30,
            "failureThreshold": health.failures,
        },
    }


def _pod_spec(plan: _Plan, rank: int, *, leader: bool) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": math.ceil(plan.profile.stop_timeout_s),
        "containers": [_container(plan, rank, leader=leader)],
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}],
    }


def _metadata(plan: _Plan, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": plan.name}
    metadata["labels"] = {"app.kubernetes.io/name": plan.name, **(labels or {})}
    metadata["annotations"] = _annotations(plan)
    return metadata


def _k8s_notes(plan: _Plan, secrets: Sequence[str]) -> None:
    plan.notes.append(
        "restart: Kubernetes restarts a failed container with its own backoff "
        "(restart.* is orch's supervisor's); stop_timeout_s is terminationGracePeriodSeconds"
    )
    if secrets:
        keys = plan.profile.export.secret_keys
        literals = " ".join(f'--from-literal={keys.get(s, s)}="${s}"' for s in secrets)
        plan.notes.append(
            f"secrets come from the Secret {_secret_name(plan)}: "
            f"kubectl create secret generic {_secret_name(plan)} {literals}"
        )


def _secret_sources(plan: _Plan) -> list[str]:
    return list(dict.fromkeys(name for command in plan.commands for name in command.secret_names()))


def _service(plan: _Plan, selector: Mapping[str, str]) -> dict[str, Any]:
    port = plan.commands[0].port
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": plan.name, "labels": {"app.kubernetes.io/name": plan.name}},
        "spec": {
            "selector": dict(selector),
            "ports": [{"name": "http", "port": port, "targetPort": "http", "protocol": "TCP"}],
        },
    }


def _leader_worker_set(plan: _Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A LeaderWorkerSet: rank 0 the leader, ranks 1.. the workers (one template, so they must
    not differ from each other), and a Service in front of the leaders."""
    _workers_alike(plan)
    _k8s_notes(plan, _secret_sources(plan))
    plan.notes.append(
        "a rank that fails recreates its whole group (RecreateGroupOnPodRestart), as orch "
        "restarts a group together; workers start with the leader (LeaderCreated: SGLang's "
        "rank 0 serves nothing until every rank has joined)"
    )
    name_label = "leaderworkerset.sigs.k8s.io/name"
    leader_labels = {"app.kubernetes.io/name": plan.name, "role": "leader"}
    template: dict[str, Any] = {
        "size": plan.nnodes,
        "restartPolicy": "RecreateGroupOnPodRestart",
    }
    leader_pod = {
        "metadata": {"labels": leader_labels, "annotations": _annotations(plan)},
        "spec": _pod_spec(plan, 0, leader=True),
    }
    if plan.nnodes > 1:
        template["leaderTemplate"] = leader_pod
        template["workerTemplate"] = {
            "metadata": {
                "labels": {"app.kubernetes.io/name": plan.name, "role": "worker"},
                "annotations": _annotations(plan),
            },
            "spec": _pod_spec(plan, 1, leader=False),
        }
    else:
        template["workerTemplate"] = leader_pod  # a group of one: the leader is its only pod
    lws = {
        "apiVersion": "leaderworkerset.x-k8s.io/v1",
        "kind": "LeaderWorkerSet",
        "metadata": _metadata(plan),
        "spec": {
            "replicas": plan.profile.export.replicas,
            "startupPolicy": "LeaderCreated",
            "leaderWorkerTemplate": template,
        },
    }
    selector = {name_label: plan.name, "role": "leader"}
    variables = {
        "dist_init_addr": LWS_LEADER_ADDRESS,
        "nnodes": LWS_GROUP_SIZE,
        "node_rank": LWS_WORKER_INDEX,
    }
    return [lws, _service(plan, selector)], variables


def _workers_alike(plan: _Plan) -> None:
    """A LeaderWorkerSet has one worker template: every rank >= 1 must run rank 1's command."""
    if plan.nnodes <= 2:
        return
    first = plan.commands[1]
    for rank in range(2, plan.nnodes):
        command = plan.commands[rank]
        for name in dict.fromkeys([*first.env, *command.env]):
            if first.env.get(name) != command.env.get(name):
                raise RenderError(
                    f"{plan.profile.source}: {format_path(('group', 'nodes', rank, 'env', name))}: "
                    f"rank {rank} differs from rank 1, but a LeaderWorkerSet's workers share one "
                    "template",
                    "give every node but rank 0 the same env, or export to skypilot/dstack",
                )
        if command.port != first.port:
            raise RenderError(
                f"{plan.profile.source}: {format_path(('group', 'nodes', rank, 'port'))}: rank "
                f"{rank}'s port {command.port} differs from rank 1's {first.port}, but a "
                "LeaderWorkerSet's workers share one template",
                "give every node but rank 0 the same port",
            )


def _deployment(plan: _Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A single-node Deployment (Recreate: a new pod needs the old one's GPUs) and a Service."""
    if plan.nnodes > 1:
        raise RenderError(
            f"{plan.profile.source}: group: a Deployment runs single-node servers; "
            f"{plan.profile.name} spans {plan.nnodes} nodes",
            f"orch export k8s-lws {plan.profile.name}",
        )
    _k8s_notes(plan, _secret_sources(plan))
    labels = {"app.kubernetes.io/name": plan.name}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(plan),
        "spec": {
            "replicas": plan.profile.export.replicas,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": dict(labels)},
            "template": {
                "metadata": {"labels": dict(labels), "annotations": _annotations(plan)},
                "spec": _pod_spec(plan, 0, leader=True),
            },
        },
    }
    return [deployment, _service(plan, labels)], {}


# -- shell engines (SkyPilot, dstack) ------------------------------------------------------------


@dataclass(frozen=True)
class _Shell:
    """How a shell engine names its rank variables, and the head's address."""

    rank: str
    nodes: str
    head_setup: str  # a shell line that sets MASTER_ADDR ("" when a variable has it already)
    head: str  # the variable holding the head's address


_SKYPILOT = _Shell(
    rank="SKYPILOT_NODE_RANK",
    nodes="SKYPILOT_NUM_NODES",
    # newline-separated, head first: everything before the first whitespace
    head_setup='MASTER_ADDR="${SKYPILOT_NODE_IPS%%[[:space:]]*}"',
    head="MASTER_ADDR",
)
_DSTACK = _Shell(
    rank="DSTACK_NODE_RANK", nodes="DSTACK_NODES_NUM", head_setup="", head="DSTACK_MASTER_NODE_IP"
)


def _shell_word(word: _Word, env: Mapping[str, EnvValue], shell: _Shell) -> str:
    if word.literal is not None:
        return shlex.quote(word.literal)
    if word.secret is not None:
        return f'"${{{_env_name(word.secret, env)}}}"'
    return {
        "dist_init_addr": f'"${{{shell.head}}}:{word.port}"',
        "nnodes": f'"${{{shell.nodes}}}"',
        "node_rank": f'"${{{shell.rank}}}"',
    }[word.rank_field or ""]


def _exports(env: Mapping[str, EnvValue]) -> list[str]:
    """``export NAME=value`` lines: literals quoted; a secret under another name than its
    from_env source copied from the source (which the engine passes in)."""
    lines = []
    for name, value in env.items():
        if isinstance(value, SecretRef):
            if value.env_var != name:
                lines.append(f'export {name}="${{{value.env_var}}}"')
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    return lines


def shell_script(plan: _Plan, shell: _Shell) -> str:
    """The POSIX sh script that execs each rank's server: ``set -eu``; shared env; per-rank env
    (and argv, where ranks differ) in a ``case`` on the rank variable; ``exec``."""
    lines = ["set -eu"]
    envs = [command.env for command in plan.commands]
    common = {k: v for k, v in envs[0].items() if all(e.get(k, None) == v for e in envs)}
    lines += _exports(common)
    argvs = [
        [_shell_word(word, command.env, shell) for word in words]
        for words, command in zip(plan.words, plan.commands, strict=True)
    ]
    exec_lines = [_exec(argv) for argv in argvs]
    if plan.nnodes > 1:
        if shell.head_setup:
            lines.append(shell.head_setup)
        lines.append(f'case "${{{shell.rank}}}" in')
        for rank, env in enumerate(envs):
            own = {k: v for k, v in env.items() if k not in common}
            body = _exports(own)
            if len(set(exec_lines)) > 1:
                body.append(exec_lines[rank])
            lines.append(f"  {rank})")
            # indent each entry's first line only: a quoted value's own newlines are its text
            lines += [f"    {entry}" for entry in body] or ["    :"]
            lines.append("    ;;")
        message = shlex.quote(
            f"orch export: {plan.profile.name} has ranks 0-{plan.nnodes - 1}, not "
        )
        lines.append(f'  *) echo {message}"${{{shell.rank}}}" >&2; exit 2 ;;')
        lines.append("esac")
    if len(set(exec_lines)) == 1:
        lines.append(exec_lines[0])
    return "\n".join(lines) + "\n"


def _exec(argv: Sequence[str]) -> str:
    """``exec program args``, one flag per line (continued with a backslash)."""
    parts: list[list[str]] = [["exec"]]
    for word in argv:
        if word.startswith("--"):
            parts.append([])
        parts[-1].append(word)
    return " \\\n    ".join(" ".join(part) for part in parts)


def _accelerator(plan: _Plan, engine: str) -> str:
    gpu = plan.profile.gpu.type
    if gpu is None:
        raise RenderError(
            f"{plan.profile.source}: gpu.type: {engine} needs the GPU model to ask for",
            "set gpu.type (H200, B200 ...)",
        )
    return f"{gpu.name.replace(' ', '')}:{plan.gpus_per_node}"


def _skypilot(plan: _Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A SkyPilot task: resources, nodes, secrets by name, a readiness probe, and ``run``."""
    task: dict[str, Any] = {"name": plan.name}
    if plan.nnodes > 1:
        task["num_nodes"] = plan.nnodes
    task["resources"] = {
        "accelerators": _accelerator(plan, "skypilot"),
        "ports": [plan.commands[0].port],
        "image_id": f"docker:{plan.image}",
    }
    secrets = _secret_sources(plan)
    if secrets:
        task["secrets"] = dict.fromkeys(secrets)
        plan.notes.append(
            f"secrets: sky launch --secret {' --secret '.join(secrets)} (read from your "
            "environment; never in the task file)"
        )
    task["service"] = {
        "readiness_probe": {
            "path": READINESS_PROBE,
            "initial_delay_seconds": math.ceil(plan.profile.health.startup_timeout_s),
        },
        "replicas": plan.profile.export.replicas,
    }
    task["run"] = shell_script(plan, _SKYPILOT)
    plan.notes.append(
        "restart: SkyPilot runs the server once (managed jobs or SkyServe restart it); "
        "restart.* is orch's supervisor's"
    )
    variables = {
        "dist_init_addr": "MASTER_ADDR",
        "nnodes": _SKYPILOT.nodes,
        "node_rank": _SKYPILOT.rank,
    }
    return [task], variables


def _dstack(plan: _Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A dstack service (one node) or task (``nodes:``, where dstack does multi-node)."""
    run: dict[str, Any] = {"type": "service" if plan.nnodes == 1 else "task", "name": plan.name}
    if plan.nnodes > 1:
        run["nodes"] = plan.nnodes
    run["image"] = plan.image
    secrets = _secret_sources(plan)
    if secrets:
        run["env"] = list(secrets)  # a bare name: dstack takes the value from your environment
        plan.notes.append(f"secrets: set {', '.join(secrets)} in the shell that runs dstack apply")
    run["commands"] = [shell_script(plan, _DSTACK)]
    port = plan.commands[0].port
    if plan.nnodes == 1:
        run["port"] = port
        run["replicas"] = plan.profile.export.replicas
        run["probes"] = [{"type": "http", "url": READINESS_PROBE}]
    else:
        run["ports"] = [port]
    run["resources"] = {"gpu": _accelerator(plan, "dstack"), "shm_size": "32GB"}
    plan.notes.append("restart: dstack runs the server once; restart.* is orch's supervisor's")
    variables = {"dist_init_addr": _DSTACK.head, "nnodes": _DSTACK.nodes, "node_rank": _DSTACK.rank}
    return [run], variables


# -- output ---------------------------------------------------------------------------------------


def _header(plan: _Plan) -> str:
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


# -- the export read back --------------------------------------------------------------------------


def _check_round_trip(result: Export, plan: _Plan) -> None:
    """Kubernetes: expand each container as the kubelet does and compare with ``commands``
    (a bug here would start another server than the profile's). The shell engines are checked
    by the test suite through a real shell; here their quoting is read back with shlex."""
    if result.engine not in ("k8s-lws", "k8s"):
        return
    for rank, expected in enumerate(plan.commands):
        container = container_for_rank(result, rank)
        variables = topology_values(plan.profile, result.rank_variables, rank)
        variables.update({name: f"<{name}>" for name in secret_carriers(container)})
        argv = [
            kubernetes_expand(t, variables) for t in [*container["command"], *container["args"]]
        ]
        want = [
            t if isinstance(t, str) else f"<{_env_name(t.env_var, expected.env)}>"
            for t in expected.argv
        ]
        env = {
            entry["name"]: kubernetes_expand(entry["value"], variables)
            for entry in container.get("env", [])
            if "value" in entry
        }
        want_env = {k: v for k, v in expected.env.items() if isinstance(v, str)}
        if argv != want or env != want_env:
            raise AssertionError(f"orch export {result.engine}: rank {rank} does not round-trip")


def container_for_rank(result: Export, rank: int) -> dict[str, Any]:
    """The Kubernetes container that runs rank ``rank``."""
    spec = result.documents[0]["spec"]
    if result.documents[0]["kind"] == "Deployment":
        pod = spec["template"]
    else:
        template = spec["leaderWorkerTemplate"]
        pod = (
            template["leaderTemplate"]
            if rank == 0 and "leaderTemplate" in template
            else template["workerTemplate"]
        )
    container: dict[str, Any] = pod["spec"]["containers"][0]
    return container


def secret_carriers(container: Mapping[str, Any]) -> list[str]:
    """The container's variables that come from a Secret."""
    return [entry["name"] for entry in container.get("env", []) if "valueFrom" in entry]


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
