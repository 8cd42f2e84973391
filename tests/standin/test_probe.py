"""orch's planning probe on a host whose ``sglang`` is the stand-in (NOT SGLang): the probe runs
the stand-in's ``sglang.srt.server_args`` and ``sglang.srt.plugins`` by the path it runs SGLang's,
and only labels the answer ``"standin": true``."""

from __future__ import annotations

import io
import json
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.standin.conftest import STANDIN, Launcher, write_model
from tests.standin.sglang_plugin import (
    PLUGIN_CHUNKED_PREFILL,
    PLUGIN_FLAG,
    PLUGIN_NAME,
    expected_hook,
    run_probe,
    write_plugin,
)

SPEC_ARGS = [
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "8",
]


def standin_env(version: str, *extra_paths: Path, **env: str) -> dict[str, str]:
    path = ":".join(str(p) for p in (STANDIN, *extra_paths))
    return {"PYTHONPATH": path, "ORCH_STANDIN_VERSION": version, **env}


def test_the_standin_answers_0_5_11_through_traced_post_init_writes(tmp_path: Path) -> None:
    model = write_model(tmp_path / "Qwen3.6-27B")
    answer = run_probe(
        sys.executable, tmp_path, ["--model-path", str(model), *SPEC_ARGS], standin_env("0.5.11")
    )
    assert (answer["standin"], answer["sglang_version"]) == (True, "0.5.11")
    assert answer["mode"] == "__post_init__"
    error = answer["error"]
    assert (error["stage"], error["type"]) == ("resolve", "ValueError")
    assert "when using --mamba-scheduler-strategy no_buffer.To use radix cache" in error["message"]
    assert error["raised_in"]["file"] == "sglang/_standin/resolve.py"
    # the write before the raise, traced to the stand-in's rule that made it
    (write,) = answer["provenance"]["mamba_scheduler_strategy"]
    assert (write["source"], write["value"]) == ("mamba", "no_buffer")
    assert answer["raw"]["mamba_scheduler_strategy"] == "auto"
    assert (answer["plugins"], answer["plugin_hooks"]) == ([], [])


def test_the_standin_answers_0_5_23_with_declared_overrides(tmp_path: Path) -> None:
    model = write_model(tmp_path / "Qwen3.6-27B")
    args = [
        "--model-path",
        str(model),
        *SPEC_ARGS,
        "--api-key",
        "sekrit",
        "--watermark-config",
        '{"key": "wm-sekrit"}',
    ]
    answer = run_probe(sys.executable, tmp_path, args, standin_env("0.5.23"))
    assert answer["ok"] is True, answer.get("error")
    assert (answer["standin"], answer["mode"]) == (True, "prepare_server_args + resolve_once")
    assert answer["raw"]["speculative_num_draft_tokens"] == 8
    assert answer["effective"]["speculative_num_draft_tokens"] == 4
    assert answer["provenance"]["speculative_num_draft_tokens"] == [
        {"source": "standin:eagle_family", "value": 4}
    ]
    assert any("speculative_num_draft_tokens is adjusted" in line for line in answer["logs"])
    # as SGLang 0.5.23: only the watermark configuration is masked (redact_watermark_command_line)
    assert "--api-key sekrit" in answer["launch_command"]
    assert "--watermark-config <redacted>" in answer["launch_command"]
    assert "wm-sekrit" not in answer["launch_command"]


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_a_plugin_on_the_host_is_planned_with_the_standin(version: str, tmp_path: Path) -> None:
    plugins = write_plugin(tmp_path / "plugins")
    model = write_model(tmp_path / "Qwen3.6-27B")
    args = ["--model-path", str(model), PLUGIN_FLAG]
    answer = run_probe(sys.executable, tmp_path, args, standin_env(version, plugins))
    assert answer["ok"] is True, answer.get("error")
    assert answer["plugins"] == [PLUGIN_NAME]
    assert answer["plugin_hooks"] == [expected_hook()]
    assert answer["raw"]["chunked_prefill_size"] == PLUGIN_CHUNKED_PREFILL
    assert answer["effective"]["chunked_prefill_size"] == PLUGIN_CHUNKED_PREFILL

    # SGLANG_PLUGINS names the plugins to load: another name leaves this one out
    env = standin_env(version, plugins, SGLANG_PLUGINS="someone_else")
    skipped = run_probe(sys.executable, tmp_path, args, env)
    assert (skipped["plugins"], skipped["plugin_hooks"]) == ([], [])
    assert skipped["error"]["message"] == (
        f"sglang serve: error: unrecognized arguments: {PLUGIN_FLAG}"
    )


