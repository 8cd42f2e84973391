"""orch upgrade without SGLang: the spelling layer (argument tables), the edits in place, what
blocks an upgrade and what --write changes. The plans of both releases run in
tests/sglang_real/test_upgrade_real.py."""

from __future__ import annotations

import dataclasses
import io
import json
import sys
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.effective import upgrade, upgrade_text
from orchestrator.effective.upgrade import Respelling
from orchestrator.errors import ExitCode
from tests.conftest import copy_examples
from tests.e2e.conftest import Outcome


@pytest.fixture
def profiles(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("ORCH_SGLANG_VENV_CACHE", str(tmp_path / "no-venvs"))  # no plans here
    return copy_examples(tmp_path / "profiles")


def orch(profiles: Path, *argv: str) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(profiles), *argv], out=out, err=err)
    return Outcome(code, out.getvalue(), err.getvalue())


def test_respell_keeps_comments_quotes_and_everything_else() -> None:
    text = (
        "# the incident's profile\n"
        "args:\n"
        "  mamba_scheduler_strategy: extra_buffer  # must reach argparse\n"
        '  "cuda_graph_max_bs": 32\n'
        "pin: [mamba_scheduler_strategy]\n"
    )
    edits = [
        Respelling(
            "args.mamba_scheduler_strategy",
            "mamba_scheduler_strategy",
            "mamba_radix_cache_strategy",
            "p.yaml",
            3,
            3,
            "",
        ),
        Respelling(
            "args.cuda_graph_max_bs",
            "cuda_graph_max_bs",
            "cuda_graph_max_bs_decode",
            "p.yaml",
            4,
            3,
            "",
        ),
        Respelling(
            "pin[0]", "mamba_scheduler_strategy", "mamba_radix_cache_strategy", "p.yaml", 5, 7, ""
        ),
    ]
    assert upgrade_text.respell_text(text, edits) == (
        "# the incident's profile\n"
        "args:\n"
        "  mamba_radix_cache_strategy: extra_buffer  # must reach argparse\n"
        '  "cuda_graph_max_bs_decode": 32\n'
        "pin: [mamba_radix_cache_strategy]\n"
    )


def test_respell_refuses_a_file_that_changed_under_it() -> None:
    edit = Respelling("args.a", "a_b", "c_d", "p.yaml", 2, 3, "")
    with pytest.raises(upgrade_text.EditError):
        upgrade_text.respell_text("args:\n  other: 1\n", [edit])


def test_set_version_replaces_in_place_or_adds_after_extends() -> None:
    assert upgrade_text.set_version_text(
        '# x\nsglang: "0.5.11"  # the host\nhost: h\n', "0.5.23"
    ) == ('# x\nsglang: "0.5.23"  # the host\nhost: h\n')
    assert upgrade_text.set_version_text("sglang: 0.5.11\n", "0.5.23") == 'sglang: "0.5.23"\n'
    assert upgrade_text.set_version_text("# c\nextends: base\nhost: h\n", "0.5.23") == (
        '# c\nextends: base\nsglang: "0.5.23"\nhost: h\n'
    )
    assert upgrade_text.set_version_text("# c\n\nhost: h\n", "0.5.23") == (
        '# c\n\nsglang: "0.5.23"\nhost: h\n'
    )


def test_upgrade_reports_the_rename_and_the_edits_and_says_why_no_plan_ran(profiles: Path) -> None:
    result = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.23", "--json")
    assert result.code == ExitCode.OK, result.err
    document = json.loads(result.out)
    assert [(r["key_path"], r["new"]) for r in document["respellings"]] == [
        ("args.mamba_scheduler_strategy", "mamba_radix_cache_strategy"),
        ("pin[0]", "mamba_radix_cache_strategy"),
    ]
    assert (
        "renamed mamba_scheduler_strategy -> mamba_radix_cache_strategy in SGLang 0.5.14"
        in (document["respellings"][0]["why"])
    )
    assert document["effective"] is None
    assert any("scripts/build-sglang-venv.sh 0.5.23" in note for note in document["plan_notes"])
    assert document["written"] == []
    before = (profiles / "qwen36-mtp-b200.yaml").read_text()
    text = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.23")
    assert "-  mamba_scheduler_strategy: extra_buffer" in text.out
    assert "+  mamba_radix_cache_strategy: extra_buffer" in text.out
    assert (profiles / "qwen36-mtp-b200.yaml").read_text() == before  # nothing without --write


