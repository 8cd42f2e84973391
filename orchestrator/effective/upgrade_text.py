"""The edits ``orch upgrade --write`` makes to a profile's text: renamed keys re-spelled where
they stand (quoted or plain), replaced switches rewritten to their value or dropped, ``sglang:``
set; comments, quotes and layout kept.  [pure]"""

from __future__ import annotations

import re
from collections.abc import Iterable

from orchestrator.effective.upgrade import Replacing, Respelling


class EditError(Exception):
    """The file does not hold what the profile's positions say (edited meanwhile)."""


def respell_text(
    text: str, edits: Iterable[Respelling], replacings: Iterable[Replacing] = ()
) -> str:
    """Replace each key at its line and column, quoted or plain, and rewrite (or drop) each
    replaced switch's line; nothing else changes."""
    lines = text.splitlines(keepends=True)
    ordered: list[Respelling | Replacing] = [*edits, *replacings]
    for edit in sorted(ordered, key=lambda e: (e.line, e.column), reverse=True):
        index, column = edit.line - 1, edit.column - 1
        if not 0 <= index < len(lines):
            raise EditError(f"line {edit.line} is not in the file")
        if isinstance(edit, Replacing):
            _replace_line(lines, index, column, edit)
            continue
        line = lines[index]
        match = re.compile(r"""(["']?)""" + re.escape(edit.old) + r"\1").match(line, column)
        if match is None:
            raise EditError(f"line {edit.line} does not hold {edit.old} at column {edit.column}")
        quote = match.group(1)
        lines[index] = line[:column] + quote + edit.new + quote + line[match.end() :]
    return "".join(lines)


# a switch's key and its value on one line: `key: true  # comment`, in a block or a flow mapping
_SWITCH_VALUE = r"""(["']?)KEY\1([ \t]*:[ \t]+)(["']?)(true|True|TRUE|false|False|FALSE)\3"""


def _replace_line(lines: list[str], index: int, column: int, edit: Replacing) -> None:
    line = lines[index]
    match = re.compile(_SWITCH_VALUE.replace("KEY", re.escape(edit.old))).match(line, column)
    if match is None:
        raise EditError(
            f"line {edit.line} does not hold `{edit.old}: true|false` at column {edit.column}"
        )
    if edit.value is not None:
        quote = match.group(1)
        lines[index] = (
            line[:column]
            + quote
            + edit.new
            + quote
            + match.group(2)
            + edit.value
            + line[match.end() :]
        )
        return
    rest = line[match.end() :]
    if line[:column].strip() or (rest.strip() and not rest.strip().startswith("#")):
        raise EditError(f"line {edit.line} holds more than {edit.old}: remove it by hand")
    del lines[index]
    _close_emptied_parent(lines, index, column)


def _close_emptied_parent(lines: list[str], index: int, column: int) -> None:
    """``args:`` left without a key reads as null: write ``args: {}`` then."""
    following = next(
        (ln for ln in lines[index:] if ln.strip() and not ln.lstrip().startswith("#")), ""
    )
    if following and len(following) - len(following.lstrip()) >= column:
        return  # a sibling key follows
    for above in range(index - 1, -1, -1):
        line = lines[above]
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        if indent >= column:
            return  # a sibling key precedes
        match = re.match(r"""^([ \t]*["']?[\w.-]+["']?[ \t]*:)([ \t]*(#.*)?)$""", line.rstrip("\n"))
        if match is not None:
            ending = line[len(line.rstrip("\n")) :]
            lines[above] = match.group(1) + " {}" + match.group(2) + ending
        return


_VERSION_LINE = re.compile(r"""^(sglang:[ \t]*)(["']?)([^"'\s#]+)\2""")


def set_version_text(text: str, version: str) -> str:
    """``sglang:`` of this file set to ``version`` (added after ``extends:``, or first, when the
    file inherits it), comments and the rest of the line kept."""
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        match = _VERSION_LINE.match(line)
        if match is not None:
            lines[index] = f'{match.group(1)}"{version}"' + line[match.end() :]
            return "".join(lines)
    entry = f'sglang: "{version}"\n'
    for index, line in enumerate(lines):
        if re.match(r"extends:", line):
            lines.insert(index + 1, entry)
            return "".join(lines)
    first = next(
        (i for i, line in enumerate(lines) if line.strip() and not line.lstrip().startswith("#")),
        len(lines),
    )
    lines.insert(first, entry)
    return "".join(lines)
