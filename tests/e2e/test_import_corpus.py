"""``orch import`` on the corpus of public launch scripts: what orch renders from the imported
profile is what the script itself would have run.

Each script runs through real bash in a sandbox where nothing real is executed: PATH is an
empty directory and every missing command succeeds quietly (``command_not_found_handle``), the
interpreters (``python``, ``python3``, ``sglang`` and every absolute interpreter path the script
names) are shell functions that record their argv and environment, and ``ssh``, ``sshpass``,
``docker run``, ``nohup``, ``exec``, ``env``, ``sudo``, ``setsid``, ``numactl``, ``timeout`` and
``taskset`` are functions that do what they would do to the inner command (``ssh`` runs the
remote words, or its stdin, in a fresh ``bash`` with an empty environment; ``docker run`` runs
the container's command with only its ``-e`` variables; ``kubectl exec POD -- CMD`` runs CMD so
too; ``exec`` of an interpreter at a path the script computes is recorded by its name). The script's SGLang launches are then
compared with ``orch render --json`` of the imported profiles, read by the same real argparse
parser (tests/argparse_oracle.py), field by field, and their environments variable by variable,
apart from what the import reported: a value it could not know (a placeholder, filled here with a
marker and left out of the comparison), a variable it skipped or turned into a secret reference,
a flag SGLang would refuse.

tests/fixtures/launchscripts/EXPECT.yaml gives what a user would give (``--set``, ``--host``)
and which scripts start no server or are imported together.
"""

from __future__ import annotations

import io
import json
import re
import shlex
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.cli.main import main
from orchestrator.commands.importing import Written, run_import
from orchestrator.errors import ImportScriptError
from orchestrator.importing.scripts import ScriptFile, read_scripts
from orchestrator.profile.store import PLACEHOLDER_RE, ProfileStore
from orchestrator.render import Redactor
from orchestrator.sglang import argtable
from tests.argparse_oracle import OracleError, parse
from tests.conftest import REPO

CORPUS = REPO / "tests" / "fixtures" / "launchscripts"
EXPECT = yaml.safe_load((CORPUS / "EXPECT.yaml").read_text(encoding="utf-8"))
MARKER = "orch-test-placeholder-{}"

# The sandbox's own variables: not the script's.
# (LC_CTYPE: Python's own, PEP 538, set by the recording interpreter under the C locale)
SANDBOX_ENV = {"PATH", "HOME", "PWD", "OLDPWD", "SHLVL", "_", "BASH_ENV", "LC_CTYPE"}
HOST = {"python": "/opt/sglang/bin/python"}

CAPTURE = r"""
import json, os, sys, uuid
out = os.environ["__ORCH_CAPTURE"]
env = {k: v for k, v in os.environ.items() if not k.startswith("__ORCH_")}
record = {"program": sys.argv[1], "argv": sys.argv[2:], "env": env}
with open(os.path.join(out, uuid.uuid4().hex + ".json"), "w") as f:
    json.dump(record, f)
"""

