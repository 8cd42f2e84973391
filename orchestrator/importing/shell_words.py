"""What the bash reader gives: positions, words after expansion, variables, redirections and
the commands they make.

``shell_script`` builds these values while it walks a script the way bash would;
``launches``, ``breaks``, ``script_secrets`` and ``--check`` read them. A word keeps what the
script does not determine as an ``Unresolved`` part (``$MODEL``, ``$(hostname)``): never
guessed, shown as written.

Pure values: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from orchestrator.importing.budget import WorkBudget


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

    def without_first(self, count: int) -> Word:
        """The word without its first ``count`` characters (``--env=A=b`` -> ``A=b``)."""
        parts: list[Part] = []
        for part in self.parts:
            if count and isinstance(part, str):
                taken = min(count, len(part))
                part, count = part[taken:], count - taken
                if not part:
                    continue
            parts.append(part)
        return Word(tuple(parts), self.position, self.source)


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


def literal(text: str, position: Position) -> Word:
    """A word that is only text (a value given with ``--set``, a brace variant)."""
    return Word((text,), position, text)


def merge_parts(parts: list[Part]) -> list[Part]:
    """Adjacent text parts joined, empty ones dropped: the parts of one word as it is kept."""
    out: list[Part] = []
    for part in parts:
        if isinstance(part, str) and out and isinstance(out[-1], str):
            out[-1] += part
        elif part != "":
            out.append(part)
    return out
