"""``hold``: a deployment's operation lock on its host (remote/agent/cmd_hold.py), held for as
long as the command's stdin stays open. The command says ``waiting`` (once, naming the holder),
then ``held``, or ends refused with the holder named."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from typing import Any

from orchestrator.errors import Locked
from orchestrator.fleet.protocol.common import Reader, refused
from orchestrator.model import LockHolder

HOLD_ANSWER_MARGIN_S = 30.0  # past --wait, how long orch waits for the agent's first answer


def hold_args(workdir: str, deployment: str, holder: LockHolder, wait_s: float) -> tuple[str, ...]:
    return (
        "hold",
        "--workdir",
        workdir,
        "--deployment",
        deployment,
        "--holder",
        json.dumps(asdict(holder), sort_keys=True),
        "--wait",
        f"{max(wait_s, 0.0):g}",
    )


def decode_holder(document: Any) -> LockHolder | None:
    """The holder an answer names; None when the agent could not say (it had just taken the
    lock and not yet written who it is)."""
    if not isinstance(document, dict) or not document:
        return None
    reader = Reader(document, "agent hold: holder")
    return LockHolder(
        user=reader.text("user", "?"),
        machine=reader.text("machine", "?"),
        pid=reader.integer("pid", 0),
        command=reader.text("command", "orch"),
        since=reader.opt_number("since") or 0.0,
    )


@dataclass(frozen=True)
class HoldLine:
    """One line of the command: ``waiting`` (with the holder), ``held``, or the final answer
    (``released``; a refusal raises)."""

    waiting: bool
    held: bool
    holder: LockHolder | None
    generation: int | None = None  # the hold's number (agents before it: None)


def decode_hold_line(document: Any, deployment: str, host: str) -> HoldLine:
    reader = Reader(document, "agent hold")
    if reader.text("refused", "") == "held":
        raise locked(deployment, host, decode_holder(document.get("holder")))
    refused(document)
    return HoldLine(
        waiting=reader.flag("waiting"),
        held=reader.flag("held"),
        holder=decode_holder(document.get("holder")),
        generation=reader.opt_integer("generation"),
    )


def holder_text(holder: LockHolder | None) -> str:
    """``alice@laptop's orch up (since 16:03:12, pid 4242)``, in this machine's local time."""
    if holder is None:
        return "another orch (it has not said who yet)"
    since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(holder.since))
    return f"{holder.who}'s {holder.command} (since {since}, pid {holder.pid})"


def locked(deployment: str, host: str, holder: LockHolder | None) -> Locked:
    user = holder.user if holder is not None else "its holder"
    return Locked(
        f"{deployment} on {host} is locked by {holder_text(holder)}",
        f"wait for it (--lock-wait SECONDS), or ask {user}; a holder that died releases it "
        "by itself",
        deployment=deployment,
        host=host,
    )
