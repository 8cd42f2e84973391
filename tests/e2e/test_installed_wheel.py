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
import yaml

from tests.conftest import REPO

STANDIN = REPO / "standin"


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
        REPO, source, symlinks=True,
        ignore=shutil.ignore_patterns(".venv", ".git", "*.egg-info", "build", "__pycache__",
                                      ".mypy_cache", ".pytest_cache", ".ruff_cache"),
    )  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(root / "dist"),
          str(source)], root, env)  # fmt: skip
    (wheel,) = (root / "dist").glob("orch-*.whl")
    _run([sys.executable, "-m", "venv", str(root / "venv")], root, env)
    _run([str(root / "venv" / "bin" / "python"), "-m", "pip", "install", "-q", str(wheel)],
         root, env)  # fmt: skip
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


def test_the_installed_wheel_runs_up_and_down_of_the_bundled_demo(
    installed: Path, tmp_path: Path
) -> None:
    demo = yaml.safe_load((REPO / "profiles" / "demo.yaml").read_text())
    with socket.socket() as probe:
        try:
            probe.bind((demo["bind"], demo["port"]))
        except OSError:
            pytest.skip(f"port {demo['port']} is taken (a demo already runs on this machine)")
    model = Path(demo["model"]["path"])
    model.mkdir(parents=True, exist_ok=True)
    shutil.copy(STANDIN / "models" / "Qwen3.6-27B" / "config.json", model / "config.json")
    # orch's SGLang stand-in (NOT SGLang) importable as `sglang` in that venv, as make setup does
    site = subprocess.run(
        [str(installed / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    Path(site, "orch-sglang-standin.pth").write_text(f"{STANDIN}\n")
    env = {**os.environ, "HOME": str(tmp_path)}  # the workdir ~/.local/state/orch is its own
    env.pop("ORCH_PROFILES", None)
    try:
        up = _run([str(installed / "orch"), "up", "demo"], tmp_path, env)
        assert "READY" in up
        status = _run([str(installed / "orch"), "status", "demo"], tmp_path, env)
        assert "READY" in status
    finally:
        down = _run([str(installed / "orch"), "down", "demo"], tmp_path, env)
    assert "EXITED" in down
