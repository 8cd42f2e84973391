"""The secrets a launch script holds: every value ``credentials`` calls a secret, wherever the
script has it (an assignment, an ``export``, a ``${VAR:-default}``, a prefix or ``docker -e``
variable, a flag's value, a heredoc, a comment), with where it is written in the file when it is
written there as it is (a plaintext secret, which ``--check`` reports).

``orch import`` masks each of them in everything it shows and writes (``Redactor.add_found``),
and keeps them out of its notes; ``--check`` locates them. Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from orchestrator.importing import credentials
from orchestrator.importing.launches import Found
from orchestrator.importing.shell_words import Command, Position, Script, Variable, Word

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# A value shown with what the shell reading could not resolve ($(...), ${NAME}): not a secret
# written in the script, but where one comes from
_EXPANSION_RE = re.compile(r"\$[({]|`")
# Programs that take a password by place, not by a flag's name: sshpass -p PASSWORD.
_PASSWORD_OPTIONS = {"sshpass": ("-p",)}


@dataclass(frozen=True)
class ScriptSecret:
    name: str  # what holds it: the variable, the flag's field (API_KEY), or "secret"
    value: str  # the secret text, as the program that reads it gets it
    why: str  # "HF_TOKEN names a credential", "a Hugging Face token", "--api-key's value"
    position: Position | None  # where the value is written as it is; None: it is not


def secrets_of(text: str, script: Script, found: Found) -> tuple[ScriptSecret, ...]:
    """Every secret the script (``text``, read as ``script`` with its launches ``found``) holds,
    each value once, in the order the file has them."""
    out: dict[str, ScriptSecret] = {}
    for name, value, why, near in _candidates(text, script, found):
        if not value or value in out:
            continue
        out[value] = ScriptSecret(name, value, why, _written_at(text, value, near))
    return tuple(sorted(out.values(), key=_order))


def _order(secret: ScriptSecret) -> tuple[int, int]:
    position = secret.position
    return (position.line, position.column) if position is not None else (1 << 30, 0)


Candidate = tuple[str, str, str, Position | None]  # name, value, why, a position near it


def _candidates(text: str, script: Script, found: Found) -> Iterator[Candidate]:
    scripts = [script, *(s for s, _ in found.scripts if s is not script)]
    seen: set[tuple[str, str]] = set()  # every command sees the variables set before it
    for each in scripts:
        for command in each.commands:
            yield from _variables(command.variables, seen)
            yield from _command(command)
        yield from _variables(each.variables, seen)
        for default in each.defaults:
            yield from _value(default.name, default.value, default.position)
        for choice in each.choices:
            for value in (*choice.values, *([choice.taken] if choice.taken else [])):
                if value != "unset":
                    yield from _value(choice.name, value, choice.position)
    for launch in found.launches:
        for name, entry in launch.environment.items():
            if entry.value is not None and entry.value.text is not None:
                yield from _value(name, entry.value.text, entry.position)
    # what the shell reading does not give: comments, text of programs orch does not follow
    for hit in credentials.secrets_in(text):
        yield ("secret", hit.value, hit.what, None)


def _variables(
    variables: Mapping[str, Variable], seen: set[tuple[str, str]]
) -> Iterator[Candidate]:
    for name, variable in variables.items():
        words = [variable.value] if variable.value is not None else []
        words += list(variable.elements or ())
        for word in words:
            if word.text is not None and (name, word.text) not in seen:
                seen.add((name, word.text))
                yield from _value(name, word.text, variable.position or word.position)


def _value(name: str, value: str, near: Position | None) -> Iterator[Candidate]:
    """``value`` given to ``name``: all of it when the name says credential, else each secret
    inside it (a token, a URL's password)."""
    if not value:
        return
    if credentials.secret_name(name) and not _EXPANSION_RE.search(value):
        yield (name, value, f"{name} names a credential", near)
        return
    for hit in credentials.secrets_in(value):
        yield (name, hit.value, hit.what, near)


def _command(command: Command) -> Iterator[Candidate]:
    for name, word in command.prefix:
        if word.text is not None:
            yield from _value(name, word.text, word.position)
    words = list(command.words)
    program = posixpath.basename(words[0].text or "") if words else ""
    for index, word in enumerate(words):
        text = word.text
        if text is None:
            continue
        following = words[index + 1] if index + 1 < len(words) else None
        flag, equals, value = text.partition("=")
        if equals and _NAME_RE.fullmatch(flag):
            yield from _value(flag, value, word.position)  # docker -e NAME=value, env NAME=v
            continue
        if flag.startswith("--") and _credential_flag(flag):
            if equals:
                yield (_field(flag), value, f"{flag}'s value", word.position)
            elif following is not None and following.text and not following.text.startswith("-"):
                yield (_field(flag), following.text, f"{flag}'s value", following.position)
            continue
        for option in _PASSWORD_OPTIONS.get(program, ()):
            if text == option and following is not None and following.text:
                why = f"{program} {option}'s value"
                yield ("password", following.text, why, following.position)
            elif text.startswith(option) and len(text) > len(option):
                yield (
                    "password",
                    text[len(option) :],
                    f"{program} {option}'s value",
                    word.position,
                )
        before = words[index - 1].text if index else None
        holder = (
            _field(flag)
            if flag.startswith("--") and equals
            else _field(before)
            if before is not None and before.startswith("--")
            else "secret"
        )
        for hit in credentials.secrets_in(text):
            yield (holder, hit.value, hit.what, word.position)
    for redirect in command.redirects:
        if redirect.heredoc is not None:
            for hit in credentials.secrets_in(redirect.heredoc.body):
                yield ("secret", hit.value, hit.what, redirect.heredoc.position)


def _credential_flag(flag: str) -> bool:
    """``--api-key`` and its argparse abbreviations (``--api-k``), and any program's option
    named like a credential (``--password``, ``--hf-token``)."""
    if any(full.startswith(flag) and len(flag) >= 5 for full in credentials.SECRET_FLAGS):
        return not "--ssl-keyfile".startswith(flag)  # a prefix of the keyfile's path as well
    return credentials.secret_name(flag)


def _field(flag: str) -> str:
    for full in credentials.SECRET_FLAGS:
        if full.startswith(flag):
            return full[2:].replace("-", "_").upper()
    return flag.lstrip("-").replace("-", "_").upper()


def _written_at(text: str, value: str, near: Position | None) -> Position | None:
    """Where ``value`` is written in ``text``: its first occurrence from the line of ``near``
    on (where the script assigns or passes it), else anywhere; None when it is not there."""
    start = 0
    if near is not None:
        start = _offset(text, near.line)
    index = text.find(value, start)
    if index < 0:
        index = text.find(value)
    if index < 0:
        return None
    line = text.count("\n", 0, index) + 1
    column = index - (text.rfind("\n", 0, index) + 1) + 1
    return Position(line, column)


def _offset(text: str, line: int) -> int:
    offset = 0
    for _ in range(line - 1):
        found = text.find("\n", offset)
        if found < 0:
            return 0
        offset = found + 1
    return offset


def word_literal(word: Word) -> str:
    """The text of ``word`` that the script gives (an unresolved part as ``${NAME}``): what is
    looked at for a secret when the whole value is not known (``https://u:pw@$HOST/x``)."""
    return word.shown()
