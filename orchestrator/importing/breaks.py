"""Broken continuations: the lines of a launch that bash never passes to it.

A backslash continues a command only when the newline follows it at once. A blank after it
(``\\ `` + newline), or the carriage return of a file saved with CRLF line endings, is escaped
instead: bash passes it as an argument (``' '``, ``$'\\r'``), ends the command at the newline, and
runs the next lines as commands of their own (``--tp: command not found``). The server starts
without those flags, silently: the incident's own class. The shell reader (``shell_script``)
reads such a file as bash does and marks the command that ends there (``Command.broken``); this
module names what is lost, for ``orch import`` (a loud note) and ``--check`` (the first error).

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.importing.launches import Found, Launch
from orchestrator.importing.shell_words import Command, ContinuationBreak, Position, Script


@dataclass(frozen=True)
class LostLines:
    """A command that a broken continuation ends, and the lines bash runs on their own."""

    command: Command
    brk: ContinuationBreak
    lost: tuple[Command, ...]  # the following lines, each a command of its own to bash

    @property
    def position(self) -> Position:
        return self.brk.position

    @property
    def crlf(self) -> bool:
        return self.brk.escaped == "\r"

    @property
    def flags(self) -> tuple[str, ...]:
        """The options on the lost lines, as written (``--port=30000`` -> ``--port``)."""
        out: list[str] = []
        for command in self.lost:
            for word in command.words:
                text = word.text if word.text is not None else word.shown()
                if text.startswith("-") and len(text) > 1:
                    flag = text.split("=", 1)[0].rstrip("\r")
                    if flag not in out:
                        out.append(flag)
        return tuple(out)

    @property
    def lines(self) -> str:
        if not self.lost:
            return ""
        first = self.lost[0].position.line
        last = max(c.position.line + c.source.count("\n") for c in self.lost)
        return f"line {first}" if first == last else f"lines {first}-{last}"

    def stray(self) -> str:
        return "$'\\r'" if self.crlf else repr(self.brk.escaped)

    def said(self, what: str) -> str:
        """Where the command ends, what bash passes and runs instead, and what ``what`` (the
        server, a command) never gets."""
        cause = (
            "CRLF line endings: this backslash escapes the carriage return, not the newline"
            if self.crlf
            else "a blank after the backslash: it escapes the blank, not the newline"
        )
        text = f"{cause}: the command ends here with a stray {self.stray()} argument"
        if self.lost:
            text += f", and {self.lines} run as commands of their own"
            if self.flags:
                text += f": {what} never gets {', '.join(self.flags)}"
        return text

    def fix(self) -> str:
        if self.crlf:
            return "convert the file to LF line endings (`dos2unix FILE`, or save it with LF)"
        return "delete the blank after the backslash: it must be the last character of the line"


def broken_continuations(scripts: Sequence[Script]) -> list[LostLines]:
    """Every command ended by a broken continuation, with the lines that follow it as
    commands of their own (while they start with an option, as a continued line does); a line
    lost to an earlier break is not a break of its own."""
    out: list[LostLines] = []
    for script in scripts:
        commands = script.commands
        index = 0
        while index < len(commands):
            command = commands[index]
            index += 1
            if command.broken is None:
                continue
            lost: list[Command] = []
            while index < len(commands) and _continues(commands[index]):
                lost.append(commands[index])
                index += 1
            out.append(LostLines(command, command.broken, tuple(lost)))
    return out


def _continues(command: Command) -> bool:
    """A line that reads as the rest of an argument list: it starts with an option (bash runs
    ``--tp`` as a command), or with an expansion holding more of them."""
    if not command.words:
        return False
    first = command.words[0]
    if first.text is not None:
        return first.text.startswith("-")
    return first.source.lstrip('"').startswith("$")


def launch_breaks(launch: Launch, lost: Sequence[LostLines]) -> list[LostLines]:
    """The breaks that end one of the commands that start this launch (the launch itself, or
    the ssh, docker run or bash -c around it)."""
    commands = (launch.command, *launch.outer)
    return [item for item in lost if any(item.command is c for c in commands)]


def file_breaks(found: Found) -> list[LostLines]:
    """The broken continuations of one file, its nested scripts (ssh, bash -c) too."""
    return broken_continuations([script for script, _ in found.scripts])
