"""``start`` (and ``adopt``): the run spec orch sends (``build_spec``, read by the agent's
``Spec.from_json``) with the launch script on the command's stdin, and the supervisor's answer:
it holds its locks and has spawned the server, or why not."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, refused
from orchestrator.fleet.protocol.inspect import InspectRequest, inspect_at_ready_args
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.model import Profile, RunState
from orchestrator.remote.agent.protocol import PROTOCOL


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
    gateway: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The run spec for ``agent start`` (read there by ``Spec.from_json``); ``profile`` as
    its node runs it (``Profile.for_rank``), ``group`` the rank's part in a launch group,
    ``gateway`` the gateway the server sits behind (``routing.spec_gateway``: keys included,
    as the server's environment is: the agent writes the spec 0600 and never shows it)."""
    spec = {
        "protocol": PROTOCOL,
        "deployment": profile.deployment,
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
    if gateway is not None:
        spec["gateway"] = dict(gateway)
    return spec


def start_stdin(spec: Mapping[str, Any], launch_script: str) -> bytes:
    """What ``start`` reads on its stdin: the spec (the server's environment, secrets included,
    written 0600 by the agent) and the launch script; never a file transfer of its own."""
    return json.dumps({"spec": dict(spec), "launch_script": launch_script}).encode()


def start_request(directory: str, spec: Mapping[str, Any], launch_script: str) -> Request:
    """Detach a supervisor for the run ``spec`` describes."""
    return Request(("start", "--dir", directory, "--spec", "-"), start_stdin(spec, launch_script))


def start_watch_args(
    directory: str, seconds: float, inspect: InspectRequest | None = None
) -> tuple[str, ...]:
    """``start --watch``: the start, then its startup streamed on the same channel (the spec
    follows on stdin, see ``start_stdin``)."""
    return (
        "start",
        "--dir",
        directory,
        "--spec",
        "-",
        "--watch",
        f"{max(seconds, 1.0):.0f}",
        *inspect_at_ready_args(inspect),
    )


def start_previous_request(directory: str) -> Request:
    """Start the launch before the current one again (the agent keeps its spec, 0600)."""
    return Request(("start", "--dir", directory, "--previous"))


def adopt_request(directory: str) -> Request:
    """A new supervisor for a server whose supervisor died (``agent adopt``)."""
    return Request(("adopt", "--dir", directory))


@dataclass(frozen=True)
class StartReply:
    """``start``: the supervisor holds its locks and has spawned the server, or why not."""

    ok: bool
    state: RunState | None  # when ok
    reason: str = ""  # when not
    holder: RunState | None = None  # the supervisor that holds the lock, when known


def decode_start(document: Any) -> StartReply:
    """``start`` and ``adopt``."""
    refused(document)
    reader = Reader(document, "agent start")
    if reader.flag("ok", False):
        return StartReply(ok=True, state=decode_state(reader.mapping("state"), agent_alive=True))
    holder = reader.document.get("holder")
    return StartReply(
        ok=False,
        state=None,
        reason=reader.text("reason", "the agent refused to start"),
        holder=decode_state(holder, agent_alive=True) if isinstance(holder, dict) else None,
    )
