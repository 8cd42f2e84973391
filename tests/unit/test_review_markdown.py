"""``orch diff --format markdown``: comment bodies within the byte limit, each self-contained, the
summary first, sections whole where they fit a body, a blocked reason never cut between bodies,
no secret in any of them. tests/golden/test_review_markdown_golden.py holds the whole text."""

from __future__ import annotations

import io
import re
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.cli.main import main
from orchestrator.cli.show import review_markdown as markdown
from orchestrator.effective import review, verify
from orchestrator.errors import ExitCode
from tests import review_reports as reports
from tests.conftest import copy_examples

_FENCE_OPEN = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")
_PART = re.compile(r"^## orch diff, part (\d+) of (\d+)$", re.M)


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _cells(row: str) -> list[str]:
    """A GFM table row's cells: split at the pipes no backslash escapes."""
    return re.split(r"(?<!\\)\|", row.strip().strip("|"))


def _check_bodies(bodies: list[str], limit: int) -> None:
    """What every body must be, whatever the report: within the limit, marked, numbered,
    its fences closed and its tables whole."""
    assert bodies
    for number, body in enumerate(bodies, start=1):
        assert _size(body) <= limit, f"body {number}: {_size(body)} bytes > {limit}"
        assert body.startswith(markdown.MARKER + "\n")
        assert markdown.SEPARATOR not in body.split("\n")
        parts = _PART.findall(body)
        if len(bodies) > 1:
            assert parts == [(str(number), str(len(bodies)))]
        else:
            assert parts == []
            assert "\n## orch diff\n" in body
        lines = body.split("\n")
        opened: str | None = None
        columns: int | None = None
        for index, line in enumerate(lines):
            if opened is not None:
                mark = line.strip(" ")
                indent = len(line) - len(line.lstrip(" "))
                if mark and set(mark) == {opened[0]} and len(mark) >= len(opened) and indent < 4:
                    opened = None
                continue
            found = _FENCE_OPEN.match(line)
            if found:
                opened = found[1]
                continue
            if (
                line.startswith("|")
                and index + 1 < len(lines)
                and lines[index + 1].startswith("|-")
            ):
                columns = len(_cells(line))
            elif line.startswith("|") and not line.startswith("|-"):
                assert columns is not None, f"a row without a header: {line}"
                assert len(_cells(line)) == columns, f"a row of another width: {line}"
            elif not line.startswith("|"):
                columns = None
        assert opened is None, f"body {number} leaves a code fence open"


# -- one body, what it holds ---------------------------------------------------------------------


def test_a_small_report_is_one_body_summary_first() -> None:
    bodies = markdown.bodies(reports.small(), 65_536)
    _check_bodies(bodies, 65_536)
    assert len(bodies) == 1
    body = bodies[0]
    assert "`origin/main` (`34a656d53554`) -> `HEAD` (`cb758f2a0e4c`)" in body
    summary = body.index("| Deployment | Action | Forced by | Memory |")
    assert summary < body.index("### `qwen36-mtp-h200`: blocked")
    assert "| `qwen36-mtp-h200` | **blocked** | see below |" in body
    assert "| `qwen35-397b-2x8-h200[0]` | agent-only | `restart.delay_s` |" in body
    assert "| `qwen3-8b-canary` | live | `log_requests` |" in body
    assert markdown.document(reports.small(), 65_536) == body


def test_a_rename_shows_both_names_and_the_rendered_change_is_a_diff_block() -> None:
    body = markdown.document(reports.small(), 65_536)
    assert (
        "| `mamba_scheduler_strategy` -> `mamba_radix_cache_strategy` (renamed) "
        "| `extra_buffer` | `extra_buffer` | rename |" in body
    )
    assert "```diff\n- sglang: 0.5.11\n+ sglang: 0.5.23\n" in body


def test_secrets_never_appear_in_any_body_at_any_limit() -> None:
    for report in (reports.small(), reports.large()):
        for limit in (2048, 2500, 4096, 9000, 65_536):
            text = markdown.document(report, limit)
            for secret in reports.SECRETS:
                assert secret not in text
    text = markdown.document(reports.small(), 65_536)
    assert "| `api_key` | `<secret>` | `<secret>` |" in text
    assert "| `admin_api_key` | *(unset)* | `<secret>` |" in text
    assert "+ env HF_TOKEN=<redacted: from_env HF_TOKEN>" in text


