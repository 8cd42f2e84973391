"""Offline, strict validation of the Kubernetes manifests ``orch export k8s-lws|k8s`` writes.

Strict means what ``kubectl apply --validate=strict`` would reject is an error here too, above
all a field the API does not know (``arg:`` for ``args:``), which a lax check lets through and
the cluster then silently drops or refuses.

- Core kinds (Deployment, Service, ...): kubernetes-validate's bundled OpenAPI schemas of
  Kubernetes ``K8S_VERSION``, strict variant (``additionalProperties: false`` everywhere), called
  in-process. It stops at its first error, so ``validate_core`` returns at most one schema error.
- LeaderWorkerSet: the ``openAPIV3Schema`` of the CRD vendored in tests/fixtures/k8s (SOURCE.md)
  with jsonschema, made strict the way ``kubeconform -strict`` does it (below), plus what the
  apiserver itself enforces for a structural schema (list-type map/set uniqueness). All errors.
- Both: the rules the apiserver (or LWS's validating webhook) checks in code and no schema
  carries: object names (DNS-1035 label for a Service and a LeaderWorkerSet, DNS-1123 subdomain
  otherwise), namespace, label and annotation keys, label values, and a Deployment's selector
  matching its pod template's labels.

Not covered: CEL rules (the vendored CRD has none), the rest of the LWS webhook (rollout
strategy arithmetic, subgroup policy), and pod-level semantics the apiserver checks in code (port
ranges, container name uniqueness in a Deployment, volume mounts naming a volume, ...).

Errors are ``"<JSON path>: <message>"``; ``validate_manifests`` prefixes ``"<Kind>/<name>: "``.
"""

from __future__ import annotations

import functools
import gzip
import re
from collections.abc import Hashable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

K8S_VERSION = "1.31"  # core schemas; GA kinds valid on 1.31 stay valid on every later release
LWS_TAG = "v0.10.0"
LWS_API_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_KIND = "LeaderWorkerSet"
LWS_CRD = (
    Path(__file__).resolve().parent / "fixtures" / "k8s" / f"leaderworkerset-crd-{LWS_TAG}.yaml.gz"
)

# ---------------------------------------------------------------------------------------------
# Error paths


def json_path(path: Sequence[str | int]) -> str:
    """``$.spec.template.spec.containers[0].resources.limits['nvidia.com/gpu']``."""
    out = "$"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", part):
            out += f".{part}"
        else:
            out += f"[{part!r}]"
    return out


def _schema_error(error: jsonschema.ValidationError) -> str:
    return f"{json_path(list(error.absolute_path))}: {error.message}"


def _path_order(error: jsonschema.ValidationError) -> tuple[object, ...]:
    """Errors of an object before those inside it; list items in index order."""
    path = tuple((1, p, "") if isinstance(p, int) else (0, 0, p) for p in error.absolute_path)
    return (path, error.message)


# ---------------------------------------------------------------------------------------------
# What the apiserver checks in code: names, label and annotation keys, label values, selectors

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = rf"{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*"
_DNS1035_LABEL = r"[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_PART = r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"

# The kinds whose name must be a DNS-1035 label (it becomes a DNS name; LWS: the headless
# Service's, by its webhook); every other kind: a DNS-1123 subdomain.
_DNS1035_NAMED_KINDS = frozenset({"Service", LWS_KIND})


def _name_problem(name: str, kind: str) -> str | None:
    if kind in _DNS1035_NAMED_KINDS:
        if len(name) > 63 or not re.fullmatch(_DNS1035_LABEL, name):
            return (
                f"{name!r} is not a DNS-1035 label (a {kind}'s name: at most 63 characters, "
                "lowercase letters, digits and '-', starting with a letter)"
            )
    elif len(name) > 253 or not re.fullmatch(_DNS1123_SUBDOMAIN, name):
        return f"{name!r} is not a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')"
    return None