def test_upgrade_write_changes_only_the_renamed_keys_and_the_version(profiles: Path) -> None:
    path = profiles / "qwen36-mtp-b200.yaml"
    before = path.read_text().splitlines()
    sibling = orch(profiles, "render", "qwen36-mtp-h200", "--json").out
    result = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.23", "--write")
    assert result.code == ExitCode.OK, result.err
    assert "no lock file: none written" in result.out
    after = path.read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert changed == [
        ('sglang: "0.5.11"', 'sglang: "0.5.23"'),
        ("  mamba_scheduler_strategy: extra_buffer", "  mamba_radix_cache_strategy: extra_buffer"),
        ("  - mamba_scheduler_strategy", "  - mamba_radix_cache_strategy"),
    ]
    # the upgraded profile validates and renders for the new release
    rendered = orch(profiles, "render", "qwen36-mtp-b200", "--json")
    assert rendered.code == ExitCode.OK, rendered.err
    argv = json.loads(rendered.out)["argv"]
    assert argv[argv.index("--mamba-radix-cache-strategy") + 1] == "extra_buffer"
    # the profile built on it (qwen36-mtp-h200) inherited `sglang:` from it: it stays on its
    # release, now written in its own file, and launches exactly what it launched
    assert 'sglang: "0.5.11"' in (profiles / "qwen36-mtp-h200.yaml").read_text().splitlines()
    assert orch(profiles, "render", "qwen36-mtp-h200", "--json").out == sibling
    assert "qwen36-mtp-h200 (their launches do not change" in result.out
    assert orch(profiles, "validate").code == ExitCode.OK


def test_a_field_the_release_lacks_blocks_the_upgrade_and_nothing_is_written(
    profiles: Path,
) -> None:
    path = profiles / "qwen36-mtp-b200.yaml"
    text = path.read_text().replace(
        "  mem_fraction_static: 0.92\n",
        "  mem_fraction_static: 0.92\n  enable_nan_detection: true\n",
    )
    path.write_text(text)
    result = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.23", "--write")
    assert result.code == ExitCode.UPGRADE
    assert "error: args.enable_nan_detection: SGLang 0.5.23 has no --enable-nan-detection" in (
        result.out
    )
    assert "gone since 0.5." in result.out
    assert "blocked: nothing written" in result.out
    assert path.read_text() == text


def test_write_refuses_when_the_lock_cannot_be_refreshed(profiles: Path) -> None:
    path = profiles / "qwen36-mtp-b200.yaml"
    before = path.read_text()
    lock = '{"format": "orch.lock/1", "sglang": "0.5.11", "effective": {}}\n'  # a lock's shape
    (profiles / "qwen36-mtp-b200.lock.json").write_text(lock)
    result = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.23", "--write")
    assert result.code == ExitCode.UPGRADE
    assert "has a lock file, and the upgrade cannot refresh it" in result.err
    assert "--to-sglang" in result.err
    assert path.read_text() == before


def test_upgrade_to_a_release_without_a_table_names_the_command(profiles: Path) -> None:
    result = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.99")
    assert result.code == ExitCode.CONFIG
    assert "orch has no argument table for SGLang 0.5.99" in result.err
    assert 'make argtables VERSIONS="0.5.99"' in result.err


def test_upgrade_needs_a_pinned_release(profiles: Path) -> None:
    result = orch(profiles, "upgrade", "demo", "--to", "0.5.23")
    assert result.code == ExitCode.USAGE  # demo is on 0.5.23 already
    (profiles / "free.yaml").write_text("host: local\nmodel: {path: /m}\n")
    result = orch(profiles, "upgrade", "free", "--to", "0.5.23")
    assert result.code == ExitCode.CONFIG
    assert "names no `sglang:` version" in result.err


