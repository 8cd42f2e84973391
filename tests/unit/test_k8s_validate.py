"""tests/k8s_validate.py: hand-written manifests of the shape ``orch export k8s-lws|k8s`` writes
validate clean, and each planted mistake is caught with a message naming it."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.k8s_validate import (
    K8S_VERSION,
    lws_crd,
    lws_schema,
    validate_core,
    validate_lws,
    validate_manifests,
)

POD_SPEC = """\
terminationGracePeriodSeconds: 30
containers:
- name: sglang
  image: lmsysorg/sglang:v0.5.23
  command: [sglang, serve]
  args: [--model-path, /models/m, --port, "30000", --nnodes, $(LWS_GROUP_SIZE)]
  env:
  - {name: NCCL_IB_DISABLE, value: "0"}
  - name: HF_TOKEN
    valueFrom: {secretKeyRef: {name: hf-token, key: token}}
  ports:
  - {name: http, containerPort: 30000, protocol: TCP}
  resources:
    limits: {nvidia.com/gpu: 8}
  volumeMounts:
  - {name: dshm, mountPath: /dev/shm}
  startupProbe:
    httpGet: {path: /health_generate, port: http}
    periodSeconds: 10
    failureThreshold: 360
  readinessProbe:
    httpGet: {path: /health_generate, port: 30000}
    periodSeconds: 30
  livenessProbe:
    httpGet: {path: /health, port: http}
    periodSeconds: 5
volumes:
- name: dshm
  emptyDir: {medium: Memory}
"""


def _indent(text: str, spaces: int) -> str:
    return "".join(" " * spaces + line if line else line for line in text.splitlines(True))


LWS = f"""\
apiVersion: leaderworkerset.x-k8s.io/v1
kind: LeaderWorkerSet
metadata:
  name: qwen-2x8
  labels: {{app.kubernetes.io/name: qwen-2x8}}
  annotations: {{orch.dev/launch-digest: adddadae8b55}}
spec:
  replicas: 1
  startupPolicy: LeaderCreated
  leaderWorkerTemplate:
    size: 2
    restartPolicy: RecreateGroupOnPodRestart
    leaderTemplate:
      metadata:
        labels: {{app.kubernetes.io/name: qwen-2x8, role: leader}}
      spec:
{_indent(POD_SPEC, 8)}\
    workerTemplate:
      metadata:
        labels: {{app.kubernetes.io/name: qwen-2x8, role: worker}}
      spec:
{_indent(POD_SPEC, 8)}\
"""

DEPLOYMENT = f"""\
apiVersion: apps/v1
kind: Deployment
metadata:
  name: qwen-h200
  labels: {{app.kubernetes.io/name: qwen-h200}}
spec:
  replicas: 1
  selector:
    matchLabels: {{app.kubernetes.io/name: qwen-h200}}
  strategy: {{type: Recreate}}
  template:
    metadata:
      labels: {{app.kubernetes.io/name: qwen-h200}}
    spec:
{_indent(POD_SPEC, 6)}\
"""

SERVICE = """\
apiVersion: v1
kind: Service
metadata:
  name: qwen-h200
spec:
  selector: {app.kubernetes.io/name: qwen-h200}
  ports:
  - {name: http, port: 30000, targetPort: http, protocol: TCP}
