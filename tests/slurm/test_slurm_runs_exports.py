"""`orch export slurm` scripts submitted to a real Slurm 22.05 cluster (two nodes on this machine,
fake GPUs): each rank's argv is `orch render --json`'s for that rank and the ranks are 0 and 1; a
rank that fails ends the job FAILED; `scancel` leaves no process of the job, a TERM-ignoring rank
included. A stub interpreter stands in for SGLang: it records what it was exec'd with, then exits,
sleeps or ignores TERM as the test tells it."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from orchestrator.cli import main as cli
from orchestrator.model import SecretRef
from tests.slurm.cluster import SlurmCluster

SECRETS = {"API_KEY": "sk $x `id` 'q'"}
HOSTILE_ARG = "two words $HOME `id` \"q\" 'q'"
HOSTILE_ENV = "line one\nline two ${SLURM_NODEID}"

STUB = """\
import json, os, signal, subprocess, sys, time
argv = sys.argv[1:]
rank = argv[argv.index("--node-rank") + 1] if "--node-rank" in argv else "0"
names = json.loads(os.environ["STUB_NAMES"])
child = subprocess.Popen(["sleep", "300"], stdout=subprocess.DEVNULL) if os.environ.get(
    "STUB_CHILD") else None
record = {
    "argv": argv,
    "env": {n: os.environ.get(n) for n in names},
    "node": os.environ.get("SLURMD_NODENAME"),
    "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
    "pids": [os.getpid()] + ([child.pid] if child else []),
}
path = os.path.join(os.environ["STUB_DIR"], f"rank-{rank}.json")
with open(path + ".tmp", "w", encoding="utf-8") as out:
    json.dump(record, out)
os.replace(path + ".tmp", path)
action = os.environ.get(f"STUB_RANK{rank}", "exit:0")
if action == "ignore-term":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
if action.startswith("await-rank0-exit:"):  # fail once rank 0 runs: it must be ended
    while not os.path.exists(os.path.join(os.environ["STUB_DIR"], "rank-0.json")):
        time.sleep(0.05)
    sys.exit(int(action.rsplit(":", 1)[1]))
if action.startswith("exit:"):
    sys.exit(int(action[5:]))
time.sleep(300)
"""


def _first_address() -> str:
    """What ``hostname -I`` answers first on this machine: the head's address in the job."""
    done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=True)
    return done.stdout.split()[0]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("slurm-jobs")
    root.chmod(0o755)
    stub_bin = root / "venv" / "bin"
    stub_bin.mkdir(parents=True)
    stub = stub_bin / "python3"
    stub.write_text(f"#!{sys.executable}\n{STUB}", encoding="utf-8")
    stub.chmod(0o755)
    profiles = root / "profiles"
    profiles.mkdir()
    python = str(stub)  # the host's and the cluster's: orch render's argv is the export's
    hosts = {
        "a": {"address": _first_address(), "python": python, "workdir": "/w"},
        "b": {"address": "10.0.0.2", "python": python, "workdir": "/w"},
    }
    (profiles / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}))
    args: dict[str, Any] = {"tokenizer_path": HOSTILE_ARG, "api_key": {"from_env": "API_KEY"}}
    common: dict[str, Any] = {
        "sglang": "0.5.23",
        "bind": "0.0.0.0",
        "model": {"path": "/models/m"},
        "gpu": {"type": "H200"},
        "env": {"ODD_VALUE": HOSTILE_ENV},
        "export": {"python": python},
    }
    group = {
        **common,
        "args": {**args, "tp_size": 4},
        "group": {
            "nodes": [{"host": "a", "env": {"NODE_VALUE": "rank 0's"}}, {"host": "b"}],
            "rendezvous_port": 20000,
            "gated_launch": False,
        },
    }
    single = {**common, "host": "a", "args": {**args, "tp_size": 2}}
    (profiles / "pair.yaml").write_text(yaml.safe_dump(group))
    (profiles / "single.yaml").write_text(yaml.safe_dump(single))
    return root


def _orch(workspace: Path, *argv: str) -> str:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["--profiles", str(workspace / "profiles"), *argv], out=out, err=err)
    assert code == 0, err.getvalue()
    return out.getvalue()


def _rendered(workspace: Path, name: str) -> list[dict[str, Any]]:
    document = json.loads(_orch(workspace, "render", name, "--json"))
    ranks: list[dict[str, Any]] = document.get("ranks", [{"rank": 0, **document}])
    return ranks


def _unredacted(value: str) -> str:
    for name, secret in SECRETS.items():
        if value == SecretRef(name).display():
            return secret
    return value


