"""scripts/build-sglang-venv.sh says what it does while pip runs: a torch download takes
minutes, and `make test` (which builds the real-SGLang tier's venvs on a fresh machine) must not
sit silent that long. Here pip talks to a local index that answers slowly, then not at all."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO

BUILD = REPO / "scripts" / "build-sglang-venv.sh"


class _SlowIndex(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        time.sleep(4)  # longer than a few heartbeats
        self.send_error(404)

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def slow_index() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _SlowIndex)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/simple"
    finally:
        server.shutdown()
        server.server_close()


def test_the_build_prints_progress_while_pip_runs(slow_index: str, tmp_path: Path) -> None:
    env = {
        **os.environ,
        "ORCH_SGLANG_PYTHON": sys.executable,
        "ORCH_TORCH_SPEC": "torch==0.0.1",  # no fallback to the registry's build
        "ORCH_PIP_ARGS": f"--index-url {slow_index} --no-cache-dir --retries 0 --timeout 30",
        "ORCH_BUILD_HEARTBEAT_S": "1",
    }
    done = subprocess.run(
        ["bash", str(BUILD), "0.5.23", str(tmp_path / "venv")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 1, done.stderr  # the index has no torch
    lines = done.stderr.splitlines()
    assert any("step 1/5" in line for line in lines), done.stderr
    beats = [line for line in lines if "pip still running" in line]
    assert beats, done.stderr
    assert all(line.startswith("[build-sglang-venv]") for line in beats)
    assert not (tmp_path / "venv").exists()  # a failed build leaves nothing that looks built
