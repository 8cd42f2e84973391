"""A server behind its profile's gateway (``router:``): registered once it is READY and its
effective configuration checked, taken out of the gateway BEFORE it is stopped.

Why this order (ROUND3 facts §2, measured on this machine with the real ``smg``): SGLang's own
SIGTERM drains but does not refuse new requests, so a gateway still routing to a stopping server
sends it requests that fail; and a worker relaunched at the same URL stays shut out by its open
circuit breaker while the next one goes down. Out first, idle (bounded: SGLang's drain has no
time limit), then the stop; back in only once READY and checked.

The gateway is asked from orch's machine over HTTP (``fleet/gateway.py``); whether a server is
idle is asked of its agent (``/v1/loads`` on the host), so that a server on a host behind SSH is
drained as one on this machine is.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.commands.context import Context, Launch, ProfilesOrigin
from orchestrator.errors import GatewayError, RenderError
from orchestrator.fleet import drain, http_json
from orchestrator.fleet.gateway import GatewayClient
from orchestrator.model import Profile

LABEL_PREFIX = "orch."


@dataclass(frozen=True)
class Routed:
    """What happened at the gateway for one server (``up`` and ``down`` say it)."""

    deployment: str
    gateway: str
    worker_url: str
    what: str  # registered, already registered, deregistered, not registered, drained, drain-cut
    detail: str = ""


def worker_url(profile: Profile) -> str:
    """Where the gateway reaches the server: its host's address (this machine: loopback) and
    its port. The gateway resolves that name itself: an ``~/.ssh/config`` alias is not one."""
    address = profile.host.address or "127.0.0.1"
    if ":" in address and not address.startswith("["):
        address = f"[{address}]"
    return f"http://{address}:{profile.port}"


def worker_labels(profile: Profile, origin: ProfilesOrigin) -> dict[str, str]:
    """orch's labels (profile, deployment, replica, commit) and the router's own."""
    router = profile.router
    labels = {
        f"{LABEL_PREFIX}profile": profile.name,
        f"{LABEL_PREFIX}deployment": profile.deployment,
        f"{LABEL_PREFIX}commit": (origin.commit or "none")[:12]
        + ("+dirty" if origin.dirty else ""),
    }
    if profile.replica is not None:
        labels[f"{LABEL_PREFIX}replica"] = str(profile.replica)
    if router is not None:
        labels.update(router.labels)
    return labels


def gateway_for(ctx: Context, profile: Profile) -> GatewayClient | None:
    """The client of the profile's gateway, its key read from the environment (and joined to
    the output's redactor); None for a profile without ``router:``."""
    router = profile.router
    if router is None:
        return None
    key = None
    if router.api_key is not None:
        name = router.api_key.env_var
        key = ctx.environ.get(name)
        if not key:
            raise RenderError(
                f"{profile.name}: router.api_key reads ${name}, which is not set here",
                f"export {name} (the gateway's control-plane key) and run again",
            )
        ctx.redactor.add({name: key})
    return GatewayClient(router.url, api_key=key, clock=ctx.clock, sleep=ctx.sleep)


def spec_gateway(ctx: Context, launch: Launch) -> dict[str, Any] | None:
    """The run spec's ``gateway`` (remote/agent/gateway.py ``GatewaySpec``): what the agent
    needs to take its server out of the gateway after a failure and register a restarted run
    again without orch. The keys' values are in it (the spec is written 0600, never shown); the
    control plane's is read from the environment as ``gateway_for`` reads it. None for a
    profile without ``router:`` (its spec stays as it was)."""
    profile = launch.profile
    router = profile.router
    if router is None:
        return None
    gateway = gateway_for(ctx, profile)
    if gateway is None:
        return None
    section: dict[str, Any] = {
        "url": gateway.url,
        "worker_url": worker_url(profile),
        "labels": worker_labels(profile, ctx.origin()),
        "ready_timeout_s": router.ready_timeout_s,
    }
    if router.api_key is not None:
        section["api_key"] = ctx.environ[router.api_key.env_var]
    server_key = _server_key(launch)
    if server_key is not None:
        section["worker_api_key"] = server_key
    return section


def register(ctx: Context, launch: Launch) -> Routed | None:
    """Add the READY server to its gateway and wait until the gateway says it is ready; an
    already listed server is left as it is. None for a profile without ``router:``."""
    profile = launch.profile
    gateway = gateway_for(ctx, profile)
    if gateway is None or profile.router is None:
        return None
    url = worker_url(profile)
    listed = gateway.worker(url)
    if listed is not None and listed.ready:
        return Routed(profile.deployment, gateway.url, url, "already registered")
    if listed is None:
        gateway.register(url, worker_labels(profile, ctx.origin()), api_key=_server_key(launch))
    gateway.wait_ready(url, profile.router.ready_timeout_s)
    return Routed(profile.deployment, gateway.url, url, "registered")


def deregister(ctx: Context, profile: Profile, *, stopping: bool = False) -> Routed | None:
    """Take the server out of its gateway and wait until the gateway no longer lists it.
    ``stopping`` (``orch down``): a gateway that does not answer is said, not raised: the stop
    the user asked for goes on (a rolling restart, which can wait, stops instead)."""
    gateway = gateway_for(ctx, profile)
    if gateway is None or profile.router is None:
        return None
    url = worker_url(profile)
    try:
        if not gateway.deregister(url):
            return Routed(profile.deployment, gateway.url, url, "not registered")
        gateway.wait_gone(url, profile.router.ready_timeout_s)
    except GatewayError as exc:
        if not stopping:
            raise
        return Routed(
            profile.deployment,
            gateway.url,
            url,
            "NOT deregistered",
            f"{exc.message}; stopping it all the same (requests routed to it fail)",
        )
    return Routed(profile.deployment, gateway.url, url, "deregistered")


def wait_idle(ctx: Context, launch: Launch, timeout_s: float) -> Routed:
    """Wait until the server has no request running or waiting (its ``/v1/loads``, read at the
    URL the gateway uses), at most ``timeout_s``: SGLang's own drain would wait without a
    bound. A server whose load cannot be read from here is not waited for: its own SIGTERM
    drain takes what is in flight, within its stop_timeout_s."""
    profile = launch.profile
    url = worker_url(profile)
    gateway = profile.router.url if profile.router else "-"
    key = _server_key(launch)
    try:
        drain.read_load(url, api_key=key)
    except (http_json.Unreachable, ValueError) as exc:
        why = exc.reason if isinstance(exc, http_json.Unreachable) else str(exc)
        return Routed(
            profile.deployment,
            gateway,
            url,
            "drain-unknown",
            f"its load cannot be read from here ({why}): SGLang's own drain takes the rest",
        )
    waited = drain.wait_idle(url, timeout_s, api_key=key, clock=ctx.clock, sleep=ctx.sleep)
    if waited.idle:
        return Routed(profile.deployment, gateway, url, "drained", f"{waited.waited_s:.1f} s")
    busy = (waited.running or 0) + (waited.waiting or 0)
    return Routed(
        profile.deployment,
        gateway,
        url,
        "drain-cut",
        f"{busy} request(s) still in flight after {timeout_s:g} s",
    )


def _server_key(launch: Launch) -> str | None:
    """The server's own ``--api-key``, which the gateway must send it (smg: per worker)."""
    argv = launch.primary.argv
    for index, token in enumerate(argv[:-1]):
        if token == "--api-key":  # noqa: S105 - the flag, not a secret
            return argv[index + 1]
    return None
