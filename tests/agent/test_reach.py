"""The rendezvous reachability probe: ``agent listen`` (a detached, short-lived listener) and
``agent reach`` (one exchange from another node), run as the real agent over 127.0.0.1."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from typing import Any

import psutil

from tests.agent.test_supervisor import AGENT, _free_port


def _run(*args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run([*AGENT, *args], capture_output=True, text=True, timeout=30, check=False)
    answer: dict[str, Any] = json.loads(done.stdout)
    return done.returncode, answer


def _listen(port: int, token: str, seconds: float, expect: int = 0) -> dict[str, Any]:
    code, answer = _run(
        "listen",
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--token",
        token,
        "--seconds",
        str(seconds),
        "--expect",
        str(expect),
    )
    assert code == 0, answer
    return answer


def _reach(port: int, token: str, timeout: float = 2.0) -> dict[str, Any]:
    code, answer = _run(
        "reach",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--token",
        token,
        "--timeout",
        str(timeout),
    )
    assert code == 0  # always: the caller decides
    return answer


def _ended(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.05)
    return False


def test_listen_detaches_reach_gets_its_token_back_and_the_listener_ends_after_expect() -> None:
    port = _free_port()
    began = time.monotonic()
    listening = _listen(port, "t0k3n", seconds=30, expect=2)
    assert time.monotonic() - began < 5  # detached: the caller's pipes closed at once
    assert listening["ok"] is True
    assert psutil.pid_exists(listening["pid"])
    first = _reach(port, "t0k3n")
    assert first["ok"] is True
    assert isinstance(first["connect_ms"], float)
    wrong = _reach(port, "another")  # not the token: no answer that counts
    assert wrong["ok"] is False
    assert "wrong answer" in wrong["reason"]
    assert _reach(port, "t0k3n")["ok"] is True
    assert _ended(listening["pid"], 5)  # two answered: the port is free for the server
    assert _reach(port, "t0k3n")["reason"] == "connection refused"


def test_the_listener_ends_when_its_seconds_have_passed() -> None:
    port = _free_port()
    listening = _listen(port, "t", seconds=0.5)
    assert _ended(listening["pid"], 5)


def test_listen_on_a_port_in_use_is_an_error_answer() -> None:
    with socket.create_server(("127.0.0.1", 0)) as holder:
        port = holder.getsockname()[1]
        code, answer = _run("listen", "--bind", "127.0.0.1", "--port", str(port), "--token", "t")
    assert code == 3
    assert answer["ok"] is False
    assert answer["reason"].startswith(f"cannot listen on 127.0.0.1:{port}: ")


def test_reach_reports_a_refused_port_and_a_silent_one() -> None:
    assert _reach(_free_port(), "t") == {"ok": False, "reason": "connection refused", "protocol": 1}
    with socket.create_server(("127.0.0.1", 0)) as mute:  # accepts (backlog), never answers
        answer = _reach(mute.getsockname()[1], "t", timeout=0.5)
    assert answer["ok"] is False
    assert answer["reason"] == "connected, then no answer: timed out after 0.5 s"


def test_reach_reports_another_program_on_the_port() -> None:
    with socket.create_server(("127.0.0.1", 0)) as other:
        port = other.getsockname()[1]

        def answer_nonsense() -> None:
            connection, _ = other.accept()
            with connection:
                connection.recv(100)
                connection.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

        server = threading.Thread(target=answer_nonsense, daemon=True)
        server.start()
        answer = _reach(port, "t")
        server.join(5)
    assert answer["ok"] is False
    assert answer["reason"] == (
        f"wrong answer from 127.0.0.1:{port}: another program holds the port, not orch's probe "
        "listener"
    )
