"""``orch init``: a team's own profiles repository, ready for git: ``profiles/`` with a host
inventory, an example profile that validates, the demo (this machine, orch's SGLang stand-in),
a ``known_hosts`` for pinned host keys, a pre-commit hook that runs ``orch validate --strict``
before every commit, and a GitHub Actions workflow that runs it and posts ``orch diff`` on each
pull request (``scaffold_ci``). A directory outside any git repository becomes one (``git
init``) with the hook switched on. Never overwrites."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from orchestrator.commands.scaffold_ci import WORKFLOW_PATH, workflow_text
from orchestrator.errors import ProfileError
from orchestrator.files import create_file
from orchestrator.profile.bundled import bundled_profiles

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
# https://pre-commit.com: `pre-commit install` once per clone; or `git config core.hooksPath
# .githooks`. Both run the same script, which finds orch on PATH or where `orch init` ran.
repos:
  - repo: local
    hooks:
      - id: orch-validate
        name: orch validate --strict
        entry: .githooks/pre-commit
        language: script
        pass_filenames: false
        files: ^profiles/
"""

# The hook finds orch on PATH first (each teammate's own), else the interpreter that ran
# `orch init` (a venv or pipx install not on PATH), else says how to get one: a commit is never
# validated by nothing without a word.
GIT_HOOK = """\
#!/bin/sh
# Refuse a commit whose profiles orch finds invalid (written by orch init).
cd "$(dirname "$0")/.." || exit 1  # the directory orch init wrote: profiles/ is there
if command -v orch >/dev/null 2>&1; then
    exec orch --profiles profiles validate --strict
fi
if [ -x {python} ]; then
    exec {python} -m orchestrator --profiles profiles validate --strict
fi
echo "orch is not on PATH (and {python} is gone): install it (pipx install orch) or" \\
    "activate its venv to validate profiles/ before a commit; git commit --no-verify skips this" >&2
exit 1
"""


@dataclass(frozen=True)
class Scaffolded:
    root: Path
    written: tuple[Path, ...]
    git: str  # what was done about git: "initialised", "inside an existing repository", ...


def _files() -> tuple[tuple[str, str, int], ...]:
    demo = (bundled_profiles() / "demo.yaml").read_text(encoding="utf-8")
    hook = GIT_HOOK.format(python=shlex.quote(sys.executable))
    return (
        ("profiles/hosts.yaml", HOSTS, 0o644),
        ("profiles/example.yaml", EXAMPLE, 0o644),
        ("profiles/demo.yaml", demo, 0o644),
        ("profiles/known_hosts", KNOWN_HOSTS, 0o644),
        (".pre-commit-config.yaml", PRE_COMMIT_CONFIG, 0o644),
        (".githooks/pre-commit", hook, 0o755),
        (WORKFLOW_PATH, workflow_text(), 0o644),
    )


def init(root: Path) -> Scaffolded:
    """Write the scaffold under ``root``; refuses when any of its files already exists."""
    files = _files()
    existing = [name for name, _, _ in files if (root / name).exists()]
    if existing:
        raise ProfileError(
            f"{root}: {', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}",
            "orch init never overwrites: pick an empty directory, or remove those files",
        )
    written = []
    for name, text, mode in files:
        target = root / name
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            create_file(target, text, mode=mode, hint="orch init into a directory of your own")
        except FileExistsError as exc:  # created since the check above
            raise ProfileError(f"{target} already exists", "orch init never overwrites") from exc
        written.append(target)
    return Scaffolded(root, tuple(written), _git_init(root))


def _git_init(root: Path) -> str:
    """Make ``root`` a git repository with the hook on, unless it is inside one already (then
    the hook is that repository's business: say how to switch it on)."""
    git = shutil.which("git")
    if git is None:
        return "git not found: run `git init` and `git config core.hooksPath .githooks` there"
    inside = subprocess.run(
        [git, "-C", str(root), "rev-parse", "--is-inside-work-tree"],
        capture_output=True,
        text=True,
        check=False,
    )
    if inside.returncode == 0 and inside.stdout.strip() == "true":
        return (
            "inside an existing git repository: switch the hook on with "
            "`git config core.hooksPath .githooks` (or `pre-commit install`)"
        )
    for argv in (
        [git, "init", "-q", str(root)],
        [git, "-C", str(root), "config", "core.hooksPath", ".githooks"],
    ):
        done = subprocess.run(argv, capture_output=True, text=True, check=False)
        if done.returncode != 0:
            return f"git init failed ({done.stderr.strip() or done.returncode}): run it yourself"
    return "a new git repository, its pre-commit hook on (core.hooksPath .githooks)"
