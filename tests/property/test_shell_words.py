"""orch import's shell reading against bash itself: the words orch reads from a launch line are
the words bash passes (a hypothesis test; each example runs bash)."""

from __future__ import annotations

import shlex
import subprocess

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.importing.shell_script import parse_script

_VALUES = st.sampled_from(["a", "two words", "/m/x", "", "x:y", "-v", "*", "1"])
_PIECES = st.sampled_from(
    [
        "plain",
        "'single $A'",
        '"double $A"',
        "$A/",
        "${A}",
        "${U:-dflt}",
        "${A:+set}",
        "$A/x",
        "$A:$B/lib",
        '"$B"',
        "$'tab\\tx'",
        "pre${B}post",
        '"${U:-a b}"',
        "$((2 + 3))",
        "\\$A",
        "a\\ b",
        "n{0..2}",
        "{x,y}z",
        "{3..1}",
        '"{0..1}"',
    ]
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_VALUES, b=_VALUES, words=st.lists(st.lists(_PIECES, min_size=1, max_size=3), max_size=5))
def test_words_expand_as_bash_expands_them(a: str, b: str, words: list[list[str]]) -> None:
    """Assignments, quoting, defaults, field splitting, the `$A:$B/x` tree-sitter-bash splits:
    the words orch reads are the words bash passes (globbing off: a launch line's `*` stays)."""
    script = (
        f"set -f\nA={shlex.quote(a)}\nB={shlex.quote(b)}\n"
        f"python3 -m sglang.launch_server {' '.join(''.join(w) for w in words)}\n"
    )
    parsed = parse_script(script)
    ours = [w.text for w in parsed.commands[-1].words[3:]]
    probe = script.replace("python3 -m sglang.launch_server", "printf '%s\\0' _", 1)
    result = subprocess.run(["bash", "-c", probe], capture_output=True, check=True, env={})
    theirs = result.stdout.decode().split("\0")[1:-1]
    assert ours == theirs, script
