"""SGLang's dummy health server on a group's nodes of rank >= 1 (0.5.23 ``srt/utils/common.py``
``launch_dummy_health_check_server``), served by the standard library: ``/ping``, ``/health``,
``/health_generate``, and ``/metrics`` with ``--enable-metrics`` (metrics.py)."""

from __future__ import annotations

from collections.abc import Callable
from http.server import ThreadingHTTPServer

from sglang._standin.endpoints import UvicornHandler, server_class


class _DummyHandler(UvicornHandler):
    """SGLang's dummy health app on nodes of rank >= 1 (FastAPI with ``/ping``, ``/health``,
    ``/health_generate``, each an empty 200), served at uvicorn's log level ``warning``: no
    access log, no uvicorn lines. With ``--enable-metrics`` it mounts ``/metrics`` as SGLang's
    does (``add_prometheus_middleware``): this node's schedulers' series with
    ``--enable-metrics-for-all-schedulers``, HELP/TYPE lines and no sample without (no
    scheduler of a node of rank >= 1 is a stats-logging rank)."""

    metrics_text: Callable[[], str] | None = None  # set on the subclass when metrics are on

    def do_GET(self) -> None:  # noqa: N802 - http.server calls it so
        path = self.path.split("?", 1)[0]
        if path in ("/ping", "/health", "/health_generate"):
            self._send(200)
        elif path == "/metrics" and self.metrics_text is not None:
            self._send_text(200, self.metrics_text())
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:  # noqa: N802 - http.server calls it so
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
