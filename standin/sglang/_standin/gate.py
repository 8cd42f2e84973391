"""SGLang's gated launch (``--gated-launch-port P``, 0.5.19+) for the stand-in (NOT SGLang).

Imitated from SGLang 0.5.23 ``sglang/srt/distributed/gated_launch.py``, which
``bootstrap.measure_pre_model_load_memory`` calls from ``ModelRunner.init_torch_distributed``:
after the parallel init (the rendezvous) and before the weights load, every scheduler process
(every TP/PP rank, on every node) runs ``maybe_wait_for_gated_launch(host=--host, port=P)``:

- world rank 0 starts a small FastAPI app under uvicorn (``log_level="warning"``) in a daemon
  thread on ``--host:P`` and logs ``Gated launch control server started on {host}:{port}``
  as soon as the thread is started, whether or not the bind will work;
  ``GET /health`` -> 200 ``OK``, ``POST /gate/activate`` -> sets the flag, 200 ``OK``
  (``PlainTextResponse``); nothing else is logged, not even an access line;
- every rank logs ``Gated launch waiting for activation. rank={world_rank}``, then loops: rank 0's
  flag is broadcast to every rank of the world (gloo, CPU group), the loop returns when it is set,
  logs ``Gated launch still waiting for activation. rank={rank} elapsed={n:.0f} s`` every 10 s,
  and sleeps 1 s; once out, ``Gated launch activated. elapsed={x:.2f} s``.

A bind failure happens inside uvicorn's thread: uvicorn logs the error through its own default
logging config (``%(levelprefix)s %(message)s``, no timestamp: ``ERROR:    [Errno 98] error while
attempting to bind on address ('HOST', P): address already in use``) and ``sys.exit(1)`` ends
only that thread. The flag can then never be set: every rank waits forever.

In the stand-in the control server runs in world rank 0's scheduler process too (stdlib
``http.server`` instead of FastAPI/uvicorn). The broadcast is the stand-in's own: rank 0's
scheduler, having seen its flag at one of its 1 s polls, tells its main process (a line on its
status pipe), which writes ``activate`` to the node's other schedulers and sends
``{"op": "activate"}`` to the other nodes over the rendezvous connections (group.py), whose main
processes write ``activate`` to their schedulers.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

POLL_S = 1.0  # gated_launch.POLL_INTERVAL_SECONDS
LOG_S = 10.0  # gated_launch.LOG_INTERVAL_SECONDS


def control_server_started(host: str, port: int) -> str:
    return f"Gated launch control server started on {host}:{port}"


def waiting(rank: int) -> str:
    return f"Gated launch waiting for activation. rank={rank}"


def still_waiting(rank: int, elapsed: float) -> str:
    return f"Gated launch still waiting for activation. rank={rank} elapsed={elapsed:.0f} s"


def activated(elapsed: float) -> str:
    return f"Gated launch activated. elapsed={elapsed:.2f} s"


class _Handler(BaseHTTPRequestHandler):
    """The control app: FastAPI's answers (404/405 as JSON ``detail``), no access log (uvicorn
    runs at level warning)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""
    flag: threading.Event  # set on the subclass GateServer builds

    def log_message(self, format: str, *args: Any) -> None:
        """Silent, as uvicorn at level warning."""

    def _send(self, status: int, body: bytes, content_type: str, allow: str = "") -> None:
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        if allow:
            self.send_header("allow", allow)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _route(self, method: str) -> None:
        length = int(self.headers.get("content-length") or 0)
        if length:
            self.rfile.read(length)
        path = self.path.split("?", 1)[0]
        allowed = {"/health": "GET", "/gate/activate": "POST"}.get(path)
        if allowed is None:
            self._send(404, b'{"detail":"Not Found"}', "application/json")
        elif method != allowed:
            self._send(405, b'{"detail":"Method Not Allowed"}', "application/json", allowed)
        else:
            if path == "/gate/activate":
                self.flag.set()
            self._send(200, b"OK", "text/plain; charset=utf-8")

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def do_PUT(self) -> None:
        self._route("PUT")

    def do_HEAD(self) -> None:
        self._route("HEAD")


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class GateServer:
    """World rank 0's control server and its flag."""

    def __init__(self) -> None:
        self.flag = threading.Event()

    def serve(self, host: str, port: int) -> OSError | None:
        """Bind and serve in a daemon thread; the bind's OSError (uvicorn's thread would log it
        and end), else None."""
        handler = type("Handler", (_Handler,), {"flag": self.flag})
        server_class = _Server6 if ":" in host else _Server
        try:
            httpd = server_class((host, port), handler)
        except OSError as error:
            return error
        threading.Thread(
            target=httpd.serve_forever,
            kwargs={"poll_interval": 0.1},
            name="standin-gate",
            daemon=True,
        ).start()
        return None


def wait_until_activated(
    is_activated: Callable[[], bool],
    pause: Callable[[float], None],
    log: Callable[[str], None],
    rank: int,
    poll_s: float = POLL_S,
    log_s: float = LOG_S,
) -> float:
    """``_wait_until_activated``'s loop: look at the (broadcast) flag, return once it is set, log
    the still-waiting line every ``log_s``, pause ``poll_s``. Returns the seconds waited.

    Rank 0 passes its flag and ``time.sleep``; the other ranks a flag that ``pause`` sets when the
    ``activate`` command arrives meanwhile (the broadcast, which they block in)."""
    started = time.perf_counter()
    next_log_at = started + log_s
    while True:
        if is_activated():
            return time.perf_counter() - started
        now = time.perf_counter()
        if now >= next_log_at:
            log(still_waiting(rank, now - started))
            next_log_at = now + log_s
        pause(poll_s)
