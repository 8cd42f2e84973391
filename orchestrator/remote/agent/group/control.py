"""The control channel between the supervisors of one launch group.

One SGLang server over N nodes has no in-place recovery (ROUND2-FACTS §1.6-1.7): any rank's end
is the group's, and the group is stopped and started again whole. Rank 0's supervisor, the
coordinator, owns the group's restart policy; the others, its members, start and stop their
server when it says so. Each member holds one TCP connection to it: line-delimited JSON, every
line signed with the group's key (HMAC-SHA256 over the canonical JSON), naming the group and its
sender's rank, numbered per connection, and bound to its connection by a nonce from each end
(a line recorded on one connection and replayed on another is refused). A line that fails any
of these checks closes its connection: a stranger on the network can neither start nor stop a
group. Messages (``type``):

  coordinator -> member: challenge{nonce}, welcome{generation}, start{generation},
                         stop{generation, reason}, shutdown{reason}, heartbeat
  member -> coordinator: hello{session}, state{generation, state, run_id, pid, ready, message},
                         gate{generation, ranks}, exited{generation, run_id, cls, message,
                         returncode}, stopped{generation, run_id}, shutdown-done,
                         leaving{reason}, heartbeat

``gate`` (a group with a gated launch): the global ranks of the member's node that logged their
waiting line in its server of ``generation``, all of them so far, sent as more arrive.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import re
import secrets
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import socket

from ..spec import GroupSpec

GROUP_CONNECT_RETRY_S = 0.5  # a member's pause between attempts to reach the coordinator
# Beyond member_stop_grace_s, what a member's stop may take before it confirms: SIGKILL, the
# sweep (it waits up to 5 s for the killed) and the last output (up to 5 s).
GROUP_REPLY_MARGIN_S = 15.0
GROUP_LINE_MAX_BYTES = 64 << 10  # a longer line is no control message: the connection is dropped
# Connections that have not proved they hold the key yet (the challenge sent, no valid hello):
# held in the accept loop's selector (never a thread each), each for GROUP_HANDSHAKE_S at most
# (a member answers its challenge in one round trip). Past the caps the oldest are closed: of
# the newcomer's own source when it holds GROUP_PENDING_PER_SOURCE, else of the most crowded
# source. A stranger can thus hold only its own address's slots, and never for long: only
# members that proved the key count toward the join (issue 26: 16 idle connections re-opened as
# they timed out kept a group from forming when 8 slots, held for lost_after_s, were all).
GROUP_HANDSHAKE_S = 3.0
GROUP_PENDING_PER_SOURCE = 32
GROUP_PENDING_MAX = 128
GROUP_REFUSED_EVENTS_MAX = 20  # refused connections recorded in events.jsonl (a scan would flood)
GROUP_TEXT_MAX = 4000  # characters of a verdict's message carried in a control message
_NONCE = re.compile(r"[0-9a-f]{32}")


def _canonical(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sign_control_message(key: bytes, body: dict[str, Any]) -> bytes:
    """One line of the control channel: ``body`` with its HMAC-SHA256 under the group's key."""
    mac = hmac.new(key, _canonical(body), hashlib.sha256).hexdigest()
    return _canonical(dict(body, mac=mac)) + b"\n"


def verify_control_message(key: bytes, line: bytes) -> dict[str, Any] | None:
    """The body of a line signed with ``key``; None for anything else (not JSON, no MAC, a MAC
    under another key, a body changed on the way)."""
    try:
        document = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: "[[[[..." nested to exhaust the stack
        return None
    if not isinstance(document, dict):
        return None
    mac = document.pop("mac", None)
    if not isinstance(mac, str):
        return None
    expected = hmac.new(key, _canonical(document), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mac.encode("utf-8", "replace"), expected.encode()):
        return None
    return document


class LinkBroken(Exception):
    """A control connection that is no longer usable: closed, silent, or it carried a line that
    is not the group's. Its message says which (events, the lost peer's verdict)."""


