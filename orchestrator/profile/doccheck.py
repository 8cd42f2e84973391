"""Typed reads of a YAML document that record located errors instead of raising.

A profile and the host inventory are read through a :class:`DocChecker`: each accessor returns the
value when it has the expected type and range, else records a ``ProfileError`` at the key's
file:line:column and returns None, so that one pass reports every problem of a file.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable
from typing import Any

from orchestrator.errors import ProfileError
from orchestrator.model import Finding, Severity
from orchestrator.profile.yamldoc import KeyPath, Position, YamlDoc, format_path

MISSING: Any = object()  # a key the document does not have (not the same as a null value)


class DocChecker:
    """Reads a merged document with typed accessors that record located errors, not raise."""

    def __init__(self, doc: YamlDoc, source: str) -> None:
        self.doc = doc
        self.source = source
        self.errors: list[ProfileError] = []
        self.findings: list[Finding] = []

    # -- locating and reporting --

    def _position(self, path: KeyPath) -> Position | None:
        for end in range(len(path), 0, -1):
            if (found := self.doc.positions.get(path[:end])) is not None:
                return found
        return None

    def error(self, path: KeyPath, message: str, hint: str | None = None) -> None:
        pos = self._position(path)
        self.errors.append(
            ProfileError(
                message,
                hint,
                source=pos.source if pos else self.source,
                key_path=format_path(path) or None,
                line=pos.line if pos else None,
                column=pos.column if pos else None,
            )
        )

    def note(self, severity: Severity, path: KeyPath, message: str, hint: str | None) -> None:
        located = ProfileError(message, None, key_path=format_path(path) or None)
        pos = self._position(path)
        if pos is not None:
            located = ProfileError(
                message,
                None,
                source=pos.source,
                key_path=located.key_path,
                line=pos.line,
                column=pos.column,
            )
        self.findings.append(Finding(severity, located.message, hint))

    # -- typed access --

    def get(self, path: KeyPath) -> Any:
        node: Any = self.doc.value
        for part in path:
            if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]  # a list item (group.nodes[1])
            elif isinstance(node, dict) and part in node:
                node = node[part]
            else:
                return MISSING
        return node

    def keys(self, path: KeyPath, allowed: Iterable[str]) -> None:
        node = self.get(path)
        if not isinstance(node, dict):
            return
        allowed = tuple(allowed)
        for key in node:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(allowed)}"
                self.error((*path, key), "unknown key", hint)

    def mapping(self, path: KeyPath) -> dict[str, Any] | None:
        value = self.get(path)
        if value is MISSING:
            return None
        if not isinstance(value, dict):
            self.error(path, f"expected a mapping, got {kind(value)}")
            return None
        return value

    def text(self, path: KeyPath, *, one_line: bool = True) -> str | None:
        value = self.get(path)
        if value is MISSING:
            return None
        if not isinstance(value, str):
            self.error(path, f"expected a string, got {kind(value)}", "quote the value")
            return None
        if "\0" in value or (one_line and ("\n" in value or "\r" in value)):
            self.error(path, "NUL bytes and line breaks are not allowed here")
            return None
        return value

    def integer(self, path: KeyPath, low: int, high: int | None = None) -> int | None:
        value = self.get(path)
        if value is MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"expected an integer, got {kind(value)}")
            return None
        if value < low or (high is not None and value > high):
            bound = f"in {low}..{high}" if high is not None else f">= {low}"
            self.error(path, f"expected an integer {bound}, got {value}")
            return None
        return value

    def number(self, path: KeyPath, low: float, high: float | None = None) -> float | None:
        value = self.get(path)
        if value is MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(path, f"expected a number, got {kind(value)}")
            return None
        try:
            number = float(value)
        except OverflowError:  # an integer of hundreds of digits
            number = math.inf
        if not math.isfinite(number):  # yamldoc refuses .nan and .inf; this is the last guard
            self.error(path, "expected a finite number", "NaN and infinities are not accepted")
            return None
        if number < low or (high is not None and number > high):
            bound = f"in {low:g}..{high:g}" if high is not None else f">= {low:g}"
            self.error(path, f"expected a number {bound}, got {number:g}")
            return None
        return number


def kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)
