"""The agent keeps the launch before the current one (``spec.previous.json``, 0600) and starts
it again on ``start --previous``: a rolling restart's way back after a failed relaunch. Real
agent, stand-in server, this machine."""

from __future__ import annotations

import os
import stat
import sys
import time

from orchestrator.commands.context import Context
from orchestrator.errors import ExitCode
from orchestrator.profile.store import ProfileStore
from tests.e2e.conftest import Workspace, free_port


def test_the_previous_launch_starts_again_and_the_two_change_places(
    local_workspace: Workspace,
) -> None:
    space = local_workspace
    port = free_port()
    name = space.profile("prev", port=port, args={"context_length": 4096})
    assert space.orch("up", name).code == ExitCode.OK
    first = (space.deployment_dir(name) / "spec.json").read_text()
    assert not (space.deployment_dir(name) / "spec.previous.json").exists()
    space.profile("prev", port=port, args={"context_length": 8192})
    assert space.orch("up", name, "--replace").code == ExitCode.OK
    second = (space.deployment_dir(name) / "spec.json").read_text()
    previous = space.deployment_dir(name) / "spec.previous.json"
    assert previous.read_text() == first
    assert stat.S_IMODE(previous.stat().st_mode) == 0o600  # it holds the server's environment
    assert space.orch("down", name).code == ExitCode.OK

    ctx = Context(
        store=ProfileStore(space.profiles), environ=os.environ, local_python=sys.executable
    )
    try:
        agent = ctx.agent(ctx.store.load(name).profile)
        reply = agent.start_previous()
        assert reply.ok, reply.reason
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            state = agent.status()
            if state.ready:
                break
            time.sleep(0.2)
        assert state.ready, state
        assert "--context-length 4096" in " ".join(state_argv(space, name))
    finally:
        ctx.close()
    assert (space.deployment_dir(name) / "spec.json").read_text() == first
    assert previous.read_text() == second  # the launch it replaced is the previous one in turn
    # the profile still says 8192: orch down stops what runs all the same (the same repository)
    assert space.orch("down", name).code == ExitCode.OK


def state_argv(space: Workspace, name: str) -> list[str]:
    import json

    spec = json.loads((space.deployment_dir(name) / "spec.json").read_text())
    return [str(word) for word in spec["argv"]]
