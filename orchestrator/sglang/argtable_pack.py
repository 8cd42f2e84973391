"""How every SGLang release's argument table is stored: once per distinct record.

Consecutive releases share almost all of their ~500 options and fields, so the tables are kept as
a pack in ``orchestrator/sglang/argtables/`` (written by ``scripts/argtables.py``):

- ``options.jsonl``: every distinct option record (schema-1 fields of
  ``scripts/gen_sglang_argtable.py``), one per line, in order of first appearance;
- ``fields.jsonl``: every distinct ``[ServerArgs field, default]`` pair, one per line;
- ``releases.json``: per release, its python and the lines it is made of, in parser and
  declaration order (``"0-373,380"``: runs of consecutive lines).

A release's table is rebuilt by parsing only its own lines, so loading one costs what loading its
separate file did, however many releases ship; the records round-trip exactly.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

SCHEMA = 2
GENERATED_BY = "scripts/argtables.py"
_PACKAGE = "orchestrator.sglang.argtables"
_VERSION_KEY = re.compile(r"\d+")


class PackError(Exception):
    """The pack is missing or inconsistent (argtable turns this into an ArgTableError)."""


def _runs(indices: Iterable[int]) -> str:
    """[0, 1, 2, 7, 9, 10] -> ``"0-2,7,9-10"`` (order kept: a run only ever ascends by one)."""
    parts: list[str] = []
    start = previous = None
    for index in indices:
        if previous is not None and index == previous + 1:
            previous = index
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = index
    if start is not None:
        parts.append(str(start) if start == previous else f"{start}-{previous}")
    return ",".join(parts)


def _indices(runs: str) -> list[int]:
    out: list[int] = []
    for part in filter(None, runs.split(",")):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def _record(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _version_order(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in _VERSION_KEY.findall(version))


class Pack:
    """An opened pack: release index parsed, record lines kept as text until asked for."""

    def __init__(self, directory: Traversable) -> None:
        try:
            index = json.loads((directory / "releases.json").read_text(encoding="utf-8"))
            self._options = (directory / "options.jsonl").read_text(encoding="utf-8").splitlines()
            self._fields = (directory / "fields.jsonl").read_text(encoding="utf-8").splitlines()
        except (OSError, ValueError) as exc:
            raise PackError(f"cannot read the argument tables: {exc}") from exc
        if not isinstance(index, dict) or index.get("schema") != SCHEMA:
            raise PackError(f"releases.json has schema {index.get('schema')!r}, not {SCHEMA}")
        self.releases: dict[str, dict[str, str]] = index["releases"]
        self._parsed_options: dict[int, dict[str, Any]] = {}  # records shared by releases
        self._parsed_fields: dict[int, tuple[str, Any]] = {}

    def versions(self) -> tuple[str, ...]:
        return tuple(sorted(self.releases, key=_version_order))

    def document(self, version: str) -> dict[str, Any]:
        """The release's table as ``gen_sglang_argtable.py`` wrote it (schema 1)."""
        entry = self.releases.get(version)
        if entry is None:
            raise PackError(f"no table for SGLang {version}")
        try:
            options = [self._option(i) for i in _indices(entry["options"])]
            fields = dict(self._field(i) for i in _indices(entry["fields"]))
        except (IndexError, ValueError, TypeError) as exc:
            raise PackError(f"the table of SGLang {version} is damaged: {exc}") from exc
        return {
            "schema": 1,
            "sglang_version": version,
            "python": entry.get("python"),
            "options": options,
            "fields": fields,
        }

    def _option(self, line: int) -> dict[str, Any]:
        record = self._parsed_options.get(line)
        if record is None:
            record = self._parsed_options[line] = json.loads(self._options[line])
        return record

    def _field(self, line: int) -> tuple[str, Any]:
        pair = self._parsed_fields.get(line)
        if pair is None:
            name, default = json.loads(self._fields[line])
            pair = self._parsed_fields[line] = (str(name), default)
        return pair


@functools.cache
def shipped() -> Pack:
    """The pack installed with orch."""
    return Pack(resources.files(_PACKAGE))


def clear_cache() -> None:
    shipped.cache_clear()


def read_documents(directory: Traversable) -> dict[str, dict[str, Any]]:
    """Every release's table in ``directory`` (empty when there is no pack yet)."""
    if not (directory / "releases.json").is_file():
        return {}
    pack = Pack(directory)
    return {version: pack.document(version) for version in pack.versions()}


def pack_files(tables: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """The pack's files for these release tables: deterministic, records in order of first
    appearance from the oldest release on, so a new release appends lines."""
    option_lines: dict[str, int] = {}
    field_lines: dict[str, int] = {}
    releases: dict[str, dict[str, Any]] = {}
    for version in sorted(tables, key=_version_order):
        document = tables[version]
        options = []
        for option in document["options"]:
            options.append(option_lines.setdefault(_record(option), len(option_lines)))
        fields = []
        for name, default in document["fields"].items():
            fields.append(field_lines.setdefault(_record([name, default]), len(field_lines)))
        releases[version] = {
            "python": document.get("python"),
            "options": _runs(options),
            "fields": _runs(fields),
        }
    index = {"schema": SCHEMA, "generated_by": GENERATED_BY, "releases": releases}
    return {
        "releases.json": json.dumps(index, indent=1, ensure_ascii=False) + "\n",
        "options.jsonl": "".join(line + "\n" for line in option_lines),
        "fields.jsonl": "".join(line + "\n" for line in field_lines),
    }


def write(directory: Path, tables: Mapping[str, Mapping[str, Any]]) -> None:
    """Write the pack into ``directory``: each file replaced atomically."""
    for name, text in pack_files(tables).items():
        target = directory / name
        partial = directory / (name + ".partial")
        partial.write_text(text, encoding="utf-8")
        partial.replace(target)
