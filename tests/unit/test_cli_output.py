"""What orch's one printer guarantees whatever a command prints: --debug keeps the exit code,
usage errors name what to type, and no control character from outside reaches a terminal."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.errors import ExitCode
from tests.conftest import REPO, copy_examples

pytestmark = pytest.mark.unit


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def _orch_process(*argv: str) -> subprocess.CompletedProcess[str]:
    """orch as a user runs it: its own interpreter, its real exit status."""
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", *argv], cwd=REPO, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=60, check=False,
    )  # fmt: skip


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


def test_debug_keeps_the_errors_exit_code_and_shows_the_traceback(shipped: Path) -> None:
    plain = _orch_process("--profiles", str(shipped), "render", "no-such-profile")
    debug = _orch_process("--profiles", str(shipped), "--debug", "render", "no-such-profile")
    assert plain.returncode == ExitCode.CONFIG, plain.stderr
    assert debug.returncode == ExitCode.CONFIG, debug.stderr  # was 1: Python's, for the raise
    assert "Traceback (most recent call last)" in debug.stderr
    assert "ProfileNotFound" in debug.stderr
    assert "orch: error: " in debug.stderr
    assert "Traceback" not in plain.stderr


def test_debug_in_process_returns_the_code_instead_of_raising(shipped: Path) -> None:
    code, _, err = _run(["--profiles", str(shipped), "--debug", "render", "no-such-profile"])
    assert code == ExitCode.CONFIG
    assert "Traceback (most recent call last)" in err


def test_debug_on_an_unexpected_error_is_exit_70_with_the_traceback(
    shipped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator import profile

    def broken(self: object, name: str) -> None:  # a bug in orch, as the user would meet it
        raise RuntimeError(f"boom while loading {name}")

    monkeypatch.setattr(profile.ProfileStore, "load", broken)
    code, _, err = _run(["--profiles", str(shipped), "--debug", "render", "demo"])
    assert code == ExitCode.INTERNAL
    assert "RuntimeError: boom while loading demo" in err
    assert "Traceback (most recent call last)" in err


def test_hosts_alone_says_which_subcommand_to_give() -> None:
    run = _orch_process("hosts")
    assert run.returncode == ExitCode.USAGE
    assert "hosts_command" not in run.stderr
    assert "orch hosts trust HOST" in run.stderr
