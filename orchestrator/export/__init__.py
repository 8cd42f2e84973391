"""Profile -> what another engine runs: Kubernetes (LeaderWorkerSet, Deployment), SkyPilot, dstack,
Slurm.

The profile already knows the exact argv and env of every rank (``render.render_members``); an
export carries that command over without retyping it, so the same server starts:

- **Kubernetes** gets exec form (``command``/``args`` lists, never ``bash -c``). Kubernetes
  expands ``$(NAME)`` and turns ``$$`` into ``$`` inside ``command``, ``args`` and ``env`` values,
  so every ``$`` of orch's text is doubled and only the references orch means are single:
  the LeaderWorkerSet's topology variables and the variables that carry secrets.
- **SkyPilot** and **dstack** run shell text (``run``/``commands``): every literal is quoted
  once, the server is ``exec``ed, and only the rank fields and the secrets are expansions.
- **Slurm** gets a batch script (``slurm.py``) whose one ``srun`` step runs that same shell text
  in every task, single-quoted so that each task reads its own rank.

What cannot be carried over exactly is either translated and said (``Export.notes``: the image's
interpreter for the host's, the GPU count for the host's device list, a pod's address for a
loopback bind, orch's gated launch left off since no orch supervisor runs there) or refused with
a ``RenderError`` naming the profile key: never dropped in silence. Before returning, each export
reads its own result back (``kubernetes_expand``, the shell quoting's inverse) and checks that
every rank gets exactly ``commands``: the argv and env that ``render`` gives the exported view.

Pure: no I/O. The documents are dicts; ``Export.text`` is the YAML to write.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from orchestrator.errors import RenderError
from orchestrator.export import dstack, k8s, skypilot, slurm
from orchestrator.export.common import Export, Plan, Provenance, header, plan_for
from orchestrator.export.slurm import SlurmOptions
from orchestrator.model import EXPORT_ENGINES, Profile
from orchestrator.profile.yamldoc import dump_yaml
from orchestrator.sglang.argtable import ArgTable


def export(
    profile: Profile,
    table: ArgTable,
    engine: str,
    provenance: Provenance,
    slurm_options: SlurmOptions | None = None,
) -> Export:
    """``profile`` as ``engine`` runs it; a ``RenderError`` names what the engine cannot run.
    ``slurm_options``: the cluster's side of a Slurm job (partition, account, time ...)."""
    if engine == "slurm":
        return _slurm(profile, table, provenance, slurm_options or SlurmOptions())
    builders: dict[str, Callable[[Plan], tuple[list[dict[str, Any]], dict[str, str]]]] = {
        "k8s-lws": k8s.leader_worker_set_documents,
        "k8s": k8s.deployment_documents,
        "skypilot": skypilot.documents,
        "dstack": dstack.documents,
    }
    if engine not in builders:
        raise RenderError(
            f"unknown export engine {engine!r}", f"one of {', '.join(EXPORT_ENGINES)}"
        )
    plan = plan_for(profile, table, engine, provenance)
    documents, variables = builders[engine](plan)
    body = "---\n".join(dump_yaml(document) for document in documents)
    result = Export(
        engine=engine,
        profile=profile.name,
        documents=tuple(documents),
        text=header(plan) + body,
        notes=tuple(plan.notes),
        commands=plan.commands,
        rank_variables=variables,
    )
    k8s.check_round_trip(result, plan)
    return result


def _slurm(
    profile: Profile, table: ArgTable, provenance: Provenance, options: SlurmOptions
) -> Export:
    """A batch script, not YAML: ``documents`` holds its ``#SBATCH`` options and the task
    payload, which ``slurm.check_round_trip`` reads back out of the text."""
    slurm.check_options(options)
    plan = plan_for(profile, table, "slurm", provenance)
    slurm.notes(plan, options)
    text = slurm.script(plan, options, header(plan))
    document = {
        "sbatch": slurm.directives(plan, options),
        "task": slurm.task_payload(plan),
    }
    result = Export(
        engine="slurm",
        profile=profile.name,
        documents=(document,),
        text=text,
        notes=tuple(plan.notes),
        commands=plan.commands,
        rank_variables=slurm.RANK_VARIABLES,
    )
    slurm.check_round_trip(result)
    return result