def test_values_cannot_become_markdown() -> None:
    body = markdown.document(reports.small(), 65_536)
    # a note's mention, reference and HTML stay text; a pipe in a name stays in its cell
    assert "- \\@reviewers: \\#42 asks for \\<b\\>debug\\</b\\> logs" in body
    assert "<b>" not in body
    assert "| `team-chat\\|prod` | **restart** |" in body
    assert "| argtable: given \\`debug\\` \\| \\*loud\\* |" in body


def test_plain_text_escapes_what_starts_a_list_or_a_heading() -> None:
    assert markdown.plain("- not an item") == "\\- not an item"
    assert markdown.plain("12. not an item") == "12\\. not an item"
    assert markdown.plain("===") == "\\==="
    assert markdown.plain("two\nlines") == "two\\\\nlines"


def test_a_code_span_outlasts_the_backticks_inside_it() -> None:
    assert markdown.code("a ``b`` c") == "```a ``b`` c```"
    assert markdown.code("`edge`") == "`` `edge` ``"
    assert markdown.code("") == "*(empty)*"


def test_a_fence_is_longer_than_any_line_that_could_close_it() -> None:
    assert markdown.fence(["- a", "+ ```"]) == "```"
    assert markdown.fence(["````", "x"]) == "`````"
    assert markdown.fence(["   ``````   "]) == "```````"
    assert markdown.fence(["    ``````"]) == "```"  # indented four: code, never a fence


# -- several bodies ------------------------------------------------------------------------------


def test_a_section_larger_than_a_body_goes_on_under_a_continued_heading() -> None:
    bodies = markdown.bodies(reports.large(), 4096)
    _check_bodies(bodies, 4096)
    wide = [body for body in bodies if "### `qwen36-wide-b200`" in body]
    assert len(wide) == 2
    assert "### `qwen36-wide-b200`: replace" in wide[0]
    assert "### `qwen36-wide-b200` (continued)" in wide[1]
    assert "**Rendered** (before -> after):\n```diff\n+ --lora-paths-034" in wide[1]
    # the section before it fitted the first body whole; the one after starts where it ends
    assert "### `qwen36-mtp-b200`" in bodies[0]
    assert wide[1].index("(continued)") < wide[1].index("### `team-chat|prod`")


def test_sections_are_whole_where_they_fit_a_body() -> None:
    report = reports.large()
    bodies = markdown.bodies(report, 4096)
    sections = markdown.sections(report)
    fits = [s for s in sections if _size(s.text()) + 2 <= 4096 - 200]
    assert len(fits) == len(sections) - 1  # only the wide one is larger than a body
    for section in fits:
        assert sum(section.text() in body for body in bodies) == 1


def test_a_summary_longer_than_a_body_repeats_its_header() -> None:
    changes = tuple(
        review.DeploymentChange(
            f"tenant-{number:03d}", None, review.RESTART, ("context_length",), None, None, ()
        )
        for number in range(300)
    )
    report = review.Review("main", "HEAD", "a" * 40, "b" * 40, changes, unchanged=0)
    bodies = markdown.bodies(report, 2048)
    _check_bodies(bodies, 2048)
    assert "300 deployments change: 300 restart; 0 unchanged." in bodies[0]
    headed = [body for body in bodies if "| Deployment | Action | Forced by | Memory |" in body]
    assert headed == bodies[: len(headed)]
    assert len(headed) > 2
    assert all("### Summary (continued)" in body for body in headed[1:])
    rows = re.findall(r"^\| `(tenant-\d+)` \|", "\n".join(bodies), re.M)
    assert rows == [f"tenant-{number:03d}" for number in range(300)]


def _blocked(reasons: tuple[str, ...], argv_lines: int) -> review.DeploymentChange:
    where = reports.placement("h200-1", "H200 devices 0")
    before = reports.side(reports.wide_argv(argv_lines, "draft-model"), where)
    after = reports.side((), where, problems=reasons)
    return review.DeploymentChange(
        "qwen36-mtp-h200", None, review.BLOCKED, (), before, after, (), reasons
    )


