"""What one import reads and is asked: the launch scripts, each walked as bash would and its
launches found, all within one budget of work, with the secrets each holds.

``orch import`` (``profiles``) and ``orch import --check`` (``check``) both start from
``read_scripts``; ``script_secrets`` gives the caller every secret to mask before it shows
anything.

Pure: no I/O; the caller reads the files.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.launches import Found, find_launches
from orchestrator.importing.script_secrets import ScriptSecret, secrets_of
from orchestrator.importing.shell_script import parse_script
from orchestrator.importing.shell_words import Script


@dataclass(frozen=True)
class ScriptFile:
    """A script as the user gave it: its name as shown (a path, ``<stdin>``) and its text."""

    display: str
    text: str


@dataclass(frozen=True)
class ImportRequest:
    """What ``orch import`` is asked: the profile's name, and what the command line says."""

    name: str
    host: str | None = None  # --host (its first name)
    rank_hosts: tuple[str, ...] = ()  # --host H0,H1,...: a group's ranks, in order
    sglang: str | None = None  # --sglang
    given: Mapping[str, str] = field(default_factory=dict)  # --set
    launch: int | None = None  # --launch N (1-based), when a script starts several servers
    extends: str | None = None
    base: Mapping[str, Any] | None = None  # the merged document of ``extends``
    inventory: Mapping[str, Any] = field(default_factory=dict)  # host name -> Host


@dataclass(frozen=True)
class ScannedScript:
    """One script read: its walk, the launches in it, the secrets it holds."""

    file: ScriptFile
    script: Script
    found: Found
    secrets: tuple[ScriptSecret, ...]


def read_scripts(files: Sequence[ScriptFile], given: Mapping[str, str]) -> list[ScannedScript]:
    """Each script walked and its launches found, all within one budget of work."""
    budget = WorkBudget()
    out = []
    for file in files:
        budget.file = file.display
        script = parse_script(file.text, given=given, budget=budget)
        found = find_launches(script)
        out.append(ScannedScript(file, script, found, secrets_of(file.text, script, found)))
    return out


def script_secrets(files: Sequence[ScriptFile], given: Mapping[str, str]) -> list[ScriptSecret]:
    """Every secret the scripts hold (``script_secrets.secrets_of``), for the caller to mask in
    everything it shows before it shows anything."""
    return [secret for item in read_scripts(files, given) for secret in item.secrets]
