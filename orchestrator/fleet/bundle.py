"""A pushed program as ONE artifact: its package (with the packages it imports) in one zip,
byte-identical wherever and whenever it is built, named and checked by its sha256.

Ansible's AnsiballZ is the anchor (a module zipped with what it imports, run with
``runpy.run_module``), made deterministic: the entries are the ``.py`` files only, sorted, each
with the same timestamp (1980-01-01, the format's first), the same mode (a regular file,
rw-r--r--), stored uncompressed (the command that carries a bundle compresses it), no directory
entries, no extra fields, no comment. What a build reads of a source file is its bytes and its
path below the root: touching, chmod-ing or copying the tree elsewhere changes nothing (and
Python's zipfile writes such entries the same from 3.8 to 3.13).

The bundle keeps the modules' full names (``orchestrator/remote/probe/main.py``), so that its
modules import each other as they do in the source tree; the packages above them
(``orchestrator``, ``orchestrator.remote``) are empty ``__init__.py`` of the bundle's own, never
orch's. A top-level ``__main__.py`` names the entry and runs it as ``__main__``
(``runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)``): ``python agent-<digest>.pyz
status --dir D`` runs a bundle by hand (a zip application), and orch's bootstrap
(fleet/bootstrap.py) reads ``ENTRY`` from it and runs the entry the same way, from the bytes it
checked.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchError

EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest time a zip entry can carry
FILE_MODE = 0o100644  # a regular file, rw-r--r--, whatever the source's mode
UNIX = 3  # ZipInfo.create_system: the mode above is a Unix one (the default depends on the OS)

MAIN = '''\
"""An orch bundle: ``python BUNDLE.pyz ARGS`` runs ENTRY as ``__main__``; orch's bootstrap reads
ENTRY and runs it the same way, from the bytes it checked."""

import runpy

ENTRY = {entry!r}

if __name__ == "__main__":
    runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)
'''


@dataclass(frozen=True)
class Bundle:
    """One pushed program: its zip's bytes and what names them."""

    name: str  # the stem of its file on the host: agent, probe
    entry: str  # the module run as __main__: a package with a __main__.py, or a module
    data: bytes
    sha256: str
    members: tuple[str, ...]  # the zip's entries, in order

    @property
    def digest(self) -> str:
        return self.sha256[:12]

    @property
    def file_name(self) -> str:
        """``<name>-<digest>.pyz``: one file per content, never rewritten in place."""
        return f"{self.name}-{self.digest}.pyz"


def build(root: Path, name: str, entry: str, include: Sequence[str] = ()) -> Bundle:
    """The bundle of ``entry`` (a dotted package or module under ``root``, the directory that
    holds ``orchestrator/``) and the packages or modules of ``include``: every ``.py`` file of
    each, the empty packages above them, and the ``__main__.py`` that runs ``entry``."""
    sources: dict[str, bytes] = {}
    for dotted in (entry, *include):
        sources.update(_sources(root, dotted))
    entry_path = root.joinpath(*entry.split("."))
    if entry_path.is_dir() and not (entry_path / "__main__.py").is_file():
        raise _broken(f"{entry}: a package run as a program needs a __main__.py", root)
    for arcname in list(sources):
        parts = arcname.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            sources.setdefault("/".join(parts[:depth]) + "/__init__.py", b"")
    sources["__main__.py"] = MAIN.format(entry=entry).encode()
    data = zip_bytes(sources)
    return Bundle(name, entry, data, hashlib.sha256(data).hexdigest(), tuple(sorted(sources)))


def zip_bytes(sources: Mapping[str, bytes]) -> bytes:
    """``sources`` ({path in the zip: content}) as a deterministic zip (see the module's doc)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for arcname in sorted(sources):
            info = zipfile.ZipInfo(arcname, EPOCH)
            info.compress_type = zipfile.ZIP_STORED
            info.create_system = UNIX
            info.external_attr = FILE_MODE << 16
            archive.writestr(info, sources[arcname])
    return buffer.getvalue()


def _sources(root: Path, dotted: str) -> dict[str, bytes]:
    """{path in the zip: bytes} of a package (each ``.py`` file below it) or of a module."""
    base = root.joinpath(*dotted.split("."))
    if base.is_dir():
        found: dict[str, bytes] = {}
        for path in sorted(base.rglob("*.py")):
            relative = path.relative_to(root)
            if any(part.startswith((".", "__pycache__")) for part in relative.parts):
                continue  # an editor's or a tool's file, not the package's
            for directory in path.parents:
                if directory == base.parent:
                    break
                if not (directory / "__init__.py").is_file():
                    raise _broken(f"{directory}: a directory of {dotted} without __init__.py", root)
            found[relative.as_posix()] = path.read_bytes()
        if not found:
            raise _broken(f"{dotted}: no .py files in {base}", root)
        return found
    module = base.with_suffix(".py")
    if module.is_file():
        return {module.relative_to(root).as_posix(): module.read_bytes()}
    raise _broken(f"{dotted}: neither a package nor a module under {root}", root)


def _broken(message: str, root: Path) -> OrchError:
    return OrchError(
        f"cannot bundle orch's pushed programs: {message}",
        f"is orch's installation under {root} complete? reinstall it",
    )
