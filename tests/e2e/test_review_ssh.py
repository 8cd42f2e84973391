"""``orch diff --remote``: both sides of a change planned by the host's SGLang through orch's
probe over a real sshd (the stand-in on the host, standin/sglang, NOT SGLang, which answers the
probe with its imitation of SGLang's resolution and says so)."""

from __future__ import annotations

import json
import subprocess

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace, free_port
from tests.e2e.test_diff_effective import incident_profile


def _git(space: Workspace, *argv: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", *argv],
        cwd=space.root,
        check=True,
        capture_output=True,
        timeout=60,
    )


def test_the_hosts_resolution_decides_what_a_change_does(ssh_workspace: Workspace) -> None:
    port = free_port()
    name = incident_profile(ssh_workspace, "drafted", draft=4, port=port)
    _git(ssh_workspace, "init", "-q")
    _git(ssh_workspace, "add", "profiles")
    _git(ssh_workspace, "commit", "-q", "-m", "drafted")
    incident_profile(ssh_workspace, "drafted", draft=8, port=port)  # only the draft changes
    profile = ssh_workspace.profiles / f"{name}.yaml"
    text = profile.read_text()
    # by the argument tables, 4 -> 8 draft tokens is a restart ...
    by_tables = ssh_workspace.orch("diff", "--json")
    assert by_tables.code == ExitCode.CHANGES, by_tables.err
    [item] = json.loads(by_tables.out)["deployments"]
    assert (item["action"], item["forced_by"]) == ("restart", ["speculative_num_draft_tokens"])
    # ... but the host's SGLang (the stand-in) adjusts the draft tokens to steps + 1 on both
    # sides: the effective configuration does not change
    remote = ssh_workspace.orch("diff", "--remote", "--json")
    assert remote.code == ExitCode.CHANGES, remote.err  # the launch itself differs
    [item] = json.loads(remote.out)["deployments"]
    assert item["action"] == "none", item
    assert item["changes"] == []
    assert any("planned by host box" in note for note in item["notes"])
    assert profile.read_text() == text
    shown = ssh_workspace.orch("diff", "--remote")
    assert "+ --speculative-num-draft-tokens 8" in shown.out
    assert "the effective configuration did not" in shown.out
