"""``inspect``: what a server received and resolved, for ``orch diff-effective``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from .files import Paths, read_json
from .identity import port_holder, proc_facts, recorded_identity, verified_alive
from .protocol import CONFIG_FILE, MEMORY_FILE, PROTOCOL, RECEIVED_FILE
from .sglang_log import config_line_payload
from .trust import secure_deployment


def cmd_inspect(
    deployment_dir: str,
    pid: int | None,
    port: int | None,
    host: str,
    env_names: Sequence[str],
    log: str | None,
) -> dict[str, Any]:
    """What a server received and what it resolved, for ``orch diff-effective``.

    The server is ``pid`` when given, else the deployment's server when it runs (verified by
    identity), else whatever listens on ``port`` (a server started by hand). From it:
    ``/proc/PID/cmdline`` and, of its environment, only ``env_names`` (the rest may hold other
    people's secrets); ``/server_info`` (``/get_server_info`` on old versions) asked on the
    host; and from its log the ``server_args=`` line with the lines logged before it (SGLang
    explains its changes there). When orch's last run is gone: what it was exec'd with
    (``received.json``), and how it ended.
    """
    result: dict[str, Any] = {"protocol": PROTOCOL, "pid": None, "found_by": "", "alive": False}
    paths = Paths(deployment_dir)
    state = (read_json(paths.state) if secure_deployment(paths) else None) or {}
    if state:
        result["last_run"] = {"run_id": state.get("run_id"), "state": state.get("state")}
        ended = state.get("last_exit")
        if isinstance(ended, dict) and ended.get("run_id") == state.get("run_id"):
            result["last_run"]["exit"] = {
                "class": ended.get("class"),
                "message": ended.get("message"),
            }
    server = recorded_identity(state, "server", deployment_dir) if state else None
    if pid is not None:
        result.update(pid=pid, found_by="pid")
    elif server is not None and verified_alive(server):
        result.update(pid=int(server["pid"]), found_by="orch")
    elif port is not None:
        holder = port_holder(port)
        if holder and holder.get("pid"):
            result.update(pid=int(holder["pid"]), found_by="port")
    if log is None and result["found_by"] in ("orch", ""):
        log = state.get("log")  # orch's run, or its last one: its config line still tells
    port = port or state.get("port")
    target = result["pid"]
    if target is not None:
        result.update(proc_facts(int(target), set(env_names)))
    elif state.get("run_dir"):
        snapshot = os.path.join(str(state["run_dir"]), RECEIVED_FILE)
        received = read_json(snapshot)
        if received is not None and isinstance(received.get("argv"), list):
            env: dict[str, Any] = received["env"] if isinstance(received.get("env"), dict) else {}
            result.update(
                pid=received.get("pid"),
                found_by="orch",
                alive=False,
                argv=received["argv"],
                env={name: value for name, value in env.items() if name in env_names},
                received_file=snapshot,
                received_at=received.get("at"),
            )
    if result["alive"] and port:
        result.update(_server_info(host, int(port)))
    if log:
        result["log"] = log
        kept = read_json(os.path.join(os.path.dirname(log), CONFIG_FILE))
        result.update(kept if kept is not None else config_from_log(log))
        memory = read_json(os.path.join(os.path.dirname(log), MEMORY_FILE))
        if memory is not None and isinstance(memory.get("lines"), list):
            result["memory_lines"] = [str(line) for line in memory["lines"]]
    meta = state.get("meta")
    if result["found_by"] in ("orch", "") and isinstance(meta, dict):
        predicted = meta.get("memory_plan")
        if isinstance(predicted, dict):
            result["memory_plan"] = predicted  # what the plan predicted at orch up
    return result


def _server_info(host: str, port: int) -> dict[str, Any]:
    import urllib.error
    import urllib.request

    address = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host  # noqa: S104
    if ":" in address:
        address = f"[{address}]"
    errors = []
    for endpoint in ("/server_info", "/get_server_info"):
        url = f"http://{address}:{port}{endpoint}"
        try:
            with urllib.request.urlopen(url, timeout=5.0) as response:
                payload = json.loads(response.read())
        except urllib.error.HTTPError as exc:
            errors.append(f"{endpoint}: HTTP {exc.code}")
            continue
        except (urllib.error.URLError, OSError, ValueError) as exc:
            errors.append(f"{endpoint}: {getattr(exc, 'reason', exc)}")
            continue
        if isinstance(payload, dict):
            return {"server_info": payload, "server_info_endpoint": endpoint}
        errors.append(f"{endpoint}: not a JSON object")
    return {"server_info_error": "; ".join(errors)}


CONFIG_SCAN_BYTES = 64 << 20  # the config line comes early; never read a whole huge log
EXPLAIN_LINES = 400


def config_from_log(log: str) -> dict[str, Any]:
    """The ``server_args=`` line and up to EXPLAIN_LINES lines before it."""
    import collections

    before: collections.deque[str] = collections.deque(maxlen=EXPLAIN_LINES)
    try:
        with open(log, "rb") as handle:
            read = 0
            for raw in handle:
                read += len(raw)
                for piece in raw.decode("utf-8", "replace").replace("\r", "\n").split("\n"):
                    if not piece:
                        continue
                    if config_line_payload(piece) is not None:
                        return {"server_args_line": piece, "log_lines": list(before)}
                    before.append(piece[:2000])
                if read > CONFIG_SCAN_BYTES:
                    break
    except FileNotFoundError:
        return {"log_error": f"{log}: no such file"}
    except PermissionError as exc:
        return {"log_error": f"{log}: {exc.strerror}"}
    return {"server_args_line": None, "log_lines": list(before)}