def test_a_blocked_reason_is_never_cut_the_launch_moves_around_it() -> None:
    reasons = tuple(f"reason {number}: " + "the triple goes together " * 55 for number in range(4))
    report = review.Review("main", "HEAD", "a" * 40, "b" * 40, (_blocked(reasons, 30),), 0)
    for limit in (2048, 2300, 3000, 5000):
        bodies = markdown.bodies(report, limit)
        _check_bodies(bodies, limit)
        for reason in reasons:
            assert sum(reason in body for body in bodies) == 1
        assert markdown.CUT_NOTE not in "".join(bodies)


def test_a_reason_longer_than_a_body_goes_on_in_the_next_one_with_a_note() -> None:
    """The one case a reason cannot be whole in one body: it alone is larger than the forge
    takes. It is cut between characters, said so, and nothing of it is lost."""
    reason = "".join(f"w{number:04d} " for number in range(900))  # 5,400 bytes
    report = review.Review("main", "HEAD", "a" * 40, "b" * 40, (_blocked((reason,), 3),), 0)
    bodies = markdown.bodies(report, 2048)
    _check_bodies(bodies, 2048)
    cut = [body for body in bodies if markdown.CUT_NOTE in body]
    assert len(cut) >= 2
    text = "".join(bodies)
    found = re.findall(r"w(\d{4}) ", text)
    assert found == [f"{number:04d}" for number in range(900)]


def test_a_launch_line_longer_than_a_body_is_cut_inside_its_fence() -> None:
    where = reports.placement("gpu-1", "H100 devices 0")
    token = "`" * 2500 + "x" * 2500
    change = review.DeploymentChange(
        "odd",
        None,
        review.RESTART,
        ("json_model_override_args",),
        reports.side(("--json-model-override-args", "{}"), where),
        reports.side(("--json-model-override-args", token), where),
        (),
    )
    report = review.Review("main", "HEAD", "a" * 40, "b" * 40, (change,), 0)
    bodies = markdown.bodies(report, 2048)
    _check_bodies(bodies, 2048)
    pieces = [
        line
        for body in bodies
        for line in body.split("\n")
        if line.startswith(("+ --json-model-override-args", markdown.GOES_ON))
    ]
    assert len(pieces) > 2
    assert pieces[0] + "".join(p.removeprefix(markdown.GOES_ON) for p in pieces[1:]) == (
        f"+ --json-model-override-args {token}"
    )
    assert sum(markdown.CUT_NOTE in body for body in bodies) == len(pieces) - 1


def test_the_document_splits_back_into_its_bodies() -> None:
    bodies = markdown.bodies(reports.large(), 3000)
    assert len(bodies) > 2
    document = markdown.document(reports.large(), 3000)
    assert document.split(f"\n{markdown.SEPARATOR}\n") == bodies


def test_a_limit_below_what_a_body_needs_is_refused() -> None:
    with pytest.raises(ValueError, match="too small"):
        markdown.bodies(reports.large(), 300)


# -- any report, any limit -----------------------------------------------------------------------

_WORDS = st.sampled_from(["tp", "kv cache", "déjà", "GPU", "0.5.23", "node", "x" * 30, "日本"])


