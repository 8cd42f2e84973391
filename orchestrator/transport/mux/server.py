"""The kept connection's server (``python -m orchestrator.transport.mux``, detached): one host's
``SSHTransport``, connected once, served on a Unix socket to this user's orch commands until it
has been idle ``persist_s`` (the package's docstring says who may use it and the wire)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import ConnectError
from orchestrator.model import Host
from orchestrator.transport import Stream
from orchestrator.transport.mux import REQUEST_WAIT_S, b64, encode_error, private_dir, unb64


class MuxServer:
    """One host's connection, served on a Unix socket until idle for ``persist_s``."""

    def __init__(self, transport: Any, path: Path, persist_s: float) -> None:
        self.transport = transport  # an SSHTransport, connected
        self.path = path
        self.persist_s = persist_s
        # Clients serving a request; clients connected that have not sent one yet (each for
        # REQUEST_WAIT_S at most). Only requests are use: a silent client never holds the idle
        # timer (issue 26: one that connected and said nothing kept the connection for ever).
        self.busy = 0
        self.waiting = 0
        self.last_used = time.monotonic()
        self.lock = threading.Lock()
        self.files = threading.Lock()  # one SFTP operation at a time

    def serve(self, listener: socket.socket) -> None:
        listener.settimeout(1.0)
        while True:
            with self.lock:
                idle = self.busy == 0 and time.monotonic() - self.last_used > self.persist_s
            if idle or not self.transport.connected():
                return
            try:
                client, _ = listener.accept()
            except TimeoutError:
                continue
            self._admit(client)

    def drain(self, listener: socket.socket) -> None:
        """Answer the connections still queued, then wait for every client to finish (one yet
        to send its request has REQUEST_WAIT_S to)."""
        listener.setblocking(False)
        while True:
            try:
                client, _ = listener.accept()
            except (BlockingIOError, OSError):
                break
            client.setblocking(True)
            self._admit(client)
        while True:
            with self.lock:
                if self.busy == 0 and self.waiting == 0:
                    return
            time.sleep(0.05)

    def _admit(self, client: socket.socket) -> None:
        """Served on a thread of its own when it runs as this user; else closed unanswered."""
        if not _same_user(client):
            client.close()
            return
        with self.lock:
            self.waiting += 1
        threading.Thread(target=self._client, args=(client,), daemon=True).start()

    def _client(self, client: socket.socket) -> None:
        serving = False
        try:
            with client, client.makefile("rb") as requests:
                client.settimeout(REQUEST_WAIT_S)  # silent past it: closed, never served
                line = requests.readline()
                client.settimeout(None)  # a request runs as long as its command
                request = json.loads(line or b"null")
                if isinstance(request, dict):
                    with self.lock:
                        self.waiting -= 1
                        self.busy += 1
                        serving = True
                    self._handle(client, request, requests)
        except (OSError, ValueError):
            pass  # the client went away, or stayed silent: nothing to answer
        finally:
            with self.lock:
                if serving:
                    self.busy -= 1
                    self.last_used = time.monotonic()
                else:
                    self.waiting -= 1

    def _handle(self, client: socket.socket, request: dict[str, Any], requests: Any) -> None:
        def send(document: dict[str, Any]) -> None:
            client.sendall(json.dumps(document).encode() + b"\n")

        op = request.get("op")
        try:
            if op == "stream":
                self._stream(client, request, send, requests)
                return
            send(self._answer(op, request))
        except Exception as exc:  # noqa: BLE001 - every failure is the client's to raise
            send({"error": encode_error(exc)})

    def _answer(self, op: Any, request: dict[str, Any]) -> dict[str, Any]:
        transport = self.transport
        if op == "ping":
            return {"pong": True}
        if op == "run":
            result = transport.run(
                request["argv"], stdin=unb64(request["stdin"]), timeout=float(request["timeout"])
            )
            return {
                "returncode": result.returncode,
                "stdout": b64(result.stdout),
                "stderr": b64(result.stderr),
            }
        if op == "home":
            return {"home": transport.home()}
        with self.files:
            if op == "put":
                transport.put(unb64(request["data"]), request["path"], int(request["mode"]))
                return {}
            if op == "read":
                offset, limit = int(request["offset"]), int(request["limit"])
                data = transport.read(request["path"], offset, limit)
                return {"data": b64(data)}
            if op == "size":
                return {"size": transport.size(request["path"])}
        raise ConnectError(f"unknown operation {op!r}")

    def _stream(
        self,
        client: socket.socket,
        request: dict[str, Any],
        send: Callable[[dict[str, Any]], None],
        requests: Any,
    ) -> None:
        held = bool(request.get("hold_stdin"))
        stream = self.transport.stream(
            request["argv"], stdin=unb64(request["stdin"]) or None, hold_stdin=held
        )
        if held:
            threading.Thread(target=self._pass_stdin, args=(stream, requests), daemon=True).start()
        try:
            while True:
                line = stream.readline(0.5)
                if line is None:
                    if _hung_up(client):
                        return  # orch closed its end: the command's channel is closed below
                    continue
                if not line:
                    break
                send({"line": b64(line)})
            send({"returncode": stream.returncode, "stderr": b64(stream.stderr)})
        finally:
            stream.close()

    @staticmethod
    def _pass_stdin(stream: Stream, requests: Any) -> None:
        """The held stdin, when the client sends it (its end, when the client goes away)."""
        data = b""
        with contextlib.suppress(OSError, ValueError):
            line = requests.readline()
            document = json.loads(line) if line else {}
            data = unb64(document.get("stdin", "")) if isinstance(document, dict) else b""
        stream.finish_stdin(data)


