"""Profile -> a Slurm batch script (``sbatch FILE``): one job, one node per rank, one ``srun``
step whose tasks each read their own rank.  [pure]

What SGLang-on-Slurm scripts get wrong, and what this script does instead (docs/export.md):

- the node rank: ``$SLURM_NODEID`` in the batch shell is 0 on every rank. Here the task payload is
  one single-quoted word (``bash -c '...'``), so ``SLURM_NODEID`` is read by each task;
- ``SLURM_NNODES`` is the *step's* node count: ``--nnodes`` is ``SLURM_JOB_NUM_NODES``;
- ``SLURM_LAUNCH_NODE_IPADDR`` is whoever ran ``srun``: the head's address is asked of the head
  node itself (``scontrol show hostnames`` for its name, then ``hostname -I`` run there: node
  names need not resolve);
- a trailing ``echo`` reports success after ``srun`` failed: the batch shell ``exec``s ``srun``,
  whose ``--kill-on-bad-exit=1`` ends every rank when one fails, so the job's state is the ranks';
- ``scancel`` or the time limit SIGKILLs a rank ``KillWait`` seconds after TERM: ``--signal``
  sends TERM ``stop_timeout_s`` before the limit, so SGLang drains first.
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass

from orchestrator.errors import RenderError, UsageError
from orchestrator.export.common import Export, Plan, secret_sources
from orchestrator.export.shell import Shell, shell_script

# The variables the batch shell hands each task: the head node's name and address.
HEAD_NODE = "ORCH_SLURM_HEAD_NODE"
HEAD_ADDR = "ORCH_SLURM_HEAD_ADDR"

_SLURM = Shell(rank="SLURM_NODEID", nodes="SLURM_JOB_NUM_NODES", head_setup="", head=HEAD_ADDR)
RANK_VARIABLES = {"dist_init_addr": HEAD_ADDR, "nnodes": _SLURM.nodes, "node_rank": _SLURM.rank}

MAX_SIGNAL_LEAD_S = 65535  # sbatch's limit for --signal's @sig_time

# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours[:minutes[:seconds]]
_TIME = re.compile(r"\d+(:\d{1,2}){0,2}|\d+-\d+(:\d{1,2}){0,2}|UNLIMITED|INFINITE")
# partition and account names: one word, nothing a #SBATCH line or the shell reads specially
_NAME = re.compile(r"[A-Za-z0-9_.+-][A-Za-z0-9_.,+-]*")


@dataclass(frozen=True)
class SlurmOptions:
    """The cluster's side of the job: what the profile cannot know."""

    partition: str | None = None
    account: str | None = None
    time: str | None = None  # sbatch --time
    gres: bool = True  # False: no --gpus-per-node (clusters without GRES reject it)
    exclusive: bool = False


def check_options(options: SlurmOptions) -> None:
    """A value that would not be one ``#SBATCH`` word is a usage error, before anything else."""
    for flag, value, pattern, example in (
        ("--partition", options.partition, _NAME, "gpu"),
        ("--account", options.account, _NAME, "team-llm"),
        ("--time", options.time, _TIME, "4:00:00 or 2-00:00:00"),
    ):
        if value is not None and pattern.fullmatch(value) is None:
            raise UsageError(f"{flag} {value!r} is not a Slurm value", f"for example {example}")


def directives(plan: Plan, options: SlurmOptions) -> list[str]:
    """The ``#SBATCH`` options, in the order written."""
    lead = signal_lead_s(plan)
    out = [
        f"--job-name={plan.name}",
        f"--nodes={plan.nnodes}",
        "--ntasks-per-node=1",
    ]
    if options.gres:
        out.append(f"--gpus-per-node={plan.gpus_per_node}")
    if options.partition is not None:
        out.append(f"--partition={options.partition}")
    if options.account is not None:
        out.append(f"--account={options.account}")
    if options.time is not None:
        out.append(f"--time={options.time}")
    if options.exclusive:
        out.append("--exclusive")
    out.append(f"--signal=TERM@{lead}")
    return out


def signal_lead_s(plan: Plan) -> int:
    """Seconds before the time limit that TERM reaches every rank: the profile's stop timeout."""
    return max(1, min(MAX_SIGNAL_LEAD_S, math.ceil(plan.profile.stop_timeout_s)))


def task_payload(plan: Plan) -> str:
    """What every task of the step runs (``bash -c``): the shell engines' script on the Slurm
    variables each task reads for itself, and, for a group, a check that rank 0 is the head."""
    script = shell_script(plan, _SLURM)
    if plan.nnodes == 1:
        return script
    first, rest = script.split("\n", 1)
    message = '"orch export: SLURM_NODEID 0 is not on the head node the batch script found"'
    guard = (
        f'if [ "${{{_SLURM.rank}}}" = 0 ] && [ "${{SLURMD_NODENAME}}" != "${{{HEAD_NODE}}}" ]; '
        f"then echo {message} >&2; exit 2; fi"
    )
    return f"{first}\n{guard}\n{rest}"


