"""orch as a user installs it: the wheel built from this tree, in a fresh venv, run from an empty
directory. The launcher template and the example profiles come from package data, not from a
source tree beside the package."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO


def _run(argv: list[str], cwd: Path, env: dict[str, str], timeout: float = 600) -> str:
    done = subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{argv}: {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel of this tree installed (and its dependencies from the
    registry, cached by pip); its ``bin/`` directory."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"  # a copy: building must not leave build/ in the checkout
    shutil.copytree(
        REPO,
        source,
        symlinks=True,
        ignore=shutil.ignore_patterns(
            ".venv",
            ".git",
            "*.egg-info",
            "build",
            "__pycache__",
            ".mypy_cache",
            ".pytest_cache",
            ".ruff_cache",
        ),
    )
    # a user's own profile beside the examples (the README's `orch import launch.sh` writes one
    # there): never shipped
    (source / "profiles" / "users-own-import.yaml").write_text("extends: demo\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    _run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "-q",
            "-w",
            str(root / "dist"),
            str(source),
        ],
        root,
        env,
    )
    (wheel,) = (root / "dist").glob("orch-*.whl")
    _run([sys.executable, "-m", "venv", str(root / "venv")], root, env)
    _run(
        [str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)], root, env
    )
    return root / "venv" / "bin"


def test_the_installed_wheel_renders_the_bundled_demo_from_an_empty_directory(
    installed: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("ORCH_PROFILES", None)
    script = _run([str(installed / "orch"), "render", "demo", "--script"], tmp_path, env)
    assert script.startswith("#!/usr/bin/env bash")
    assert "sglang.launch_server" in script
    listing = _run([str(installed / "orch"), "profiles"], tmp_path, env)
    assert "qwen36-mtp-b200" in listing


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_the_installed_wheel_runs_the_demo_orch_init_writes(
    installed: Path, tmp_path: Path
) -> None:
    # as a pipx user would: no checkout, no stand-in wired into the venv by hand; the demo
    # profile names orch's bundled SGLang stand-in ({from_orch: standin}). Its port is moved
    # to a free one: a `make demo` may run beside the tests.
    env = {**os.environ, "HOME": str(tmp_path)}  # the workdir ~/.local/state/orch is its own
    env.pop("ORCH_PROFILES", None)
    env.pop("PYTHONPATH", None)
    site = subprocess.run(
        [
            str(installed / "python"),
            "-c",
            "import sysconfig; print(sysconfig.get_paths()['purelib'])",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert not list(Path(site).glob("*standin*.pth"))  # nothing but the wheel puts it there
    team = tmp_path / "team"
    _run([str(installed / "orch"), "init", str(team)], tmp_path, env)
    demo = team / "profiles" / "demo.yaml"
    demo.write_text(demo.read_text().replace("port: 30777", f"port: {_free_port()}"))
    orch = [str(installed / "orch"), "--profiles", str(team / "profiles")]
    rendered = _run([*orch, "render", "demo"], team, env)
    assert f"{site}/orchestrator/standin" in rendered
    try:
        up = _run([*orch, "up", "demo"], team, env)
        assert "READY" in up
        assert "NOT SGLang" in up  # the stand-in says what it is
        status = _run([*orch, "status", "demo"], team, env)
        assert "READY" in status
    finally:
        down = _run([*orch, "down", "demo"], team, env)
    assert "EXITED" in down


def test_an_untracked_profile_in_the_checkout_does_not_ship(
    installed: Path, tmp_path: Path
) -> None:
    env = {**os.environ, "HOME": str(tmp_path)}
    env.pop("ORCH_PROFILES", None)
    listing = _run([str(installed / "orch"), "profiles"], tmp_path, env)
    assert "demo" in listing
    assert "users-own-import" not in listing
