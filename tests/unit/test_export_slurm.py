"""orch export slurm, read back without running it: the #SBATCH options, the one srun step and
its single-quoted payload, the per-task rank variables (never SLURM_NNODES or
SLURM_LAUNCH_NODE_IPADDR), the secrets checked and never written, the CLI flags, and what is
refused. Run through a real bash in tests/property/test_export_slurm_shell.py, on a real Slurm
in tests/slurm/."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from orchestrator.cli import main as cli
from orchestrator.errors import ExitCode, RenderError, UsageError
from orchestrator.export import export
from orchestrator.export.common import Provenance
from orchestrator.export.slurm import SlurmOptions, sbatch_directives, srun_argv
from orchestrator.profile.store import ProfileStore
from tests.conftest import SHIPPED_PROFILES, copy_examples

PROVENANCE = Provenance("profiles/p.yaml", "0123456789abcdef")
SHIPPED = ProfileStore(SHIPPED_PROFILES)
GROUP = "qwen35-397b-2x8-h200"


def _slurm(name: str, options: SlurmOptions | None = None, store: ProfileStore = SHIPPED) -> str:
    loaded = store.load(name)
    return export(loaded.profile, loaded.table, "slurm", PROVENANCE, options).text


def test_a_group_asks_one_node_per_rank_and_its_gpus() -> None:
    text = _slurm(GROUP)
    assert text.startswith("#!/bin/bash\n# orch export slurm qwen35-397b-2x8-h200: from ")
    assert sbatch_directives(text) == [
        f"--job-name={GROUP}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--gpus-per-node=8",
        "--signal=TERM@30",  # stop_timeout_s before the time limit
    ]
    assert "\nset -euo pipefail\n" in text


def test_the_cluster_options_become_sbatch_lines() -> None:
    options = SlurmOptions(
        partition="gpu", account="team-llm", time="2-00:00:00", gres=False, exclusive=True
    )
    text = _slurm(GROUP, options)
    assert sbatch_directives(text) == [
        f"--job-name={GROUP}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--account=team-llm",
        "--time=2-00:00:00",
        "--exclusive",
        "--signal=TERM@30",
    ]
    assert "note: --no-gres: no --gpus-per-node" in text
    assert "--gpus-per-node" not in text.split("#SBATCH", 1)[1]


def test_one_srun_step_whose_tasks_read_their_own_rank() -> None:
    text = _slurm(GROUP)
    assert text.count("\nexec srun ") == 1
    assert text.rstrip().endswith("'"), "nothing after srun: the job's exit status is srun's"
    argv = srun_argv(text)
    assert argv[:7] == [
        "exec",
        "srun",
        "--nodes=2",
        "--ntasks=2",
        "--ntasks-per-node=1",
        "--kill-on-bad-exit=1",
        "bash",
    ]
    payload = argv[-1]
    assert argv[-2] == "-c"
    assert '--node-rank "${SLURM_NODEID}"' in payload
    assert '--nnodes "${SLURM_JOB_NUM_NODES}"' in payload
    assert '--dist-init-addr "${ORCH_SLURM_HEAD_ADDR}:20000"' in payload
    batch_shell = [
        line for line in text[: text.index("\nexec srun ")].splitlines() if not line.startswith("#")
    ]  # what the batch shell runs, the payload aside
    for wrong in ("SLURM_NODEID", "SLURM_NNODES", "SLURM_LAUNCH_NODE_IPADDR"):
        assert not [line for line in batch_shell if wrong in line], wrong
    for wrong in ("SLURM_NNODES", "SLURM_LAUNCH_NODE_IPADDR"):
        assert wrong not in payload


def test_the_head_is_found_inside_the_job_from_the_head_node_itself() -> None:
    text = _slurm(GROUP)
    assert 'nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST}")' in text
    assert (
        'srun --overlap --nodes=1 --ntasks=1 --nodelist="${ORCH_SLURM_HEAD_NODE}" hostname -I'
        in text
    )
    assert text.index("hostname -I") < text.index("\nexec srun ")


def test_a_single_server_needs_no_head() -> None:
    text = _slurm("qwen36-mtp-h200")
    assert "--nodes=1" in sbatch_directives(text)
    assert "scontrol" not in text
    assert srun_argv(text)[2:4] == ["--nodes=1", "--ntasks=1"]
    assert "--node-rank" not in srun_argv(text)[-1]


def test_secrets_are_checked_in_the_jobs_environment_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MY_KEY", "sk_sentinel_value_456")
    monkeypatch.setenv("HF_TOKEN", "hf_sentinel_value_123")
    root = copy_examples(tmp_path / "profiles")
    (root / "p.yaml").write_text(
        "extends: qwen36-mtp-rtxpro6000-tp4\nargs: {api_key: {from_env: MY_KEY}}\n"
    )
    text = _slurm("p", store=ProfileStore(root))
    assert "sentinel" not in text
    assert ': "${MY_KEY:?orch export: MY_KEY is not set: export it where you run sbatch}"' in text
    assert '"${MY_KEY}"' in srun_argv(text)[-1]


@pytest.mark.parametrize(
    ("document", "named"),
    [
        ("extends: demo\nenv: {SLURM_NODEID: '0'}\n", "env.SLURM_NODEID"),
        ("extends: demo\nenv: {ORCH_SLURM_HEAD_ADDR: x}\n", "env.ORCH_SLURM_HEAD_ADDR"),
        ("extends: demo\nenv: {CUDA_VISIBLE_DEVICES: '2'}\n", "env.CUDA_VISIBLE_DEVICES"),
        ("extends: demo\nbind: 10.1.2.3\n", "bind"),
    ],
)
def test_what_slurm_cannot_run_is_refused_naming_the_key(
    tmp_path: Path, document: str, named: str
) -> None:
    root = copy_examples(tmp_path / "profiles")
    (root / "p.yaml").write_text(document)
    with pytest.raises(RenderError) as caught:
        _slurm("p", store=ProfileStore(root))
    assert f": {named}:" in caught.value.message
    assert caught.value.hint


def test_no_image_is_needed(tmp_path: Path) -> None:
    root = copy_examples(tmp_path / "profiles")
    (root / "p.yaml").write_text("host: local\nmodel: {path: /m}\ngpu: {type: H200}\n")
    text = _slurm("p", store=ProfileStore(root))  # no sglang: pin, no export.image: fine here
    assert "image" not in text


@pytest.mark.parametrize(
    ("options", "flag"),
    [
        (SlurmOptions(partition="gpu\n#SBATCH --nodes=9"), "--partition"),
        (SlurmOptions(account="a b"), "--account"),
        (SlurmOptions(time="soon"), "--time"),
    ],
)
def test_an_option_that_is_not_one_sbatch_word_is_a_usage_error(
    options: SlurmOptions, flag: str
) -> None:
    with pytest.raises(UsageError) as caught:
        _slurm(GROUP, options)
    assert caught.value.message.startswith(flag)


def test_orch_export_slurm_flags_and_their_refusal_for_other_engines(tmp_path: Path) -> None:
    root = copy_examples(tmp_path / "profiles")
    target = tmp_path / "job.sh"
    out, err = io.StringIO(), io.StringIO()
    argv = ["--profiles", str(root), "export", "slurm", GROUP, "-o", str(target)]
    flags = ["--partition", "gpu", "--time", "4:00:00", "--no-gres", "--exclusive"]
    assert cli.main([*argv, *flags], out=out, err=err) == ExitCode.OK, err.getvalue()
    assert f"wrote {target}: slurm for {GROUP}" in out.getvalue()
    assert "note: stop: TERM 30 s" in out.getvalue()
    assert sbatch_directives(target.read_text()) == [
        f"--job-name={GROUP}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--partition=gpu",
        "--time=4:00:00",
        "--exclusive",
        "--signal=TERM@30",
    ]
    err = io.StringIO()
    code = cli.main(
        ["--profiles", str(root), "export", "dstack", GROUP, "--partition", "gpu"],
        out=out,
        err=err,
    )
    assert code == ExitCode.USAGE
    assert "--partition: for orch export slurm only" in err.getvalue()
