"""Bash arithmetic (``$((...))``, ``for ((i = 0; i < n; i++))``) over integers the script sets.

The expression is read with bash's operators and precedence (comma, the assignment operators,
``?:``, ``|| &&``, bitwise and comparison operators, ``<< >>``, ``+ -``, ``* / %``, ``**``,
unary ``! ~ - +``, ``++``/``--`` before and after a name). A variable is an integer only when
the script makes it one: a name ``lookup`` cannot give (unknown here, or not a number) stops
the evaluation with ``NotKnown``, never a guessed 0. Division truncates toward zero, as bash's.
``loop_count`` says how many times a C-style loop runs, so that the walker can unroll it.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Callable

_PIECE_RE = re.compile(
    r"\s*(?:(?P<number>0[xX][0-9a-fA-F]+|\d+#[0-9a-zA-Z@_]+|\d+)"
    r"|\$\{(?P<braced>[A-Za-z_]\w*)\}|\$?(?P<name>[A-Za-z_]\w*)"
    r"|(?P<op><<=|>>=|\*\*|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&^|]=|[-+*/%&^|<>=!~?:,()]))"
)
_ASSIGNMENTS = frozenset({"=", "+=", "-=", "*=", "/=", "%=", "<<=", ">>=", "&=", "^=", "|="})
_BINARY: list[tuple[str, ...]] = [  # lowest precedence first (after ?: and the assignments)
    ("||",),
    ("&&",),
    ("|",),
    ("^",),
    ("&",),
    ("==", "!="),
    ("<", ">", "<=", ">="),
    ("<<", ">>"),
    ("+", "-"),
    ("*", "/", "%"),
]


class NotKnown(Exception):
    """The expression needs a value the script does not determine, or is not arithmetic."""


def run_arithmetic(
    expression: str, lookup: Callable[[str], int | None]
) -> tuple[int, dict[str, int]]:
    """The value of ``expression`` and the variables it assigns (``i++``, ``n = 2``)."""
    pieces = _lex(expression)
    parser = _Parser(pieces, lookup)
    value = parser.comma()
    if parser.index != len(pieces):
        raise NotKnown(expression)
    return value, parser.assigned


def assigned_names(expression: str) -> set[str]:
    """The variables ``expression`` assigns (``i = 0``, ``i++``, ``--n``, ``s += 2``)."""
    try:
        pieces = _lex(expression)
    except NotKnown:
        return set()
    names = set()
    for index, piece in enumerate(pieces):
        if not _is_name(piece):
            continue
        after = pieces[index + 1] if index + 1 < len(pieces) else None
        before = pieces[index - 1] if index else None
        if after in _ASSIGNMENTS or after in ("++", "--") or before in ("++", "--"):
            names.add(piece)
    return names


def loop_count(
    initializer: str,
    condition: str,
    update: str,
    lookup: Callable[[str], int | None],
    most: int,
) -> int | None:
    """How many times ``for ((initializer; condition; update))`` runs if its body leaves its
    variables alone; None when a value is unknown or the loop runs more than ``most`` times."""
    state: dict[str, int] = {}

    def current(name: str) -> int | None:
        return state[name] if name in state else lookup(name)

    try:
        if initializer:
            state.update(run_arithmetic(initializer, current)[1])
        for count in range(most + 1):
            if condition and not run_arithmetic(condition, current)[0]:
                return count
            if not update:
                return None  # nothing changes: it runs until the body breaks out
            state.update(run_arithmetic(update, current)[1])
    except NotKnown:
        return None
    return None


def _lex(expression: str) -> list[str]:
    pieces: list[str] = []
    position = 0
    text = expression.rstrip()
    while position < len(text):
        match = _PIECE_RE.match(text, position)
        if match is None or match.end() == position:
            raise NotKnown(expression)
        pieces.append(
            match.group("number")
            or match.group("braced")
            or match.group("name")
            or match.group("op")
        )
        position = match.end()
    return pieces


def _number(piece: str) -> int:
    if piece[:2] in ("0x", "0X"):
        return int(piece, 16)
    if "#" in piece:
        base, _, digits = piece.partition("#")
        try:
            return int(digits, int(base))
        except ValueError as exc:
            raise NotKnown(piece) from exc
    if len(piece) > 1 and piece.startswith("0"):
        try:
            return int(piece, 8)
        except ValueError as exc:
            raise NotKnown(piece) from exc
    return int(piece)


def _divide(left: int, right: int, operator: str) -> int:
    if right == 0:
        raise NotKnown("division by zero")
    quotient = abs(left) // abs(right) * (1 if (left >= 0) == (right >= 0) else -1)
    return quotient if operator == "/" else left - right * quotient


def _apply(operator: str, left: int, right: int) -> int:
    if operator in ("/", "%"):
        return _divide(left, right, operator)
    if operator in ("<<", ">>") and not 0 <= right < 64:
        raise NotKnown("shift out of range")
    operations: dict[str, Callable[[int, int], int]] = {
        "+": lambda a, b: a + b,
        "-": lambda a, b: a - b,
        "*": lambda a, b: a * b,
        "<<": lambda a, b: a << b,
        ">>": lambda a, b: a >> b,
        "&": lambda a, b: a & b,
        "|": lambda a, b: a | b,
        "^": lambda a, b: a ^ b,
        "<": lambda a, b: int(a < b),
        ">": lambda a, b: int(a > b),
        "<=": lambda a, b: int(a <= b),
        ">=": lambda a, b: int(a >= b),
        "==": lambda a, b: int(a == b),
        "!=": lambda a, b: int(a != b),
        "&&": lambda a, b: int(bool(a and b)),
        "||": lambda a, b: int(bool(a or b)),
    }
    result = operations[operator](left, right)
    if abs(result) >= 1 << 63:  # bash wraps at 64 bits; a launch script never gets here
        raise NotKnown("out of range")
    return result


class _Parser:
    """Recursive descent; expressions in launch scripts are a few pieces long."""

    def __init__(self, pieces: list[str], lookup: Callable[[str], int | None]) -> None:
        self.pieces = pieces
        self.index = 0
        self.lookup = lookup
        self.assigned: dict[str, int] = {}

    def peek(self) -> str | None:
        return self.pieces[self.index] if self.index < len(self.pieces) else None

    def take(self, expected: str | None = None) -> str:
        piece = self.peek()
        if piece is None or (expected is not None and piece != expected):
            raise NotKnown(f"expected {expected or 'more'}")
        self.index += 1
        return piece

    def value_of(self, name: str) -> int:
        if name in self.assigned:
            return self.assigned[name]
        value = self.lookup(name)
        if value is None:
            raise NotKnown(name)
        return value

    def comma(self) -> int:
        value = self.assignment()
        while self.peek() == ",":
            self.take()
            value = self.assignment()
        return value

    def assignment(self) -> int:
        piece = self.peek()
        following = self.pieces[self.index + 1] if self.index + 1 < len(self.pieces) else None
        if piece is not None and _is_name(piece) and following in _ASSIGNMENTS:
            self.index += 2
            right = self.assignment()
            value = (
                right if following == "=" else _apply(following[:-1], self.value_of(piece), right)
            )
            self.assigned[piece] = value
            return value
        return self.ternary()

    def ternary(self) -> int:
        condition = self.binary(0)
        if self.peek() != "?":
            return condition
        self.take()
        # both arms are read (bash evaluates one; an arm's assignment is not followed here)
        yes = self.assignment()
        self.take(":")
        no = self.assignment()
        return yes if condition else no

    def binary(self, level: int) -> int:
        if level == len(_BINARY):
            return self.power()
        value = self.binary(level + 1)
        while self.peek() in _BINARY[level]:
            operator = self.take()
            value = _apply(operator, value, self.binary(level + 1))
        return value

    def power(self) -> int:
        base = self.unary()
        if self.peek() == "**":
            self.take()
            exponent = self.power()
            if exponent < 0 or exponent > 64:
                raise NotKnown("exponent")
            return _apply("*", base**exponent, 1)
        return base

    def unary(self) -> int:
        piece = self.peek()
        if piece in ("++", "--"):
            self.take()
            name = self.take()
            if not _is_name(name):
                raise NotKnown(name)
            value = self.value_of(name) + (1 if piece == "++" else -1)
            self.assigned[name] = value
            return value
        if piece in ("-", "+", "!", "~"):
            self.take()
            operand = self.unary()
            return {"-": -operand, "+": operand, "!": int(not operand), "~": ~operand}[piece]
        return self.postfix()

    def postfix(self) -> int:
        piece = self.take()
        if piece == "(":
            value = self.comma()
            self.take(")")
            return value
        if _is_name(piece):
            value = self.value_of(piece)
            if self.peek() in ("++", "--"):
                self.assigned[piece] = value + (1 if self.take() == "++" else -1)
            return value
        if piece[:1].isdigit():
            return _number(piece)
        raise NotKnown(piece)


def _is_name(piece: str) -> bool:
    return piece[:1].isalpha() or piece[:1] == "_"
