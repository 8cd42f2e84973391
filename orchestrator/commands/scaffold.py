"""``orch init``: a team's own profiles repository, ready for git: ``profiles/`` with a host
inventory, an example profile that validates, a ``known_hosts`` for pinned host keys, and a
pre-commit hook that runs ``orch validate --strict`` before every commit. Never overwrites."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import ProfileError
from orchestrator.files import create_file

HOSTS = """\
# The machines this team's profiles run on. `address`: a hostname, an IP, or a Host alias from
# ~/.ssh/config. `python`: the interpreter of the venv that holds sglang there (absolute).
# `workdir`: absolute or ~/...; a directory only the SSH user can write.
# Pin each host's key in known_hosts with `orch hosts trust NAME`, and commit it.
hosts:
  gpu-1:
    address: gpu-1.example.net
    user: ubuntu
    python: /opt/venvs/sglang/bin/python
    workdir: ~/orch
"""

EXAMPLE = """\
# An example deployment: edit, rename, or extend it (`extends: example`). `orch validate` checks
# it against the SGLang version's real argument table; `orch plan example` asks that SGLang.
description: an example deployment; replace the model, host and arguments with yours
sglang: "0.5.23"
host: gpu-1
model:
  path: /models/Qwen3.6-27B
port: 30000
args:
  context_length: 8192
"""

KNOWN_HOSTS = """\
# Host keys of the hosts in hosts.yaml, pinned with `orch hosts trust NAME` (OpenSSH format).
"""

PRE_COMMIT_CONFIG = """\
# https://pre-commit.com: `pre-commit install` once per clone; or use .githooks/pre-commit.
repos:
  - repo: local
    hooks:
      - id: orch-validate
        name: orch validate --strict
        entry: orch --profiles profiles validate --strict
        language: system
        pass_filenames: false
        files: ^profiles/
"""

GIT_HOOK = """\
#!/bin/sh
# Refuse a commit whose profiles orch finds invalid (`git config core.hooksPath .githooks`).
exec orch --profiles profiles validate --strict
"""


@dataclass(frozen=True)
class Scaffolded:
    root: Path
    written: tuple[Path, ...]


FILES: tuple[tuple[str, str, int], ...] = (
    ("profiles/hosts.yaml", HOSTS, 0o644),
    ("profiles/example.yaml", EXAMPLE, 0o644),
    ("profiles/known_hosts", KNOWN_HOSTS, 0o644),
    (".pre-commit-config.yaml", PRE_COMMIT_CONFIG, 0o644),
    (".githooks/pre-commit", GIT_HOOK, 0o755),
)


def init(root: Path) -> Scaffolded:
    """Write the scaffold under ``root``; refuses when any of its files already exists."""
    existing = [name for name, _, _ in FILES if (root / name).exists()]
    if existing:
        raise ProfileError(
            f"{root}: {', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}",
            "orch init never overwrites: pick an empty directory, or remove those files",
        )
    written = []
    for name, text, mode in FILES:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            create_file(target, text, mode=mode, hint="orch init into a directory of your own")
        except FileExistsError as exc:  # created since the check above
            raise ProfileError(f"{target} already exists", "orch init never overwrites") from exc
        written.append(target)
    return Scaffolded(root, tuple(written))
