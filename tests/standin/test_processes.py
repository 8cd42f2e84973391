"""The stand-in's process tree and signals behave like SGLang's."""

from __future__ import annotations

import os
import signal
import time
import urllib.error
import urllib.request
from pathlib import Path

import psutil
import pytest

from tests.standin.conftest import (
    PARENT_ENV,
    READY,
    Launcher,
    is_gone,
    last_line,
    log_messages,
    marked_children,
)


def _comm(pid: int) -> str:
    return Path(f"/proc/{pid}/comm").read_text().strip()


def _wait_gone(pids: list[int], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(is_gone(pid) for pid in pids):
            return True
        time.sleep(0.02)
    return False


def test_children_are_titled_sglang_and_die_with_sigterm(
    launcher: Launcher, model_dir: Path
) -> None:
    running = launcher.start("0.5.23", ["--model-path", str(model_dir)])
    running.wait_for(READY)
    children = running.children()
    assert sorted(_comm(child.pid) for child in children) == ["sglang::detoken", "sglang::schedul"]
    assert sorted(child.name() for child in children) == [
        "sglang::detokenizer",
        "sglang::scheduler",
    ]
    assert all(child.environ()[PARENT_ENV] == str(running.proc.pid) for child in children)
    pids = [child.pid for child in children]

    os.kill(running.proc.pid, signal.SIGTERM)
    # SGLang drains, then kill_process_tree(include_parent=True) SIGKILLs the main process itself
    assert running.wait() == -signal.SIGKILL
    messages = log_messages(running.err())
    assert (
        "SIGTERM received. signum=None frame=None. Draining requests and shutting down..."
        in messages
    )
    assert "kill_process_tree called:" in last_line(running.err())
    assert _wait_gone(pids)


def test_sigint_shuts_down_through_uvicorn_with_exit_0(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start("0.5.11", ["--model-path", str(model_dir), "--skip-server-warmup"])
    running.wait_for("Uvicorn running on")
    pids = [child.pid for child in running.children()]
    os.kill(running.proc.pid, signal.SIGINT)
    assert running.wait() == 0
    assert last_line(running.err()).endswith(
        f"INFO:     Finished server process [{running.proc.pid}]"
    )
    assert _wait_gone(pids)


def test_sigkill_of_the_main_process_takes_the_children_along(
    launcher: Launcher, model_dir: Path
) -> None:
    running = launcher.start("0.5.23", ["--model-path", str(model_dir), "--skip-server-warmup"])
    running.wait_for(READY)
    pids = [child.pid for child in running.children()]
    os.kill(running.proc.pid, signal.SIGKILL)
    running.wait()
    assert _wait_gone(pids)  # PR_SET_PDEATHSIG=SIGKILL


def test_hang_never_gets_ready_and_sigterm_kills_it(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start("0.5.23", ["--model-path", str(model_dir)], "hang")
    running.wait_for("Load weight begin.")
    time.sleep(0.4)
    assert "Load weight end." not in running.err()
    assert running.proc.poll() is None
    with pytest.raises(urllib.error.URLError):
        urllib.request.urlopen(running.url("/health"), timeout=1)  # noqa: S310 - loopback
    os.kill(running.proc.pid, signal.SIGTERM)  # no handler yet while loading: Python's default
    assert running.wait() == -signal.SIGTERM


def test_ignore_sigterm_needs_sigkill(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start(
        "0.5.23", ["--model-path", str(model_dir), "--skip-server-warmup"], "ignore-sigterm"
    )
    running.wait_for(READY)
    os.killpg(running.proc.pid, signal.SIGTERM)
    time.sleep(0.4)
    assert running.proc.poll() is None
    assert all(not is_gone(child.pid) for child in running.children())
    os.killpg(running.proc.pid, signal.SIGKILL)
    assert running.wait() == -signal.SIGKILL


def test_orphan_escapes_the_group_and_outlives_the_parent(
    launcher: Launcher, model_dir: Path
) -> None:
    running = launcher.start(
        "0.5.23", ["--model-path", str(model_dir), "--skip-server-warmup"], "orphan"
    )
    running.wait_for(READY)
    main_pid = running.proc.pid
    scheduler = next(c for c in running.children() if c.name() == "sglang::scheduler")
    assert os.getsid(scheduler.pid) != os.getsid(main_pid)

    os.killpg(main_pid, signal.SIGKILL)  # what a stop without a sweep does
    running.wait()
    time.sleep(0.2)
    survivors = marked_children(main_pid)
    assert [process.pid for process in survivors] == [scheduler.pid]
    assert _comm(scheduler.pid) == "sglang::schedul"
    assert psutil.Process(scheduler.pid).name() == "sglang::scheduler"
