"""``status``: a deployment's state, as the agent answers it and as ``state.json`` holds it (the
same decoder reads ``start``'s and ``stop``'s state, and the watch stream's)."""

from __future__ import annotations

from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, exit_info, refused
from orchestrator.model import (
    GateView,
    GroupFailure,
    GroupMember,
    GroupView,
    LockView,
    MemoryLoad,
    RankLoad,
    RunState,
    ServerLoad,
)


def status_request(directory: str, *, load: bool = False) -> Request:
    """``load``: a READY server's /v1/loads read now by the agent (loopback, at most 1 s)."""
    return Request(("status", "--dir", directory, *(("--load",) if load else ())))


def decode_state(document: Any, *, agent_alive: bool | None = None) -> RunState:
    """A deployment's state: the agent's ``status``/``stop`` answers, ``start``'s ``state``,
    and ``state.json`` read directly (then ``agent_alive`` says what orch assumes)."""
    refused(document)
    reader = Reader(document, "agent state")
    lock = _lock_view(reader.child("lock"))
    if agent_alive is None and not reader.flag("deployed", False):
        return RunState(deployed=False, lock=lock)
    last_exit = None
    if (raw_exit := reader.child("last_exit")) is not None:
        last_exit = exit_info(raw_exit)
    meta = reader.child("meta") or Reader({}, "agent state.meta")
    # the deployment's filesystem (agents before issue 26 said nothing of it)
    disk = reader.child("disk") or Reader({}, "agent state.disk")
    # what the agent did at its server's gateway (agents before issue 30 did nothing there)
    gateway = reader.child("gateway") or Reader({}, "agent state.gateway")
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
            _memory_load(Reader(load, f"agent state.memory_loads[{index}]"))
            for index, load in enumerate(reader.items("memory_loads"))
        ),
        memory_loads_error=reader.opt_text("memory_loads_error"),
        load=_server_load(reader.child("load")),
        planned_requests=_planned_requests(meta),
        planned_requests_by=meta.opt_text("max_running_requests_by"),
        group=_group_view(reader.child("group")),
        disk_full=disk.flag("full"),
        output_dropped_bytes=disk.integer("dropped_bytes", 0),
        corrupt_state=reader.opt_text("corrupt_state"),
        gateway_status=gateway.opt_text("status"),
        gateway_error=gateway.opt_text("error"),
        lock=lock,
    )


def _group_view(reader: Reader | None) -> GroupView | None:
    if reader is None:
        return None
    members = []
    raw_members = reader.document.get("members") or {}
    items = raw_members.items() if isinstance(raw_members, dict) else enumerate(raw_members)
    for key, raw in items:
        member = Reader(raw, f"{reader.what}.members[{key}]")
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


def _memory_load(reader: Reader) -> MemoryLoad:
    memory = reader.child("memory") or Reader({}, f"{reader.what}.memory")
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


def _lock_view(reader: Reader | None) -> LockView | None:
    """The operation lock as the agent read it (agents before issue 31 said nothing of it)."""
    if reader is None:
        return None
    return LockView(generation=reader.integer("generation", 0), held=reader.flag("held"))


def _planned_requests(meta: Reader) -> int | None:
    plan = meta.child("memory_plan")
    value = plan.opt_number("max_running_requests") if plan is not None else None
    return None if value is None else int(value)


def _server_load(reader: Reader | None) -> ServerLoad | None:
    if reader is None:
        return None
    ranks = []
    for index, raw in enumerate(reader.items("loads")):
        load = Reader(raw, f"{reader.what}.loads[{index}]")
        spec = load.child("speculative") or Reader({}, f"{load.what}.speculative")

        def count(figures: Reader, key: str) -> int | None:
            value = figures.opt_number(key)
            return None if value is None else int(value)

        ranks.append(
            RankLoad(
                dp_rank=load.integer("dp_rank", index),
                running=count(load, "num_running_reqs"),
                waiting=count(load, "num_waiting_reqs"),
                used_tokens=count(load, "num_used_tokens"),
                token_capacity=count(load, "max_total_num_tokens"),
                max_running_requests=count(load, "max_running_requests"),
                token_usage=load.opt_number("token_usage"),
                gen_throughput=load.opt_number("gen_throughput"),
                cache_hit_rate=load.opt_number("cache_hit_rate"),
                utilization=load.opt_number("utilization"),
                accept_length=spec.opt_number("accept_length"),
                accept_rate=spec.opt_number("accept_rate"),
            )
        )
    return ServerLoad(
        live=reader.flag("live"),
        at=reader.opt_number("at"),
        age_s=reader.opt_number("age_s"),
        ranks=tuple(ranks),
        error=reader.opt_text("error"),
        version=reader.opt_text("version"),
    )
