"""The agent protocol on orch's side: the run spec orch sends (``build_spec``, read by the agent's
``Spec.from_json``) and every answer decoded into a frozen value (no JSON dictionary travels
further up than this module). A wrong shape is a SupervisorError naming the answer and the key.

``tests/unit/test_protocol.py`` checks both directions against the agent's own code, and the
decoders against answers of the previous agent version: a host may still run a supervisor
started by an older orch, and its ``state.json`` must decode.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from orchestrator.effective.plan import PlanAnswer, Provenance
from orchestrator.effective.verify import Observation
from orchestrator.errors import PreflightError, SupervisorError
from orchestrator.model import (
    ExitInfo,
    GateView,
    GroupFailure,
    GroupMember,
    GroupView,
    MemoryLoad,
    Profile,
    RunState,
    frozen_map,
)
from orchestrator.remote.agent import PROTOCOL, restart_for
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang import memory
from orchestrator.sglang.memory import GpuMemory, MemoryAnswer, ModelMemory

# -- the run spec: what orch sends ----------------------------------------------------------------


def health_host(bind: str) -> str:
    """Where the agent asks ``/health``: on the host itself for the wildcard or loopback."""
    local = bind in ("0.0.0.0", "::", "localhost") or bind.startswith("127.")  # noqa: S104
    return "127.0.0.1" if local else bind


def build_spec(
    profile: Profile,
    argv: Sequence[str],
    env: Mapping[str, str],
    meta: Mapping[str, Any],
    group: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run spec for ``agent.py start`` (read there by ``Spec.from_json``); ``profile`` as
    its node runs it (``Profile.for_rank``), ``group`` the rank's part in a launch group."""
    spec = {
        "protocol": PROTOCOL,
        "deployment": profile.name,
        "argv": list(argv),
        "env": dict(env),
        "port": profile.port,
        "health_host": health_host(profile.bind),
        "health": {
            "endpoint": profile.health.endpoint,
            "interval_s": profile.health.interval_s,
            "startup_timeout_s": profile.health.startup_timeout_s,
            "failures": profile.health.failures,
        },
        "restart": {
            "mode": str(profile.restart.mode),
            "delay_s": profile.restart.delay_s,
            "multiplier": profile.restart.multiplier,
            "max_delay_s": profile.restart.max_delay_s,
            "start_limit": profile.restart.start_limit,
            "start_limit_interval_s": profile.restart.start_limit_interval_s,
        },
        "stop_timeout_s": profile.stop_timeout_s,
        "meta": dict(meta),
    }
    if group is not None:
        spec["group"] = dict(group)
    return spec


# -- decoded answers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class StartReply:
    """``start``: the supervisor holds its locks and has spawned the server, or why not."""

    ok: bool
    state: RunState | None  # when ok
    reason: str = ""  # when not
    holder: RunState | None = None  # the supervisor that holds the lock, when known


@dataclass(frozen=True)
class StopReply:
    state: RunState
    leftovers_killed: tuple[int, ...]
    notes: tuple[str, ...] = ()  # what the stop could not do or write (a full disk)


@dataclass(frozen=True)
class RunInfo:
    """One run (a server start) of a deployment; what events.jsonl kept of it (agents before
    this version answered only ``run_id``, ``log`` and ``size``)."""

    run_id: str
    log: str
    size: int | None  # bytes of its server.log; None when it has none
    started_at: float | None = None  # the host's wall clock
    ready_at: float | None = None
    pid: int | None = None
    exit: ExitInfo | None = None  # how it ended; None while it runs, or when not recorded


@dataclass(frozen=True)
class RunsReply:
    runs: tuple[RunInfo, ...]
    now: float | None  # the host's wall clock when it answered (None: an older agent)
    skipped_events: int = 0  # lines of events.jsonl that are no event (too long, too deep)


@dataclass(frozen=True)
class TailReply:
    """``tail``: the last lines of a run's log, read on the host."""

    ok: bool
    reason: str
    run_id: str | None
    log: str | None
    data: bytes  # as the log holds them: decoded by whoever shows them
    size: int | None  # where a follow goes on from
    rotated_size: int | None  # server.log.1's size: how a follow sees the next rotation


@dataclass(frozen=True)
class PortFacts:
    port: int
    free: bool
    holder_pid: int | None
    holder_cmdline: tuple[str, ...]


