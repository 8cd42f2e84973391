"""Each shipped profile exported to each engine is exactly tests/golden/export/<profile>.<engine>.yaml
(.sh for Slurm's batch script).

A change in an export shows up here as a diff to review; rewrite on purpose with
``pytest tests/golden --update-goldens``. The provenance is fixed (no commit) so that the files do
not change with every commit of this repository.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import RenderError
from orchestrator.export import export
from orchestrator.export.common import Provenance
from orchestrator.model import EXPORT_ENGINES
from orchestrator.profile.store import ProfileStore
from tests.conftest import EXAMPLES, REPO, SHIPPED_PROFILES, portable

GOLDEN = Path(__file__).resolve().parent / "export"
_SHIPPED = ProfileStore(SHIPPED_PROFILES, display_root=REPO)  # sources as profiles/x.yaml
CASES = [
    (name, engine)
    for name in EXAMPLES
    if not _SHIPPED.load(name).profile.abstract
    for engine in EXPORT_ENGINES
]


@pytest.mark.parametrize(("profile", "engine"), CASES, ids=[f"{p}.{e}" for p, e in CASES])
def test_golden_export(request: pytest.FixtureRequest, profile: str, engine: str) -> None:
    loaded = _SHIPPED.load(profile)
    provenance = Provenance(f"profiles/{profile}.yaml", None)
    try:
        text = portable(export(loaded.profile, loaded.table, engine, provenance).text)
    except RenderError as exc:  # an engine that cannot run the profile: its refusal is golden
        text = f"# refused: {exc.message}\n# hint: {exc.hint}\n"
    path = GOLDEN / _golden_name(profile, engine)
    if request.config.getoption("--update-goldens"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden for {profile} {engine}: pytest tests/golden --update-goldens"
    assert text == path.read_text(encoding="utf-8")


def _golden_name(profile: str, engine: str) -> str:
    return f"{profile}.{engine}.{'sh' if engine == 'slurm' else 'yaml'}"


def test_every_export_golden_has_a_case() -> None:
    written = {p.name for p in GOLDEN.glob("*.yaml")} | {p.name for p in GOLDEN.glob("*.sh")}
    stale = written - {_golden_name(p, e) for p, e in CASES}
    assert stale == set(), f"golden exports without a profile: {sorted(stale)}"
