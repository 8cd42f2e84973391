"""Shared fixtures: a scratch profile directory with the real inventory format, and one real
OpenSSH sshd on 127.0.0.1 (tests/ssh/sshd.py) for every test that goes over SSH."""

from __future__ import annotations

import os
import re
import shutil
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from orchestrator.profile.bundled import bundled_path
from orchestrator.profile.store import ProfileStore
from tests.ssh.sshd import sshd, sshd_config  # one real sshd for the whole session

__all__ = ["sshd", "sshd_config"]

# Under CI the property tests draw the same examples every run (a landing must not depend on a
# random draw); elsewhere they explore, and what they find is kept in .hypothesis/ and fixed.
settings.register_profile("ci", derandomize=True, database=None)
if os.environ.get("CI") == "true":
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
SHIPPED_PROFILES = REPO / "profiles"
# The example profiles orch ships (profiles/, package data). Tests read them by name, or from a
# copy of just these: a user's own profile in profiles/ (copying demo.yaml is the obvious first
# move) never changes what a test sees.
EXAMPLES = (
    "demo",
    "qwen36-27b",
    "qwen36-mtp-b200",
    "qwen36-mtp-h200",
    "qwen36-mtp-rtxpro6000-tp4",
    "qwen35-397b-2x8-h200",  # a launch group of two nodes
)


# Where this installation of orch keeps what a profile names with {from_orch: NAME} (the demo's
# stand-in): machine-specific, so golden files hold it as <orch>.
ORCH_PACKAGE = str(Path(bundled_path("standin")).parent)


def portable(text: str) -> str:
    """``text`` with this installation's package directory written as ``<orch>``, and the launch
    digest of a launch that names it (it differs per installation) as ``<digest>``."""
    if ORCH_PACKAGE not in text:
        return text
    text = _DIGEST.sub(lambda found: found.group(1) + "<digest>", text)
    return text.replace(ORCH_PACKAGE, "<orch>")


_DIGEST = re.compile(r"(launch digest |launch-digest: |launch_digest: )[0-9a-f]{12}\b")


def copy_examples(target: Path) -> Path:
    """The shipped examples and their host inventory, copied into ``target`` (created)."""
    target.mkdir(parents=True, exist_ok=True)
    for name in (*EXAMPLES, "hosts"):
        shutil.copy(SHIPPED_PROFILES / f"{name}.yaml", target / f"{name}.yaml")
    return target


# Real SGLang outputs (tests/fixtures/sglang/README.md says where each comes from).
CAPTURES = REPO / "tests" / "fixtures" / "sglang" / "captures"


def capture_lines(name: str) -> list[str]:
    """A capture's lines, without the ``exit=N`` line the capture tool appended."""
    path = CAPTURES / name
    return [line for line in path.read_text().splitlines() if not line.startswith("exit=")]


# Each directory is one tier (pyproject.toml's markers); `make test-fast` runs the unit tier.
_TIERS = {
    "unit": "unit",
    "golden": "unit",
    "property": "property",
    "agent": "agent",
    "e2e": "e2e",
    "ssh": "e2e",
    "transport": "e2e",
    "standin": "e2e",
    "sglang_real": "sglang_real",
    "bench": "bench",
    "engines": "engines",
    "gateway": "gateway",
    "slurm": "slurm",
}


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m TIER`` alone (``make test-fast`` is ``-m unit``): the other tiers' directories are not
    collected, so their modules (and what they import) are not even loaded."""
    tier = _TIERS.get(collection_path.name)
    wanted = config.getoption("markexpr")
    if tier is None or collection_path.parent != REPO / "tests" or wanted not in _TIERS.values():
        return None
    return True if tier != wanted else None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        parts = item.path.relative_to(REPO / "tests").parts
        tier = _TIERS.get(parts[0]) if len(parts) > 1 else None
        if tier is None:
            raise pytest.UsageError(f"{item.nodeid}: tests/{parts[0]}/ belongs to no tier")
        item.add_marker(getattr(pytest.mark, tier))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="rewrite tests/golden/*.json from the current renderer (review the diff!)",
    )


@dataclass(frozen=True)
class ProfileDir:
    root: Path
    write: Callable[[str, str], Path]

    def store(self) -> ProfileStore:
        return ProfileStore(self.root, display_root=self.root.parent)


HOSTS = """\
hosts:
  gpu-1:
    address: 10.0.0.7
    user: ubuntu
    python: /opt/venv/bin/python
    workdir: /data/orch
"""


@pytest.fixture
def profile_dir(tmp_path: Path) -> ProfileDir:
    root = tmp_path / "profiles"
    root.mkdir()

    def write(name: str, text: str) -> Path:
        path = root / (name if name.endswith(".yaml") else f"{name}.yaml")
        path.write_text(textwrap.dedent(text), encoding="utf-8")
        return path

    write("hosts.yaml", HOSTS)
    return ProfileDir(root, write)
