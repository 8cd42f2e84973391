"""How a pushed program runs itself again: a new interpreter (an environment takes effect only
from an interpreter's start) that runs the same program, from bytes checked again.

Run by orch's bootstrap, the program's modules were loaded by its importer, which knows the
bundle's file and sha256: the new interpreter goes through the bootstrap again (owner, mode and
sha256 checked; the file is never run by name). Run by hand as a zip application (``python
probe-<digest>.pyz``) or from a source tree (``python -m orchestrator.remote.probe``), it is
run the same way again.
"""

from __future__ import annotations

import os
import sys
from typing import Any


def _loader(package: str) -> Any:
    spec = getattr(sys.modules[package], "__spec__", None)
    return getattr(spec, "loader", None)


def rerun_argv(package: str) -> list[str]:
    """The argv, before the program's own arguments, that runs ``package`` (the program's
    package, with its ``__main__``) again."""
    loader = _loader(package)
    rerun = getattr(loader, "rerun_argv", None)
    if callable(rerun):  # orch's bootstrap: the same bundle, checked again
        return list(rerun())
    archive = getattr(loader, "archive", None)
    if isinstance(archive, str):  # zipimport: the bundle run by hand as a zip application
        return [sys.executable, archive]
    return [sys.executable, "-m", package]


def home(package: str) -> str | None:
    """The directory the program's file lives in (the workdir's ``.orch``, checked by the
    bootstrap as only the user's to write), or None when it runs from a source tree."""
    loader = _loader(package)
    where = getattr(loader, "bundle_path", None) or getattr(loader, "archive", None)
    return os.path.dirname(os.path.abspath(where)) if isinstance(where, str) else None


def digest(package: str) -> str:
    """The sha256 of the program's own code: the checked bundle's (orch's bootstrap knows it),
    the zip application's file, or, from a source tree, the ``.py`` files beside the package
    (its own and ``host/``'s): a new orch is a new digest."""
    import hashlib

    loader = _loader(package)
    known = getattr(loader, "bundle_sha256", None)
    if isinstance(known, str):
        return known
    archive = getattr(loader, "archive", None)
    hasher = hashlib.sha256()
    if isinstance(archive, str):
        with open(archive, "rb") as handle:
            hasher.update(handle.read())
        return hasher.hexdigest()
    root = os.path.dirname(os.path.dirname(os.path.abspath(str(sys.modules[package].__file__))))
    for directory, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if name.endswith(".py"):
                path = os.path.join(directory, name)
                hasher.update(os.path.relpath(path, root).encode() + b"\0")
                with open(path, "rb") as handle:
                    hasher.update(handle.read() + b"\0")
    return hasher.hexdigest()
