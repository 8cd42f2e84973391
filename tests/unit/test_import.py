"""orch import: the argument reading checked against real argparse (the shell reading against
real bash: tests/property/test_shell_words.py), the incident found by --check, every shipped
profile back from its launch script."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import example, given, settings
from hypothesis import strategies as st

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from orchestrator.importing.check import check_scripts
from orchestrator.importing.scripts import ScriptFile
from orchestrator.importing.server_arguments import parse_arguments
from orchestrator.importing.shell_script import parse_script
from orchestrator.importing.shell_words import Position, literal
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import RENAMES
from tests.argparse_oracle import UNCERTAIN_ACTIONS, OracleError, parse
from tests.conftest import EXAMPLES, REPO, SHIPPED_PROFILES, copy_examples

CORPUS = REPO / "tests" / "fixtures" / "launchscripts"


def _run(argv: list[str], stdin: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    if stdin is not None:
        import sys

        saved, sys.stdin = sys.stdin, io.StringIO(stdin)
        try:
            code = main(argv, out=out, err=err)
        finally:
            sys.stdin = saved
    else:
        code = main(argv, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


# -- the shell (against bash itself: tests/property/test_shell_words.py) --------------------------


def test_heredoc_body_expands_here_unless_the_delimiter_is_quoted() -> None:
    script = "M=/m\nssh h bash <<EOF\nX=1 python -m sglang.launch_server --model-path $M $X\nEOF\n"
    heredoc = next(r.heredoc for r in parse_script(script).commands[0].redirects if r.heredoc)
    assert heredoc.expanded.text is None  # $X is not set here
    assert "/m" in heredoc.expanded.shown()
    quoted = script.replace("<<EOF", "<<'EOF'")
    heredoc = next(r.heredoc for r in parse_script(quoted).commands[0].redirects if r.heredoc)
    assert heredoc.expanded.text == heredoc.body


# -- arguments, against argparse -------------------------------------------------------------------

TABLE = argtable.load_table("0.5.23")
_OPTIONS = [
    o
    for o in TABLE.options
    if o.action not in UNCERTAIN_ACTIONS and o.nargs in (None, 0, "+") and o.choices is None
]
_TOKENS = {"int": ["4", "-1", "x"], "float": ["0.5", "1e-3", "x"]}
_JSON_TYPED = ("callable:loads", "callable:json_list_type")


# Built once: hypothesis labels a strategy by hashing what it samples from (~500 options here),
# which is most of an example's cost when the strategy is made again for each draw.
_OPTION = st.sampled_from(_OPTIONS)
_FORM = st.sampled_from(["whole", "prefix", "equals"])


@st.composite
def _command_lines(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(1, 5))):
        option = draw(_OPTION)
        flag = draw(st.sampled_from([f for f in option.flags if f.startswith("--")]))
        form = draw(_FORM)
        if form == "prefix":
            flag = flag[: draw(st.integers(4, len(flag)))]
        values = draw(
            st.lists(
                st.sampled_from(_TOKENS.get(option.type or "", ["v", "a b"])),
                min_size=0,
                max_size=2,
            )
        )
        if form == "equals" and values:
            argv.append(f"{flag}={values[0]}")
            argv.extend(values[1:])
        else:
            argv.append(flag)
            argv.extend(values)
    return argv


@settings(max_examples=200, deadline=None)
@given(argv=_command_lines())
@example(argv=["--cuda-graph-bs", "4"])  # a renamed flag's old name, drawn as a prefix
@example(argv=["--prefe", "v"])  # a json.loads option by a prefix: both refuse it
def test_arguments_are_read_as_argparse_reads_them(argv: list[str]) -> None:
    """Abbreviations, `=` values, arity, types, the last of a repeated flag: orch's reading
    against argparse itself, built from the same table."""
    parsed = parse_arguments(TABLE, [literal(a, Position(1, 1)) for a in argv])
    # beyond argparse: a repeated flag (said, argparse keeps the last), a renamed flag's old
    # spelling (said; the oracle reads it as an alias of the new field, as orch does, where
    # the release's own argparse may find it ambiguous: hypothesis drew --cuda-graph-bs), and
    # text that is not JSON for an option argparse takes as any text (SGLang's json.loads
    # refuses it later; options typed json.loads argparse refuses itself)
    # by the flag as written and as spelled in full (a problem names the full flag: --prefe)
    typed = {
        flag: o.option.type for o in parsed.occurrences for flag in (o.written, *o.option.flags)
    }
    refusals = [
        p
        for p in parsed.problems
        if p.code not in ("duplicate-flag", "removed-flag")
        and not (p.code == "invalid-json" and typed.get(p.flag or "") not in _JSON_TYPED)
    ]
    try:
        expected = parse(TABLE, argv)
    except OracleError:
        assert refusals, f"argparse refuses {argv}; orch accepts it"
        return
    assert not refusals, f"argparse accepts {argv}; orch says {refusals}"
    ours: dict[str, Any] = {}
    for occurrence in parsed.occurrences:
        option = occurrence.option
        texts = [v.text or "" for v in occurrence.values]
        convert = {"int": int, "float": float}.get(option.type or "", str)
        if option.nargs == "+":
            ours[option.dest] = [convert(t) for t in texts]
        elif texts:
            ours[option.dest] = convert(texts[0])
        elif option.action == "custom:BooleanOptionalAction":
            ours[option.dest] = not occurrence.written.startswith("--no-")
        else:
            ours[option.dest] = option.const if option.action == "store_const" else True
    defaults = {o.dest: o.default for o in TABLE.options}
    ours = {k: v for k, v in ours.items() if v != defaults.get(k)}
    assert ours == expected


def test_a_removed_flag_is_read_as_its_new_name_and_said() -> None:
    parsed = parse_arguments(
        TABLE, [literal(a, Position(1, 1)) for a in ["--mamba-scheduler-strategy", "extra_buffer"]]
    )
    assert [p.code for p in parsed.problems] == ["removed-flag"]
    assert parsed.occurrences[0].option.dest == "mamba_radix_cache_strategy"
    assert not parsed.occurrences[0].abbreviated


# -- --check ---------------------------------------------------------------------------------------


def _check(name: str, sglang: str | None = None) -> Any:
    path = CORPUS / name
    return check_scripts([ScriptFile(name, path.read_text())], sglang=sglang, given={})


def test_check_finds_the_incident_and_says_which_flag_disappears() -> None:
    report = _check("incident-heredoc.sh")
    heredoc = [p for p in report.problems if p.code == "heredoc-expands-locally"]
    summary = next(p for p in heredoc if "as sent" in p.message)
    assert "--mamba-scheduler-strategy extra_buffer disappears" in summary.message
    assert (summary.position.line, summary.position.column) == (9, 1)
    assert "<<'EOF'" in summary.fix
    mamba = next(p for p in heredoc if "$MAMBA_ARGS" in p.message)
    assert mamba.position.line == 19
    assert "set inside the heredoc (line 10)" in mamba.message
    assert any(p.code == "log-truncated" for p in report.problems)
    assert not any(p.code == "unresolved-arguments" for p in report.problems)  # said once


def test_check_is_silent_on_the_incident_written_correctly() -> None:
    report = _check("incident-heredoc-fixed.sh")
    assert report.problems == ()
    # the newest that takes its flags as written: 0.5.14 made --mamba-scheduler-strategy a
    # deprecated alias (docs/sglang-versions.md)
    assert report.targets[0][1] == "0.5.13.post1"


def test_check_on_the_new_version_reports_the_removed_name() -> None:
    report = _check("incident-heredoc-fixed.sh", sglang="0.5.23")
    assert [p.code for p in report.problems] == ["removed-flag"]
    assert "--mamba-radix-cache-strategy" in report.problems[0].fix


@pytest.mark.parametrize(
    ("script", "code"),
    [
        ("python -m sglang.launch_server --model-path /m > server.log 2>&1 &\n", "log-truncated"),
        (
            "python -m sglang.launch_server --model-path /m &\nsleep 60\ngrep ready log\n",
            "sleep-readiness",
        ),
        ("pkill -f sglang\npython -m sglang.launch_server --model-path /m\n", "pkill-broad"),
        (
            "ssh h nohup python -m sglang.launch_server --model-path /m &\n",
            "nohup-without-redirect",
        ),
        ("python -m sglang.launch_server --model-path /m --tp 2 --tp 4\n", "duplicate-flag"),
        ("python -m sglang.launch_server --model-path /m --load-format nope\n", "bad-choice"),
        (
            "python -m sglang.launch_server --model-path /m --json-model-override-args {a:1}\n",
            "invalid-json",
        ),
        ("python -m sglang.launch_server --model-path /m --enable\n", "ambiguous-abbreviation"),
        ("python -m sglang.launch_server --model-path /m --no-such-flag 1\n", "unknown-flag"),
    ],
)
def test_check_finds_each_kind_of_problem(script: str, code: str) -> None:
    report = check_scripts([ScriptFile("s.sh", script)], sglang="0.5.23", given={})
    assert code in [p.code for p in report.problems], report.problems


# -- the command -----------------------------------------------------------------------------------


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


def test_import_writes_a_profile_that_validates_and_never_overwrites(
    profiles: Path, tmp_path: Path
) -> None:
    script = tmp_path / "fixed.sh"
    script.write_text((CORPUS / "incident-heredoc-fixed.sh").read_text())
    code, out, err = _run(["--profiles", str(profiles), "import", str(script), "--host", "local"])
    assert code == ExitCode.OK, err
    written = yaml.safe_load((profiles / "fixed.yaml").read_text())
    assert written["spec_decode"] == {
        "algorithm": "EAGLE",
        "num_steps": 3,
        "eagle_topk": 1,
        "num_draft_tokens": 4,
    }
    assert written["args"]["mamba_radix_cache_strategy"] == "extra_buffer"
    assert written["env"] == {"SGLANG_ENABLE_SPEC_V2": "1"}
    assert "nohup" in out
    assert ">> server.log" in out
    assert _run(["--profiles", str(profiles), "validate", "fixed"])[0] == ExitCode.OK
    before = (profiles / "fixed.yaml").read_text()
    code, _, err = _run(["--profiles", str(profiles), "import", str(script)])
    assert code != ExitCode.OK
    assert "exists" in err
    assert (profiles / "fixed.yaml").read_text() == before


def test_unresolved_variables_become_placeholders_that_validation_refuses(profiles: Path) -> None:
    script = "python -m sglang.launch_server --model-path $MODEL --port 30001\n"
    code, out, _ = _run(["--profiles", str(profiles), "import", "-", "--name", "p"], stdin=script)
    assert code == ExitCode.OK
    assert yaml.safe_load((profiles / "p.yaml").read_text())["model"]["path"] == "<unset: ${MODEL}>"
    assert "MODEL" in out
    code, _, err = _run(["--profiles", str(profiles), "validate", "p"])
    assert code == ExitCode.CONFIG
    assert "model.path" in err
    code, _, _ = _run(
        ["--profiles", str(profiles), "import", "-", "--name", "q", "--set", "MODEL=/models/m"],
        stdin=script,
    )
    assert code == ExitCode.OK
    assert yaml.safe_load((profiles / "q.yaml").read_text())["model"]["path"] == "/models/m"


def test_secrets_never_reach_the_output_or_the_file(profiles: Path) -> None:
    token, key = "hf_" + "Q" * 30, "sk-" + "z" * 30
    script = (
        f"export HF_TOKEN={token}\nexport SGLANG_FP8_PER_TOKEN=1\n"
        f"python -m sglang.launch_server --model-path /m --api-key {key} --port 30001\n"
    )
    code, out, err = _run(["--profiles", str(profiles), "import", "-", "--name", "s"], stdin=script)
    assert code == ExitCode.OK
    text = (profiles / "s.yaml").read_text()
    for secret in (token, key):
        assert secret not in out + err + text
    written = yaml.safe_load(text)
    assert written["env"]["HF_TOKEN"] == {"from_env": "HF_TOKEN"}
    assert written["env"]["SGLANG_FP8_PER_TOKEN"] == "1"  # noqa: S105 (a setting, not a secret)
    assert written["args"]["api_key"] == {"from_env": "API_KEY"}
    assert written["port"] == 30001
    code, out, err = _run(["import", "--check", "-"], stdin=script + "python -m x --a {key}\n")
    assert token not in out + err
    assert key not in out + err


def test_exit_codes(profiles: Path) -> None:
    base = ["--profiles", str(profiles), "import"]
    assert _run([*base, "-"], stdin="echo hello\n")[0] == ExitCode.IMPORT
    code, out, _ = _run([*base, "--check", "-"], stdin="echo hello\n")
    assert code == 1  # nothing checked is said, not passed
    assert "[no-launch]" in out
    clean = "python -m sglang.launch_server --model-path /m >> log\n"
    assert _run([*base, "--check", "-"], stdin=clean)[0] == ExitCode.OK
    bad = "python -m sglang.launch_server --model-path /m > log\n"
    assert _run([*base, "--check", "-"], stdin=bad)[0] == 1
    assert _run([*base, "--check", "--sglang", "banana", "-"], stdin=bad)[0] == ExitCode.USAGE
    assert _run([*base, "-", "--host", "nowhere"], stdin=bad)[0] == ExitCode.USAGE
    code, out, _ = _run([*base, "--check", "--json", "-"], stdin=bad)
    assert code == 1
    assert json.loads(out)["findings"][0]["code"] == "log-truncated"


# -- round trip ------------------------------------------------------------------------------------

_NEW_NAME = {r.old: r.new for r in RENAMES}


def _values(document: dict[str, Any]) -> dict[str, Any]:
    args = {_NEW_NAME.get(k, k): v for k, v in (document.get("args") or {}).items()}
    env = document.get("env") or {}
    nodes = (document.get("group") or {}).get("nodes") or [{}]
    return {
        "model": document.get("model"),
        "spec_decode": document.get("spec_decode"),
        "port": document.get("port", 30000),
        "bind": document.get("bind"),
        "env": [{**env, **(node.get("env") or {})} for node in nodes],  # each rank's
        "args": args,
        "devices": (document.get("gpu") or {}).get("devices"),
    }


def _shipped() -> list[str]:
    """The shipped examples a server is launched from (never a user's own file in profiles/:
    `orch import launch.sh` writes one there)."""
    return sorted(
        name
        for name in EXAMPLES
        if not (yaml.safe_load((SHIPPED_PROFILES / f"{name}.yaml").read_text()) or {}).get(
            "abstract"
        )  # a base: not launched
    )


def _bundled(document: Any) -> Any:
    """``document`` with each ``{from_orch: NAME}`` as the path it names (the script holds the
    path: it runs on this machine)."""
    from orchestrator.profile.bundled import bundled_path

    if isinstance(document, dict):
        if set(document) == {"from_orch"}:
            return bundled_path(document["from_orch"])
        return {key: _bundled(value) for key, value in document.items()}
    if isinstance(document, list):
        return [_bundled(value) for value in document]
    return document


@pytest.mark.parametrize("name", _shipped())
def test_a_shipped_profile_comes_back_from_its_launch_script(name: str, profiles: Path) -> None:
    """`orch render --script`, imported back: the same values (the rank scripts of a group,
    imported together, the same group)."""
    from orchestrator.profile.store import ProfileStore

    store = ProfileStore(profiles, display_root=profiles.parent)
    merged = store.merged(name)
    nodes: list[dict[str, Any]] = (merged.get("group") or {}).get("nodes") or []
    ranks: list[int | None] = list(range(len(nodes))) if nodes else [None]
    scripts, hosts = [], []
    for rank in ranks:
        argv = ["--profiles", str(profiles), "render", name, "--script"]
        code, out, err = _run(argv if rank is None else [*argv, "--node", str(rank)])
        assert code == ExitCode.OK, err
        path = profiles.parent / f"{name}-{rank}.sh"
        path.write_text(out)
        scripts.append(str(path))
        hosts.append(merged["host"] if rank is None else nodes[rank]["host"])
    code, _, err = _run(
        [
            "--profiles",
            str(profiles),
            "import",
            *scripts,
            "--name",
            "back",
            "--host",
            ",".join(hosts),
        ]
    )
    assert code == ExitCode.OK, err
    back = yaml.safe_load((profiles / "back.yaml").read_text())
    original, imported = _values(_bundled(merged)), _values(back)
    # what the script carries only as a reference: secrets (from_env) come back as references
    assert imported == original
    if nodes:
        assert [n["host"] for n in back["group"]["nodes"]] == hosts
    assert _run(["--profiles", str(profiles), "validate", "back"])[0] == ExitCode.OK


def test_a_value_a_condition_decides_is_not_guessed() -> None:
    script = parse_script(
        '[ -z "$MODEL" ] && MODEL=/models/default\n'
        'case $1 in\n  eagle) SPEC="--speculative-algorithm EAGLE" ;;\n  none) SPEC="" ;;\nesac\n'
        'if [ -n "$BIG" ]; then TP=8; else TP=8; fi\n'
        "python -m sglang.launch_server --model-path $MODEL $SPEC --tp $TP\n"
    )
    words = [w.shown() for w in script.commands[-1].words[3:]]
    assert words == ["--model-path", "/models/default", "${SPEC}", "--tp", "8"]
    taken = {c.name: c.taken for c in script.choices}
    assert taken == {"MODEL": "/models/default", "SPEC": None}  # TP: both arms agree
    settled = parse_script(
        'case $1 in a) SPEC="--tp 2" ;; b) SPEC="" ;; esac\npython -m x $SPEC\n',
        given={"SPEC": "--tp 4"},
    )
    assert [w.text for w in settled.commands[-1].words[3:]] == ["--tp", "4"]


def test_findings_inside_a_multi_line_ssh_string_are_located_where_written() -> None:
    script = 'ssh h "\n  python -m sglang.launch_server \\\n    --model-path /m \\\n    --tp 2 --tp 4\n"\n'
    report = check_scripts([ScriptFile("s.sh", script)], sglang="0.5.23", given={})
    duplicate = next(p for p in report.problems if p.code == "duplicate-flag")
    assert (duplicate.position.line, duplicate.position.column) == (4, 12)
    assert "not --tp 2 (line 4)" in duplicate.message


def test_scripts_checked_together_keep_their_own_versions_and_servers() -> None:
    """Two unrelated two-node servers of one model are not one server's ranks; a script for an
    old image is checked against its own version."""
    names = [
        "d-13-sglang-bench-deepseek-v3-docker-multinode-node0.sh",
        "d-16-sglang-bench-deepseek-v3-two-h20-nodes-one-block.sh",
        "incident-heredoc-fixed.sh",
    ]
    files = [ScriptFile(n, (CORPUS / n).read_text()) for n in names]
    report = check_scripts(files, sglang=None, given={})
    # each `--tp 16` is argparse's abbreviation of --tp-size (a warning); nothing else
    assert [(p.code, p.message.split()[0]) for p in report.problems] == [
        ("abbreviation", "--tp")
    ] * 3
    assert {file: version for file, version, _ in report.targets}["incident-heredoc-fixed.sh"] == (
        "0.5.13.post1"
    )
    mismatched = "d-31-sglang-old-docs-llama31-405b-two-nodes-mismatched-dist-addr.sh"
    report = check_scripts(
        [ScriptFile(mismatched, (CORPUS / mismatched).read_text())], sglang=None, given={}
    )
    assert [p.code for p in report.problems if p.code != "abbreviation"] == ["rendezvous-mismatch"]


def test_a_deprecated_const_alias_imports_the_value_its_help_names(profiles: Path) -> None:
    script = (
        "python -m sglang.launch_server --model-path /m --port 30001 "
        "--disable-piecewise-cuda-graph\n"
    )
    argv = ["--profiles", str(profiles), "import", "-", "--name", "c", "--sglang", "0.5.19"]
    code, _, err = _run(argv, stdin=script)
    assert code == ExitCode.OK, err
    args = yaml.safe_load((profiles / "c.yaml").read_text())["args"]
    assert args == {"cuda_graph_backend_prefill": "disabled"}
    assert _run(["--profiles", str(profiles), "validate", "c"])[0] == ExitCode.OK


def test_extends_writes_only_the_difference_and_renders_the_same(profiles: Path) -> None:
    script = str(CORPUS / "incident-heredoc-fixed.sh")
    base = ["--profiles", str(profiles), "import", script, "--host", "local", "--sglang", "0.5.11"]
    assert _run([*base, "--name", "whole"])[0] == ExitCode.OK
    code, _, err = _run([*base, "--name", "derived", "--extends", "qwen36-27b"])
    assert code == ExitCode.OK, err
    derived = yaml.safe_load((profiles / "derived.yaml").read_text())
    assert derived["extends"] == "qwen36-27b"
    for shared in ("model", "port", "bind"):  # the base's, the same: not written again
        assert shared not in derived
    assert "context_length" not in derived["args"]
    assert derived["spec_decode"]["algorithm"] == "EAGLE"
    rendered = [
        json.loads(_run(["--profiles", str(profiles), "render", name, "--json"])[1])
        for name in ("whole", "derived")
    ]
    table = argtable.load_table("0.5.11")  # the same server: the same fields (order aside)
    whole, derived_argv = (parse(table, r["argv"][3:]) for r in rendered)
    assert whole == derived_argv
    assert rendered[0]["argv"][:3] == rendered[1]["argv"][:3]
    assert rendered[0]["env"] == rendered[1]["env"]


def test_a_replaced_switch_imports_as_the_value_it_became_on_a_release_without_it(
    profiles: Path,
) -> None:
    """0.5.20 removed --disable-piecewise-cuda-graph (0.5.14 made it a shorthand for
    --cuda-graph-backend-prefill disabled): on 0.5.23 it is that value, said in a note."""
    script = (
        "python -m sglang.launch_server --model-path /m --port 30001 "
        "--disable-piecewise-cuda-graph\n"
    )
    argv = ["--profiles", str(profiles), "import", "-", "--name", "c", "--sglang", "0.5.23"]
    code, out, err = _run(argv, stdin=script)
    assert code == ExitCode.OK, err
    text = (profiles / "c.yaml").read_text()
    assert yaml.safe_load(text)["args"] == {"cuda_graph_backend_prefill": "disabled"}
    said = "--disable-piecewise-cuda-graph became --cuda-graph-backend-prefill disabled in SGLang"
    assert said in out
    assert said in text  # the note, as a comment of the profile
    assert _run(["--profiles", str(profiles), "validate", "c"])[0] == ExitCode.OK
    # a value the release lacks is not invented: 0.5.23 has no tc_piecewise
    script = script.replace("--disable-piecewise", "--enforce-piecewise")
    argv[argv.index("c")] = "d"
    code, out, err = _run(argv, stdin=script)
    assert code == ExitCode.OK, err
    assert "args" not in yaml.safe_load((profiles / "d.yaml").read_text())
    assert "SGLang 0.5.23 has no tc_piecewise" in out


def test_check_names_a_replaced_switch_on_a_release_without_it() -> None:
    words = [literal(a, Position(1, 1)) for a in ["--disable-piecewise-cuda-graph", "--tp", "2"]]
    parsed = parse_arguments(argtable.load_table("0.5.23"), words)
    assert [p.code for p in parsed.problems] == ["replaced-flag"]
    assert "write --cuda-graph-backend-prefill disabled" in (parsed.problems[0].fix or "")
    [replaced] = [o for o in parsed.occurrences if o.option.dest == "cuda_graph_backend_prefill"]
    assert [v.text for v in replaced.values] == ["disabled"]
    assert len(parsed.occurrences) == 2  # --tp 2 read after it
    # 0.5.19 still reads it (a deprecated shorthand): no problem there
    older = parse_arguments(argtable.load_table("0.5.19"), words[:1])
    assert older.problems == ()
