"""Profiles: YAML files in git -> validated ``Profile`` values, before anything runs.

A profile directory holds ``<name>.yaml`` profiles and the host inventory ``hosts.yaml``
(:mod:`~orchestrator.profile.inventory`). ``extends`` chains deep-merge mappings (``args`` key by
key, ``null`` removes an inherited key); :class:`~orchestrator.profile.checks.ProfileChecker`
reads each section of the merged document, then every SGLang field the profile sets is checked
against the argument table of the profile's SGLang version (:mod:`~orchestrator.profile.fields`)
and its layout against its nodes and GPUs (:mod:`~orchestrator.profile.layout`). All problems of
one profile are collected, each with file:line:column, key path and a hint.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import InvalidProfile, ProfileError, ProfileNotFound
from orchestrator.model import Finding, Host, Profile
from orchestrator.profile.checks import ProfileChecker
from orchestrator.profile.fields import check_fields
from orchestrator.profile.inventory import INVENTORY_FILE, NAME_RE, read_inventory
from orchestrator.profile.launch_pitfalls import check_pitfalls
from orchestrator.profile.layout import check_parallelism
from orchestrator.profile.yamldoc import KeyPath, Position, YamlDoc, parse_yaml
from orchestrator.sglang.argtable import ArgTable

PROFILE_SUFFIX = ".yaml"

# A profile's file and its lock (<name>.lock.json) must fit a file name (255 bytes on Linux).
MAX_NAME = 200


def valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME and NAME_RE.match(name) is not None


_NOT_INHERITED = ("extends", "abstract")


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    table: ArgTable  # the argument table the profile was checked against
    findings: tuple[Finding, ...]


class ProfileStore:
    """The profiles of one directory (usually ``profiles/`` in a team's git repository)."""

    def __init__(
        self, root: Path, display_root: Path | None = None, local_python: str | None = None
    ) -> None:
        """``local_python``: the interpreter for ``host: local`` when hosts.yaml names none
        (the CLI passes its own, which has psutil for the agent)."""
        self.root = root
        self._display_root = display_root
        self._local_python = local_python
        self._docs: dict[str, YamlDoc] = {}
        self._inventory: dict[str, Host] | None = None
        self._inventory_error: ProfileError | InvalidProfile | None = None

    @property
    def local_python(self) -> str | None:
        return self._local_python

    def names(self) -> list[str]:
        """The profiles: ``<name>.yaml`` files whose name is a profile name (see :meth:`strays`)."""
        if not self.root.is_dir():
            return []
        return sorted(
            path.name.removesuffix(PROFILE_SUFFIX)
            for path in self.root.glob(f"*{PROFILE_SUFFIX}")
            if path.name != INVENTORY_FILE and NAME_RE.match(path.stem)
        )

    def strays(self) -> list[ProfileError]:
        """YAML files in the directory that no profile name reaches: ``x.yml``, ``My Profile.yaml``.
        Hidden files (``.yamllint.yaml``) are not profiles and are left alone."""
        if not self.root.is_dir():
            return []
        errors = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") or path.suffix.lower() not in (".yaml", ".yml"):
                continue
            readable = path.suffix == PROFILE_SUFFIX and NAME_RE.match(path.stem)
            if path.name == INVENTORY_FILE or readable:
                continue
            stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._") or "name"
            if path.stem.lower() == INVENTORY_FILE.removesuffix(PROFILE_SUFFIX):
                problem = f"orch reads the host inventory from {INVENTORY_FILE} only"
                fix = f"rename it to {INVENTORY_FILE}"
            elif path.suffix != PROFILE_SUFFIX:
                problem = f"not a profile: orch reads <name>{PROFILE_SUFFIX} files only"
                fix = f"rename it to {stem}{PROFILE_SUFFIX}"
            else:
                problem = f"not a profile name: {path.stem!r}"
                fix = (
                    f"rename it, e.g. to {stem}{PROFILE_SUFFIX}: a name is letters, digits, "
                    "'.', '_' and '-', starting with a letter or digit"
                )
            errors.append(ProfileError(problem, fix, source=self.display(path)))
        return errors

    def display(self, path: Path) -> str:
        base = self._display_root
        if base is not None and path.is_relative_to(base):
            return str(path.relative_to(base))
        return str(path)

    def path_of(self, name: str) -> Path:
        return self.root / f"{name}{PROFILE_SUFFIX}"

    def load(self, name: str) -> LoadedProfile:
        """Load, inherit and validate one profile; ``InvalidProfile`` lists every problem."""
        chain, merged = self._inherit(name)
        checker = ProfileChecker(merged, self.display(self.path_of(name)))
        for path, placeholder in _placeholders(merged.value, ()):
            checker.error(
                path,
                f"{placeholder} is a placeholder `orch import` left: the script did not "
                "determine this value",
                "write the host's name (hosts.yaml) here, or import again with --host H0,H1,..."
                if "host of rank" in placeholder
                else "write the value here, or import again with --set NAME=VALUE",
            )
        profile, table = checker.profile(name, chain, self.inventory())
        if profile is not None:
            check_fields(checker, profile, table)
            check_parallelism(checker, profile)
            check_pitfalls(checker, profile, table)
        if checker.errors or profile is None:
            raise InvalidProfile(checker.errors)
        return LoadedProfile(profile, table, tuple(checker.findings))

    def merged(self, name: str) -> dict[str, Any]:
        """The profile's document with its ``extends`` chain merged in (not validated)."""
        _, merged = self._inherit(name)
        return dict(merged.value)

    def written(self, name: str) -> dict[KeyPath, Position]:
        """Where each key of the merged profile is written (file as displayed, line, column),
        across its ``extends`` chain: for edits in place."""
        _, merged = self._inherit(name)
        return dict(merged.positions)

    def inventory(self) -> dict[str, Host]:
        """The host inventory: ``hosts.yaml`` entries plus the built-in ``local``."""
        if self._inventory is None:
            if self._inventory_error is not None:  # reported once per command, not per profile
                raise self._inventory_error
            try:
                self._inventory = read_inventory(self._inventory_doc(), self._local_python)
            except (ProfileError, InvalidProfile) as exc:
                self._inventory_error = exc
                raise
        return self._inventory

    def _inventory_doc(self) -> YamlDoc | None:
        path = self.root / INVENTORY_FILE
        source = self.display(path)
        if not path.exists():
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(
                f"cannot read the host inventory: {exc}",
                f"{INVENTORY_FILE} is a UTF-8 YAML file",
                source=source,
            ) from exc
        return parse_yaml(text, source)

    # -- inheritance -------------------------------------------------------------------------

    def _doc(self, name: str, wanted_by: tuple[str, Position | None] | None = None) -> YamlDoc:
        if name in self._docs:
            return self._docs[name]
        if not valid_name(name) or not self.path_of(name).is_file():
            raise self._not_found(name, wanted_by)
        path = self.path_of(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(
                f"cannot read profile: {exc}",
                "profiles are UTF-8 YAML files",
                source=self.display(path),
            ) from exc
        doc = parse_yaml(text, self.display(path))
        if not isinstance(doc.value, dict):
            raise ProfileError(
                f"a profile is a mapping of keys, got {type(doc.value).__name__}",
                "start the file with keys such as `extends:`, `host:`, `model:`",
                source=doc.source,
                line=1,
            )
        self._docs[name] = doc
        return doc

    def _not_found(self, name: str, wanted_by: tuple[str, Position | None] | None) -> ProfileError:
        available = self.names()
        close = difflib.get_close_matches(name, available, n=1)
        hint = (f"did you mean {close[0]}? " if close else "") + (
            f"available: {', '.join(available)}" if available else f"no profiles in {self.root}"
        )
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name)} characters)"
        if wanted_by is None:
            return ProfileNotFound(f"no profile named {shown} in {self.root}", hint)
        source, position = wanted_by
        return ProfileNotFound(
            f"extends {shown}, which is not a profile in {self.root}",
            hint,
            source=source,
            key_path="extends",
            line=position.line if position else None,
            column=position.column if position else None,
        )

    def _inherit(self, name: str) -> tuple[tuple[str, ...], YamlDoc]:
        """Follow ``extends`` to the root, merge root first; the chain comes back nearest first."""
        chain: list[str] = []
        docs: list[YamlDoc] = []
        current: str | None = name
        wanted_by: tuple[str, Position | None] | None = None
        while current is not None:
            if current in chain:
                loop = " -> ".join([*chain[chain.index(current) :], current])
                raise ProfileError(
                    f"extends cycle: {loop}",
                    "a profile cannot inherit from itself",
                    source=docs[-1].source,
                    key_path="extends",
                )
            doc = self._doc(current, wanted_by)
            chain.append(current)
            docs.append(doc)
            parent = doc.value.get("extends")
            if parent is not None and not isinstance(parent, str):
                position = doc.positions.get(("extends",))
                raise ProfileError(
                    f"expected a profile name, got {parent!r}",
                    "extends names one profile, e.g. `extends: qwen36-27b`",
                    source=doc.source,
                    key_path="extends",
                    line=position.line if position else None,
                )
            wanted_by = (doc.source, doc.positions.get(("extends",)))
            current = parent
        merged = YamlDoc({}, {}, docs[0].source)
        for index, doc in enumerate(reversed(docs)):
            own = doc if index == len(docs) - 1 else _strip_not_inherited(doc)
            merged = _merge(merged, own)
        return tuple(chain), merged


