"""The CLI: output formats, one-line errors with hints, distinct exit codes."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.conftest import EXAMPLES, ProfileDir, copy_examples


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


def test_cli_render_json_holds_the_incident_flags_in_0511_spelling(shipped: Path) -> None:
    code, out, _ = _run(["--profiles", str(shipped), "render", "qwen36-mtp-b200", "--json"])
    assert code == ExitCode.OK
    document = json.loads(out)
    assert set(document) == {"argv", "env"}
    argv = document["argv"]
    index = argv.index("--mamba-scheduler-strategy")
    assert argv[index + 1] == "extra_buffer"
    assert "--mamba-radix-cache-strategy" not in argv
    assert document["env"]["SGLANG_ENABLE_SPEC_V2"] == "1"
    for flag, value in [
        ("--speculative-algorithm", "EAGLE"),
        ("--speculative-num-steps", "3"),
        ("--speculative-eagle-topk", "1"),
        ("--speculative-num-draft-tokens", "4"),
        ("--max-mamba-cache-size", "24"),
        ("--mamba-full-memory-ratio", "0.4"),
        ("--mem-fraction-static", "0.92"),
        ("--context-length", "8192"),
        ("--reasoning-parser", "qwen3"),
        ("--port", "30000"),
    ]:
        assert argv[argv.index(flag) + 1] == value, flag
    assert "--trust-remote-code" in argv


def test_cli_render_same_profile_on_0523_uses_the_new_flag_name(shipped: Path) -> None:
    (shipped / "b200-new.yaml").write_text('extends: qwen36-mtp-b200\nsglang: "0.5.23"\n')
    code, out, err = _run(["--profiles", str(shipped), "render", "b200-new", "--json"])
    assert code == ExitCode.OK
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--mamba-radix-cache-strategy") + 1] == "extra_buffer"
    assert "--mamba-scheduler-strategy" not in argv
    assert "orch: warning: " in err
    assert "write mamba_radix_cache_strategy" in err


def test_cli_validate_misspelt_argument_fails_with_suggestion_and_config_code(
    shipped: Path,
) -> None:
    (shipped / "typo.yaml").write_text(
        "extends: qwen36-mtp-b200\nargs:\n  mamba_scheduler_stratgy: extra_buffer\n"
    )
    code, out, err = _run(["--profiles", str(shipped), "validate"])
    assert code == ExitCode.CONFIG
    assert int(code) == 3
    assert (
        f"orch: error: {shipped}/typo.yaml:3:3: args.mamba_scheduler_stratgy: "
        "unknown SGLang 0.5.11 argument\n"
        "orch: hint: did you mean mamba_scheduler_strategy?\n"
    ) in err
    assert "ok  qwen36-mtp-b200" in out  # the others still validate


def test_cli_validate_all_shipped_profiles_pass(shipped: Path) -> None:
    code, out, err = _run(["--profiles", str(shipped), "validate", "--strict"])
    assert code == ExitCode.OK, err
    assert {line.split()[1] for line in out.splitlines()} == set(EXAMPLES)


def test_cli_validate_named_profiles_only(shipped: Path) -> None:
    code, out, _ = _run(["--profiles", str(shipped), "validate", "demo"])
    assert code == ExitCode.OK
    assert out.startswith("ok  demo")
    assert len(out.splitlines()) == 1


def test_cli_missing_profile_lists_the_available_ones(shipped: Path) -> None:
    code, _, err = _run(["--profiles", str(shipped), "render", "qwen36-mtp-b300"])
    assert code == ExitCode.CONFIG
    assert err.splitlines() == [
        f"orch: error: no profile named 'qwen36-mtp-b300' in {shipped}",
        "orch: hint: did you mean qwen36-mtp-b200? available: demo, qwen35-397b-2x8-h200, "
        "qwen36-27b, qwen36-mtp-b200, qwen36-mtp-h200, qwen36-mtp-rtxpro6000-tp4",
    ]


def test_cli_render_abstract_profile_is_a_render_error(shipped: Path) -> None:
    code, _, err = _run(["--profiles", str(shipped), "render", "qwen36-27b"])
    assert code == ExitCode.RENDER
    assert "abstract" in err


def test_cli_render_script_is_a_bash_script(shipped: Path) -> None:
    code, out, _ = _run(["--profiles", str(shipped), "render", "qwen36-mtp-b200", "--script"])
    assert code == ExitCode.OK
    assert out.startswith("#!/usr/bin/env bash\n")
    assert "exec /opt/venvs/sglang-0.5.11/bin/python -m sglang.launch_server " in out
    assert "export SGLANG_ENABLE_SPEC_V2=1\n" in out


def test_cli_usage_error_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["render"])
    assert caught.value.code == ExitCode.USAGE
    assert "the following arguments are required: PROFILE" in capsys.readouterr().err


def test_cli_profiles_dir_is_found_above_the_working_directory(
    profile_dir: ProfileDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile_dir.write("mine", 'host: gpu-1\nmodel: {path: /m}\nsglang: "0.5.11"\n')
    nested = profile_dir.root.parent / "deploy" / "sub"
    nested.mkdir(parents=True)
    monkeypatch.chdir(nested)
    monkeypatch.delenv("ORCH_PROFILES", raising=False)
    code, out, _ = _run(["validate"])
    assert code == ExitCode.OK
    assert out.startswith("ok  mine")


def test_cli_profiles_env_var_names_the_directory(
    profile_dir: ProfileDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    profile_dir.write("envpicked", 'host: gpu-1\nmodel: {path: /m}\nsglang: "0.5.11"\n')
    monkeypatch.setenv("ORCH_PROFILES", str(profile_dir.root))
    code, out, _ = _run(["validate"])
    assert code == ExitCode.OK
    assert "envpicked" in out


def test_cli_secret_value_never_printed(
    profile_dir: ProfileDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_do_not_print_me")
    profile_dir.write(
        "s",
        'sglang: "0.5.11"\nhost: gpu-1\nmodel: {path: /m}\n'
        "env: {HF_TOKEN: {from_env: HF_TOKEN}}\nargs: {api_key: {from_env: HF_TOKEN}}\n",
    )
    outputs = ""
    for form in ([], ["--json"], ["--script"], ["--one-line"]):
        code, out, err = _run(["--profiles", str(profile_dir.root), "render", "s", *form])
        assert code == ExitCode.OK
        outputs += out + err
    assert "hf_do_not_print_me" not in outputs
    assert "<redacted: from_env HF_TOKEN>" in outputs


# -- one bad file never breaks the others (issue 10 §6) ---------------------------------------------

_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{name}: &{name} [{', '.join([f'*{before}'] * 9)}]\n"
    for before, name in zip("abcdefgh", "bcdefghi", strict=True)
)


def _bad_files(root: Path) -> None:
    (root / "bomb.yaml").write_text(_BOMB)
    (root / "loop.yaml").write_text("host: gpu-1\nargs: &a [*a]\n")
    (root / "nan.yaml").write_text(
        'sglang: "0.5.11"\nhost: gpu-1\nmodel: {path: /m}\nrestart: {delay_s: .inf}\n'
    )
    (root / "My Profile.yaml").write_text("host: gpu-1\n")
    (root / "old.yml").write_text("host: gpu-1\n")


def test_cli_validate_reports_every_bad_file_and_checks_the_others(
    profile_dir: ProfileDir,
) -> None:
    profile_dir.write("good", 'sglang: "0.5.11"\nhost: gpu-1\nmodel: {path: /m}\n')
    _bad_files(profile_dir.root)
    code, out, err = _run(["--profiles", str(profile_dir.root), "validate"])
    assert code == ExitCode.CONFIG
    assert out == "ok  good  (SGLang 0.5.11, host gpu-1)\n"
    root = profile_dir.root
    for line in (
        f"orch: error: {root}/My Profile.yaml: not a profile name: 'My Profile'",
        f"orch: error: {root}/old.yml: not a profile: orch reads <name>.yaml files only",
        f"orch: error: {root}/bomb.yaml:6:8: f[0]: the document expands to more than 100000 values",
        f"orch: error: {root}/loop.yaml:2:11: args[0]: alias *a is inside the value &a names",
        f"orch: error: {root}/nan.yaml:4:20: restart.delay_s: expected a finite number, got .inf",
        "orch: 3 of 4 profile(s) invalid, 2 file(s) that are not profiles",
    ):
        assert line in err, line
    assert "Traceback" not in err


def test_cli_validate_names_an_invalid_inventory_once(profile_dir: ProfileDir) -> None:
    profile_dir.write("hosts.yaml", "hosts:\n  gpu-1: {address: a, python: /p, workdir: data}\n")
    profile_dir.write("one", "host: gpu-1\nmodel: {path: /m}\n")
    profile_dir.write("two", "host: gpu-1\nmodel: {path: /m}\n")
    code, out, err = _run(["--profiles", str(profile_dir.root), "validate"])
    assert code == ExitCode.CONFIG
    assert out == ""
    assert err.count("hosts.gpu-1.workdir: expected an absolute path or ~/...") == 1
    assert f"orch: error: {profile_dir.root}/one.yaml: not checked: hosts.yaml is invalid" in err
    assert err.endswith("orch: 2 of 2 profile(s) invalid, hosts.yaml invalid\n")


def test_cli_profiles_lists_invalid_files_as_rows_and_exits_config(
    profile_dir: ProfileDir,
) -> None:
    profile_dir.write("good", "host: gpu-1\nmodel: {path: /m}\ndescription: fine\n")
    _bad_files(profile_dir.root)
    code, out, err = _run(["--profiles", str(profile_dir.root), "profiles"])
    assert code == ExitCode.CONFIG
    rows = {line.split()[0]: line for line in out.splitlines()[1:]}
    assert rows["good"].split() == ["good", "gpu-1", "fine"]
    assert "INVALID: " in rows["bomb"]
    assert "it would never end" in rows["loop"]
    assert "expected a finite number" in rows["nan"]
    assert "old.yml" in rows
    assert any(line.startswith("My Profile.yaml ") for line in out.splitlines())
    assert err == "orch: 5 invalid; `orch validate` shows every error\n"


def test_cli_status_shows_an_invalid_profile_as_a_row_and_asks_the_others(
    profile_dir: ProfileDir,
) -> None:
    profile_dir.write(
        "hosts.yaml", "hosts:\n  dead: {address: 127.0.0.1, port: 1, python: /p, workdir: /w}\n"
    )
    profile_dir.write("good", 'sglang: "0.5.11"\nhost: dead\nmodel: {path: /m}\n')
    profile_dir.write("base", "abstract: true\nmodel: {path: /m}\n")
    profile_dir.write("nan", "host: dead\nmodel: {path: /m}\nrestart: {delay_s: .nan}\n")
    code, out, _ = _run(["--profiles", str(profile_dir.root), "status", "--json"])
    rows = json.loads(out)
    assert [(row["profile"], row["host"]) for row in rows] == [("good", "dead"), ("nan", "-")]
    assert rows[0]["error"] == "dead: connection to 127.0.0.1:1 refused"
    assert rows[1]["error"] == (
        f"{profile_dir.root}/nan.yaml:3:20: restart.delay_s: expected a finite number, got .nan"
    )
    assert code == ExitCode.CONFIG  # every profile listed: an invalid file fails, a host not
    named, _, _ = _run(["--profiles", str(profile_dir.root), "status", "good"])
    assert named == ExitCode.CONNECT  # a named deployment that cannot be asked: its error


def test_cli_status_in_a_fresh_clone_lists_the_examples_and_succeeds(
    shipped: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The example profiles name hosts that do not resolve: rows, not a failed command. A home
    of its own: the demo's workdir (~/.local/state/orch) holds a deployment once `make demo`
    ran on this machine."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    code, out, _ = _run(["--profiles", str(shipped), "status"])
    assert code == ExitCode.OK
    rows = {line.split()[0]: line.split()[2] for line in out.splitlines()[1:]}
    assert rows["qwen36-mtp-b200"] == "UNREACHABLE"
    assert rows["demo"] == "-"


def test_every_subcommand_has_a_description_and_an_example() -> None:
    import argparse

    from orchestrator.cli.arguments import parser

    (commands,) = [a for a in parser()._actions if isinstance(a, argparse._SubParsersAction)]
    for name, sub in commands.choices.items():
        shown = sub.format_help()
        assert sub.description, name
        assert "example:\n  orch " in shown, name


def test_help_shows_the_defaults_that_say_something(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["logs", "--help"])
    shown = capsys.readouterr().out
    assert "(default: 100)" in shown
    assert "(default: None)" not in shown
    assert "(default: False)" not in shown
