"""The gateway tier: a real SGLang Model Gateway (``smg`` 1.13.0 from the registry) on 127.0.0.1
in front of orch's SGLang stand-in, over real HTTP.

smg is installed by the suite itself, once per machine, into ``~/.cache/orch/smg-venv``
(``make smg-venv``; ``.ci/run`` builds it); the legacy dialect's router (``sglang-router``
0.1.9) into ``~/.cache/orch/sglang-router-venv`` (``make sglang-router-venv``). An optional tier:
where a venv is not built, its tests are skipped with the reason (``pytest -ra`` prints it);
``ORCH_REQUIRE_GATEWAY_TIER=1`` turns that skip into a failure.

Fixtures (factories, so that a test starts as many as it needs; each process is stopped at the
test's end by killing its process group: smg retitles itself ``smg::router``, so only the
handle finds it):

- ``start_gateway(**options) -> Gateway``: ``smg launch`` on a free port, loopback metrics on
  another, a control-plane key (``Gateway.key``), health checks every second, no workers;
  returns once it answers ``GET /workers``. ``gateway``: one started with the defaults.
- ``start_worker(env=None, api_key=None, port=None) -> Worker``: the stand-in as
  ``python -m sglang.launch_server --model-path ... --port P --skip-server-warmup`` (PYTHONPATH
  standin/), its knobs in ``env`` (``ORCH_STANDIN_TOKEN_S`` and ``max_new_tokens`` hold a
  request in flight); returns once ``/health`` is 200. ``Worker.terminate()`` sends SIGTERM.
- ``start_legacy_router() -> Gateway``: sglang-router 0.1.9 (``/add_worker`` and friends).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from orchestrator.fleet.gateway import GatewayClient
from tests.e2e.conftest import MODEL, STANDIN, free_port
from tests.e2e.conftest import local_workspace as local_workspace  # orch's e2e workspace, here too

CACHE = Path.home() / ".cache" / "orch"
SMG_VENV = CACHE / "smg-venv"
SMG_STAMP = SMG_VENV / ".orch-smg-venv"
ROUTER_VENV = CACHE / "sglang-router-venv"
ROUTER_STAMP = ROUTER_VENV / ".orch-sglang-router-venv"
GATEWAY_KEY = "orch-gateway-tier-key"  # a test key, not a secret
START_TIMEOUT_S = 30.0
# Health checks every second (1 is smg's floor), two failures to mark a worker down: a test sees
# a dead worker within seconds, not smg's default minutes.
SMG_FLAGS = (
    "--policy",
    "round_robin",
    "--health-check-interval-secs",
    "1",
    "--health-failure-threshold",
    "2",
    "--health-success-threshold",
    "1",
    "--health-check-timeout-secs",
    "2",
    "--shutdown-grace-period-secs",
    "1",
    "--worker-startup-check-interval",
    "1",
    "--log-level",
    "info",
)


def _venv_python(venv: Path, stamp: Path, make_target: str) -> Path:
    if stamp.is_file() and (venv / "bin" / "python").exists():
        return venv / "bin" / "python"
    reason = f"{venv} is not built for this optional tier: make {make_target}"
    if os.environ.get("ORCH_REQUIRE_GATEWAY_TIER") == "1":
        pytest.fail(reason)
    pytest.skip(reason)


@dataclass
class Process:
    """A process started in its own session; stopped by killing its process group."""

    popen: subprocess.Popen[bytes]
    log: Path

    def stop(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)

    def log_tail(self, lines: int = 20) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return "\n".join(text.splitlines()[-lines:])


@dataclass
class Gateway:
    url: str
    metrics_url: str | None
    key: str | None
    process: Process

    def client(self, poll_s: float = 0.25) -> GatewayClient:
        """orch's client for this gateway, with its key and its loopback metrics listener."""
        return GatewayClient(
            self.url, api_key=self.key, metrics_url=self.metrics_url, poll_s=poll_s
        )

    def get(self, path: str) -> Any:
        """``GET path`` with the key, as JSON (the test's own look, apart from orch's client)."""
        request = urllib.request.Request(self.url + path)  # noqa: S310 - loopback
        if self.key:
            request.add_header("Authorization", f"Bearer {self.key}")
        with urllib.request.urlopen(request, timeout=5) as response:  # noqa: S310
            return json.loads(response.read())


@dataclass
class Worker:
    url: str
    port: int
    process: Process

    def terminate(self) -> None:
        """SIGTERM to the server's main process, as orch's agent stops it."""
        with contextlib.suppress(ProcessLookupError):
            self.process.popen.send_signal(signal.SIGTERM)

    def loads(self) -> Any:
        with urllib.request.urlopen(self.url + "/v1/loads?include=core", timeout=5) as r:  # noqa: S310
            return json.loads(r.read())

    def status(self, path: str) -> int:
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as response:  # noqa: S310
                return int(response.status)
        except urllib.error.HTTPError as exc:
            return int(exc.code)


