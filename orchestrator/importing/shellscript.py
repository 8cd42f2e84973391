"""A launch script as bash would run it: commands with their words expanded, never a regex.

``orch import`` reads the scripts teams already run (``nohup python -m sglang.launch_server ...
> log 2>&1 &``, ``ssh host bash <<EOF``, ``docker run ... lmsysorg/sglang ...``). The script is
parsed with tree-sitter-bash (a real grammar: quoting, continuations, heredocs, substitutions) and
walked in order the way bash would: variables are assigned and exported as the script goes,
``${VAR:-default}`` and friends are expanded, unquoted expansions are split into fields,
``"$@"``/``"${ARR[@]}"`` give one word per element, ``for x in a b`` loops over literal lists are
unrolled and functions are walked where they are called. What cannot be known without running
something (``$(cmd)``, a variable the script never sets) stays an ``Unresolved`` part: never
guessed.

Pure: no I/O. tree-sitter is imported lazily (``orch render`` does not pay for it).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_arith import NotKnown, assigned_names, run_arithmetic
from orchestrator.importing.shell_syntax import (
    MAX_RECOVERIES,
    Columns,
    blanked,
    descendants,
    first_error,
    parser,
    readable,
)

MAX_UNROLL = 64  # loop iterations walked per `for` statement (more: walked once, unknown)
# How deep one nested walker counts in budget "nesting": a word expanded by a walker of its own
# (``${A:-${B:-...}}``, a brace variant, a heredoc body) costs about three statement levels of
# Python stack.
_WALKER_NESTING = 3


@dataclass(frozen=True)
class Position:
    """1-based line and column in the file the user gave."""

    line: int
    column: int

    def shifted(self, row: int, column: int) -> Position:
        """A 0-based (row, column) inside text that starts here."""
        if row == 0:
            return Position(self.line, self.column + column)
        return Position(self.line + row, column + 1)


@dataclass(frozen=True)
class Unresolved:
    """An expansion whose value the script does not determine: ``$MODEL``, ``$(hostname)``."""

    kind: str  # "variable" | "command" | "arithmetic"
    name: str  # the variable's name, or the substitution's text
    position: Position

    def shown(self) -> str:
        return f"${{{self.name}}}" if self.kind == "variable" else self.name


Part = str | Unresolved


@dataclass(frozen=True)
class Word:
    """One argument after expansion: literal text and unresolved parts, in order."""

    parts: tuple[Part, ...]
    position: Position
    source: str  # the word as written

    @property
    def text(self) -> str | None:
        """The word's value, or None when a part is unresolved."""
        if any(isinstance(part, Unresolved) for part in self.parts):
            return None
        return "".join(part for part in self.parts if isinstance(part, str))

    @property
    def unresolved(self) -> tuple[Unresolved, ...]:
        return tuple(part for part in self.parts if isinstance(part, Unresolved))

    def shown(self) -> str:
        return "".join(part if isinstance(part, str) else part.shown() for part in self.parts)


@dataclass(frozen=True)
class Variable:
    value: Word | None  # None: unknown (assigned from something unresolvable, or never set)
    exported: bool
    position: Position | None  # where the script assigned it
    elements: tuple[Word, ...] | None = None  # an array's elements


@dataclass(frozen=True)
class Heredoc:
    delimiter: str
    quoted: bool  # <<'EOF' / <<"EOF" / <<\EOF: the body is sent as written
    body: str  # as written
    expanded: Word  # after this side's expansion (the body itself when quoted)
    position: Position  # the body's first character
    expansions: tuple[
        Unresolved | tuple[str, Position, str], ...
    ]  # what expanded (name, at, value)


@dataclass(frozen=True)
class Redirect:
    operator: str  # ">", ">>", "&>", "<", "<<", "<<-", "<<<", ">&", ...
    descriptor: str | None  # "2" in 2>&1
    target: Word | None
    heredoc: Heredoc | None
    position: Position


@dataclass(frozen=True)
class ContinuationBreak:
    position: Position  # the backslash
    escaped: str  # " ", "\t" or "\r" (a CRLF file): what bash passes as the last argument


@dataclass(frozen=True)
class Command:
    """One simple command as bash would run it."""

    words: tuple[Word, ...]
    prefix: tuple[tuple[str, Word], ...]  # VAR=value before the command
    environment: Mapping[str, Variable]  # exported variables at this point
    variables: Mapping[str, Variable]  # every variable at this point
    redirects: tuple[Redirect, ...]
    background: bool  # ends with `&`
    position: Position
    source: str  # as written
    next_commands: tuple[str, ...] = ()  # the names of the commands that follow (readiness loops)
    # where a backslash at the end of the line escapes a blank or a carriage return instead of
    # the newline: the command ends there (the lines that follow are commands of their own)
    broken: ContinuationBreak | None = None
    piped_to: tuple[str, ...] = ()  # the programs its output goes to (`| tee log`)

    @property
    def name(self) -> str | None:
        return self.words[0].text if self.words else None


