"""Live changes: server arguments a running SGLang changes without a restart, applied over HTTP
by the agent on the host, and verified before anything is recorded (``reconfigure --live``).

What SGLang answers (read in 0.5.11's and 0.5.23's srt/entrypoints/http_server.py and the
managers): ``POST /configure_logging`` (ConfigureLoggingReq) answers 200 with an empty body and
logs ``Config logging: obj=ConfigureLoggingReq(...)``; the request logger it changes is no
server argument, and ``/get_server_info`` keeps showing the startup values: its log line is the
evidence. ``POST /set_internal_state`` (``{"server_args": {...}}``) answers one boolean per DP
rank (``[true]``; ``[false]`` when the scheduler refused), and ``/get_server_info``'s
``internal_states`` (one per DP rank) show the new values (0.5.11: the global server args it
set; 0.5.23: the resolved arguments with their overrides); its top-level fields stay the
startup's. A value is verified where SGLang shows it; one it shows nowhere is not verified, and
the change fails.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from .http_json import Unreachable, exchange
from .spec import Spec, host_port

CONFIGURE_LOGGING = "/configure_logging"
SET_INTERNAL_STATE = "/set_internal_state"
ENDPOINTS = (CONFIGURE_LOGGING, SET_INTERNAL_STATE)
LIVE_TIMEOUT_S = 10.0  # one request; a scheduler busy with a batch answers between steps
LOG_LINE = "Config logging: obj=ConfigureLoggingReq("
LOG_WAIT_S = 3.0  # the line is logged before the 200: this is for the output pipe


class LiveFailed(Exception):
    """A live change the server refused, or whose value it does not show after; the reason is
    one line and never holds the key."""


def server_key(spec: Spec) -> str | None:
    """The key the server's admin endpoints take (SGLang's AuthLevel.ADMIN_OPTIONAL):
    ``--admin-api-key`` when set, else ``--api-key``; None when neither is."""
    found: dict[str, str] = {}
    argv = list(spec.argv)
    for index, arg in enumerate(argv):
        for name in ("--admin-api-key", "--api-key"):
            if arg == name and index + 1 < len(argv):
                found[name] = argv[index + 1]
            elif arg.startswith(name + "="):
                found[name] = arg.split("=", 1)[1]
    return found.get("--admin-api-key") or found.get("--api-key")


def fields_of(changes: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """field -> value of every change (``set_internal_state``'s under ``server_args``)."""
    values: dict[str, Any] = {}
    for change in changes:
        body = change["body"]
        if change["endpoint"] == SET_INTERNAL_STATE:
            values.update(body.get("server_args") or {})
        else:
            values.update(body)
    return values


def check_changes(changes: Any) -> list[dict[str, Any]]:
    """The live changes as sent: a list of {"endpoint", "body"}; ValueError otherwise."""
    if not isinstance(changes, list):
        raise ValueError("live: expected a list of {endpoint, body}")
    for change in changes:
        if not isinstance(change, dict) or change.get("endpoint") not in ENDPOINTS:
            raise ValueError(f"live: an endpoint among {', '.join(ENDPOINTS)} for each change")
        body = change.get("body")
        if not isinstance(body, dict) or not body:
            raise ValueError(f"live: {change['endpoint']}: a body with the fields to change")
        if change["endpoint"] == SET_INTERNAL_STATE and not isinstance(
            body.get("server_args"), dict
        ):
            raise ValueError('live: /set_internal_state: a body {"server_args": {...}}')
    return changes


def apply_live(spec: Spec, changes: Sequence[Mapping[str, Any]], log: str | None) -> dict[str, Any]:
    """Apply each change to the server ``spec`` runs and verify it; field -> value applied.
    LiveFailed at the first refusal or value not shown (the changes before it stay applied:
    the reason says which)."""
    base = f"http://{host_port(spec.health_host, spec.port)}"
    key = server_key(spec)
    applied: dict[str, Any] = {}
    for change in changes:
        endpoint, body = str(change["endpoint"]), dict(change["body"])
        offset = _size(log)
        try:
            reply = exchange(
                "POST", base + endpoint, key=key, timeout_s=LIVE_TIMEOUT_S, payload=body
            )
        except Unreachable as exc:
            raise LiveFailed(_so_far(applied, f"POST {endpoint}: {exc.reason}")) from exc
        if reply.status != 200:
            raise LiveFailed(
                _so_far(applied, f"POST {endpoint} answered {reply.status}: {reply.text()}")
            )
        wanted = fields_of([change])
        if endpoint == SET_INTERNAL_STATE:
            answer = reply.json()
            if not (isinstance(answer, list) and answer and all(x is True for x in answer)):
                raise LiveFailed(
                    _so_far(applied, f"POST {endpoint}: the server refused ({reply.text()})")
                )
            _verify_in_server_info(base, key, wanted, applied)
        else:
            _verify_in_log(log, offset, wanted, applied)
        applied.update(wanted)
    return applied


def _so_far(applied: Mapping[str, Any], why: str) -> str:
    if not applied:
        return why
    done = ", ".join(f"{name}={value!r}" for name, value in applied.items())
    return f"{why} (applied before it, and left so: {done})"


def _verify_in_server_info(
    base: str, key: str | None, wanted: Mapping[str, Any], applied: Mapping[str, Any]
) -> None:
    try:
        reply = exchange("GET", base + "/get_server_info", key=key, timeout_s=LIVE_TIMEOUT_S)
    except Unreachable as exc:
        raise LiveFailed(_so_far(applied, f"GET /get_server_info: {exc.reason}")) from exc
    info = reply.json()
    if reply.status != 200 or not isinstance(info, dict):
        raise LiveFailed(_so_far(applied, f"GET /get_server_info answered {reply.status}"))
    states = [s for s in info.get("internal_states") or [] if isinstance(s, dict)]
    for name, value in wanted.items():
        shown = [state.get(name) for state in states] or [info.get(name)]
        if any(seen != value for seen in shown):
            raise LiveFailed(
                _so_far(
                    applied,
                    f"/get_server_info shows {name}={shown[0]!r} after setting it to {value!r}",
                )
            )


def _verify_in_log(
    log: str | None, offset: int, wanted: Mapping[str, Any], applied: Mapping[str, Any]
) -> None:
    """SGLang's ``Config logging: obj=ConfigureLoggingReq(...)`` line, after ``offset`` in the
    run's log, naming every value as Python writes it."""
    tokens = [f"{name}={value!r}" for name, value in wanted.items()]
    deadline = time.monotonic() + LOG_WAIT_S
    while True:
        for line in _lines_after(log, offset):
            if LOG_LINE in line and all(token in line for token in tokens):
                return
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    raise LiveFailed(
        _so_far(
            applied,
            f"the server did not log its new logging configuration ({', '.join(tokens)}): "
            "not verified (is its --log-level above info?)",
        )
    )


def _size(path: str | None) -> int:
    try:
        return os.stat(path).st_size if path else 0
    except OSError:
        return 0


def _lines_after(path: str | None, offset: int) -> list[str]:
    if not path:
        return []
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return []
    with os.fdopen(fd, "rb") as handle:
        handle.seek(offset)
        data = handle.read(1 << 20)
    return data.decode("utf-8", "replace").splitlines()
