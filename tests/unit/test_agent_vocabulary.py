"""orch imports only the agent's vocabulary (states, log lines, verdicts, the protocol's names),
never its supervisor: ``orch --help`` and every command load a few hundred lines of the pushed
package, not the thousands of lines that run on a host (issue 27)."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.conftest import REPO

AGENT = "orchestrator.remote.agent"
# What orch may load of what it pushes: the packages' own files and the vocabulary modules.
VOCABULARY = {
    "orchestrator.remote",
    AGENT,
    f"{AGENT}.states",
    f"{AGENT}.sglang_log",
    f"{AGENT}.verdict",
    f"{AGENT}.protocol",
    # the gateway's worker JSON and the bounded HTTP exchange: orch's gateway client and the
    # agent's (which registers a restarted server again on its own) speak to smg alike
    f"{AGENT}.smg",
    f"{AGENT}.http_json",
}
LOADED_LINES_MAX = 1000


def _orch_modules() -> list[str]:
    """Every module of orch's own, the pushed programs and the stand-in left out."""
    names = []
    for path in sorted((REPO / "orchestrator").rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[1] in ("remote", "standin") or parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def _remote_loaded_after(imports: list[str]) -> dict[str, int]:
    """The modules under orchestrator/remote a fresh interpreter holds after ``imports``, each
    with its length in lines."""
    probe = "\n".join(f"import {name}" for name in imports) + (
        "\nimport json, sys\n"
        "print(json.dumps({name: sum(1 for _ in open(module.__file__, 'rb'))"
        " for name, module in sys.modules.items()"
        " if name.startswith('orchestrator.remote') and getattr(module, '__file__', None)}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=REPO
    )
    loaded: dict[str, int] = json.loads(done.stdout.splitlines()[-1])
    return loaded


def test_orchs_entry_point_loads_no_supervisor_daemon_or_command_of_the_agent() -> None:
    loaded = _remote_loaded_after(["orchestrator.cli.main"])
    assert set(loaded) <= VOCABULARY, sorted(set(loaded) - VOCABULARY)
    assert sum(loaded.values()) <= LOADED_LINES_MAX


def test_all_of_orch_loads_only_the_agents_vocabulary() -> None:
    """Every command module, the agent's client and the show layer imported at once."""
    loaded = _remote_loaded_after(_orch_modules())
    assert f"{AGENT}.states" in loaded  # the probe sees the vocabulary: it would see the rest
    assert set(loaded) <= VOCABULARY, sorted(set(loaded) - VOCABULARY)
    assert sum(loaded.values()) <= LOADED_LINES_MAX, loaded


def test_the_vocabulary_list_names_modules_that_exist() -> None:
    for name in VOCABULARY:
        path = REPO.joinpath(*name.split("."))
        assert path.with_suffix(".py").is_file() or (path / "__init__.py").is_file(), name