# Stubs for the programs a launch script drives. Option lists are those of OpenSSH's ssh(1),
# docker-run(1) and the coreutils/util-linux wrappers.
STUBS = r"""
trap wait EXIT  # background launches (`nohup ... &`) are recorded before the shell is done
command_not_found_handle() { return 0; }
__orch_record() { builtin command "$__ORCH_PYTHON" "$__ORCH_CAPTURE_PY" "$@"; }
python() { __orch_record python "$@"; }
python3() { __orch_record python3 "$@"; }
sglang() { __orch_record sglang "$@"; }
__orch_fresh() { builtin command /usr/bin/env -i "PATH=$PATH" "HOME=$HOME" "BASH_ENV=$BASH_ENV" \
  "__ORCH_CAPTURE=$__ORCH_CAPTURE" "__ORCH_PYTHON=$__ORCH_PYTHON" \
  "__ORCH_CAPTURE_PY=$__ORCH_CAPTURE_PY" "$@"; }
nohup() { "$@"; }
setsid() { while [[ "$1" == -* ]]; do shift; done; "$@"; }
__orch_program() {  # an interpreter at a path the script computes ("$ROOT/.venv/bin/python")
  if [[ "$1" == */* ]] && ! declare -F -- "$1" >/dev/null; then
    case "${1##*/}" in
      python|python3|python3.*|sglang) local name="${1##*/}"; shift; __orch_record "$name" "$@"; return ;;
    esac
  fi
  "$@"
}
exec() { if (($#)); then __orch_program "$@"; exit; fi; }
env() {
  local -a assignments=()
  local clear=0
  while (($#)); do
    case "$1" in
      -i|-) clear=1; shift ;;
      -u) shift 2 ;;
      -*) shift ;;
      *=*) assignments+=("$1"); shift ;;
      *) break ;;
    esac
  done
  if ((clear)); then __orch_fresh "${assignments[@]}" /bin/bash -c '"$@"' bash "$@"; return; fi
  ( for a in "${assignments[@]}"; do export "$a"; done; "$@" )
}
sudo() {
  local keep=0
  while [[ "$1" == -* ]]; do
    case "$1" in -E|--preserve-env) keep=1 ;; -u|-g) shift ;; esac
    shift
  done
  if ((keep)); then "$@"; else __orch_fresh /bin/bash -c '"$@"' bash "$@"; fi
}
numactl() { while [[ "$1" == -* ]]; do [[ "$1" == *=* ]] || [[ "$1" == --* ]] || shift; shift; done; "$@"; }
taskset() { while [[ "$1" == -* ]]; do shift; done; shift; "$@"; }
timeout() { while [[ "$1" == -* ]]; do [[ "$1" == -s || "$1" == -k ]] && shift; shift; done; shift; "$@"; }
sshpass() { while [[ "$1" == -* ]]; do [[ "$1" == -p* && ${#1} -eq 2 ]] && shift; shift; done; "$@"; }
ssh() {
  while [[ "$1" == -* ]]; do
    case "$1" in
      -[BbcDEeFIiJLlmOoPpQRSWw]) shift 2 ;;
      *) shift ;;
    esac
  done
  shift  # the destination
  if (($#)) && ! [[ "$*" =~ ^(bash|sh)(\ -s|\ -l|\ -)*$ ]]; then
    __orch_fresh /bin/bash -c "$*" < /dev/null
  else
    __orch_fresh /bin/bash -s
  fi
}
kubectl() {  # exec POD -- CMD: CMD in the pod, with the pod's environment (here: none)
  while (($#)) && [[ "$1" != exec ]]; do shift; done
  (($#)) || return 0
  while (($#)) && [[ "$1" != -- ]]; do shift; done
  (($#)) || return 0
  shift
  if [[ "$1" =~ ^(bash|sh)$ && "$2" == -*c* ]]; then
    __orch_fresh /bin/bash -c "$3" < /dev/null
  else
    __orch_fresh /bin/bash -c '"$@"' bash "$@" < /dev/null
  fi
}
docker() {
  [[ "$1" == run ]] || return 0
  shift
  local -a environment=()
  while [[ "$1" == -* ]]; do
    case "$1" in
      -e|--env) if [[ "$2" == *=* ]]; then environment+=("$2"); else environment+=("$2=${!2}"); fi; shift 2 ;;
      --env=*) environment+=("${1#--env=}"); shift ;;
      -e*) environment+=("${1#-e}"); shift ;;
      --gpus) local gpus="${2//\"/}"; gpus="${gpus#device=}"; environment+=("NVIDIA_VISIBLE_DEVICES=$gpus"); shift 2 ;;
      --gpus=*) local gpus="${1#--gpus=}"; gpus="${gpus//\"/}"; gpus="${gpus#device=}"; environment+=("NVIDIA_VISIBLE_DEVICES=$gpus"); shift ;;
      --privileged|--rm|-d|--detach|-i|-t|-it|-ti|--interactive|--tty|--init|--read-only|-P|--publish-all) shift ;;
      --*=*) shift ;;
      -*) shift 2 ;;
    esac
  done
  shift  # the image
  (($#)) && __orch_fresh "${environment[@]}" /bin/bash -c '"$@"' bash "$@"
}
"""


@dataclass
class Case:
    name: str
    files: list[Path]
    given: dict[str, str] = field(default_factory=dict)
    hosts: dict[str, str] = field(default_factory=dict)  # --host, in rank order -> address
    launches: int | None = None  # servers started, when not one per imported profile
    no_launch: str | None = None
    refused: str | None = None  # SGLang refuses the launch bash runs (the script is broken)
    gap: str | None = None
    stubs: str = ""  # what the machine would answer (shell functions), for this script


