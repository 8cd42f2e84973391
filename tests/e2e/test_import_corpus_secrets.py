"""A leak detector over the whole launch-script corpus: every secret a script holds appears in
nothing ``orch import`` writes or prints (the profiles, standard output and error, ``--check``
and ``--check --json``), for every script, whether or not import finds a launch in it.

What a script holds is found two ways, both read by the classifier (orchestrator/importing/credentials.py)
and neither by orch's own reading of the shell: what real bash hands each SGLang server it starts
(the sandbox of test_import_corpus.py: each variable of its environment, each argument), and the
script's text itself (a token, a ``NAME=value`` credential, a bearer token, a URL's password,
wherever it is written: comments too).
"""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.importing import credentials
from orchestrator.render import MIN_FOUND_SECRET
from orchestrator.sglang import argtable
from tests.argparse_oracle import OracleError, parse
from tests.e2e.test_import_corpus import CASES, HOST, Case, _run_in_bash, _sglang_arguments


def _held_by_the_launches(case: Case, sandbox: Path) -> dict[str, str]:
    """value -> why, for what bash gives the servers the script starts."""
    held: dict[str, str] = {}
    table = argtable.load_table(argtable.available_versions()[-1])
    for record in _run_in_bash(case, sandbox):
        for name, value in record["env"].items():
            held.update(_classified(name, value))
        arguments = _sglang_arguments(record["argv"], record["program"]) or []
        try:
            fields = parse(table, arguments)
        except OracleError:
            fields = {}
        for dest, value in fields.items():
            if dest in credentials.SECRET_ARGS and isinstance(value, str):
                held[value] = f"--{dest.replace('_', '-')}"
        for word in arguments:
            held.update({hit.value: hit.what for hit in credentials.secrets_in(word)})
    return held


def _classified(name: str, value: str) -> dict[str, str]:
    why = credentials.why_secret(name, value)
    if why is None:
        return {}
    if credentials.secret_name(name):
        return {value: why}
    return {hit.value: hit.what for hit in credentials.secrets_in(value)}


def _held_in_the_text(case: Case) -> dict[str, str]:
    held: dict[str, str] = {}
    for path in case.files:
        for hit in credentials.secrets_in(path.read_text()):
            held[hit.value] = hit.what
    return held


def _run(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    saved, sys.stdin = sys.stdin, io.StringIO("")
    try:
        code = main(argv, out=out, err=err)
    finally:
        sys.stdin = saved
    return code, out.getvalue() + err.getvalue()


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in (str(key), *_strings(item))]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    return [str(value)]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_no_secret_a_script_holds_leaks(case: Case, tmp_path: Path) -> None:
    held = {**_held_in_the_text(case), **_held_by_the_launches(case, tmp_path / "sandbox")}
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    hosts: dict[str, Any] = {"local": {}}
    hosts.update({name: {"address": address, **HOST} for name, address in case.hosts.items()})
    (profiles / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}))
    files = [str(p) for p in case.files]
    sets = [w for k, v in case.given.items() for w in ("--set", f"{k}={v}")]
    host = ["--host", ",".join(case.hosts)] if case.hosts else []
    _, imported = _run(
        ["--profiles", str(profiles), "import", *files, "--name", "leak", *sets, *host]
    )
    shown = {
        "orch import": imported,
        "--check": _run(["import", "--check", *files, *sets])[1],
        "--check --json": _run(["import", "--check", "--json", *files, *sets])[1],
    }
    written = {p.name: p.read_text() for p in profiles.glob("*.yaml") if p.name != "hosts.yaml"}
    if case.no_launch is not None:
        assert not written, imported
    shown.update(written)
    values = {s for text in written.values() for s in _strings(yaml.safe_load(text))}
    for secret, why in held.items():
        assert secret not in values, f"{why}: a value of a written profile"
        if len(secret) < MIN_FOUND_SECRET:
            continue  # no credential, and too common a text to look for (render.py says why)
        for where, text in shown.items():
            assert secret not in text, f"{why} ({secret[:3]}...) in {where}"
