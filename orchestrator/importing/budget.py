"""The work one ``orch import`` / ``orch import --check`` may do, in total.

A launch script is untrusted input that orch *reads as bash would*, so a few hundred bytes can
ask for unbounded work: ``A=$A$A`` forty times is a terabyte, nested loops multiply their
iterations, functions that call functions ten times over fifteen levels are 10^15 calls, a
brace product ``{1..1000}{1..1000}{1..1000}`` is a billion words. Every such multiplication is
charged here, to one budget shared by every script, nested script (``ssh``, ``bash -c``,
heredocs) and re-parse of one run; the first bound passed stops the import with an
``ImportBoundError`` that names the bound, where it was hit and what to do.

The limits are far above what a real launch script needs (the public corpus under
tests/fixtures/launchscripts/ uses at most about 3 % of any) and far below what hurts a laptop.

Pure: no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from orchestrator.errors import ImportBoundError


class Located(Protocol):
    """A 1-based place in the file the user gave (``shell_words.Position``)."""

    @property
    def line(self) -> int: ...

    @property
    def column(self) -> int: ...


@dataclass(frozen=True)
class Bound:
    limit: int
    what: str  # "expanded words", said in the error
    hint: str


# name -> the bound. Cumulative bounds add up over the whole run; the others are a size at one
# place (a call depth, a nesting depth, one brace product).
BOUNDS: dict[str, Bound] = {
    "words": Bound(
        50_000,
        "expanded words",
        "a launch script expands to a few thousand words at most: import the script that "
        "starts the server, not a generated one",
    ),
    "source-words": Bound(
        200_000,
        "words in one script as written",
        "a launch script is a few thousand words: import the script that starts the server",
    ),
    "characters": Bound(
        32 << 20,
        "characters of expanded words and values",
        "a variable that doubles itself (A=$A$A) or a huge value: not a launch script",
    ),
    "iterations": Bound(
        1_024,
        "loop iterations (every loop, nested loops multiplied)",
        "a launch script loops over a few hosts or GPUs: import the script that starts the "
        "servers you run",
    ),
    "calls": Bound(
        1_024,
        "function calls",
        "functions that call functions this often are not a launch script: import the script "
        "that starts the servers you run",
    ),
    "call-depth": Bound(
        32,
        "nested function calls",
        "a chain of functions this deep is not a launch script: import the innermost one",
    ),
    "brace-words": Bound(
        4_096,
        "words one brace expansion makes ({1..N}{1..M} multiplies)",
        "write the values out, or import a script that starts fewer servers",
    ),
    "nesting": Bound(
        100,
        "nested statements and scripts (if/for/case/functions/ssh/bash -c)",
        "flatten the script: no launch script nests this deep",
    ),
    "script-depth": Bound(
        16,
        "scripts nested in scripts (ssh, bash -c, docker run, heredocs)",
        "import the innermost script by itself",
    ),
    "parsed": Bound(
        64 << 20,
        "bytes parsed (the script, its nested scripts and re-reads after errors)",
        "nested quoting this large is not a launch script: import the innermost one",
    ),
    "launches": Bound(
        256,
        "SGLang launches found",
        "import a script that starts fewer servers, or pick one launch with --launch N",
    ),
    "profiles": Bound(
        64,
        "profiles one import writes",
        "pick one server with --launch N, or split the script",
    ),
}


@dataclass
class WorkBudget:
    """What one run has spent so far; ``file`` is the script being read (for the error)."""

    file: str = "<script>"
    spent: dict[str, int] = field(default_factory=dict)

    def spend(self, bound: str, amount: int, where: Located | None) -> None:
        """Add ``amount`` to a cumulative bound; past its limit the run stops."""
        total = self.spent.get(bound, 0) + amount
        self.spent[bound] = total
        if total > BOUNDS[bound].limit:
            self.exceeded(bound, where)

    def check(self, bound: str, size: int, where: Located | None) -> None:
        """A size at one place (a depth, one product) against its limit."""
        if size > BOUNDS[bound].limit:
            self.exceeded(bound, where)

    def exceeded(self, bound: str, where: Located | None) -> None:
        limit = BOUNDS[bound]
        at = f"{self.file}:{where.line}:{where.column}" if where is not None else self.file
        raise ImportBoundError(
            f"{at}: import stopped: more than {limit.limit:,} {limit.what} (bound: {bound})",
            limit.hint,
            bound=bound,
        )
