"""``status``: a deployment's state as recorded, with what is true now (identities checked);
a corrupt state.json rebuilt from the processes that run."""

from __future__ import annotations

import os
import time
from typing import Any

from .cmd_hold import lock_view
from .files import NO_DISK_TROUBLE, Paths, disk_room, read_json, read_state_file
from .identity import (
    DEPLOYMENT_ENV,
    RUN_ID_ENV,
    cmdline,
    process_identity,
    recorded_identity,
    verified_alive,
)
from .load_watch import read_loads, server_api_key, serves_loads, status_load
from .protocol import PROTOCOL
from .record import AgentState
from .spec import spec_for
from .states import EXITED, READY, TERMINAL_STATES, UNSUPERVISED
from .trust import secure_deployment


def recorded_state(paths: Paths) -> dict[str, Any] | None:
    """state.json; when it is corrupt (issue 26: ``null`` or ``[]`` made a running deployment
    look undeployed), a state rebuilt from what runs, saying so (``corrupt_state``)."""
    state, corrupt = read_state_file(paths.state)
    if corrupt is None:
        return state
    return state_from_processes(paths, corrupt)


CORRUPT_STATE = "UNKNOWN"  # what status shows for a rebuilt state: the recorded one is lost


def state_from_processes(paths: Paths, why: str) -> dict[str, Any]:
    """A deployment's state rebuilt from its processes, state.json being corrupt: the supervisor
    is the process holding the deployment's lock (it holds it for its life) and naming the
    deployment in its command line; the server is the process group leader carrying the
    deployment's markers in its environment (RUN_ID_ENV, DEPLOYMENT_ENV). Each is recorded by
    its identity now, checked like any other before a signal."""
    supervisor = _lock_holder(paths)
    server, run_id = _marked_server(paths.root)
    spec = spec_for(paths, {})
    run_dir = os.path.join(paths.runs, run_id) if run_id else None
    log = os.path.join(run_dir, "server.log") if run_dir else None
    found = []
    if supervisor is not None:
        found.append(f"its supervisor (pid {supervisor['pid']}) by the lock it holds")
    if server is not None:
        found.append(f"its server (pid {server['pid']}) by its environment")
    message = f"{why}: " + (
        "found " + " and ".join(found) if found else "nothing of the deployment runs"
    )
    rebuilt = AgentState(
        deployment=spec.deployment,
        port=spec.port,
        meta=spec.meta,
        state=CORRUPT_STATE if supervisor or server else EXITED,
        agent_pid=supervisor["pid"] if supervisor else None,
        agent=supervisor,
        pid=server["pid"] if server else None,
        pgid=server["pid"] if server else None,
        server=server,
        run_id=run_id,
        run_dir=run_dir,
        log=log,
        message=message,
        extra={"corrupt_state": why},
    )
    return rebuilt.to_json()


def _lock_holder(paths: Paths) -> dict[str, Any] | None:
    """The identity of the process holding the deployment's lock (/proc/locks: ``1: FLOCK
    ADVISORY WRITE PID MAJ:MIN:INODE 0 EOF``) when it names the deployment in its command line
    (a supervisor's); None otherwise, or without /proc."""
    try:
        info = os.stat(paths.lock)
        with open("/proc/locks", encoding="ascii", errors="replace") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return None
    device = (os.major(info.st_dev), os.minor(info.st_dev))
    for line in lines:
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or "->" in fields:  # "->": a waiter
            continue
        try:
            pid = int(fields[4])
            major, minor, inode = fields[5].split(":")
            held = (int(major, 16), int(minor, 16)) == device and int(inode) == info.st_ino
        except ValueError:
            continue
        if held and paths.root in cmdline(pid):
            return process_identity(pid)
    return None


