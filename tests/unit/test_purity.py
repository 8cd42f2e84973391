"""The pure core imports no I/O machinery; the fast commands never import paramiko or jinja2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, copy_examples

# The pure core: every module of these packages, and these modules (docs/architecture.md)
PURE_PACKAGES = ("sglang", "profile", "effective", "importing", "export")
PURE_MODULES = ("orchestrator.render", "orchestrator.model", "orchestrator.errors")


def _pure_core() -> list[str]:
    modules = list(PURE_MODULES)
    for package in PURE_PACKAGES:
        directory = REPO / "orchestrator" / package
        modules += [
            f"orchestrator.{package}.{path.stem}"
            for path in sorted(directory.glob("*.py"))
            if path.stem != "__init__"
        ]
    return modules


CORE = _pure_core()
FORBIDDEN_IN_CORE = {"paramiko", "psutil", "subprocess", "socket", "jinja2", "pynvml"}


def _modules_after(code: str) -> set[str]:
    probe = code + "\nimport json, sys\nprint(json.dumps(sorted(sys.modules)))"
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    return set(json.loads(result.stdout.splitlines()[-1]))


@pytest.mark.parametrize("module", CORE)
def test_core_module_imports_no_io_machinery(module: str) -> None:
    loaded = _modules_after(f"import {module}")
    assert loaded & FORBIDDEN_IN_CORE == set()


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["render", "qwen36-mtp-b200"],
        ["render", "qwen36-mtp-b200", "--json"],
        ["validate"],
        ["import", "--check", str(REPO / "tests/fixtures/launchscripts/incident-heredoc-fixed.sh")],
    ],
)
def test_fast_commands_never_import_paramiko(argv: list[str], tmp_path: Path) -> None:
    argv = ["--profiles", str(copy_examples(tmp_path / "profiles")), *argv]
    code = (
        "import io, contextlib\n"
        "from orchestrator.cli.main import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
        "    try:\n"
        f"        code = main({argv!r})\n"
        "    except SystemExit as exit_:\n"
        "        code = exit_.code\n"
        "assert code == 0, (code, out.getvalue())\n"
    )
    loaded = _modules_after(code)
    assert "paramiko" not in loaded
    assert "jinja2" not in loaded