@dataclass(frozen=True)
class Default:
    """``${NAME:-value}`` where the script never sets NAME: the script's default was taken."""

    name: str
    position: Position
    value: str  # as written


@dataclass(frozen=True)
class Choice:
    """A variable a condition decides (``if``, ``case``, ``&&``/``||``): ``taken`` when the
    script sets it only in some arms, to one value (taken, like a ``${NAME:-value}`` default);
    None when the arms leave it different (not guessed: a placeholder until --set gives it)."""

    name: str
    position: Position  # the condition
    values: tuple[str, ...]  # each arm's, as shown ("unset" for an arm that leaves it unset)
    taken: str | None


@dataclass(frozen=True)
class Script:
    commands: tuple[Command, ...]
    variables: Mapping[str, Variable]  # at the end
    errors: tuple[Position, ...]  # where bash would find a syntax error
    defaults: tuple[Default, ...] = ()
    choices: tuple[Choice, ...] = ()
    # the run's work so far (shared by every script of one import), not part of the value
    budget: WorkBudget = field(default_factory=WorkBudget, compare=False, repr=False)


def parse_script(
    text: str, *, given: Mapping[str, str] | None = None, budget: WorkBudget | None = None
) -> Script:
    """Walk ``text`` as bash would; ``given`` are variables known beforehand (``--set``)."""
    walker = _Walker(text, Position(1, 1), given or {}, budget=budget or WorkBudget())
    walker.walk_program()
    return walker.script()


def parse_nested(
    text: str,
    origin: Position,
    variables: Mapping[str, Variable],
    depth: int,
    budget: WorkBudget | None = None,
) -> Script:
    """A script inside a script (``ssh host '...'``, ``bash -c '...'``, a heredoc body);
    ``depth`` counts the scripts around it."""
    budget = budget or WorkBudget()
    budget.check("script-depth", depth, origin)
    walker = _Walker(text, origin, {}, budget=budget, nesting=depth * _WALKER_NESTING)
    walker.variables.update(variables)
    walker.walk_program()
    return walker.script()


def expand_keeping_lines(
    source: str,
    variables: Mapping[str, Variable],
    position: Position,
    budget: WorkBudget | None = None,
) -> Word | None:
    """A double-quoted word expanded again with its backslash-newlines kept: the same text
    to a shell that reads it (a continuation), with the lines where the script has them, so
    that what is found in it is located (``ssh host "...\\<newline>..."``)."""
    walker = _Walker(f"__orch={source}", position, {}, budget=budget or WorkBudget())
    walker.variables = dict(variables)
    walker.keep_continuations = True
    assignment = next(iter(descendants(walker.tree.root_node, "variable_assignment")), None)
    value = assignment.child_by_field_name("value") if assignment is not None else None
    return walker.expand_single(value, position) if value is not None else None


def literal(text: str, position: Position) -> Word:
    return Word((text,), position, text)


# -- the walk -----------------------------------------------------------------------------------


_ANSI_ESCAPES = {
    "a": "\a", "b": "\b", "e": "\x1b", "E": "\x1b", "f": "\f", "n": "\n", "r": "\r",
    "t": "\t", "v": "\v", "\\": "\\", "'": "'", '"': '"', "?": "?",
}  # fmt: skip
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\\n')


_IFS = " \t\n"
_IFS_RE = re.compile(f"[{_IFS}]+")


class _Fields:
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