class ControlLink:
    """One control connection: lines out signed and numbered; lines in verified (MAC, group,
    sender's rank, session, sequence) or LinkBroken. Sends come from several threads (the
    heartbeat, the supervisor's), receives from one."""

    def __init__(self, sock: socket.socket, group: GroupSpec) -> None:
        self._sock = sock
        self._group = group
        self._send_lock = threading.Lock()
        self._sent = 0
        self._received = 0
        self._buffer = b""
        self.session: str | None = None  # both ends' nonces, once the handshake set them
        self.peer_rank: int | None = None
        self.closed = threading.Event()

    def send(self, kind: str, **fields: Any) -> bool:
        """False when the connection is gone (it is closed then: its reader learns why)."""
        with self._send_lock:
            if self.closed.is_set():
                return False
            self._sent += 1
            body = dict(fields, group=self._group.group_id, rank=self._group.rank)
            body.update(seq=self._sent, type=kind)
            if self.session is not None:
                body["session"] = self.session
            try:
                self._sock.sendall(sign_control_message(self._group.key, body))
            except OSError:
                self.close()
                return False
            return True

    def receive(self) -> dict[str, Any]:
        """The next verified message (blocks up to the socket's timeout)."""
        message = verify_control_message(self._group.key, self._read_line())
        if message is None:
            raise LinkBroken("it sent a message not signed with the group's key")
        if message.get("group") != self._group.group_id:
            raise LinkBroken(f"it sent a message of another group ({message.get('group')!r})")
        if message.get("seq") != self._received + 1:
            raise LinkBroken(
                f"it sent message {message.get('seq')!r} after {self._received} (replayed?)"
            )
        if self.peer_rank is not None and message.get("rank") != self.peer_rank:
            raise LinkBroken(f"rank {message.get('rank')!r} spoke on rank {self.peer_rank}'s line")
        if self.session is not None and message.get("session") != self.session:
            raise LinkBroken("it sent a message of another connection (replayed?)")
        self._received += 1
        return message

    @property
    def connection(self) -> socket.socket:
        return self._sock

    def recv_available(self) -> bytes:
        """What the peer sent, read once the connection is readable (the accept loop's
        selector said so): LinkBroken when it closed."""
        try:
            chunk = self._sock.recv(1 << 16)
        except OSError as exc:
            raise LinkBroken("connection closed") from exc
        if not chunk:
            raise LinkBroken("connection closed")
        return chunk

    def feed(self, data: bytes) -> bool:
        """Bytes the accept loop read for this connection: whether a whole line is buffered.
        LinkBroken when the line grows past GROUP_LINE_MAX_BYTES."""
        self._buffer += data
        if b"\n" in self._buffer:
            return True
        if len(self._buffer) > GROUP_LINE_MAX_BYTES:
            raise LinkBroken(f"it sent a line over {GROUP_LINE_MAX_BYTES} bytes")
        return False

    def _read_line(self) -> bytes:
        import socket

        while b"\n" not in self._buffer:
            if len(self._buffer) > GROUP_LINE_MAX_BYTES:
                raise LinkBroken(f"it sent a line over {GROUP_LINE_MAX_BYTES} bytes")
            try:
                chunk = self._sock.recv(1 << 16)
            except socket.timeout as exc:  # TimeoutError only from 3.10
                raise LinkBroken(f"silent for {self._sock.gettimeout() or 0:g} s") from exc
            except (ConnectionResetError, BrokenPipeError) as exc:  # the peer died: a reset
                raise LinkBroken("connection closed") from exc
            except OSError as exc:
                if self.closed.is_set():  # closed at this end (its reader wakes up)
                    raise LinkBroken("connection closed") from exc
                raise LinkBroken(f"connection error: {exc.strerror or exc}") from exc
            if not chunk:
                raise LinkBroken("connection closed")
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        if len(line) > GROUP_LINE_MAX_BYTES:
            raise LinkBroken(f"it sent a line over {GROUP_LINE_MAX_BYTES} bytes")
        return line

    def close(self) -> None:
        """Shut the connection (which wakes its reader) and release it; idempotent."""
        import socket

        self.closed.set()
        with contextlib.suppress(OSError):
            self._sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            self._sock.close()


def greet_member(link: ControlLink, group: GroupSpec) -> int:
    """The coordinator's half of the handshake: its nonce out, then the member's ``hello``,
    signed, from a member rank, for a session that starts with that nonce. The rank."""
    return admit_hello(link, group, challenge_member(link))


def challenge_member(link: ControlLink) -> str:
    """The coordinator's challenge to a new connection: its nonce."""
    nonce = secrets.token_hex(16)
    if not link.send("challenge", nonce=nonce):
        raise LinkBroken("connection closed")
    return nonce


def admit_hello(link: ControlLink, group: GroupSpec, nonce: str) -> int:
    """The member's ``hello`` to the challenge ``nonce`` (read from the link, or already in its
    buffer): the member's rank, or LinkBroken."""
    hello = link.receive()
    rank, session = hello.get("rank"), hello.get("session")
    if hello.get("type") != "hello":
        raise LinkBroken(f"it sent {hello.get('type')!r} before hello")
    if isinstance(rank, bool) or not isinstance(rank, int) or not 0 < rank < group.nnodes:
        raise LinkBroken(f"hello from rank {rank!r}, no member of this group")
    prefix = f"{nonce}."
    if not (
        isinstance(session, str)
        and session.startswith(prefix)
        and _NONCE.fullmatch(session[len(prefix) :])
    ):
        raise LinkBroken("hello for another connection (replayed?)")
    link.peer_rank, link.session = rank, session
    return rank


def greet_coordinator(link: ControlLink) -> int:
    """A member's half of the handshake: the coordinator's ``challenge``, its ``hello`` with
    both nonces, then the coordinator's ``welcome``. The group's generation then."""
    challenge = link.receive()
    nonce = challenge.get("nonce")
    if challenge.get("type") != "challenge" or challenge.get("rank") != 0:
        raise LinkBroken(f"it sent {challenge.get('type')!r} from rank {challenge.get('rank')!r}")
    if not isinstance(nonce, str) or _NONCE.fullmatch(nonce) is None:
        raise LinkBroken("a challenge without a nonce")
    link.peer_rank = 0
    link.session = f"{nonce}.{secrets.token_hex(16)}"
    if not link.send("hello"):
        raise LinkBroken("connection closed")
    welcome = link.receive()
    generation = welcome.get("generation")
    if welcome.get("type") != "welcome" or not isinstance(generation, int):
        raise LinkBroken(f"it answered hello with {welcome.get('type')!r}")
    return generation


def connect_failure(exc: OSError, timeout: float) -> str:
    import socket

    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if isinstance(exc, socket.timeout):
        return f"timed out after {timeout:g} s"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host: {exc.strerror or exc}"
    return str(exc.strerror or exc)


def short_text(value: Any, default: str = "") -> str:
    return value[:GROUP_TEXT_MAX] if isinstance(value, str) else default


def integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
