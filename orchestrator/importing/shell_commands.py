"""Simple commands as bash runs them: assignments and declarations (``export``, ``local``,
``declare``), a command's words with its prefix variables and environment, its redirections
and heredocs, and the broken continuation that ends it early.

``CommandReader`` reads one simple command into a ``Command`` value (or assigns, for a line of
assignments alone); what runs it, calls a function or skips it is the statement walker's
(``shell_script``), which also says where bash would find a syntax error (``syntax_error``).

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_arith import NotKnown
from orchestrator.importing.shell_expansion import Expander, Fields
from orchestrator.importing.shell_quoting import as_double_quoted
from orchestrator.importing.shell_syntax import WORD_PIECES, descendants, unglue
from orchestrator.importing.shell_words import (
    Command,
    ContinuationBreak,
    Heredoc,
    Position,
    Redirect,
    Unresolved,
    Variable,
    Word,
    literal,
    merge_parts,
)

# bash's reserved words that can only close or continue a compound command
_RESERVED_WORDS = frozenset({"then", "else", "elif", "fi", "do", "done", "esac", "in", "}"})
_BROKEN_END_RE = re.compile(rb"(?<!\\)(?:\\\\)*(\\)([ \t\r])$")
_LINE_END_RE = re.compile(rb"[ \t]*(?:#[^\n]*)?(?:\n|$)")


class CommandReader(Expander):
    """Simple commands, assignments and redirections, read with their words expanded."""

    def __init__(
        self,
        text: str,
        origin: Position,
        given: Mapping[str, str],
        *,
        budget: WorkBudget,
        nesting: int = 0,
    ) -> None:
        super().__init__(text, origin, given, budget=budget, nesting=nesting)
        self.errors: list[Position] = []
        self.stop: int | None = None  # bytes from here on belong to the next re-read tree
        self.locals: list[dict[str, Variable | None]] = []  # per call: `local` names' old values
        self.piped_to: tuple[str, ...] = ()  # the programs the pipeline being walked feeds

    def syntax_error(self, node: Any) -> None:
        """Where bash -n would stop: said, and the file is read again from the next line."""
        self.errors.append(self.at(node))
        end = self.readable.find(b"\n", node.start_byte)
        restart = end + 1 if end >= 0 else len(self.readable)
        if self.stop is None or restart < self.stop:
            self.stop = restart

    # assignments

    def assign(
        self, node: Any, exported: bool | None, glued: tuple[Any, ...] = ()
    ) -> tuple[str, Word] | None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return None
        name = self.text(name_node)
        append = any(child.type == "+=" for child in node.children)
        position = self.at(node)
        if name_node.type == "subscript":  # ARR[N]=x
            self.assign_element(name_node, value_node, append, position)
            return None
        keep_export = self.is_exported(name) if exported is None else exported
        if value_node is not None and value_node.type == "array":
            elements = tuple(w for child in value_node.named_children for w in self.expand(child))
            old = self.variables.get(name)
            if append and old is not None:  # ARGS+=(...): after the elements it has
                kept = old.elements if old.elements is not None else (old.value,)
                if any(element is None for element in kept):
                    kept = (Word((Unresolved("variable", name, position),), position, name),)
                elements = (*(e for e in kept if e is not None), *elements)
            self.variables[name] = Variable(
                elements[0] if elements else literal("", position), keep_export, position, elements
            )
            return None
        value = (
            self.expand_single(value_node, position, glued)
            if value_node is not None
            else literal("", position)
        )
        if append and (old := self.variables.get(name)) is not None and old.value is not None:
            value = Word(old.value.parts + value.parts, position, self.text(node))
        self.variables[name] = Variable(value, keep_export, position)
        return name, value

    def assign_element(
        self, name_node: Any, value_node: Any, append: bool, position: Position
    ) -> None:
        """``ARR[2]=x``, ``ARR[$i]+=y``: followed where the index is a number the script
        sets and the array's elements are known; else the array becomes unknown."""
        base_node = name_node.child_by_field_name("name")
        index_node = name_node.child_by_field_name("index")
        base = self.text(base_node) if base_node is not None else self.text(name_node)
        old = self.variables.get(base)
        value = (
            self.expand_single(value_node, position)
            if value_node is not None
            else literal("", position)
        )
        index: int | None = None
        if index_node is not None:
            try:
                index = self.arithmetic_value(self.text(index_node))
            except NotKnown:
                index = None
        elements = old.elements if old is not None else ()
        if index is None or elements is None or not 0 <= index <= len(elements):
            self.variables[base] = Variable(None, self.is_exported(base), position)
            return
        if append and index < len(elements):
            value = Word(elements[index].parts + value.parts, position, value.source)
        updated = (*elements[:index], value, *elements[index + 1 :])
        self.variables[base] = Variable(updated[0], self.is_exported(base), position, updated)

    def declaration(self, node: Any) -> None:
        keyword = self.text(node.children[0])
        flags = [
            self.text(c)
            for c in node.named_children
            if c.type == "word" and self.text(c).startswith("-")
        ]
        exported = keyword == "export" or any("x" in flag for flag in flags)
        children, glued = unglue(list(node.named_children))
        if self.locals and keyword in ("local", "declare", "typeset"):
            # inside a function these names are its own: the caller's come back at return
            for child in children:
                target = (
                    child.child_by_field_name("name")
                    if child.type == "variable_assignment"
                    else child
                )
                name = self.text(target).split("[", 1)[0] if target is not None else ""
                if name.isidentifier() and name not in self.locals[-1]:
                    self.locals[-1][name] = self.variables.get(name)
        for child in children:
            if child.type == "variable_assignment":
                self.assign(child, exported=exported or None, glued=glued.get(child.id, ()))
            elif child.type in ("variable_name", "word") and not self.text(child).startswith("-"):
                name = self.text(child)
                old = self.variables.get(name)
                if exported:
                    self.variables[name] = Variable(
                        old.value if old else None,
                        True,
                        old.position if old else self.at(child),
                        old.elements if old else None,
                    )

    # commands

    def simple_command(
        self,
        node: Any,
        redirects: tuple[Redirect, ...],
        background: bool,
        following: tuple[str, ...],
        statement: Any = None,
        after: tuple[Word, ...] = (),
    ) -> Command | None:
        """The command ``node`` runs, its words expanded; None for assignments alone (they
        are made here)."""
        prefix: list[tuple[str, Word]] = []
        words: list[Word] = []
        extra: list[Redirect] = []
        name_node = node.child_by_field_name("name")
        if name_node is not None and self.text(name_node) in _RESERVED_WORDS:
            self.syntax_error(name_node)  # tree-sitter-bash reads a stray `fi` as a command
        children, glued = unglue(list(node.children))
        fields = {c.id: node.field_name_for_child(i) for i, c in enumerate(node.children)}
        for child in children:
            field = fields.get(child.id)
            if child.type == "variable_assignment":
                name_node = child.child_by_field_name("name")
                value_node = child.child_by_field_name("value")
                position = self.at(child)
                value = (
                    self.expand_single(value_node, position, glued.get(child.id, ()))
                    if value_node is not None
                    else literal("", position)
                )
                if name_node is not None:
                    prefix.append((self.text(name_node), value))
            elif child.id in glued:
                words.extend(self.expand(child, glued[child.id]))
            elif child.type == "command_name":
                words.extend(
                    self.expand(child.named_children[0] if child.named_children else child)
                )
            elif child.type.endswith("redirect"):
                extra.append(self.redirect(child))
                words.extend(self.redirect_arguments(child))
            elif field == "argument" or (child.is_named and child.type not in ("comment",)):
                if child.type == "herestring_redirect":
                    continue
                words.extend(self.expand(child))
        words.extend(after)
        if not words and prefix:  # `A=$x:$Y/lib` read by tree-sitter as a command `Y/lib`
            for name, value in prefix:
                self.variables[name] = Variable(value, self.is_exported(name), value.position)
            return None
        environment = {n: v for n, v in self.variables.items() if v.exported}
        for name, value in prefix:
            environment[name] = Variable(value, True, value.position)
        return Command(
            words=tuple(words),
            prefix=tuple(prefix),
            environment=environment,
            variables=dict(self.variables),
            redirects=tuple(extra) + redirects,
            background=background,
            position=self.at(node),
            source=self.text(node),
            next_commands=following,
            broken=self.continuation_break(statement if statement is not None else node),
            piped_to=self.piped_to,
        )

    def continuation_break(self, node: Any) -> ContinuationBreak | None:
        """A statement that ends in a backslash escaping a blank or a carriage return, with
        nothing but blanks (or a comment) after it on the line: bash ends the command there."""
        statement = self.source[node.start_byte : node.end_byte]
        end = statement[:-1] if statement.endswith(b"\n") else statement  # where $ matches
        if end[-2:-1] != b"\\" or end[-1:] not in (b" ", b"\t", b"\r"):
            return None  # the regex would search the whole statement for its anchored end
        match = _BROKEN_END_RE.search(statement)
        if match is None or not _LINE_END_RE.match(self.source, node.end_byte):
            return None
        offset = node.start_byte + match.start(1)
        line_start = self.source.rfind(b"\n", 0, offset) + 1
        row = self.source.count(b"\n", 0, offset)
        column = len(self.source[line_start:offset].decode("utf-8", "surrogateescape"))
        return ContinuationBreak(self.origin.shifted(row, column), match.group(2).decode())

    def redirect(self, node: Any) -> Redirect:
        position = self.at(node)
        descriptor_node = node.child_by_field_name("descriptor")
        descriptor = self.text(descriptor_node) if descriptor_node is not None else None
        if node.type == "heredoc_redirect":
            return Redirect(node.children[0].type, descriptor, None, self.heredoc(node), position)
        operator_node = next((c for c in node.children if not c.is_named), None)
        operator = self.text(operator_node) if operator_node is not None else node.type
        target_node = node.child_by_field_name("destination")
        if target_node is None and node.named_children:
            target_node = node.named_children[-1]
        if (
            operator_node is not None
            and target_node is not None
            and target_node.start_point[0] > operator_node.end_point[0]
        ):
            # `> ` at the end of a line (`--addr <host>:<port>`): bash's syntax error;
            # tree-sitter-bash takes the next line's words as the file
            self.syntax_error(operator_node)
        target = None
        if target_node is not None and target_node is not descriptor_node:
            expanded = self.expand(target_node)
            target = expanded[0] if expanded else None
        return Redirect(operator, descriptor, target, None, position)

    def redirect_arguments(self, node: Any) -> list[Word]:
        """Words after a redirection's target: arguments of the command to bash (``cmd > log
        --tp 2``), which tree-sitter-bash hangs on the redirection as more targets."""
        if node.type != "file_redirect":
            return []
        pieces = [c for c in node.named_children if c.type in WORD_PIECES]
        descriptor = node.child_by_field_name("descriptor")
        pieces = [c for c in pieces if descriptor is None or c.id != descriptor.id]
        return [word for piece in pieces[1:] for word in self.expand(piece)]

    def heredoc(self, node: Any) -> Heredoc:
        start = next((c for c in node.children if c.type == "heredoc_start"), None)
        body = next((c for c in node.children if c.type == "heredoc_body"), None)
        delimiter_raw = self.text(start) if start is not None else ""
        quoted = any(q in delimiter_raw for q in ("'", '"', "\\"))
        delimiter = delimiter_raw.replace("'", "").replace('"', "").replace("\\", "")
        if body is None:
            position = self.at(node)
            return Heredoc(delimiter, quoted, "", literal("", position), position, ())
        position = self.at(body)
        text = self.text(body)
        if quoted:
            return Heredoc(delimiter, True, text, literal(text, position), position, ())
        # tree-sitter-bash loses expansions after a backslash-newline inside a heredoc body, so
        # the body is expanded as what it is to bash: double-quoted text in which `"` is plain
        prefix = '_="'
        nested = self.child(
            prefix + as_double_quoted(text) + '"', position.shifted(0, -len(prefix))
        )
        nested.keep_continuations = True
        string = next(iter(descendants(nested.tree.root_node, "string")), None)
        if string is None:
            return Heredoc(delimiter, False, text, literal(text, position), position, ())
        fields = Fields()
        nested.expand_into(string, fields, quoted=True)
        expansions: list[Unresolved | tuple[str, Position, str]] = []
        for child in string.named_children:
            if child.type == "string_content":
                continue
            one = Fields()
            nested.expand_into(child, one, quoted=True)
            parts = [p for f in one.fields for p in f]
            expansions.extend(p for p in parts if isinstance(p, Unresolved))
            if all(isinstance(p, str) for p in parts):
                value = "".join(p for p in parts if isinstance(p, str))
                expansions.append((nested.text(child), nested.at(child), value))
        word = Word(tuple(merge_parts([p for f in fields.fields for p in f])), position, text)
        return Heredoc(delimiter, False, text, word, position, tuple(expansions))

    # word expansion
