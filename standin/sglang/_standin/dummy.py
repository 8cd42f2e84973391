"""SGLang's dummy health server on a group's nodes of rank >= 1 (0.5.23 ``srt/utils/common.py``
``launch_dummy_health_check_server``), served by the standard library: ``/ping``, ``/health``,
``/health_generate``, and ``/metrics`` with ``--enable-metrics`` (metrics.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sglang._standin import metrics
from sglang._standin.endpoints import server_class


class _DummyHandler(BaseHTTPRequestHandler):
    """SGLang's dummy health app on nodes of rank >= 1 (FastAPI with ``/ping``, ``/health``,
    ``/health_generate``, each an empty 200), served at uvicorn's log level ``warning``: no
    access log, no uvicorn lines. With ``--enable-metrics`` it mounts ``/metrics`` as SGLang's
    does (``add_prometheus_middleware``): this node's schedulers' series with
    ``--enable-metrics-for-all-schedulers``, HELP/TYPE lines and no sample without (no
    scheduler of a node of rank >= 1 is a stats-logging rank)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    metrics_text: Callable[[], str] | None = None  # set on the subclass when metrics are on

    def log_message(self, format: str, *args: Any) -> None:
        """Silent, as uvicorn at level warning."""

    def _send(self, status: int, payload: Any = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self.send_response(status)
        if payload is not None:
            self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path in ("/ping", "/health", "/health_generate"):
            self._send(200)
        elif path == "/metrics" and self.metrics_text is not None:
            body = self.metrics_text().encode()
            self.send_response(200)
            self.send_header("content-type", metrics.CONTENT_TYPE)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] in ("/ping", "/health", "/health_generate"):
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})


def make_dummy_server(
    host: str, port: int, metrics_text: Callable[[], str] | None = None
) -> ThreadingHTTPServer:
    """The dummy health server of a node of rank >= 1 (OSError as the bind raises it);
    ``metrics_text`` serves ``/metrics`` (``--enable-metrics``)."""
    handler = (
        type("DummyHandler", (_DummyHandler,), {"metrics_text": staticmethod(metrics_text)})
        if metrics_text is not None
        else _DummyHandler
    )
    return server_class(host)((host, port), handler)
