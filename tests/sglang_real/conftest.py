"""The real-SGLang tier: CPU venvs of SGLang 0.5.11 and 0.5.23 (scripts/build-sglang-venv.sh,
~2 GB and ~150-200 s each, cached under ~/.cache/orch/sglang-venvs between runs). The build's
progress is shown while it runs, even under ``pytest -q``.

Under ``CI=true`` a venv that cannot be built fails the run; elsewhere the tier is skipped with
the reason (``ORCH_SKIP_REAL_SGLANG=1`` skips it on purpose).
"""

from __future__ import annotations

import os
import subprocess
import time
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

BUILD = REPO / "scripts" / "build-sglang-venv.sh"
_built: dict[str, Path] = {}
_say: list[Callable[[str], None]] = []  # the terminal reporter's write_line, once configured


def pytest_configure(config: pytest.Config) -> None:
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        _say.append(lambda text: reporter.write_line(text))


def sglang_python(version: str) -> Path:
    """The python of a CPU venv holding SGLang ``version``, built once (and cached)."""
    if os.environ.get("ORCH_SKIP_REAL_SGLANG") == "1" and os.environ.get("CI") != "true":
        pytest.skip("ORCH_SKIP_REAL_SGLANG=1")
    if version not in _built:
        started = time.monotonic()
        tail: deque[str] = deque(maxlen=40)
        with subprocess.Popen(
            ["bash", str(BUILD), version],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        ) as process:
            assert process.stderr is not None
            assert process.stdout is not None
            for line in process.stderr:  # the build's progress lines, as they come
                tail.append(line.rstrip())
                if line.startswith("[build-sglang-venv]") and _say:
                    _say[0](f"  {line.rstrip()}  ({time.monotonic() - started:.0f} s)")
            stdout = process.stdout.read()
        if process.wait(timeout=1800) != 0:
            reason = f"cannot build the SGLang {version} venv: " + "\n".join(tail)
            if os.environ.get("CI") == "true":
                pytest.fail(reason)
            pytest.skip(reason)
        _built[version] = Path(stdout.strip().splitlines()[-1]) / "bin" / "python"
    return _built[version]


@pytest.fixture(scope="session")
def sglang_0511() -> Path:
    return sglang_python("0.5.11")


@pytest.fixture(scope="session")
def sglang_0523() -> Path:
    return sglang_python("0.5.23")


@pytest.fixture(autouse=True, scope="package")
def _own_plan_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Local plans keep their answers under $XDG_CACHE_HOME/orch/plan-cache: this tier gets its
    own for each run, so that what it asserts is SGLang's answer of this run, never one kept from
    an earlier run on the machine (the venvs stay under ~/.cache, by HOME)."""
    before = os.environ.get("XDG_CACHE_HOME")
    os.environ["XDG_CACHE_HOME"] = str(tmp_path_factory.mktemp("xdg-cache"))
    yield
    if before is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = before