def _qualified_name_problem(key: str) -> str | None:
    """Kubernetes' IsQualifiedName: ``[prefix/]name``, the prefix a DNS-1123 subdomain."""
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_DNS1123_SUBDOMAIN, prefix)):
        return f"key {key!r}: the prefix must be a DNS-1123 subdomain"
    if not name or len(name) > 63 or not re.fullmatch(_QUALIFIED_NAME_PART, name):
        return (
            f"key {key!r}: the name must be 1-63 characters, alphanumeric, '-', '_' or '.', "
            "starting and ending with an alphanumeric character"
        )
    return None


def _label_value_problem(value: str) -> str | None:
    if len(value) > 63 or (value and not re.fullmatch(_QUALIFIED_NAME_PART, value)):
        return (
            f"value {value!r}: a label value must be empty or 1-63 characters, alphanumeric, "
            "'-', '_' or '.', starting and ending with an alphanumeric character"
        )
    return None


def _label_map_errors(labels: Mapping[Any, Any], path: list[str | int], values: bool) -> list[str]:
    errors = []
    for key, value in labels.items():
        if not isinstance(key, str):
            continue  # the schema reports it
        problems = [_qualified_name_problem(key)]
        if values and isinstance(value, str):
            problems.append(_label_value_problem(value))
        errors += [f"{json_path([*path, key])}: {p}" for p in problems if p]
    return errors


def _metadata_maps(node: object, path: list[str | int]) -> Iterator[str]:
    """Every ``metadata.labels``/``metadata.annotations`` and ``matchLabels`` in a document."""
    if isinstance(node, Mapping):
        for key, value in node.items():
            here = [*path, key]
            if key == "metadata" and isinstance(value, Mapping):
                for field, values in (("labels", True), ("annotations", False)):
                    if isinstance(value.get(field), Mapping):
                        yield from _label_map_errors(value[field], [*here, field], values)
            if key == "matchLabels" and isinstance(value, Mapping):
                yield from _label_map_errors(value, here, values=True)
            yield from _metadata_maps(value, here)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            yield from _metadata_maps(item, [*path, index])


def apiserver_rule_errors(document: Mapping[str, Any], presence: bool = True) -> list[str]:
    """What the apiserver (and LWS's webhook) check in code, beyond any OpenAPI schema; with
    ``presence`` also that metadata.name is there (a schema that requires it already says so)."""
    errors: list[str] = []
    kind = document.get("kind")
    metadata = document.get("metadata")
    if not isinstance(metadata, Mapping):
        return ["$.metadata: required, with a name"] if presence else []
    name = metadata.get("name")
    if not isinstance(name, str):
        if presence:
            errors.append("$.metadata.name: required (a string)")
    elif problem := _name_problem(name, str(kind)):
        errors.append(f"$.metadata.name: {problem}")
    namespace = metadata.get("namespace")
    if isinstance(namespace, str) and (
        len(namespace) > 63 or not re.fullmatch(_DNS1123_LABEL, namespace)
    ):
        errors.append(f"$.metadata.namespace: {namespace!r} is not a DNS-1123 label")
    errors += _metadata_maps(document, [])
    if kind == "Deployment":
        errors += _deployment_selector_errors(document)
    return errors


def _deployment_selector_errors(document: Mapping[str, Any]) -> list[str]:
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        return []
    selector = spec.get("selector")
    template = spec.get("template")
    match = selector.get("matchLabels") if isinstance(selector, Mapping) else None
    template_meta = template.get("metadata") if isinstance(template, Mapping) else None
    labels = template_meta.get("labels") if isinstance(template_meta, Mapping) else None
    if not isinstance(match, Mapping):
        return []
    labels = labels if isinstance(labels, Mapping) else {}
    missing = {k: v for k, v in match.items() if labels.get(k) != v}
    if missing:
        return [
            f"$.spec.template.metadata.labels: selector does not match template labels "
            f"(matchLabels {missing} are not among them)"
        ]
    return []


# ---------------------------------------------------------------------------------------------
# Core kinds: kubernetes-validate, strict