@dataclass(frozen=True)
class ModelFacts:
    path: str
    exists: bool
    looks_like_hub_id: bool


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    memory_total: int
    memory_free: int
    compute_capability: tuple[int, int]
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class GpuFacts:
    available: bool
    reason: str  # why not, when not available
    driver: str | None
    devices: tuple[GpuDevice, ...]


@dataclass(frozen=True)
class HostFacts:
    """``probe``: what preflight checks before a launch."""

    python: str
    executable: str
    hostname: str
    sglang_version: str | None
    sglang_error: str  # why ``import sglang`` failed, when it did
    psutil: str | None
    port: PortFacts
    model: ModelFacts | None
    gpus: GpuFacts
    # What the server would inherit of the host's environment, for the variables that shape a
    # distributed run (NCCL_*, GLOO_*, SGLANG_* ...); a secret-looking one as its digest only.
    inherited_env: Mapping[str, str] = field(default_factory=frozen_map)


@dataclass(frozen=True)
class ProbeAnswer:
    """``listen`` / ``reach``: whether it worked, and why not."""

    ok: bool
    reason: str = ""
    connect_ms: float | None = None


def decode_probe_answer(document: Any, what: str) -> ProbeAnswer:
    reader = _Reader(document, f"agent {what}")
    return ProbeAnswer(
        ok=reader.flag("ok"),
        reason=reader.text("reason", ""),
        connect_ms=reader.opt_number("connect_ms"),
    )