@st.composite
def _reports(draw: st.DrawFn) -> tuple[review.Review, list[str], list[str]]:
    """A report whose every unit carries an id (in the order it must appear); also the reasons
    and error lines, which must each be whole in one body."""
    changes = []
    order: list[str] = []
    whole: list[str] = []
    where = reports.placement("gpu-1", "H100 devices 0")
    for number in range(draw(st.integers(0, 30))):
        action = draw(st.sampled_from(review.ACTIONS))
        reasons = tuple(
            f"R{number:04d}-{k:04d} " + " ".join(draw(st.lists(_WORDS, max_size=40)))
            for k in range(draw(st.integers(1, 3)) if action == review.BLOCKED else 0)
        )
        argv = tuple(f"A{number:04d}-{k:04d}" for k in range(draw(st.integers(0, 120))))
        fields = tuple(
            review.FieldChange(f"field_{k}", 1, f"F{number:04d}-{k:04d}", review.ARGTABLE, "given")
            for k in range(draw(st.integers(0, 60)))
        )
        error = draw(st.booleans())
        running = (
            review.Running(
                None,
                None,
                None,
                "-",
                f"E{number:04d}-0000 " + "ssh: no route " * draw(st.integers(0, 30)),
            )
            if error
            else None
        )
        notes = tuple(f"N{number:04d}-{k:04d} note" for k in range(draw(st.integers(0, 3))))
        forced = tuple(f"forced_{k}" for k in range(draw(st.integers(0, 8))))
        changes.append(
            review.DeploymentChange(
                draw(st.sampled_from(["demo", "qwen|36", "日本-model", "a`b", "x" * 90])),
                draw(st.one_of(st.none(), st.integers(0, 15))),
                action,
                forced,
                reports.side((), where),
                reports.side(argv, where),
                fields,
                reasons,
                notes,
                running=running,
            )
        )
        order += [reason.split(" ", 1)[0] for reason in reasons]
        order += list(argv) + [str(item.after) for item in fields]
        order += [running.error.split(" ", 1)[0]] if running and running.error else []
        order += [note.split(" ", 1)[0] for note in notes]
        whole += list(reasons) + ([running.error] if running and running.error else [])
    report = review.Review("main", "HEAD", "a" * 40, None, tuple(changes), unchanged=3)
    return report, order, whole


@settings(max_examples=150, deadline=None)
@given(_reports(), st.integers(2048, 24_000))
def test_any_report_splits_within_any_limit_each_unit_once_in_order(
    case: tuple[review.Review, list[str], list[str]], limit: int
) -> None:
    report, order, whole = case
    bodies = markdown.bodies(report, limit)
    _check_bodies(bodies, limit)
    text = "\n".join(bodies)
    found = re.findall(r"[RAFEN]\d{4}-\d{4}", text)
    assert found == order
    for line in whole:
        assert sum(markdown.plain(line) in body for body in bodies) == 1
    # a section fits a body whole: no cut at all
    if max(_size(section.text()) for section in markdown.sections(report)) + 400 <= limit:
        assert all("(continued)" not in body for body in bodies)
    if not report.deployments:
        assert len(bodies) == 1


# -- through the command line --------------------------------------------------------------------


def _git(root: Path, *argv: str) -> None:
    subprocess.run(
        ["git", "-C", str(root), "-c", "user.name=t", "-c", "user.email=t@t", *argv],
        check=True,
        capture_output=True,
    )


def test_orch_diff_markdown_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = "hf_e2e_never_in_a_comment"  # noqa: S105 - the value that must not show
    monkeypatch.setenv("HF_TOKEN", secret)
    profiles = copy_examples(tmp_path / "repo" / "profiles")
    _git(tmp_path / "repo", "init", "-q")
    _git(tmp_path / "repo", "add", "-A")
    _git(tmp_path / "repo", "commit", "-qm", "base")
    demo = profiles / "demo.yaml"
    text = demo.read_text()
    assert "context_length: 8192" in text
    demo.write_text(
        text.replace("context_length: 8192", "context_length: 16384").replace(
            "\nenv:\n", "\nenv:\n  HF_TOKEN: {from_env: HF_TOKEN}\n"
        )
    )
    for limit in ("2048", "65536"):
        out, err = io.StringIO(), io.StringIO()
        argv = ["--profiles", str(profiles), "diff", "--format", "markdown"]
        code = main([*argv, "--comment-limit", limit], out=out, err=err)
        assert code == ExitCode.CHANGES, err.getvalue()
        document = out.getvalue().rstrip("\n")
        bodies = document.split(f"\n{markdown.SEPARATOR}\n")
        _check_bodies(bodies, int(limit))
        assert secret not in out.getvalue() + err.getvalue()
        assert "| `demo` | **restart** |" in bodies[0]
        assert "- --context-length 8192\n+ --context-length 16384" in document
        assert "+ env HF_TOKEN=<redacted: from_env HF_TOKEN>" in document


def test_a_masked_value_stays_masked_in_a_cell() -> None:
    change = review.FieldChange("api_key", "raw-one", verify.ABSENT, review.ARGTABLE, secret=True)
    deployment = review.DeploymentChange(
        "s", None, review.RESTART, ("api_key",), None, None, (change,)
    )
    section = markdown.deployment(deployment).text()
    assert "raw-one" not in section
    assert "| `api_key` | `<secret>` | *(unset)* |" in section