class _Walker:
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
        # name -> (body, the byte where that body's tree stops being read: error recovery)
        self.functions: dict[str, tuple[Any, int | None]] = {}
        self.called: set[str] = set()
        self.calling: list[str] = []  # the functions being walked, outermost first
        self.locals: list[dict[str, Variable | None]] = []  # per call: `local` names' old values
        self.commands: list[Command] = []
        self.errors: list[Position] = []
        self.defaults: list[Default] = []
        self.choices: list[Choice] = []
        self.given = frozenset(given)
        self.keep_continuations = False  # a heredoc body keeps its line breaks for positions
        self.positionals: tuple[Word, ...] | None = None  # None: the script's own, unknown
        self.piped_to: tuple[str, ...] = ()  # the programs the pipeline being walked feeds
        self.brace_words = 1  # words the brace expansions around this word already make
        self.stop: int | None = None  # bytes from here on belong to the next re-read tree
        self.columns = Columns(self.source)
        # what a parse costs grows with the words written: bounded before parsing
        budget.check("source-words", len(self.source.split()), origin)
        budget.spend("parsed", len(self.source), origin)
        # a carriage return, a blank after a backslash: read as bash reads them (_as_bash_reads)
        self.readable, self.tree = readable(_as_bash_reads(self.source))

    def child(self, text: str, position: Position) -> _Walker:
        """A walker for a word of this script (a default value, a brace variant, a heredoc
        body): this script's variables, arguments and budget."""
        nested = _Walker(
            text, position, {}, budget=self.budget, nesting=self.nesting + _WALKER_NESTING
        )
        nested.variables = self.variables
        nested.positionals = self.positionals
        nested.defaults = self.defaults
        return nested

    def script(self) -> Script:
        return Script(
            tuple(self.commands),
            dict(self.variables),
            tuple(sorted(set(self.errors), key=lambda p: (p.line, p.column))),
            tuple(self.defaults),
            tuple(self.choices),
            self.budget,
        )

    # positions and text

    def at(self, node: Any) -> Position:
        row, column = node.start_point  # column in bytes: count characters
        return self.origin.shifted(row, self.columns.characters(node.start_byte, column))

    def text(self, node: Any) -> str:
        return self.source[node.start_byte : node.end_byte].decode("utf-8", "surrogateescape")

    # statements

    def walk_program(self) -> None:
        """The statements in order. Where tree-sitter-bash finds an error, the statements
        before it are walked, the error is said (where bash -n would say it), and the rest of
        the file is read again from the line after it: one error never hides the rest."""
        tree = self.tree
        for _ in range(MAX_RECOVERIES):
            self.stop = None
            error = first_error(tree.root_node)
            if error is not None:
                self.syntax_error(error)
            self.walk_children(tree.root_node)  # (may find an error tree-sitter did not)
            restart = self.restart()
            if restart is None or restart >= len(self.readable):
                break
            self.budget.spend("parsed", len(self.readable) - restart, self.origin)
            tree = parser().parse(blanked(self.readable, restart))
        self.stop = None
        for name, (node, stop) in list(self.functions.items()):
            if name not in self.called:  # a launch in a function nobody calls is still found
                self.call_function(name, node, stop, None, self.origin)

    def restart(self) -> int | None:
        """Where the file is read again after a syntax error (None: it was read to the end)."""
        return self.stop

    def syntax_error(self, node: Any) -> None:
        """Where bash -n would stop: said, and the file is read again from the next line."""
        self.errors.append(self.at(node))
        end = self.readable.find(b"\n", node.start_byte)
        restart = end + 1 if end >= 0 else len(self.readable)
        if self.stop is None or restart < self.stop:
            self.stop = restart

    def walk_children(self, node: Any) -> None:
        children = list(node.children)
        for index, child in enumerate(children):
            background = index + 1 < len(children) and children[index + 1].type == "&"
            following = [n for c in children[index + 1 : index + 4] for n in self.first_words(c)]
            self.walk(child, background, tuple(following))

    def first_words(self, node: Any) -> tuple[str, ...]:
        """The program of the first command in ``node`` and its plain words (what `ssh host
        grep ...` runs is a program too)."""
        for child in descendants(node, including=True):
            if child.type == "command":
                return tuple(
                    self.text(c) for c in child.children if c.type in ("command_name", "word")
                )
        return ()

    def walk(self, node: Any, background: bool = False, following: tuple[str, ...] = ()) -> None:
        if self.stop is not None and node.start_byte >= self.stop:
            return  # read again, in the next tree
        kind = node.type
        if kind == "comment" or not node.is_named:
            return
        self.nesting += 1
        try:
            self.budget.check("nesting", self.nesting, self.at(node))
            self.statement(node, kind, background, following)
        finally:
            self.nesting -= 1

    def statement(self, node: Any, kind: str, background: bool, following: tuple[str, ...]) -> None:
        if kind == "command":
            self.command(node, (), background, following)
        elif kind == "redirected_statement":
            self.redirected(node, background, following)
        elif kind == "variable_assignment":
            self.assign(node, exported=None)
        elif kind == "variable_assignments":
            for child in node.named_children:
                self.assign(child, exported=None)
        elif kind == "declaration_command":
            self.declaration(node)
        elif kind == "unset_command":
            for child in node.named_children[0:]:
                self.variables.pop(self.text(child), None)
        elif kind == "function_definition":
            name = node.child_by_field_name("name")
            body = node.child_by_field_name("body")
            if name is not None and body is not None:
                self.functions[self.text(name)] = (body, self.stop)
        elif kind == "for_statement":
            self.for_loop(node)
        elif kind == "c_style_for_statement":
            self.c_style_loop(node)
        elif kind == "if_statement":
            self.if_statement(node)
        elif kind == "case_statement":
            self.case_statement(node)
        elif kind == "list":
            self.and_or(node, background, following)
        elif kind == "pipeline":
            self.pipeline(node, background)
        elif kind in ("subshell", "compound_statement", "program", "do_group",
                      "while_statement", "negated_command", "ERROR"):  # fmt: skip
            # (an ERROR node holds what tree-sitter-bash could read of a broken statement)
            self.walk_children(node)
        # test_command, arithmetic: nothing launches there

    def pipeline(self, node: Any, background: bool) -> None:
        """``a | b | c &``: every command of it runs in the background with it, and each
        knows the programs its output goes to (``nohup server | tee log``)."""
        children = list(node.children)
        stages = [c for c in children if c.is_named and c.type != "comment"]
        for index, child in enumerate(children):
            if not child.is_named or child.type == "comment":
                continue
            following = [n for c in children[index + 1 : index + 4] for n in self.first_words(c)]
            later = stages[stages.index(child) + 1 :]
            saved, self.piped_to = (
                self.piped_to,
                tuple(name for stage in later for name in self.first_words(stage)[:1]),
            )
            try:
                self.walk(child, background, tuple(following))
            finally:
                self.piped_to = saved

    # conditions: not evaluated. Every arm is walked (a launch in any of them is found), each
    # from the same variables; what the arms leave different is not guessed (Choice).

    def if_statement(self, node: Any) -> None:
        arms: list[list[Any]] = [[]]
        complete = False
        state = "condition"
        for child in node.children:
            if child.type == "then":
                state = "arm"
            elif child.type in ("elif_clause", "else_clause"):
                parts = list(child.children)
                if child.type == "else_clause":
                    complete = True
                    arms.append(parts[1:])
                    continue
                then = next((i for i, c in enumerate(parts) if c.type == "then"), len(parts))
                for condition in parts[1:then]:  # an elif's condition runs when reached
                    self.walk(condition)
                arms.append(parts[then + 1 :])
            elif state == "condition" and child.type not in ("if", ";"):
                self.walk(child)
            elif state == "arm" and child.type != "fi":
                arms[0].append(child)
        self.arms(node, arms, complete)

    def case_statement(self, node: Any) -> None:
        arms: list[list[Any]] = []
        complete = False
        for item in node.children:
            if item.type != "case_item":
                continue
            patterns = [
                c for i, c in enumerate(item.children) if item.field_name_for_child(i) == "value"
            ]
            complete = complete or any(self.text(p) == "*" for p in patterns)
            arms.append(
                [
                    c
                    for i, c in enumerate(item.children)
                    if c.is_named and item.field_name_for_child(i) not in ("value", "termination")
                ]
            )
        self.arms(node, arms, complete)

    def and_or(self, node: Any, background: bool, following: tuple[str, ...]) -> None:
        """``a && b``, ``a || b``: b runs only sometimes."""
        children = list(node.children)
        if len(children) != 3 or children[1].type not in ("&&", "||"):
            self.walk_children(node)
            return
        left, _, right = children
        self.walk(left, False, self.first_words(right))
        self.arms(node, [[right]], complete=False, background=background, following=following)

    def arms(
        self,
        node: Any,
        arms: list[list[Any]],
        complete: bool,
        background: bool = False,
        following: tuple[str, ...] = (),
    ) -> None:
        before = dict(self.variables)
        outcomes: list[dict[str, Variable]] = []
        for arm in arms:
            self.variables = dict(before)
            for index, child in enumerate(arm):
                last = index + 1 == len(arm)
                ahead = tuple(n for c in arm[index + 1 : index + 4] for n in self.first_words(c))
                self.walk(child, background and last, following if last else ahead)
            outcomes.append(self.variables)
        if not complete:
            outcomes.append(before)
        self.variables = self.settle(before, outcomes, self.at(node))

    def settle(
        self, before: dict[str, Variable], outcomes: list[dict[str, Variable]], where: Position
    ) -> dict[str, Variable]:
        settled: dict[str, Variable] = {}
        for name in dict.fromkeys(n for outcome in outcomes for n in outcome):
            values = [outcome.get(name) for outcome in outcomes]
            if all(_same(v, values[0]) for v in values):
                if values[0] is not None:
                    settled[name] = values[0]
                continue
            if name in self.given:  # --set settles it
                settled[name] = before[name]
                continue
            shown = tuple(
                dict.fromkeys(
                    "unset" if v is None or v.value is None else repr(v.value.shown())
                    for v in values
                )
            )
            assigned = [v for v in values if v is not None]
            prefix = _common_elements(values)
            if prefix:  # an array the arms extend differently: the elements all arms share
                unknown = Word((Unresolved("variable", f"{name}[@]", where),), where,
                               f"${{{name}[@]}}")  # fmt: skip
                settled[name] = Variable(
                    prefix[0], any(v.exported for v in assigned), where, (*prefix, unknown)
                )
                self.choices.append(Choice(name, where, shown, None))
                continue
            if name not in before and all(_same(v, assigned[0]) for v in assigned):
                settled[name] = assigned[0]
                value = assigned[0].value
                self.choices.append(
                    Choice(name, where, shown, value.shown() if value is not None else "")
                )
                continue
            settled[name] = Variable(
                Word((Unresolved("variable", name, where),), where, f"${{{name}}}"),
                any(v.exported for v in assigned),
                where,
            )
            self.choices.append(Choice(name, where, shown, None))
        return settled

    def redirected(self, node: Any, background: bool, following: tuple[str, ...]) -> None:
        body = node.child_by_field_name("body")
        redirects = tuple(
            self.redirect(child) for child in node.children if child.type.endswith("redirect")
        )
        after = tuple(
            word
            for child in node.children
            if child.type.endswith("redirect")
            for word in self.redirect_arguments(child)
        )
        if body is not None and body.type == "command":
            self.command(body, redirects, background, following, statement=node, after=after)
        elif body is not None and body.type in ("list", "pipeline") and redirects:
            # tree-sitter-bash hangs `a && b > log` on the list; bash binds it to b
            *first, last = list(body.children)
            for child in first:
                self.walk(child)
            if last.type == "command":
                self.command(last, redirects, background, following, statement=node, after=after)
            else:
                self.walk(last, background, following)
        elif body is not None:
            self.walk(body, background, following)

    def for_loop(self, node: Any) -> None:
        variable = node.child_by_field_name("variable")
        body = node.child_by_field_name("body")
        values = list(node.children_by_field_name("value"))
        if variable is None or body is None:
            return
        name = self.text(variable)
        words = [w for value in values for w in self.expand(value)]
        if not values or len(words) > MAX_UNROLL or any(w.text is None for w in words):
            self.variables[name] = Variable(None, False, self.at(variable))
            self.iteration(body)
            return
        for word in words:
            self.variables[name] = Variable(word, False, self.at(variable))
            self.iteration(body)

    def iteration(self, body: Any) -> None:
        """One walk of a loop's body: every loop, nested ones multiplied, shares one bound."""
        self.budget.spend("iterations", 1, self.at(body))
        self.walk(body)

    def c_style_loop(self, node: Any) -> None:
        """``for ((i = 0; i < n; i++))``: unrolled when every value it reads is a number the
        script sets and it ends within MAX_UNROLL iterations; else its body is walked once
        with what the loop assigns unknown."""
        body = node.child_by_field_name("body")
        if body is None:
            return
        text = self.text(node)
        opening, closing = text.find("(("), text.find("))")
        clauses = text[opening + 2 : closing].split(";") if 0 <= opening < closing else []
        if len(clauses) != 3:
            return
        initializer, condition, update = (clause.strip() for clause in clauses)
        at = self.at(node)
        count = self.loop_count(initializer, condition, update)
        if count is not None:
            try:
                if initializer:
                    self.arithmetic_assign(initializer, at)
                for _ in range(count):
                    if condition and not self.arithmetic_value(condition):
                        return  # the body moved the loop on itself
                    self.iteration(body)
                    if update:
                        self.arithmetic_assign(update, at)
                return
            except NotKnown:
                pass  # the body made a loop variable unknown: from here on, unknown
        for name in assigned_names(";".join(clauses)):
            self.variables[name] = Variable(None, False, at)
        self.iteration(body)

    def loop_count(self, initializer: str, condition: str, update: str) -> int | None:
        """How many times the loop runs if its body leaves its variables alone; None when a
        value is unknown or the loop runs more than MAX_UNROLL times."""
        state: dict[str, int] = {}

        def lookup(name: str) -> int | None:
            return state[name] if name in state else self.integer(name)

        try:
            if initializer:
                state.update(run_arithmetic(initializer, lookup)[1])
            for count in range(MAX_UNROLL + 1):
                if condition and not run_arithmetic(condition, lookup)[0]:
                    return count
                if not update:
                    return None  # nothing changes: it runs until the body breaks out
                state.update(run_arithmetic(update, lookup)[1])
        except NotKnown:
            return None
        return None

    def arithmetic_value(self, expression: str) -> int:
        value, _ = run_arithmetic(expression, self.integer)
        return value

    def arithmetic_assign(self, expression: str, at: Position) -> None:
        _, assigned = run_arithmetic(expression, self.integer)
        for name, value in assigned.items():
            self.variables[name] = Variable(literal(str(value), at), self.is_exported(name), at)

    def integer(self, name: str) -> int | None:
        """A variable's value as arithmetic reads it, when the script makes it a number."""
        variable = self.variables.get(name)
        text = variable.value.text if variable is not None and variable.value else None
        if text is None or not re.fullmatch(r"\s*-?\d+\s*", text):
            return None
        return int(text)

    def call_function(
        self,
        name: str,
        body: Any,
        stop: int | None,
        arguments: tuple[Word, ...] | None,
        at: Position,
    ) -> None:
        if name in self.calling:
            return  # a function calling itself: its launches are found the first time
        self.called.add(name)
        self.budget.spend("calls", 1, at)
        self.budget.check("call-depth", len(self.calling) + 1, at)
        saved = self.positionals, self.stop
        self.positionals, self.stop = arguments, stop
        self.calling.append(name)
        self.locals.append({})
        try:
            self.walk(body)
        finally:
            for local, old in self.locals.pop().items():  # `local` names are the caller's again
                if old is None:
                    self.variables.pop(local, None)
                else:
                    self.variables[local] = old
            self.calling.pop()
            self.positionals, self.stop = saved

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

    def is_exported(self, name: str) -> bool:
        variable = self.variables.get(name)
        return variable is not None and variable.exported

    def declaration(self, node: Any) -> None:
        keyword = self.text(node.children[0])
        flags = [
            self.text(c)
            for c in node.named_children
            if c.type == "word" and self.text(c).startswith("-")
        ]
        exported = keyword == "export" or any("x" in flag for flag in flags)
        children, glued = _unglue(list(node.named_children))
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

    def command(
        self,
        node: Any,
        redirects: tuple[Redirect, ...],
        background: bool,
        following: tuple[str, ...],
        statement: Any = None,
        after: tuple[Word, ...] = (),
    ) -> None:
        prefix: list[tuple[str, Word]] = []
        words: list[Word] = []
        extra: list[Redirect] = []
        name_node = node.child_by_field_name("name")
        if name_node is not None and self.text(name_node) in _RESERVED_WORDS:
            self.syntax_error(name_node)  # tree-sitter-bash reads a stray `fi` as a command
        children, glued = _unglue(list(node.children))
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
            return
        environment = {n: v for n, v in self.variables.items() if v.exported}
        for name, value in prefix:
            environment[name] = Variable(value, True, value.position)
        command = Command(
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
        program = command.name
        if program in self.functions:
            body, stop = self.functions[program]
            self.call_function(program, body, stop, tuple(words[1:]), command.position)
            return
        if program in (".", "source"):
            return  # another file: not followed (its variables stay unknown)
        self.commands.append(command)

    def continuation_break(self, node: Any) -> ContinuationBreak | None:
        """A statement that ends in a backslash escaping a blank or a carriage return, with
        nothing but blanks (or a comment) after it on the line: bash ends the command there."""
        match = _BROKEN_END_RE.search(self.source[node.start_byte : node.end_byte])
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
        pieces = [c for c in node.named_children if c.type in _WORD_PIECES]
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
            prefix + _as_double_quoted(text) + '"', position.shifted(0, -len(prefix))
        )
        nested.keep_continuations = True
        string = next(iter(descendants(nested.tree.root_node, "string")), None)
        if string is None:
            return Heredoc(delimiter, False, text, literal(text, position), position, ())
        fields = _Fields()
        nested.expand_into(string, fields, quoted=True)
        expansions: list[Unresolved | tuple[str, Position, str]] = []
        for child in string.named_children:
            if child.type == "string_content":
                continue
            one = _Fields()
            nested.expand_into(child, one, quoted=True)
            parts = [p for f in one.fields for p in f]
            expansions.extend(p for p in parts if isinstance(p, Unresolved))
            if all(isinstance(p, str) for p in parts):
                value = "".join(p for p in parts if isinstance(p, str))
                expansions.append((nested.text(child), nested.at(child), value))
        word = Word(tuple(_merge([p for f in fields.fields for p in f])), position, text)
        return Heredoc(delimiter, False, text, word, position, tuple(expansions))

    # word expansion

    def expand_single(self, node: Any, position: Position, glued: tuple[Any, ...] = ()) -> Word:
        """An assignment's value: expanded but never split."""
        fields = _Fields()
        self.expand_glued(node, glued, fields, quoted=True)
        parts = _merge([p for f in fields.fields for p in f])
        self.charge(1, parts, position)
        return Word(tuple(parts) or ("",), position, self.text_through(node, glued))

    def charge(self, words: int, parts: list[Part], position: Position) -> None:
        """Expanded words and their characters, against the run's budget."""
        self.budget.spend("words", words, position)
        self.budget.spend(
            "characters", sum(len(p) if isinstance(p, str) else 1 for p in parts), position
        )

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
                    self.source[node.start_byte : start] + value.encode() +
                    self.source[end : finish]
                ).decode("utf-8", "surrogateescape")  # fmt: skip
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
        fields = _Fields()
        self.expand_glued(node, glued, fields, quoted=False)
        words = [
            Word(tuple(_merge(list(w.parts))), w.position, w.source)
            for w in fields.words(self.at(node), self.text_through(node, glued))
        ]
        if words:
            self.charge(len(words), [p for w in words for p in w.parts], words[0].position)
        return words

    def expand_variant(self, text: str, position: Position) -> list[Word]:
        """A word's text after brace expansion, expanded as a word here."""
        nested = self.child(f": {text}\n", position)
        nested.brace_words = self.brace_words
        nested.walk_program()
        if not nested.commands:
            return []
        return [
            dataclasses.replace(word, position=position) for word in nested.commands[0].words[1:]
        ]

    def text_through(self, node: Any, glued: tuple[Any, ...]) -> str:
        end = glued[-1].end_byte if glued else node.end_byte
        return self.source[node.start_byte : end].decode("utf-8", "surrogateescape")

    def expand_glued(
        self, node: Any, glued: tuple[Any, ...], fields: _Fields, *, quoted: bool
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

    def expand_after_dollar(self, node: Any, fields: _Fields, *, quoted: bool) -> None:
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
        fields.add(rest if quoted else _unescape_word(rest))

    def expand_into(self, node: Any, fields: _Fields, *, quoted: bool) -> None:
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
            fields.add(text if quoted else _unescape_word(text))
        elif kind == "raw_string":
            fields.quoted = True
            fields.add(text[1:-1])
        elif kind == "ansi_c_string":
            fields.quoted = True
            fields.add(_ansi_c(text[2:-1]))
        elif kind in ("string", "translated_string"):
            fields.quoted = True
            self.expand_string(node, fields)
        elif kind == "string_content":
            fields.add(_unescape_double(text, self.keep_continuations))
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

    def expand_string(self, node: Any, fields: _Fields) -> None:
        start = node.start_byte + (2 if node.type == "translated_string" else 1)
        end = node.end_byte - 1
        cursor = start
        for child in node.named_children:
            if child.start_byte > cursor:
                gap = self.source[cursor : child.start_byte].decode("utf-8", "surrogateescape")
                fields.add(_unescape_double(gap, self.keep_continuations))
            if child.type == "string_content":
                fields.add(_unescape_double(self.text(child), self.keep_continuations))
            else:
                self.expand_into(child, fields, quoted=True)
            cursor = max(cursor, child.end_byte)
        if end > cursor:
            rest = self.source[cursor:end].decode("utf-8", "surrogateescape")
            fields.add(_unescape_double(rest, self.keep_continuations))

    def lookup(self, name: str, node: Any) -> str | None:
        variable = self.variables.get(name)
        if variable is None or variable.value is None:
            return None
        return variable.value.text

    def expand_parameter(self, node: Any, fields: _Fields, *, quoted: bool) -> None:
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

    def known_unset(self, name: str) -> bool:
        """Only the script's own positional parameters inside a called function are known absent."""
        if name.isdigit() and self.positionals is not None:
            return int(name) > len(self.positionals)
        return False

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


_EXPANSION_RE = re.compile(
    r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(?:\[(?P<index>[^]]*)\])?"
    r"(?:(?P<op>:-|-|:=|=|:\+|\+|:\?|\?|#|##|%|%%|/|//|:|\^|,)(?P<arg>.*))?\}",
    re.DOTALL,
)


