"""orch as a user runs it: its own interpreter and its real exit status (``--debug``, argparse's
usage errors, an import that must not hang on a FIFO), and the git hook of ``orch init``, which
a real git runs with the real orch. Moved here from the unit tier: each starts Python processes."""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.conftest import REPO, copy_examples


def _orch(*argv: str) -> tuple[int, str]:
    out = io.StringIO()
    code = main(list(argv), out=out, err=out)
    return code, out.getvalue()


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


def _orch_process(*argv: str) -> subprocess.CompletedProcess[str]:
    """orch as a user runs it: its own interpreter, its real exit status."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )


def test_debug_keeps_the_errors_exit_code_and_shows_the_traceback(shipped: Path) -> None:
    plain = _orch_process("--profiles", str(shipped), "render", "no-such-profile")
    debug = _orch_process("--profiles", str(shipped), "--debug", "render", "no-such-profile")
    assert plain.returncode == ExitCode.CONFIG, plain.stderr
    assert debug.returncode == ExitCode.CONFIG, debug.stderr  # was 1: Python's, for the raise
    assert "Traceback (most recent call last)" in debug.stderr
    assert "ProfileNotFound" in debug.stderr
    assert "orch: error: " in debug.stderr
    assert "Traceback" not in plain.stderr


def test_hosts_alone_says_which_subcommand_to_give() -> None:
    run = _orch_process("hosts")
    assert run.returncode == ExitCode.USAGE
    assert "hosts_command" not in run.stderr
    assert "orch hosts trust HOST" in run.stderr


def test_a_fifo_with_no_writer_is_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "launch.sh"
    os.mkfifo(fifo)
    # a real process: a hang here must end the test, not the run
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator", "import", "--check", str(fifo)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )
    assert result.returncode == ExitCode.IMPORT, result.stderr
    assert "not a regular file" in result.stderr


# -- the git hook of orch init ------------------------------------------------------------------


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


def test_the_hook_validates_without_orch_on_path(tmp_path: Path) -> None:
    # the interpreter that ran `orch init` is used when no `orch` is on PATH (a venv not
    # activated, a pipx install elsewhere)
    root = tmp_path / "team"
    assert _orch("init", str(root))[0] == ExitCode.OK
    bare = {**os.environ, "PATH": "/usr/bin:/bin"}
    assert shutil.which("orch", path=bare["PATH"]) is None
    subprocess.run(["git", "add", "-A"], cwd=root, env=bare, check=True)
    (root / "profiles" / "broken.yaml").write_text("host: gpu-1\nmodel: {path: /m}\nport: nope\n")
    subprocess.run(["git", "add", "-A"], cwd=root, env=bare, check=True)
    bad = subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", "commit", "-q", "-m", "x"],
        cwd=root,
        env=bare,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bad.returncode != 0
    assert "broken.yaml" in bad.stderr + bad.stdout
    assert "not on PATH" not in bad.stderr


def test_the_hook_refuses_a_commit_of_an_invalid_profile(tmp_path: Path) -> None:
    root = tmp_path / "team"
    assert _orch("init", str(root))[0] == ExitCode.OK
    _git(root, "add", "-A")
    good = _git(root, "commit", "-q", "-m", "profiles")
    assert good.returncode == 0, good.stderr
    (root / "profiles" / "broken.yaml").write_text("host: gpu-1\nmodel: {path: /m}\nport: nope\n")
    _git(root, "add", "-A")
    bad = _git(root, "commit", "-q", "-m", "broken")
    assert bad.returncode != 0
    assert "broken.yaml" in bad.stderr + bad.stdout
