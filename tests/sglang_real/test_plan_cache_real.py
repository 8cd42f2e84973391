"""The plan cache with real SGLang 0.5.11 (CPU venv, GPU simulated): a repeated plan answers from
the cache without importing SGLang and says so; a changed profile misses and is planned by
SGLang again. (The time each takes is bench's figure, bench/plan_cache.py, not asserted here.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ExitCode
from tests.sglang_real.test_plan_real import incident_profile, plan


def test_a_repeated_plan_hits_and_a_changed_one_misses_on_0_5_11(
    sglang_0511: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    (profiles / "hosts.yaml").write_text("hosts: {}\n")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    name = incident_profile(profiles, "seed")
    first = plan(profiles, name, sglang_0511, "--json")
    assert first.code == ExitCode.OK, first.err
    assert first.json()["sglang_version"] == "0.5.11"
    assert first.json()["cache"]["hit"] is False

    again = plan(profiles, name, sglang_0511, "--json")
    assert again.code == ExitCode.OK, again.err
    cached = again.json()
    assert cached["cache"]["hit"] is True
    assert cached["sglang_version"] == "0.5.11"
    assert cached["fields"] == first.json()["fields"]
    assert cached["memory"] == first.json()["memory"]
    text = plan(profiles, name, sglang_0511)
    assert "from the plan cache (key " in text.out

    # the same launch with another mem_fraction_static: SGLang plans it again
    path = profiles / f"{name}.yaml"
    path.write_text(
        path.read_text().replace("mem_fraction_static: 0.92", "mem_fraction_static: 0.9")
    )
    changed = plan(profiles, name, sglang_0511, "--json")
    assert changed.json()["cache"]["hit"] is False
    (mfs,) = (f for f in changed.json()["fields"] if f["field"] == "mem_fraction_static")
    assert mfs["predicted"] == 0.9
    assert plan(profiles, name, sglang_0511, "--no-cache", "--json").json()["cache"]["hit"] is False
