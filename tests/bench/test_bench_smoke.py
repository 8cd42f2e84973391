"""The benchmark runs (quick mode) and writes its report; its figures are never asserted here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.ssh.sshd import SshServer


def test_quick_benchmark_runs_and_reports_every_section(tmp_path: Path, sshd: SshServer) -> None:
    del sshd  # asked for so that a machine without sshd skips (or fails under CI) like the rest
    out = tmp_path / "results.md"
    done = subprocess.run(
        [sys.executable, "-m", "bench", "--quick", "--out", str(out)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = out.read_text()
    for heading in (
        "## Time to verdict",
        "## `up` overhead",
        "## Many hosts",
        "## CLI start-up",
        "## Following a large log",
        "## Memory plan",
        "## Launch groups",
        "## Latency: 25 ms each way",
    ):
        assert heading in report
    assert "- machine: " in report
    assert "python -m bench --quick --out" in report
    assert "BENCHMARK" in done.stdout
