"""``reach``: from another node of a group, one exchange with ``listen``'s listener."""

from __future__ import annotations

import hmac
from typing import Any

from .cmd_listen import read_probe_line
from .group.control import connect_failure
from .protocol import PROTOCOL
from .spec import host_port
from .world import RealClock


def cmd_reach(host: str, port: int, token: str, timeout: float) -> dict[str, Any]:
    """From this node: connect to ``host:port``, send the token line, expect ``ok <token>``
    from ``listen``. Always an answer (the caller decides): ok and the time to
    connect, or why not."""
    import socket

    address = host_port(host, port)
    clock = RealClock()
    began = clock.monotonic()
    try:
        connection = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        return {"protocol": PROTOCOL, "ok": False, "reason": connect_failure(exc, timeout)}
    connect_ms = round((clock.monotonic() - began) * 1000.0, 3)
    with connection:
        try:
            connection.settimeout(max(timeout - (clock.monotonic() - began), 0.1))
            connection.sendall(token.encode() + b"\n")
            answer = read_probe_line(connection)
        except OSError as exc:
            return {
                "protocol": PROTOCOL,
                "ok": False,
                "connect_ms": connect_ms,
                "reason": f"connected, then no answer: {connect_failure(exc, timeout)}",
            }
    if not hmac.compare_digest(answer.strip(), b"ok " + token.encode()):
        return {
            "protocol": PROTOCOL,
            "ok": False,
            "connect_ms": connect_ms,
            "reason": f"wrong answer from {address}: another program holds the port, not "
            "orch's probe listener",
        }
    return {"protocol": PROTOCOL, "ok": True, "connect_ms": connect_ms}
