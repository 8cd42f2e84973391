"""orch import bounds its work (issue 25, section 2): each attack is a tiny input that once cost
gigabytes or minutes; now it stops at once with an ImportBoundError (exit 16) naming the bound,
the place and a hint. The time limits are generous: the tests assert behaviour, not speed."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from orchestrator.cli.main import main
from orchestrator.commands.importing import MAX_SCRIPT_BYTES, read_stdin
from orchestrator.errors import ExitCode, ImportBoundError, ImportScriptError
from orchestrator.importing.check import check_scripts
from orchestrator.importing.profiles import import_scripts
from orchestrator.importing.scripts import ImportRequest, ScriptFile

LAUNCH = "python3 -m sglang.launch_server --model-path /m"
FAST = 10.0  # seconds: far above what each needs now, far below what each cost before


@contextmanager
def _quickly() -> Iterator[None]:
    started = time.monotonic()
    yield
    assert time.monotonic() - started < FAST


def _bound_hit(script: str) -> ImportBoundError:
    """Both --check and import stop at the same bound."""
    files = [ScriptFile("attack.sh", script)]
    with _quickly(), pytest.raises(ImportBoundError) as checked:
        check_scripts(files, sglang=None, given={})
    with _quickly(), pytest.raises(ImportBoundError) as imported:
        import_scripts(files, ImportRequest(name="attack"))
    assert checked.value.bound == imported.value.bound
    assert str(checked.value).startswith("attack.sh:")
    assert checked.value.hint
    return checked.value


def test_a_variable_that_doubles_itself_stops_at_the_characters_bound() -> None:
    script = "A=x\n" + "A=$A$A\n" * 40 + f"{LAUNCH} --served-model-name $A\n"
    assert len(script) < 400
    error = _bound_hit(script)
    assert error.bound == "characters"
    assert "characters" in str(error)


def test_nested_loops_stop_at_the_iterations_bound_across_nesting() -> None:
    # each loop is under the per-loop unroll limit; nesting multiplies them (64^8)
    loops = "".join(f"for v{i} in {{1..64}}; do\n" for i in range(8))
    script = loops + f"{LAUNCH} --port $v0\n" + "done\n" * 8
    error = _bound_hit(script)
    assert error.bound == "iterations"
    assert "line" not in error.bound  # the place is in the message: attack.sh:LINE:COLUMN
    assert str(error).startswith("attack.sh:")


def test_functions_calling_functions_stop_at_the_calls_bound() -> None:
    # f0 calls f1 ten times, f1 calls f2 ten times ... 15 levels: 10^15 calls
    functions = "".join(f"f{level}() {{ " + f"f{level + 1}; " * 10 + "}\n" for level in range(15))
    script = functions + f"f15() {{ {LAUNCH}; }}\nf0\n"
    assert _bound_hit(script).bound == "calls"


def test_a_brace_product_stops_at_the_brace_words_bound() -> None:
    script = f"{LAUNCH} --served-model-name x{{1..1000}}{{1..1000}}{{1..1000}}\n"
    assert len(script) < 120
    assert _bound_hit(script).bound == "brace-words"


def test_600_nested_ifs_stop_at_the_nesting_bound_not_a_recursion_error() -> None:
    script = "if true; then\n" * 600 + LAUNCH + "\n" + "fi\n" * 600
    assert _bound_hit(script).bound == "nesting"
    code, _, err = _run(["import", "--check", "-"], stdin=script)
    assert code == ExitCode.IMPORT, err
    assert "bound: nesting" in err


def test_nested_default_expansions_are_read_once_each() -> None:
    # ${A:-${A:-...}} 20 deep was walked twice per level (2^20); now once: it imports
    inner = "/m"
    for _ in range(20):
        inner = "${A:-" + inner + "}"
    script = f"python3 -m sglang.launch_server --model-path {inner}\n"
    files = [ScriptFile("nested.sh", script)]
    with _quickly():
        (profile,) = import_scripts(files, ImportRequest(name="nested"))
    assert profile.document["model"]["path"] == "/m"


def test_nested_quoting_20_deep_is_bounded() -> None:
    command = LAUNCH
    for _ in range(20):
        escaped = command.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
        command = f'bash -c "{escaped}"'
    files = [ScriptFile("quoted.sh", command + "\n")]
    with _quickly(), pytest.raises(ImportScriptError) as error:
        import_scripts(files, ImportRequest(name="quoted"))
    assert isinstance(error.value, ImportBoundError)
    assert error.value.bound == "script-depth"


def test_a_4_mb_one_line_launch_stops_before_it_is_parsed() -> None:
    script = LAUNCH + " --x y" * ((4 << 20) // 6 - 20) + "\n"
    assert len(script) <= MAX_SCRIPT_BYTES
    assert _bound_hit(script).bound == "source-words"


def test_a_4_mb_value_is_read_in_linear_time() -> None:
    value = "a" * ((4 << 20) - 100)
    files = [ScriptFile("big.sh", f"{LAUNCH} --served-model-name {value}\n")]
    with _quickly():
        report = check_scripts(files, sglang=None, given={})
    assert not [p for p in report.problems if p.code == "no-launch"]


def test_a_200_byte_script_that_starts_4096_servers_is_stopped() -> None:
    script = (
        "for a in {1..16}; do for b in {1..16}; do for c in {1..16}; do\n"
        f"{LAUNCH} --port 3$a$b$c &\ndone; done; done\n"
    )
    assert len(script) < 200
    assert _bound_hit(script).bound == "iterations"


def test_a_script_that_starts_hundreds_of_servers_stops_at_the_launches_bound() -> None:
    script = (
        f"for a in {{10..29}}; do for b in {{10..24}}; do\n{LAUNCH} --port 3$a$b &\ndone; done\n"
    )
    assert _bound_hit(script).bound == "launches"


def test_an_import_writes_at_most_64_profiles_and_says_how_to_pick_one() -> None:
    script = (
        f"for a in {{10..19}}; do for b in {{10..19}}; do\n{LAUNCH} --port 3$a$b &\ndone; done\n"
    )
    files = [ScriptFile("many.sh", script)]
    with _quickly(), pytest.raises(ImportBoundError) as error:
        import_scripts(files, ImportRequest(name="many"))
    assert error.value.bound == "profiles"
    assert "start 100 servers" in str(error.value)
    assert "--launch N" in (error.value.hint or "")
    (one,) = import_scripts(files, ImportRequest(name="many", launch=7))
    assert one.document["port"] == 31016


# -- reading the script ------------------------------------------------------------------------


class _EndlessStream(io.RawIOBase):
    """Standard input that never ends; it fails the test if read past the limit."""

    def __init__(self) -> None:
        self.given = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        assert self.given <= MAX_SCRIPT_BYTES + 1, "read past the size limit"
        size = len(buffer)
        buffer[:size] = b"#" * size
        self.given += size
        return size


def test_standard_input_has_the_same_size_limit_as_a_file() -> None:
    stream = _EndlessStream()
    with _quickly(), pytest.raises(ImportScriptError, match="larger than 4 MiB"):
        read_stdin(io.BufferedReader(stream))
    assert stream.given <= MAX_SCRIPT_BYTES + 1 + io.DEFAULT_BUFFER_SIZE


def test_standard_input_under_the_limit_is_read_whole() -> None:
    text = read_stdin(io.BytesIO(f"{LAUNCH}\n".encode()))
    assert text == f"{LAUNCH}\n"


def _run(argv: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    if stdin is not None:
        sys.stdin = io.TextIOWrapper(io.BytesIO(stdin.encode()))
    try:
        code = main(argv, out=out, err=err)
    finally:
        sys.stdin = saved
    return code, out.getvalue(), err.getvalue()


def test_a_device_is_refused() -> None:
    code, _, err = _run(["import", "--check", "/dev/zero"])
    assert code == ExitCode.IMPORT
    assert "not a regular file" in err
