"""SkyPilot's own parser reads every `orch export skypilot` task (``sky.Task.from_yaml``, offline:
no cloud credentials needed), and rejects a planted mistake, so the check can fail.

An optional tier: SkyPilot is a 460 MB install. It runs where ``make skypilot-venv`` built the
venv (or ``ORCH_SKYPILOT_PYTHON`` names an interpreter that imports ``sky``), and is skipped,
saying so, elsewhere.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

GOLDEN = REPO / "tests" / "golden" / "export"
VENV_PYTHON = Path.home() / ".cache" / "orch" / "skypilot-venv" / "bin" / "python"

READ_TASKS = """\
import json, sys
import sky
results = {}
for path in sys.argv[1:]:
    try:
        task = sky.Task.from_yaml(path)
        results[path] = {"ok": True, "num_nodes": task.num_nodes,
                         "accelerators": [str(r.accelerators) for r in task.resources]}
    except Exception as exc:  # what a user running `sky launch` would see
        results[path] = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
print(json.dumps(results))
"""


def _skypilot_python() -> str:
    python = os.environ.get("ORCH_SKYPILOT_PYTHON") or (
        str(VENV_PYTHON) if VENV_PYTHON.exists() else ""
    )
    if not python:
        pytest.skip("SkyPilot is not installed for this optional tier: make skypilot-venv")
    return python


def test_skypilot_reads_every_exported_task_and_rejects_a_planted_mistake(tmp_path: Path) -> None:
    python = _skypilot_python()
    tasks = sorted(
        p for p in GOLDEN.glob("*.skypilot.yaml") if not p.read_text().startswith("# refused")
    )
    assert tasks, "no exported SkyPilot tasks to read"
    planted = tmp_path / "planted.yaml"  # `num_node`: SkyPilot says "did you mean num_nodes?"
    planted.write_text(tasks[0].read_text().replace("name:", "num_node: 2\nname:", 1))
    done = subprocess.run(
        [python, "-c", READ_TASKS, *map(str, tasks), str(planted)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    results = json.loads(done.stdout.strip().splitlines()[-1])
    for path in tasks:
        assert results[str(path)]["ok"], f"{path.name}: {results[str(path)].get('error')}"
    group = results[str(GOLDEN / "qwen35-397b-2x8-h200.skypilot.yaml")]
    assert group["num_nodes"] == 2
    assert group["accelerators"] == ["{'H200': 8}"]
    assert not results[str(planted)]["ok"]
    assert "num_nodes" in results[str(planted)]["error"]
