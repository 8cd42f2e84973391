"""``orch plan --fit`` with SGLang's real resolution (0.5.11 and 0.5.23 CPU venvs, the GPU
simulated from gpu.type): a launch whose weights (Qwen3.6-27B, 51.1 GiB by the index beside
--model-config) cannot fit one 48 GB RTX 6000 Ada gets suggestions, and EACH suggestion, written
into the profile's YAML as its dotted keys say, plans with ``orch plan`` (same venv) as not
``will fail``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.errors import ExitCode
from tests.conftest import copy_examples
from tests.sglang_real.local_plan import local_plan
from tests.sglang_real.test_memory_real import FIXTURE

FAILING = """\
extends: qwen36-mtp-b200
sglang: "{version}"
host: local
gpu:
  type: RTX 6000 Ada
  devices: [0]
"""


def _apply(document: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """The dotted keys written into the YAML document, as a person would edit it."""
    edited: dict[str, Any] = json.loads(json.dumps(document))
    for key, value in changes.items():
        *parents, last = key.split(".")
        here = edited
        for part in parents:
            here = here.setdefault(part, {})
        here[last] = value  # null: removes an inherited field (profile merge rules)
    return edited


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_fit_on_a_failing_launch_suggests_edits_that_each_plan_as_not_will_fail(
    version: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    python: Path = request.getfixturevalue(FIXTURE[version])
    root = copy_examples(tmp_path / "profiles")
    text = FAILING.format(version=version)  # on 0.5.23 the pinned strategy spells the new name
    (root / "ada.yaml").write_text(text)

    code, planned, _ = local_plan(root, python, "plan", "ada")
    assert code == ExitCode.PLAN_REFUSED
    assert planned["memory"]["verdict"] == "will fail"

    code, fitted, err = local_plan(root, python, "plan", "ada", "--fit")
    assert code == ExitCode.OK, err
    assert fitted["as_is"]["verdict"] == "will fail"
    suggestions = fitted["suggestions"]
    assert 1 <= len(suggestions) <= 5
    document = yaml.safe_load(text)
    for number, suggestion in enumerate(suggestions):
        changes = suggestion["profile_changes"]
        assert suggestion["predicted"]["verdict"] != "will fail"
        # pinned fields are never edited; the strategy is pinned in both spellings
        assert not any("strategy" in key or "draft_tokens" in key for key in changes)
        if "args.tp_size" in changes:
            assert changes["gpu.devices"] == list(range(changes["args.tp_size"]))
        name = f"ada-fit-{number}"
        (root / f"{name}.yaml").write_text(yaml.safe_dump(_apply(document, changes)))
        code, replanned, err = local_plan(root, python, "plan", name)
        budget = replanned["memory"]
        assert budget["verdict"] != "will fail", (changes, budget.get("failure"), err)
        assert code == ExitCode.OK, (changes, err)
        assert budget["max_running_requests"] == suggestion["predicted"]["max_running_requests"]
        assert budget["kv_tokens"] == suggestion["predicted"]["kv_tokens"]
