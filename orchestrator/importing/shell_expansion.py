"""Word expansion as bash does it: braces, tilde, parameters, arithmetic, field splitting and
quote removal, over the variables the walk has seen so far.

``Expander`` holds what a word's value depends on (the script's text and tree, its variables,
its positional arguments, the work budget) and turns one word of the tree into the words bash
would pass: ``${VAR:-default}`` and friends are expanded, an unquoted expansion is split into
fields, ``"$@"``/``"${ARR[@]}"`` give one word per element, ``{0..3}`` one word per value. What
cannot be known without running something (``$(cmd)``, a variable the script never sets) stays
an ``Unresolved`` part. The statements that assign those variables are walked by its
subclasses (``shell_commands``, ``shell_script``).

Pure: no I/O.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import Any

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_arith import NotKnown, run_arithmetic
from orchestrator.importing.shell_quoting import ansi_c, unescape_double, unescape_word
from orchestrator.importing.shell_syntax import Columns, as_bash_reads, descendants, readable
from orchestrator.importing.shell_words import (
    Default,
    Part,
    Position,
    Unresolved,
    Variable,
    Word,
    literal,
    merge_parts,
)

# How deep one nested walker counts in budget "nesting": a word expanded by a walker of its own
# (``${A:-${B:-...}}``, a brace variant, a heredoc body) costs about three statement levels of
# Python stack.
WALKER_NESTING = 3


_IFS = " \t\n"
_IFS_RE = re.compile(f"[{_IFS}]+")


class Fields:
    """Words under construction: unquoted expansions split into several (bash's field splitting)."""

    def __init__(self) -> None:
        self.fields: list[list[Part]] = [[]]
        self.quoted = False  # a quoted part keeps an otherwise empty word

    def add(self, part: Part) -> None:
        self.fields[-1].append(part)

    def add_split(self, value: str) -> None:
        # bash's default IFS: space, tab, newline (str.split() would also split at \r)
        pieces = [piece for piece in _IFS_RE.split(value) if piece]
        if not pieces:
            if value and self.fields[-1]:
                self.fields.append([])
            return
        if value[:1] in _IFS and self.fields[-1]:
            self.fields.append([])
        for index, piece in enumerate(pieces):
            if index:
                self.fields.append([])
            self.fields[-1].append(piece)
        if value[-1:] in _IFS and value:
            self.fields.append([])

    def words(self, position: Position, source: str) -> list[Word]:
        out = [Word(tuple(f), position, source) for f in self.fields if f]
        if not out and self.quoted:
            out = [Word(("",), position, source)]
        return out


class Expander(ABC):
    """One script's text and tree, the variables at the point being walked, and the expansion
    of its words."""

    def __init__(
        self,
        text: str,
        origin: Position,
        given: Mapping[str, str],
        *,
        budget: WorkBudget,
        nesting: int = 0,
    ) -> None:
        self.source = text.encode("utf-8", "surrogateescape")
        self.origin = origin
        self.budget = budget
        self.nesting = nesting  # statements and walkers around this point (budget "nesting")
        budget.check("nesting", nesting, origin)
        self.variables: dict[str, Variable] = {
            name: Variable(literal(value, origin), False, None) for name, value in given.items()
        }
        self.defaults: list[Default] = []
        self.keep_continuations = False  # a heredoc body keeps its line breaks for positions
        self.positionals: tuple[Word, ...] | None = None  # None: the script's own, unknown
        self.brace_words = 1  # words the brace expansions around this word already make
        self.columns = Columns(self.source)
        # what a parse costs grows with the words written: bounded before parsing
        budget.check("source-words", len(self.source.split()), origin)
        budget.spend("parsed", len(self.source), origin)
        # a carriage return, a blank after a backslash: read as bash reads them (as_bash_reads)
        self.readable, self.tree = readable(as_bash_reads(self.source))

    @abstractmethod
    def child(self, text: str, position: Position) -> Expander:
        """A reader for a word of this script (a default value, a brace variant, a heredoc
        body): this script's variables, arguments and budget."""

    @abstractmethod
    def expand_variant(self, text: str, position: Position) -> list[Word]:
        """A word's text after brace expansion, expanded as a word here (the statement walker
        reads it as the arguments of a command)."""

    # positions and text

    def at(self, node: Any) -> Position:
        row, column = node.start_point  # column in bytes: count characters
        return self.origin.shifted(row, self.columns.characters(node.start_byte, column))

    def text(self, node: Any) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    def text_through(self, node: Any, glued: tuple[Any, ...]) -> str:
        end = glued[-1].end_byte if glued else node.end_byte
        return self.source[node.start_byte : end].decode("utf-8", "surrogateescape")

    # word expansion

    def expand(self, node: Any, glued: tuple[Any, ...] = ()) -> list[Word]:
        pieces = [p for n in (node, *glued) for p in _pieces(n)]
        brace = _brace(pieces, self.source)
        if brace is not None:  # bash expands braces first, in the text: one word per value
            start, end, values = brace
            at = self.at(node)
            self.budget.check("brace-words", self.brace_words * len(values), at)
            finish = glued[-1].end_byte if glued else node.end_byte
            words: list[Word] = []
            for value in values:
                variant = (
                    self.source[node.start_byte : start] + value.encode() + self.source[end:finish]
                ).decode("utf-8", "surrogateescape")
                if _PLAIN_WORD_RE.fullmatch(variant):  # nothing left to expand
                    self.charge(1, [variant], at)
                    words.append(literal(variant, at))
                    continue
                saved, self.brace_words = self.brace_words, self.brace_words * len(values)
                try:
                    words.extend(self.expand_variant(variant, at))
                finally:
                    self.brace_words = saved
            return words
        fields = Fields()
        self.expand_glued(node, glued, fields, quoted=False)
        words = [
            Word(tuple(merge_parts(list(w.parts))), w.position, w.source)
            for w in fields.words(self.at(node), self.text_through(node, glued))
        ]
        if words:
            self.charge(len(words), [p for w in words for p in w.parts], words[0].position)
        return words

    def expand_single(self, node: Any, position: Position, glued: tuple[Any, ...] = ()) -> Word:
        """An assignment's value: expanded but never split."""
        fields = Fields()
        self.expand_glued(node, glued, fields, quoted=True)
        parts = merge_parts([p for f in fields.fields for p in f])
        self.charge(1, parts, position)
        return Word(tuple(parts) or ("",), position, self.text_through(node, glued))

    def charge(self, words: int, parts: list[Part], position: Position) -> None:
        """Expanded words and their characters, against the run's budget."""
        self.budget.spend("words", words, position)
        self.budget.spend(
            "characters", sum(len(p) if isinstance(p, str) else 1 for p in parts), position
        )

    def expand_glued(
        self, node: Any, glued: tuple[Any, ...], fields: Fields, *, quoted: bool
    ) -> None:
        """One bash word that tree-sitter-bash cut in pieces (``$A:$B/lib`` read as ``$A:$``
        then ``B/lib``; ``'a'\\$A`` as two words): pieces with nothing between them are one
        word, and a stray ``$`` at a cut is the ``$`` of the name that follows."""
        nodes = [node, *glued]
        stray_before = False
        for number, piece in enumerate(nodes):
            children = list(piece.children) if piece.type == "concatenation" else [piece]
            if piece.type == "command_name" and piece.named_children:
                children = list(piece.named_children)
            stray_after = number + 1 < len(nodes) and bool(children) and children[-1].type == "$"
            if stray_after:
                children = children[:-1]
            if stray_before and children:
                first, *children = children
                self.expand_after_dollar(first, fields, quoted=quoted)
            for child in children:
                self.expand_into(child, fields, quoted=quoted)
            stray_before = stray_after

    def expand_after_dollar(self, node: Any, fields: Fields, *, quoted: bool) -> None:
        text = self.text(node)
        match = re.match(r"[A-Za-z_][A-Za-z0-9_]*", text) if node.type == "word" else None
        if match is None:
            fields.add("$")
            self.expand_into(node, fields, quoted=quoted)
            return
        position = self.at(node)
        value = self.value_of(match.group(), None, position)
        if value is None:
            fields.add(Unresolved("variable", match.group(), position))
        else:
            for part in value.parts:
                if isinstance(part, Unresolved) or quoted:
                    fields.add(part)
                else:
                    fields.add_split(part)
        rest = text[match.end() :]
        fields.add(rest if quoted else unescape_word(rest))

    def expand_into(self, node: Any, fields: Fields, *, quoted: bool) -> None:
        kind = node.type
        text = self.text(node)
        if kind in ("word", "number", "command_name"):
            if kind == "command_name" and node.named_children:
                for child in node.named_children:
                    self.expand_into(child, fields, quoted=quoted)
                return
            if not quoted and text.startswith("~") and (text == "~" or text.startswith("~/")):
                fields.add(
                    self.lookup("HOME", node) or Unresolved("variable", "HOME", self.at(node))
                )
                text = text[1:]
            fields.add(text if quoted else unescape_word(text))
        elif kind == "raw_string":
            fields.quoted = True
            fields.add(text[1:-1])
        elif kind == "ansi_c_string":
            fields.quoted = True
            fields.add(ansi_c(text[2:-1]))
        elif kind in ("string", "translated_string"):
            fields.quoted = True
            self.expand_string(node, fields)
        elif kind == "string_content":
            fields.add(unescape_double(text, self.keep_continuations))
        elif kind == "concatenation":
            for child in node.children:
                self.expand_into(child, fields, quoted=quoted)
        elif kind in ("simple_expansion", "expansion"):
            self.expand_parameter(node, fields, quoted=quoted)
        elif kind in ("command_substitution", "process_substitution"):
            fields.add(Unresolved("command", text, self.at(node)))
        elif kind == "arithmetic_expansion":
            result = self.arithmetic(text[3:-2], self.at(node))
            fields.add(
                result if result is not None else Unresolved("arithmetic", text, self.at(node))
            )
        elif kind == "brace_expression":
            fields.add(Unresolved("command", text, self.at(node)))
        elif not node.is_named:
            fields.add(text)
        else:
            fields.add(text)

    def expand_string(self, node: Any, fields: Fields) -> None:
        start = node.start_byte + (2 if node.type == "translated_string" else 1)
        end = node.end_byte - 1
        cursor = start
        for child in node.named_children:
            if child.start_byte > cursor:
                gap = self.source[cursor : child.start_byte].decode("utf-8", "surrogateescape")
                fields.add(unescape_double(gap, self.keep_continuations))
            if child.type == "string_content":
                fields.add(unescape_double(self.text(child), self.keep_continuations))
            else:
                self.expand_into(child, fields, quoted=True)
            cursor = max(cursor, child.end_byte)
        if end > cursor:
            rest = self.source[cursor:end].decode("utf-8", "surrogateescape")
            fields.add(unescape_double(rest, self.keep_continuations))

    def expand_parameter(self, node: Any, fields: Fields, *, quoted: bool) -> None:
        text = self.text(node)
        position = self.at(node)
        if node.type == "simple_expansion":
            name = text[1:]
            operator, argument, index = None, None, None
        else:
            match = _EXPANSION_RE.fullmatch(text)
            if match is None:
                fields.add(Unresolved("variable", text[2:-1], position))
                return
            name, index, operator, argument = match.group("name", "index", "op", "arg")
        elements = self.elements(name, index)
        if elements is not None:  # "$@", "${ARR[@]}": one word per element
            for number, element in enumerate(elements):
                if number:
                    fields.fields.append([])
                if quoted:
                    fields.quoted = True
                    fields.fields[-1].extend(element.parts)
                else:
                    for part in element.parts:
                        fields.add_split(part) if isinstance(part, str) else fields.add(part)
            return
        value = self.value_of(name, index, position)
        is_set = value is not None or self.known_unset(name)
        if operator in (":-", "-", ":=", "="):
            # (a script's own arguments too: ${1:-default} is what running it bare gives)
            from_outside = (
                value is None
                and name not in self.variables
                and not (name.isdigit() and self.positionals is not None)
            )
            empty = (value is None and (self.known_unset(name) or from_outside)) or (
                operator.startswith(":") and value is not None and value.text == ""
            )
            default = (
                self.expand_text(argument, position)  # once: nested defaults are read once
                if argument is not None and (from_outside or empty)
                else None
            )
            if from_outside and default is not None:
                # the script's own default, unless the caller's environment sets the variable:
                # taken, and said (`--set NAME=VALUE` gives another value)
                written = default.text if default.text is not None else argument or ""
                self.defaults.append(Default(name, position, written))
            if empty and default is not None:
                value = default
                if operator.endswith("=") and name.isidentifier():
                    self.variables[name] = Variable(value, self.is_exported(name), position)
            elif value is None and not is_set:
                fields.add(Unresolved("variable", name, position))
                return
        elif operator in (":+", "+"):
            if value is None and not self.known_unset(name):
                fields.add(Unresolved("variable", name, position))
                return
            use = value is not None and (operator == "+" or value.text != "")
            value = self.expand_text(argument or "", position) if use else literal("", position)
        elif operator in (":?", "?"):
            if value is None:  # ${X:?message}: the script stops when X is unset; X is needed
                fields.add(Unresolved("variable", name, position))
                return
        elif operator is not None:  # ${#x}, ${x%...}, ${x/...}: not followed
            fields.add(Unresolved("variable", text[2:-1], position))
            return
        if value is None:
            fields.add(Unresolved("variable", name, position))
            return
        for part in value.parts:
            if isinstance(part, Unresolved) or quoted:
                fields.add(part)
            else:
                fields.add_split(part)

    def expand_text(self, text: str, position: Position) -> Word:
        """A default value inside ``${X:-...}``: itself a word to expand."""
        if not any(c in text for c in "$`'\"\\~"):
            return literal(text, position)
        nested = self.child(f"__orch={text}", position)
        root = nested.tree.root_node
        assignment = next(iter(descendants(root, "variable_assignment")), None)
        value = assignment.child_by_field_name("value") if assignment is not None else None
        if value is None:
            return literal(text, position)
        return nested.expand_single(value, position)

    def arithmetic(self, expression: str, at: Position) -> str | None:
        """``$((i + 1))`` over the integers the script sets; None when anything is unknown.
        What it assigns (``$((n++))``) is assigned."""
        try:
            value, assigned = run_arithmetic(expression, self.integer)
        except NotKnown:
            return None
        for name, number in assigned.items():
            self.variables[name] = Variable(literal(str(number), at), self.is_exported(name), at)
        return str(value)

    # variables: what a name holds at this point

    def lookup(self, name: str, node: Any) -> str | None:
        variable = self.variables.get(name)
        if variable is None or variable.value is None:
            return None
        return variable.value.text

    def value_of(self, name: str, index: str | None, position: Position) -> Word | None:
        if name.isdigit():
            number = int(name)
            if number == 0:
                return None
            if self.positionals is not None and number <= len(self.positionals):
                return self.positionals[number - 1]
            variable = self.variables.get(name)  # --set 1=value
            return variable.value if variable is not None else None
        variable = self.variables.get(name)
        if variable is None:
            return None
        if index not in (None, "0") and variable.elements is not None:
            if index is not None and index.isdigit() and int(index) < len(variable.elements):
                return variable.elements[int(index)]
            return None
        return variable.value

    def elements(self, name: str, index: str | None) -> tuple[Word, ...] | None:
        if name in ("@", "*") and self.positionals is not None:
            return self.positionals
        if index in ("@", "*"):
            variable = self.variables.get(name)
            if variable is not None and variable.elements is not None:
                return variable.elements
        return None

    def known_unset(self, name: str) -> bool:
        """Only the script's own positional parameters inside a called function are known absent."""
        if name.isdigit() and self.positionals is not None:
            return int(name) > len(self.positionals)
        return False

    def is_exported(self, name: str) -> bool:
        variable = self.variables.get(name)
        return variable is not None and variable.exported

    def integer(self, name: str) -> int | None:
        """A variable's value as arithmetic reads it, when the script makes it a number."""
        variable = self.variables.get(name)
        text = variable.value.text if variable is not None and variable.value else None
        if text is None or not re.fullmatch(r"\s*-?\d+\s*", text):
            return None
        return int(text)

    def arithmetic_value(self, expression: str) -> int:
        value, _ = run_arithmetic(expression, self.integer)
        return value

    def arithmetic_assign(self, expression: str, at: Position) -> None:
        _, assigned = run_arithmetic(expression, self.integer)
        for name, value in assigned.items():
            self.variables[name] = Variable(literal(str(value), at), self.is_exported(name), at)


_EXPANSION_RE = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:\[(?P<index>[^]]*)\])?"
    r"(?:(?P<op>:-|-|:=|=|:\+|\+|:\?|\?|#|##|%|%%|/|//|:|\^|,)(?P<arg>.*))?\}",
    re.DOTALL,
)
_PLAIN_WORD_RE = re.compile(r"[A-Za-z0-9_.,:/=@%+-]*")
_RANGE_RE = re.compile(r"\{(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?\}|\{([a-zA-Z])\.\.([a-zA-Z])\}")
_MAX_BRACE_VALUES = 1024


