"""Every subcommand, run as a user runs it: the installed ``orch`` entry point in its own process,
against the stand-in on this machine (and a real sshd for ``hosts``). The list comes from the
parser itself, so a new subcommand without a run here fails this test."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from orchestrator.cli.arguments import parser
from orchestrator.errors import ExitCode
from tests.conftest import REPO
from tests.e2e.conftest import Workspace
from tests.ssh.sshd import SshServer

ORCH = Path(sys.executable).parent / "orch"


def _subcommands() -> list[str]:
    for action in parser()._actions:
        if isinstance(action, argparse._SubParsersAction):
            return sorted(action.choices)
    raise AssertionError("orch has no subcommands")


def _orch(space: Workspace, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ORCH), "--profiles", str(space.profiles), *argv],
        cwd=space.root,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def _ok(done: subprocess.CompletedProcess[str], *shown: str) -> None:
    assert done.returncode == ExitCode.OK, (done.args, done.stdout, done.stderr)
    for text in shown:
        assert text in done.stdout, (text, done.stdout)


def _up(space: Workspace, name: str) -> None:
    _ok(_orch(space, "up", name), "READY")


def run_render(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "render", name), "sglang.launch_server")


def run_validate(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "validate", name), f"ok  {name}")


def run_profiles(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "profiles"), name)


def run_up(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)


def run_down(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)
    _ok(_orch(space, "down", name), "EXITED")


def run_restart(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)
    _ok(_orch(space, "restart", name, "--no-plan"), "EXITED", "READY")


def run_status(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)
    _ok(_orch(space, "status", name), "READY")


def run_logs(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)
    _ok(_orch(space, "logs", name, "-n", "20"), "The server is fired up and ready to roll!")


def run_runs(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)
    _ok(_orch(space, "runs", name), "0001-", "READY")


def run_plan(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "plan", name), "orch's stand-in, NOT SGLang")


def run_lock(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "lock", name), "wrote")
    assert (space.profiles / f"{name}.lock.json").exists()


def run_diff_effective(space: Workspace, name: str, sshd: SshServer) -> None:
    _up(space, name)
    _ok(_orch(space, "diff-effective", name), "no drift")


def _git(space: Workspace, *argv: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", *argv],
        cwd=space.root,
        check=True,
        capture_output=True,
        timeout=60,
    )


def run_diff(space: Workspace, name: str, sshd: SshServer) -> None:
    """A change reviewed against the launch that runs: the agent says it runs the base's."""

    _git(space, "init", "-q")
    _git(space, "add", "profiles")
    _git(space, "commit", "-q", "-m", "what runs")
    _up(space, name)  # launched from the repository, which its record names
    _ok(_orch(space, "diff"), "No deployment changes")
    profile = space.profiles / f"{name}.yaml"
    launched = profile.read_text()
    profile.write_text(
        profile.read_text().replace(
            "skip_server_warmup: true", "context_length: 4096\n  skip_server_warmup: true"
        )
    )
    done = _orch(space, "diff", "--status")
    assert done.returncode == ExitCode.CHANGES, (done.stdout, done.stderr)
    assert f"== {name}: restart: SGLang reads context_length at start" in done.stdout
    assert "+ --context-length 4096" in done.stdout
    assert "runs now: READY" in done.stdout
    assert "runs the base's launch" in done.stdout
    _git(space, "commit", "-q", "-am", "shorter context")
    _ok(_orch(space, "diff", "--status"), "No deployment changes")
    done = _orch(space, "diff", "HEAD~1..HEAD", "--status", "--json")
    assert done.returncode == ExitCode.CHANGES, done.stderr
    assert '"runs": "base"' in done.stdout
    profile.write_text(launched)
    _ok(_orch(space, "down", name))  # the same repository's deployment: stopped, nothing left


