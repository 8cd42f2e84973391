"""Each shipped profile renders to exactly the argv/env in tests/golden/*.json.

A change in rendering shows up here as a diff to review. Rewrite on purpose with
``pytest tests/golden --update-goldens`` and commit the JSON with the change that caused it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator import render
from orchestrator.profile.store import ProfileStore
from tests.conftest import EXAMPLES, SHIPPED_PROFILES, copy_examples, portable

GOLDEN = Path(__file__).resolve().parent
# (golden name, profile, SGLang version override or None)
_SHIPPED = ProfileStore(SHIPPED_PROFILES)
CASES = [(name, name, None) for name in EXAMPLES if not _SHIPPED.load(name).profile.abstract] + [
    ("qwen36-mtp-b200@0.5.23", "qwen36-mtp-b200", "0.5.23")
]


def _render(tmp_path: Path, profile: str, version: str | None) -> str:
    root = copy_examples(tmp_path / "profiles")
    if version is not None:
        (root / "variant.yaml").write_text(f'extends: {profile}\nsglang: "{version}"\n')
        profile = "variant"
    loaded = ProfileStore(root).load(profile)
    commands = render.render_members(loaded.profile, loaded.table)
    if loaded.profile.group is not None:
        return render.group_json(loaded.profile, loaded.table) + "\n"
    return portable(render.command_json(commands[0])) + "\n"


@pytest.mark.parametrize(("golden", "profile", "version"), CASES, ids=[c[0] for c in CASES])
def test_golden_render(
    request: pytest.FixtureRequest, tmp_path: Path, golden: str, profile: str, version: str | None
) -> None:
    rendered = _render(tmp_path, profile, version)
    path = GOLDEN / f"{golden}.json"
    if request.config.getoption("--update-goldens"):
        path.write_text(rendered, encoding="utf-8")
    assert path.exists(), f"no golden for {golden}: run pytest tests/golden --update-goldens"
    assert json.loads(rendered) == json.loads(path.read_text(encoding="utf-8"))
    assert rendered == path.read_text(encoding="utf-8")


def test_every_golden_file_has_a_case() -> None:
    stale = {p.stem for p in GOLDEN.glob("*.json")} - {case[0] for case in CASES}
    assert stale == set(), f"golden files without a profile: {sorted(stale)}"
