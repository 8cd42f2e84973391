"""``orch restart NAME --rolling``: ``rolling.roll`` over the real replicas — their agents and
the profile's gateway (``routing``). One replica at a time (the canary), then
``--max-unavailable`` at a time; each out of the gateway, idle (bounded), stopped, relaunched
with the profile as it is now (READY and its effective check), registered, soaked."""

from __future__ import annotations

from collections.abc import Callable

from orchestrator.commands import ownership, routing
from orchestrator.commands.context import Context, Launch, UpOptions
from orchestrator.commands.events import Outcome
from orchestrator.commands.rolling import ReplicaOps, RollOptions, RollResult, Step, roll
from orchestrator.commands.up import up_server
from orchestrator.errors import GatewayError, ProfileError
from orchestrator.fleet.gateway import GatewayClient, normal_url
from orchestrator.model import Profile

SOAK_POLL_S = 0.5


class GatewayReplicas(ReplicaOps):
    """A profile's replicas behind its gateway, as ``rolling.roll`` drives them."""

    def __init__(self, ctx: Context, launch: Launch, gateway: GatewayClient) -> None:
        self.ctx = ctx
        self.launches = {
            (one.profile.replica if one.profile.replica is not None else i): one
            for i, one in enumerate(launch.replicas)
        }
        self.gateway = gateway
        self.starts: dict[int, int] = {}  # each replica's starts when it was launched

    def profile(self, i: int) -> Profile:
        return self.launches[i].profile

    def ready_at_gateway(self) -> frozenset[int]:
        by_url = {normal_url(routing.worker_url(self.profile(i))): i for i in self.launches}
        return frozenset(
            by_url[normal_url(worker.url)]
            for worker in self.gateway.workers()
            if worker.ready and worker.healthy is not False and normal_url(worker.url) in by_url
        )

    def deregister(self, i: int, timeout: float) -> bool:
        try:
            routing.deregister(self.ctx, self.profile(i))
        except GatewayError:
            return False
        return True

    def wait_idle(self, i: int, timeout: float) -> tuple[bool, str]:
        routed = routing.wait_idle(self.ctx, self.launches[i], timeout)
        return routed.what != "drain-cut", routed.detail

    def stop(self, i: int) -> None:
        profile = self.profile(i)
        agent = self.ctx.agent(profile)
        state = agent.status()
        if state.deployed and (state.alive or state.stale):
            agent.stop(profile.stop_timeout_s)

    def launch(self, i: int) -> str | None:
        outcome = None
        for event in up_server(self.ctx, self.launches[i], UpOptions()):
            if isinstance(event, Outcome):
                outcome = event
        if outcome is None:
            return "up ended without an outcome"
        if not outcome.ok:
            return outcome.summary
        self.starts[i] = outcome.state.starts
        return None

    def restore(self, i: int) -> str | None:
        profile = self.profile(i)
        agent = self.ctx.agent(profile)
        reply = agent.start_previous()
        if not reply.ok:
            return reply.reason or "the agent did not start the previous launch"
        deadline = self.ctx.clock() + profile.health.startup_timeout_s
        while self.ctx.clock() < deadline:
            state = agent.status()
            if state.ready:
                return None
            if state.state in ("EXITED", "FATAL", "BACKOFF"):
                return f"the previous launch did not come back: {state.state} {state.message}"
            self.ctx.sleep(0.25)
        return "the previous launch was not READY in health.startup_timeout_s"

    def register(self, i: int, timeout: float) -> bool:
        try:
            routing.register(self.ctx, self.launches[i])
        except GatewayError:
            return False
        return True

    def soak(self, i: int, seconds: float) -> str | None:
        profile = self.profile(i)
        agent = self.ctx.agent(profile)
        url = normal_url(routing.worker_url(profile))
        deadline = self.ctx.clock() + seconds
        while True:
            state = agent.status()
            if not state.ready:
                return f"{state.state}: {state.message}".rstrip(": ")
            if state.starts != self.starts.get(i, state.starts):
                return f"restarted {state.starts - self.starts.get(i, 0)} time(s)"
            worker = self.gateway.worker(url)
            if worker is None or not worker.ready or worker.healthy is False:
                said = "not listed" if worker is None else worker.status
                return f"the gateway no longer routes to it ({said})"
            if worker.circuit == "open":
                return "the gateway opened its circuit breaker"
            if self.ctx.clock() >= deadline:
                return None
            self.ctx.sleep(SOAK_POLL_S)


def rolling_restart(
    ctx: Context,
    launch: Launch,
    options: RollOptions,
    *,
    take_over: bool = False,
    say: Callable[[Step], None] = lambda step: None,
) -> RollResult:
    """Check that the profile can roll (replicas behind a gateway, every replica ours), then
    roll them in order."""
    profile = launch.profile
    if not launch.replicas:
        raise ProfileError(
            f"{profile.name} has no replicas: a rolling restart moves N servers behind a gateway",
            "orch restart NAME restarts one server; add replicas: and router: to roll",
        )
    gateway = routing.gateway_for(ctx, profile)
    if gateway is None:
        raise ProfileError(
            f"{profile.name} has no router: without a gateway to take each replica out of, a "
            "restart drops its requests",
            "add router: {url: http://HOST:PORT} (the smg gateway in front of the replicas)",
        )
    for one in launch.replicas:
        state = ctx.agent(one.profile).status()
        if state.deployed:
            ownership.check(one.profile, state, ctx.origin(), "restart", take_over=take_over)
    ops = GatewayReplicas(ctx, launch, gateway)
    return roll(ops, sorted(ops.launches), options, say=say)
