"""Start orch's SGLang stand-in as real processes, the way orch's agent starts SGLang."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "standin"
SGLANG_BIN = STANDIN / "bin" / "sglang"
# docs/sglang-facts.md §2
LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?:\.\d{3})?([^\]]*)\] (.*)$")
READY = "The server is fired up and ready to roll!"
PARENT_ENV = "ORCH_STANDIN_PARENT"

FAST = {
    "ORCH_STANDIN_LOAD_S": "0.1",
    "ORCH_STANDIN_SHARDS": "3",
    "ORCH_STANDIN_GRAPH_S": "0.02",
    "ORCH_STANDIN_DRAIN_S": "0.05",
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def standin_env(version: str, fail: str | None = None, **extra: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ORCH_STANDIN_", "SGLANG_")) and k != "PYTHONPATH"
    }
    env.update(FAST)
    env["PYTHONPATH"] = str(STANDIN)
    env["ORCH_STANDIN_VERSION"] = version
    if fail is not None:
        env["ORCH_STANDIN_FAIL"] = fail
    env.update(extra)
    return env


def command(entry: str, args: Sequence[str]) -> list[str]:
    if entry == "serve":
        return [sys.executable, str(SGLANG_BIN), "serve", *args]
    return [sys.executable, "-m", "sglang.launch_server", *args]


def segments(text: str) -> list[str]:
    """Log text split as orch reads it: on \\r (tqdm) and \\n."""
    return [part for part in re.split(r"[\r\n]", text) if part]


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def log_messages(text: str) -> list[str]:
    return [m.group(3) for part in segments(text) if (m := LOG_LINE.match(part))]


def is_gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def marked_children(parent_pid: int) -> list[psutil.Process]:
    """Every live process carrying the stand-in's marker for this parent (orch's sweep)."""
    found = []
    for process in psutil.process_iter():
        with contextlib.suppress(psutil.Error):
            if process.environ().get(PARENT_ENV) == str(parent_pid) and not is_gone(process.pid):
                found.append(process)
    return found


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    port: int
    stdout_path: Path
    stderr_path: Path
    handles: list[Any] = field(default_factory=list)

    def err(self) -> str:
        return self.stderr_path.read_bytes().decode("utf-8", errors="replace")  # keeps \r

    def out(self) -> str:
        return self.stdout_path.read_bytes().decode("utf-8", errors="replace")

    def wait_for(self, text: str, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if text in self.err():
                return
            if self.proc.poll() is not None:
                pytest.fail(
                    f"stand-in exited {self.proc.returncode} before {text!r}:\n{self.err()}"
                )
            time.sleep(0.02)
        pytest.fail(f"no {text!r} within {timeout} s:\n{self.err()}")

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str) -> tuple[int, bytes]:
        try:
            with urllib.request.urlopen(self.url(path), timeout=5) as response:  # noqa: S310
                return int(response.status), bytes(response.read())
        except urllib.error.HTTPError as error:
            return int(error.code), bytes(error.read())

    def get_json(self, path: str) -> Any:
        status, body = self.get(path)
        assert status == 200, (path, status)
        return json.loads(body)

    def children(self) -> list[psutil.Process]:
        return psutil.Process(self.proc.pid).children()

    def wait(self, timeout: float = 10.0) -> int:
        return self.proc.wait(timeout=timeout)


class Launcher:
    """Starts stand-ins in their own session (as orch's agent does) and cleans up after them,
    orphans included."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.running: list[Running] = []

    def start(
        self,
        version: str,
        args: Sequence[str],
        fail: str | None = None,
        entry: str = "launch_server",
        port: int | None = None,
        **extra_env: str,
    ) -> Running:
        port = port or free_port()
        index = len(self.running)
        stdout_path = self.directory / f"standin-{index}.out"
        stderr_path = self.directory / f"standin-{index}.err"
        stdout = stdout_path.open("wb")
        stderr = stderr_path.open("wb")
        proc = subprocess.Popen(
            command(entry, [*args, "--port", str(port)]),
            stdout=stdout,
            stderr=stderr,
            env=standin_env(version, fail, **extra_env),
            start_new_session=True,
        )
        running = Running(proc, port, stdout_path, stderr_path, [stdout, stderr])
        self.running.append(running)
        return running

    def cleanup(self) -> None:
        for running in self.running:
            leftovers = marked_children(running.proc.pid)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(running.proc.pid, signal.SIGKILL)
            for process in leftovers:
                with contextlib.suppress(psutil.Error):
                    process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                running.proc.wait(timeout=5)
            for handle in running.handles:
                handle.close()


@pytest.fixture
def launcher(tmp_path: Path) -> Iterator[Launcher]:
    launcher = Launcher(tmp_path)
    yield launcher
    launcher.cleanup()


def write_model(directory: Path) -> Path:
    """A model directory as SGLang sees one: config.json of the incident's hybrid model."""
    directory.mkdir(parents=True, exist_ok=True)
    config = {
        "architectures": ["Qwen3_5ForConditionalGeneration"],
        "model_type": "qwen3_5",
        "text_config": {"max_position_embeddings": 262144},
    }
    (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory


@pytest.fixture
def model_dir(tmp_path: Path) -> Path:
    return write_model(tmp_path / "models" / "Qwen3.6-27B")


def run_to_exit(
    version: str,
    args: Sequence[str],
    fail: str | None = None,
    entry: str = "launch_server",
    timeout: float = 15.0,
    **extra_env: str,
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(entry, [*args, "--port", str(free_port())]),
        env=standin_env(version, fail, **extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
        start_new_session=True,
        check=False,
    )
