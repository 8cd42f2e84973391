"""Which process is which. A pid is no identity: pids are reused, and after the supervisor died
(OOM killer, crash) its recorded pids may name anybody's process. A process is the one recorded
when its pid AND its start (the kernel's start time in clock ticks since boot, /proc/PID/stat
field 22; psutil's create_time where there is no /proc) are those recorded at spawn: both are
fixed for the process's life and unchanged by exec. ``exe`` and the head of ``cmdline`` are
recorded for people (and refreshed when the server execs again); only the start decides.
Checked before every signal and every "alive" claim: a mismatch is "gone", never "ours". Also
what the agent reads of a process (/proc) and the markers every process of a run carries."""

from __future__ import annotations

from typing import Any

# Every process of a run carries both (children inherit them), for the sweep after the group kill.
RUN_ID_ENV = "ORCH_RUN_ID"
DEPLOYMENT_ENV = "ORCH_DEPLOYMENT_DIR"

IDENTITY_CMDLINE_ITEMS = 3  # the program and how it was started: the rest may hold secrets


def _start_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    try:
        return None if fields[0] == b"Z" else int(fields[19])  # state, ..., starttime (22)
    except (IndexError, ValueError):
        return None


def process_identity(pid: int) -> dict[str, Any] | None:
    """pid, start, exe and the head of cmdline of a running process; None when it is gone or a
    zombie."""
    try:
        import psutil
    except ImportError:
        return None
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            if process.status() == psutil.STATUS_ZOMBIE:
                return None
            identity: dict[str, Any] = {
                "pid": pid,
                "start_ticks": _start_ticks(pid),
                "create_time": process.create_time(),
            }
            try:
                identity["exe"] = process.exe()
                identity["cmdline"] = process.cmdline()[:IDENTITY_CMDLINE_ITEMS]
            except psutil.Error:  # another user's process: no exe or cmdline to read
                identity["exe"], identity["cmdline"] = None, None
    except psutil.Error:
        return None
    return identity


def same_process(recorded: Any, now: dict[str, Any] | None) -> bool:
    """``now`` (process_identity) is the process ``recorded`` at spawn."""
    if not isinstance(recorded, dict) or now is None or recorded.get("pid") != now["pid"]:
        return False
    if recorded.get("start_ticks") is not None and now.get("start_ticks") is not None:
        return bool(recorded["start_ticks"] == now["start_ticks"])
    created = recorded.get("create_time")
    return isinstance(created, (int, float)) and abs(created - now["create_time"]) < 0.02


def verified_alive(recorded: Any) -> bool:
    """The recorded process runs, and it is still that process (not a reuse of its pid)."""
    if not isinstance(recorded, dict) or not isinstance(recorded.get("pid"), int):
        return False
    return same_process(recorded, process_identity(int(recorded["pid"])))


def _legacy_identity(
    state: dict[str, Any], which: str, deployment_dir: str
) -> dict[str, Any] | None:
    """A state.json of the previous agent version recorded bare pids: accept one only when the
    process shows it is ours (the supervisor's argv names the deployment directory; the server
    carries the run's markers), then take its identity as it is now."""
    pid = state.get("agent_pid" if which == "agent" else "pid")
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        import psutil

        process = psutil.Process(pid)
        if which == "agent":
            ours = deployment_dir in process.cmdline() and "start" in process.cmdline()
        else:
            environ = process.environ()
            ours = (
                environ.get(RUN_ID_ENV) == state.get("run_id")
                and environ.get(DEPLOYMENT_ENV) == deployment_dir
            )
    except Exception:  # noqa: BLE001 - psutil missing, gone, or not ours to read: not verified
        return None
    return process_identity(pid) if ours else None


def recorded_identity(
    state: dict[str, Any], which: str, deployment_dir: str
) -> dict[str, Any] | None:
    """The identity state.json recorded for ``which`` ("agent" or "server"), or, for a state of
    the previous agent version, the process's identity when it verifiably is ours."""
    recorded = state.get(which)
    if isinstance(recorded, dict):
        return recorded
    if state.get("identity_recorded"):
        return None  # this agent records one for every process it runs: none means none runs
    return _legacy_identity(state, which, deployment_dir)


def proc_facts(pid: int, env_names: set[str]) -> dict[str, Any]:
    base = f"/proc/{pid}"
    try:
        with open(f"{base}/cmdline", "rb") as handle:
            argv = [a.decode("utf-8", "surrogateescape") for a in handle.read().split(b"\0")[:-1]]
        with open(f"{base}/environ", "rb") as handle:
            pairs = [e.decode("utf-8", "surrogateescape") for e in handle.read().split(b"\0") if e]
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while being read
        return {"alive": False}
    except PermissionError as exc:
        return {"alive": True, "proc_error": f"{base}: {exc.strerror}"}
    if not argv:  # a zombie keeps its pid but has no command line left
        return {"alive": False}
    env = {}
    for pair in pairs:
        name, _, value = pair.partition("=")
        if name in env_names:
            env[name] = value
    return {"alive": True, "argv": argv, "env": env}


def port_holder(port: int) -> dict[str, Any] | None:
    try:
        import psutil

        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN:
                if conn.pid is None:
                    return {"pid": None}
                process = psutil.Process(conn.pid)
                return {"pid": conn.pid, "cmdline": process.cmdline()[:12]}
    except Exception:  # noqa: BLE001 - needs privileges on some hosts: a fact we just lack
        return None
    return None


def cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return [a.decode("utf-8", "replace") for a in handle.read().split(b"\0")[:-1]][:12]
    except OSError:
        return []