def test_a_profile_spelled_with_the_new_name_keeps_it_on_an_older_release(profiles: Path) -> None:
    """render spells mamba_radix_cache_strategy as 0.5.11's --mamba-scheduler-strategy: moving
    the 0.5.23 profile back edits nothing but `sglang:`."""
    result = orch(profiles, "upgrade", "qwen36-mtp-rtxpro6000-tp4", "--to", "0.5.11", "--json")
    assert result.code == ExitCode.OK, result.err
    document = json.loads(result.out)
    assert document["respellings"] == []
    assert document["findings"] == []
    assert [Path(f).name for f in document["files"]] == ["qwen36-mtp-rtxpro6000-tp4.yaml"]


def test_upgrade_without_a_model_config_reports_the_spelling_and_reaches_no_host(
    profiles: Path,
) -> None:
    # SGLang venvs of both releases are at hand, the model's directory is on the profile's host
    # (which resolves nowhere here): the spelling report, and a note saying what would plan
    hosts = profiles / "hosts.yaml"
    hosts.write_text(hosts.read_text().replace("b200-1.example.net", "b200-1.orch-test.invalid"))
    python = sys.executable  # never run: the plans stop before starting either
    result = orch(
        profiles,
        "upgrade",
        "qwen36-mtp-b200",
        "--to",
        "0.5.23",
        "--from-sglang",
        python,
        "--to-sglang",
        python,
        "--json",
    )
    assert result.code == ExitCode.OK, result.err
    document = json.loads(result.out)
    assert document["respellings"]
    assert any("--model-config FILE" in note for note in document["plan_notes"])


# -- switches replaced by a value of another field (disable_piecewise_cuda_graph) ---------------


def _with_switch(profiles: Path, lines: str, pin: str = "") -> Path:
    """A profile on SGLang 0.5.11, of its own file, that writes ``lines`` under args."""
    path = profiles / "piecewise.yaml"
    path.write_text(
        f'extends: qwen36-27b\nsglang: "0.5.11"\nhost: b200-1\ngpu: {{type: B200, devices: [0]}}\n'
        f"{pin}args:\n{lines}"
    )
    return path


def test_a_replaced_switch_is_rewritten_as_the_value_it_became(profiles: Path) -> None:
    path = _with_switch(profiles, "  disable_piecewise_cuda_graph: true  # the incident\n")
    result = orch(profiles, "upgrade", "piecewise", "--to", "0.5.23", "--json")
    assert result.code == ExitCode.OK, result.err + result.out
    document = json.loads(result.out)
    [replaced] = document["replacements"]
    assert (replaced["old"], replaced["new"], replaced["value"]) == (
        "disable_piecewise_cuda_graph",
        "cuda_graph_backend_prefill",
        "disabled",
    )
    assert "SGLang 0.5.14 made --disable-piecewise-cuda-graph a shorthand" in replaced["why"]
    assert document["respellings"] == []  # a replacement, not a rename
    assert document["findings"] == []
    text = orch(profiles, "upgrade", "piecewise", "--to", "0.5.23")
    assert (
        "args.disable_piecewise_cuda_graph: replaced -> cuda_graph_backend_prefill: disabled"
        in (text.out)
    )
    assert orch(profiles, "upgrade", "piecewise", "--to", "0.5.23", "--write").code == ExitCode.OK
    assert path.read_text() == (
        'extends: qwen36-27b\nsglang: "0.5.23"\nhost: b200-1\ngpu: {type: B200, devices: [0]}\n'
        "args:\n  cuda_graph_backend_prefill: disabled  # the incident\n"
    )
    rendered = orch(profiles, "render", "piecewise", "--json")
    assert rendered.code == ExitCode.OK, rendered.err
    argv = json.loads(rendered.out)["argv"]
    assert argv[argv.index("--cuda-graph-backend-prefill") + 1] == "disabled"
    assert "--disable-piecewise-cuda-graph" not in argv


