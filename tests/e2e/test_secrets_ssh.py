"""A secret (``{from_env: NAME}``) never appears in what orch prints, even where the server or
SGLang echo it back: up, logs, plan, diff-effective, status (over a real sshd, stand-in server)."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace

SECRET = "hf_3xTr3m3lyS3cr3tT0k3nV4lu3"  # noqa: S105 - a made-up token to look for


def test_a_secret_echoed_by_the_server_is_redacted_everywhere(
    ssh_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ORCH_TEST_SECRET", SECRET)
    # the stand-in logs every argument in its server_args= line, as SGLang does
    name = ssh_workspace.profile(
        "secretive",
        env={"HF_TOKEN": {"from_env": "ORCH_TEST_SECRET"}},
        args={"chat_template": {"from_env": "ORCH_TEST_SECRET"}},
    )
    outputs = []
    for argv in (("up", name), ("logs", name, "-n", "200"), ("plan", name),
                 ("plan", name, "--json"), ("diff-effective", name),
                 ("diff-effective", name, "--json", "--all"), ("status", name, "--json"),
                 ("render", name), ("render", name, "--json")):  # fmt: skip
        outcome = ssh_workspace.orch(*argv)
        assert outcome.code in (ExitCode.OK, ExitCode.DRIFT), (argv, outcome.err)
        outputs.append(outcome.out + outcome.err)
    logged = outputs[1]
    assert "server_args=" in logged
    assert "<redacted: from_env ORCH_TEST_SECRET>" in logged  # it was there, and is masked
    for text in outputs:
        assert SECRET not in text
    # the secret did reach the server: its log on the host holds it (0600 spec, not orch output)
    spec = ssh_workspace.deployment_dir(name) / "spec.json"
    assert oct(spec.stat().st_mode & 0o777) == "0o600"
