"""Every Kubernetes export validates offline and strictly (unknown fields rejected): core kinds
against Kubernetes' OpenAPI schemas (kubernetes-validate), the LeaderWorkerSet against its CRD's
schema (tests/fixtures/k8s/, made strict) with jsonschema. A mistake planted in a real export
fails, so the validators can."""

from __future__ import annotations

import pytest
import yaml

from orchestrator.export import export
from orchestrator.export.common import Provenance
from orchestrator.profile.store import ProfileStore
from tests.conftest import EXAMPLES, SHIPPED_PROFILES
from tests.k8s_validate import validate_manifests

SHIPPED = ProfileStore(SHIPPED_PROFILES)
PROVENANCE = Provenance("profiles/p.yaml", "0123456789abcdef", dirty=True)
CASES = [
    (name, engine)
    for name in EXAMPLES
    if not SHIPPED.load(name).profile.abstract
    for engine in ("k8s-lws", "k8s")
    if not (engine == "k8s" and SHIPPED.load(name).profile.group is not None)
]


def _export(name: str, engine: str) -> str:
    loaded = SHIPPED.load(name)
    return export(loaded.profile, loaded.table, engine, PROVENANCE).text


@pytest.mark.parametrize(("name", "engine"), CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_every_kubernetes_export_validates_strictly(name: str, engine: str) -> None:
    assert validate_manifests(_export(name, engine)) == []


def _planted(text: str, plant: str) -> str:
    documents = list(yaml.safe_load_all(text))
    spec = documents[0]["spec"]
    if documents[0]["kind"] == "Deployment":
        container = spec["template"]["spec"]["containers"][0]
    else:
        container = spec["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]
    if plant == "arg":
        container["arg"] = container.pop("args")
    elif plant == "policy":
        spec["leaderWorkerTemplate"]["restartPolicy"] = "RecreateGroupOnPodRestrt"
    elif plant == "gpus":
        container["resources"]["limits"]["nvidia.com/gpu"] = "eight"
    elif plant == "service-port":
        documents[1]["spec"]["ports"][0]["port"] = "http"
    return yaml.safe_dump_all(documents, sort_keys=False)


@pytest.mark.parametrize(
    ("engine", "plant", "named"),
    [
        ("k8s-lws", "arg", "'arg' was unexpected"),
        ("k8s", "arg", "'arg' was unexpected"),
        ("k8s-lws", "policy", "RecreateGroupOnPodRestrt"),
        ("k8s-lws", "gpus", "nvidia.com/gpu"),
        ("k8s", "service-port", "port"),
    ],
)
def test_a_mistake_planted_in_an_export_fails_validation(
    engine: str, plant: str, named: str
) -> None:
    name = "qwen35-397b-2x8-h200" if engine == "k8s-lws" else "qwen36-mtp-b200"
    errors = validate_manifests(_planted(_export(name, engine), plant))
    assert errors, f"{plant} passed validation"
    assert any(named in error for error in errors), errors
