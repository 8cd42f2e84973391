"""orch init: a team's profiles repository that validates, with its git hook installed (the hook
run by a real git on a commit starts orch: tests/e2e/test_orch_process.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode


def _orch(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out, err=out)
    return code, out.getvalue()


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", *argv],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_init_writes_a_repository_that_validates(tmp_path: Path) -> None:
    code, shown = _orch("init", str(tmp_path / "team"))
    assert code == ExitCode.OK
    assert "wrote" in shown
    code, shown = _orch("--profiles", str(tmp_path / "team" / "profiles"), "validate", "--strict")
    assert code == ExitCode.OK, shown


def test_init_never_overwrites(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "hosts.yaml").write_text("hosts: {}\n")
    code, shown = _orch("init", str(tmp_path))
    assert code == ExitCode.CONFIG
    assert "profiles/hosts.yaml already exists" in shown
    assert (tmp_path / "profiles" / "hosts.yaml").read_text() == "hosts: {}\n"
    assert not (tmp_path / "profiles" / "example.yaml").exists()


def test_init_makes_a_git_repository_with_the_hook_on(tmp_path: Path) -> None:
    root = tmp_path / "team"
    code, shown = _orch("init", str(root))
    assert code == ExitCode.OK
    assert "a new git repository" in shown
    assert _git(root, "rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
    assert _git(root, "config", "core.hooksPath").stdout.strip() == ".githooks"


def test_init_inside_a_repository_leaves_git_alone(tmp_path: Path) -> None:
    assert _git(tmp_path, "init", "-q").returncode == 0
    code, shown = _orch("init", str(tmp_path / "profiles-here"))
    assert code == ExitCode.OK
    assert "inside an existing git repository" in shown
    assert not (tmp_path / "profiles-here" / ".git").exists()


def test_init_writes_the_demo_that_validates(tmp_path: Path) -> None:
    root = tmp_path / "team"
    assert _orch("init", str(root))[0] == ExitCode.OK
    code, shown = _orch("--profiles", str(root / "profiles"), "render", "demo")
    assert code == ExitCode.OK, shown
    assert "standin" in shown  # orch's SGLang stand-in, from this installation
