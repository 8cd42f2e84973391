"""Any argument or env value reaches the server unchanged: through YAML, render, the displayed
command read back by a real ``bash`` (it is for pasting into one: a value with control
characters is written ``$'...'``), and the launcher script run by ``bash``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator import render
from orchestrator.model import ServerCommand
from orchestrator.profile.store import ProfileStore

# Every character a YAML file and a POSIX argv can hold: no NUL, no lone surrogates.
TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    max_size=40,
)
NASTY = st.sampled_from(
    [
        "",
        " ",
        "a b",
        "'",
        '"',
        "$HOME",
        "$(id)",
        "`id`",
        "\\",
        "\\n",
        "\n",
        "x\ny",
        "ünï ⚡",
        "--flag",
        "-1",
        "*",
        "~",
        "!!",
        "a'b\"c",
        "\r\n",
        "\t",
        "{}",
        "#c",
        ";ls",
        "&&",
        "|",
    ]
)
VALUE = st.one_of(NASTY, TEXT)

DUMP_ARGV = """\
import json, os, sys
names = json.loads(os.environ["ROUNDTRIP_NAMES"])
with open(os.environ["ROUNDTRIP_OUT"], "w", encoding="utf-8", errors="surrogateescape") as out:
    json.dump({"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in names}}, out)
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("roundtrip")
    (root / "profiles").mkdir()
    (root / "profiles" / "hosts.yaml").write_text(
        yaml.safe_dump({"hosts": {"local": {"python": sys.executable, "workdir": str(root / "w")}}})
    )
    (root / "dump_argv.py").write_text(DUMP_ARGV)
    return root


def _plan(workspace: Path, arg_value: str, env_value: str) -> ServerCommand:
    document = {
        "sglang": "0.5.23",
        "host": "local",
        "model": {"path": "/models/m"},
        "env": {"ODD_VALUE": env_value},
        "args": {"tokenizer_path": arg_value},
    }
    path = workspace / "profiles" / "p.yaml"
    # Escaped (allow_unicode=False): written raw, YAML itself folds U+0085 and friends into
    # spaces, which is YAML's reading of the file, not something render could preserve.
    text = yaml.safe_dump(document, allow_unicode=False)
    assert yaml.safe_load(text) == document
    path.write_text(text, encoding="utf-8")
    loaded = ProfileStore(workspace / "profiles").load("p")
    return render.render(loaded.profile, loaded.table)


def _bash_words(command: str) -> list[str]:
    """The words bash makes of ``command`` (quotes removed, nothing run)."""
    script = f"set -- {command}\nfor word; do printf '%s\\0' \"$word\"; done"
    done = subprocess.run(["bash", "-c", script], capture_output=True, check=True, timeout=30)
    return done.stdout.decode("utf-8").split("\0")[:-1]


def _value_of(argv: list[str] | tuple[object, ...], flag: str) -> str:
    for index, token in enumerate(argv):
        if token == flag:
            return str(argv[index + 1])
        if isinstance(token, str) and token.startswith(flag + "="):
            return token[len(flag) + 1 :]
    raise AssertionError(f"{flag} not in {argv}")


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arg_value=VALUE, env_value=VALUE)
def test_displayed_command_splits_back_exactly(
    workspace: Path, arg_value: str, env_value: str
) -> None:
    plan = _plan(workspace, arg_value, env_value)
    assert _value_of(plan.argv, "--tokenizer-path") == arg_value
    words = _bash_words(render.format_command(plan, multiline=False))
    assert words[0] == f"ODD_VALUE={env_value}"
    assert tuple(words[1:]) == plan.argv


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arg_value=VALUE, env_value=VALUE)
def test_launcher_script_run_by_bash_gives_the_child_the_exact_argv(
    workspace: Path, arg_value: str, env_value: str
) -> None:
    plan = _plan(workspace, arg_value, env_value)
    # The same command, with a program that reports what it received in place of SGLang.
    probe = ServerCommand(
        profile=plan.profile,
        sglang_version=plan.sglang_version,
        argtable_version=plan.argtable_version,
        argv=(sys.executable, str(workspace / "dump_argv.py"), *plan.argv[1:]),
        env=plan.env,
        cwd=plan.cwd,
        port=plan.port,
    )
    script = workspace / "launch.sh"
    script.write_text(render.launcher_script(probe), encoding="utf-8")
    out = workspace / "received.json"
    subprocess.run(
        ["bash", str(script)],
        check=True,
        env={
            "PATH": "/usr/bin:/bin",
            "ROUNDTRIP_OUT": str(out),
            "ROUNDTRIP_NAMES": json.dumps(list(plan.env)),
        },
        timeout=30,
    )
    received = json.loads(out.read_text(encoding="utf-8"))
    assert received["argv"] == [str(token) for token in probe.argv[2:]]
    assert received["env"] == dict(plan.env)
    assert _value_of(received["argv"], "--tokenizer-path") == arg_value
