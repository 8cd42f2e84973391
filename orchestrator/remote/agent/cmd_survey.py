"""``survey --workdir W``: every deployment under a workdir with its state, the host's SGLang
version and its name, in one command that writes nothing (orch sync's dry run reads a fleet with
it: "reads only, writes nothing on any host").

A deployment is a directory directly under W, its name not starting with ".", holding a
spec.json or a state.json. Each is reported exactly as ``status --dir`` reports it (cmd_status,
which makes no HTTP request: the memory figures are those the supervisor recorded at READY), once
the agent's trust rules (trust.py) accept it; one they refuse (another user's, writable by group
or others, a symlink) is named in ``unreadable`` with why, and nothing in it is read."""

from __future__ import annotations

import os
import socket
import stat
from typing import Any

from .cmd_status import cmd_status
from .protocol import PROTOCOL
from .trust import UnsafePath, check_directory, check_workdir

MARKERS = ("spec.json", "state.json")  # what makes a directory a deployment's


def sglang_version() -> str | None:
    """The SGLang of this interpreter (the host's configured python), None when absent."""
    from importlib import metadata

    try:
        return metadata.version("sglang")
    except metadata.PackageNotFoundError:
        return None


def cmd_survey(workdir: str) -> dict[str, Any]:
    workdir = os.path.abspath(workdir)
    answer: dict[str, Any] = {
        "protocol": PROTOCOL,
        "ok": True,
        "workdir": workdir,
        "hostname": socket.gethostname(),
        "sglang_version": sglang_version(),
        "deployments": {},
        "unreadable": {},
    }
    if not check_workdir(workdir):  # UnsafePath: the whole survey is refused, as every command
        return answer
    try:
        names = sorted(os.listdir(workdir))
    except OSError as exc:
        answer["unreadable"]["."] = f"{workdir}: {exc.strerror or exc}"
        return answer
    for name in names:
        if name.startswith("."):
            continue
        directory = os.path.join(workdir, name)
        try:
            found = _deployment(directory)
        except UnsafePath as exc:
            answer["unreadable"][name] = exc.message
            continue
        except OSError as exc:
            answer["unreadable"][name] = f"{directory}: {exc.strerror or exc}"
            continue
        if found:
            try:
                answer["deployments"][name] = cmd_status(directory)
            except UnsafePath as exc:  # a planted file in it, the workdir's .orch
                answer["unreadable"][name] = exc.message
            except OSError as exc:
                answer["unreadable"][name] = f"{directory}: {exc.strerror or exc}"
    return answer


def _deployment(directory: str) -> bool:
    """The directory holds a deployment and the trust rules accept it (UnsafePath otherwise:
    nothing of it is read). A plain file is no deployment; a symlink to a directory is
    refused (never followed), one to anything else ignored."""
    info = os.lstat(directory)
    if stat.S_ISLNK(info.st_mode):
        if os.path.isdir(directory):
            raise UnsafePath(
                f"the deployment directory {directory} is a symlink: not followed",
                "orch makes deployment directories itself; remove the link",
            )
        return False
    if not stat.S_ISDIR(info.st_mode):
        return False
    if not any(os.path.lexists(os.path.join(directory, marker)) for marker in MARKERS):
        return False
    return check_directory(directory, "deployment directory")
