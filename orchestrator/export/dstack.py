"""Profile -> a dstack service (one node) or task (``nodes:``, where dstack does multi-node),
whose ``commands`` are the shell script.  [pure]"""

from __future__ import annotations

from typing import Any

from orchestrator.export.common import READINESS_PROBE, Plan, secret_sources
from orchestrator.export.shell import Shell, accelerator, shell_script

_DSTACK = Shell(
    rank="DSTACK_NODE_RANK", nodes="DSTACK_NODES_NUM", head_setup="", head="DSTACK_MASTER_NODE_IP"
)


def documents(plan: Plan) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """A dstack service (one node) or task (``nodes:``, where dstack does multi-node)."""
    run: dict[str, Any] = {"type": "service" if plan.nnodes == 1 else "task", "name": plan.name}
    if plan.nnodes > 1:
        run["nodes"] = plan.nnodes
    run["image"] = plan.image
    secrets = secret_sources(plan)
    if secrets:
        run["env"] = list(secrets)  # a bare name: dstack takes the value from your environment
        plan.notes.append(f"secrets: set {', '.join(secrets)} in the shell that runs dstack apply")
    run["commands"] = [shell_script(plan, _DSTACK)]
    port = plan.commands[0].port
    if plan.nnodes == 1:
        run["port"] = port
        run["replicas"] = plan.profile.export.replicas
        run["probes"] = [{"type": "http", "url": READINESS_PROBE}]
    else:
        run["ports"] = [port]
    run["resources"] = {"gpu": accelerator(plan, "dstack"), "shm_size": "32GB"}
    plan.notes.append("restart: dstack runs the server once; restart.* is orch's supervisor's")
    variables = {"dist_init_addr": _DSTACK.head, "nnodes": _DSTACK.nodes, "node_rank": _DSTACK.rank}
    return [run], variables
