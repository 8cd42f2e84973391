"""A profiles repository made by each test in its temporary directory: real git, real files,
``orch diff`` through orch's entry point."""

from __future__ import annotations

import io
import json
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any

from orchestrator.cli.main import main

HOSTS = """\
hosts:
  gpu-a:
    address: gpu-a.example.net
    user: ubuntu
    python: /opt/sglang/bin/python
    workdir: ~/orch
  gpu-b:
    address: gpu-b.example.net
    user: ubuntu
    python: /opt/sglang/bin/python
    workdir: ~/orch
  gpu-c:
    address: gpu-c.example.net
    user: ubuntu
    python: /opt/sglang/bin/python
    workdir: ~/orch
"""


class ProfilesRepo:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.profiles = root / "profiles"
        self.profiles.mkdir(parents=True)
        self.git("init", "-q", "-b", "main")
        self.write("hosts.yaml", HOSTS)

    def git(self, *argv: str) -> str:
        done = subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.net", *argv],
            cwd=self.root,
            env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        return done.stdout.strip()

    def write(self, name: str, text: str) -> None:
        (self.profiles / name).write_text(textwrap.dedent(text))

    def edit(self, name: str, old: str, new: str) -> None:
        path = self.profiles / name
        text = path.read_text()
        assert old in text, f"{old!r} not in {name}"
        path.write_text(text.replace(old, new, 1))

    def remove(self, name: str) -> None:
        (self.profiles / name).unlink()

    def commit(self, message: str = "change") -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.git("rev-parse", "HEAD")

    def orch(self, *argv: str) -> tuple[int, str, str]:
        return orch_in(self.root, *argv)

    def diff_json(self, *argv: str) -> tuple[int, dict[str, Any]]:
        code, out, err = self.orch("diff", *argv, "--json")
        assert out, err
        return code, json.loads(out)


def orch_in(root: Path, *argv: str) -> tuple[int, str, str]:
    """orch's entry point run in ``root``: it finds profiles/ there, as a user's would."""
    out, err = io.StringIO(), io.StringIO()
    cwd = Path.cwd()
    os.chdir(root)
    try:
        code = main(list(argv), out=out, err=err)
    finally:
        os.chdir(cwd)
    return code, out.getvalue(), err.getvalue()


def by_name(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The report's deployments by name (``profile``, ``profile[rank]``, a replica's
    ``profile@I``)."""
    out = {}
    for item in document["deployments"]:
        own = item.get("deployment", item["profile"])
        name = own if item["rank"] is None else f"{own}[{item['rank']}]"
        out[name] = item
    return out
