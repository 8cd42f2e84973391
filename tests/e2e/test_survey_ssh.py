"""``agent survey`` over a real OpenSSH sshd on 127.0.0.1 (the host ``box`` is this machine):
two deployments brought up by ``orch up`` (the SGLang stand-in, NOT SGLang), then surveyed in
one command that writes nothing on the host, the agent's bundle included."""

from __future__ import annotations

import os
from pathlib import Path

from orchestrator.commands.context import Context
from orchestrator.errors import ExitCode
from orchestrator.profile.store import ProfileStore
from tests.e2e.conftest import Workspace


def _tree(root: Path) -> dict[str, tuple[int, int, int] | None]:
    """Every path under ``root`` with its size, mode and modification time; a server's log only
    by its presence (the running stand-ins log every /health)."""
    seen: dict[str, tuple[int, int, int] | None] = {}
    for directory, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(directory) / name
            info = path.lstat()
            key = str(path.relative_to(root))
            seen[key] = (
                None if name == "server.log" else (info.st_size, info.st_mode, info.st_mtime_ns)
            )
    return seen


def test_a_survey_over_ssh_reports_both_deployments_and_writes_nothing(
    ssh_workspace: Workspace,
) -> None:
    names = [ssh_workspace.profile("first"), ssh_workspace.profile("second", version="0.5.11")]
    for name in names:
        up = ssh_workspace.orch("up", name)
        assert up.code == ExitCode.OK, up.err
    orch_dir = ssh_workspace.workdir / ".orch"
    pushed = sorted(orch_dir.glob("agent-*"))
    assert pushed  # up pushed the agent (and its compiled-code cache)
    for path in pushed:  # a host that lacks this orch's agent: the survey must carry it
        path.unlink()
    before = _tree(ssh_workspace.workdir)
    ctx = Context(
        store=ProfileStore(ssh_workspace.profiles), environ=dict(os.environ), local_python="python3"
    )
    try:
        host = ctx.launch(names[0], require_secrets=False).profile.host
        survey = ctx.survey(host)
        assert ctx.survey(host) is survey  # once per command
    finally:
        ctx.close()

    assert _tree(ssh_workspace.workdir) == before
    assert not list(orch_dir.glob("agent-*"))
    assert survey.host == "box"
    assert survey.workdir == str(ssh_workspace.workdir)
    assert sorted(survey.deployments) == ["first", "second"]
    assert survey.unreadable == {}
    for name in names:
        state = survey.deployments[name]
        assert state.state == "READY"
        assert state.server_alive
        assert state.agent_alive
        assert state.launch_digest
    assert survey.deployments["first"].launch_digest != survey.deployments["second"].launch_digest
