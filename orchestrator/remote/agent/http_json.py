"""One bounded HTTP exchange, stdlib only: orch's calls to a gateway's worker API and a worker's
``/v1/loads`` (fleet/gateway.py, fleet/drain.py through fleet/http_json.py), and the agent's own
calls to its server's gateway (gateway.py). It lives here, under remote/, because the agent is
pushed to hosts without the rest of orch; orch imports it from here.

The key is sent as ``Authorization: Bearer`` and never put in a reason; TLS with the system's
default verification; no proxy from the environment (http.client never reads one: a gateway and
its workers are addressed directly); redirects not followed (the key must not travel on). Each
exchange has one timeout for connect and every read, and reads at most :data:`MAX_BODY_BYTES`.
"""

from __future__ import annotations

import http.client
import json
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

MAX_BODY_BYTES = 8 << 20  # smg's GET /workers is ~2 KB per worker


class Unreachable(Exception):
    """Nothing answered (refused, DNS, timeout, TLS, a connection cut mid-answer); ``reason``
    is one line without the key. Callers turn it into their own OrchError."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Reply:
    status: int
    reason: str
    body: bytes

    def json(self) -> Any:
        """The body as JSON, None when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None

    def text(self, limit: int = 200) -> str:
        """The body as one line of text, cut at ``limit`` characters (for messages)."""
        line = " ".join(self.body.decode("utf-8", "replace").split())
        return line if len(line) <= limit else line[: limit - 3] + "..."


def exchange(
    method: str,
    url: str,
    *,
    key: str | None,
    timeout_s: float,
    payload: Mapping[str, Any] | None = None,
) -> Reply:
    """``method url`` (with ``payload`` as a JSON body), the reply whatever its status.
    Raises :class:`Unreachable` when no whole reply came."""
    parts = urllib.parse.urlsplit(url)
    secure = parts.scheme == "https"
    host = parts.hostname or ""
    port = parts.port or (443 if secure else 80)
    connection: http.client.HTTPConnection = (
        http.client.HTTPSConnection(
            host, port, timeout=timeout_s, context=ssl.create_default_context()
        )
        if secure
        else http.client.HTTPConnection(host, port, timeout=timeout_s)
    )
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    body = None
    if payload is not None:
        body = json.dumps(payload).encode()
        headers["Content-Type"] = "application/json"
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    try:
        connection.request(method, target, body=body, headers=headers)
        response = connection.getresponse()
        data = response.read(MAX_BODY_BYTES + 1)
        if len(data) > MAX_BODY_BYTES:
            raise Unreachable(f"answered more than {MAX_BODY_BYTES >> 20} MiB: not read")
        return Reply(response.status, response.reason, data)
    except TimeoutError as exc:
        raise Unreachable(f"no answer within {timeout_s:g} s") from exc
    except ssl.SSLError as exc:
        raise Unreachable(exc.reason or str(exc)) from exc
    except (OSError, http.client.HTTPException) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise Unreachable(reason or type(exc).__name__) from exc
    finally:
        connection.close()
