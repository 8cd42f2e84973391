"""The commands under test, with a fake agent (fake_agent.py) behind ``Context.agent``: the
recorded profiles (tests/fixtures/agent-protocol/profiles/) in a profiles directory, on the
inventory's host gpu-1, and a clock that moves only when a command sleeps."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from orchestrator.commands.context import Context, Launch, ProfilesOrigin
from tests.conftest import ProfileDir
from tests.unit.commands.fake_agent import RECORDED_PROFILES, FakeDeployment, FakeFleet

HOST = "gpu-1"
# Where this test's profiles come from, and another team's repository with profiles of the same
# names (commands/ownership.py tells them apart).
OURS = ProfilesOrigin(
    "git:git@example.net:team/profiles.git", "/home/ops/profiles", "c0ffee0", False
)
THEIRS = ProfilesOrigin("git:git@example.net:lab/serving.git", "/home/ada/serving", "beef", True)
OTHER_DIGEST = "0123456789ab"  # another launch of the same profile (its launch digest)


class StoppedClock:
    """Time that passes only when a command sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@dataclass
class Commands:
    """A command's context over the fake fleet, and what a test arranges on it."""

    ctx: Context
    fleet: FakeFleet
    profiles: ProfileDir

    def launch(self, name: str, *, require_secrets: bool = True) -> Launch:
        return self.ctx.launch(name, require_secrets=require_secrets)

    def deployment(self, name: str, host: str = HOST) -> FakeDeployment:
        return self.fleet.deployment(host, name)

    def deploy(
        self,
        name: str,
        situation: str,
        *,
        origin: ProfilesOrigin = OURS,
        digest: str | None = None,
        host: str = HOST,
    ) -> FakeDeployment:
        """``name``'s deployment in ``situation``, holding this launch of it as orch would have
        started it from ``origin`` (``digest``: another launch of it)."""
        meta: dict[str, Any] = self.launch(name, require_secrets=False).meta(origin)
        if digest is not None:
            meta["launch_digest"] = digest
        return self.fleet.deploy(host, name, situation, meta)


@pytest.fixture
def commands(profile_dir: ProfileDir) -> Commands:
    for recorded in RECORDED_PROFILES.glob("*.yaml"):
        profile_dir.write(recorded.name, recorded.read_text())
    clock = StoppedClock()
    fleet = FakeFleet(clock.sleep, clock.monotonic)
    ctx = Context(
        store=profile_dir.store(),
        environ={},
        local_python="/usr/bin/python3",
        clock=clock.monotonic,
        sleep=clock.sleep,
        agent_factory=fleet.agent,
        host_agent_factory=fleet.host_agent,
        known_origin=OURS,
    )
    return Commands(ctx, fleet, profile_dir)