def test_a_release_before_0_5_11_loads_no_plugins(tmp_path: Path) -> None:
    plugins = write_plugin(tmp_path / "plugins")
    model = write_model(tmp_path / "Qwen3.6-27B")
    args = ["--model-path", str(model), PLUGIN_FLAG]
    answer = run_probe(sys.executable, tmp_path, args, standin_env("0.5.10", plugins))
    assert "plugins" not in answer
    assert "plugin_hooks" not in answer
    assert answer["error"]["message"].endswith(f"unrecognized arguments: {PLUGIN_FLAG}")


def test_the_standin_server_loads_plugins_before_parsing(
    launcher: Launcher, tmp_path: Path
) -> None:
    plugins = write_plugin(tmp_path / "plugins")
    model = write_model(tmp_path / "Qwen3.6-27B")
    running = launcher.start(
        "0.5.23",
        ["--model-path", str(model), "--skip-server-warmup", PLUGIN_FLAG],
        entry="serve",
        PYTHONPATH=f"{STANDIN}:{plugins}",
    )
    # with --skip-server-warmup SGLang says it is ready before uvicorn binds: wait for the bind
    running.wait_for("Uvicorn running on")
    info = running.get_json("/server_info")
    assert info["chunked_prefill_size"] == PLUGIN_CHUNKED_PREFILL


def test_orch_plan_reports_the_plugin_and_the_default_it_changed(tmp_path: Path) -> None:
    plugins = write_plugin(tmp_path / "plugins")
    model = write_model(tmp_path / "Qwen3.6-27B")
    root = tmp_path / "profiles"
    root.mkdir()
    (root / "hosts.yaml").write_text("hosts: {}\n")
    (root / "plugged.yaml").write_text(
        textwrap.dedent(f"""\
            sglang: "0.5.23"
            host: local
            model: {{path: {model}}}
            gpu: {{type: H200, devices: [0]}}
            port: 30000
            env: {{PYTHONPATH: "{STANDIN}:{plugins}", ORCH_STANDIN_VERSION: "0.5.23"}}
        """)
    )
    out, err = io.StringIO(), io.StringIO()
    local = ["--local-sglang", sys.executable]
    code = main(["--profiles", str(root), "plan", "plugged", *local, "--json"], out=out, err=err)
    assert code == ExitCode.OK, err.getvalue()
    report = json.loads(out.getvalue())
    assert report["standin"] is True
    assert f"SGLang plugin loaded: {PLUGIN_NAME}" in report["notes"]
    code = main(["--profiles", str(root), "lock", "plugged", *local], out=out, err=err)
    assert code == ExitCode.OK, err.getvalue()
    locked = json.loads((root / "plugged.lock.json").read_text())
    assert locked["effective"]["chunked_prefill_size"] == PLUGIN_CHUNKED_PREFILL  # not 8192


def test_a_request_on_stdin_is_handed_on_through_a_pipe_or_a_private_file(tmp_path: Path) -> None:
    """The probe's ``-`` starts again under the server's environment: the request goes
    through a pipe the new process inherits, or, larger than the pipe, a 0600 file."""
    from orchestrator.remote.probe.main import handed_on

    small = b'{"argv": []}'
    path, is_file = handed_on(small, str(tmp_path))
    assert (path.startswith("/dev/fd/"), is_file) == (True, False)
    assert Path(path).read_bytes() == small
    large = b" " * (8 << 20) + small
    path, is_file = handed_on(large, str(tmp_path))
    assert is_file
    assert Path(path).parent == tmp_path
    assert oct(Path(path).stat().st_mode & 0o777) == "0o600"
    assert Path(path).read_bytes() == large
