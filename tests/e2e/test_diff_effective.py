"""orch diff-effective end to end over a real sshd, against the SGLang stand-in (NOT SGLang):
the incident's heredoc launcher reproduced, orch's own launch, an override SGLang makes, and
an environment variable a wrapper removes."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import MODEL, STANDIN, Workspace, add_host, free_port
from tests.ssh.sshd import SshServer

INCIDENT_SPEC = """\
spec_decode:
  algorithm: EAGLE
  num_steps: 3
  eagle_topk: 1
  num_draft_tokens: {draft}
"""


def incident_profile(
    space: Workspace,
    name: str,
    *,
    draft: int = 4,
    port: int | None = None,
    body: str = "",
    **kwargs: Any,
) -> str:
    return space.profile(
        name,
        INCIDENT_SPEC.format(draft=draft) + body,
        port=port,
        args={"mamba_scheduler_strategy": "extra_buffer", "context_length": 8192},
        **kwargs,
    )


def rows_by_field(outcome_json: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["field"]: row for row in outcome_json["fields"]}


# The incident's launcher, as it was written: the flags go through an SSH heredoc whose
# delimiter is unquoted, so `$MAMBA_FLAGS` is expanded by the *local* shell, where it is not
# set, before the script ever reaches the host. Nothing fails; the flag is silently gone.
HEREDOC_LAUNCHER = """\
#!/usr/bin/env bash
set -e
ssh -F /dev/null -o BatchMode=yes -o StrictHostKeyChecking=yes \\
    -o UserKnownHostsFile={known_hosts} -i {key} -p {port} {user}@127.0.0.1 bash -s <<EOF
MAMBA_FLAGS="--mamba-radix-cache-strategy extra_buffer"
export PYTHONPATH={standin} ORCH_STANDIN_VERSION=0.5.23
mkdir -p {workdir}
cd {workdir}
nohup {python} -m sglang.launch_server --model-path {model} --served-model-name qwen-test \\
    --host 127.0.0.1 --port {server_port} --speculative-algorithm EAGLE \\
    --speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4 \\
    $MAMBA_FLAGS --context-length 8192 --skip-server-warmup >> server.log 2>&1 < /dev/null &
EOF
"""


@pytest.fixture
def by_hand(ssh_workspace: Workspace, sshd: SshServer) -> Iterator[tuple[int, Path]]:
    """A server started by the incident's heredoc launcher; yields its port and log."""
    port = free_port()
    workdir = ssh_workspace.root / "by-hand"
    script = ssh_workspace.root / "launch-by-hand.sh"
    script.write_text(
        HEREDOC_LAUNCHER.format(
            known_hosts=sshd.known_hosts,
            key=sshd.client_key,
            port=sshd.port,
            user=sshd.user,
            standin=STANDIN,
            workdir=workdir,
            python=sys.executable,
            model=MODEL,
            server_port=port,
        )
    )
    environ = {k: v for k, v in os.environ.items() if k != "MAMBA_FLAGS"}
    subprocess.run(["bash", str(script)], check=True, env=environ, timeout=60)
    log = workdir / "server.log"
    deadline = time.monotonic() + 30
    while "fired up and ready" not in (log.read_text() if log.exists() else ""):
        assert time.monotonic() < deadline, "the hand-launched server did not start"
        time.sleep(0.1)
    try:
        yield port, log
    finally:
        for process in psutil.process_iter(["cmdline"]):
            if f"{port}" in (process.info["cmdline"] or []):
                for child in process.children(recursive=True):
                    child.kill()
                process.kill()


def test_a_incident_heredoc_drops_the_flag_and_diff_says_not_received(
    ssh_workspace: Workspace, by_hand: tuple[int, Path]
) -> None:
    port, log = by_hand
    name = incident_profile(ssh_workspace, "incident", port=port)
    outcome = ssh_workspace.orch("diff-effective", name, "--json", "--log", str(log))
    assert outcome.code == ExitCode.DRIFT, outcome.err
    report = outcome.json()
    assert report["found_by"] == "port"
    rows = rows_by_field(report)
    mamba = rows["mamba_radix_cache_strategy"]
    assert mamba["requested_as"] == "mamba_scheduler_strategy"
    assert mamba["verdict"] == "not-received"
    assert mamba["profile"] == "extra_buffer"
    assert mamba["received_present"] is False
    drifted = {row["field"] for row in report["fields"] if row["verdict"] != "ok"}
    assert drifted == {"mamba_radix_cache_strategy"}  # everything else arrived as written

    text = ssh_workspace.orch("diff-effective", name, "--log", str(log))
    assert text.code == ExitCode.DRIFT
    line = next(row for row in text.out.splitlines() if row.startswith("mamba_radix"))
    assert "(as mamba_scheduler_strategy)" in line
    assert "not-received" in line


def test_b_orch_up_of_the_same_profile_is_all_ok(ssh_workspace: Workspace) -> None:
    name = incident_profile(ssh_workspace, "incident-orch")
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    assert "0 drift" in up.out
    outcome = ssh_workspace.orch("diff-effective", name, "--json")
    assert outcome.code == ExitCode.OK, outcome.out
    report = outcome.json()
    assert report["found_by"] == "orch"
    assert report["resolved_source"] == "/server_info"
    assert report["drift"] is False
    assert {row["verdict"] for row in report["fields"]} == {"ok"}
    assert {row["verdict"] for row in report["env"]} == {"ok"}
    assert rows_by_field(report)["mamba_radix_cache_strategy"]["resolved"] == "extra_buffer"


