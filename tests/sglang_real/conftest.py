"""The real-SGLang tier: CPU venvs of SGLang 0.5.11 and 0.5.23 (scripts/build-sglang-venv.sh,
~2 GB and ~80 s each, cached under ~/.cache/orch/sglang-venvs between runs).

Under ``CI=true`` a venv that cannot be built fails the run; elsewhere the tier is skipped with
the reason (``ORCH_SKIP_REAL_SGLANG=1`` skips it on purpose).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

BUILD = REPO / "scripts" / "build-sglang-venv.sh"
_built: dict[str, Path] = {}


def sglang_python(version: str) -> Path:
    """The python of a CPU venv holding SGLang ``version``, built once (and cached)."""
    if os.environ.get("ORCH_SKIP_REAL_SGLANG") == "1" and os.environ.get("CI") != "true":
        pytest.skip("ORCH_SKIP_REAL_SGLANG=1")
    if version not in _built:
        done = subprocess.run(
            ["bash", str(BUILD), version], capture_output=True, text=True, timeout=1800,
            check=False,
        )  # fmt: skip
        if done.returncode != 0:
            reason = f"cannot build the SGLang {version} venv: {done.stderr.strip()[-2000:]}"
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        _built[version] = Path(done.stdout.strip().splitlines()[-1]) / "bin" / "python"
    return _built[version]


@pytest.fixture(scope="session")
def sglang_0511() -> Path:
    return sglang_python("0.5.11")


@pytest.fixture(scope="session")
def sglang_0523() -> Path:
    return sglang_python("0.5.23")
