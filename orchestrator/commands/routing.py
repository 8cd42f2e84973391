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

from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.commands.context import Context, Launch, ProfilesOrigin
from orchestrator.errors import RenderError
from orchestrator.fleet.gateway import GatewayClient
from orchestrator.model import Profile, RunState

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


def deregister(ctx: Context, profile: Profile) -> Routed | None:
    """Take the server out of its gateway and wait until the gateway no longer lists it."""
    gateway = gateway_for(ctx, profile)
    if gateway is None or profile.router is None:
        return None
    url = worker_url(profile)
    if not gateway.deregister(url):
        return Routed(profile.deployment, gateway.url, url, "not registered")
    gateway.wait_gone(url, profile.router.ready_timeout_s)
    return Routed(profile.deployment, gateway.url, url, "deregistered")


def wait_idle(
    ctx: Context,
    profile: Profile,
    timeout_s: float,
    *,
    status: Callable[[], RunState] | None = None,
) -> Routed:
    """Wait until the server has no request running or waiting (its agent reads
    ``/v1/loads``), at most ``timeout_s``: SGLang's own drain would wait without a bound."""
    ask = status or ctx.agent(profile).status
    deadline = ctx.clock() + timeout_s
    url = worker_url(profile)
    gateway = profile.router.url if profile.router else "-"
    while True:
        state = ask()
        busy = _busy(state)
        if busy == 0 or not state.server_alive:
            return Routed(profile.deployment, gateway, url, "drained")
        if ctx.clock() >= deadline:
            return Routed(
                profile.deployment,
                gateway,
                url,
                "drain-cut",
                f"{busy} request(s) still in flight after {timeout_s:g} s",
            )
        ctx.sleep(0.25)


def _busy(state: RunState) -> int:
    """Requests running or waiting on the server (0 when it does not say)."""
    return sum(
        (load.running_requests or 0) + (load.waiting_requests or 0) for load in state.memory_loads
    )


def _server_key(launch: Launch) -> str | None:
    """The server's own ``--api-key``, which the gateway must send it (smg: per worker)."""
    argv = launch.primary.argv
    for index, token in enumerate(argv[:-1]):
        if token == "--api-key":  # noqa: S105 - the flag, not a secret
            return argv[index + 1]
    return None