class _Reader:
    """Typed access to one JSON object of an answer; a wrong shape is a SupervisorError naming
    the answer and the key (a newer or older agent, or a broken one)."""

    def __init__(self, document: Any, what: str) -> None:
        if not isinstance(document, dict):
            raise SupervisorError(
                f"{what}: expected a JSON object, got {type(document).__name__}",
                "the host runs an agent this orch cannot read; orch down with the orch that "
                "started it",
            )
        self.document: dict[str, Any] = document
        self.what = what

    def _bad(self, key: str, expected: str) -> SupervisorError:
        got = type(self.document.get(key)).__name__
        return SupervisorError(
            f"{self.what}: {key}: expected {expected}, got {got}",
            "the host runs an agent this orch cannot read; orch down with the orch that started it",
        )

    def has(self, key: str) -> bool:
        return self.document.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str:
        value = self.document.get(key, default)
        if not isinstance(value, str):
            raise self._bad(key, "a string")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self.document.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self._bad(key, "a string or null")
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.document.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(key, "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        return None if self.document.get(key) is None else self.integer(key)

    def opt_number(self, key: str) -> float | None:
        value = self.document.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(key, "a number or null")
        return float(value)

    def number(self, key: str) -> float:
        value = self.opt_number(key)
        if value is None:
            raise self._bad(key, "a number")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.document.get(key, default)
        if not isinstance(value, bool):
            raise self._bad(key, "true or false")
        return value

    def items(self, key: str) -> list[Any]:
        value = self.document.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self._bad(key, "a list")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        return tuple(str(item) for item in self.items(key))

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.document.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self._bad(key, "an object")
        return value

    def child(self, key: str) -> _Reader | None:
        value = self.document.get(key)
        return None if value is None else _Reader(value, f"{self.what}.{key}")


def refused(document: Any) -> None:
    """The agent refused to act in an unsafe place (StrictModes: a workdir or deployment
    directory another user owns or may write, a planted symlink): PreflightError."""
    if isinstance(document, dict) and document.get("refused"):
        reason = document.get("reason")
        hint = document.get("hint")
        raise PreflightError(
            f"the agent refused: {reason if isinstance(reason, str) else document['refused']}",
            hint if isinstance(hint, str) else None,
        )


def decode_state(document: Any, *, agent_alive: bool | None = None) -> RunState:
    """A deployment's state: the agent's ``status``/``stop`` answers, ``start``'s ``state``,
    and ``state.json`` read directly (then ``agent_alive`` says what orch assumes)."""
    refused(document)
    reader = _Reader(document, "agent state")
    if agent_alive is None and not reader.flag("deployed", False):
        return RunState(deployed=False)
    last_exit = None
    if (raw_exit := reader.child("last_exit")) is not None:
        last_exit = _exit_info(raw_exit)
    meta = reader.child("meta") or _Reader({}, "agent state.meta")
    # the deployment's filesystem (agents before issue 26 said nothing of it)
    disk = reader.child("disk") or _Reader({}, "agent state.disk")
    # Agents up to this version wrote the launch digest as "plan_hash".
    digest = meta.opt_text("launch_digest") or meta.opt_text("plan_hash")
    dirty = meta.document.get("git_dirty")
    return RunState(
        deployed=True,
        state=reader.opt_text("state"),
        pid=reader.opt_integer("pid"),
        run_id=reader.opt_text("run_id"),
        run_dir=reader.opt_text("run_dir"),
        log=reader.opt_text("log"),
        port=reader.opt_integer("port"),
        starts=reader.integer("starts", 0),
        restarts=reader.integer("restarts", 0),
        ready=reader.flag("ready"),
        uptime_s=reader.opt_number("uptime_s"),
        started_at=reader.opt_number("started_at"),
        ready_at=reader.opt_number("ready_at"),
        message=reader.text("message", ""),
        last_exit=last_exit,
        agent_alive=reader.flag("agent_alive") if agent_alive is None else agent_alive,
        stale=reader.flag("stale"),
        # Agents before identities answered no server_alive: a pid was all they knew.
        server_alive=reader.flag("server_alive", reader.opt_integer("pid") is not None),
        recorded_state=reader.opt_text("recorded_state"),
        recorded_pid=reader.opt_integer("recorded_pid"),
        adopted=reader.flag("adopted"),
        output_lost=reader.flag("output_lost"),
        health_failures=reader.integer("health_failures", 0),
        next_start_at=reader.opt_number("next_start_at"),
        launch_digest=digest,
        git_commit=meta.opt_text("git_commit"),
        git_dirty=dirty if isinstance(dirty, bool) else None,
        launched_by=meta.opt_text("launched_by"),
        profiles_repo=meta.opt_text("profiles_repo"),
        profiles_dir=meta.opt_text("profiles_dir"),
        memory_loads=tuple(
            _memory_load(_Reader(load, f"agent state.memory_loads[{index}]"))
            for index, load in enumerate(reader.items("memory_loads"))
        ),
        memory_loads_error=reader.opt_text("memory_loads_error"),
        group=_group_view(reader.child("group")),
        disk_full=disk.flag("full"),
        output_dropped_bytes=disk.integer("dropped_bytes", 0),
        corrupt_state=reader.opt_text("corrupt_state"),
    )


def _group_view(reader: _Reader | None) -> GroupView | None:
    if reader is None:
        return None
    members = []
    raw_members = reader.document.get("members") or {}
    items = raw_members.items() if isinstance(raw_members, dict) else enumerate(raw_members)
    for key, raw in items:
        member = _Reader(raw, f"{reader.what}.members[{key}]")
        rank = member.opt_integer("rank")
        members.append(
            GroupMember(
                rank=rank if rank is not None else int(key),
                node=member.text("node", ""),
                connected=member.flag("connected"),
                state=member.opt_text("state"),
                run_id=member.opt_text("run_id"),
                pid=member.opt_integer("pid"),
            )
        )
    failure = None
    if (raw_failure := reader.child("failure")) is not None:
        failure = GroupFailure(
            rank=raw_failure.integer("rank", -1),
            node=raw_failure.text("node", ""),
            cls=raw_failure.text("cls", ""),
            message=raw_failure.text("message", ""),
        )
    gate = None
    if (raw_gate := reader.child("gate")) is not None and raw_gate.has("status"):
        gate = GateView(
            status=raw_gate.text("status", "?"),
            world_size=raw_gate.integer("world_size", 0),
            missing=tuple(int(rank) for rank in raw_gate.items("missing")),
            activated_after_s=raw_gate.opt_number("activated_after_s"),
        )
    return GroupView(
        gate=gate,
        rank=reader.integer("rank", 0),
        nnodes=reader.integer("nnodes", 1),
        generation=reader.integer("generation", 0),
        members=tuple(sorted(members, key=lambda m: m.rank)),
        failure=failure,
    )


def _memory_load(reader: _Reader) -> MemoryLoad:
    memory = reader.child("memory") or _Reader({}, f"{reader.what}.memory")
    return MemoryLoad(
        dp_rank=reader.opt_integer("dp_rank"),
        weight_gib=memory.opt_number("weight_gb"),
        kv_cache_gib=memory.opt_number("kv_cache_gb"),
        graph_gib=memory.opt_number("graph_gb"),
        token_capacity=memory.opt_integer("token_capacity"),
        max_running_requests=reader.opt_integer("max_running_requests"),
        running_requests=reader.opt_integer("num_running_reqs"),
        token_usage=reader.opt_number("token_usage"),
    )


def decode_start(document: Any) -> StartReply:
    """``start`` and ``adopt``."""
    refused(document)
    reader = _Reader(document, "agent start")
    if reader.flag("ok", False):
        return StartReply(ok=True, state=decode_state(reader.mapping("state"), agent_alive=True))
    holder = reader.document.get("holder")
    return StartReply(
        ok=False,
        state=None,
        reason=reader.text("reason", "the agent refused to start"),
        holder=decode_state(holder, agent_alive=True) if isinstance(holder, dict) else None,
    )


def _exit_info(reader: _Reader) -> ExitInfo:
    ended = ExitInfo(
        run_id=reader.text("run_id"),
        returncode=reader.integer("returncode"),
        cls=reader.text("class"),
        message=reader.text("message"),
        at=reader.number("at"),
        was_ready=reader.flag("was_ready"),
        signal=reader.opt_text("signal"),
        swept_pids=tuple(int(pid) for pid in reader.items("swept_pids")),
    )
    # Agents before the restart verdict (issue 25) recorded the class alone: its verdict is the
    # class's, as those agents applied it.
    by_class = restart_for(ended.cls, was_ready=ended.was_ready)
    return replace(
        ended,
        restart_helps=reader.flag("restart_helps", by_class.helps),
        restart_why=reader.text("restart_why", by_class.why),
    )


def decode_stop(document: Any) -> StopReply:
    refused(document)
    reader = _Reader(document, "agent stop")
    killed = tuple(int(pid) for pid in reader.items("leftovers_killed"))
    notes = tuple(str(note) for note in reader.items("notes"))
    return StopReply(decode_state(document), killed, notes)


def decode_runs_reply(document: Any) -> RunsReply:
    """``runs``: each run with its start, READY and exit when the agent recorded them."""
    refused(document)
    reader = _Reader(document, "agent runs")
    runs = []
    for index, raw in enumerate(reader.items("runs")):
        run = _Reader(raw, f"agent runs.runs[{index}]")
        ended = run.child("exit")
        info = RunInfo(
            run.text("run_id"), run.text("log"), run.opt_integer("size"),
            started_at=run.opt_number("started_at"), ready_at=run.opt_number("ready_at"),
            pid=run.opt_integer("pid"), exit=None if ended is None else _exit_info(ended),
        )  # fmt: skip
        runs.append(info)
    return RunsReply(tuple(runs), reader.opt_number("now"), reader.integer("skipped_events", 0))


def decode_tail(document: Any) -> TailReply:
    refused(document)
    reader = _Reader(document, "agent tail")
    try:
        data = base64.b64decode(reader.text("data", ""), validate=True)
    except ValueError as exc:
        raise reader._bad("data", "base64") from exc
    return TailReply(
        ok=reader.flag("ok", False), reason=reader.text("reason", ""),
        run_id=reader.opt_text("run_id"), log=reader.opt_text("log"), data=data,
        size=reader.opt_integer("size"), rotated_size=reader.opt_integer("rotated_size"),
    )  # fmt: skip


def decode_probe(document: Any) -> HostFacts:
    reader = _Reader(document, "agent probe")
    sglang = reader.child("sglang") or _Reader({}, "agent probe.sglang")
    port = reader.child("port") or _Reader({}, "agent probe.port")
    holder = port.child("holder")
    model = reader.child("model")
    return HostFacts(
        python=reader.text("python", "?"),
        executable=reader.text("executable", "?"),
        hostname=reader.text("hostname", "?"),
        sglang_version=sglang.opt_text("version"),
        sglang_error=sglang.opt_text("error") or "",
        psutil=reader.opt_text("psutil"),
        port=PortFacts(
            port=port.integer("port", 0),
            free=port.flag("free", True),
            holder_pid=holder.opt_integer("pid") if holder is not None else None,
            holder_cmdline=holder.texts("cmdline") if holder is not None else (),
        ),
        model=None
        if model is None
        else ModelFacts(
            path=model.text("path"),
            exists=model.flag("exists"),
            looks_like_hub_id=model.flag("looks_like_hub_id"),
        ),
        gpus=_decode_gpus(reader.child("gpus")),
        inherited_env=frozen_map(
            {str(k): str(v) for k, v in (reader.child("env") or _Reader({}, "")).document.items()}
        ),
    )


def _decode_gpus(reader: _Reader | None) -> GpuFacts:
    if reader is None or not reader.flag("available", False):
        reason = reader.opt_text("reason") if reader is not None else None
        return GpuFacts(False, reason or "NVML unavailable", None, ())
    devices = []
    for index, raw in enumerate(reader.items("devices")):
        device = _Reader(raw, f"agent probe.gpus.devices[{index}]")
        processes = []
        for number, raw_process in enumerate(device.items("processes")):
            process = _Reader(raw_process, f"{device.what}.processes[{number}]")
            processes.append(
                GpuProcess(
                    pid=process.integer("pid"),
                    used_bytes=process.opt_integer("used_bytes") or 0,
                    cmdline=process.texts("cmdline"),
                )
            )
        capability = [int(part) for part in device.items("compute_capability")] + [0, 0]
        devices.append(
            GpuDevice(
                index=device.integer("index"),
                name=device.text("name"),
                uuid=device.text("uuid", ""),
                memory_total=device.integer("memory_total"),
                memory_free=device.integer("memory_free"),
                compute_capability=(capability[0], capability[1]),
                processes=tuple(processes),
            )
        )
    return GpuFacts(True, "", reader.opt_text("driver"), tuple(devices))


def _memory_plan(reader: _Reader | None) -> Mapping[str, float | None] | None:
    """The figures ``up``'s plan predicted, as the run kept them (``memory.predicted_figures``)."""
    if reader is None:
        return None
    figures: dict[str, float | None] = {}
    for name, _unit in memory.FIGURES:
        value = reader.document.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise reader._bad(name, "a number")
        figures[name] = None if value is None else float(value)
    return figures


def decode_inspect(document: Any) -> tuple[Observation, LastRun | None]:
    """``inspect``: what the server received and resolved, and the deployment's last run."""
    refused(document)
    reader = _Reader(document, "agent inspect")
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


@dataclass(frozen=True)
class LastRun:
    run_id: str
    state: str
    exit_class: str | None = None  # how it ended, when it did
    exit_message: str | None = None


def decode_plan_answer(document: Any) -> PlanAnswer:
    """The probe (``remote/probe``): SGLang's own parsing and resolution of a command line."""
    reader = _Reader(document, "sglang_probe answer")
    provenance: dict[str, tuple[Provenance, ...]] = {}
    for name, entries in reader.mapping("provenance").items():
        if not isinstance(entries, list):
            continue
        provenance[str(name)] = tuple(
            Provenance(
                source=str(entry.get("source", "?")),
                value=entry.get("value"),
                file=entry.get("file") if isinstance(entry.get("file"), str) else None,
                line=entry.get("line") if isinstance(entry.get("line"), int) else None,
            )
            for entry in entries
            if isinstance(entry, dict)
        )
    error = reader.child("error")
    raised_in = None
    if error is not None and (raised := error.child("raised_in")) is not None:
        function = raised.document
        raised_in = f"{function.get('function')} ({function.get('file')}:{function.get('line')})"
    simulated = reader.child("simulated_gpu")
    return PlanAnswer(
        ok=reader.flag("ok", False),
        sglang_version=reader.opt_text("sglang_version"),
        standin=reader.flag("standin", False),
        mode=reader.text("mode", ""),
        simulated_gpu=simulated.text("name") if simulated is not None else None,
        error_stage=error.text("stage", "?") if error is not None else None,
        error_type=error.text("type", "?") if error is not None else None,
        error_message=error.text("message", "") if error is not None else None,
        error_raised_in=raised_in,
        raw=frozen_map(reader.mapping("raw")),
        effective=frozen_map(reader.mapping("effective")),
        defaults=frozen_map(reader.mapping("defaults")),
        provenance=frozen_map(provenance),
        logs=reader.texts("logs"),
        plugins=reader.texts("plugins"),
        memory=decode_memory(reader.child("memory")),
    )


def decode_memory(reader: _Reader | None) -> MemoryAnswer | None:
    """The probe's ``memory`` section (docs/agent.md): None when it has none (a refusal, a
    probe older than it)."""
    if reader is None:
        return None
    if reader.has("error"):
        return MemoryAnswer(model=None, error=reader.text("error"))
    weights = _checkpoint(reader.child("weights"))
    draft = _checkpoint(reader.child("draft_weights"))
    shapes = reader.child("shapes")
    text_config = reader.child("text_config")
    env = {str(k): v for k, v in reader.mapping("env").items() if v is not None}
    if not all(isinstance(v, str) for v in env.values()):
        raise reader._bad("env", "an object of strings")
    gpus = tuple(
        _gpu_memory(_Reader(raw, f"{reader.what}.gpus[{index}]"))
        for index, raw in enumerate(reader.items("gpus"))
    )
    return MemoryAnswer(
        model=None if shapes is None else _model_memory(shapes, weights, draft),
        shapes_error=reader.opt_text("shapes_error"),
        text_config=None if text_config is None else frozen_map(text_config.document),
        weights_bytes=weights[0],
        weights_basis=weights[1],
        weights_error=weights[2],
        gpus=gpus,
        gpu_error=reader.opt_text("gpu_error"),
        default_mem_fraction_static=reader.opt_number("default_mem_fraction_static"),
        default_error=reader.opt_text("default_mem_fraction_static_error"),
        draft_weights_bytes=draft[0],
        draft_weights_basis=draft[1],
        draft_weights_error=draft[2],
        env=frozen_map(env),
    )


def _checkpoint(reader: _Reader | None) -> tuple[int | None, str | None, str | None]:
    """A checkpoint's bytes, where they were read from, and why not."""
    if reader is None:
        return None, None, None
    return reader.opt_integer("bytes"), reader.opt_text("basis"), reader.opt_text("error")


def _draft_worker_layers(draft: _Reader | None) -> int | None:
    """The draft worker's own KV layers: its MTP layers in draft mode, else all its layers."""
    if draft is None:
        return None
    nextn = draft.opt_integer("nextn_predict_layers")
    return nextn if nextn is not None else draft.opt_integer("layers")


def _model_memory(
    shapes: _Reader,
    weights: tuple[int | None, str | None, str | None],
    draft: tuple[int | None, str | None, str | None],
) -> ModelMemory:
    mamba = shapes.child("mamba")
    draft_model = shapes.child("draft")
    return ModelMemory(
        basis="SGLang's classes: " + ", ".join(shapes.texts("sources")),
        architecture=shapes.opt_text("architecture"),
        context_len=shapes.opt_integer("context_len"),
        attention_tp=shapes.integer("attn_tp_size"),
        full_attention_layers=shapes.integer("full_attention_layers"),
        kv_cell_bytes=shapes.integer("kv_cell_bytes"),
        kv_dtype=shapes.text("kv_dtype"),
        hybrid=mamba is not None,
        mamba_layers=mamba.integer("layers") if mamba is not None else 0,
        mamba_slot_bytes=mamba.integer("slot_bytes") if mamba is not None else 0,
        mamba_conv_bytes=mamba.integer("conv_bytes") if mamba is not None else 0,
        mamba_ssm_bytes=mamba.integer("ssm_bytes") if mamba is not None else 0,
        mamba_conv_dtype=mamba.text("conv_dtype") if mamba is not None else None,
        mamba_ssm_dtype=mamba.text("ssm_dtype") if mamba is not None else None,
        weights_bytes=weights[0],
        weights_basis=weights[1],
        draft_weights_bytes=draft[0],
        # the draft layers 0.5.23's EAGLE KV cell holds besides the target's (docs/agent.md)
        draft_kv_layers=draft_model.opt_integer("eagle_draft_layers") if draft_model else None,
        draft_worker_layers=_draft_worker_layers(draft_model),
        multimodal=shapes.flag("multimodal"),
        notes=shapes.texts("notes"),
    )


def _gpu_memory(gpu: _Reader) -> GpuMemory:
    total = gpu.integer("total_bytes")
    free = gpu.opt_integer("free_bytes")
    name = gpu.text("name")
    basis = gpu.text("basis")
    if free is None:  # a simulated GPU: its nominal size, all free
        free = total
        basis = f"{basis} {name}: the plan's gpu.type, free memory not measured (taken as all free)"
    return GpuMemory(
        name=name, total_bytes=total, free_bytes=free, basis=basis, index=gpu.opt_integer("index")
    )


def last_json_line(stdout: bytes, stderr: bytes, returncode: int, what: str) -> Any:
    """The JSON document on the last line of stdout, or a SupervisorError saying why not."""
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        pass
    last = (stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
    raise SupervisorError(
        f"{what} exited with {returncode} without an answer: {last}",
        "is the python the one of the venv that holds sglang?",
    )
