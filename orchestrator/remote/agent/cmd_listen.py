"""``listen``: the rendezvous reachability probe's listener.

Before a group starts, orch checks that rank 0's rendezvous (and control) port is reachable over
TCP from every other node: a wrong address, a firewall or a wrong NIC then fail by name instead
of as a silent hang at ``Init torch distributed begin``. A short-lived listener on rank 0's node
stands in for the server; each other node connects and exchanges a token with it (``reach``).
"""

from __future__ import annotations

import hmac
import os
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import socket

from .protocol import PROTOCOL
from .spec import host_port
from .world import Clock, RealClock

PROBE_LINE_MAX = 1024  # the token line either way
PROBE_IO_S = 5.0  # one exchange, once connected


def cmd_listen(bind: str, port: int, token: str, seconds: float, expect: int) -> dict[str, Any]:
    """Bind ``bind:port`` (here, so that a port in use is answered at once), then detach (double
    fork, like the supervisor, so that an SSH exec returns) a listener that answers each
    connection sending the token line with ``ok <token>``, for at most ``seconds``, or until
    ``expect`` (> 0) connections were answered: the port is the server's right after."""
    import socket

    address = host_port(bind, port)
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    listener = socket.socket(family, socket.SOCK_STREAM)
    # As uvicorn and the coordinator do: a previous holder's connections in TIME_WAIT are no
    # reason to fail (the server will bind despite them); a listener holding the port is.
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind((bind, port))
        listener.listen(64)
    except OSError as exc:
        listener.close()
        return {
            "protocol": PROTOCOL,
            "ok": False,
            "reason": f"cannot listen on {address}: {exc.strerror or exc}",
        }
    reader, writer = os.pipe()
    first = os.fork()
    if first:
        os.close(writer)
        listener.close()
        with os.fdopen(reader, "rb") as pipe:
            answer = pipe.read()
        os.waitpid(first, 0)
        if not answer.strip().isdigit():
            return {"protocol": PROTOCOL, "ok": False, "reason": "the listener died detaching"}
        return {"protocol": PROTOCOL, "ok": True, "pid": int(answer), "address": address}
    try:
        os.close(reader)
        os.setsid()
        if os.fork():
            os._exit(0)
        # No terminal, no SSH channel: the caller's pipes close once the parent answered.
        os.chdir("/")
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        os.close(devnull)
        os.write(writer, str(os.getpid()).encode())
        os.close(writer)
        _answer_probes(listener, token.encode(), seconds, expect, RealClock())
    finally:
        os._exit(0)


def _answer_probes(
    listener: socket.socket, token: bytes, seconds: float, expect: int, clock: Clock
) -> None:
    """Answer the token line on each connection, each in its own thread (a connection that
    sends nothing holds no other up), until ``seconds`` passed or ``expect`` were answered."""
    deadline = clock.monotonic() + seconds
    lock = threading.Lock()
    enough = threading.Event()
    answered = 0

    def answer(connection: socket.socket) -> None:
        nonlocal answered
        with connection:
            try:
                connection.settimeout(PROBE_IO_S)
                if not hmac.compare_digest(read_probe_line(connection).strip(), token):
                    return
                connection.sendall(b"ok " + token + b"\n")
            except OSError:
                return
        with lock:
            answered += 1
            if 0 < expect <= answered:
                enough.set()

    while not enough.is_set():
        remaining = deadline - clock.monotonic()
        if remaining <= 0:
            break
        listener.settimeout(min(remaining, 0.2))
        try:
            connection, _ = listener.accept()
        except OSError:  # the timeout: look at the clock and at ``enough`` again
            continue
        threading.Thread(target=answer, args=(connection,), daemon=True).start()
    listener.close()


def read_probe_line(connection: socket.socket) -> bytes:
    """Up to the first newline (or PROBE_LINE_MAX bytes, or the end)."""
    received = b""
    while b"\n" not in received and len(received) < PROBE_LINE_MAX:
        chunk = connection.recv(PROBE_LINE_MAX)
        if not chunk:
            break
        received += chunk
    return received.split(b"\n", 1)[0]
