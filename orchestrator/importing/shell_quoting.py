"""Quote removal as bash does it, on text: a backslash outside quotes, inside double quotes,
in ``$'...'`` (ANSI-C escapes), and a heredoc body read as the inside of double quotes.

The expansion (``shell_expansion``) hands each quoted or unquoted piece of a word here once the
parser has said which it is.

Pure: no I/O.
"""

from __future__ import annotations

import re

_ANSI_ESCAPES = {
    "a": "\a",
    "b": "\b",
    "e": "\x1b",
    "E": "\x1b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
    "v": "\v",
    "\\": "\\",
    "'": "'",
    '"': '"',
    "?": "?",
}
_DOUBLE_QUOTE_ESCAPES = frozenset('$`"\\\n')


def unescape_word(text: str) -> str:
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


def unescape_double(text: str, keep_continuations: bool = False) -> str:
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


def as_double_quoted(body: str) -> str:
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


def ansi_c(text: str) -> str:
    """The inside of ``$'...'`` with its escapes decoded (``\\n``, ``\\x41``, octal ...)."""
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
