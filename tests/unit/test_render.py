"""Rendering: argv spelled for the target version, values as argparse reads them, no shell."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from orchestrator import render
from orchestrator.errors import RenderError
from orchestrator.model import SecretRef, ServerCommand
from tests.conftest import ProfileDir

HEAD = "host: gpu-1\nmodel: {path: /models/m}\n"


def _plan(profile_dir: ProfileDir, body: str, version: str = "0.5.11") -> ServerCommand:
    profile_dir.write("p", f'sglang: "{version}"\n' + HEAD + body)
    loaded = profile_dir.store().load("p")
    return render.render(loaded.profile, loaded.table)


def _flags(plan: ServerCommand) -> list[object]:
    return list(plan.argv[3:])


def test_render_program_and_structured_fields_first(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "port: 31000\nbind: 0.0.0.0\nargs: {context_length: 8192}\n")
    assert plan.argv == (
        "/opt/venv/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/models/m",
        "--host",
        "0.0.0.0",
        "--port",
        "31000",
        "--context-length",
        "8192",
    )
    assert plan.cwd == "/data/orch/p"


def test_render_serve_launcher_uses_the_venv_console_script(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "launcher: serve\n")
    assert plan.argv[:2] == ("/opt/venv/bin/sglang", "serve")


def test_render_switches_true_is_flag_false_and_null_omitted(profile_dir: ProfileDir) -> None:
    plan = _plan(
        profile_dir,
        "args: {trust_remote_code: true, skip_server_warmup: false, enable_metrics: null}\n",
    )
    flags = _flags(plan)
    assert "--trust-remote-code" in flags
    assert "--skip-server-warmup" not in flags
    assert "--enable-metrics" not in flags


def test_render_renamed_flag_is_spelled_for_the_target_version(profile_dir: ProfileDir) -> None:
    old = _plan(profile_dir, "args: {mamba_radix_cache_strategy: extra_buffer}\n", "0.5.11")
    new = _plan(profile_dir, "args: {mamba_scheduler_strategy: extra_buffer}\n", "0.5.23")
    assert tuple(_flags(old)[-2:]) == ("--mamba-scheduler-strategy", "extra_buffer")
    assert tuple(_flags(new)[-2:]) == ("--mamba-radix-cache-strategy", "extra_buffer")
    assert new.argtable_version == "0.5.23"


def test_render_cuda_graph_max_bs_follows_its_rename(profile_dir: ProfileDir) -> None:
    new = _plan(profile_dir, "args: {cuda_graph_max_bs: 512}\n", "0.5.23")
    assert tuple(_flags(new)[-2:]) == ("--cuda-graph-max-bs-decode", "512")


def test_render_lists_follow_nargs(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "args: {cuda_graph_bs: [1, 2, 4, 8]}\n")
    assert tuple(_flags(plan)[-5:]) == ("--cuda-graph-bs", "1", "2", "4", "8")


def test_render_mapping_becomes_compact_json(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "args: {json_model_override_args: {rope_scaling: {factor: 2.0}}}\n")
    assert tuple(_flags(plan)[-2:]) == (
        "--json-model-override-args",
        '{"rope_scaling":{"factor":2.0}}',
    )


def test_render_value_starting_with_dash_is_attached(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "args: {tokenizer_path: '--weird'}\n")
    assert _flags(plan)[-1] == "--tokenizer-path=--weird"


def test_render_floats_keep_their_shortest_form(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "args: {mem_fraction_static: 0.92}\n")
    assert tuple(_flags(plan)[-2:]) == ("--mem-fraction-static", "0.92")


def test_render_secret_stays_a_reference_and_display_never_holds_it(
    profile_dir: ProfileDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_TOKEN", "hf_supersecret")
    plan = _plan(profile_dir, "env: {HF_TOKEN: {from_env: MY_TOKEN}}\n")
    assert plan.env["HF_TOKEN"] == SecretRef("MY_TOKEN")
    shown = render.format_command(plan) + render.command_json(plan) + render.launcher_script(plan)
    assert "hf_supersecret" not in shown
    assert 'HF_TOKEN="${MY_TOKEN:?MY_TOKEN is not set}"' in render.format_command(plan)
    assert '"HF_TOKEN": "<redacted: from_env MY_TOKEN>"' in render.command_json(plan)


def test_render_abstract_profile_is_refused(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", "abstract: true\nargs: {context_length: 8}\n")
    loaded = profile_dir.store().load("base")
    with pytest.raises(RenderError, match="abstract"):
        render.render(loaded.profile, loaded.table)


def test_render_one_line_command_splits_back_to_env_and_argv(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "env: {A: 'x y', B: \"it's\"}\nargs: {tokenizer_path: 'a b'}\n")
    words = shlex.split(render.format_command(plan, multiline=False))
    assert words[:2] == ["A=x y", "B=it's"]
    assert tuple(words[2:]) == plan.argv


def test_render_multiline_command_puts_each_flag_on_its_own_line(profile_dir: ProfileDir) -> None:
    plan = _plan(profile_dir, "args: {context_length: 8192, trust_remote_code: true}\n")
    lines = render.format_command(plan).splitlines()
    assert lines[0] == "/opt/venv/bin/python -m sglang.launch_server \\"
    assert lines[-2:] == ["    --context-length 8192 \\", "    --trust-remote-code"]


def test_the_launcher_script_expands_a_home_workdir_as_orch_does(
    profile_dir: ProfileDir, tmp_path: Path
) -> None:
    """``~`` in a workdir is the login user's home (orch expands it itself); the script must
    not create a literal ``./~`` directory."""
    profile_dir.write(
        "hosts.yaml",
        "hosts:\n  box:\n    address: 10.0.0.7\n    python: /bin/true\n    workdir: ~/orch work\n",
    )
    profile_dir.write("p", "host: box\nmodel: {path: /models/m}\nsglang: '0.5.11'\n")
    loaded = profile_dir.store().load("p")
    script = render.launcher_script(render.render(loaded.profile, loaded.table))
    assert "\"$HOME\"/'orch work/p'" in script
    home, elsewhere = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    elsewhere.mkdir()
    (tmp_path / "launch.sh").write_text(script)
    subprocess.run(
        ["bash", str(tmp_path / "launch.sh")],
        cwd=elsewhere,
        check=True,
        timeout=30,
        env={"PATH": "/usr/bin:/bin", "HOME": str(home)},
    )
    assert (home / "orch work" / "p").is_dir()
    assert not (elsewhere / "~").exists()