def _hung_up(client: socket.socket) -> bool:
    import select

    readable, _, _ = select.select([client], [], [], 0)
    if not readable:
        return False
    try:
        return client.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _same_user(client: socket.socket) -> bool:
    """The client runs as this user (SO_PEERCRED); where the kernel cannot say, the private
    directory is what keeps others out."""
    peercred = getattr(socket, "SO_PEERCRED", None)
    if peercred is None:
        return True
    try:
        raw = client.getsockopt(socket.SOL_SOCKET, peercred, struct.calcsize("3i"))
    except OSError:
        return False
    _, uid, _ = struct.unpack("3i", raw)
    return bool(uid == os.getuid())


def _listen(path: Path) -> socket.socket:
    """The socket, created 0600 (under a umask, before anyone can connect) and put in place
    atomically; an older socket there (its server gone) is replaced."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    previous = os.umask(0o177)
    try:
        temporary.unlink(missing_ok=True)
        listener.bind(str(temporary))
    finally:
        os.umask(previous)
    listener.listen(16)
    temporary.replace(path)
    return listener


def serve(config: dict[str, Any], say: Callable[[dict[str, Any]], None]) -> int:
    """The server's life: take the connection's lock (one server per connection), connect,
    say ready, serve until idle, remove the socket."""
    from orchestrator.transport.ssh import SSHTransport  # paramiko: only here

    path = Path(config["socket"])
    if not private_dir(path.parent):
        say({"ready": False, "reason": "not a private directory"})
        return 1
    lock_fd = os.open(path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        say({"ready": True, "already": True})  # another server holds it: the client asks it
        return 0
    host = Host(**config["host"])
    transport = SSHTransport(host, known_hosts_files=[Path(p) for p in config["known_hosts"]])
    try:
        transport.connect()
    except Exception as exc:  # noqa: BLE001 - the client connects by itself and says why
        say({"ready": False, "reason": f"{type(exc).__name__}"})
        return 1
    listener = _listen(path)
    listened = path.stat()

    def withdraw() -> None:
        """The socket leaves the directory (when it is still ours): new commands connect by
        themselves from here on."""
        with contextlib.suppress(OSError):
            now = path.stat()
            if (now.st_ino, now.st_dev) == (listened.st_ino, listened.st_dev):
                path.unlink()

    say({"ready": True})
    server = MuxServer(transport, path, float(config["persist_s"]))
    try:
        server.serve(listener)
        withdraw()
        server.drain(listener)  # those that connected before the socket left are answered
    finally:
        withdraw()
        listener.close()
        transport.close()
    return 0


def main() -> int:
    config = json.loads(sys.stdin.buffer.read())
    if os.fork():
        os._exit(0)  # orch waits for this one; the server lives on, nobody's child
    out = sys.stdout

    def say(document: dict[str, Any]) -> None:
        with contextlib.suppress(OSError, ValueError):
            out.write(json.dumps(document) + "\n")
            out.flush()
            out.close()  # one line: the client stops reading there

    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.chdir("/")
    return serve(config, say)