_WORD_PIECES = frozenset({
    "word", "concatenation", "string", "raw_string", "ansi_c_string", "translated_string",
    "simple_expansion", "expansion", "command_substitution", "arithmetic_expansion", "number",
    "brace_expression",
})  # fmt: skip


# bash's reserved words that can only close or continue a compound command
_RESERVED_WORDS = frozenset({"then", "else", "elif", "fi", "do", "done", "esac", "in", "}"})
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


def _common_elements(values: list[Variable | None]) -> tuple[Word, ...]:
    """The first elements every outcome's array has alike (``ARGS+=(...)`` in some arms)."""
    arrays = [v.elements for v in values if v is not None]
    if len(arrays) != len(values) or any(a is None for a in arrays):
        return ()
    shortest = min(len(a) for a in arrays if a is not None)
    prefix: list[Word] = []
    for index in range(shortest):
        first = arrays[0][index]  # type: ignore[index]
        if any(a[index].parts != first.parts for a in arrays):  # type: ignore[index]
            break
        prefix.append(first)
    return tuple(prefix)


def _same(a: Variable | None, b: Variable | None) -> bool:
    if a is None or b is None:
        return a is b
    return (
        a.exported == b.exported
        and (a.value.parts if a.value else None) == (b.value.parts if b.value else None)
        and [w.parts for w in a.elements or ()] == [w.parts for w in b.elements or ()]
    )