PLACEHOLDER_RE = re.compile(r"<unset: [^>]*>")


def placeholder(what: str) -> str:
    """The visible stand-in ``orch import`` writes for a value a script does not determine;
    validation refuses a profile that still holds one."""
    return f"<unset: {what}>"


def _placeholders(value: Any, path: KeyPath) -> list[tuple[KeyPath, str]]:
    """``<unset: NAME>`` texts (``orch import``'s placeholders) anywhere in a document."""
    if isinstance(value, str):
        return [(path, found) for found in PLACEHOLDER_RE.findall(value)]
    if isinstance(value, dict):
        return [f for key, item in value.items() for f in _placeholders(item, (*path, key))]
    if isinstance(value, list):
        return [f for index, item in enumerate(value) for f in _placeholders(item, (*path, index))]
    return []


def _strip_not_inherited(doc: YamlDoc) -> YamlDoc:
    value = {k: v for k, v in doc.value.items() if k not in _NOT_INHERITED}
    positions = {p: pos for p, pos in doc.positions.items() if p[0] not in _NOT_INHERITED}
    return YamlDoc(value, positions, doc.source)


def _merge(base: YamlDoc, child: YamlDoc) -> YamlDoc:
    """Deep-merge ``child`` over ``base``: mappings merge key by key, anything else replaces,
    ``null`` removes; each key keeps the position of the file that set it."""
    replaced: list[KeyPath] = []

    def merge(into: dict[str, Any], over: dict[str, Any], path: KeyPath) -> dict[str, Any]:
        out = dict(into)
        for key, value in over.items():
            here = (*path, key)
            if value is None:
                out.pop(key, None)
                replaced.append(here)
            elif isinstance(value, dict):
                # merge even over nothing, so that nulls inside a new mapping are dropped too
                base = out.get(key)
                out[key] = merge(base if isinstance(base, dict) else {}, value, here)
                if not isinstance(base, dict):
                    replaced.append(here)
            else:
                out[key] = value
                replaced.append(here)
        return out

    value = merge(base.value, child.value, ())
    positions = {
        path: pos
        for path, pos in base.positions.items()
        if not any(path[: len(prefix)] == prefix and len(path) > len(prefix) for prefix in replaced)
    }
    positions.update(child.positions)
    return YamlDoc(value, positions, child.source)
