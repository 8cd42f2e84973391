"""``adopt``: a new supervisor for a running server whose supervisor died."""

from __future__ import annotations

import contextlib
import os
from typing import Any

from .daemon import send_answer, start_detached, supervise
from .files import Paths, open_append, read_json
from .identity import recorded_identity, verified_alive
from .roles import supervisor_for
from .spec import read_spec
from .states import READY, RUNNING, STARTING
from .trust import secure_deployment
from .world import Adopted, RealClock

ADOPTABLE = (STARTING, RUNNING, READY)


def cmd_adopt(deployment_dir: str) -> dict[str, Any]:
    """Detach a new supervisor for a running server whose supervisor died: it takes over its
    liveness, restarts and stop without restarting it. Its output is lost (the pipe's reader
    died with the old supervisor); a restart gets a new run with a log again."""
    paths = Paths(deployment_dir)
    if not secure_deployment(paths):
        return {"ok": False, "reason": f"{deployment_dir}: not deployed"}
    state = read_json(paths.state)
    if state is None:
        return {"ok": False, "reason": f"{deployment_dir}: no state to adopt"}
    if verified_alive(recorded_identity(state, "agent", deployment_dir)):
        return {"ok": False, "reason": "its supervisor runs: nothing to adopt", "holder": state}
    server = recorded_identity(state, "server", deployment_dir)
    if not verified_alive(server) or server is None:
        return {"ok": False, "reason": "no server of this deployment runs: nothing to adopt"}
    if state.get("state") not in ADOPTABLE:
        return {
            "ok": False,
            "reason": f"its supervisor died while {state.get('state')}: orch down stops the server",
        }
    spec = read_spec(paths.spec)
    if spec.group is not None:
        # Its coordinator counted it lost and stopped the group's other ranks: a rank alone
        # serves nothing, and rejoining a running group is not possible (no in-place recovery).
        return {
            "ok": False,
            "reason": f"{spec.group.name(spec.group.rank)} of a launch group cannot be adopted: "
            "orch down stops the group, orch up starts it again",
        }
    writer, answer = start_detached(paths, spec.port)
    if writer is None:
        return answer or {}
    supervisor = supervisor_for(spec, paths, clock=RealClock())
    if not verified_alive(server):  # it ended while this supervisor was detaching
        send_answer(writer, {"ok": False, "reason": "the server ended while being adopted"})
        os._exit(0)
    dead = state.get("agent_pid")
    supervisor.resume(state)
    note = (
        f"orch agent: the supervisor (pid {dead}) died; supervisor pid {os.getpid()} adopted "
        f"server pid {server['pid']}: what it printed since is lost (its pipe's reader died)\n"
    )
    with contextlib.suppress(OSError), os.fdopen(open_append(str(state.get("log"))), "a") as log:
        log.write(note)
    supervisor.update(
        server=server,
        pid=server["pid"],
        pgid=server["pid"],
        adopted=True,
        output_lost=True,
        message=f"adopted: its supervisor (pid {dead}) died; its output since is lost",
    )
    supervisor.event("adopted", run_id=state.get("run_id"), pid=server["pid"], previous=dead)
    supervise(supervisor, writer, Adopted(server, supervisor.world, supervisor.clock))
    return {}  # never reached
