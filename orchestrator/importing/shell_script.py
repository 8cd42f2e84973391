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

The reader, bottom up: ``shell_words`` (the values: Word, Variable, Command, Script),
``shell_syntax`` (tree-sitter-bash, read as bash reads the text), ``shell_quoting`` and
``shell_arith`` (quote removal, arithmetic), ``shell_expansion`` (a word -> the words bash
passes), ``shell_commands`` (a simple command, its assignments and redirections),
``shell_conditions`` (what the arms of a condition leave), and here the statements: lists,
pipelines, ``if``/``case``, loops and functions, and the entry points.

Pure: no I/O. tree-sitter is imported lazily (``orch render`` does not pay for it).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_arith import NotKnown, assigned_names, loop_count
from orchestrator.importing.shell_commands import CommandReader
from orchestrator.importing.shell_conditions import settle
from orchestrator.importing.shell_expansion import WALKER_NESTING
from orchestrator.importing.shell_syntax import (
    MAX_RECOVERIES,
    blanked,
    descendants,
    first_error,
    parser,
)
from orchestrator.importing.shell_words import (
    Choice,
    Command,
    Position,
    Redirect,
    Script,
    Variable,
    Word,
)

MAX_UNROLL = 64  # loop iterations walked per `for` statement (more: walked once, unknown)


def parse_script(
    text: str, *, given: Mapping[str, str] | None = None, budget: WorkBudget | None = None
) -> Script:
    """Walk ``text`` as bash would; ``given`` are variables known beforehand (``--set``)."""
    walker = Walker(text, Position(1, 1), given or {}, budget=budget or WorkBudget())
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
    walker = Walker(text, origin, {}, budget=budget, nesting=depth * WALKER_NESTING)
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
    walker = Walker(f"__orch={source}", position, {}, budget=budget or WorkBudget())
    walker.variables = dict(variables)
    walker.keep_continuations = True
    assignment = next(iter(descendants(walker.tree.root_node, "variable_assignment")), None)
    value = assignment.child_by_field_name("value") if assignment is not None else None
    return walker.expand_single(value, position) if value is not None else None


class Walker(CommandReader):
    """The statements of one script in order, as bash would run them."""

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
        self.given = frozenset(given)
        # name -> (body, the byte where that body's tree stops being read: error recovery)
        self.functions: dict[str, tuple[Any, int | None]] = {}
        self.called: set[str] = set()
        self.calling: list[str] = []  # the functions being walked, outermost first
        self.commands: list[Command] = []
        self.choices: list[Choice] = []

    def child(self, text: str, position: Position) -> Walker:
        nested = Walker(
            text, position, {}, budget=self.budget, nesting=self.nesting + WALKER_NESTING
        )
        nested.variables = self.variables
        nested.positionals = self.positionals
        nested.defaults = self.defaults
        return nested

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

    def script(self) -> Script:
        return Script(
            tuple(self.commands),
            dict(self.variables),
            tuple(sorted(set(self.errors), key=lambda p: (p.line, p.column))),
            tuple(self.defaults),
            tuple(self.choices),
            self.budget,
        )

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
        elif kind in (
            "subshell",
            "compound_statement",
            "program",
            "do_group",
            "while_statement",
            "negated_command",
            "ERROR",
        ):
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

    def command(
        self,
        node: Any,
        redirects: tuple[Redirect, ...],
        background: bool,
        following: tuple[str, ...],
        statement: Any = None,
        after: tuple[Word, ...] = (),
    ) -> None:
        """A simple command: a function's body walked where it is called, the others kept."""
        command = self.simple_command(node, redirects, background, following, statement, after)
        if command is None:
            return
        program = command.name
        if program in self.functions:
            body, stop = self.functions[program]
            self.call_function(program, body, stop, command.words[1:], command.position)
            return
        if program in (".", "source"):
            return  # another file: not followed (its variables stay unknown)
        self.commands.append(command)

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
        self.variables, choices = settle(before, outcomes, self.at(node), self.given)
        self.choices.extend(choices)

    # loops and functions

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
        count = loop_count(initializer, condition, update, self.integer, MAX_UNROLL)
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
