"""``inspect``: what the server received (its argv and env, read from the process) and resolved
(``/server_info``, else its ``server_args=`` line), and the deployment's last run; also asked by
``watch`` at READY (``InspectRequest``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.effective.verify import Observation
from orchestrator.fleet.protocol.common import Reader, Request, refused
from orchestrator.model import frozen_map
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang.memory.measured import FIGURES


@dataclass(frozen=True)
class InspectRequest:
    """What ``inspect`` is asked at READY, by the stream that saw READY (see cmd_watch)."""

    port: int
    host: str
    env_names: tuple[str, ...]


def inspect_at_ready_args(inspect: InspectRequest | None) -> tuple[str, ...]:
    """The arguments of ``watch`` (and ``start --watch``) that ask for the inspection at READY."""
    if inspect is None:
        return ()
    args = ["--inspect-port", str(inspect.port), "--inspect-host", inspect.host]
    for name in inspect.env_names:
        args += ["--inspect-env", name]
    return tuple(args)


def inspect_request(
    directory: str,
    *,
    port: int,
    host: str,
    env_names: Sequence[str],
    pid: int | None = None,
    log: str | None = None,
) -> Request:
    argv = ["inspect", "--dir", directory, "--port", str(port), "--host", host]
    for name in env_names:
        argv += ["--env", name]
    if pid is not None:
        argv += ["--pid", str(pid)]
    if log is not None:
        argv += ["--log", log]
    return Request(tuple(argv), timeout=30.0)


@dataclass(frozen=True)
class LastRun:
    run_id: str
    state: str
    exit_class: str | None = None  # how it ended, when it did
    exit_message: str | None = None


def decode_inspect(document: Any) -> tuple[Observation, LastRun | None]:
    """``inspect``: what the server received and resolved, and the deployment's last run."""
    refused(document)
    reader = Reader(document, "agent inspect")
    notes: list[str] = []
    resolved: Mapping[str, Any] | None = None
    source = ""
    launch_command = None
    server_version = None
    if (info := reader.child("server_info")) is not None:
        resolved = sglang_config.resolved_from_server_info(info.document)
        source = reader.opt_text("server_info_endpoint") or "/server_info"
        launch_command = info.opt_text("launch_command") if info.has("launch_command") else None
        version = info.document.get("version")
        server_version = str(version) if version else None
    else:
        if reader.has("server_info_error"):
            notes.append(f"server_info unavailable: {reader.text('server_info_error')}")
        if (line := reader.opt_text("server_args_line")) is not None:
            try:
                resolved = sglang_config.parse_server_args_line(line)
                source = "server_args line"
            except sglang_config.UnreadableConfig as exc:
                notes.append(str(exc))
    alive = reader.flag("alive")
    last = reader.child("last_run")
    ended = last.child("exit") if last is not None else None
    if (snapshot := reader.opt_text("received_file")) is not None:
        notes.append(f"the server is not running: received is what it was exec'd with ({snapshot})")
        if resolved is None:
            how = f"{ended.text('class', '?')}: {ended.text('message', '')}" if ended else "?"
            notes.append(f"it resolved nothing: it ended before logging server_args= ({how})")
    if not alive and resolved is not None:
        notes.append("the server is not running: compared with what its log recorded")
    for key in ("proc_error", "log_error"):
        if reader.has(key):
            notes.append(reader.text(key))
    env = reader.document.get("env")
    observed = Observation(
        pid=reader.opt_integer("pid"),
        found_by=reader.text("found_by", ""),
        alive=alive,
        argv=reader.texts("argv") if reader.has("argv") else None,
        env=frozen_map({str(k): str(v) for k, v in env.items()}) if isinstance(env, dict) else None,
        resolved=resolved,
        resolved_source=source,
        launch_command=launch_command,
        log_lines=reader.texts("log_lines"),
        log=reader.opt_text("log"),
        notes=tuple(notes),
        server_version=server_version,
        memory_lines=reader.texts("memory_lines") if reader.has("memory_lines") else (),
        memory_plan=_memory_plan(reader.child("memory_plan")),
    )
    last_run = None
    if last is not None and last.opt_text("run_id"):
        last_run = LastRun(
            last.text("run_id"),
            last.opt_text("state") or "?",
            exit_class=ended.opt_text("class") if ended is not None else None,
            exit_message=ended.opt_text("message") if ended is not None else None,
        )
    return observed, last_run


def _memory_plan(reader: Reader | None) -> Mapping[str, float | None] | None:
    """The figures ``up``'s plan predicted, as the run kept them
    (``memory.measured.predicted_figures``)."""
    if reader is None:
        return None
    figures: dict[str, float | None] = {}
    for name, _unit in FIGURES:
        value = reader.document.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise reader.bad(name, "a number")
        figures[name] = None if value is None else float(value)
    return figures
