"""No secret reaches any format of ``orch diff``: a from_env value is never read, a literal under
a credential's name (written in the profile at either revision) is shown masked, and a change
of one says only that it changed."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExitCode
from tests.unit.review.repo import ProfilesRepo, by_name

OLD_KEY = "sk-old-literal-key-4711"
NEW_KEY = "sk-new-literal-key-0815"
HF_OLD = "hf_oldliteraltoken12345"
HF_NEW = "hf_newliteraltoken67890"
FROM_ENV_VALUE = "value-of-the-from-env-secret-31337"


def test_no_secret_in_any_format(repo: ProfilesRepo, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEAM_API_KEY", FROM_ENV_VALUE)
    repo.write(
        "keyed.yaml",
        f"""\
        extends: base
        port: 30008
        env:
          HF_TOKEN: {HF_OLD}
          SERVING_KEY: {{from_env: TEAM_API_KEY}}
        args:
          api_key: {OLD_KEY}
          admin_api_key: {{from_env: TEAM_API_KEY}}
        """,
    )
    repo.commit("keyed")
    repo.edit("keyed.yaml", OLD_KEY, NEW_KEY)
    repo.edit("keyed.yaml", HF_OLD, HF_NEW)
    repo.commit("rotated")
    outputs = []
    for form in ((), ("--json",), ("--format", "markdown"), ("--wide",)):
        code, out, err = repo.orch("diff", "HEAD~1..HEAD", *form)
        assert code == ExitCode.CHANGES, err
        outputs.append(out + err)
    for shown in outputs:
        for secret in (OLD_KEY, NEW_KEY, HF_OLD, HF_NEW, FROM_ENV_VALUE):
            assert secret not in shown
    _, report = repo.diff_json("HEAD~1..HEAD")
    keyed = by_name(report)["keyed"]
    assert keyed["action"] == "restart"
    assert set(keyed["forced_by"]) == {"api_key", "env.HF_TOKEN"}
    after = keyed["rendered"]["after"]
    assert after["env"]["HF_TOKEN"] == "<redacted: HF_TOKEN>"  # noqa: S105 - the mask
    assert after["env"]["SERVING_KEY"] == "<redacted: from_env TEAM_API_KEY>"
    assert "<redacted: api_key>" in after["argv"]
    assert "<redacted: from_env TEAM_API_KEY>" in after["argv"]
    api_key = next(c for c in keyed["changes"] if c["field"] == "api_key")
    assert api_key["secret"] is True
    assert api_key["before"] == api_key["after"] == "<secret>"


def test_an_unchanged_secret_is_no_change(repo: ProfilesRepo) -> None:
    repo.write("keyed.yaml", f"extends: base\nport: 30008\nargs:\n  api_key: {OLD_KEY}\n")
    repo.commit("keyed")
    repo.edit("keyed.yaml", "port: 30008", "port: 30008\n# rotated next week")
    repo.commit("a comment")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.OK
    assert report["deployments"] == []
