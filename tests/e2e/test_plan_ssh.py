"""orch plan / lock and the plan gate of orch up, over a real sshd, with the SGLang stand-in on the
host (standin/sglang, NOT SGLang: it answers the planning probe with its own imitation of
SGLang's resolution, and says so). The real-SGLang planning tier is tests/sglang_real."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator

import psutil
import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace
from tests.e2e.test_diff_effective import incident_profile, rows_by_field


def test_plan_on_the_host_predicts_the_override_with_provenance(ssh_workspace: Workspace) -> None:
    name = incident_profile(ssh_workspace, "draft8", draft=8)
    outcome = ssh_workspace.orch("plan", name, "--json")
    assert outcome.code == ExitCode.OK, outcome.err
    report = outcome.json()
    assert (report["where"], report["standin"], report["ok"]) == ("host box", True, True)
    row = rows_by_field(report)["speculative_num_draft_tokens"]
    assert (row["profile"], row["predicted"], row["changed"]) == (8, 4, True)
    assert row["provenance"][0]["source"] == "standin:eagle_family"
    assert row["why"].startswith("speculative_num_draft_tokens is adjusted")
    text = ssh_workspace.orch("plan", name)
    assert "orch's stand-in, NOT SGLang" in text.out
    assert "1 field the profile sets would change" in text.out
    assert not (ssh_workspace.deployment_dir(name) / "runs").exists()  # planning starts nothing
    # the request (the server's environment) went on stdin, through a pipe to the probe started
    # again under that environment: no file was written for it
    assert list((ssh_workspace.workdir / ".orch").glob(".plan-*")) == []


def _waiting_starts(space: Workspace) -> list[psutil.Process]:
    """This test's start commands still waiting for their spec (the bootstrap's
    --stdin-first), told apart from any other orch on the machine (a `make demo` left running)
    by the workspace's deployment directory in their command line."""
    found = []
    for process in psutil.process_iter(["cmdline"]):
        cmdline = process.info["cmdline"] or []
        if "--stdin-first" not in cmdline or not any(str(space.workdir) in a for a in cmdline):
            continue
        with contextlib.suppress(psutil.Error):
            if process.status() != psutil.STATUS_ZOMBIE:
                found.append(process)
    return found


@pytest.fixture
def another_orch_waiting() -> Iterator[None]:
    """A start command of another orch on this machine (a `make demo` beside the tests), still
    waiting on its stdin: the tests must look only at what they started."""
    decoy = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.read()", "--stdin-first", "--dir", "/x"],
        stdin=subprocess.PIPE,
    )
    with decoy:
        try:
            yield
        finally:
            decoy.kill()


def test_up_refuses_what_sglang_would_reject_and_force_launches_it(
    ssh_workspace: Workspace, another_orch_waiting: None
) -> None:
    # SGLang 0.5.11 with spec decoding and no mamba strategy: the incident
    name = ssh_workspace.profile(
        "incident-0511",
        "spec_decode: {algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n",
        version="0.5.11",
    )
    refused = ssh_workspace.orch("up", name)
    assert refused.code == ExitCode.PLAN_REFUSED
    assert "rejects the plan at resolve: ValueError: Speculative decoding" in refused.err
    assert "SGLang set mamba_scheduler_strategy = 'no_buffer' itself (from 'auto'" in refused.err
    assert "--force launches anyway" in refused.err
    # nothing remote changed: the start's command, opened while the plan was checked, was
    # called off before it looked at anything (the bootstrap's --stdin-first)
    assert not ssh_workspace.deployment_dir(name).exists()
    deadline = time.monotonic() + 5.0
    while waiting := _waiting_starts(ssh_workspace):
        assert time.monotonic() < deadline, waiting  # it ends on the empty stdin
        time.sleep(0.05)

    forced = ssh_workspace.orch("up", name, "--force")
    assert forced.code == ExitCode.CONFIG_ERROR  # and the server dies exactly as predicted
    assert "(--force: launching anyway)" in forced.err
    assert "config-error: ValueError: Speculative decoding" in forced.err


def test_lock_then_diff_effective_checks_the_running_server_against_it(
    ssh_workspace: Workspace,
) -> None:
    name = incident_profile(ssh_workspace, "locked")
    locked = ssh_workspace.orch("lock", name)
    assert locked.code == ExitCode.OK, locked.err
    path = ssh_workspace.profiles / f"{name}.lock.json"
    document = json.loads(path.read_text())
    assert document["effective"]["max_running_requests"] == 48
    assert document["predicted_by"] == "orch's SGLang stand-in (NOT SGLang)"
    assert "predicted by orch's stand-in, NOT SGLang" in locked.out
    assert ssh_workspace.orch("validate", name).code == ExitCode.OK
    assert ssh_workspace.orch("up", name).code == ExitCode.OK

    clean = ssh_workspace.orch("diff-effective", name, "--json")
    assert clean.code == ExitCode.OK, clean.out
    lock_rows = [row for row in clean.json()["fields"] if row["key_path"] == "lock"]
    assert {row["field"] for row in lock_rows} >= {"max_running_requests", "attention_backend"}
    assert {row["verdict"] for row in lock_rows} == {"ok"}

    document["effective"]["attention_backend"] = "triton"  # what the reviewed lock promised
    path.write_text(json.dumps(document))
    drift = ssh_workspace.orch("diff-effective", name, "--json")
    assert drift.code == ExitCode.DRIFT
    row = rows_by_field(drift.json())["attention_backend"]
    assert (row["verdict"], row["profile"], row["lock"], row["resolved"]) == (
        "lock-drift",
        None,
        "triton",
        "fa3",
    )  # the lock's value, not the profile's: the profile does not set it