def _cases() -> Iterator[Case]:
    settings: dict[str, Any] = EXPECT["scripts"]
    joined = {other for s in settings.values() for other in s.get("with", [])}
    for path in sorted(CORPUS.glob("*.sh")):
        if path.stem in joined:
            continue
        entry = settings.get(path.stem, {})
        yield Case(
            name=path.stem,
            files=[path, *(CORPUS / f"{other}.sh" for other in entry.get("with", []))],
            given={str(k): str(v) for k, v in entry.get("set", {}).items()},
            hosts=dict(entry.get("hosts", {})),
            no_launch=entry.get("no_launch"),
            refused=entry.get("refused"),
            gap=entry.get("gap"),
            stubs=entry.get("stubs", ""),
        )


def test_every_corpus_script_is_listed_with_its_source() -> None:
    listed = yaml.safe_load((CORPUS / "SOURCES.yaml").read_text(encoding="utf-8"))
    sources = {entry["file"]: entry for entry in listed}
    for entry in listed:
        assert entry["url"].startswith("https://github.com/"), entry
        assert entry["commit"] in entry["url"], entry
    scripts = {p.name for p in CORPUS.glob("*.sh")}
    constructed = {n for n in scripts if n.startswith("incident-")}
    assert len(scripts - constructed) >= 30
    assert scripts - constructed <= set(sources), "a script without its source"
    for name in constructed:  # ours, and saying so
        assert "Constructed by orch's developers" in (CORPUS / name).read_text()


# issue 25: import finds the launch in 95 % of the scripts that start one
LAUNCHES_FOUND_GOAL = 0.95


def launches_found(cases: list[Case]) -> tuple[int, list[str]]:
    """Of the scripts that start a server (EXPECT.yaml: not no_launch), how many import finds
    a launch in (every file of the case), and the names of the others."""
    missed = []
    starting = [case for case in cases if case.no_launch is None]
    for case in starting:
        files = [ScriptFile(str(p.relative_to(REPO)), p.read_text()) for p in case.files]
        if not all(item.found.launches for item in read_scripts(files, case.given)):
            missed.append(case.name)
    return len(starting) - len(missed), missed


def test_import_finds_the_launch_in_95_percent_of_the_scripts_that_start_one(
    record_property: Any,
) -> None:
    found, missed = launches_found(CASES)
    starting = found + len(missed)
    said = (
        f"launches found in {found} of {starting} corpus scripts that start a server "
        f"({found / starting:.1%}); missed: {', '.join(missed) or 'none'}"
    )
    record_property("launches_found", said)
    assert found / starting >= LAUNCHES_FOUND_GOAL, said


def _run_in_bash(case: Case, sandbox: Path) -> list[dict[str, Any]]:
    empty = sandbox / "empty-path"
    captures = sandbox / "captures"
    home = sandbox / "home"
    for directory in (empty, captures, home):
        directory.mkdir(parents=True)
    capture_py = sandbox / "capture.py"
    capture_py.write_text(CAPTURE)
    interpreters = set()
    for path in case.files:
        interpreters.update(
            re.findall(r"(/[\w.+-]+(?:/[\w.+-]+)*/(?:python[\d.]*|sglang))\b", path.read_text())
        )
    stubs = (
        STUBS
        + case.stubs
        + "".join(
            f'function {p} {{ __orch_record {shlex.quote(p)} "$@"; }}\n'
            for p in sorted(interpreters)
        )
    )
    bash_env = sandbox / "stubs.bash"
    bash_env.write_text(stubs)
    for path in case.files:
        # what the user gives: shell variables (not exported) and positional arguments
        positional = [v for k, v in sorted(case.given.items()) if k.isdigit()]
        prelude = "".join(
            f"{k}={shlex.quote(v)}\n" for k, v in case.given.items() if not k.isdigit()
        )
        script = sandbox / path.name
        script.write_text(prelude + path.read_text())
        subprocess.run(
            ["/bin/bash", str(script), *positional],
            cwd=home,
            env={
                "PATH": str(empty),
                "HOME": str(home),
                "BASH_ENV": str(bash_env),
                "__ORCH_CAPTURE": str(captures),
                "__ORCH_PYTHON": sys.executable,
                "__ORCH_CAPTURE_PY": str(capture_py),
            },
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=60,
            check=False,
        )
    records = [json.loads(p.read_text()) for p in sorted(captures.glob("*.json"))]
    return [r for r in records if _sglang_arguments(r["argv"], r["program"]) is not None]


