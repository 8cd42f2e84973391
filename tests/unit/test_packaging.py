"""What ships is what the repository tracks: the example profiles in the wheel and in the tests'
EXAMPLES are the files git tracks in profiles/, never a user's own file there (the README's
`orch import launch.sh` writes profiles/launch.yaml)."""

from __future__ import annotations

import shutil
import subprocess
import tomllib

import pytest

from tests.conftest import EXAMPLES, REPO


def _shipped_in_the_wheel() -> set[str]:
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["orchestrator"]
    return {p.removeprefix("examples/") for p in patterns if p.startswith("examples/")}


def test_the_wheel_names_each_example_and_no_pattern() -> None:
    shipped = _shipped_in_the_wheel()
    assert not [name for name in shipped if "*" in name or "?" in name], shipped
    assert shipped == {f"{name}.yaml" for name in (*EXAMPLES, "hosts")}


def test_the_examples_are_the_tracked_profiles() -> None:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout: the tracked files cannot be listed")
    listed = subprocess.run(
        ["git", "ls-files", "--", "profiles/*.yaml"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {name.removeprefix("profiles/") for name in listed} == _shipped_in_the_wheel()