def run_sync(space: Workspace, name: str, sshd: SshServer) -> None:
    """The deployment brought to the repository's HEAD: pending after a commit, synced, clean."""

    _git(space, "init", "-q")
    _git(space, "add", "profiles")
    _git(space, "commit", "-q", "-m", "what runs")
    _up(space, name)
    _ok(_orch(space, "sync", "--dry-run"), "clean")
    profile = space.profiles / f"{name}.yaml"
    profile.write_text(
        profile.read_text().replace(
            "skip_server_warmup: true", "context_length: 4096\n  skip_server_warmup: true"
        )
    )
    _git(space, "commit", "-q", "-am", "shorter context")
    done = _orch(space, "sync", "--dry-run", "--json")
    assert done.returncode == ExitCode.CHANGES, (done.stdout, done.stderr)
    assert '"state": "pending"' in done.stdout
    _ok(_orch(space, "sync", "--yes"), "done")
    _ok(_orch(space, "sync", "--dry-run"), "clean")
    _ok(_orch(space, "down", name))


def run_export(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "export", "k8s-lws", name), "kind: LeaderWorkerSet", "lmsysorg/sglang:v0.5.23")
    written = space.root / "deploy.yaml"
    _ok(_orch(space, "export", "k8s", name, "-o", str(written)), "wrote")
    assert "kind: Deployment" in written.read_text()
    targets = _orch(space, "export", "prometheus-sd", name)  # nothing runs: no target
    _ok(targets)
    assert targets.stdout == "[]\n"


def run_hosts(space: Workspace, name: str, sshd: SshServer) -> None:
    hosts = space.profiles / "hosts.yaml"
    hosts.write_text(
        hosts.read_text()
        + f"  lab:\n    address: 127.0.0.1\n    port: {sshd.port}\n    user: {sshd.user}\n"
        f"    identity_file: {sshd.client_key}\n    python: {sys.executable}\n"
        f"    workdir: {space.root / 'lab'}\n"
    )
    _ok(_orch(space, "hosts", "trust", "lab", "--yes"), "pinned in")
    assert "127.0.0.1" in (space.profiles / "known_hosts").read_text()


def run_import(space: Workspace, name: str, sshd: SshServer) -> None:
    incident = REPO / "tests" / "fixtures" / "launchscripts" / "incident-heredoc.sh"
    found = _orch(space, "import", "--check", str(incident))
    assert found.returncode == 1, (found.stdout, found.stderr)
    assert "--mamba-scheduler-strategy extra_buffer disappears" in found.stdout
    _ok(
        _orch(space, "import", str(incident), "--name", "imported", "--set", "MAMBA_ARGS="), "wrote"
    )
    assert (space.profiles / "imported.yaml").exists()


def run_upgrade(space: Workspace, name: str, sshd: SshServer) -> None:
    """No gpu.type here, so no plans: the spelling, the edit, --write (the plans of both
    releases run in tests/sglang_real/test_upgrade_real.py)."""
    done = _orch(space, "upgrade", name, "--to", "0.5.20", "--write")
    _ok(done, "SGLang 0.5.23 -> 0.5.20", "written:")
    assert 'sglang: "0.5.20"' in (space.profiles / f"{name}.yaml").read_text()
    _ok(_orch(space, "validate", name), f"ok  {name}")


def run_init(space: Workspace, name: str, sshd: SshServer) -> None:
    _ok(_orch(space, "init", str(space.root / "team")), "wrote")


RUNS: dict[str, Callable[[Workspace, str, SshServer], None]] = {
    "render": run_render,
    "validate": run_validate,
    "profiles": run_profiles,
    "up": run_up,
    "down": run_down,
    "restart": run_restart,
    "status": run_status,
    "logs": run_logs,
    "runs": run_runs,
    "plan": run_plan,
    "lock": run_lock,
    "diff-effective": run_diff_effective,
    "diff": run_diff,
    "sync": run_sync,
    "hosts": run_hosts,
    "init": run_init,
    "export": run_export,
    "import": run_import,
    "upgrade": run_upgrade,
}


@pytest.mark.parametrize("command", _subcommands())
def test_every_subcommand_runs_through_the_real_entry_point(
    command: str, local_workspace: Workspace, sshd: SshServer
) -> None:
    assert command in RUNS, f"orch {command} has no run in {__file__}: add one"
    RUNS[command](local_workspace, local_workspace.profile("every"), sshd)
