"""What orch's one printer guarantees whatever a command prints: --debug keeps the exit code,
usage errors name what to type, and no control character from outside reaches a terminal."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode
from orchestrator.render import shell_token
from tests.conftest import ProfileDir, copy_examples

pytestmark = pytest.mark.unit


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


def test_debug_in_process_returns_the_code_instead_of_raising(shipped: Path) -> None:
    code, _, err = _run(["--profiles", str(shipped), "--debug", "render", "no-such-profile"])
    assert code == ExitCode.CONFIG
    assert "Traceback (most recent call last)" in err


def test_debug_on_an_unexpected_error_is_exit_70_with_the_traceback(
    shipped: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from orchestrator.profile import store as profile

    def broken(self: object, name: str) -> None:  # a bug in orch, as the user would meet it
        raise RuntimeError(f"boom while loading {name}")

    monkeypatch.setattr(profile.ProfileStore, "load", broken)
    code, _, err = _run(["--profiles", str(shipped), "--debug", "render", "demo"])
    assert code == ExitCode.INTERNAL
    assert "RuntimeError: boom while loading demo" in err
    assert "Traceback (most recent call last)" in err


# -- control characters from outside never reach the terminal raw -------------------------------

RAW = ("\x1b", "\x07", "\x9b", "\x08", "\x00")  # ESC, BEL, CSI (C1), backspace, NUL


def _raw_in(text: str) -> list[str]:
    return [repr(c) for c in RAW if c in text]


def test_a_description_with_escape_sequences_is_shown_escaped(profile_dir: ProfileDir) -> None:
    # YAML's "\e" is ESC: a title-setting OSC and a screen clear in a colleague's profile
    profile_dir.write(
        "p",
        r"""
        description: "\e]0;pwned\a\e[2Jhello \x9b31m"
        host: gpu-1
        model: {path: /models/m}
        port: 30000
    """,
    )
    code, out, _ = _run(["--profiles", str(profile_dir.root), "profiles"])
    assert code == ExitCode.OK
    assert _raw_in(out) == []
    assert "\\u001b]0;pwned\\u0007\\u001b[2Jhello \\u009b31m" in out


def test_a_file_name_with_escape_sequences_is_shown_escaped(profile_dir: ProfileDir) -> None:
    (profile_dir.root / "evil\x1b[2J.yaml").write_text("host: gpu-1\n")
    code, out, err = _run(["--profiles", str(profile_dir.root), "validate"])
    assert code == ExitCode.CONFIG
    assert _raw_in(out + err) == []
    assert "evil\\u001b[2J.yaml" in err


def test_json_output_stays_json_and_keeps_the_value(profile_dir: ProfileDir) -> None:
    name = "x\x1b[31my\x9bz"
    profile_dir.write(
        "p",
        f"""
        host: gpu-1
        model: {{path: /models/m, served_model_name: {json.dumps(name)}}}
        port: 30000
    """,
    )
    code, out, _ = _run(["--profiles", str(profile_dir.root), "render", "p", "--json"])
    assert code == ExitCode.OK
    assert _raw_in(out) == []
    argv = json.loads(out)["argv"]
    assert argv[argv.index("--served-model-name") + 1] == name


def test_the_stream_escapes_what_comes_from_outside_and_writes_orchs_own_controls() -> None:
    from orchestrator.cli.show.text import Text
    from orchestrator.render import Redactor

    out, err = io.StringIO(), io.StringIO()
    output = Output(out, err, Redactor())
    output.write([Text("\r", control=True), Text("  [###...] 1/3 shards", flush=True)])
    output.out.write("tqdm 10%\rtqdm 20%\r")  # a log's progress bar, in two writes
    output.out.write("\nnext \x1b[2J\x7f line\r\n")
    output.close()
    assert out.getvalue() == (
        "\r  [###...] 1/3 shardstqdm 10%\ntqdm 20%\r\nnext \\u001b[2J\\u007f line\r\n"
    )


def test_a_shell_word_with_control_characters_reaches_bash_unchanged() -> None:
    value = "a\x1b[31m b\x07\x9b'c\r\nd\x7f"
    word = shell_token(value)
    assert _raw_in(word) == []
    printed = subprocess.run(
        ["bash", "-c", f"printf %s {word}"], capture_output=True, check=True, timeout=30
    ).stdout
    assert printed == value.encode()


def test_a_stop_on_request_reads_stopped_whatever_signal_ended_it() -> None:
    from orchestrator.cli.show.core import run_verdict
    from orchestrator.model import ExitInfo

    # SGLang's SIGTERM handler drains, then kill_process_tree(include_parent=True): -9
    stopped = ExitInfo("0001", -9, "stopped", "stopped on request", 0.0, True, "SIGKILL")
    assert run_verdict(stopped) == "stopped"
    killed = ExitInfo("0002", -9, "killed", "SIGKILL", 0.0, True, "SIGKILL")
    assert run_verdict(killed) == "killed (SIGKILL)"