def _pieces(node: Any) -> list[Any]:
    return list(node.children) if node.type == "concatenation" else [node]


def _brace(pieces: list[Any], source: bytes) -> tuple[int, int, list[str]] | None:
    """The first brace expansion in an unquoted word (its pieces): its byte range and its
    values (``{0..3}``, ``{8..0..2}``, ``{a..c}``, ``{x,y}``), or None."""
    for index, piece in enumerate(pieces):
        if piece.type == "brace_expression":
            match = _RANGE_RE.fullmatch(source[piece.start_byte : piece.end_byte].decode())
            if match is None:
                return None
            if match.group(4):
                first, last = ord(match.group(4)), ord(match.group(5))
                step = 1 if last >= first else -1
                values = [chr(c) for c in range(first, last + step, step)]
            else:
                first, last = int(match.group(1)), int(match.group(2))
                size = abs(int(match.group(3) or 1)) or 1
                step = size if last >= first else -size
                values = [str(n) for n in range(first, last + (1 if step > 0 else -1), step)]
            if len(values) > _MAX_BRACE_VALUES:
                return None
            return piece.start_byte, piece.end_byte, values
        if piece.type == "word" and source[piece.start_byte : piece.end_byte] == b"{":
            close = next(
                (
                    p
                    for p in pieces[index + 1 :]
                    if p.type == "word" and source[p.start_byte : p.end_byte] == b"}"
                ),
                None,
            )
            if close is None:
                return None
            inner = source[piece.end_byte : close.start_byte].decode("utf-8", "surrogateescape")
            if "," in inner and re.fullmatch(r"[^{}$`\"'\s]*", inner):
                return piece.start_byte, close.end_byte, inner.split(",")
            return None
    return None
