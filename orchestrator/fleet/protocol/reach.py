"""``listen`` and ``reach``: a launch group's network checked before any server starts. A node
listens on the port the others will reach (detached, for a few exchanges), each other node
connects to it and exchanges a token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request


def listen_request(bind: str, port: int, token: str, seconds: float, *, expect: int) -> Request:
    """A short-lived listener on ``bind:port``: it ends after ``expect`` exchanges (the port is
    the server's right after) or ``seconds``."""
    return Request(
        (
            "listen",
            "--bind",
            bind,
            "--port",
            str(port),
            "--token",
            token,
            "--seconds",
            f"{seconds:g}",
            "--expect",
            str(expect),
        )
    )


def reach_request(host: str, port: int, token: str, timeout: float) -> Request:
    """Connect from this node to ``host:port`` and exchange ``token``."""
    return Request(
        (
            "reach",
            "--host",
            host,
            "--port",
            str(port),
            "--token",
            token,
            "--timeout",
            f"{timeout:g}",
        ),
        timeout=timeout + 60.0,
    )


@dataclass(frozen=True)
class ProbeAnswer:
    """``listen`` / ``reach``: whether it worked, and why not."""

    ok: bool
    reason: str = ""
    connect_ms: float | None = None


def decode_probe_answer(document: Any, what: str) -> ProbeAnswer:
    reader = Reader(document, f"agent {what}")
    return ProbeAnswer(
        ok=reader.flag("ok"),
        reason=reader.text("reason", ""),
        connect_ms=reader.opt_number("connect_ms"),
    )
