"""YAML text -> plain Python values plus where each key was written.

PyYAML's ``safe_load`` forgets positions and silently keeps the last of two duplicate keys; a
profile checker needs both, so this composes the node graph and builds values itself, recording
``(file, line, column)`` for every mapping key and sequence item.

Aliases (``*name``) repeat the value their anchor (``&name``) names; nested, nine of them turn a
400-byte file into hundreds of millions of values (the "billion laughs"), and an alias inside its
own anchor never ends; one long anchored text repeated by many aliases turns 1.8 MB into 90 GiB
that validation scans. Before anything is composed, one pass over the parser's events counts
what the document expands to and refuses it past :data:`MAX_VALUES` values, :data:`MAX_DEPTH`
levels or :data:`MAX_TEXT` characters, at the alias that crossed the line. Numbers must be
finite: ``.nan`` and ``.inf`` are refused wherever they are written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

import yaml

from orchestrator.errors import ProfileError

KeyPath: TypeAlias = tuple[str | int, ...]

MAX_VALUES = 100_000  # values after alias expansion; a profile has a few hundred
MAX_DEPTH = 64  # nesting levels after alias expansion; a profile has a handful
MAX_TEXT = 4 << 20  # characters of keys and values after alias expansion; a profile has KBs

_MERGE_TAG = "tag:yaml.org,2002:merge"

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
    try:
        _check_expansion(text, source)
        loader = _Loader(text)
        try:
            root = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "invalid YAML"
        if exc.problem and exc.context:  # "found duplicate anchor 'a'; first occurrence (line 1),
            where = f" (line {exc.context_mark.line + 1})" if exc.context_mark else ""
            problem = f"{exc.context}{where}, {exc.problem}"  # second occurrence"
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
    positions: dict[KeyPath, Position] = {}
    if root is None:
        return YamlDoc({}, positions, source)
    value = _Builder(source, positions).build(root, ())
    return YamlDoc(value, positions, source)


# -- bounding aliases, on the event stream -----------------------------------------------------


@dataclass
class _Open:
    """A collection being parsed: where it is, and what it has expanded to so far."""

    path: KeyPath
    mapping: bool
    anchor: str | None
    values_before: int  # the running count when it opened
    text_before: int  # the running characters when it opened
    height: int = 1  # levels from here down, itself included
    items: int = 0  # sequence items, or mapping keys and values, seen so far
    key: str | int = "?"  # the mapping key whose value comes next


def _check_expansion(text: str, source: str) -> None:
    """Count the values the document expands to, aliases included, without expanding them."""
    stack: list[_Open] = []
    anchors: dict[str, tuple[int, int, int]] = {}  # closed anchor -> (values, height, chars)
    values = expanded = 0  # values, and characters of text
    for event in yaml.parse(text, Loader=_Loader):
        if isinstance(event, yaml.CollectionEndEvent):
            done = stack.pop()
            if done.anchor is not None:
                anchors[done.anchor] = (
                    values - done.values_before,
                    done.height,
                    expanded - done.text_before,
                )
            if stack:
                stack[-1].height = max(stack[-1].height, done.height + 1)
            continue
        if not isinstance(event, yaml.NodeEvent):
            continue  # stream and document boundaries
        path = _path_of_next(stack, event)
        if isinstance(event, yaml.AliasEvent):
            name = event.anchor
            if any(open_.anchor == name for open_ in stack):
                raise _located(
                    event,
                    path,
                    source,
                    f"alias *{name} is inside the value &{name} names: it would never end",
                    "an alias can only repeat a value that is complete before it",
                )
            if name not in anchors:
                continue  # the composer reports an undefined alias with its position
            count, height, chars = anchors[name]
        else:
            count, height = 1, 1
            chars = len(event.value) if isinstance(event, yaml.ScalarEvent) else 0
        values += count
        expanded += chars
        if values > MAX_VALUES:
            raise _located(
                event,
                path,
                source,
                f"the document expands to more than {MAX_VALUES} values"
                + (f" (alias *{event.anchor} repeats {count})" if count > 1 else ""),
                "a profile holds a few hundred values: write them out, or nest fewer "
                "aliases (*name) inside anchored (&name) values",
            )
        if expanded > MAX_TEXT:
            raise _located(
                event,
                path,
                source,
                f"the document expands to more than {MAX_TEXT >> 20} MiB of text"
                + (
                    f" (alias *{event.anchor} repeats {chars} characters)"
                    if isinstance(event, yaml.AliasEvent)
                    else ""
                ),
                "a profile holds some KB of text: write it out once, or repeat fewer aliases "
                "(*name) of long anchored (&name) text",
            )
        if len(stack) + height > MAX_DEPTH:
            raise _located(
                event,
                path,
                source,
                f"nested more than {MAX_DEPTH} levels deep",
                "a profile nests a few levels: flatten this value",
            )
        if stack:
            stack[-1].height = max(stack[-1].height, height + 1)
        if isinstance(event, yaml.CollectionStartEvent):
            mapping = isinstance(event, yaml.MappingStartEvent)
            stack.append(_Open(path, mapping, event.anchor, values - 1, expanded))
        elif isinstance(event, yaml.ScalarEvent) and event.anchor is not None:
            anchors[event.anchor] = (1, 1, chars)


def _path_of_next(stack: list[_Open], event: yaml.NodeEvent) -> KeyPath:
    """The key path of the node ``event`` starts (a mapping's own path for its keys)."""
    if not stack:
        return ()
    parent = stack[-1]
    index = parent.items
    parent.items += 1
    if not parent.mapping:
        return (*parent.path, index)
    if index % 2 == 0:  # a key
        parent.key = event.value if isinstance(event, yaml.ScalarEvent) else "?"
        return parent.path
    return (*parent.path, parent.key)


def _located(
    event: yaml.Event, path: KeyPath, source: str, message: str, hint: str
) -> ProfileError:
    mark = event.start_mark
    return ProfileError(
        message,
        hint,
        source=source,
        key_path=format_path(path) or None,
        line=mark.line + 1 if mark else None,
        column=mark.column + 1 if mark else None,
    )


# -- building values with positions -----------------------------------------------------------


class _Builder:
    def __init__(self, source: str, positions: dict[KeyPath, Position]) -> None:
        self.source = source
        self.positions = positions
        self.constructor = _Loader("")
        # a mapping node shared through aliases is flattened once: how many of its pairs came
        # from merge keys (<<: *base), which its own keys may override
        self.merged: dict[int, int] = {}

    def build(self, node: yaml.Node, path: KeyPath) -> Any:
        if isinstance(node, yaml.MappingNode):
            return self._mapping(node, path)
        if isinstance(node, yaml.SequenceNode):
            items = []
            for index, item in enumerate(node.value):
                mark = item.start_mark
                self.positions[(*path, index)] = Position(
                    self.source, mark.line + 1, mark.column + 1
                )
                items.append(self.build(item, (*path, index)))
            return items
        return self._scalar(node, path)

    def _mapping(self, node: yaml.MappingNode, path: KeyPath) -> dict[str, Any]:
        if id(node) not in self.merged:
            own = sum(1 for key_node, _ in node.value if key_node.tag != _MERGE_TAG)
            try:
                self.constructor.flatten_mapping(node)  # resolves YAML merge keys (<<: *base)
            except yaml.constructor.ConstructorError as exc:
                raise self._error(node, path, f"cannot merge: {exc.problem}", None) from exc
            self.merged[id(node)] = len(node.value) - own
        merged = self.merged[id(node)]
        out: dict[str, Any] = {}
        own_keys: set[str] = set()
        for index, (key_node, value_node) in enumerate(node.value):
            key = self._scalar(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            mark = key_node.start_mark
            here = Position(self.source, mark.line + 1, mark.column + 1)
            if not isinstance(key, str):
                shown = repr(key) if key is not None else "a " + type(key_node).__name__
                raise ProfileError(
                    f"mapping keys must be strings, got {shown}",
                    "quote the key",
                    source=self.source,
                    key_path=format_path(path),
                    line=here.line,
                    column=here.column,
                )
            if index >= merged and key in own_keys:  # a merged key may be overridden once
                first = self.positions[(*path, key)]
                raise ProfileError(
                    f"duplicate key {key!r} (first at line {first.line})",
                    "YAML would silently keep only the last one; remove one of them",
                    source=self.source,
                    key_path=format_path((*path, key)),
                    line=here.line,
                    column=here.column,
                )
            if index >= merged:
                own_keys.add(key)
            self.positions[(*path, key)] = here
            out[key] = self.build(value_node, (*path, key))
        return out

    def _scalar(self, node: yaml.Node, path: KeyPath) -> Any:
        try:
            value = self.constructor.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:
            raise self._error(node, path, f"unreadable value: {exc.problem}", None) from exc
        except (ValueError, OverflowError) as exc:  # int('9' * 5000), a date of month 13
            raise self._error(
                node,
                path,
                f"unreadable value {_show(node)}: {exc}",
                "quote it if you mean the text",
            ) from exc
        if isinstance(value, float) and not math.isfinite(value):
            raise self._error(
                node,
                path,
                f"expected a finite number, got {_show(node)}",
                "NaN and infinities are not accepted; write a number, or quote it for text",
            )
        return value

    def _error(
        self, node: yaml.Node, path: KeyPath, message: str, hint: str | None
    ) -> ProfileError:
        mark = node.start_mark
        return ProfileError(
            message,
            hint,
            source=self.source,
            key_path=format_path(path) or None,
            line=mark.line + 1,
            column=mark.column + 1,
        )


def _show(node: yaml.Node) -> str:
    text = str(node.value) if isinstance(node, yaml.ScalarNode) else type(node).__name__
    return text if len(text) <= 40 else text[:37] + "..."


# -- writing --------------------------------------------------------------------------------------


class _Dumper(yaml.SafeDumper):
    """Block scalars for multi-line text (scripts read as scripts); no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


# YAML 1.1 also breaks lines at NEL, LS and PS, and PyYAML writes them raw with allow_unicode: a
# reader then folds them into a space. Only the double-quoted style escapes them.
_YAML_ONLY_LINE_BREAKS = frozenset("\x85\u2028\u2029")


def _represent_text(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    style: str | None = "|" if "\n" in text else None
    if _YAML_ONLY_LINE_BREAKS.intersection(text):
        style = '"'
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style=style)


_Dumper.add_representer(str, _represent_text)


def dump_yaml(document: Mapping[str, Any]) -> str:
    """YAML that reads back as ``document``: key order kept, block scalars for multi-line text."""
    return yaml.dump(document, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=1 << 30)
