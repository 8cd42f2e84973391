"""``stop``: through the supervisor when it runs; the server a dead one left, stopped the same
way and its end recorded."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any

from .cmd_status import CORRUPT_STATE, cmd_status, recorded_state
from .files import Paths, disk_room, os_error_text, read_json, write_json_atomic
from .group.control import GROUP_REPLY_MARGIN_S
from .identity import recorded_identity, verified_alive
from .protocol import PROTOCOL
from .spec import spec_for
from .states import EXITED, RUNNING, STOPPING, TERMINAL_STATES
from .supervisor import Supervisor
from .trust import secure_deployment
from .verdict import LOST, LOST_RETURNCODE, STOPPED, ExitVerdict
from .world import Adopted, Clock, Descendants, RealClock, kill_leftovers


def cmd_stop(deployment_dir: str, timeout: float) -> dict[str, Any]:
    """Stop the deployment: through its supervisor when it runs; when it died, stop the server
    it left (verified by identity) the same way and record the end in state.json, so that a
    second stop finds nothing to do. Nothing that is not verifiably ours is signalled. On a
    full disk it stops all the same: what it could not write is said in ``notes`` (the answer
    then shows the end as this stop knows it)."""
    paths = Paths(deployment_dir)
    state = recorded_state(paths) if secure_deployment(paths) else None
    if state is None:
        return {"protocol": PROTOCOL, "deployed": False, "deployment_dir": deployment_dir}
    clock = RealClock()
    notes: list[str] = []
    agent = recorded_identity(state, "agent", deployment_dir)
    asked = False  # its live supervisor was asked to stop, and ended by itself
    if verified_alive(agent) and agent is not None:
        grace = timeout
        try:
            write_json_atomic(paths.stop_request, {"grace_s": timeout})
        except OSError as exc:
            grace = max(timeout, spec_for(paths, state).stop_timeout_s)
            notes.append(
                f"{paths.stop_request}: {os_error_text(exc)}: the supervisor stopped the server "
                "with the profile's stop_timeout_s, not --timeout"
            )
        os.kill(int(agent["pid"]), signal.SIGTERM)
        deadline = clock.monotonic() + grace + 10.0 + _members_stop_s(paths, state)
        while verified_alive(agent) and clock.monotonic() < deadline:
            clock.sleep(0.05)
        asked = not verified_alive(agent)
        if not asked:  # it did not finish in time: take over its last duty
            os.kill(int(agent["pid"]), signal.SIGKILL)
            clock.sleep(0.1)
        with contextlib.suppress(OSError):
            os.unlink(paths.stop_request)  # not read when it stopped in BACKOFF
    final = read_json(paths.state) or state
    leftovers: list[int] = []
    unrecorded: dict[str, Any] | None = None
    if final.get("state") not in TERMINAL_STATES:
        # it ended on request but recorded no end: for want of room, or it died meanwhile
        unwritten = asked and bool(disk_room(paths.root)["full"])
        leftovers, stopper = _stop_for_a_dead_supervisor(paths, final, timeout, clock, unwritten)
        if stopper.journal.unsaved:
            unrecorded = stopper.record.to_json()
            why = (stopper.record.disk or {}).get("last_error") or "not written"
            notes.append(
                f"{paths.state}: {why}: the end of this stop is not recorded on the host "
                "(orch down again once there is room records it)"
            )
    elif final.get("run_id"):
        leftovers = kill_leftovers(paths.root, str(final["run_id"]), {}, clock)
    result = cmd_status(deployment_dir, unrecorded)
    result["leftovers_killed"] = leftovers
    result["notes"] = notes
    return result


def _members_stop_s(paths: Paths, state: dict[str, Any]) -> float:
    """How much longer a group's coordinator takes to stop than a server's supervisor: after
    its own server, it waits (bounded) for every member to confirm its shutdown."""
    group = state.get("group")
    if not isinstance(group, dict) or group.get("rank") != 0:
        return 0.0
    spec_group = spec_for(paths, state).group
    grace = spec_group.member_stop_grace_s if spec_group is not None else 5.0
    return grace + GROUP_REPLY_MARGIN_S


def _stop_for_a_dead_supervisor(
    paths: Paths, recorded: dict[str, Any], timeout: float, clock: Clock, asked: bool = False
) -> tuple[list[int], Supervisor]:
    """The supervisor died without recording an end: stop its server if it is still the one
    recorded (group SIGTERM, grace, SIGKILL, sweep), then record the end as it would have.
    ``asked``: it was asked to stop and ended by itself, but its end found no room (a full
    disk): a stop on request, not a death. The pids swept and the stopper (its state)."""
    spec = spec_for(paths, recorded)
    stopper = Supervisor(spec, paths, clock=clock)
    stopper.stop_grace_s = timeout
    stopper.resume(recorded)
    if stopper.record.state == CORRUPT_STATE:  # rebuilt from the processes: one runs
        stopper.record.state = RUNNING
    stopper.record.extra.pop("corrupt_state", None)  # written anew, whole
    server = recorded_identity(recorded, "server", paths.root)
    run_id = str(recorded.get("run_id") or "")
    if asked:
        message = "stopped; its supervisor's record of the end found no room"
    else:
        message = f"stopped; its supervisor (pid {recorded.get('agent_pid')}) had died"
    if verified_alive(server) and server is not None:
        stopper.change_state(STOPPING, message="stopping (its supervisor had died)")
        process = Adopted(server, stopper.world, clock)
        stopper.terminate(process, Descendants(process.pid, clock, stopper.world))
        stopper.record_exit(run_id, LOST_RETURNCODE, ExitVerdict(STOPPED, message))
    elif run_id and (stopper.record.last_exit or {}).get("run_id") != run_id:
        if asked:
            ended = ExitVerdict(STOPPED, "stopped on request")
        else:
            ended = ExitVerdict(LOST, "its supervisor died and the server was gone when stopped")
        stopper.record_exit(run_id, LOST_RETURNCODE, ended)
    swept = kill_leftovers(paths.root, run_id, {}, clock) if run_id else []
    stopper.change_state(EXITED, pid=None, pgid=None, server=None, message=message)
    stopper.event("stopped", supervisor_died=not asked, swept=swept)
    return swept, stopper
