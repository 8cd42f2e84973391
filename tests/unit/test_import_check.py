"""``orch import --check``'s pitfall findings, and the broken lines bash reads differently from
how they look (a backslash before a blank or a carriage return: issue 25)."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.importing.check import check_scripts
from orchestrator.importing.scripts import ScriptFile
from orchestrator.importing.shell_script import parse_script


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


# -- what bash runs: each command's words ----------------------------------------------------------

# Every command is "not found" (PATH is empty) and bash hands it to this handler, which prints its
# words NUL-separated, one record per command, on descriptor 3 (the command's own output may be
# redirected).
_RECORDER = (
    "exec 3>&1\n"
    "command_not_found_handle() { printf '%s\\0' \"$@\" >&3; printf '\\036' >&3; return 0; }\n"
)


def _bash_runs(script: str, tmp_path: Path) -> list[list[str]]:
    path = tmp_path / "s.sh"
    path.write_bytes((_RECORDER + script).encode())
    result = subprocess.run(
        ["/bin/bash", str(path)],
        capture_output=True,
        check=False,
        cwd=tmp_path,
        env={"PATH": str(tmp_path / "no")},
    )
    records = result.stdout.decode().split("\x1e")[:-1]
    return [record.split("\0")[:-1] for record in records]


def _orch_reads(script: str) -> list[list[str | None]]:
    return [[w.text for w in c.words] for c in parse_script(script).commands]


@pytest.mark.parametrize(
    "script",
    [
        # a blank after the backslash: the command ends, a one-space argument is passed
        "run-server --model-path /m \\ \n  --tp 2 \\\n  --port 30000\nafter done\n",
        "run-server --model-path /m \\\t\n  --tp 2\n",
        "run-server --port 30000\\ \n  --tp 2\n",
        "run-server a\\ b \\ c\n",
        "run-server a\\\\ b\n",  # an escaped backslash, then a blank that separates words
        # CRLF line endings: every line's last word ends in a carriage return, and a backslash
        # before it escapes the \r instead of the newline
        "run-server \\\r\n  --model-path /m \\\r\n  --tp 2 \\\r\n  --port 30000\r\nafter done\r\n",
        "run-server --model-path /m --port 30000\r\n",
        'A=1\r\nrun-server --tp "$A" x\r\n',
        'A="--tp 2"\r\nrun-server $A\r\n',  # field splitting splits at IFS blanks, not at \r
        "run-server 'quoted \\ ' \"double \\ \" \\ \n",
        # words after a redirection's target are arguments (tree-sitter-bash reads them as
        # more targets)
        "run-server --model-path /m > log --tp 2\n",
        "run-server a > log 2>&1 \\ \n  --tp 2\n",
    ],
)
def test_broken_lines_are_read_as_bash_runs_them(script: str, tmp_path: Path) -> None:
    assert _orch_reads(script) == _bash_runs(script, tmp_path)


# -- broken continuations: the loudest finding ---------------------------------------------------

_BROKEN = (
    "pkill -f sglang.launch_server\n"
    "python -m sglang.launch_server --model-path /m \\ \n"
    "  --tp 2 \\\n"
    "  --port 30000 > server.log 2>&1 &\n"
)


def _findings(script: str, sglang: str | None = "0.5.23") -> list[Any]:
    return list(check_scripts([ScriptFile("s.sh", script)], sglang=sglang, given={}).problems)


def test_a_blank_after_a_backslash_is_the_first_finding_and_names_every_lost_flag() -> None:
    findings = _findings(_BROKEN)
    first = findings[0]
    assert (first.code, first.severity) == ("broken-continuation", "error")
    assert (first.position.line, first.position.column) == (2, 48)
    assert "--tp" in first.message
    assert "--port" in first.message
    assert "lines 3-4" in first.message
    assert "blank after the backslash" in first.fix
    # the stray argument is said once, as the break
    assert not [f for f in findings if f.code == "unexpected-value"]


def test_a_crlf_script_says_so_and_how_to_fix_it() -> None:
    script = (
        "python -m sglang.launch_server \\\r\n"
        "  --model-path /m \\\r\n  --tp 2 \\\r\n  --port 30000\r\n"
    )
    findings = _findings(script)
    first = findings[0]
    assert (first.code, first.severity) == ("broken-continuation", "error")
    assert (first.position.line, first.position.column) == (1, 32)
    assert "CRLF" in first.message
    assert "lines 2-4" in first.message
    assert len([f for f in findings if f.code == "broken-continuation"]) == 1  # one chain
    for flag in ("--model-path", "--tp", "--port"):
        assert flag in first.message
    assert "dos2unix" in first.fix


def test_a_crlf_script_without_continuations_is_still_an_error() -> None:
    findings = _findings("python -m sglang.launch_server --model-path /m --port 30000\r\n")
    assert [(f.code, f.severity) for f in findings][:1] == [("crlf-line-endings", "error")]
    assert "'/m'" not in findings[0].message  # the value SGLang gets is shown with its \r
    assert "dos2unix" in findings[0].fix


def test_import_does_not_record_lost_flags_and_says_so(tmp_path: Path) -> None:
    script = tmp_path / "broken.sh"
    script.write_text(_BROKEN)
    code, out, err = _run(["import", str(script), "-o", "-"])
    assert code == 0, err
    document = yaml.safe_load(out)
    assert "tp_size" not in document.get("args", {})
    assert "port" not in document
    lost = next(line for line in err.splitlines() if "lost:" in line)
    assert "never gets --tp, --port" in lost
    assert err.splitlines()[1].lstrip().startswith("lost:")  # the first thing said
    assert "# LOST" in out


# -- abbreviations -----------------------------------------------------------------------------------


def _launch(arguments: str, sglang: str | None = "0.5.23") -> list[Any]:
    return _findings(f"python -m sglang.launch_server --model-path /m {arguments}\n", sglang)


@pytest.mark.parametrize(
    ("written", "full"),
    [
        ("--tp 2", "--tp-size"),
        ("--mem-frac 0.8", "--mem-fraction-static"),
        ("--disable-radix", "--disable-radix-cache"),
        ("--dp 2", "--dp-size"),
        ("--trust-remote", "--trust-remote-code"),
    ],
)
def test_an_abbreviation_is_a_warning_naming_the_full_flag(written: str, full: str) -> None:
    findings = [f for f in _launch(written) if f.code == "abbreviation"]
    assert len(findings) == 1, findings
    assert findings[0].severity == "warning"
    assert f"abbreviation of {full}" in findings[0].message
    assert full in findings[0].fix
    assert (findings[0].position.line, findings[0].position.column) == (1, 48)


def test_an_old_flag_read_as_another_by_prefix_is_an_error_naming_both() -> None:
    findings = [f for f in _launch("--enable-flashinfer") if f.code == "prefix-reads-another-flag"]
    assert len(findings) == 1, findings
    message = findings[0].message
    assert findings[0].severity == "error"
    assert "--enable-flashinfer-allreduce-fusion" in message  # what 0.5.23 reads
    assert "--enable-flashinfer-mla" in message  # what it read before
    assert not [f for f in _launch("--enable-flashinfer") if f.code == "abbreviation"]


def test_a_renamed_flag_still_read_by_its_prefix_is_only_an_abbreviation() -> None:
    """--nsa-decode was the flag until 0.5.3.post3; 0.5.4 renamed it --nsa-decode-backend,
    which the old spelling still abbreviates: the same setting, not another one."""
    codes = [f.code for f in _launch("--nsa-decode fa3", sglang="0.5.10")]
    assert "abbreviation" in codes
    assert "prefix-reads-another-flag" not in codes


def test_the_release_guesser_does_not_take_an_abbreviation_as_the_flag_written() -> None:
    """--nsa-decode is written as 0.5.3.post3 spells it; 0.5.4 to 0.5.19 accept it only as an
    abbreviation of --nsa-decode-backend."""
    script = "python -m sglang.launch_server --model-path /m --nsa-decode fa3\n"
    report = check_scripts([ScriptFile("s.sh", script)], sglang=None, given={})
    assert report.targets[0][1] == "0.5.3.post3"
    assert report.problems == ()
    report = check_scripts(
        [ScriptFile("s.sh", script.replace("\n", " --tp 2\n"))], sglang=None, given={}
    )
    assert report.targets[0][1] == "0.5.3.post3"
    assert "abbreviation" in report.targets[0][2]  # --tp: not said to be accepted as written


def test_import_pins_the_release_that_has_the_flag_as_written(tmp_path: Path) -> None:
    script = tmp_path / "old.sh"
    script.write_text("python -m sglang.launch_server --model-path /m --nsa-decode fa3 --tp 2\n")
    code, out, err = _run(["import", str(script), "-o", "-"])
    assert code == 0, err
    assert yaml.safe_load(out)["sglang"] == "0.5.3.post3"


# -- placeholders ------------------------------------------------------------------------------------


def test_an_angle_bracket_placeholder_is_said_as_one_not_as_redirections() -> None:
    findings = _launch("--dist-init-addr <host>:<port>")
    placeholders = [f for f in findings if f.code == "placeholder"]
    assert [(f.position.line, f.position.column) for f in placeholders] == [(1, 65)]
    assert "<host>:<port>" in placeholders[0].message
    assert "redirection" in placeholders[0].message
    assert placeholders[0].severity == "error"
    assert not [f for f in findings if f.code == "log-truncated"]


def test_a_placeholder_before_a_continuation_takes_the_next_flag_as_its_file() -> None:
    script = "python -m sglang.launch_server --model-path <path/to/model> \\\n  --tp 2\n"
    findings = _findings(script)
    assert [f.code for f in findings if f.code in ("placeholder", "log-truncated")] == [
        "placeholder"
    ]
    assert "<path/to/model>" in findings[0].message


@pytest.mark.parametrize(
    ("script", "shown", "line"),
    [
        (
            "MODEL=YOUR_MODEL_PATH\npython -m sglang.launch_server --model-path $MODEL\n",
            "YOUR_MODEL_PATH",
            1,
        ),
        (
            'M="/workspace/models/<change-your-model-here>"\n'
            'python -m sglang.launch_server --model-path "$M"\n',
            "<change-your-model-here>",
            1,
        ),
        ("python -m sglang.launch_server --model-path /path/to/your/model\n", "/path/to/", 1),
        (
            'L="/w/<your>-engine/server.log"\n'
            'python -m sglang.launch_server --model-path /m > "$L" 2>&1\n',
            "<your>",
            1,
        ),
    ],
)
def test_a_placeholder_value_is_found_where_it_is_written(
    script: str, shown: str, line: int
) -> None:
    placeholders = [f for f in _findings(script) if f.code == "placeholder"]
    assert len(placeholders) == 1, placeholders
    assert shown in placeholders[0].message
    assert placeholders[0].position.line == line


def test_a_usage_message_is_no_placeholder() -> None:
    script = (
        'echo "usage: $0 <model-path>"\n'
        "python -m sglang.launch_server --model-path /models/x --served-model-name your-model\n"
    )
    assert not [f for f in _findings(script) if f.code == "placeholder"]


# -- the wrong server ------------------------------------------------------------------------------


def test_vllm_given_sglang_flags_is_an_error_at_its_line() -> None:
    script = (
        "export CUDA_VISIBLE_DEVICES=0\n"
        "nohup python -m vllm.entrypoints.openai.api_server --model-path /m \\\n"
        "  --mem-fraction-static 0.8 --port 8000 > log 2>&1 &\n"
    )
    findings = _findings(script)
    wrong = [f for f in findings if f.code == "wrong-entry-module"]
    assert len(wrong) == 1, findings
    assert (wrong[0].position.line, wrong[0].severity) == (2, "error")
    assert "--model-path" in wrong[0].message
    assert "--mem-fraction-static" in wrong[0].message
    assert "sglang.launch_server" in wrong[0].fix
    no_launch = [f for f in findings if f.code == "no-launch"]
    assert [f.position.line for f in no_launch] == [2]  # where the other server starts


def test_sglang_given_vllm_flags_is_an_error_with_sglangs_spelling() -> None:
    findings = _launch("--gpu-memory-utilization 0.9 --max-model-len 8192")
    wrong = [f for f in findings if f.code == "wrong-entry-module"]
    assert len(wrong) == 1, findings
    assert wrong[0].position.line == 1
    assert "--gpu-memory-utilization" in wrong[0].message
    assert "--mem-fraction-static" in wrong[0].fix
    assert "--context-length" in wrong[0].fix


def test_a_plain_vllm_script_is_only_not_a_launch() -> None:
    script = "vllm serve /m --gpu-memory-utilization 0.9 --tensor-parallel-size 2\n"
    assert [f.code for f in _findings(script)] == ["no-launch"]


# -- kills -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "ps aux | grep sglang | grep -v grep | awk '{print $2}' | xargs kill -9",
        "ps -ef | grep launch_server | awk '{print $2}' | xargs -r kill",
        "pgrep -f sglang.launch_server | xargs kill -9",
        "kill -9 $(ps aux | grep 'sglang.launch_server' | grep -v 'grep' | awk '{print $2}')",
        "kill $(pgrep -f sglang)",
        "kill -9 $(nvidia-smi | sed -n '/Processes:/,$p' | grep '   [0-9]' | awk '{print $5}')",
        "pkill -9 python",
        "killall python3",
        "pkill -9 ray",  # any name: every matching process of every user
        "ps -ef | grep my_server | awk '{print $2}' | xargs kill",
    ],
)
def test_every_kill_by_pattern_is_found(line: str) -> None:
    findings = _findings(f"{line}\npython -m sglang.launch_server --model-path /m\n")
    kills = [f for f in findings if f.code == "pkill-broad"]
    assert [(f.position.line, f.severity) for f in kills] == [(1, "warning")], findings
    assert "orch down" in kills[0].fix


def test_a_kill_of_a_remembered_pid_is_not_broad() -> None:
    script = "kill $SERVER_PID\nkill -9 $(cat server.pid)\npython -m sglang.launch_server --model-path /m\n"
    assert not [f for f in _findings(script) if f.code == "pkill-broad"]


# -- nohup ---------------------------------------------------------------------------------------------


def test_nohup_without_background_blocks_the_script() -> None:
    script = "nohup python -m sglang.launch_server --model-path /m > server.log 2>&1\nsleep 30\n"
    found = [f for f in _findings(script) if f.code == "nohup-without-background"]
    assert [(f.position.line, f.severity) for f in found] == [(1, "warning")]
    assert "&" in found[0].message


@pytest.mark.parametrize(
    "script",
    [
        "nohup python -m sglang.launch_server --model-path /m > server.log 2>&1 &\n",
        "nohup python -m sglang.launch_server --model-path /m 2>&1 | tee server.log &\n",
        "exec nohup python -m sglang.launch_server --model-path /m\n",
        "python -m sglang.launch_server --model-path /m\n",
    ],
)
def test_nohup_in_the_background_or_exec_is_fine(script: str) -> None:
    assert not [f for f in _findings(script) if f.code == "nohup-without-background"]


@pytest.mark.parametrize(
    "script",
    [
        'ssh h "nohup python -m sglang.launch_server --model-path /m 2>&1 | tee server.log &"\n',
        "ssh h nohup python -m sglang.launch_server --model-path /m | tee server.log &\n",
    ],
)
def test_nohup_piped_to_tee_over_ssh_loses_the_log_with_the_session(script: str) -> None:
    found = [f for f in _findings(script) if f.code == "nohup-tee-over-ssh"]
    assert [(f.position.line, f.severity) for f in found] == [(1, "warning")], _findings(script)
    assert "tee" in found[0].message


def test_nohup_piped_to_tee_locally_is_not_an_ssh_problem() -> None:
    script = "nohup python -m sglang.launch_server --model-path /m 2>&1 | tee server.log &\n"
    assert not [f for f in _findings(script) if f.code == "nohup-tee-over-ssh"]


# -- duplicates ----------------------------------------------------------------------------------------


def test_a_flag_given_twice_says_which_value_sglang_gets() -> None:
    script = "python -m sglang.launch_server --model-path /m --tp 2 \\\n  --tp-size 4\n"
    found = [f for f in _findings(script) if f.code == "duplicate-flag"]
    assert [(f.position.line, f.severity) for f in found] == [(2, "warning")]
    assert "SGLang gets --tp-size 4" in found[0].message
    assert "not --tp 2 (line 1)" in found[0].message


def test_a_secret_given_twice_is_said_without_its_values() -> None:
    found = [
        f
        for f in _launch("--api-key sk-first0123456789 --api-key sk-second0123456789")
        if f.code == "duplicate-flag"
    ]
    assert len(found) == 1
    assert "sk-" not in found[0].message
    assert "not shown" in found[0].message


def test_a_placeholder_in_a_secret_shows_only_the_placeholder() -> None:
    found = [f for f in _launch("--api-key 'sk-live0123<your-suffix>'") if f.code == "placeholder"]
    assert len(found) == 1, found
    assert "<your-suffix>" in found[0].message
    assert "sk-live0123" not in found[0].message
