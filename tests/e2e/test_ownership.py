"""Two profiles repositories with a profile of the same name, one host: each deployment knows
where it came from, and orch refuses to touch another repository's without --take-over."""

from __future__ import annotations

import shutil

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace


def _other_repository(space: Workspace) -> Workspace:
    """Another team's checkout: its own profiles directory, the same host and workdir."""
    other = Workspace(space.root / "other-team", space.host_name, space.workdir)
    other.profiles.mkdir(parents=True)
    shutil.copy(space.profiles / "hosts.yaml", other.profiles / "hosts.yaml")
    return other


def test_a_deployment_from_another_repository_is_not_ours(local_workspace: Workspace) -> None:
    mine = local_workspace.profile("svc")
    assert local_workspace.orch("up", mine).code == ExitCode.OK
    other = _other_repository(local_workspace)
    theirs = other.profile("svc", served_model_name="someone-else")

    status = local_workspace.orch("status", mine, "--json")
    (row,) = status.json()
    assert row["profiles_dir"] == str(local_workspace.profiles.resolve())
    assert row["profiles_repo"] == f"dir:{local_workspace.profiles.resolve()}"

    refused = other.orch("up", theirs)
    assert refused.code == ExitCode.CONFLICT
    assert "launched from another profiles repository" in refused.err
    assert "--take-over" in refused.err
    for verb in (("down", theirs), ("restart", theirs)):
        stopped = other.orch(*verb)
        assert stopped.code == ExitCode.CONFLICT, (verb, stopped.err)
        assert "refusing to stop it" in stopped.err
    (row,) = local_workspace.orch("status", mine, "--json").json()
    assert row["state"] == "READY"  # untouched

    try:
        taken = other.orch("up", theirs, "--take-over", "--replace")
        assert taken.code == ExitCode.OK, taken.err
        (row,) = other.orch("status", theirs, "--json").json()
        assert row["profiles_dir"] == str(other.profiles.resolve())
    finally:
        other.orch("down", theirs)


def test_a_stopped_deployment_of_another_repository_is_no_ones(
    local_workspace: Workspace,
) -> None:
    # another checkout's `make demo`, stopped: this checkout's (or an installed orch's) demo
    # starts in its place; the other's runs stay in the deployment's history
    mine = local_workspace.profile("svc")
    assert local_workspace.orch("up", mine).code == ExitCode.OK
    assert local_workspace.orch("down", mine).code == ExitCode.OK
    other = _other_repository(local_workspace)
    theirs = other.profile("svc", served_model_name="someone-else")
    try:
        up = other.orch("up", theirs)
        assert up.code == ExitCode.OK, up.err
        assert "was last launched from another profiles repository" in up.out + up.err
        assert "nothing of it runs (EXITED)" in up.out + up.err
        (row,) = other.orch("status", theirs, "--json").json()
        assert row["profiles_dir"] == str(other.profiles.resolve())
        runs = other.orch("runs", theirs, "--json")
        assert runs.code == ExitCode.OK, runs.err
        assert len(runs.json()["runs"]) == 2  # the other repository's run is kept
    finally:
        other.orch("down", theirs)
