"""``watch``: one run's startup streamed to orch as JSON lines, as it happens."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass
from typing import Any

from .cmd_inspect import cmd_inspect
from .cmd_status import cmd_status
from .files import Paths
from .identity import recorded_identity, verified_alive
from .protocol import PROTOCOL
from .states import READY, TERMINAL_STATES
from .trust import secure_deployment

WATCH_TICK_S = 0.01  # the watcher's own polling, on the host: two small reads, no round trip
WATCH_BEAT_S = 1.0  # a line at least this often: a dead connection ends the watcher (EPIPE)
WATCH_CHECK_S = 0.25  # how often the watcher checks that the supervisor is alive
WATCH_CHUNK = 1 << 20


@dataclass(frozen=True)
class InspectAtReady:
    """What ``cmd_inspect`` is asked once the run is READY (``watch --inspect-port``)."""

    port: int
    host: str
    env_names: tuple[str, ...]


def cmd_watch(
    deployment_dir: str,
    run_id: str,
    offset: int,
    seconds: float,
    inspect: InspectAtReady | None = None,
) -> dict[str, Any]:
    """Stream one run's startup to orch as JSON lines on stdout, as it happens: ``{"log": b64,
    "offset": N}`` for new bytes of the run's log, ``{"state": {...}}`` whenever state.json
    changes, ``{"status": {...}}`` (cmd_status's answer) when the supervisor died without an
    end, ``{"beat": t}`` when nothing else was said for WATCH_BEAT_S. Ends on the run's READY or
    end, a terminal state, a dead supervisor, or after ``seconds``; orch ends it sooner by
    closing the channel. One process on the host instead of a round trip per look: the death
    of a server reaches orch in one one-way delay. With ``inspect``, the run's READY state is
    preceded by ``{"inspect": {...}}`` (cmd_inspect's answer): what orch compares next, without
    another command."""
    paths = Paths(deployment_dir)
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", run_id):
        return {"protocol": PROTOCOL, "ok": False, "reason": f"not a run id: {run_id!r}"}
    if not secure_deployment(paths):
        return {"protocol": PROTOCOL, "ok": False, "reason": "no deployment"}
    log = os.path.join(paths.runs, run_id, "server.log")
    out = sys.stdout
    deadline = time.monotonic() + seconds
    said_at = next_check = 0.0
    last_state: bytes | None = None
    seen_ours = False

    def say(document: dict[str, Any]) -> None:
        nonlocal said_at
        out.write(json.dumps(document, sort_keys=True) + "\n")
        out.flush()
        said_at = time.monotonic()

    while True:
        with contextlib.suppress(FileNotFoundError):
            with open(log, "rb") as handle:  # the run's log: only its new bytes
                handle.seek(offset)
                data = handle.read(WATCH_CHUNK)
            while data:
                offset += len(data)
                say({"log": base64.b64encode(data).decode("ascii"), "offset": offset})
                with open(log, "rb") as handle:
                    handle.seek(offset)
                    data = handle.read(WATCH_CHUNK)
        raw = None
        with contextlib.suppress(FileNotFoundError), open(paths.state, "rb") as handle:
            raw = handle.read()
        state: dict[str, Any] | None = None
        if raw is not None:
            with contextlib.suppress(ValueError):
                loaded = json.loads(raw)
                state = loaded if isinstance(loaded, dict) else None
        if state is not None and not seen_ours:
            # Until the run's own supervisor has written its state, state.json may still be the
            # previous run's (a start answers once the server is spawned; the file follows):
            # never said, never an end (an EXITED run before a --replace would read as ours).
            current = state.get("run_id")
            ended = (state.get("last_exit") or {}).get("run_id")
            # run ids grow (NNNN-time): a later one means ours was recorded and moved past
            if ended == run_id or (isinstance(current, str) and current >= run_id):
                seen_ours = True
            else:
                state = None
        if raw != last_state and state is not None:
            last_state = raw
            if (
                inspect is not None
                and state.get("run_id") == run_id
                and state.get("state") == READY
            ):
                say(
                    {
                        "inspect": cmd_inspect(
                            deployment_dir,
                            None,
                            inspect.port,
                            inspect.host,
                            inspect.env_names,
                            None,
                        )
                    }
                )
            say({"state": state})
        now = time.monotonic()
        if state is not None:
            last_exit = state.get("last_exit") or {}
            if (
                (state.get("run_id") == run_id and state.get("state") == READY)
                or last_exit.get("run_id") == run_id
                or state.get("state") in TERMINAL_STATES
            ):
                return {"protocol": PROTOCOL, "ok": True, "ended": "state"}
            if now >= next_check:
                next_check = now + WATCH_CHECK_S
                if not verified_alive(recorded_identity(state, "agent", deployment_dir)):
                    status = cmd_status(deployment_dir)
                    if status.get("state") not in TERMINAL_STATES:
                        say({"status": status})
                        return {"protocol": PROTOCOL, "ok": True, "ended": "supervisor"}
        if now >= deadline:
            return {"protocol": PROTOCOL, "ok": True, "ended": "timeout"}
        if now - said_at >= WATCH_BEAT_S:
            say({"beat": round(time.time(), 3)})
        time.sleep(WATCH_TICK_S)
