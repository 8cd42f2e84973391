"""What the server received, even after it died, with real SGLang 0.5.11 (CPU venv): a site
wrapper on the host drops ``--mamba-scheduler-strategy extra_buffer`` before exec'ing SGLang,
which dies before logging its configuration (on a CPU machine SGLang dies in resolution: the
incident's moment). The verdict is a config error, and diff-effective reads the received layer
from the snapshot the agent took at exec (tests/e2e/test_faults_local.py: the same with the
stand-in)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.errors import ExitCode
from tests.e2e.conftest import MODEL, Workspace, local_workspace
from tests.e2e.test_faults_local import INCIDENT_SPEC, assert_not_received, wrapped_host

__all__ = ["local_workspace"]  # the e2e tier's fixture


def test_a_wrapper_drops_the_flag_sglang_0511_dies_and_diff_says_not_received(
    local_workspace: Workspace, sglang_0511: Path
) -> None:
    host = wrapped_host(local_workspace, str(sglang_0511))
    name = local_workspace.profile(
        "dropped-real",
        INCIDENT_SPEC,
        version="0.5.11",
        host=host,
        restart={"mode": "no"},
        env={"PYTHONPATH": "", "ORCH_STANDIN_VERSION": ""},  # real SGLang, not the stand-in
        args={"mamba_scheduler_strategy": "extra_buffer"},
    )
    up = local_workspace.orch("up", name, "--no-plan")  # SGLang's plan dies on CPU too
    assert up.code == ExitCode.CONFIG_ERROR, up.err
    assert "config-error" in up.err
    assert MODEL.exists()
    assert_not_received(local_workspace, name)
