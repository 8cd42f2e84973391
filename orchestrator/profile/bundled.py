"""What orch ships beside its code that a profile may point at: ``{from_orch: NAME}``.

The demo runs on any machine orch is installed on, from a clone or a wheel (pipx): its profile
puts orch's SGLang stand-in (``standin/``, NOT SGLang) first on the server's import path and
takes the stand-in's model directory (a real ``config.json``, no weights). Both are package data,
so the path is that of this installation, resolved when the profile is read; ``orch render``
shows it as the server receives it. Only for ``host: local``: the files are on this machine."""

from __future__ import annotations

import importlib.resources
from pathlib import Path

# name -> the path under the installed package (orchestrator/standin: the repository's standin/)
BUNDLED = {
    "standin": "standin",  # holds the stand-in's `sglang` package: for PYTHONPATH
    "standin-model": "standin/models/Qwen3.6-27B",  # config.json + the weights' index
}


def bundled_path(name: str) -> str:
    """The absolute path of a bundled item in this installation of orch."""
    return str(Path(str(importlib.resources.files("orchestrator"))) / BUNDLED[name])


def bundled_profiles() -> Path:
    """The example profiles shipped with orch (package data; the repository's profiles/): the
    embedded default when no profiles directory is found, and what `orch init` copies the demo
    from."""
    return Path(str(importlib.resources.files("orchestrator"))) / "examples"