def validate_core(document: Mapping[str, Any]) -> list[str]:
    """Errors for a core-kind document (empty when valid): kubernetes-validate's strict schema of
    Kubernetes ``K8S_VERSION`` (its first error only), then the apiserver's own rules."""
    api_version, kind = document.get("apiVersion"), document.get("kind")
    if not isinstance(api_version, str) or not isinstance(kind, str):
        return ["$: apiVersion and kind are required (strings)"]
    try:
        kubernetes_validate.validate(dict(document), K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [_schema_error(error), *apiserver_rule_errors(document)]
    except kubernetes_validate.SchemaNotFoundError:
        return [
            f"$: no schema for kind {kind} of apiVersion {api_version} in Kubernetes {K8S_VERSION}"
        ]
    return apiserver_rule_errors(document)


# ---------------------------------------------------------------------------------------------
# LeaderWorkerSet: the vendored CRD's schema, made strict

# Top-level ``metadata`` is a bare ``type: object`` in every CRD (the apiserver validates
# ObjectMeta itself). Here: the fields the CRD's own embedded metadata (its pod templates') has,
# with a name required; their formats are checked by ``apiserver_rule_errors``.
_STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
OBJECT_META_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["name"],
    "properties": {
        "name": {"type": "string"},
        "namespace": {"type": "string"},
        "labels": _STRING_MAP,
        "annotations": _STRING_MAP,
        "finalizers": {"type": "array", "items": {"type": "string"}},
    },
    "additionalProperties": False,
}

_SUBSCHEMA_KEYS = frozenset({"items", "additionalProperties", "not"})
_SUBSCHEMA_LIST_KEYS = frozenset({"anyOf", "allOf", "oneOf"})


