"""scripts/calibrate-memory as a user runs it (a process): the clean skip on this GPU-less
machine, and its whole path (plan, render, start, read the memory lines, stop, write the results)
against orch's SGLang stand-in (standin/, NOT SGLang: ``--standin`` makes the script take the
stand-in's imitated H200 for its GPUs).

Every run's environment carries a marker of its own; after each, no process carrying it (the
server, its schedulers and detokenizer) may be left."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.e2e

SCRIPT = REPO / "scripts" / "calibrate-memory"
MODEL = REPO / "standin" / "models" / "Qwen3.6-27B"
MARK = "ORCH_CALIBRATE_TEST_MARK"


def _env(mark: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ORCH_STANDIN_")}
    return {**env, MARK: mark, **extra}


def _left(mark: str, but: int | None = None) -> list[str]:
    """Processes carrying the run's marker, but the script's own (``but``)."""
    left = []
    for process in psutil.process_iter(["pid", "name"]):
        try:
            if process.pid != but and process.environ().get(MARK) == mark:
                left.append(f"{process.info['pid']} {process.info['name']}")
        except psutil.Error:
            continue
    return left


def _run(
    *args: str, mark: str, timeout: float = 120, **extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(mark, **extra),
        check=False,
        cwd=REPO,
    )


def test_without_a_gpu_it_skips_in_one_line_and_require_gpu_makes_that_fail(
    tmp_path: Path,
) -> None:
    mark = uuid.uuid4().hex
    out = tmp_path / "results.md"
    empty_path = str(tmp_path)  # no nvidia-smi; this machine has no NVML library either
    skipped = _run("--out", str(out), mark=mark, PATH=empty_path)
    assert skipped.returncode == 0, skipped.stderr
    assert skipped.stdout.splitlines() == [skipped.stdout.strip()]  # one line, and nothing written
    assert skipped.stdout.startswith("calibrate-memory: skipped: no NVIDIA GPU found (NVML: ")
    assert "nvidia-smi: not on PATH" in skipped.stdout
    assert not out.exists()
    required = _run("--out", str(out), "--require-gpu", mark=mark, PATH=empty_path)
    assert required.returncode == 3
    assert required.stdout.startswith("calibrate-memory: skipped: no NVIDIA GPU found")


def test_a_python_without_sglang_is_a_skip_of_its_own(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=60
    )
    python = str(bare / "bin" / "python")
    done = _run("--standin", "--python", python, "--out", str(tmp_path / "r.md"), mark="-")
    assert done.returncode == 0
    assert done.stdout.startswith(f"calibrate-memory: skipped: no SGLang at {python} (")
    assert "ModuleNotFoundError" in done.stdout


def test_standin_is_refused_for_the_real_results_file() -> None:
    done = _run("--standin", mark="-")
    assert done.returncode == 2
    assert "--standin's figures are not a calibration" in done.stderr


def test_the_whole_path_against_the_standin_writes_predicted_and_measured(
    tmp_path: Path,
) -> None:
    mark = uuid.uuid4().hex
    out = tmp_path / "results.md"
    shutil.copyfile(REPO / "bench" / "results.md", out)
    before = out.read_text()
    logs = tmp_path / "logs"
    args = ("--standin", "--only", "demo", "--model", str(MODEL), "--out", str(out))
    done = _run(*args, "--log-dir", str(logs), mark=mark)
    assert done.returncode == 0, done.stderr
    assert _left(mark) == []
    text = out.read_text()
    assert text.startswith(before[: before.index("<!-- calibrate-memory: begin")])
    assert "No GPU calibration has been run yet" not in text
    assert "NOT SGLang: its figures are illustrative" in text
    assert "### demo: measured (plan: " in text
    record = json.loads((tmp_path / "calibration.json").read_text())
    assert record["standin"] is True
    (run,) = record["runs"]
    assert run["outcome"] == "measured"
    # the measured side is what the stand-in's server logged, read back from its own log
    log = Path(run["log"])
    lines = log.read_text()
    assert "orch SGLang stand-in (NOT SGLang)" in lines
    assert "'load_format': 'dummy'" in lines  # the server_args line: orch rendered the flag
    terms = {term["term"]: term for term in run["terms"]}
    summary = next(line for line in lines.splitlines() if "max_total_num_tokens=" in line)
    tokens = int(summary.split("max_total_num_tokens=")[1].split(",")[0])
    assert terms["KV tokens"]["measured"] == tokens
    assert f"| KV tokens | {terms['KV tokens']['predicted']:,.0f} | {tokens:,} |" in text
    assert terms["weights"]["measured"] == 51.1
    assert terms["weights"]["predicted"] == pytest.approx(51.1, abs=0.01)  # the index's size
    # a second run keeps the first run's log and writes its own
    again = _run(*args, "--log-dir", str(logs), mark=mark)
    assert again.returncode == 0, again.stderr
    assert len(list(logs.iterdir())) == 2
    assert log.read_text() == lines


def test_a_server_that_never_logs_its_pools_times_out_and_is_stopped(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    args = ("--standin", "--only", "demo", "--model", str(MODEL), "--timeout", "4")
    out = tmp_path / "results.md"
    done = _run(
        *args, "--out", str(out), "--log-dir", str(tmp_path), mark=mark, ORCH_STANDIN_FAIL="hang"
    )
    assert done.returncode == 1  # nothing measured
    assert _left(mark) == []
    assert "### demo: timed out" in out.read_text()
    assert "no summary line within 4 s (--timeout)" in out.read_text()


def test_sigterm_to_the_script_stops_the_server_it_started(tmp_path: Path) -> None:
    mark = uuid.uuid4().hex
    logs = tmp_path / "logs"
    script = subprocess.Popen(
        [
            sys.executable,
            str(SCRIPT),
            "--standin",
            "--only",
            "demo",
            "--model",
            str(MODEL),
            "--out",
            str(tmp_path / "results.md"),
            "--log-dir",
            str(logs),
        ],
        env=_env(mark, ORCH_STANDIN_FAIL="hang"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # the server is up once its log says it is loading
        found = list(logs.glob("*.log")) if logs.is_dir() else []
        if found and "Load weight begin" in found[0].read_text():
            break
        time.sleep(0.1)
    else:
        script.kill()
        pytest.fail("the stand-in never started")
    assert _left(mark, but=script.pid) != []  # the server is running
    script.send_signal(signal.SIGTERM)
    _, err = script.communicate(timeout=60)
    assert script.returncode == 130
    assert "stopped (SIGTERM); no server left running" in err
    assert _left(mark) == []
    assert not (tmp_path / "results.md").exists()  # an interrupted run writes no results
