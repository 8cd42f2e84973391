"""Profile -> a SkyPilot task: resources, nodes, secrets by name, a readiness probe, and ``run``
(the shell script).  [pure]"""

from __future__ import annotations

import math
from typing import Any

from orchestrator.export.common import READINESS_PROBE, Plan, secret_sources
from orchestrator.export.shell import Shell, accelerator, shell_script

_SKYPILOT = Shell(
    rank="SKYPILOT_NODE_RANK",
    nodes="SKYPILOT_NUM_NODES",
    # newline-separated, head first: everything before the first whitespace
    head_setup='MASTER_ADDR="${SKYPILOT_NODE_IPS%%[[:space:]]*}"',
    head="MASTER_ADDR",
)


def documents(plan: Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A SkyPilot task: resources, nodes, secrets by name, a readiness probe, and ``run``."""
    task: dict[str, Any] = {"name": plan.name}
    if plan.nnodes > 1:
        task["num_nodes"] = plan.nnodes
    task["resources"] = {
        "accelerators": accelerator(plan, "skypilot"),
        "ports": [plan.commands[0].port],
        "image_id": f"docker:{plan.image}",
    }
    secrets = secret_sources(plan)
    if secrets:
        task["secrets"] = dict.fromkeys(secrets)
        plan.notes.append(
            f"secrets: sky launch --secret {' --secret '.join(secrets)} (read from your "
            "environment; never in the task file)"
        )
    task["service"] = {
        "readiness_probe": {
            "path": READINESS_PROBE,
            "initial_delay_seconds": math.ceil(plan.profile.health.startup_timeout_s),
        },
        "replicas": plan.profile.export.replicas,
    }
    task["run"] = shell_script(plan, _SKYPILOT)
    plan.notes.append(
        "restart: SkyPilot runs the server once (managed jobs or SkyServe restart it); "
        "restart.* is orch's supervisor's"
    )
    variables = {
        "dist_init_addr": "MASTER_ADDR",
        "nnodes": _SKYPILOT.nodes,
        "node_rank": _SKYPILOT.rank,
    }
    return [task], variables