def test_a_false_replaced_switch_is_dropped(profiles: Path) -> None:
    path = _with_switch(profiles, "  disable_piecewise_cuda_graph: false\n")
    result = orch(profiles, "upgrade", "piecewise", "--to", "0.5.23", "--write", "--json")
    assert result.code == ExitCode.OK, result.err + result.out
    assert json.loads(result.out)["replacements"][0]["dropped"]
    assert path.read_text().endswith(
        'sglang: "0.5.23"\nhost: b200-1\ngpu: {type: B200, devices: [0]}\nargs: {}\n'
    )
    assert orch(profiles, "validate", "piecewise").code == ExitCode.OK


def test_a_replaced_switch_on_a_release_that_still_reads_it_is_rewritten_too(
    profiles: Path,
) -> None:
    _with_switch(profiles, "  disable_piecewise_cuda_graph: true\n")
    document = json.loads(orch(profiles, "upgrade", "piecewise", "--to", "0.5.17", "--json").out)
    assert [r["value"] for r in document["replacements"]] == ["disabled"]  # deprecated there
    document = json.loads(orch(profiles, "upgrade", "piecewise", "--to", "0.5.13", "--json").out)
    assert document["replacements"] == []  # still its own switch


@pytest.mark.parametrize(
    ("lines", "pin", "said"),
    [
        (
            "  disable_piecewise_cuda_graph: true\n",
            "pin: [disable_piecewise_cuda_graph]\n",
            "pinned switch disable_piecewise_cuda_graph is replaced by "
            "cuda_graph_backend_prefill: disabled",
        ),
        (
            "  enforce_piecewise_cuda_graph: true\n",
            "",
            "SGLang 0.5.23's --cuda-graph-backend-prefill has no tc_piecewise",
        ),
        (
            "  disable_piecewise_cuda_graph: true\n  enable_breakable_cuda_graph: true\n",
            "",
            "already sets cuda_graph_backend_prefill: disabled",
        ),
    ],
)
def test_a_replacement_orch_cannot_make_alone_blocks_and_says_what_to_do(
    profiles: Path, lines: str, pin: str, said: str
) -> None:
    path = _with_switch(profiles, lines, pin)
    before = path.read_text()
    result = orch(profiles, "upgrade", "piecewise", "--to", "0.5.23", "--write")
    assert result.code == ExitCode.UPGRADE, result.err + result.out
    assert said in result.out
    assert "hint:" in result.out
    assert "blocked: nothing written" in result.out
    assert path.read_text() == before


def test_a_replaced_switch_in_a_shared_base_blocks_the_upgrade(profiles: Path) -> None:
    base = profiles / "qwen36-mtp-b200.yaml"
    text = base.read_text().replace(
        "  mem_fraction_static: 0.92\n",
        "  mem_fraction_static: 0.92\n  disable_piecewise_cuda_graph: true\n",
    )
    base.write_text(text)
    result = orch(profiles, "upgrade", "qwen36-mtp-b200", "--to", "0.5.23", "--write")
    assert result.code == ExitCode.UPGRADE, result.err + result.out
    assert (
        "qwen36-mtp-h200 is built on a file this upgrade edits, and would no longer validate"
        in (result.out)
    )
    assert base.read_text() == text


def test_replacing_edits_keep_layout_and_refuse_a_line_that_holds_more() -> None:
    edit = upgrade.Replacing(
        "args.disable_piecewise_cuda_graph",
        "disable_piecewise_cuda_graph",
        "cuda_graph_backend_prefill",
        None,
        "p.yaml",
        1,
        8,
        "",
    )
    with pytest.raises(upgrade_text.EditError):
        upgrade_text.respell_text(
            "args: {disable_piecewise_cuda_graph: false, tp_size: 2}\n", [], [edit]
        )
    flow = dataclasses.replace(edit, value="disabled")
    assert upgrade_text.respell_text(
        "args: {disable_piecewise_cuda_graph: true, tp_size: 2}\n", [], [flow]
    ) == ("args: {cuda_graph_backend_prefill: disabled, tp_size: 2}\n")