"""

LEADER = ("spec", "leaderWorkerTemplate", "leaderTemplate", "spec")
WORKER = ("spec", "leaderWorkerTemplate", "workerTemplate", "spec")
CONTAINER = "containers[0]"


def load(text: str) -> dict[str, Any]:
    document = yaml.safe_load(text)
    assert isinstance(document, dict)
    return document


def at(document: dict[str, Any], *path: str | int) -> Any:
    node: Any = document
    for part in path:
        node = node[part]
    return node


def only(errors: list[str], *fragments: str) -> str:
    """The one error, which names every fragment."""
    assert len(errors) == 1, errors
    for fragment in fragments:
        assert fragment in errors[0], errors
    return errors[0]


# --- clean -----------------------------------------------------------------------------------


def test_hand_written_manifests_validate_clean() -> None:
    assert validate_lws(load(LWS)) == []
    assert validate_core(load(DEPLOYMENT)) == []
    assert validate_core(load(SERVICE)) == []
    assert validate_manifests("---\n".join([LWS, SERVICE, DEPLOYMENT]) + "---\n") == []


def test_core_schemas_are_the_pinned_kubernetes_release() -> None:
    # kubernetes-validate falls back to an older bundled release silently; this one is bundled.
    assert kubernetes_validate.validate(load(SERVICE), K8S_VERSION, strict=True) == K8S_VERSION


@pytest.mark.parametrize("gpus", [8, "8", "8000m"])
def test_int_or_string_quantities(gpus: object) -> None:
    lws = load(LWS)
    at(lws, *LEADER, "containers", 0, "resources", "limits")["nvidia.com/gpu"] = gpus
    assert validate_lws(lws) == []


def test_int_or_string_rejects_what_is_neither_or_no_quantity() -> None:
    lws = load(LWS)
    at(lws, *LEADER, "containers", 0, "resources", "limits")["nvidia.com/gpu"] = 8.5
    at(lws, *WORKER, "containers", 0, "resources", "limits")["nvidia.com/gpu"] = "eight"
    at(lws, *WORKER, "containers", 0, "livenessProbe", "httpGet")["port"] = [30000]
    errors = validate_lws(lws)
    assert len(errors) == 3, errors
    assert any("limits['nvidia.com/gpu']: 8.5 is not valid under any" in e for e in errors)
    assert any("limits['nvidia.com/gpu']: 'eight' does not match" in e for e in errors)
    assert any("livenessProbe.httpGet.port: [30000] is not valid under any" in e for e in errors)


# --- planted mistakes: LeaderWorkerSet --------------------------------------------------------


def test_lws_arg_for_args_is_an_unknown_field() -> None:
    lws = load(LWS)
    container = at(lws, *WORKER, "containers", 0)
    container["arg"] = container.pop("args")
    only(
        validate_lws(lws),
        f"$.spec.leaderWorkerTemplate.workerTemplate.spec.{CONTAINER}: ",
        "'arg' was unexpected",
    )


def test_lws_restart_policy_typo() -> None:
    lws = load(LWS)
    at(lws, "spec", "leaderWorkerTemplate")["restartPolicy"] = "RecreateGroupOnPodRestrt"
    only(
        validate_lws(lws),
        "$.spec.leaderWorkerTemplate.restartPolicy: 'RecreateGroupOnPodRestrt' is not one of",
    )


def test_lws_size_as_a_string() -> None:
    lws = load(LWS)
    at(lws, "spec", "leaderWorkerTemplate")["size"] = "2"
    only(validate_lws(lws), "$.spec.leaderWorkerTemplate.size: '2' is not of type 'integer'")


def test_lws_size_zero_is_refused_as_lws_webhook_does() -> None:
    lws = load(LWS)
    at(lws, "spec", "leaderWorkerTemplate")["size"] = 0
    only(validate_lws(lws), "$.spec.leaderWorkerTemplate.size: 0 is less than the minimum of 1")


def test_lws_unknown_spec_field() -> None:
    lws = load(LWS)
    lws["spec"]["replica"] = 2
    only(validate_lws(lws), "$.spec: ", "'replica' was unexpected")


def test_lws_unknown_top_level_and_metadata_fields() -> None:
    lws = load(LWS)
    lws["status"] = {}  # known to the schema: allowed
    lws["spec "] = {}
    lws["metadata"]["label"] = {"a": "b"}
    errors = validate_lws(lws)
    assert len(errors) == 2, errors
    assert errors[0].startswith("$: ")
    assert "'spec ' was unexpected" in errors[0]
    assert errors[1].startswith("$.metadata: ")
    assert "'label' was unexpected" in errors[1]


def test_lws_required_fields() -> None:
    lws = load(LWS)
    del lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]
    del at(lws, *LEADER, "containers", 0)["name"]
    errors = validate_lws(lws)
    assert "$.spec.leaderWorkerTemplate: 'workerTemplate' is a required property" in errors
    assert f"$.{'.'.join(LEADER)}.{CONTAINER}: 'name' is a required property" in errors
    assert len(errors) == 2, errors


def test_lws_wrong_api_version_or_kind_in_validate_lws() -> None:
    lws = load(LWS)
    lws["apiVersion"] = "leaderworkerset.x-k8s.io/v1beta1"
    only(validate_lws(lws), "$.apiVersion: 'leaderworkerset.x-k8s.io/v1beta1' is not one of")


def test_lws_null_is_an_error_not_pruned() -> None:
    lws = load(LWS)
    at(lws, *WORKER, "containers", 0)["image"] = None
    only(validate_lws(lws), f"{CONTAINER}.image: None is not of type 'string'")


def test_lws_duplicate_key_in_a_list_map() -> None:
    lws = load(LWS)
    env = at(lws, *WORKER, "containers", 0, "env")
    env.append({"name": "NCCL_IB_DISABLE", "value": "1"})
    only(
        validate_lws(lws),
        f"{CONTAINER}.env[2]: duplicate entry (name='NCCL_IB_DISABLE') in a list of type map",
    )
    ports = at(lws, *LEADER, "containers", 0, "ports")
    ports.append({"name": "http2", "containerPort": 30000})  # protocol defaults to TCP
    errors = validate_lws(lws)
    assert any(
        "ports[1]: duplicate entry (containerPort=30000, protocol='TCP')" in e for e in errors
    )


def test_lws_name_and_labels_follow_the_apiserver_rules() -> None:
    lws = load(LWS)
    lws["metadata"]["name"] = "Qwen3.6"  # LWS's webhook: a DNS-1035 label
    lws["metadata"]["labels"]["version"] = "a/b"
    at(lws, "spec", "leaderWorkerTemplate", "workerTemplate", "metadata", "labels")["rank"] = 1
    errors = validate_lws(lws)
    assert len(errors) == 3, errors
    assert "workerTemplate.metadata.labels.rank: 1 is not of type 'string'" in errors[0]
    assert errors[1].startswith("$.metadata.name: 'Qwen3.6' is not a DNS-1035 label")
    assert errors[2].startswith("$.metadata.labels.version: value 'a/b'")


def test_lws_metadata_name_required() -> None:
    lws = load(LWS)
    del lws["metadata"]["name"]
    only(validate_lws(lws), "$.metadata: 'name' is a required property")
    del lws["metadata"]
    only(validate_lws(lws), "$: 'metadata' is a required property")


def test_core_metadata_name_required() -> None:
    service = load(SERVICE)
    del service["metadata"]["name"]
    only(validate_core(service), "$.metadata.name: required")


# --- planted mistakes: Deployment and Service ------------------------------------------------


def test_deployment_arg_for_args_is_an_unknown_field() -> None:
    deployment = load(DEPLOYMENT)
    container = at(deployment, "spec", "template", "spec", "containers", 0)
    container["arg"] = container.pop("args")
    only(
        validate_core(deployment),
        f"$.spec.template.spec.{CONTAINER}: ",
        "'arg' was unexpected",
    )


def test_deployment_unknown_spec_field() -> None:
    deployment = load(DEPLOYMENT)
    deployment["spec"]["replica"] = 1
    only(validate_core(deployment), "$.spec: ", "'replica' was unexpected")


def test_deployment_selector_must_match_template_labels() -> None:
    deployment = load(DEPLOYMENT)
    deployment["spec"]["selector"]["matchLabels"]["role"] = "server"
    only(validate_core(deployment), "selector does not match template labels", "'role'")


def test_deployment_resources_as_int_or_string() -> None:
    deployment = load(DEPLOYMENT)
    limits = at(deployment, "spec", "template", "spec", "containers", 0, "resources", "limits")
    limits["nvidia.com/gpu"] = "8"
    assert validate_core(deployment) == []


def test_service_port_must_be_an_integer() -> None:
    service = load(SERVICE)
    service["spec"]["ports"][0]["port"] = "http"  # targetPort is int-or-string, port is not
    only(validate_core(service), "$.spec.ports[0].port: 'http' is not of type 'integer'")


def test_service_port_is_required() -> None:
    service = load(SERVICE)
    del service["spec"]["ports"][0]["port"]
    only(validate_core(service), "$.spec.ports[0]: 'port' is a required property")


def test_service_name_must_be_a_dns_1035_label() -> None:
    service = load(SERVICE)
    service["metadata"]["name"] = "7b-server"
    only(validate_core(service), "$.metadata.name: '7b-server' is not a DNS-1035 label")


def test_unknown_core_kind() -> None:
    only(
        validate_core({"apiVersion": "v1", "kind": "Servcie", "metadata": {"name": "x"}}),
        "no schema for kind Servcie",
    )


# --- multi-document manifests ----------------------------------------------------------------


def test_manifest_errors_name_the_document_and_path() -> None:
    text = "---\n".join(
        [
            LWS.replace("    size: 2\n", '    size: "2"\n'),
            SERVICE.replace("port: 30000,", "port: '30000',"),
            DEPLOYMENT.replace("  args:", "  arg:"),
        ]
    )
    assert validate_manifests(text) == [
        "LeaderWorkerSet/qwen-2x8: $.spec.leaderWorkerTemplate.size: '2' is not of type 'integer'",
        "Service/qwen-h200: $.spec.ports[0].port: '30000' is not of type 'integer'",
        "Deployment/qwen-h200: $.spec.template.spec.containers[0]: Additional properties are "
        "not allowed ('arg' was unexpected)",
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "no documents"),
        ("---\n---\n", "no documents"),
        ("apiVersion: v1\nkind: [\n", "YAML: "),
        (SERVICE + "  type: ClusterIP\n  type: NodePort\n", "duplicate key 'type'"),
        ("- just\n- a list\n", "document 0: not a mapping but list"),
        (SERVICE + "---\n" + SERVICE, "Service/qwen-h200: given twice"),
        (LWS.replace("x-k8s.io/v1", "x-k8s.io/v2"), "no schema for kind LeaderWorkerSet"),
    ],
    ids=["empty", "only-separators", "syntax", "duplicate-key", "list", "twice", "lws-v2"],
)
def test_manifest_level_errors(text: str, expected: str) -> None:
    only(validate_manifests(text), expected)


def test_yaml_1_1_booleans_are_caught_by_the_schema() -> None:
    text = LWS.replace('{name: NCCL_IB_DISABLE, value: "0"}', "{name: NCCL_IB_DISABLE, value: off}")
    errors = validate_manifests(text)
    assert len(errors) == 2, errors  # the leader's and the worker's
    assert all("env[0].value: False is not of type 'string'" in e for e in errors)


# --- the strict schema -----------------------------------------------------------------------


def _object_schemas(node: Any) -> Iterator[dict[str, Any]]:
    if isinstance(node, dict):
        if "properties" in node:
            yield node
        for key, value in node.items():
            if key == "properties":
                for sub in value.values():
                    yield from _object_schemas(sub)
            elif key in ("items", "additionalProperties") and isinstance(value, dict):
                yield from _object_schemas(value)
            elif key in ("anyOf", "allOf", "oneOf"):
                for sub in value:
                    yield from _object_schemas(sub)


def test_strict_schema_closes_every_object_and_stays_a_valid_draft4_schema() -> None:
    schema = lws_schema()
    objects = list(_object_schemas(schema))
    assert len(objects) > 500
    assert all(o["additionalProperties"] is False for o in objects)
    jsonschema.Draft4Validator.check_schema(schema)


def test_vendored_crd_is_the_v1_leaderworkerset() -> None:
    crd = lws_crd()
    assert crd["kind"] == "CustomResourceDefinition"
    assert crd["spec"]["names"]["kind"] == "LeaderWorkerSet"
    assert [v["name"] for v in crd["spec"]["versions"]] == ["v1"]


def test_validation_does_not_mutate_the_document() -> None:
    lws, deployment = load(LWS), load(DEPLOYMENT)
    before = copy.deepcopy((lws, deployment))
    validate_lws(lws)
    validate_core(deployment)
    assert (lws, deployment) == before
