"""``orch diff`` finds every deployment a change reaches, through ``extends`` and hosts.yaml, by
rendering both revisions whole; it reads them with git and leaves the checkout as it was."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ExitCode
from tests.unit.review.repo import ProfilesRepo, by_name, orch_in


def test_a_base_change_restarts_every_profile_inheriting_it_and_no_other(
    repo: ProfilesRepo,
) -> None:
    repo.edit("base.yaml", "context_length: 32768", "context_length: 65536")
    repo.commit("longer context")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert sorted(deployments) == ["leaf", "mid"]  # not own (overrides it), not other
    for name in ("leaf", "mid"):
        item = deployments[name]
        assert item["action"] == "restart"
        assert item["forced_by"] == ["context_length"]
        before, after = item["rendered"]["before"]["argv"], item["rendered"]["after"]["argv"]
        assert before[before.index("--context-length") + 1] == "32768"
        assert after[after.index("--context-length") + 1] == "65536"
        [change] = item["changes"]
        assert (change["field"], change["before"], change["after"]) == (
            "context_length",
            32768,
            65536,
        )
    assert report["unchanged"] == 2
    code, text, _ = repo.orch("diff", "HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    assert "- --context-length 32768" in text
    assert "+ --context-length 65536" in text


def test_a_range_without_a_launch_change_exits_0(repo: ProfilesRepo) -> None:
    repo.edit("base.yaml", "args:", "# reviewed by the team\nargs:")
    repo.commit("a comment")
    code, text, _ = repo.orch("diff", "HEAD~1..HEAD")
    assert code == ExitCode.OK, text
    assert "No deployment changes (4 unchanged)" in text
    assert repo.orch("diff", "HEAD..HEAD")[0] == ExitCode.OK


def test_a_host_inventory_edit_replaces_what_runs_on_that_host(repo: ProfilesRepo) -> None:
    repo.edit("hosts.yaml", "address: gpu-a.example.net", "address: gpu-a2.example.net")
    repo.commit("gpu-a moved")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert sorted(deployments) == ["leaf", "mid", "own"]
    assert {d["action"] for d in deployments.values()} == {"replace"}
    assert {tuple(d["forced_by"]) for d in deployments.values()} == {("host",)}


def test_the_working_tree_is_the_default_head_and_is_left_as_it_was(repo: ProfilesRepo) -> None:
    repo.edit("leaf.yaml", "port: 30001", "port: 30011")
    status = repo.git("status", "--porcelain")
    head = repo.git("rev-parse", "HEAD")
    index = (repo.root / ".git" / "index").read_bytes()
    code, report = repo.diff_json()
    assert code == ExitCode.CHANGES
    assert report["head"] == "working tree"
    assert report["head_commit"] is None
    leaf = by_name(report)["leaf"]
    assert leaf["action"] == "restart"
    assert leaf["forced_by"] == ["port"]
    assert repo.git("status", "--porcelain") == status
    assert repo.git("rev-parse", "HEAD") == head
    assert (repo.root / ".git" / "index").read_bytes() == index
    # BASE alone: that revision against the working tree
    code, report = repo.diff_json("main")
    assert code == ExitCode.CHANGES
    assert list(by_name(report)) == ["leaf"]


def test_a_pull_requests_range_starts_at_the_merge_base(repo: ProfilesRepo) -> None:
    repo.git("checkout", "-q", "-b", "topic")
    repo.edit("leaf.yaml", "port: 30001", "port: 30011")
    repo.commit("topic: leaf's port")
    repo.git("checkout", "-q", "main")
    repo.edit("other.yaml", "context_length: 32768", "context_length: 4096")
    repo.commit("main moved on")
    _, two_dots = repo.diff_json("main..topic")
    _, three_dots = repo.diff_json("main...topic")
    assert sorted(by_name(two_dots)) == ["leaf", "other"]  # main's own change shows reversed
    assert sorted(by_name(three_dots)) == ["leaf"]  # what the branch brings, as GitHub shows


def test_new_removed_and_abstract_profiles(repo: ProfilesRepo) -> None:
    repo.remove("other.yaml")
    repo.write("fresh.yaml", "extends: base\nport: 30005\n")
    repo.write("shared.yaml", "extends: base\nabstract: true\nport: 30006\n")
    repo.commit("reshuffle")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert {name: d["action"] for name, d in deployments.items()} == {
        "fresh": "new",
        "other": "removed",
    }
    assert deployments["fresh"]["rendered"]["before"] is None
    assert deployments["other"]["rendered"]["after"] is None


def test_profiles_named_after_the_range_narrow_the_review(repo: ProfilesRepo) -> None:
    repo.edit("base.yaml", "context_length: 32768", "context_length: 65536")
    repo.commit("longer context")
    code, report = repo.diff_json("HEAD~1..HEAD", "leaf")
    assert code == ExitCode.CHANGES
    assert list(by_name(report)) == ["leaf"]
    code, report = repo.diff_json("HEAD~1..HEAD", "own")
    assert code == ExitCode.OK  # own overrides the field: nothing of it changed
    assert report["deployments"] == []
    code, _, err = repo.orch("diff", "HEAD~1..HEAD", "nosuch")
    assert code == ExitCode.CONFIG
    assert "no deployment 'nosuch'" in err


def test_errors_have_their_own_exit_codes_never_the_changes_code(
    repo: ProfilesRepo, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = repo.orch("diff", "nosuchbranch..HEAD")
    assert code == ExitCode.REVISION
    assert "no commit 'nosuchbranch'" in err
    assert "fetch-depth: 0" in err  # the usual cause in CI, named
    code, _, _ = repo.orch("diff", "--comment-limit", "ten")
    assert code == ExitCode.DIFF_USAGE
    assert int(ExitCode.DIFF_USAGE) != int(ExitCode.CHANGES)
    assert "--comment-limit" in capsys.readouterr().err  # argparse's own message
    code, _, _ = repo.orch("diff", "--remote", "--local-sglang")
    assert code == ExitCode.DIFF_USAGE


def test_profiles_outside_git_are_an_error_not_a_change(tmp_path: Path) -> None:
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "x.yaml").write_text("host: local\nmodel:\n  path: /m\n")
    code, _, err = orch_in(tmp_path, "diff")
    assert code == ExitCode.REVISION
    assert "not in a git repository" in err
