"""``diff-effective --url``: ask a server's ``/server_info`` over HTTP from this machine, and
take the answer only when it is SGLang's.

The URL may lead anywhere (a tunnel, a proxy, a cache), so the client holds against what answers:

- one deadline for the whole request (connect, headers, every byte of the body): a server that
  drips a byte every few seconds never trips a per-read timeout, so a watchdog shuts the socket
  at the deadline, whatever the request is waiting for;
- at most :data:`MAX_BODY_BYTES` of body (a real ``/server_info`` is about 21 KB): a larger
  declared length is refused unread, a body without one is cut off there;
- redirects are not followed silently: one to the same server (scheme, host, port) is followed,
  at most :data:`MAX_REDIRECTS` times, and said in a note; one to another server is refused,
  and nothing (the API key least of all) is sent there;
- JSON nested deeper than :data:`MAX_JSON_DEPTH` levels is refused (a real one nests a few);
- the answer must have the shape of SGLang's ``server_info`` for the release it names: a
  ``version`` orch reads, and nearly every ServerArgs field of that release's argument table at
  the top level (a proxy that echoes ``model_path`` is not SGLang).
"""

from __future__ import annotations

import contextlib
import json
import re
import socket
import threading
import time
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.effective import verify
from orchestrator.errors import AuthError, ConnectError, NotResolved, UsageError
from orchestrator.sglang import argtable
from orchestrator.sglang import config as sglang_config

URL_TIMEOUT_S = 10.0  # --url: /server_info comes from the tokenizer manager, fast under load
SERVER_INFO_ENDPOINTS = ("/server_info", "/get_server_info")  # the second: its older name
MAX_BODY_BYTES = 4 << 20  # SGLang 0.5.23's /server_info is ~21 KB (556 keys)
MAX_REDIRECTS = 3
MAX_JSON_DEPTH = 32  # SGLang's nests 4 (internal_states -> cuda_graph_config -> decode -> bs)
# The share of a release's ServerArgs fields a server_info must carry at its top level: all of
# them in the captures (0.5.11, 0.5.23); a little less where orch checks a release it has no
# table for against the nearest older one (0.5.23's body has 93% of 0.5.11's fields).
FIELDS_EXACT = 0.95
FIELDS_NEAREST = 0.8
NOT_SGLANG_HINT = "is it an SGLang server's HTTP port (--port), not the router's or a proxy's?"


