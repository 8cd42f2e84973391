"""The plan cache on the deployment's host (here this machine, through the agent's transport, the
stand-in as SGLang): kept in the workdir's ``.orch/plan-cache/<deployment>``, a second ``plan``
and the ``up`` after it answer from it, ``--no-cache`` plans afresh."""

from __future__ import annotations

import stat

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace

pytestmark = pytest.mark.e2e


def test_plan_and_up_answer_from_the_cache_on_the_host(local_workspace: Workspace) -> None:
    name = local_workspace.profile("cached", "gpu:\n  type: H200\n")
    first = local_workspace.orch("plan", name, "--json")
    assert first.code == ExitCode.OK, first.err
    assert (first.json()["cache"]["hit"], first.json()["cache"]["stored"]) == (False, True)
    directory = local_workspace.workdir / ".orch" / "plan-cache" / name
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in directory.iterdir())

    second = local_workspace.orch("plan", name, "--json")
    assert second.code == ExitCode.OK, second.err
    assert second.json()["cache"]["hit"] is True
    assert second.json()["cache"]["key"] == first.json()["cache"]["key"]
    assert second.json()["fields"] == first.json()["fields"]

    afresh = local_workspace.orch("plan", name, "--no-cache", "--json")
    assert afresh.json()["cache"]["hit"] is False

    up = local_workspace.orch("up", name)
    try:
        assert up.code == ExitCode.OK, up.err
        assert "(from the plan cache; --no-cache plans afresh)" in up.out
    finally:
        assert local_workspace.orch("down", name).code == ExitCode.OK
