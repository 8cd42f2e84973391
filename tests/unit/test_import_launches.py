"""orch import finds the launches real scripts hold (issue 25): each form below is one that real
public scripts use and import once missed. Each is checked against what real bash runs: the
script runs under bash with the interpreters, ssh and kubectl replaced by functions that record
the SGLang launches they are asked to start; orch must find the same launches with the same
arguments, or leave unknown exactly what bash could not know without running something."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from orchestrator.importing.check import check_scripts
from orchestrator.importing.launches import Launch, find_launches
from orchestrator.importing.profiles import import_scripts
from orchestrator.importing.scripts import ImportRequest, ScriptFile
from orchestrator.importing.shell_arith import run_arithmetic
from orchestrator.importing.shell_script import parse_script

RECORD = "\x1e"  # between records in the capture file; NUL between a record's words

STUBS = r"""
# one printf, one write: launches in the background must not interleave their records
__record() { printf '%s\0' "$@" $'\x1e' >> "$CAPTURE"; }
python3() { __record "$@"; }
python() { __record "$@"; }
command_not_found_handle() {  # "$ROOT/.venv/bin/python": recorded by its name
  case "${1##*/}" in python|python3) shift; __record "$@" ;; esac
  return 0
}
exec() {  # an interpreter at a path (that does not exist here): recorded by its name
  case "${1##*/}" in python|python3) shift; __record "$@" ;; *) "$@" ;; esac
}
ssh() {
  while [[ "$1" == -* ]]; do shift; done
  shift
  /usr/bin/env -i CAPTURE="$CAPTURE" BASH_ENV="$BASH_ENV" PATH="$PATH" /bin/bash -c "$*"
}
kubectl() {
  while (($#)) && [[ "$1" != -- ]]; do shift; done
  shift
  if [[ "$1" == bash && "$2" == -*c* ]]; then set -- "$3"; else set -- "$*"; fi
  /usr/bin/env -i CAPTURE="$CAPTURE" BASH_ENV="$BASH_ENV" PATH="$PATH" /bin/bash -c "$1"
}
"""


def _bash_launches(script: str, tmp_path: Path) -> list[list[str]]:
    """The argv after ``-m sglang.launch_server`` of every launch bash runs."""
    stubs = tmp_path / "stubs.bash"
    stubs.write_text(STUBS)
    capture = tmp_path / "capture"
    capture.write_bytes(b"")
    empty = tmp_path / "empty"
    empty.mkdir()
    path = tmp_path / "script.sh"
    path.write_text(script)
    subprocess.run(
        ["/bin/bash", str(path)],
        env={"PATH": str(empty), "BASH_ENV": str(stubs), "CAPTURE": str(capture)},
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
        check=False,
    )
    launches = []
    for record in capture.read_bytes().decode().split(RECORD + "\0")[:-1]:
        words = record.split("\0")[:-1]
        if words[:2] == ["-m", "sglang.launch_server"]:
            launches.append(words[2:])
    return launches


def _orch_launches(script: str) -> list[Launch]:
    parsed = parse_script(script)
    assert parsed.errors == ()
    return list(find_launches(parsed).launches)


def _arguments(launch: Launch) -> list[str | None]:
    return [word.text for word in launch.arguments]


def _same_as_bash(script: str, tmp_path: Path) -> list[Launch]:
    found = _orch_launches(script)
    ran = _bash_launches(script, tmp_path)
    assert ran, "bash ran no launch: the test's script is wrong"
    assert sorted(map(_arguments, found), key=str) == sorted(ran, key=str)
    return found


# -- arrays -------------------------------------------------------------------------------------


def test_an_argv_array_built_in_a_function_is_what_bash_runs(tmp_path: Path) -> None:
    script = """
start_server() {
  local -a ARGS=(--model-path /models/m --port 30000)
  ARGS+=(--tp-size 2)
  local extra=(--mem-fraction-static 0.8)
  ARGS+=("${extra[@]}")
  ARGS[1]=/models/other
  python3 -m sglang.launch_server "${ARGS[@]}"
}
start_server
"""
    (launch,) = _same_as_bash(script, tmp_path)
    assert _arguments(launch)[:2] == ["--model-path", "/models/other"]


def test_an_array_a_function_builds_is_the_callers_unless_local(tmp_path: Path) -> None:
    script = """
ARGS=(--port 30000)
OWN=(--context-length 4096)
build() {
  ARGS+=(--model-path /models/m)
  local PORT=1
  local -a OWN=(--ignored)
}
PORT=30001
build
python3 -m sglang.launch_server "${ARGS[@]}" --served-model-name "m-$PORT" "${OWN[@]}"
"""
    (launch,) = _same_as_bash(script, tmp_path)
    assert _arguments(launch)[-3:] == ["m-30001", "--context-length", "4096"]


def test_an_array_extended_in_some_arms_keeps_what_every_arm_has() -> None:
    script = """
ARGS=(-m sglang.launch_server --model-path /models/m)
if [[ -n "$DEBUG" ]]; then ARGS+=(--log-level debug); fi
python3 "${ARGS[@]}"
"""
    (launch,) = _orch_launches(script)
    assert _arguments(launch)[:2] == ["--model-path", "/models/m"]
    assert [w.shown() for w in launch.arguments[2:]] == ["${ARGS[@]}"]


def test_check_does_not_call_an_array_the_script_sets_unresolved(tmp_path: Path) -> None:
    script = """
args=()
args[0]=--model-path
args[1]=/models/m
for flag in --enable-metrics --trust-remote-code; do args+=("$flag"); done
args+=(--tp-size 2 --port 30000)
exec python3 -m sglang.launch_server "${args[@]}"
"""
    _same_as_bash(script, tmp_path)
    report = check_scripts([ScriptFile("a.sh", script)], sglang="0.5.23", given={})
    assert [p for p in report.problems if p.code == "unresolved-arguments"] == []


# -- loops --------------------------------------------------------------------------------------


def test_a_c_style_for_loop_is_unrolled_as_bash_runs_it(tmp_path: Path) -> None:
    script = """
BASE=30000
for ((i = 0, gpu = 7; i < 4; i += 2, gpu--)); do
  CUDA_VISIBLE_DEVICES=$gpu python3 -m sglang.launch_server --model-path /m --port $((BASE + i)) &
done
wait
"""
    found = _same_as_bash(script, tmp_path)
    ports = sorted(launch.arguments[3].text or "" for launch in found)
    assert ports == ["30000", "30002"]
    devices = sorted(
        launch.command.environment["CUDA_VISIBLE_DEVICES"].value.shown()  # type: ignore[union-attr]
        for launch in found
    )
    assert devices == ["6", "7"]


def test_a_c_style_loop_over_an_unknown_count_is_read_once_with_its_variable_unknown() -> None:
    script = """
n=$(nvidia-smi -L | wc -l)
for ((gpu = 0; gpu < n; gpu++)); do
  CUDA_VISIBLE_DEVICES=$gpu python3 -m sglang.launch_server --model-path /m --port $((30000 + gpu)) &
done
"""
    (launch,) = _orch_launches(script)
    assert launch.arguments[3].text is None  # the port depends on gpu: not guessed
    assert launch.arguments[3].unresolved[0].kind == "arithmetic"


# -- programs and wrappers ----------------------------------------------------------------------


def test_exec_of_a_python_in_a_directory_the_script_computes(tmp_path: Path) -> None:
    script = """
ROOT="$(cd "$(dirname "$0")" && pwd)"
ARGS=(--model-path /models/m --port 30000)
exec "$ROOT/.venv/bin/python" -m sglang.launch_server "${ARGS[@]}"
"""
    (launch,) = _same_as_bash(script, tmp_path)
    assert launch.program.text is None
    assert launch.program.shown().endswith("/.venv/bin/python")


def test_exec_of_a_program_and_an_array_holding_the_module(tmp_path: Path) -> None:
    script = """
EXE="${PYTHON_BIN:-python3}"
ARGS=(-m sglang.launch_server --model-path /models/m)
ARGS+=(--port 30000)
exec "$EXE" "${ARGS[@]}"
"""
    _same_as_bash(script, tmp_path)


def test_ssh_in_a_loop_over_known_hosts_starts_each_rank(tmp_path: Path) -> None:
    script = """
cmd="cd /srv && python3 -m sglang.launch_server --model-path /m --nnodes 2 --dist-init-addr 10.0.0.1:5000"
rank=0
for host in node0 node1; do
  ssh "$host" "$cmd --node-rank $rank" &
  rank=$((rank + 1))
done
wait
"""
    found = _same_as_bash(script, tmp_path)
    assert sorted(launch.remote.host for launch in found if launch.remote) == ["node0", "node1"]


def test_ssh_to_a_host_the_script_reads_from_a_file_is_found_with_the_host_unknown() -> None:
    script = """
cmd="python3 -m sglang.launch_server --model-path /m --port 30000"
for host in $(cat hosts.txt); do
  ssh "$host" "$cmd" &
done
"""
    (launch,) = _orch_launches(script)
    assert launch.remote is not None
    assert not launch.remote.known
    (profile,) = import_scripts([ScriptFile("s.sh", script)], ImportRequest(name="s"))
    assert profile.document["host"] == "<unset: ${host}>"
    assert "${host}" in profile.unresolved


def test_kubectl_exec_runs_the_command_after_the_double_dash_in_the_pod(tmp_path: Path) -> None:
    script = """
export HF_TOKEN_FILE=/secrets/t
kubectl exec -n ml sglang-0 -c server -- bash -lc 'cd / && python3 -m sglang.launch_server --model-path /m --port 30000'
kubectl --context prod exec -it pod/sglang-1 -- python3 -m sglang.launch_server --model-path /m --port 30001
"""
    found = _same_as_bash(script, tmp_path)
    for launch in found:
        assert ("kubectl exec", launch.wrappers[0][1]) in launch.wrappers
        assert launch.env_cleared
        assert "HF_TOKEN_FILE" not in launch.environment  # this side's exports stay here


def test_kubectl_commands_other_than_exec_start_nothing() -> None:
    script = "kubectl apply -f server.yaml\nkubectl logs -f sglang-0 -- python3 -m sglang.launch_server\n"
    assert _orch_launches(script) == []


# -- syntax tree-sitter-bash misreads ----------------------------------------------------------

BASH_ACCEPTS = {
    "trailing backslash at the end of the file": (
        "python3 -m sglang.launch_server --model-path /m \\\n    --port 30000 \\\n"
    ),
    "a lone backslash on the last line": "A=1\npython3 -m sglang.launch_server --port 30000\n\\",
    "a subshell in a command substitution": (
        'main() {\n  DIR=$((cd "$(dirname "$0")" && pwd))\n'
        "  python3 -m sglang.launch_server --port 30000\n}\nmain\n"
    ),
    "a | in the word of ${2:?...}": (
        'mode=real\ncase $mode in\n  real) python3 -m sglang.launch_server --served-model-name "${mode:?real|lossy}" --port 30000 ;;\n'
        "  *) exit 2 ;;\nesac\n"
    ),
    "a plain $ before a colon": (
        "N=10.0.0.1\npython3 -m sglang.launch_server --dist-init-addr $N$:5757 --port 30000\n"
    ),
    "an extglob pattern in an expansion": (
        'host="${host%]?(:+([0-9]))}"\npython3 -m sglang.launch_server --port 30000\n'
    ),
}
BASH_REFUSES = {
    "& followed by ;": ("python3 -m sglang.launch_server --port 30000\necho a &;\necho b\n", 2),
    "an if without fi": ("if true; then\n  python3 -m sglang.launch_server --port 30000\n", 3),
    "a stray fi": ("python3 -m sglang.launch_server --port 30000\nfi\n", 2),
    "a lone ;": ("python3 -m sglang.launch_server --port 30000\n;\n", 2),
}


def _bash_n(script: str, tmp_path: Path) -> int | None:
    """The line bash -n reports a syntax error at; None when bash accepts the script."""
    path = tmp_path / "syntax.sh"
    path.write_text(script)
    result = subprocess.run(
        ["/bin/bash", "-n", str(path)], capture_output=True, text=True, check=False
    )
    if result.returncode == 0:
        return None
    return int(result.stderr.split(": line ", 1)[1].split(":", 1)[0])


@pytest.mark.parametrize("name", sorted(BASH_ACCEPTS))
def test_what_bash_accepts_is_read_whole_and_no_syntax_error_is_said(
    name: str, tmp_path: Path
) -> None:
    script = BASH_ACCEPTS[name]
    assert _bash_n(script, tmp_path) is None
    (launch,) = _same_as_bash(script, tmp_path)  # (no syntax error said either)
    assert launch.arguments[-1].text == "30000"


@pytest.mark.parametrize("name", sorted(BASH_REFUSES))
def test_a_syntax_error_is_said_where_bash_says_it_and_the_rest_is_still_read(
    name: str, tmp_path: Path
) -> None:
    script, line = BASH_REFUSES[name]
    assert _bash_n(script, tmp_path) == line
    parsed = parse_script(script)
    assert parsed.errors
    assert parsed.errors[0].line == line
    assert len(find_launches(parsed).launches) == 1


def test_an_error_node_at_the_start_does_not_hide_the_launches_after_it() -> None:
    # tree-sitter-bash wraps the whole file in one error node at 1:1 here; bash stops at
    # line 2; import reads lines 3-4 again on their own and finds the launch
    script = 'echo "${x%]?(}"\necho a &;\nMODEL=/m\npython3 -m sglang.launch_server --model-path $MODEL\n'
    parsed = parse_script(script)
    assert parsed.errors[0].line == 2
    (launch,) = find_launches(parsed).launches
    assert _arguments(launch) == ["--model-path", "/m"]


# -- arithmetic ---------------------------------------------------------------------------------

EXPRESSIONS = [
    "1 + 2 * 3",
    "(1 + 2) * 3",
    "7 / 2",
    "-7 / 2",
    "7 % -3",
    "-7 % 3",
    "2 ** 10",
    "2 ** 3 ** 2",
    "1 << 4 | 3",
    "6 & 3 ^ 1",
    "~5",
    "!0 + !7",
    "3 > 2 && 2 > 3 || 1",
    "5 == 5 != 0",
    "i = 4, i += 3, i * 2",
    "i = 1, j = i++ + ++i, j",
    "n = 10, n -= 3, n /= 2, n",
    "0x1f + 010",
    "2#101 + 36#z",
    "1 ? 10 : 20",
    "0 ? 10 : 20",
    "x = 3, x <<= 2, x",
    "a = 5, a--, a",
    "-(-3)",
    "BASE + RANK * 100",
]


def test_arithmetic_is_bashs(tmp_path: Path) -> None:
    known = {"BASE": 30000, "RANK": 2}
    probe = "BASE=30000 RANK=2\n" + "".join(f"echo $(({e}))\n" for e in EXPRESSIONS)
    result = subprocess.run(["/bin/bash", "-c", probe], capture_output=True, text=True, check=True)
    theirs = [int(line) for line in result.stdout.split()]
    ours = [run_arithmetic(e, known.get)[0] for e in EXPRESSIONS]
    assert ours == theirs


def test_syntax_errors_are_said_where_bash_n_says_them_in_every_corpus_script(
    tmp_path: Path,
) -> None:
    corpus = Path(__file__).parents[1] / "fixtures" / "launchscripts"
    differ = {}
    for path in sorted(corpus.glob("*.sh")):
        text = path.read_text()
        errors = parse_script(text).errors
        ours = errors[0].line if errors else None
        theirs = _bash_n(text, tmp_path)
        if ours != theirs:
            differ[path.name] = (ours, theirs)
    assert differ == {}