def _refuse_host_bind(plan: Plan) -> None:
    bind = plan.profile.bind
    if bind not in ("0.0.0.0", "::"):  # noqa: S104 - loopback binds were translated already
        raise RenderError(
            f"{plan.profile.source}: bind: {bind} is an address of the profile's host; Slurm "
            "runs the server on nodes it picks, which have other addresses",
            "bind: 0.0.0.0 (or leave bind out: the export serves on the node's addresses)",
        )


def script(plan: Plan, options: SlurmOptions, header: str) -> str:
    """The batch script: shebang, ``header`` (provenance and notes), ``#SBATCH`` lines, the
    secrets checked, the head found (a group), and ``exec srun`` of the task payload."""
    _refuse_host_bind(plan)
    lines = ["#!/bin/bash", header.rstrip("\n")]
    lines += [f"#SBATCH {directive}" for directive in directives(plan, options)]
    lines.append("set -euo pipefail")
    for name in secret_sources(plan):
        message = f"orch export: {name} is not set: export it where you run sbatch"
        lines.append(f': "${{{name}:?{message}}}"')
    if plan.nnodes > 1:
        lines += [
            "# The head (rank 0) is the job's first node; its address is asked of the node",
            "# itself: node names need not resolve, SLURM_LAUNCH_NODE_IPADDR is not the head.",
            'nodes=$(scontrol show hostnames "${SLURM_JOB_NODELIST}")',
            f"{HEAD_NODE}=${{nodes%%$'\\n'*}}",
            "addresses=$(srun --overlap --nodes=1 --ntasks=1 "
            f'--nodelist="${{{HEAD_NODE}}}" hostname -I)',
            f'read -r {HEAD_ADDR} _ <<<"${{addresses}}"',
            f': "${{{HEAD_ADDR}:?orch export: no address from hostname -I on ${{{HEAD_NODE}}}}}"',
            f'case "${{{HEAD_ADDR}}}" in *:*) {HEAD_ADDR}="[${{{HEAD_ADDR}}}]" ;; esac',
            f"export {HEAD_NODE} {HEAD_ADDR}",
        ]
    lines += [
        "# One step, one task per node. The payload is single-quoted: each task reads its own",
        "# SLURM_NODEID; the batch shell expands nothing in it. exec: the job's exit is srun's.",
        "# shellcheck disable=SC2016",
        f"exec srun --nodes={plan.nnodes} --ntasks={plan.nnodes} --ntasks-per-node=1 "
        f"--kill-on-bad-exit=1 bash -c {shlex.quote(task_payload(plan))}",
    ]
    return "\n".join(lines) + "\n"


def notes(plan: Plan, options: SlurmOptions) -> None:
    """What the script does that the profile does not say, for the header and the CLI."""
    secrets = secret_sources(plan)
    if secrets:
        plan.notes.append(
            f"secrets: export {', '.join(secrets)} in the shell that runs sbatch (the job "
            "inherits it; the script checks each is set and never holds a value)"
        )
    if not options.gres:
        plan.notes.append(
            f"--no-gres: no --gpus-per-node; Slurm sets no CUDA_VISIBLE_DEVICES, so each server "
            f"sees every GPU of its node ({plan.gpus_per_node} used per node)"
        )
    if not options.exclusive:
        plan.notes.append(
            "CPUs and memory: Slurm's defaults for one task per node (often 1 CPU); "
            "--exclusive gives each rank its whole node"
        )
    plan.notes.append(
        f"stop: TERM {signal_lead_s(plan)} s (stop_timeout_s) before the time limit; scancel "
        "sends TERM at once and SIGKILL after the cluster's KillWait (a rank that ignores TERM, "
        "as SGLang >= 0.5.21 ranks >= 1 do, lives until then)"
    )
    plan.notes.append(
        "ports: one server per node (--ntasks-per-node=1), so SGLang's own free-port probes "
        "(nccl_port) do not race; the ports the profile pins are carried as written"
    )
    plan.notes.append("restart: Slurm runs the server once; restart.* is orch's supervisor's")


def sbatch_directives(text: str) -> list[str]:
    """The options sbatch reads from ``text``: ``#SBATCH`` lines up to the first command."""
    out: list[str] = []
    for line in text.splitlines()[1:]:
        if line.strip() and not line.startswith("#"):
            break
        if line.startswith("#SBATCH"):
            out += line.removeprefix("#SBATCH").split()
    return out


def srun_argv(text: str) -> list[str]:
    """The words of the script's last command, ``exec srun ... bash -c PAYLOAD`` (read back as
    a POSIX shell splits them)."""
    start = text.rindex("\nexec srun ") + 1
    return shlex.split(text[start:])


def check_round_trip(result: Export) -> None:
    """Read the script back as sbatch and bash do: the ``#SBATCH`` options are the ones meant,
    and the one word after ``bash -c`` is the task payload, whole (a quoting bug here would run
    another server than the profile's). Each rank's argv is checked by the test suite through a
    real bash, and on a real Slurm cluster (tests/slurm/)."""
    document = result.documents[0]
    argv = srun_argv(result.text)
    if sbatch_directives(result.text) != document["sbatch"] or argv[-3:] != [
        "bash",
        "-c",
        document["task"],
    ]:
        raise AssertionError("orch export slurm: the script does not read back")