def generate(base_url: str, *, max_new_tokens: int = 8, timeout_s: float = 30.0) -> int:
    """One ``POST /generate`` to a worker or through a gateway: its HTTP status (0: no answer)."""
    body = {
        "text": "The capital of France is",
        "sampling_params": {"max_new_tokens": max_new_tokens},
    }
    request = urllib.request.Request(  # noqa: S310 - loopback
        base_url + "/generate",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310
            response.read()
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except OSError:
        return 0


def _wait_until(check: Callable[[], bool], process: Process, what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.popen.poll() is not None:
            raise AssertionError(
                f"{what} exited with {process.popen.returncode}:\n{process.log_tail()}"
            )
        with contextlib.suppress(OSError, ValueError):
            if check():
                return
        time.sleep(0.1)
    raise AssertionError(f"{what} did not answer within {START_TIMEOUT_S} s:\n{process.log_tail()}")


def _spawn(argv: Sequence[str], log: Path, env: Mapping[str, str] | None = None) -> Process:
    handle = log.open("wb")
    try:
        popen = subprocess.Popen(
            list(argv),
            stdout=handle,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
    finally:
        handle.close()
    return Process(popen, log)


@pytest.fixture
def processes() -> Iterator[list[Process]]:
    started: list[Process] = []
    yield started
    for process in reversed(started):
        process.stop()


def _without_health_checks(flags: Sequence[str]) -> tuple[str, ...]:
    out: list[str] = []
    skip = False
    for word in flags:
        if skip:
            skip = False
            continue
        if word.startswith("--health-"):
            skip = True
            continue
        out.append(word)
    return tuple(out)


@pytest.fixture
def start_gateway(tmp_path: Path, processes: list[Process]) -> Callable[..., Gateway]:
    python = _venv_python(SMG_VENV, SMG_STAMP, "smg-venv")

    def start(
        *, key: str | None = GATEWAY_KEY, extra: Sequence[str] = (), fast_health: bool = True
    ) -> Gateway:
        """``fast_health=False``: smg's own health-check defaults (every 60 s, 3 failures), as
        a team runs it, instead of the tier's one-second checks."""
        port, metrics_port = free_port(), free_port()
        argv = [str(python), "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port)]
        if key is not None:
            argv += ["--control-plane-api-keys", f"orch-tier:orch tests:admin:{key}"]
        flags = SMG_FLAGS if fast_health else _without_health_checks(SMG_FLAGS)
        argv += [*flags, *extra]
        process = _spawn(argv, tmp_path / f"smg-{port}.log")
        processes.append(process)
        gateway = Gateway(
            f"http://127.0.0.1:{port}", f"http://127.0.0.1:{metrics_port}", key, process
        )
        _wait_until(lambda: "workers" in gateway.get("/workers"), process, "smg")
        return gateway

    return start


@pytest.fixture
def gateway(start_gateway: Callable[..., Gateway]) -> Gateway:
    return start_gateway()


@pytest.fixture
def start_worker(tmp_path: Path, processes: list[Process]) -> Callable[..., Worker]:
    def start(
        env: Mapping[str, str] | None = None, api_key: str | None = None, port: int | None = None
    ) -> Worker:
        port = port or free_port()  # a port given: relaunched at the same URL
        argv = [sys.executable, "-m", "sglang.launch_server", "--model-path", str(MODEL)]
        argv += ["--port", str(port), "--host", "127.0.0.1", "--skip-server-warmup"]
        if api_key is not None:
            argv += ["--api-key", api_key]
        knobs = {
            "PYTHONPATH": str(STANDIN),
            "ORCH_STANDIN_LOAD_S": "0.1",
            "ORCH_STANDIN_GRAPH_S": "0",
        }
        process = _spawn(argv, tmp_path / f"worker-{port}.log", {**knobs, **(env or {})})
        processes.append(process)
        worker = Worker(f"http://127.0.0.1:{port}", port, process)
        _wait_until(lambda: worker.status("/health") == 200, process, "the stand-in")
        return worker

    return start


@pytest.fixture
def start_legacy_router(tmp_path: Path, processes: list[Process]) -> Callable[..., Gateway]:
    python = _venv_python(ROUTER_VENV, ROUTER_STAMP, "sglang-router-venv")

    def start() -> Gateway:
        port, metrics_port = free_port(), free_port()
        argv = [str(python), "-m", "sglang_router.launch_router", "--host", "127.0.0.1"]
        argv += ["--port", str(port), "--prometheus-host", "127.0.0.1"]
        argv += ["--prometheus-port", str(metrics_port), "--worker-startup-timeout-secs", "10"]
        process = _spawn(argv, tmp_path / f"sglang-router-{port}.log")
        processes.append(process)
        router = Gateway(f"http://127.0.0.1:{port}", None, None, process)
        _wait_until(lambda: "urls" in router.get("/list_workers"), process, "sglang-router")
        return router

    return start
