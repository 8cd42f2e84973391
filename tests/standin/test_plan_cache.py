"""``orch plan`` twice with orch's SGLang stand-in (NOT SGLang) as the local SGLang: the second
answers from the plan cache, a changed profile or model config misses, ``--no-cache`` plans
afresh, the files are private and a cache directory others can write is ignored with a note."""

from __future__ import annotations

import io
import json
import stat
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.standin.conftest import STANDIN, write_model

SECRET = "hf_not-a-real-token-5678"  # noqa: S105 - a made-up token the cache must not name


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("ORCH_TEST_TOKEN", SECRET)
    model = write_model(tmp_path / "Qwen3.6-27B")
    root = tmp_path / "profiles"
    root.mkdir()
    (root / "hosts.yaml").write_text("hosts: {}\n")
    write_profile(root, model, context_length=65536)
    return root


def write_profile(root: Path, model: Path, *, context_length: int) -> None:
    (root / "cached.yaml").write_text(
        textwrap.dedent(f"""\
            sglang: "0.5.23"
            host: local
            model: {{path: {model}}}
            gpu: {{type: H200, devices: [0]}}
            port: 30000
            args: {{context_length: {context_length}}}
            env:
              PYTHONPATH: "{STANDIN}"
              ORCH_STANDIN_VERSION: "0.5.23"
              HF_TOKEN: {{from_env: ORCH_TEST_TOKEN}}
        """)
    )


def plan(root: Path, *extra: str) -> dict[str, Any]:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--profiles", str(root), "plan", "cached", "--local-sglang", sys.executable]
    code = main([*argv, "--json", *extra], out=out, err=err)
    assert code == ExitCode.OK, err.getvalue()
    document: dict[str, Any] = json.loads(out.getvalue())
    return document


def plan_text(root: Path, *extra: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    argv = ["--profiles", str(root), "plan", "cached", "--local-sglang", sys.executable]
    code = main([*argv, *extra], out=out, err=err)
    assert code == ExitCode.OK, err.getvalue()
    return out.getvalue()


def cache_dir(tmp_path: Path) -> Path:
    return tmp_path / "cache" / "orch" / "plan-cache" / "cached"


def without_cache(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "cache"}


def test_a_second_plan_answers_from_the_cache(profiles: Path, tmp_path: Path) -> None:
    first = plan(profiles)
    assert first["standin"] is True
    assert (first["cache"]["hit"], first["cache"]["stored"]) == (False, True)
    second = plan(profiles)
    assert second["cache"]["hit"] is True
    assert second["cache"]["key"] == first["cache"]["key"]
    assert without_cache(second) == without_cache(first)  # the same plan, budget included
    text = plan_text(profiles)
    assert f"from the plan cache (key {first['cache']['key']}" in text


def test_a_changed_profile_or_model_config_misses(profiles: Path, tmp_path: Path) -> None:
    first = plan(profiles)
    write_profile(profiles, tmp_path / "Qwen3.6-27B", context_length=32768)
    changed = plan(profiles)
    assert changed["cache"]["hit"] is False
    assert changed["cache"]["key"] != first["cache"]["key"]
    (context,) = (f for f in changed["fields"] if f["field"] == "context_length")
    assert context["predicted"] == 32768
    config_path = tmp_path / "Qwen3.6-27B" / "config.json"
    config = json.loads(config_path.read_text())
    config["text_config"]["max_position_embeddings"] = 131072
    config_path.write_text(json.dumps(config))
    assert plan(profiles)["cache"]["hit"] is False
    assert plan(profiles)["cache"]["hit"] is True


def test_no_cache_plans_afresh(profiles: Path) -> None:
    plan(profiles)
    fresh = plan(profiles, "--no-cache")
    assert fresh["cache"]["hit"] is False
    assert "--no-cache" in fresh["cache"]["note"]


def test_the_cache_files_are_private_and_name_no_secret(profiles: Path, tmp_path: Path) -> None:
    plan(profiles)
    directory = cache_dir(tmp_path)
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    files = list(directory.iterdir())
    assert len(files) == 2  # the salt and one answer
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert SECRET not in path.name


def test_a_cache_directory_others_can_write_is_ignored_with_a_note(
    profiles: Path, tmp_path: Path
) -> None:
    plan(profiles)
    cache_dir(tmp_path).chmod(0o777)
    answer = plan(profiles)
    assert answer["cache"]["hit"] is False
    assert "writable by group or others" in answer["cache"]["note"]
    assert "plan cache: not cached:" in plan_text(profiles)