def test_c_sglang_override_is_reported_with_the_line_that_explains_it(
    ssh_workspace: Workspace,
) -> None:
    name = incident_profile(ssh_workspace, "override", draft=8)
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err  # not pinned: a warning in up
    assert "warning: speculative_num_draft_tokens: overridden" in up.err

    outcome = ssh_workspace.orch("diff-effective", name, "--json")
    assert outcome.code == ExitCode.DRIFT
    row = rows_by_field(outcome.json())["speculative_num_draft_tokens"]
    assert (row["profile"], row["received"], row["resolved"]) == (8, 8, 4)
    assert row["verdict"] == "overridden"
    assert row["why"] == (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1"
    )


def test_c_pinned_override_fails_up(ssh_workspace: Workspace) -> None:
    name = incident_profile(
        ssh_workspace, "pinned", draft=8, body="pin: [speculative_num_draft_tokens]\n"
    )
    # The plan (SGLang's resolution, here the stand-in's, run on the host) sees it coming:
    refused = ssh_workspace.orch("up", name)
    assert refused.code == ExitCode.PLAN_REFUSED
    assert "would change pinned field(s): speculative_num_draft_tokens 8 -> 4" in refused.err
    assert not ssh_workspace.deployment_dir(name).joinpath("runs").exists()  # nothing started
    # Without the plan, the same pin fails up once the running server shows the override:
    up = ssh_workspace.orch("up", name, "--no-plan")
    assert up.code == ExitCode.DRIFT
    assert "pinned field drifted: speculative_num_draft_tokens" in up.err


def test_d_env_var_removed_by_a_wrapper_is_env_missing(ssh_workspace: Workspace) -> None:
    wrapper = ssh_workspace.root / "python-wrapper"
    wrapper.write_text(
        textwrap.dedent(f"""\
            #!/bin/sh
            # a site wrapper that "cleans up" the environment before exec-ing python
            unset SGLANG_ENABLE_SPEC_V2
            exec {shlex.quote(sys.executable)} "$@"
        """)
    )
    wrapper.chmod(0o755)
    add_host(ssh_workspace, "wrapped", python=str(wrapper))
    name = incident_profile(
        ssh_workspace, "wrapped", host="wrapped", env={"SGLANG_ENABLE_SPEC_V2": "1"}
    )
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    assert "env SGLANG_ENABLE_SPEC_V2: env-missing" in up.err

    outcome = ssh_workspace.orch("diff-effective", name, "--json")
    assert outcome.code == ExitCode.DRIFT
    report = outcome.json()
    env = {row["name"]: row for row in report["env"]}
    assert env["SGLANG_ENABLE_SPEC_V2"]["verdict"] == "env-missing"
    assert env["PYTHONPATH"]["verdict"] == "ok"
    assert {row["verdict"] for row in report["fields"]} == {"ok"}


def test_no_server_is_a_distinct_error(ssh_workspace: Workspace) -> None:
    name = incident_profile(ssh_workspace, "nothing")
    outcome = ssh_workspace.orch("diff-effective", name)
    assert outcome.code == ExitCode.NOT_DEPLOYED
    assert "nothing listens on port" in outcome.err


def test_json_is_parseable_and_never_shows_secrets(
    ssh_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_TEST_TOKEN", "hf_supersecret_value")
    name = incident_profile(
        ssh_workspace, "secretive", env={"HF_TOKEN": {"from_env": "ORCH_TEST_TOKEN"}}
    )
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    outcome = ssh_workspace.orch("diff-effective", name, "--json", "--all")
    assert "hf_supersecret_value" not in outcome.out + outcome.err
    env = {row["name"]: row for row in json.loads(outcome.out)["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "profile": "<secret>",
        "received": "<secret>",
        "verdict": "ok",
    }


def test_after_a_crash_up_and_diff_compare_what_the_log_recorded(ssh_workspace: Workspace) -> None:
    name = incident_profile(
        ssh_workspace,
        "oom",
        draft=8,
        env={"ORCH_STANDIN_FAIL": "cuda-oom"},
        restart={"mode": "no"},
    )
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.CUDA_OOM, up.err
    assert "effective configuration (server_args line)" in up.out
    assert "speculative_num_draft_tokens: overridden" in up.err

    outcome = ssh_workspace.orch("diff-effective", name, "--json")
    assert outcome.code == ExitCode.DRIFT
    report = outcome.json()
    assert report["resolved_source"] == "server_args line"
    assert "the server is not running: compared with what its log recorded" in report["notes"]
    row = rows_by_field(report)["speculative_num_draft_tokens"]
    # received: what the dead server was exec'd with (runs/<id>/received.json), as the profile says
    assert (row["received"], row["resolved"], row["verdict"]) == (8, 4, "overridden")


def test_config_error_before_resolution_compares_what_it_received(ssh_workspace: Workspace) -> None:
    name = incident_profile(ssh_workspace, "stillborn", env={"ORCH_STANDIN_FAIL": "config-error"})
    assert ssh_workspace.orch("up", name).code == ExitCode.CONFIG_ERROR
    outcome = ssh_workspace.orch("diff-effective", name)
    assert outcome.code == ExitCode.OK  # it received everything the profile says: no drift
    assert "resolved from nothing" in outcome.out
    assert "note: it resolved nothing: it ended before logging server_args= (config-error" in (
        outcome.out
    )