def _unglue(children: list[Any]) -> tuple[list[Any], dict[int, tuple[Any, ...]]]:
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
                and (last.type in _WORD_PIECES or head.type == "command_name")
                and piece.type in _WORD_PIECES
                and child.start_byte == last.end_byte
            ):
                glued[head.id] = (*glued.get(head.id, ()), piece)
                last = piece
                continue
        out.append(child)
    return out, glued


# Bytes that stand in, for the parser only, for what tree-sitter-bash reads differently from bash.
_STAND_INS = tuple(bytes([b]) for b in (*range(1, 9), *range(14, 32)))
_BROKEN_END_RE = re.compile(rb"(?<!\\)(?:\\\\)*(\\)([ \t\r])$")
_LINE_END_RE = re.compile(rb"[ \t]*(?:#[^\n]*)?(?:\n|$)")
_ESCAPED_BLANK_RE = re.compile(rb"(?<!\\)((?:\\\\)*\\)[ \t]")


def _as_bash_reads(source: bytes) -> bytes:
    """The text the parser is given: ``source`` with a carriage return, and a blank after a
    backslash, replaced by a byte of the same length that it reads as part of a word.

    tree-sitter-bash reads ``\\r`` as a blank and drops a backslash-escaped blank that starts a
    word; bash reads both as characters of the word (``--port 30000\\r`` passes ``30000\\r``,
    ``\\<space>`` at the end of a line passes ``' '`` and ends the command: the broken
    continuation of a CRLF file, or of a stray blank after the backslash). Every position and
    every slice of the real text stay as they are: only the parser sees the stand-in."""
    if b"\r" not in source and not _ESCAPED_BLANK_RE.search(source):
        return source
    stand_in = next((b for b in _STAND_INS if b not in source), None)
    if stand_in is None:  # every control byte used: a binary file, not a launch script
        return source
    text = source.replace(b"\r", stand_in)
    return _ESCAPED_BLANK_RE.sub(lambda m: m.group(1) + stand_in, text)


