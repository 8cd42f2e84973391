"""Where an imported server runs: the host its profile names, and the hosts.yaml entry to add.

``--host`` names it; else the script's ``ssh [user@]host`` does (an entry is proposed when the
host is not in hosts.yaml: address, user, port, identity file, the python the script runs); else
it runs where the script runs (``local``). A host the script does not determine (``ssh "$host"``
in a loop over a file), or a rank's that no script starts, is a visible placeholder, said.

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
from typing import Any

from orchestrator.importing.launches import Launch
from orchestrator.importing.profile_notes import ImportContext
from orchestrator.importing.scripts import ImportRequest
from orchestrator.importing.wrappers import Remote
from orchestrator.model import Launcher
from orchestrator.profile.store import placeholder


def profile_host(
    launch: Launch, request: ImportRequest, context: ImportContext
) -> tuple[str | None, dict[str, Any] | None]:
    program = launch.program.text or launch.program.shown()
    if request.host is not None:
        known = request.inventory.get(request.host)
        python = getattr(known, "python", None)
        if (
            python
            and posixpath.isabs(program)
            and python != program
            and launch.launcher is Launcher.MODULE
        ):
            context.note(
                "host",
                f"the script runs {program}; host {request.host} runs {python} (hosts.yaml)",
                launch.program.position,
            )
        return request.host, None
    remote = launch.remote
    if remote is None:
        if posixpath.isabs(program):
            context.note(
                "host",
                f"the script runs {program}: set it as the `local` host's python in hosts.yaml "
                "if this machine's default python is another",
                launch.program.position,
            )
        return None, None
    if not remote.known:
        return unknown_host(remote, context), None
    if remote.host in request.inventory:
        return remote.host, None
    entry: dict[str, Any] = {"address": remote.host}
    if remote.user:
        entry["user"] = remote.user
    if remote.port:
        entry["port"] = int(remote.port) if remote.port.isdigit() else remote.port
    if remote.identity_file:
        entry["identity_file"] = remote.identity_file
    if posixpath.isabs(program):
        entry["python"] = (
            program
            if launch.launcher is Launcher.MODULE
            else posixpath.join(posixpath.dirname(program), "python")
        )
    context.note(
        "host",
        f"host {remote.host} is not in hosts.yaml: add the entry shown (and its host key to "
        "known_hosts) before `orch up`",
        remote.command.position,
    )
    return remote.host, entry


def host_first(document: dict[str, Any], host: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "sglang" in document:
        out["sglang"] = document.pop("sglang")
    out["host"] = host or "local"
    out.update(document)
    return out


def unknown_host(remote: Remote, context: ImportContext) -> str:
    """``ssh "$host" ...`` where the script does not say which host (a loop over a file, an
    argument): a placeholder, said."""
    label = remote.host
    context.unresolved.setdefault(label, None)
    context.note(
        "unresolved",
        f"ssh {remote.host}: the script does not say which host; left as a placeholder "
        "(--host NAME names it)",
        remote.command.position,
    )
    return placeholder(label)


def rank_host(rank: int, why: str, context: ImportContext) -> str:
    """A placeholder for a rank's host, said."""
    label = f"host of rank {rank}"
    context.unresolved.setdefault(label, None)
    context.note(
        "unresolved",
        f"rank {rank}'s host is a placeholder: {why} (--host H0,H1,... names the ranks' hosts)",
    )
    return placeholder(label)