def server_url(text: str) -> str:
    """``text`` checked as a server's base URL (http or https, a host, maybe a path prefix
    behind a proxy), without a trailing slash. Credentials in it are refused: they would be
    shown in messages and shell history; the profile's ``api_key`` is sent instead."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(
            f"--url {_shown(text)}: expected http://HOST:PORT or https://HOST:PORT",
            "e.g. --url http://127.0.0.1:30000 after `kubectl port-forward svc/NAME 30000`",
        )
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"--url {_shown(text)}: credentials in a URL are not sent",
            "orch sends the profile's api_key (args.api_key: {from_env: NAME}) as a Bearer token",
        )
    if parts.query or parts.fragment:
        raise UsageError(
            f"--url {_shown(text)}: expected the server's base URL, without ?query or #fragment"
        )
    try:
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as exc:
        raise UsageError(f"--url {_shown(text)}: {exc}") from exc
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))


def _shown(text: str) -> str:
    """A URL as messages show it: any ``user:password@`` removed."""
    parts = urllib.parse.urlsplit(text)
    if parts.username is None and parts.password is None:
        return text
    host = parts.netloc.rpartition("@")[2]
    return urllib.parse.urlunsplit((parts.scheme, f"***@{host}", parts.path, parts.query, ""))


def observe_url(
    url: str, *, api_key: tuple[str | None, str], timeout_s: float = URL_TIMEOUT_S
) -> verify.Observation:
    """What the server at ``url`` says it resolved, as an observation without a process.
    ``api_key``: the key to send (None: none) and how messages name it (never the key)."""
    base = server_url(url)
    deadline = time.monotonic() + timeout_s
    refused: list[str] = []
    for endpoint in SERVER_INFO_ENDPOINTS:
        answer = _get(base + endpoint, api_key, deadline, timeout_s)
        if answer.status == 404:
            refused.append(f"{endpoint}: HTTP 404")
            continue
        payload = _json_object(answer)
        problem = not_server_info(payload)
        if problem is not None:
            raise NotResolved(
                f"{answer.url} answered a JSON object that is not SGLang's server_info: {problem}",
                NOT_SGLANG_HINT,
            )
        return _observation(base, endpoint, payload, answer.redirects)
    raise NotResolved(
        f"{base} answers neither {' nor '.join(SERVER_INFO_ENDPOINTS)} ({'; '.join(refused)})",
        "in a launch group only rank 0 serves them (ranks >= 1 serve a dummy /health): point "
        "--url at rank 0 (the LeaderWorkerSet's Service), or check that it is SGLang's port",
    )


def not_server_info(payload: Mapping[str, Any]) -> str | None:
    """Why ``payload`` is not SGLang's ``/server_info``, None when it has its shape: the
    release it names, and nearly every ServerArgs field of that release at its top level."""
    version = payload.get("version")
    if not isinstance(version, str) or argtable.parse_version(version) is None:
        return "it names no SGLang version (its version field)"
    choice = argtable.table_for(version)
    fields = [name for name in choice.table.fields if not name.startswith("_")]
    present = sum(1 for name in fields if name in payload)
    needed = FIELDS_EXACT if choice.exact else FIELDS_NEAREST
    if present < needed * len(fields):
        return (
            f"it has {present} of SGLang {choice.table.version}'s {len(fields)} ServerArgs "
            "fields (SGLang's own has them all)"
        )
    for name, kind in (("model_path", str), ("port", int), ("tp_size", int)):
        value = payload.get(name)
        if name in choice.table.fields and (not isinstance(value, kind) or isinstance(value, bool)):
            return f"its {name} is {type(value).__name__}, not {kind.__name__}"
    return None


def _observation(
    base: str, endpoint: str, payload: dict[str, Any], redirects: tuple[str, ...]
) -> verify.Observation:
    launch_command = payload.get("launch_command")
    version = payload.get("version")
    notes = [
        f"asked {base}{endpoint} from this machine: the process's command line and "
        "environment are not visible (received and env not compared)",
        *redirects,
    ]
    if not isinstance(launch_command, str):
        launch_command = None
        notes.append(
            "this SGLang does not report its launch_command (0.5.20+ does): a value that differs "
            "cannot be told apart from a flag the server never received"
        )
    return verify.Observation(
        pid=None,
        found_by="url",
        alive=True,
        argv=None,
        env=None,
        resolved=sglang_config.resolved_from_server_info(payload),
        resolved_source=endpoint,
        launch_command=launch_command,
        notes=tuple(notes),
        server_version=str(version) if version else None,
    )


# -- one GET, bounded -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    url: str  # the URL that answered (after a redirect on the same server)
    status: int
    body: bytes
    redirects: tuple[str, ...]  # a note per redirect followed


def _get(url: str, api_key: tuple[str | None, str], deadline: float, timeout_s: float) -> Answer:
    """``GET url`` within ``deadline`` (monotonic); a redirect on the same server is followed
    (noted), to another refused. 401/403 and an unreachable server are errors."""
    key, key_name = api_key
    redirects: list[str] = []
    for _ in range(MAX_REDIRECTS + 1):
        status, reason, headers, body = _request(url, key, deadline, timeout_s)
        if status in (401, 403):
            sent = f"the key from {key_name} was refused" if key else f"{key_name} is not set here"
            raise AuthError(
                f"{url}: HTTP {status} {reason}: the server wants its API key; {sent}",
                "set the profile's api_key ({from_env: NAME}) and export NAME where orch runs",
            )
        location = headers.get("location")
        if status not in (301, 302, 303, 307, 308) or location is None:
            return Answer(url, status, body, tuple(redirects))
        target = urllib.parse.urljoin(url, location)
        if _origin(target) != _origin(url):
            raise NotResolved(
                f"{url} redirects (HTTP {status}) to {_shown(target)}, another server: not "
                "followed, and nothing was sent there",
                "give --url the SGLang server itself; if the other address is it, --url that",
            )
        redirects.append(f"{url} redirected (HTTP {status}) to {location}: followed, same server")
        url = target
    raise NotResolved(
        f"{url}: more than {MAX_REDIRECTS} redirects", "give --url the SGLang server itself"
    )


def _origin(url: str) -> tuple[str, str, int | None]:
    parts = urllib.parse.urlsplit(url)
    default = {"http": 80, "https": 443}.get(parts.scheme)
    return parts.scheme, (parts.hostname or "").lower(), parts.port or default


def _request(
    url: str, key: str | None, deadline: float, timeout_s: float
) -> tuple[int, str, dict[str, str], bytes]:
    """One HTTP exchange, bounded in time (the watchdog) and size; redirects not followed."""
    import http.client  # only --url pays for them
    import ssl

    parts = urllib.parse.urlsplit(url)
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise _late(url, timeout_s, 0)
    host = parts.hostname or ""
    secure = parts.scheme == "https"
    port = parts.port or (443 if secure else 80)
    connection_class = http.client.HTTPSConnection if secure else http.client.HTTPConnection
    connection = connection_class(host, port, timeout=remaining)
    target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
    headers = {"Accept": "application/json", "Accept-Encoding": "identity"}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    received = 0
    raw: socket.socket | None = None
    with _Watchdog(deadline) as watchdog:
        try:
            # connected here, so that the watchdog holds the socket from the first byte (a TLS
            # handshake can drip too) to the last (http.client lets go of it with a response)
            raw = socket.create_connection((host, port), timeout=remaining)
            watchdog.watch(raw)
            connection.sock = (
                ssl.create_default_context().wrap_socket(raw, server_hostname=host)
                if secure
                else raw
            )
            connection.request("GET", target, headers=headers)
            response = connection.getresponse()
            answer_headers = {name.lower(): value for name, value in response.getheaders()}
            declared = answer_headers.get("content-length", "")
            if declared.isdigit() and int(declared) > MAX_BODY_BYTES:
                raise NotResolved(
                    f"{url} answered {declared} bytes, more than {_size(MAX_BODY_BYTES)}: not "
                    "read (SGLang's server_info is some KB)",
                    NOT_SGLANG_HINT,
                )
            chunks: list[bytes] = []
            while True:
                chunk = response.read1(1 << 16)
                if not chunk:
                    break
                received += len(chunk)
                if received > MAX_BODY_BYTES:
                    raise NotResolved(
                        f"{url} answered more than {_size(MAX_BODY_BYTES)}: stopped reading "
                        "(SGLang's server_info is some KB)",
                        NOT_SGLANG_HINT,
                    )
                chunks.append(chunk)
            if watchdog.expired:  # its shutdown reads as the end of the body
                raise TimeoutError
            if declared.isdigit() and received < int(declared):
                raise ConnectError(
                    f"{url}: the answer ended after {received} of its {declared} bytes",
                    "the server or its tunnel closed the connection mid-answer; try again",
                )
            return response.status, response.reason, answer_headers, b"".join(chunks)
        except (OSError, http.client.HTTPException) as exc:
            if watchdog.expired or isinstance(exc, TimeoutError):
                raise _late(url, timeout_s, received) from exc
            raise ConnectError(
                f"cannot reach {url}: {_reason(exc)}",
                "is the server up, and its tunnel running (`kubectl port-forward svc/NAME "
                "30000`, `ssh -L`)?",
            ) from exc
        finally:
            connection.close()
            if raw is not None:
                raw.close()


class _Watchdog:
    """Shuts the socket it watches at ``deadline``, ending whatever read or write waits on it
    (a per-read timeout never ends a drip); ``expired`` says it did."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline
        self._lock = threading.Lock()
        self._socket: socket.socket | None = None
        self._done = threading.Event()
        self.expired = False
        self._thread = threading.Thread(target=self._run, name="orch-url-deadline", daemon=True)

    def __enter__(self) -> _Watchdog:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._done.set()
        self._thread.join()

    def watch(self, sock: socket.socket | None) -> None:
        with self._lock:
            self._socket = sock
            if self.expired:
                self._shut()

    def _run(self) -> None:
        if self._done.wait(max(self._deadline - time.monotonic(), 0)):
            return
        with self._lock:
            self.expired = True
            self._shut()

    def _shut(self) -> None:
        if self._socket is not None:
            with contextlib.suppress(OSError):  # the raw socket's shutdown, TLS or not
                socket.socket.shutdown(self._socket, socket.SHUT_RDWR)


