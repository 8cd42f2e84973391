"""tree-sitter-bash, read as bash reads the same text.

tree-sitter-bash is a real grammar, and it errs where bash does not: a backslash on a script's
last line makes the whole file one error node at 1:1, ``$((cd "$d" && pwd))`` is read as
arithmetic (bash reads a subshell in a command substitution), an extglob pattern inside
``${...}`` (or a ``|`` in ``${2:?a|b}``) swallows the rest of the file into a string, and
``${NODE}$:5757`` (a plain ``$`` to bash) swallows the words after it. ``readable`` rewrites
those constructs, byte for byte the same length, so every position stays right (the walker
always takes the text itself from the script as written). What is left is a real error, where
``bash -n`` says it: ``first_error`` finds it (the innermost error node first in the file, not an
error node that wraps the file), and ``blanked`` lets the walker read the rest of the file again
on its own. Two more of its ways are undone around the tree: ``as_bash_reads`` gives the parser
a stand-in byte for a carriage return or an escaped blank (characters of a word to bash), and
``unglue`` puts back together the words it cuts in pieces.

Pure: no I/O. tree-sitter is imported lazily (``orch render`` does not pay for it).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterator
from typing import Any

from orchestrator.errors import ImportScriptError


@functools.cache
def parser() -> Any:
    """One parser for the process: building one per nested word cost more than parsing it."""
    try:
        import tree_sitter
        import tree_sitter_bash
    except ImportError as exc:  # pragma: no cover - a dependency of orch
        raise ImportScriptError(
            f"orch import needs tree-sitter and tree-sitter-bash: {exc}",
            "reinstall orch (pip install orch), which depends on both",
        ) from exc
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


class Columns:
    """Byte column -> character column, in time that does not grow with the line: a line of
    plain ASCII (most of any script) answers at once."""

    def __init__(self, source: bytes) -> None:
        self.source = source
        self.ascii: dict[int, bool] = {}  # line start -> the line is ASCII

    def characters(self, start_byte: int, byte_column: int) -> int:
        line_start = start_byte - byte_column
        plain = self.ascii.get(line_start)
        if plain is None:
            end = self.source.find(b"\n", line_start)
            plain = self.source[line_start : end if end >= 0 else len(self.source)].isascii()
            self.ascii[line_start] = plain
        if plain:
            return byte_column
        return len(self.source[line_start:start_byte].decode("utf-8", "surrogateescape"))


# -- reading past tree-sitter-bash's mistakes ---------------------------------------------------

MAX_RECOVERIES = 32  # re-reads of one file after errors (each costs budget "parsed" as well)
# A backslash before the end of the file (a continuation line with nothing after it): bash
# drops it; tree-sitter-bash makes the whole file an error.
_TRAILING_BACKSLASH_RE = re.compile(rb"\\(?=\s*\Z)")


def readable(source: bytes) -> tuple[bytes, Any]:
    """``source`` as tree-sitter-bash can read it, byte for byte the same length (so every
    position stays right; the text itself is always read from ``source``), and its tree: the
    constructs bash accepts and tree-sitter-bash misreads are rewritten to ones it reads
    alike."""
    readable = _TRAILING_BACKSLASH_RE.sub(b" ", source)
    tree = parser().parse(readable)
    for _ in range(MAX_RECOVERIES):
        error = first_error(tree.root_node)
        if error is None:
            break
        fixed = (
            _subshell_in_substitution(readable, error.start_byte)
            or _expansion_argument(readable, error.start_byte)
            or _lone_dollar(readable, error.start_byte)
        )
        if fixed is None:
            break
        readable, tree = fixed, parser().parse(fixed)
    return readable, tree


def _subshell_in_substitution(source: bytes, error: int) -> bytes | None:
    """``$((cd /x; pwd))`` is ``$( (cd /x; pwd) )`` to bash (not arithmetic: it is not an
    expression); tree-sitter-bash reads arithmetic and fails. Read as ``$( cd /x; pwd )``."""
    start = source.rfind(b"$((", max(0, error - 4096), error + 1)
    if start < 0:
        return None
    inner = _matching(source, start + 2)
    if inner is None or inner + 1 >= len(source) or source[inner + 1 : inner + 2] != b")":
        return None
    if inner + 1 < error and source.rfind(b"\n", inner, error) >= 0:
        return None  # the error is on a later line
    content = source[start + 3 : inner]
    if not re.search(rb"[;\n]|\|(?!\|)|&(?!&)", content):
        return None  # it may well be arithmetic
    return source[: start + 2] + b" " + source[start + 3 : inner] + b" " + source[inner + 1 :]


def _expansion_argument(source: bytes, error: int) -> bytes | None:
    """``${host%]?(:+([0-9]))}``, ``"${2:?real|lossy}"``: the word after a ``${...}`` operator
    is one word to bash, up to its ``}``, whatever is in it (an extglob pattern, a ``|``);
    tree-sitter-bash errs in it. The word becomes plain letters here (the expansion is still
    read from the text as written)."""
    start = source.rfind(b"${", max(0, error - 4096), error + 1)
    if start < 0:
        return None
    end = _matching(source, start + 1, b"{", b"}")
    if end is None or end < error:
        return None
    body = source[start + 2 : end]
    operator = re.match(rb"#?[A-Za-z_0-9@*]+(\[[^]]*\])?(:?[-=?+]|##?|%%?|//?|\^\^?|,,?)", body)
    if operator is None:
        return None
    argument = start + 2 + operator.end()
    if argument > error or not re.search(rb"[^A-Za-z0-9_./:-]", source[argument:end]):
        return None
    return source[:argument] + b"x" * (end - argument) + source[end:]


def _lone_dollar(source: bytes, error: int) -> bytes | None:
    """``$NODE$:5757``: a ``$`` before a character no expansion starts with is a plain ``$``
    to bash; tree-sitter-bash reads an expansion and swallows the words after it. Read as
    ``$NODE::5757`` (the text is still read as written)."""
    for dollar in (error, error - 1):  # the error node starts at the `$` or just after it
        following = source[dollar + 1 : dollar + 2]
        if (
            dollar >= 0
            and source[dollar : dollar + 1] == b"$"
            and following
            and not re.match(rb"[A-Za-z0-9_{(@*#?$!'\"\[-]", following)
        ):
            return source[:dollar] + b":" + source[dollar + 1 :]
    return None


def _matching(source: bytes, opening: int, open_: bytes = b"(", close: bytes = b")") -> int | None:
    """The byte that closes the bracket at ``opening`` (quotes and escapes skipped)."""
    depth = 0
    index = opening
    quote: int | None = None
    while index < len(source):
        char = source[index : index + 1]
        if char == b"\\":
            index += 2
            continue
        if quote is not None:
            if source[index] == quote:
                quote = None
        elif char in (b"'", b'"'):
            quote = source[index]
        elif char == open_:
            depth += 1
        elif char == close:
            depth -= 1
            if depth == 0:
                return index
        index += 1
    return None


def first_error(root: Any) -> Any | None:
    """Where tree-sitter-bash's first error is: the innermost error node first in the file (an
    error node at 1:1 that wraps the whole file is where it gave up, not where bash would)."""
    found = None
    node = root
    while True:  # only into subtrees with an error in them (tree-sitter keeps the flag)
        inner = _first_error_under(node)
        if inner is None:
            return found
        found = node = inner


def _first_error_under(node: Any) -> Any | None:
    stack = list(reversed(node.children))
    while stack:
        current = stack.pop()
        if current.is_missing or current.type == "ERROR":
            return current
        if current.has_error:
            stack.extend(reversed(current.children))
    return None


def blanked(source: bytes, stop: int) -> bytes:
    """``source`` with everything before ``stop`` blank (newlines kept): the rest read alone."""
    head = re.sub(rb"[^\n]", b" ", source[:stop])
    return head + source[stop:]


def descendants(node: Any, kind: str | None = None, *, including: bool = False) -> Iterator[Any]:
    """The nodes under ``node`` in document order (and ``node`` itself first, if asked):
    without recursion, so that a deeply nested tree is no risk."""
    stack = [node] if including else list(reversed(node.children))
    while stack:
        current = stack.pop()
        if kind is None or current.type == kind:
            yield current
        stack.extend(reversed(current.children))


# -- what tree-sitter-bash reads apart from bash ----------------------------------------------

# Bytes that stand in, for the parser only, for what tree-sitter-bash reads differently from bash.
_STAND_INS = tuple(bytes([b]) for b in (*range(1, 9), *range(14, 32)))
_ESCAPED_BLANK_RE = re.compile(rb"(?<!\\)((?:\\\\)*\\)[ \t]")


def as_bash_reads(source: bytes) -> bytes:
    """The text the parser is given: ``source`` with a carriage return, and a blank after a
    backslash, replaced by a byte of the same length that it reads as part of a word.

    tree-sitter-bash reads ``\\r`` as a blank and drops a backslash-escaped blank that starts a
    word; bash reads both as characters of the word (``--port 30000\\r`` passes ``30000\\r``,
    ``\\<space>`` at the end of a line passes ``' '`` and ends the command: the broken
    continuation of a CRLF file, or of a stray blank after the backslash). Every position and
    every slice of the real text stay as they are: only the parser sees the stand-in."""
    escaped_blank = b"\\ " in source or b"\\\t" in source  # a substring search is ~10x faster
    if b"\r" not in source and not (escaped_blank and _ESCAPED_BLANK_RE.search(source)):
        return source
    stand_in = next((b for b in _STAND_INS if b not in source), None)
    if stand_in is None:  # every control byte used: a binary file, not a launch script
        return source
    text = source.replace(b"\r", stand_in)
    return _ESCAPED_BLANK_RE.sub(lambda m: m.group(1) + stand_in, text)


# the node types that are (pieces of) a word
WORD_PIECES = frozenset(
    {
        "word",
        "concatenation",
        "string",
        "raw_string",
        "ansi_c_string",
        "translated_string",
        "simple_expansion",
        "expansion",
        "command_substitution",
        "arithmetic_expansion",
        "number",
        "brace_expression",
    }
)


def unglue(children: list[Any]) -> tuple[list[Any], dict[int, tuple[Any, ...]]]:
    """Children with the words tree-sitter-bash cut in pieces put back together: bash splits
    words only at blanks and operators, so pieces with nothing between them are one word.
    Returns the first pieces, and node id -> the pieces that follow it."""
    out: list[Any] = []
    glued: dict[int, tuple[Any, ...]] = {}
    last: Any = None  # the last piece of the word being put back together
    for child in children:
        if out:
            head = out[-1]
            if head.id not in glued:
                last = (
                    head.child_by_field_name("value")
                    if head.type == "variable_assignment"
                    else head
                )
            piece = child.named_children[0] if child.type == "command_name" else child
            if (
                last is not None
                and (last.type in WORD_PIECES or head.type == "command_name")
                and piece.type in WORD_PIECES
                and child.start_byte == last.end_byte
            ):
                glued[head.id] = (*glued.get(head.id, ()), piece)
                last = piece
                continue
        out.append(child)
    return out, glued
