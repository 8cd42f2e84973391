"""Where the CLI writes: both streams through one ``Redactor`` holding the secrets the command
read, errors included, and through :func:`terminal_safe`, so that no control character from a
server, a log, a profile or a file name reaches the terminal raw."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, TextIO

from orchestrator.errors import OrchError
from orchestrator.model import Finding

if TYPE_CHECKING:
    from orchestrator.cli.show.text import Text
    from orchestrator.render import Redactor


# C0 but tab and newline, DEL, C1: what a terminal acts on (ESC starts CSI, OSC and the rest;
# 0x9b is CSI alone). A carriage return is a line break unless a newline follows it.
_CONTROL = re.compile(r"\r(?!\n)|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def terminal_safe(text: str) -> str:
    """``text`` with every control character written as a ``\\uXXXX`` escape (also a valid
    JSON escape of the same character, so JSON output stays JSON), a lone carriage return as a
    line break (a progress bar's redraws read as lines; no line can be overwritten)."""
    return _CONTROL.sub(lambda found: "\n" if found[0] == "\r" else f"\\u{ord(found[0]):04x}", text)


class RedactingStream:
    """A text stream that writes through the Redactor, across writes: a tail that could be the
    start of a secret is held back until the next write shows whether it is one (``close``
    writes what is left). ``flush`` flushes the stream, not the held-back tail. What it writes
    is :func:`terminal_safe` (a carriage return at the end waits for the next write, which
    tells whether a newline follows); only :meth:`control` writes orch's own sequences."""

    def __init__(self, stream: TextIO, redact: Redactor) -> None:
        self._stream = stream
        self._redact = redact
        self._held = ""

    def write(self, text: str) -> None:
        text = self._redact(self._held + text)
        keep = self._redact.unsafe_tail(text)
        if not keep and text.endswith("\r"):
            keep = 1
        self._held = text[len(text) - keep :] if keep else ""
        if keep:
            text = text[: len(text) - keep]
        if text:
            self._stream.write(terminal_safe(text))

    def control(self, sequence: str) -> None:
        """orch's own terminal control (a colour, a progress bar's carriage return), written as
        is after what is held back: never a value from outside (cli/show builds it from
        constants)."""
        self._release()
        self._stream.write(sequence)

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        self._release()
        self._stream.flush()

    def _release(self) -> None:
        if self._held:
            self._stream.write(terminal_safe(self._redact(self._held)))
            self._held = ""

    def isatty(self) -> bool:
        return self._stream.isatty()


class Output:
    """Where the CLI writes: both streams through one Redactor holding the secrets the command
    read (they join it when the command builds its Launch). Tests pass their own streams."""

    def __init__(self, out: TextIO, err: TextIO, redact: Redactor) -> None:
        self.redact = redact
        self.out = RedactingStream(out, redact)
        self.err = RedactingStream(err, redact)

    def write(self, texts: Iterable[Text]) -> None:
        for text in texts:
            stream = self.err if text.err else self.out
            if text.control:
                stream.control(text.text)
            elif text.text:
                stream.write(text.text)
            if text.flush:
                stream.flush()

    def print(self, text: str = "") -> None:
        self.out.write(text + "\n")

    def error(self, error: OrchError) -> None:
        from orchestrator.cli.show import text

        self.write(text.error(error.message, error.hint))

    def traceback(self, exc: BaseException) -> None:
        """``--debug``: the exception's traceback, through the same redacting stream (a
        secret in a frame's text is replaced like anywhere else); the exit code stays the
        error's."""
        import traceback

        self.err.write("".join(traceback.format_exception(exc)))

    def finding(self, found: Finding) -> None:
        from orchestrator.cli.show import text

        self.write(text.finding(found))

    def close(self) -> None:
        self.out.close()
        self.err.close()