def _merge(parts: list[Part]) -> list[Part]:
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return out


def _unescape_word(text: str) -> str:
    """Unquoted text: a backslash quotes the next character; backslash-newline is removed."""
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            if text[index + 1] != "\n":
                out.append(text[index + 1])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _unescape_double(text: str, keep_continuations: bool = False) -> str:
    """Inside double quotes a backslash quotes only ``$ ` " \\`` and newline."""
    if "\\" not in text:
        return text
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] in _DOUBLE_QUOTE_ESCAPES:
            if text[index + 1] == "\n" and keep_continuations:
                out.append("\\\n")  # the host's shell joins the lines the same way
            elif text[index + 1] != "\n":
                out.append(text[index + 1])
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _as_double_quoted(body: str) -> str:
    """A heredoc body as the inside of a double-quoted string with the same expansion: only
    `"` differs (plain in a heredoc), so it is escaped, and ``\\"`` (kept whole) doubled."""
    out: list[str] = []
    index = 0
    while index < len(body):
        char = body[index]
        if char == "\\" and index + 1 < len(body):
            pair = body[index : index + 2]
            out.append('\\\\\\"' if pair == '\\"' else pair)
            index += 2
            continue
        out.append('\\"' if char == '"' else char)
        index += 1
    return "".join(out)


def _ansi_c(text: str) -> str:
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char != "\\" or index + 1 >= len(text):
            out.append(char)
            index += 1
            continue
        code = text[index + 1]
        if code in _ANSI_ESCAPES:
            out.append(_ANSI_ESCAPES[code])
            index += 2
        elif code == "x" and (match := re.match(r"[0-9A-Fa-f]{1,2}", text[index + 2 :])):
            out.append(chr(int(match.group(), 16)))
            index += 2 + len(match.group())
        elif code in "uU" and (match := re.match(r"[0-9A-Fa-f]{1,8}", text[index + 2 :])):
            out.append(chr(int(match.group()[: 4 if code == "u" else 8], 16)))
            index += 2 + len(match.group()[: 4 if code == "u" else 8])
        elif code in "01234567" and (match := re.match(r"[0-7]{1,3}", text[index + 1 :])):
            out.append(chr(int(match.group(), 8)))
            index += 1 + len(match.group())
        else:
            out.append(char + code)
            index += 2
    return "".join(out)