def _marked_server(deployment_dir: str) -> tuple[dict[str, Any] | None, str | None]:
    """The identity and run id of the deployment's server: a process group leader (the server
    is started in its own) whose environment carries the deployment's markers; the newest."""
    try:
        import psutil
    except ImportError:
        return None, None
    found: list[tuple[float, int, str]] = []
    for process in psutil.process_iter(["pid", "create_time"]):
        pid = process.info["pid"]
        try:
            if pid == os.getpid() or os.getpgid(pid) != pid:
                continue
            environ = process.environ()
        except (psutil.Error, OSError):
            continue
        run_id = environ.get(RUN_ID_ENV)
        if environ.get(DEPLOYMENT_ENV) == deployment_dir and run_id:
            found.append((process.info["create_time"], pid, run_id))
    if not found:
        return None, None
    _, pid, run_id = max(found)
    return process_identity(pid), run_id


def cmd_status(
    deployment_dir: str, recorded: dict[str, Any] | None = None, *, load: bool = False
) -> dict[str, Any]:
    """The state as recorded, with what is true now: the supervisor and the server are alive
    only when their recorded identities match a running process (a reused pid is "gone"). A
    dead supervisor with a live server is UNSUPERVISED. ``recorded``: the state to start from
    instead of state.json (a stop whose end found no room to be written). ``load``: a READY
    server's /v1/loads read now (one loopback call, at most 1 s), else its last figures."""
    paths = Paths(deployment_dir)
    # the operation lock, read BEFORE the state: orch trusts a state read before its own hold
    # was granted only when that hold is the next one after this view (no holder came between)
    lock = lock_view(os.path.dirname(deployment_dir), os.path.basename(deployment_dir))
    if recorded is not None:
        state: dict[str, Any] | None = dict(recorded)
    else:
        state = recorded_state(paths) if secure_deployment(paths) else None
    if state is None:
        return {
            "protocol": PROTOCOL,
            "deployed": False,
            "deployment_dir": deployment_dir,
            "lock": lock,
        }
    state["disk"] = dict(state.get("disk") or NO_DISK_TROUBLE, **disk_room(deployment_dir))
    agent_alive = verified_alive(recorded_identity(state, "agent", deployment_dir))
    if not agent_alive and recorded is None:
        # It may have recorded its end and exited between the read above and that check (a
        # server that died with restart=no: EXITED, then the supervisor exits): what it wrote
        # last is the truth, never "it died without an end".
        state = read_json(paths.state) or state
        state["disk"] = dict(state.get("disk") or NO_DISK_TROUBLE, **disk_room(deployment_dir))
    server_alive = verified_alive(recorded_identity(state, "server", deployment_dir))
    state["deployed"] = True
    state["agent_alive"] = agent_alive
    state["server_alive"] = server_alive
    if not server_alive and state.get("pid"):
        state["recorded_pid"], state["pid"] = state["pid"], None  # gone: never shown as ours
    started = state.get("started_mono")
    state["uptime_s"] = (time.monotonic() - started) if started and server_alive else None
    if not agent_alive and state.get("state") not in TERMINAL_STATES:
        state["stale"] = True  # the supervisor died without recording an end
        if server_alive:
            state["recorded_state"], state["state"] = state.get("state"), UNSUPERVISED
            state["output_lost"] = True
            state["message"] = (
                f"its supervisor (pid {state.get('agent_pid')}) died; the server runs "
                "unsupervised and its output is lost: orch up re-attaches one, orch down stops it"
            )
    if not server_alive:
        state.pop("memory_loads", None)  # figures of a server that is gone
    live = None
    if load and server_alive and state.get("state") == READY and serves_loads(state):
        spec = spec_for(paths, state)
        live = read_loads(spec.health_host, spec.port, key=server_api_key(spec.argv))
    shown = status_load(state.get("load"), live, time.time())
    state.pop("load", None)
    if shown is not None:
        state["load"] = shown
    group = state.get("group")
    if isinstance(group, dict) and not agent_alive:
        # its connections died with it, whatever it recorded last
        peers = [*(group.get("members") or {}).values(), group.get("coordinator")]
        for peer in peers:
            if isinstance(peer, dict):
                peer["connected"] = False
    state["lock"] = lock
    return state
