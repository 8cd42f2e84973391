"""The host inventory, ``hosts.yaml``: each host orch may launch on (an SSH address, its user and
identity, the python of the venv that holds sglang, the workdir), and ``local``, this machine."""

from __future__ import annotations

import re

from orchestrator.errors import InvalidProfile
from orchestrator.model import Host
from orchestrator.profile.doccheck import DocChecker
from orchestrator.profile.yamldoc import KeyPath, YamlDoc

INVENTORY_FILE = "hosts.yaml"
LOCAL_HOST = "local"
# A profile's or a host's name: letters, digits, '.', '_', '-', a letter or digit first.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_HOST_KEYS = (
    "address",
    "port",
    "user",
    "identity_file",
    "known_hosts",
    "python",
    "workdir",
    "persist_s",
)


def read_inventory(doc: YamlDoc | None, local_python: str | None) -> dict[str, Host]:
    hosts: dict[str, Host] = {LOCAL_HOST: Host(name=LOCAL_HOST, python=local_python)}
    if doc is None:
        return hosts
    checker = DocChecker(doc, doc.source)
    checker.keys((), ("hosts",))
    entries = checker.mapping(("hosts",)) or {}
    for name in entries:
        path: KeyPath = ("hosts", name)
        if not NAME_RE.match(name):
            checker.error(path, f"bad host name {name!r}", "use letters, digits, '.', '_', '-'")
            continue
        if checker.mapping(path) is None:
            checker.error(path, "expected a mapping of address, user, python, workdir ...")
            continue
        checker.keys(path, _HOST_KEYS)
        address = checker.text((*path, "address"))
        if name == LOCAL_HOST and address is not None:
            checker.error(
                (*path, "address"),
                "`local` is this machine and takes no address",
                "name the remote host something else",
            )
        elif name != LOCAL_HOST and address is None:
            checker.error(path, "missing `address` (a hostname, IP or ~/.ssh/config alias)")
        python = checker.text((*path, "python"))
        if python is not None and "/" in python and not python.startswith("/"):
            checker.error(
                (*path, "python"),
                f"expected an absolute path or a command name, got {python!r} "
                "(argv[0] is not run through a shell, so no shell expands it)",
                "write the full path, e.g. /home/ubuntu/venvs/sglang/bin/python",
            )
            python = None
        elif name != LOCAL_HOST and python is None:
            checker.error(
                path,
                "missing `python`: the interpreter of the venv that holds sglang",
                "e.g. python: /opt/venvs/sglang/bin/python",
            )
        hosts[name] = Host(
            name=name,
            address=address if name != LOCAL_HOST else None,
            port=checker.integer((*path, "port"), 1, 65535),
            user=checker.text((*path, "user")),
            identity_file=checker.text((*path, "identity_file")),
            known_hosts=checker.text((*path, "known_hosts")),
            python=python or (local_python if name == LOCAL_HOST else None),
            workdir=_workdir(checker, (*path, "workdir")),
            persist_s=checker.number((*path, "persist_s"), 0, 24 * 3600) or 0.0,
        )
    if checker.errors:
        raise InvalidProfile(checker.errors)
    return hosts


def _workdir(checker: DocChecker, path: KeyPath) -> str:
    """An absolute path, or one under the SSH user's home: ``~`` and ``~/x`` (expanded by
    ``transport.expand_home`` where the agent is located). Anything else would be resolved against
    whatever directory the agent runs in (it runs in ``/``), splitting a deployment's state."""
    if checker.get(path) is None:  # YAML reads a bare ~ as null
        checker.error(
            path,
            "expected a path, got null (YAML reads a bare ~ as null)",
            'quote it for the SSH user\'s home: workdir: "~"; or leave the key out',
        )
        return Host.workdir
    workdir = checker.text(path)
    if workdir is None:
        return Host.workdir
    if workdir.startswith(("/", "~/")) or workdir == "~":
        return workdir
    if workdir.startswith("~"):
        checker.error(
            path,
            f"expected an absolute path or ~/..., got {workdir!r}: ~user is not expanded",
            f"~ is the SSH user's home: write ~/{workdir.partition('/')[2] or 'orch'}, "
            "or the absolute path",
        )
    else:
        checker.error(
            path,
            f"expected an absolute path or ~/..., got {workdir!r}",
            f"a relative workdir would depend on where the agent runs; write ~/{workdir} "
            "(under the SSH user's home) or an absolute path such as /data/orch"
            if workdir
            else "write an absolute path such as /data/orch, or leave the key out",
        )
    return Host.workdir