def _late(url: str, timeout_s: float, received: int) -> ConnectError:
    return ConnectError(
        f"{url}: no whole answer within {timeout_s:g} s ({received} bytes of body by then)",
        "a server that answers slowly or drips its answer; is it SGLang's port, and its tunnel "
        "healthy?",
    )


def _reason(exc: BaseException) -> str:
    import ssl

    if isinstance(exc, ssl.SSLError):
        return exc.reason or str(exc)
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _size(nbytes: int) -> str:
    return f"{nbytes >> 20} MiB"


# -- the body as JSON, bounded ---------------------------------------------------------------


def _json_object(answer: Answer) -> dict[str, Any]:
    """The body as a JSON object nested at most :data:`MAX_JSON_DEPTH` levels, else refused."""
    what = f"{answer.url} answered HTTP {answer.status}"
    depth = _depth(answer.body)
    if depth > MAX_JSON_DEPTH:
        raise NotResolved(
            f"{what} with JSON nested more than {MAX_JSON_DEPTH} levels deep: not SGLang's "
            "server_info",
            NOT_SGLANG_HINT,
        )
    try:
        payload = json.loads(answer.body)
    except (ValueError, RecursionError):
        payload = None
    if not isinstance(payload, dict):
        said = "no JSON object" if answer.status == 200 else "an error"
        raise NotResolved(f"{what} with {said}: not SGLang's server_info", NOT_SGLANG_HINT)
    return payload


_JSON_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


def _depth(body: bytes) -> int:
    """How deep the brackets of a JSON text nest outside its strings, found without parsing it
    (Python's parser recurses once per level), stopping past :data:`MAX_JSON_DEPTH` (0 when
    there are too few brackets to matter). 4 MiB of brackets take about a second."""
    if body.count(b"[") + body.count(b"{") <= MAX_JSON_DEPTH:
        return 0  # too few to nest that deep, whatever they are
    deepest = depth = 0
    for bracket in _BRACKET.finditer(_JSON_STRING.sub(b'""', body)):
        if bracket.group() in (b"[", b"{"):
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > MAX_JSON_DEPTH:
                    break
        else:
            depth -= 1
    return deepest