def _sglang_arguments(argv: list[str], program: str) -> list[str] | None:
    if program.endswith("sglang"):
        return argv[1:] if argv[:1] == ["serve"] else None
    if argv[:2] == ["-m", "sglang.launch_server"]:
        return argv[2:]
    if argv[:1] == ["-m"] or not argv:
        return None
    return None


def _import(case: Case, profiles: Path) -> list[Written]:
    hosts: dict[str, Any] = {"local": {}}
    hosts.update({name: {"address": address, **HOST} for name, address in case.hosts.items()})
    (profiles / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}))
    store = ProfileStore(profiles, display_root=profiles.parent, local_python=sys.executable)
    files = [ScriptFile(str(p.relative_to(REPO)), p.read_text()) for p in case.files]
    return run_import(
        files,
        store,
        name=case.name,
        host=",".join(case.hosts) or None,
        sglang=None,
        given=case.given,
        extends=None,
        launch=None,
        output=None,
        redactor=Redactor(),
    )


def _fill_placeholders(written: Written, profiles: Path) -> set[str]:
    """Placeholders -> markers (a profile with one is refused, rightly); the markers."""
    markers: set[str] = set()

    def fill(value: Any) -> Any:
        if isinstance(value, str) and PLACEHOLDER_RE.search(value):
            # unique across the case's profiles: each adds its placeholder hosts to hosts.yaml
            marker = MARKER.format(f"{written.profile.name}-{len(markers)}")
            markers.add(marker)
            return PLACEHOLDER_RE.sub(marker, value)
        if isinstance(value, dict):
            return {k: fill(v) for k, v in value.items()}
        if isinstance(value, list):
            return [fill(v) for v in value]
        return value

    document = fill(written.profile.document)
    inventory = yaml.safe_load((profiles / "hosts.yaml").read_text())
    for node in document.get("group", {}).get("nodes", []):
        if node["host"] in markers:
            address = f"10.9.9.{len(inventory['hosts'])}"
            inventory["hosts"][node["host"]] = {"address": address, **HOST}
    if isinstance(document.get("host"), str) and document["host"] not in inventory["hosts"]:
        inventory["hosts"][document["host"]] = {**HOST, **(written.profile.host_entry or {})}
    (profiles / "hosts.yaml").write_text(yaml.safe_dump(inventory))
    assert written.path is not None
    written.path.write_text(yaml.safe_dump(document, sort_keys=False))
    return markers


def _render(name: str, profiles: Path) -> list[dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(profiles), "render", name, "--json"], out=out, err=err)
    assert code == 0, err.getvalue()
    document = json.loads(out.getvalue())
    ranks = document.get("ranks", [document])
    return [{"argv": r["argv"], "env": r["env"]} for r in ranks]


def _normal(value: Any) -> Any:
    if isinstance(value, str) and value[:1] in ("{", "["):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _fields(table: argtable.ArgTable, arguments: list[str]) -> dict[str, Any]:
    return {k: _normal(v) for k, v in parse(table, arguments).items()}


def _without_markers(fields: dict[str, Any], markers: set[str]) -> dict[str, Any]:
    """Fields whose value import could not know (a placeholder) or made a secret reference
    (rendered redacted): both reported by the import, and left out of the comparison."""
    return {
        k: v
        for k, v in fields.items()
        if not any(m in json.dumps(v) for m in (*markers, "<redacted: from_env"))
    }