def _submit(
    cluster: SlurmCluster, workspace: Path, name: str, *, wait: bool, **stub: str
) -> tuple[int, Path]:
    """Export ``name`` and sbatch it, the stub's instructions in the job's environment; with
    ``wait``, poll until the job ends (sbatch --wait polls with growing sleeps: seconds each)."""
    script = workspace / f"{name}.sh"
    _orch(workspace, "export", "slurm", name, "-o", str(script))
    out = workspace / f"out-{name}-{len(list(workspace.glob('out-*')))}"
    out.mkdir()
    out.chmod(0o777)
    names = sorted({n for rank in _rendered(workspace, name) for n in rank["env"]})
    env = {
        **cluster.env,
        **SECRETS,
        "STUB_DIR": str(out),
        "STUB_NAMES": json.dumps(names),
        **stub,
    }
    argv = ["sbatch", "--parsable", f"--chdir={workspace}", f"--output={out}/job.log"]
    done = subprocess.run(
        [*argv, str(script)], env=env, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    job = int(done.stdout.strip().split(";")[0])
    if wait:
        _until(lambda: _job_state(cluster, job) in FINAL_STATES, 60, f"the end of job {job}")
    return job, out


FINAL_STATES = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


def _job_state(cluster: SlurmCluster, job: int) -> str:
    shown = cluster.run("scontrol", "show", "job", str(job)).stdout
    found = re.search(r"JobState=(\S+)", shown)
    assert found is not None, shown
    return found.group(1)


def _exit_code(cluster: SlurmCluster, job: int) -> str:
    shown = cluster.run("scontrol", "show", "job", str(job)).stdout
    found = re.search(r" ExitCode=(\S+)", shown)
    assert found is not None, shown
    return found.group(1)


def _records(workspace: Path, job_out: Path) -> dict[str, Any]:
    return {
        path.stem: json.loads(path.read_text(encoding="utf-8"))
        for path in sorted(job_out.glob("rank-*.json"))
    }


def test_a_two_node_group_runs_each_ranks_rendered_argv(
    cluster: SlurmCluster, workspace: Path
) -> None:
    job, out = _submit(cluster, workspace, "pair", wait=True)
    log = (out / "job.log").read_text(errors="replace")
    assert _job_state(cluster, job) == "COMPLETED", log
    records = _records(workspace, out)
    rendered = _rendered(workspace, "pair")
    assert sorted(records) == ["rank-0", "rank-1"]
    for rank in rendered:
        record = records[f"rank-{rank['rank']}"]
        assert record["argv"] == [_unredacted(t) for t in rank["argv"][1:]]
        assert record["env"] == {n: rank["env"].get(n) for n in record["env"]}
        assert record["gpus"] == "0,1"  # --gpus-per-node=2 (tp 4 over 2 nodes), fake GPUs
    assert {records["rank-0"]["node"], records["rank-1"]["node"]} == {"n1", "n2"}
    assert records["rank-0"]["node"] == "n1"  # rank 0 on the head, the job's first node


def test_a_single_server_runs_its_rendered_argv(cluster: SlurmCluster, workspace: Path) -> None:
    job, out = _submit(cluster, workspace, "single", wait=True)
    records = _records(workspace, out)
    (rendered,) = _rendered(workspace, "single")
    assert list(records) == ["rank-0"]
    assert records["rank-0"]["argv"] == [_unredacted(t) for t in rendered["argv"][1:]]
    assert records["rank-0"]["gpus"] == "0,1"
    assert _job_state(cluster, job) == "COMPLETED"


def test_a_failing_rank_fails_the_job_and_ends_the_other(
    cluster: SlurmCluster, workspace: Path
) -> None:
    job, out = _submit(cluster, workspace, "pair", wait=True, STUB_RANK1="await-rank0-exit:3")
    log = (out / "job.log").read_text(errors="replace")
    assert _job_state(cluster, job) == "FAILED", log
    assert _exit_code(cluster, job) != "0:0"
    records = _records(workspace, out)
    assert sorted(records) == ["rank-0", "rank-1"]  # rank 0 ran (and slept) until killed
    pids = [pid for record in records.values() for pid in record["pids"]]
    _until(lambda: not any(_alive(pid) for pid in pids), 30, "every process of the job gone")


def test_scancel_leaves_no_process_of_the_job_a_term_ignoring_rank_included(
    cluster: SlurmCluster, workspace: Path
) -> None:
    job, out = _submit(
        cluster,
        workspace,
        "pair",
        wait=False,
        STUB_RANK0="sleep",
        STUB_RANK1="ignore-term",
        STUB_CHILD="1",
    )
    _until(lambda: len(list(out.glob("rank-*.json"))) == 2, 60, "both ranks running")
    pids = [pid for record in _records(workspace, out).values() for pid in record["pids"]]
    assert len(pids) == 4
    assert all(_alive(pid) for pid in pids)
    assert cluster.run("scancel", str(job)).returncode == 0
    # KillWait=5 in this cluster's slurm.conf: the TERM-ignoring rank is SIGKILLed after it
    _until(lambda: not any(_alive(pid) for pid in pids), 60, "every process of the job gone")
    _until(lambda: _job_state(cluster, job) == "CANCELLED", 30, "the job CANCELLED")


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _until(ready: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not ready():
        assert time.monotonic() < deadline, f"no {what} after {timeout_s} s"
        time.sleep(0.2)
