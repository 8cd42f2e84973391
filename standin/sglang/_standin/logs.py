"""SGLang's output formats: its log lines, uvicorn's lines, and tqdm's progress bars.

Streams, as SGLang has them: its ``logging`` handler writes to stderr, so every ``[...]`` line
does; uvicorn's own lines (``INFO:     Started server process ...``) go to stderr and its access
log (``INFO:     127.0.0.1:5555 - "GET /health HTTP/1.1" 200 OK``) to stdout; tqdm writes to
stderr with ``\\r`` updates and one final ``\\n``.
"""

from __future__ import annotations

import errno
import sys
import threading
import time
from typing import TextIO

_lock = threading.RLock()  # re-entrant: signal handlers log from the main thread


def stamp(log_ms: bool, now: float | None = None) -> str:
    """``2026-11-29 07:39:28`` (local time, as logging's asctime), ``.123`` appended with ms."""
    moment = time.time() if now is None else now
    text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(moment))
    if log_ms:
        text += f".{int(moment * 1000) % 1000:03d}"
    return text


def write(stream: TextIO, text: str) -> None:
    with _lock:
        stream.write(text)
        stream.flush()


class Log:
    """SGLang's logger: ``[YYYY-mm-dd HH:MM:SS(.mmm)?<prefix>] message`` on stderr.

    ``prefix`` is a scheduler's `` TP0`` / `` DP1 TP3`` / `` PP0``, empty in the main process.
    A message with newlines (a traceback) is written as one record, as logging does.
    """

    def __init__(self, log_ms: bool, prefix: str = "", stream: TextIO | None = None) -> None:
        self.log_ms = log_ms
        self.prefix = prefix
        self._stream = stream

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    def __call__(self, message: str) -> None:
        write(self.stream, f"[{stamp(self.log_ms)}{self.prefix}] {message}\n")

    def uvicorn(self, level: str, message: str, stream: TextIO | None = None) -> None:
        """uvicorn's records under SGLang's formatter: ``[%(asctime)s] %(levelprefix)s %(message)s``
        with datefmt ``%Y-%m-%d %H:%M:%S`` (no milliseconds even with SGLANG_LOG_MS)."""
        levelprefix = f"{level}:".ljust(9)
        write(stream or self.stream, f"[{stamp(False)}] {levelprefix} {message}\n")


def uvicorn_default(level: str, message: str, stream: TextIO | None = None) -> None:
    """A uvicorn record under uvicorn's own default logging config (``LOGGING_CONFIG``, when the
    caller passes no ``log_config``): ``%(levelprefix)s %(message)s`` on stderr, no timestamp, no
    colours off a terminal. The gated launch's control server logs its bind error this way."""
    levelprefix = f"{level}:".ljust(9)
    write(stream or sys.stderr, f"{levelprefix} {message}\n")


def format_interval(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:d}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _rate_fmt(rate: float | None) -> str:
    if not rate:
        return "?it/s"
    inverse = 1 / rate
    return f"{inverse:5.2f}s/it" if inverse > 1 else f"{rate:5.2f}it/s"


def _bar(fraction: float, width: int = 10) -> str:
    """tqdm's unicode bar for a non-tty (10 cells)."""
    charset = " " + "".join(chr(0x258F - i) for i in range(7))
    steps = len(charset) - 1
    full, partial = divmod(int(fraction * width * steps), steps)
    text = "\u2588" * full
    if full < width:
        text += charset[partial] + " " * (width - full - 1)
    return text


class Progress:
    """A tqdm bar on stderr, redrawn with ``\\r``.

    ``style="sglang"``: SGLang's weight-loading bar_format
    ``{desc}: {percentage:3.0f}% Completed | {n_fmt}/{total_fmt} [{elapsed}<{remaining},
    {rate_fmt}]``;
    ``style="tqdm"``: tqdm's default ``{desc}: {percentage:3.0f}%|{bar}| {n}/{total} [...]``.
    """

    def __init__(self, desc: str, total: int, style: str = "sglang", stream: TextIO | None = None):
        self.desc = desc
        self.total = total
        self.style = style
        self.stream = stream or sys.stderr
        self.n = 0
        self.start = time.monotonic()
        self._last_len = 0
        self._draw()

    def _text(self) -> str:
        elapsed = time.monotonic() - self.start
        rate = self.n / elapsed if self.n and elapsed > 0 else None
        remaining = format_interval((self.total - self.n) / rate) if rate else "?"
        percentage = 100 * self.n / self.total if self.total else 100.0
        timing = f"[{format_interval(elapsed)}<{remaining}, {_rate_fmt(rate)}]"
        if self.style == "sglang":
            return f"{self.desc}: {percentage:3.0f}% Completed | {self.n}/{self.total} {timing}"
        fraction = self.n / self.total if self.total else 1.0
        return f"{self.desc}: {percentage:3.0f}%|{_bar(fraction)}| {self.n}/{self.total} {timing}"

    def _draw(self) -> None:
        text = self._text()
        write(self.stream, "\r" + text + " " * max(self._last_len - len(text), 0))
        self._last_len = len(text)

    def update(self, steps: int = 1) -> None:
        self.n = min(self.total, self.n + steps)
        self._draw()

    def close(self) -> None:
        self._draw()
        write(self.stream, "\n")


def bind_error(error: OSError, host: str, port: int) -> str:
    """uvicorn's message when the bind fails (asyncio's ``create_server`` OSError)."""
    reason = (error.strerror or str(error)).lower()
    if error.errno == errno.EADDRINUSE:
        reason = "address already in use"
    address = (host, port)
    return f"[Errno {error.errno}] error while attempting to bind on address {address!r}: {reason}"
