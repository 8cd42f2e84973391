"""``orch import --check``'s pitfall findings, and the broken lines bash reads differently from
how they look (a backslash before a blank or a carriage return: issue 25)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.shellscript import parse_script

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
        "A=1\r\nrun-server --tp \"$A\" x\r\n",
        "A=\"--tp 2\"\r\nrun-server $A\r\n",  # field splitting splits at IFS blanks, not at \r
        "run-server 'quoted \\ ' \"double \\ \" \\ \n",
        # words after a redirection's target are arguments (tree-sitter-bash reads them as
        # more targets)
        "run-server --model-path /m > log --tp 2\n",
        "run-server a > log 2>&1 \\ \n  --tp 2\n",
    ],
)
def test_broken_lines_are_read_as_bash_runs_them(script: str, tmp_path: Path) -> None:
    assert _orch_reads(script) == _bash_runs(script, tmp_path)
