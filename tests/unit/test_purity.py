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


def test_core_modules_import_no_io_machinery() -> None:
    """Every module of the pure core imported into one fresh interpreter loads none of the I/O
    machinery; so none of them does (what one module loads is a part of what all of them load).
    Only when something does is each imported alone, to name the culprit."""
    loaded = _modules_after("\n".join(f"import {module}" for module in CORE))
    if loaded & FORBIDDEN_IN_CORE:
        culprits = {
            module: sorted(_modules_after(f"import {module}") & FORBIDDEN_IN_CORE)
            for module in CORE
        }
        pytest.fail(f"the pure core loads I/O machinery: {_named(culprits)}")


def _named(culprits: dict[str, list[str]]) -> str:
    return "; ".join(f"{module}: {', '.join(found)}" for module, found in culprits.items() if found)


FAST_COMMANDS = [
    ["--help"],
    ["render", "qwen36-mtp-b200"],
    ["render", "qwen36-mtp-b200", "--json"],
    ["validate"],
    ["import", "--check", str(REPO / "tests/fixtures/launchscripts/incident-heredoc-fixed.sh")],
]


def _main_code(profiles: Path, argv: list[str]) -> str:
    """Python that runs orch's main on ``argv`` and asserts it succeeded."""
    argv = ["--profiles", str(profiles), *argv]
    return (
        "import io, contextlib\n"
        "from orchestrator.cli.main import main\n"
        "out = io.StringIO()\n"
        "with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):\n"
        "    try:\n"
        f"        code = main({argv!r})\n"
        "    except SystemExit as exit_:\n"
        "        code = exit_.code\n"
        f"assert code == 0, ({argv!r}, code, out.getvalue())\n"
    )


def test_fast_commands_never_import_paramiko(tmp_path: Path) -> None:
    """The fast commands one after another in one fresh interpreter (what each loads is a part of
    what all of them load); each alone only to name the one that loads it."""
    profiles = copy_examples(tmp_path / "profiles")
    slow = {"paramiko", "jinja2"}
    loaded = _modules_after("".join(_main_code(profiles, argv) for argv in FAST_COMMANDS))
    if loaded & slow:
        culprits = {
            " ".join(argv): sorted(_modules_after(_main_code(profiles, argv)) & slow)
            for argv in FAST_COMMANDS
        }
        pytest.fail(f"a fast command loads a slow import: {_named(culprits)}")
