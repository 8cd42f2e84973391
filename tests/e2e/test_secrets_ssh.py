"""A secret (``{from_env: NAME}``) never appears in what orch prints, even where the server or
SGLang echo it back: up, logs, plan, diff-effective, status (over a real sshd, stand-in server)."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace

SECRET = "hf_3xTr3m3lyS3cr3tT0k3nV4lu3"  # noqa: S105 - a made-up token to look for
# both " and \: SGLang's config line writes it as a repr, --json writes that line as JSON again
QUOTED = "pa\"ss\\w0rd's-S3cr3t"


@pytest.mark.parametrize("secret", [SECRET, QUOTED], ids=["token", "quotes-and-backslash"])
def test_a_secret_echoed_by_the_server_is_redacted_everywhere(
    ssh_workspace: Workspace, monkeypatch: pytest.MonkeyPatch, secret: str
) -> None:
    monkeypatch.setenv("ORCH_TEST_SECRET", secret)
    # the stand-in logs every argument in its server_args= line, as SGLang does
    name = ssh_workspace.profile(
        "secretive",
        env={"HF_TOKEN": {"from_env": "ORCH_TEST_SECRET"}},
        args={"chat_template": {"from_env": "ORCH_TEST_SECRET"}},
    )
    outputs = []
    commands: tuple[tuple[str, ...], ...] = (
        ("up", name),
        ("logs", name, "-n", "200"),
        ("plan", name),
        ("plan", name, "--json"),
        ("diff-effective", name),
        ("diff-effective", name, "--json", "--all"),
        ("status", name, "--json"),
        ("runs", name, "--json"),
        ("render", name),
        ("render", name, "--json"),
    )
    for argv in commands:
        outcome = ssh_workspace.orch(*argv)
        assert outcome.code in (ExitCode.OK, ExitCode.DRIFT), (argv, outcome.err)
        outputs.append(outcome.out + outcome.err)
    logged = outputs[1]
    assert "server_args=" in logged
    assert "<redacted: from_env ORCH_TEST_SECRET>" in logged  # it was there, and is masked
    for shown, text in zip(commands, outputs, strict=True):
        for form in (secret, *_escaped(secret)):
            assert form not in text, shown
    # the secret did reach the server: its log on the host holds it (0600 spec, not orch output)
    spec = ssh_workspace.deployment_dir(name) / "spec.json"
    assert oct(spec.stat().st_mode & 0o777) == "0o600"


def _escaped(secret: str) -> list[str]:
    """The secret's characters that matter, as the encodings orch's outputs use would write
    them: a JSON string of a Python repr, and each alone."""
    import json

    inner = repr(secret)[1:-1]
    return [json.dumps(secret)[1:-1], inner, json.dumps(inner)[1:-1]]