def strictify(schema: Mapping[str, Any]) -> dict[str, Any]:
    """A structural schema, strict as ``kubeconform -strict`` makes it, for jsonschema.

    - ``additionalProperties: false`` on every object schema with ``properties`` and neither
      ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields``;
    - ``x-kubernetes-int-or-string: true``: an integer or a string (controller-gen also writes the
      ``anyOf``; added where it is missing); ``x-kubernetes-embedded-resource``: apiVersion, kind
      and metadata allowed; ``nullable: true``: null allowed, else null is an error (the
      apiserver would prune it: never what an exporter means);
    - descriptions dropped (most of the 1.3 MB).
    """
    out: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "description":
            continue
        if key == "properties":
            out[key] = {name: strictify(sub) for name, sub in value.items()}
        elif key in _SUBSCHEMA_KEYS and isinstance(value, Mapping):
            out[key] = strictify(value)
        elif key in _SUBSCHEMA_LIST_KEYS:
            out[key] = [strictify(sub) for sub in value]
        else:
            out[key] = value
    if out.get("x-kubernetes-int-or-string") and "anyOf" not in out and "type" not in out:
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("x-kubernetes-embedded-resource"):
        out.setdefault("properties", {})
        out["properties"].setdefault("apiVersion", {"type": "string"})
        out["properties"].setdefault("kind", {"type": "string"})
        out["properties"].setdefault("metadata", {"type": "object"})
    if (
        "properties" in out
        and "additionalProperties" not in out
        and not out.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    if out.pop("nullable", False):
        if isinstance(out.get("type"), str):
            out["type"] = [out["type"], "null"]
        else:
            out = {"anyOf": [{"type": "null"}, out]}
    return out


def _list_type(
    validator: Any, list_type: str, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    """``x-kubernetes-list-type``: a ``set`` holds no item twice, a ``map`` no key twice (keys
    left out count with their schema default), as the apiserver enforces ("Duplicate value")."""
    if not validator.is_type(instance, "array"):
        return
    seen: list[object] = []
    for index, item in enumerate(instance):
        if list_type == "set":
            key: object = item
            shown = repr(item)
        elif list_type == "map" and isinstance(item, Mapping):
            names = schema.get("x-kubernetes-list-map-keys", [])
            item_props = schema.get("items", {}).get("properties", {})
            key = tuple(item.get(n, item_props.get(n, {}).get("default")) for n in names)
            shown = ", ".join(f"{n}={v!r}" for n, v in zip(names, key, strict=True))
        else:
            continue
        if key in seen:
            yield jsonschema.ValidationError(
                f"duplicate entry ({shown}) in a list of type {list_type}", path=[index]
            )
        seen.append(key)


_LwsValidator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft4Validator,  # OpenAPI 3.0's schema object is draft 4's, keyword for keyword
    {"x-kubernetes-list-type": _list_type},
)


@functools.cache
def lws_crd() -> dict[str, Any]:
    """The vendored CustomResourceDefinition (libyaml's safe loader: 0.2 s, not 2.5 s)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    crd: dict[str, Any] = yaml.load(gzip.decompress(LWS_CRD.read_bytes()), Loader=loader)  # noqa: S506 (safe)
    return crd


@functools.cache
def lws_schema() -> dict[str, Any]:
    """The vendored CRD's v1 openAPIV3Schema, strict, with LWS's own additions (above)."""
    (version,) = [v for v in lws_crd()["spec"]["versions"] if v["name"] == "v1"]
    schema = strictify(version["schema"]["openAPIV3Schema"])
    props = schema["properties"]
    props["apiVersion"] = {"type": "string", "enum": [LWS_API_VERSION]}
    props["kind"] = {"type": "string", "enum": [LWS_KIND]}
    props["metadata"] = OBJECT_META_SCHEMA
    schema["required"] = ["apiVersion", "kind", "metadata", "spec"]
    # LWS's validating webhook: size >= 1 (the schema only says int32).
    props["spec"]["properties"]["leaderWorkerTemplate"]["properties"]["size"]["minimum"] = 1
    return schema


@functools.cache
def _lws_validator() -> Any:
    return _LwsValidator(lws_schema())


def validate_lws(document: Mapping[str, Any]) -> list[str]:
    """Errors for a LeaderWorkerSet (empty when valid): every schema error, sorted by path, then
    the apiserver's own rules."""
    errors = sorted(_lws_validator().iter_errors(document), key=_path_order)
    return [_schema_error(e) for e in errors] + apiserver_rule_errors(document, presence=False)


# ---------------------------------------------------------------------------------------------
# Multi-document manifests


class _StrictLoader(yaml.SafeLoader):
    """yaml.SafeLoader that rejects a key given twice in one mapping (safe_load keeps the last
    silently; the apiserver's strict field validation rejects it)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self.flatten_mapping(node)  # merge keys (<<) first, as the base class does
        keys: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, Hashable):
                continue  # the base class reports it
            if key in keys:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            keys.add(key)
        return super().construct_mapping(node, deep=deep)


def validate_document(document: Mapping[str, Any]) -> list[str]:
    """Dispatch on apiVersion/kind: a LeaderWorkerSet to ``validate_lws``, the rest to
    ``validate_core``."""
    if document.get("apiVersion") == LWS_API_VERSION and document.get("kind") == LWS_KIND:
        return validate_lws(document)
    return validate_core(document)


def validate_manifests(text: str) -> list[str]:
    """Errors for a multi-document YAML manifest, each ``"<Kind>/<name>: <JSON path>: <msg>"``
    (empty documents, such as after a trailing ``---``, are skipped; no document at all is an
    error, as is a kind/name given twice)."""
    try:
        documents = list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.YAMLError as error:
        return [f"YAML: {error}"]
    errors: list[str] = []
    seen: set[str] = set()
    count = 0
    for index, document in enumerate(documents):
        if document is None:
            continue
        count += 1
        if not isinstance(document, dict):
            errors.append(f"document {index}: not a mapping but {type(document).__name__}")
            continue
        metadata = document.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
        label = f"{document.get('kind', f'document {index}')}/{name}"
        if label in seen:
            errors.append(f"{label}: given twice")
        seen.add(label)
        errors += [f"{label}: {e}" for e in validate_document(document)]
    if not count:
        errors.append("no documents")
    return errors
