"""``reconfigure --dir D --spec - [--live JSON]``: a running supervisor takes a new launch's
spec without its server being touched (orch sync's ``agent-only`` and ``live`` changes).

On stdin, as ``start --spec -``: ``{"spec": {...}, "launch_script": "...", "live": [...]}``
(``--live`` replaces the stdin's ``live``). The new spec is checked as ``start`` checks one, and
must keep the deployment where it is (reload.placement_change). The live changes, each
``{"endpoint": "/configure_logging" | "/set_internal_state", "body": {...}}``, are applied to
the READY server first and verified (live.py); any failure and nothing is written. Then
spec.json is replaced (the old one kept as spec.previous.json, as ``start`` keeps it), the
launch script too, and the supervisor, by its verified identity, is told (SIGHUP, reload.py);
the answer comes once it took the spec (state.json's ``reconfigured`` carries the token), with
the state after. A supervisor that does not take it (an earlier orch's, which ignores SIGHUP)
gets its files back as they were."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
import time
from typing import Any

from .cmd_status import cmd_status
from .files import Paths, read_bytes, read_json, replace_private, write_json_atomic
from .identity import recorded_identity, verified_alive
from .live import LiveFailed, apply_live, check_changes
from .protocol import PROTOCOL
from .reload import RELOAD_SIGNAL, placement_change, request_path
from .spec import Spec, read_spec
from .states import READY
from .trust import check_file, secure_deployment

TAKE_WAIT_S = 10.0  # the supervisor's reload thread takes it in milliseconds


def _refused(reason: str, **extra: Any) -> dict[str, Any]:
    return {"protocol": PROTOCOL, "ok": False, "reason": reason, "live_applied": {}, **extra}


def _read_input(spec_arg: str) -> dict[str, Any]:
    if spec_arg == "-":
        document = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    else:
        check_file(spec_arg, "the run spec")
        document = {"spec": read_json(spec_arg)}
    if not isinstance(document, dict) or not isinstance(document.get("spec"), dict):
        raise ValueError('reconfigure --spec: no {"spec": ...} document')
    return document


def cmd_reconfigure(deployment_dir: str, spec_arg: str, live_arg: str | None) -> dict[str, Any]:
    paths = Paths(deployment_dir)
    if not secure_deployment(paths):
        return _refused(f"{deployment_dir}: nothing is deployed there")
    try:
        document = _read_input(spec_arg)
        changes = check_changes(
            json.loads(live_arg) if live_arg is not None else document.get("live") or []
        )
        new = Spec.from_json(document["spec"])
    except (ValueError, KeyError, TypeError) as exc:
        return _refused(f"the new spec: {exc}")
    state = cmd_status(deployment_dir)
    if not state.get("agent_alive"):
        return _refused(
            f"no supervisor runs {new.deployment} (state {state.get('state')}): a new spec is "
            "taken by a running one; orch up starts one",
            state=state,
        )
    try:
        old = read_spec(paths.spec)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _refused(f"the running spec cannot be read: {exc}", state=state)
    why = placement_change(old, new)
    if why is not None:
        return _refused(why, state=state)
    applied: dict[str, Any] = {}
    if changes:
        if state.get("state") != READY or not state.get("server_alive"):
            return _refused(
                f"live changes need a READY server; {new.deployment} is {state.get('state')}",
                state=state,
            )
        try:
            applied = apply_live(old, changes, state.get("log"))
        except LiveFailed as exc:
            return _refused(f"live: {exc}", state=state)
    how = (
        "agent-only"
        if not applied
        else "live: " + ", ".join(f"{name}={json.dumps(value)}" for name, value in applied.items())
    )
    return _hand_over(paths, state, document, how, applied)


def _hand_over(
    paths: Paths, state: dict[str, Any], document: dict[str, Any], how: str, applied: dict[str, Any]
) -> dict[str, Any]:
    """spec.json (and launch.sh) replaced, the supervisor told, its taking awaited; on no
    taking, the files put back."""
    files = (paths.spec, paths.previous_spec, paths.launch_script)
    kept = {path: read_bytes(path) for path in files}
    existed = {path: os.path.exists(path) for path in kept}
    token = secrets.token_hex(8)
    pending = os.path.join(paths.root, f".spec-{token}.json")
    for path in (paths.launch_script, request_path(paths.root)):
        check_file(path, os.path.basename(path))
    write_json_atomic(pending, document["spec"])
    os.replace(paths.spec, paths.previous_spec)  # 0600: the launch to go back to
    os.replace(pending, paths.spec)
    if isinstance(document.get("launch_script"), str):
        replace_private(paths.launch_script, document["launch_script"].encode("utf-8"))
    write_json_atomic(request_path(paths.root), {"token": token, "how": how})
    identity = recorded_identity(state, "agent", paths.root)
    told = False
    if verified_alive(identity) and isinstance(identity, dict):
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(identity["pid"]), RELOAD_SIGNAL)
            told = True
    deadline = time.monotonic() + TAKE_WAIT_S
    while told and time.monotonic() < deadline:
        recorded = read_json(paths.state) or {}
        if (recorded.get("reconfigured") or {}).get("token") == token:
            return {
                "protocol": PROTOCOL,
                "ok": True,
                "reason": "",
                "how": how,
                "live_applied": applied,
                "state": cmd_status(paths.root),
            }
        time.sleep(0.02)
    for path, data in kept.items():  # as they were: the supervisor runs the old spec on
        if existed[path]:
            replace_private(path, data)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(request_path(paths.root))
    why = (
        f"the supervisor (pid {state.get('agent_pid')}) did not take the new spec within "
        f"{TAKE_WAIT_S:g} s (one started by an earlier orch ignores it): its files are as "
        "they were"
        if told
        else "the supervisor is gone: nothing changed"
    )
    if applied:
        why += "; the live changes stay applied on the server: " + how
    return _refused(why, state=cmd_status(paths.root), live_applied=applied)