CASES = list(_cases())
# What orch adds to every multi-node launch by design (docs/groups.md): the port its gate
# opens, so that the ranks start together (SGLang >= 0.5.19).
ORCH_OWN_FIELDS = {"gated_launch_port"}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, marks=pytest.mark.xfail(reason=c.gap, strict=True)) if c.gap else c
        for c in CASES
    ],
    ids=[c.name for c in CASES],
)
def test_imported_profile_renders_what_the_script_runs(case: Case, tmp_path: Path) -> None:
    profiles = tmp_path / "profiles"
    profiles.mkdir()
    ran = _run_in_bash(case, tmp_path / "sandbox")
    if case.no_launch is not None:
        assert ran == [], "bash ran an SGLang launch that EXPECT.yaml says is not there"
        with pytest.raises(ImportScriptError):
            _import(case, profiles)
        return
    if case.refused is not None:
        # nothing to compare: what bash passes is what SGLang refuses, and import says why
        assert ran, "bash ran no SGLang launch"
        newest = argtable.load_table(argtable.available_versions()[-1])
        for record in ran:
            with pytest.raises(OracleError):
                parse(newest, _sglang_arguments(record["argv"], record["program"]) or [])
        kinds = {n.kind for w in _import(case, profiles) for n in w.profile.notes}
        assert kinds & {"lost", "warning"}, "import did not say what SGLang refuses"
        return
    written = _import(case, profiles)
    reported = "\n".join(n.message for w in written for n in w.profile.notes)
    rendered: list[tuple[dict[str, Any], set[str], argtable.ArgTable]] = []
    for each in written:
        markers = _fill_placeholders(each, profiles)
        table = argtable.load_table(each.profile.table_version)
        for rank in _render(each.profile.name, profiles):
            rendered.append((rank, markers, table))
    assert len(ran) == len(rendered), (
        f"bash started {len(ran)} SGLang server(s), orch imported {len(rendered)}"
    )
    # pair each launch bash ran with the rendered one it matches best (background jobs end in
    # any order); then every field must match
    remaining = list(rendered)
    skipped = {  # flags the import reported it did not import
        flag[2:].replace("-", "_") for flag in re.findall(r"not imported: (--[a-z0-9-]+)", reported)
    }
    for record in ran:
        arguments = _sglang_arguments(record["argv"], record["program"])
        assert arguments is not None
        candidates = []
        for index, (rank, markers, table) in enumerate(remaining):
            ours = _sglang_arguments(rank["argv"][1:], rank["argv"][0]) or []
            try:
                theirs_fields = _fields(table, arguments)
            except OracleError as exc:
                pytest.fail(f"SGLang {table.version} would refuse the script's launch: {exc}")
            ours_fields = _fields(table, ours)
            keys = (set(theirs_fields) | set(ours_fields)) - ORCH_OWN_FIELDS - skipped
            differ = {
                k
                for k in keys
                if _without_markers({k: theirs_fields.get(k)}, markers)
                and _without_markers({k: ours_fields.get(k)}, markers)
                and theirs_fields.get(k) != ours_fields.get(k)
            }
            candidates.append((len(differ), index, theirs_fields, ours_fields, differ))
        _, index, theirs_fields, ours_fields, differ = min(candidates, key=lambda c: c[:2])
        rank, markers, table = remaining.pop(index)
        assert not differ, {k: (theirs_fields.get(k), ours_fields.get(k)) for k in differ}
        _compare_env(record["env"], rank["env"], markers, reported)


def _compare_env(
    theirs: dict[str, str], ours: dict[str, str], markers: set[str], reported: str
) -> None:
    skipped = set(re.findall(r"not imported: (\w+)=", reported))
    theirs = {k: v for k, v in theirs.items() if k not in SANDBOX_ENV and k not in skipped}
    # docker run --gpus: the NVIDIA runtime shows the container those GPUs; orch selects the
    # same GPUs on the host with CUDA_VISIBLE_DEVICES (all of them: nothing to set)
    gpus = theirs.pop("NVIDIA_VISIBLE_DEVICES", None)
    if gpus is not None and gpus != "all" and "CUDA_VISIBLE_DEVICES" not in theirs:
        theirs["CUDA_VISIBLE_DEVICES"] = gpus
    for name in set(theirs) | set(ours):
        value = ours.get(name)
        if value is not None and (
            value.startswith("<redacted") or any(m in value for m in markers)
        ):
            assert name in theirs, f"{name}: orch sets it, the script does not"
            continue
        assert theirs.get(name) == value, f"env {name}: script {theirs.get(name)!r}, orch {value!r}"
