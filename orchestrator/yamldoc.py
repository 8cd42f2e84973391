"""YAML text -> plain Python values plus where each key was written.

PyYAML's ``safe_load`` forgets positions and silently keeps the last of two duplicate keys; a
profile checker needs both, so this composes the node graph and builds values itself, recording
``(file, line, column)`` for every mapping key and sequence item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import yaml

from orchestrator.errors import ProfileError

KeyPath: TypeAlias = tuple[str | int, ...]

try:  # libyaml is ~10x faster; pure Python is the fallback where it is not compiled in
    _Loader: type[yaml.SafeLoader] = yaml.CSafeLoader  # type: ignore[assignment,misc,unused-ignore]
except AttributeError:  # pragma: no cover - depends on how PyYAML was built
    _Loader = yaml.SafeLoader


@dataclass(frozen=True)
class Position:
    source: str
    line: int  # 1-based
    column: int  # 1-based


@dataclass(frozen=True)
class YamlDoc:
    """One YAML file's top-level value and the position of every key path in it."""

    value: Any
    positions: dict[KeyPath, Position]
    source: str


def format_path(path: KeyPath) -> str:
    """``('args', 'tp_size')`` -> ``args.tp_size``; list items as ``gpu.devices[2]``."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def parse_yaml(text: str, source: str) -> YamlDoc:
    """Parse one YAML document; errors carry file:line:column and a one-line message."""
    loader = _Loader(text)
    try:
        root = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        raise ProfileError(
            f"YAML syntax error: {problem}",
            "check indentation and quoting around this position",
            source=source,
            line=mark.line + 1 if mark else None,
            column=mark.column + 1 if mark else None,
        ) from exc
    except yaml.YAMLError as exc:
        raise ProfileError(
            f"YAML error: {exc}", "profiles must be UTF-8 YAML", source=source
        ) from exc
    finally:
        loader.dispose()
    positions: dict[KeyPath, Position] = {}
    if root is None:
        return YamlDoc({}, positions, source)
    value = _build(root, (), positions, source, _Loader(""))
    return YamlDoc(value, positions, source)


def _build(
    node: yaml.Node,
    path: KeyPath,
    positions: dict[KeyPath, Position],
    source: str,
    constructor: yaml.SafeLoader,
) -> Any:
    if isinstance(node, yaml.MappingNode):
        constructor.flatten_mapping(node)  # resolves YAML merge keys (<<: *base)
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = constructor.construct_object(key_node, deep=True)
            mark = key_node.start_mark
            here = Position(source, mark.line + 1, mark.column + 1)
            if not isinstance(key, str):
                raise ProfileError(
                    f"mapping keys must be strings, got {key!r}",
                    "quote the key",
                    source=source,
                    key_path=format_path(path),
                    line=here.line,
                    column=here.column,
                )
            if key in out:
                first = positions[(*path, key)]
                raise ProfileError(
                    f"duplicate key {key!r} (first at line {first.line})",
                    "YAML would silently keep only the last one; remove one of them",
                    source=source,
                    key_path=format_path((*path, key)),
                    line=here.line,
                    column=here.column,
                )
            positions[(*path, key)] = here
            out[key] = _build(value_node, (*path, key), positions, source, constructor)
        return out
    if isinstance(node, yaml.SequenceNode):
        items = []
        for index, item in enumerate(node.value):
            mark = item.start_mark
            positions[(*path, index)] = Position(source, mark.line + 1, mark.column + 1)
            items.append(_build(item, (*path, index), positions, source, constructor))
        return items
    try:
        return constructor.construct_object(node, deep=True)
    except yaml.constructor.ConstructorError as exc:
        mark = node.start_mark
        raise ProfileError(
            f"unreadable value: {exc.problem}",
            None,
            source=source,
            key_path=format_path(path),
            line=mark.line + 1,
            column=mark.column + 1,
        ) from exc
