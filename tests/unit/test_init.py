"""orch init: a team's profiles repository that validates, and a git hook that refuses a commit
of an invalid profile (a real git, the real hook, the real orch)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from orchestrator.cli import main
from orchestrator.errors import ExitCode


def _orch(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out, err=out)
    return code, out.getvalue()


def _git(root: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", *argv],
        cwd=root, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


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


def test_the_hook_refuses_a_commit_of_an_invalid_profile(tmp_path: Path) -> None:
    root = tmp_path / "team"
    assert _orch("init", str(root))[0] == ExitCode.OK
    assert _git(root, "init", "-q").returncode == 0
    assert _git(root, "config", "core.hooksPath", ".githooks").returncode == 0
    _git(root, "add", "-A")
    good = _git(root, "commit", "-q", "-m", "profiles")
    assert good.returncode == 0, good.stderr
    (root / "profiles" / "broken.yaml").write_text("host: gpu-1\nmodel: {path: /m}\nport: nope\n")
    _git(root, "add", "-A")
    bad = _git(root, "commit", "-q", "-m", "broken")
    assert bad.returncode != 0
    assert "broken.yaml" in bad.stderr + bad.stdout
