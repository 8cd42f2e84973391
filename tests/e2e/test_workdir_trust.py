"""orch runs only the bundles it pushed, from a directory only the SSH user can write: a planted
agent is replaced or refused, never executed (OpenSSH's StrictModes, a content hash)."""

from __future__ import annotations

import hashlib
import marshal
from pathlib import Path

from orchestrator.errors import ExitCode
from orchestrator.fleet.client import agent_bundle
from tests.e2e.conftest import Workspace


def _plant(workspace: Workspace, marker: Path) -> Path:
    agent = workspace.workdir / ".orch" / agent_bundle().file_name
    agent.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    agent.write_text(f"open({str(marker)!r}, 'w').write('ran')\nprint('{{}}')\n")
    return agent


def test_a_planted_agent_in_a_private_workdir_is_replaced_not_run(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "planted-agent-ran"
    agent = _plant(local_workspace, marker)
    name = local_workspace.profile("svc")
    status = local_workspace.orch("status", name)
    assert status.code == ExitCode.OK, status.err
    assert not marker.exists()
    assert agent.read_bytes() == agent_bundle().data  # orch's own agent now stands there


def test_a_workdir_others_can_write_is_refused(local_workspace: Workspace, tmp_path: Path) -> None:
    marker = tmp_path / "planted-agent-ran"
    agent = _plant(local_workspace, marker)
    agent.parent.chmod(0o777)  # the attack: a shared, world-writable workdir
    name = local_workspace.profile("svc")
    status = local_workspace.orch("status", name, "--json")
    assert status.code == ExitCode.PREFLIGHT
    assert not marker.exists()
    assert "refusing to run orch's files" in status.out + status.err
    assert "writable by others" in status.out + status.err


def test_a_symlink_planted_as_the_agent_is_refused(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    marker = tmp_path / "planted-agent-ran"
    elsewhere = tmp_path / "evil.py"
    elsewhere.write_text(f"open({str(marker)!r}, 'w').write('ran')\n")
    agent = local_workspace.workdir / ".orch" / agent_bundle().file_name
    agent.parent.mkdir(parents=True, mode=0o700)
    agent.symlink_to(elsewhere)
    name = local_workspace.profile("svc")
    status = local_workspace.orch("status", name)
    assert status.code == ExitCode.PREFLIGHT
    assert not marker.exists()


def _cache(workspace: Workspace) -> Path:
    (cache,) = (workspace.workdir / ".orch").glob(f"{agent_bundle().file_name}.*.code")
    return cache


def test_the_compiled_agent_is_kept_0600_and_a_planted_one_is_never_run(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    """The bootstrap keeps the agent's compiled code beside it (compiling costs ~60 ms of every
    command); a cache that does not name the checked file's sha256 and its own, or that others
    could have written, is compiled again, never run."""
    name = local_workspace.profile("svc")
    assert local_workspace.orch("status", name).code == ExitCode.OK
    cache = _cache(local_workspace)
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    kept = cache.read_bytes()
    assert kept[:64].decode() == hashlib.sha256(agent_bundle().data).hexdigest()

    marker = tmp_path / "planted-code-ran"
    planted = marshal.dumps(compile(f"open({str(marker)!r}, 'w').write('ran')\n", "x", "exec"))
    cache.write_bytes(kept[:128] + planted)  # a body its header does not name
    assert local_workspace.orch("status", name).code == ExitCode.OK
    assert not marker.exists()
    assert cache.read_bytes() == kept  # compiled again and kept again

    header = kept[:64] + hashlib.sha256(planted).hexdigest().encode()
    cache.write_bytes(header + planted)  # consistent, but others could have written it
    cache.chmod(0o666)
    assert local_workspace.orch("status", name).code == ExitCode.OK
    assert not marker.exists()


def test_up_refuses_an_unsafe_file_in_the_deployment_with_preflight_naming_it(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    """issue 26: a planted symlink (or another user's file) in the deployment directory made
    ``up`` fail with a vague "agent probe answered without the deployment's status" (exit 10).
    It is a preflight refusal (9) naming the file, what is wrong and what to do."""
    name = local_workspace.profile("svc")
    deployment = local_workspace.deployment_dir(name)
    deployment.mkdir(parents=True, mode=0o700)
    (local_workspace.workdir / ".orch").mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("{}")
    (deployment / "state.json").symlink_to(victim)
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.PREFLIGHT, up.err
    assert f"state.json {deployment / 'state.json'} is a symlink: refusing to follow it" in up.err
    assert f"orch: hint: remove it (rm {deployment / 'state.json'})" in up.err
    assert victim.read_text() == "{}"


def test_up_through_a_workdir_linked_to_a_private_directory_of_ones_own(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    """issue 26: ``workdir: /data`` with /data a symlink to a mount (common) was refused."""
    target = tmp_path / "mnt" / "orch"
    target.mkdir(parents=True, mode=0o700)
    local_workspace.workdir.symlink_to(target)
    name = local_workspace.profile("svc")
    up = local_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    assert (target / name / "state.json").exists()
    assert local_workspace.orch("down", name).code == ExitCode.OK
