"""A running supervisor takes a new spec (``reconfigure``): told by SIGHUP, once
``reconfigure`` has replaced spec.json and left its request (``reconfigure-request.json``: a
token and what changed). Its restart, health and stop policies apply at once; its argv, env and
launch script at the server's next start; state.json's ``meta`` (the launch digest, git commit,
dirty, launched_by) becomes the new launch's, and ``reconfigured`` says when and how.

SIGHUP, because the supervisors of earlier orch versions ignore it (daemon.py, a session
without a terminal): a reconfigure sent to one changes nothing, and ``reconfigure`` waits for the
token, says so and puts spec.json back. A SIGHUP without a request (nobody's reconfigure) is
ignored too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from typing import TYPE_CHECKING, Any

from .files import read_json
from .spec import Spec, read_spec

if TYPE_CHECKING:
    from .supervisor import Supervisor

RELOAD_SIGNAL = signal.SIGHUP
REQUEST_FILE = "reconfigure-request.json"


def request_path(deployment_dir: str) -> str:
    return os.path.join(deployment_dir, REQUEST_FILE)


def placement_change(old: Spec, new: Spec) -> str | None:
    """Why ``new`` cannot be taken by ``old``'s supervisor without a new start; None when it
    can: the same deployment, on the same port and address, alone (a launch group's ranks
    restart together), behind the same gateway (its duty is built once)."""
    if new.deployment != old.deployment:
        return f"the spec is {new.deployment!r}'s, this deployment is {old.deployment!r}"
    if new.port != old.port or new.health_host != old.health_host:
        return (
            f"the server moves from {old.health_host}:{old.port} to "
            f"{new.health_host}:{new.port}: that is a new start"
        )
    if old.group is not None or new.group is not None:
        return "a launch group's ranks take a new spec by a restart, together"
    if new.gateway != old.gateway:
        return "the gateway the server sits behind changes: that is a new start"
    return None


def listen(supervisor: Supervisor) -> None:
    """In the detached supervisor: SIGHUP wakes a thread that takes the new spec."""
    wake = threading.Event()
    signal.signal(RELOAD_SIGNAL, lambda *_: wake.set())

    def take_when_told() -> None:
        while True:
            wake.wait()
            wake.clear()
            try:
                take_new_spec(supervisor)
            except Exception as exc:  # noqa: BLE001 - a bad reload never ends the supervisor
                supervisor.event("reconfigure_failed", why=f"{type(exc).__name__}: {exc}")

    threading.Thread(target=take_when_told, name="orch-reload", daemon=True).start()


def take_new_spec(supervisor: Supervisor) -> bool:
    """The request's spec taken (True), or why not recorded as an event (False)."""
    path = request_path(supervisor.paths.root)
    request: dict[str, Any] | None = read_json(path)
    with contextlib.suppress(OSError):
        os.unlink(path)
    if request is None:
        return False  # a SIGHUP nobody's reconfigure sent
    try:
        spec = read_spec(supervisor.paths.spec)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        supervisor.event("reconfigure_failed", token=request.get("token"), why=str(exc))
        return False
    why = placement_change(supervisor.spec, spec)
    if why is not None:
        supervisor.event("reconfigure_failed", token=request.get("token"), why=why)
        return False
    supervisor.take_spec(spec)
    how = str(request.get("how") or "agent-only")
    reconfigured = {
        "token": request.get("token"),
        "how": how,
        "at": supervisor.clock.wall(),
        "launch_digest": spec.meta.get("launch_digest"),
    }
    supervisor.update(meta=dict(spec.meta), reconfigured=reconfigured)
    supervisor.event("reconfigured", how=how, launch_digest=spec.meta.get("launch_digest"))
    return True
