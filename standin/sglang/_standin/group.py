"""Multi-node groups (``--nnodes N`` > 1) for the stand-in (NOT SGLang): which ranks a node runs,
and the rendezvous over real TCP that stands in for torch's TCPStore.

What is imitated (docs/groups.md for what orch expects of a group; SGLang source as cited):

- Rank placement is SGLang's ``_calculate_rank_ranges`` (``entrypoints/engine.py``): node r runs
  PP ranks ``[pp_per_node * (r // nnodes_per_pp_rank), ...)`` and TP ranks
  ``[tp_per_node * (r % nnodes_per_pp_rank), ...)``. Nothing checks divisibility or
  ``node_rank < nnodes``, as in SGLang: a world that does not add up simply never completes.
- Node 0 serves the rendezvous on the ``--dist-init-addr`` port, as rank 0 serves torch's TCPStore;
  the other nodes connect to it, retrying every 0.2 s forever and silently, as torch's store
  clients do (until ``--dist-timeout``, which the stand-in does not imitate). Nobody logs
  anything while waiting: the real symptom is a silent hang at ``Init torch distributed begin.``
- Once every node rank 1..N-1 has joined and the joined ranks cover the world (``tp * pp``
  ranks), node 0 answers every member ``go``. The connections stay open afterwards and stand in
  for NCCL's: when one drops, the survivors are "hung in a collective" (``broken`` is set; they
  log nothing, as a process stuck in NCCL does).
- Each member reports ``loaded`` once its schedulers are ready, and node 0 starts its API server
  only when every member has: SGLang's ranks meet in collectives while they initialise (the
  memory all-reduce, graph capture), so node 0 cannot finish before the slowest node.
- Node 0 broadcasts ``shutdown`` to the members when it drains after SIGTERM (SGLang 0.5.14+
  dispatches a ``ShutdownReq`` that the rank-0 scheduler broadcasts to every TP rank).
- With ``--gated-launch-port`` (gate.py), node 0 sends ``activate`` to the members once world
  rank 0's gate flag is set: SGLang broadcasts rank 0's flag to every rank of the world (gloo,
  every second) and every rank leaves its wait at the same poll.

The wire protocol is the stand-in's own, one JSON object per line (no NCCL, no store keys):
``{"op": "join", "node_rank": R, "ranks": [...]}`` from a node to node 0, ``{"op": "go"}`` back,
``{"op": "loaded"}`` from the node, ``{"op": "activate"}`` from node 0 (the gated launch: after
``go``, before ``loaded``), and, at the end, ``{"op": "shutdown"}`` from node 0. A
connection that never sends a valid ``join`` (a port probe, say) is kept or dropped without
effect, as a TCPStore tolerates a bare TCP connect.
"""

from __future__ import annotations

import contextlib
import errno
import json
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

RETRY_S = 0.2  # a store client's reconnect pause
GO = b'{"op": "go"}\n'
LOADED = b'{"op": "loaded"}\n'
SHUTDOWN = b'{"op": "shutdown"}\n'
ACTIVATE = b'{"op": "activate"}\n'


