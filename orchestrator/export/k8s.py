"""Profile -> Kubernetes: a LeaderWorkerSet (a group: rank 0 the leader) or a Deployment (one
node), each with a Service, in exec form; and the export read back as the kubelet expands it.

Kubernetes expands ``$(NAME)`` and turns ``$$`` into ``$`` inside ``command``, ``args`` and
``env`` values, so every ``$`` of orch's text is doubled and only the references orch means are
single: the LeaderWorkerSet's topology variables and the variables that carry secrets.  [pure]"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator import __version__
from orchestrator.errors import RenderError
from orchestrator.export.common import (
    READINESS_PROBE,
    Export,
    Plan,
    Word,
    secret_sources,
    secret_variable,
    topology_values,
)
from orchestrator.model import EnvValue, SecretRef
from orchestrator.profile.yamldoc import format_path

ANNOTATION = "orch.dev"

# LeaderWorkerSet injects these into every container, first in ``env`` (v0.6.0+ for the index).
LWS_LEADER_ADDRESS = "LWS_LEADER_ADDRESS"
LWS_GROUP_SIZE = "LWS_GROUP_SIZE"
LWS_WORKER_INDEX = "LWS_WORKER_INDEX"

STARTUP_PROBE_PERIOD_S = 10
SHM_VOLUME = "dshm"


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


def _k8s_word(word: Word, env: Mapping[str, EnvValue]) -> str:
    if word.literal is not None:
        return kubernetes_escape(word.literal)
    if word.secret is not None:
        return f"$({secret_variable(word.secret, env)})"
    return {
        "dist_init_addr": f"$({LWS_LEADER_ADDRESS}):{word.port}",
        "nnodes": f"$({LWS_GROUP_SIZE})",
        "node_rank": f"$({LWS_WORKER_INDEX})",
    }[word.rank_field or ""]


def _secret_name(plan: Plan) -> str:
    return plan.profile.export.secret or f"{plan.name}-secrets"


def _k8s_env(plan: Plan, rank: int) -> list[dict[str, Any]]:
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
        if word.secret is not None and secret_variable(word.secret, command.env) not in command.env:
            carrier = secret_variable(word.secret, command.env)
            if all(entry["name"] != carrier for entry in entries):
                entries.append(from_secret(carrier, word.secret))
    return entries


def _annotations(plan: Plan) -> dict[str, str]:
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


def _container(plan: Plan, rank: int, *, leader: bool) -> dict[str, Any]:
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


def _probes(plan: Plan) -> dict[str, Any]:
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


def _pod_spec(plan: Plan, rank: int, *, leader: bool) -> dict[str, Any]:
    return {
        "terminationGracePeriodSeconds": math.ceil(plan.profile.stop_timeout_s),
        "containers": [_container(plan, rank, leader=leader)],
        "volumes": [{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}],
    }


def _metadata(plan: Plan, labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": plan.name}
    metadata["labels"] = {"app.kubernetes.io/name": plan.name, **(labels or {})}
    metadata["annotations"] = _annotations(plan)
    return metadata


def _k8s_notes(plan: Plan, secrets: Sequence[str]) -> None:
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


def _service(plan: Plan, selector: Mapping[str, str]) -> dict[str, Any]:
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


def leader_worker_set_documents(plan: Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A LeaderWorkerSet: rank 0 the leader, ranks 1.. the workers (one template, so they must
    not differ from each other), and a Service in front of the leaders."""
    _workers_alike(plan)
    _k8s_notes(plan, secret_sources(plan))
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


def _workers_alike(plan: Plan) -> None:
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


def deployment_documents(plan: Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A single-node Deployment (Recreate: a new pod needs the old one's GPUs) and a Service."""
    if plan.nnodes > 1:
        raise RenderError(
            f"{plan.profile.source}: group: a Deployment runs single-node servers; "
            f"{plan.profile.name} spans {plan.nnodes} nodes",
            f"orch export k8s-lws {plan.profile.name}",
        )
    _k8s_notes(plan, secret_sources(plan))
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


def check_round_trip(result: Export, plan: Plan) -> None:
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
            t if isinstance(t, str) else f"<{secret_variable(t.env_var, expected.env)}>"
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
