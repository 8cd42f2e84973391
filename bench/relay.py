"""A TCP relay that delays each direction by a set time: a rented GPU box 20-150 ms away, on
loopback (the kernel here has no netem, and root is not needed).

Each chunk read from one side is written to the other side ``delay_s`` later, in order, so a
request and its answer take one round trip of ``2 * delay_s`` whatever the sizes, the way a
long, fat link behaves. The relay counts, per connection and in all, the bytes each way and the
*turns*: how many times the data flow changes from client->server to server->client after a
quiet moment of at least the delay. A turn is one round trip the client waited for, counted the
same way for orch (paramiko) and for OpenSSH, outside both.
"""

from __future__ import annotations

import contextlib
import heapq
import socket
import sys
import threading
import time
from dataclasses import dataclass, field


@dataclass
class Counts:
    connections: int = 0
    bytes_up: int = 0  # client -> server
    bytes_down: int = 0
    turns: int = 0  # round trips the client waited for

    def minus(self, before: Counts) -> Counts:
        return Counts(
            self.connections - before.connections,
            self.bytes_up - before.bytes_up,
            self.bytes_down - before.bytes_down,
            self.turns - before.turns,
        )


@dataclass
class _Flow:
    """Turn detection for one connection: a turn is an answer (server->client data) that
    follows client->server data sent since the previous answer."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    asked: bool = False

    def up(self) -> None:
        with self.lock:
            self.asked = True

    def down(self) -> bool:
        with self.lock:
            turned, self.asked = self.asked, False
            return turned


class DelayRelay:
    """``127.0.0.1:port`` -> ``127.0.0.1:target``, each direction delayed by ``delay_s``."""

    def __init__(self, target_port: int, delay_s: float) -> None:
        self.target_port = target_port
        self.delay_s = delay_s
        self.counts = Counts()
        self._lock = threading.Lock()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = int(self._listener.getsockname()[1])
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def snapshot(self) -> Counts:
        with self._lock:
            return Counts(**vars(self.counts))

    def close(self) -> None:
        self._closed.set()
        # shutdown wakes the thread blocked in accept(); a bare close() would not, and that
        # thread would later accept on whatever socket reuses the descriptor number (the next
        # relay's), forwarding it to this relay's target, gone by then
        with contextlib.suppress(OSError):
            self._listener.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._listener.close()
        for sock in list(self._sockets):
            with contextlib.suppress(OSError):
                sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self._closed.is_set():
                client.close()
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError as exc:  # said: a benchmark that fails here must say why
                sys.stderr.write(f"relay :{self.port} -> :{self.target_port}: {exc}\n")
                client.close()
                continue
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(sock)
            with self._lock:
                self.counts.connections += 1
            flow = _Flow()
            for source, sink, upward in ((client, server, True), (server, client, False)):
                _Pipe(self, source, sink, upward, flow).start()

    def _count(self, upward: bool, size: int, flow: _Flow) -> None:
        with self._lock:
            if upward:
                self.counts.bytes_up += size
            else:
                self.counts.bytes_down += size
        if upward:
            flow.up()
        elif flow.down():
            with self._lock:
                self.counts.turns += 1


class _Pipe:
    """One direction: a reader queues (due time, chunk); a writer sends each when it is due."""

    def __init__(
        self,
        relay: DelayRelay,
        source: socket.socket,
        sink: socket.socket,
        upward: bool,
        flow: _Flow,
    ) -> None:
        self.relay, self.source, self.sink, self.upward, self.flow = (
            relay,
            source,
            sink,
            upward,
            flow,
        )
        self.queue: list[tuple[float, int, bytes]] = []
        self.ready = threading.Condition()
        self.sequence = 0
        self.ended = False

    def start(self) -> None:
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._write, daemon=True).start()

    def _read(self) -> None:
        while True:
            try:
                chunk = self.source.recv(65536)
            except OSError:
                chunk = b""
            with self.ready:
                if chunk:
                    self.sequence += 1
                    due = time.monotonic() + self.relay.delay_s
                    heapq.heappush(self.queue, (due, self.sequence, chunk))
                else:
                    self.ended = True
                self.ready.notify()
            if not chunk:
                return

    def _write(self) -> None:
        while True:
            with self.ready:
                while not self.queue and not self.ended:
                    self.ready.wait()
                if not self.queue and self.ended:
                    break
                due, _, chunk = self.queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    self.ready.wait(wait)
                    continue
                heapq.heappop(self.queue)
            self.relay._count(self.upward, len(chunk), self.flow)
            try:
                self.sink.sendall(chunk)
            except OSError:
                break
        with contextlib.suppress(OSError):
            self.sink.shutdown(socket.SHUT_WR)