@dataclass(frozen=True)
class Placement:
    """Where this node sits in the group, from the resolved ServerArgs."""

    nnodes: int
    node_rank: int
    tp: int
    pp: int
    dp: int

    @classmethod
    def of(cls, values: dict[str, Any]) -> Placement:
        return cls(
            nnodes=max(1, int(values.get("nnodes") or 1)),
            node_rank=int(values.get("node_rank") or 0),
            tp=max(1, int(values.get("tp_size") or 1)),
            pp=max(1, int(values.get("pp_size") or 1)),
            dp=max(1, int(values.get("dp_size") or 1)),
        )

    @property
    def multi_node(self) -> bool:
        return self.nnodes > 1

    @property
    def worker(self) -> bool:
        """A node of rank >= 1: no API server, a dummy health server instead."""
        return self.node_rank >= 1

    @property
    def _nnodes_per_pp_rank(self) -> int:
        return max(self.nnodes // self.pp, 1)

    @property
    def pp_ranks(self) -> range:
        per_node = max(self.pp // self.nnodes, 1)
        first = per_node * (self.node_rank // self._nnodes_per_pp_rank)
        return range(first, first + per_node)

    @property
    def tp_ranks(self) -> range:
        per_node = self.tp // self._nnodes_per_pp_rank
        first = per_node * (self.node_rank % self._nnodes_per_pp_rank)
        return range(first, first + per_node)

    @property
    def tp_spans_nodes(self) -> bool:
        """The TP group reaches over several nodes (SGLang then disables custom allreduce)."""
        return self._nnodes_per_pp_rank > 1

    def local_ranks(self) -> list[tuple[int, int, int]]:
        """(dp, pp, tp) of every scheduler this node runs, in SGLang's launch order."""
        return [(d, p, t) for d in range(self.dp) for p in self.pp_ranks for t in self.tp_ranks]

    def world_ranks(self) -> list[int]:
        """This node's torch ranks: ``pp_rank * tp_size + tp_rank``."""
        return [p * self.tp + t for p in self.pp_ranks for t in self.tp_ranks]

    @property
    def world_size(self) -> int:
        return self.tp * self.pp


def parse_address(text: object) -> tuple[str, int] | None:
    """``HOST:PORT`` or ``[IPV6]:PORT`` as ``--dist-init-addr`` takes it; None when unusable
    (SGLang then falls back to ``127.0.0.1:<a random nccl port>``, which no other node reaches)."""
    if not isinstance(text, str) or not text:
        return None
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest.removeprefix(":")
    else:
        host, _, port_text = text.rpartition(":")
    try:
        port = int(port_text)
    except ValueError:
        return None
    return (host or "127.0.0.1", port) if 0 < port < 65536 else None


class StoreInUse(Exception):
    """Node 0 could not listen on the rendezvous port (torch: DistNetworkError)."""

    def __init__(self, port: int, code: int) -> None:
        super().__init__(f"port {port}: errno {code}")
        self.port = port
        self.code = code


def _line(payload: dict[str, Any]) -> bytes:
    return (json.dumps(payload) + "\n").encode()


class Store:
    """Node 0's side: listen, wait for the world, answer ``go``, then watch the members.

    torch's TCPStore listens on every local address; the stand-in binds the ``--dist-init-addr``
    host when it is a local address, else the wildcard, so that a test on 127.0.0.1 stays on
    the loopback interface.
    """

    def __init__(self, address: tuple[str, int], placement: Placement, broken: threading.Event):
        self.host, self.port = address
        self.placement = placement
        self.complete = threading.Event()  # every node joined: "go" sent
        self.loaded = threading.Event()  # every member's schedulers are ready
        self.broken = broken
        self._listener: socket.socket | None = None
        self._members: list[socket.socket] = []
        self._loaded: set[socket.socket] = set()
        self._lock = threading.Lock()

    def listen(self) -> None:
        """Bind and listen now; StoreInUse as torch's store server fails."""
        try:
            self._listener = self._bind(self.host)
            return
        except socket.gaierror:
            pass  # a name this host cannot resolve: not one of its addresses
        except OSError as error:
            if error.errno not in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                raise StoreInUse(self.port, error.errno or errno.EADDRINUSE) from None
        wildcard = "::" if ":" in self.host else "0.0.0.0"  # noqa: S104 - as torch, all addresses
        try:
            self._listener = self._bind(wildcard)
        except OSError as error:
            raise StoreInUse(self.port, error.errno or errno.EADDRINUSE) from None

    def _bind(self, host: str) -> socket.socket:
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        if family == socket.AF_INET and not _looks_numeric(host):
            family = socket.getaddrinfo(host, self.port, type=socket.SOCK_STREAM)[0][0]
        listener = socket.socket(family, socket.SOCK_STREAM)
        try:
            # SO_REUSEADDR as every TCP server sets it: a TIME_WAIT leftover must not block a
            # restart, while a live listener still makes bind fail with EADDRINUSE.
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind((host, self.port))
            listener.listen(64)
        except OSError:
            listener.close()
            raise
        return listener

    def start(self) -> None:
        threading.Thread(target=self._serve, name="standin-store", daemon=True).start()

    def broadcast_shutdown(self) -> None:
        """SGLang's ShutdownReq reaching the other nodes' schedulers; FIN after it, so the
        message is delivered even though this process SIGKILLs itself right after."""
        with self._lock:
            members = list(self._members)
        for member in members:
            with contextlib.suppress(OSError):
                member.sendall(SHUTDOWN)
                member.shutdown(socket.SHUT_WR)

    def broadcast_activate(self) -> None:
        """World rank 0's gate flag, reaching the other nodes' schedulers (the gated launch)."""
        with self._lock:
            members = list(self._members)
        for member in members:
            with contextlib.suppress(OSError):
                member.sendall(ACTIVATE)

    def _serve(self) -> None:
        listener = self._listener
        assert listener is not None  # noqa: S101 - listen() comes first
        selector = selectors.DefaultSelector()
        selector.register(listener, selectors.EVENT_READ)
        buffers: dict[socket.socket, bytes] = {}
        joined: dict[socket.socket, tuple[int, list[int]]] = {}
        while True:
            for key, _ in selector.select():
                sock = key.fileobj
                assert isinstance(sock, socket.socket)  # noqa: S101 - only sockets registered
                if sock is listener:
                    with contextlib.suppress(OSError):
                        conn, _ = listener.accept()
                        buffers[conn] = b""
                        selector.register(conn, selectors.EVENT_READ)
                    continue
                try:
                    data = sock.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    selector.unregister(sock)
                    buffers.pop(sock, None)
                    joined.pop(sock, None)  # before "go": a restarted node may take its place
                    with self._lock:
                        if sock in self._members:
                            self.broken.set()  # a member is gone: the collectives hang
                    sock.close()
                    continue
                buffers[sock] += data
                while b"\n" in buffers[sock]:
                    raw, _, buffers[sock] = buffers[sock].partition(b"\n")
                    if _op(raw) == "loaded":
                        self._member_loaded(sock)
                        continue
                    join = _parse_join(raw)
                    if join is not None and not self.complete.is_set():
                        joined[sock] = join
                        self._maybe_go(joined)

    def _member_loaded(self, sock: socket.socket) -> None:
        with self._lock:
            if sock in self._members:
                self._loaded.add(sock)
            if self._loaded == set(self._members):
                self.loaded.set()

    def _maybe_go(self, joined: dict[socket.socket, tuple[int, list[int]]]) -> None:
        placement = self.placement
        arrivals: dict[int, tuple[socket.socket, list[int]]] = {}
        for sock, (node_rank, ranks) in joined.items():
            if 1 <= node_rank < placement.nnodes:
                arrivals.setdefault(node_rank, (sock, ranks))  # a duplicate rank waits forever
        if set(arrivals) != set(range(1, placement.nnodes)):
            return
        covered = set(placement.world_ranks())
        for _, ranks in arrivals.values():
            covered.update(ranks)
        if covered != set(range(placement.world_size)):
            return  # ranks missing or out of the world: torch's barrier never completes
        members = [sock for sock, _ in arrivals.values()]
        for member in members:
            with contextlib.suppress(OSError):
                member.sendall(GO)
        with self._lock:
            self._members = members
        self.complete.set()


def _parse_join(raw: bytes) -> tuple[int, list[int]] | None:
    try:
        message = json.loads(raw)
        if message.get("op") != "join":
            return None
        node_rank = int(message["node_rank"])
        ranks = [int(rank) for rank in message["ranks"]]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return node_rank, ranks


def _looks_numeric(host: str) -> bool:
    try:
        socket.inet_aton(host)
    except OSError:
        return False
    return True


class Peer:
    """A node of rank >= 1: connect to node 0 (forever), join, wait for ``go``, then hold the
    connection; ``on_shutdown`` runs when node 0 broadcasts the shutdown, ``on_activate`` when
    it broadcasts the gated launch's activation (both on this object's thread)."""

    def __init__(
        self,
        address: tuple[str, int],
        placement: Placement,
        broken: threading.Event,
        on_shutdown: Callable[[], None],
        on_activate: Callable[[], None] | None = None,
    ) -> None:
        self.address = address
        self.placement = placement
        self.complete = threading.Event()
        self.broken = broken
        self.on_shutdown = on_shutdown
        self.on_activate = on_activate
        self._sock: socket.socket | None = None

    def report_loaded(self) -> None:
        """This node's schedulers are ready (node 0 waits for every node's)."""
        sock = self._sock
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.sendall(LOADED)

    def start(self) -> None:
        threading.Thread(target=self._run, name="standin-store-client", daemon=True).start()

    def _connect(self) -> socket.socket:
        while True:
            try:
                return socket.create_connection(self.address, timeout=2)
            except OSError:
                time.sleep(RETRY_S)

    def _run(self) -> None:
        join = _line(
            {
                "op": "join",
                "node_rank": self.placement.node_rank,
                "ranks": self.placement.world_ranks(),
            }
        )
        while True:
            sock = self._connect()
            sock.settimeout(None)
            self._sock = sock
            try:
                sock.sendall(join)
                if self._follow(sock.makefile("rb")):
                    return
            except OSError:
                pass
            finally:
                self._sock = None
                sock.close()
            if self.complete.is_set():
                self.broken.set()  # node 0 is gone after the rendezvous: hung in NCCL
                return
            time.sleep(RETRY_S)  # node 0 went away before "go": join again when it is back

    def _follow(self, stream: Any) -> bool:
        """Read node 0's messages; True once shut down, False when the connection ends."""
        for raw in stream:
            op = _op(raw)
            if op == "go":
                self.complete.set()
            elif op == "activate" and self.complete.is_set():
                if self.on_activate is not None:
                    self.on_activate()
            elif op == "shutdown" and self.complete.is_set():
                self.on_shutdown()
                return True
        return False


def _op(raw: bytes) -> str | None:
    try:
        message = json.loads(raw)
    except ValueError:
        return None
    return message.get("op") if isinstance(message, dict) else None
