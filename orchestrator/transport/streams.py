"""The line reader under ``Transport.stream``: a thread reads a byte source into lines, the
caller takes them with a timeout. One for a local process's pipe and an SSH channel alike."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

_END = b""


class LineQueue:
    """Lines of a byte source read by a daemon thread; ``read(n)`` returns b"" at its end."""

    def __init__(self, read: Callable[[int], bytes], name: str) -> None:
        self._read = read
        self._lines: queue.Queue[bytes] = queue.Queue()
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._pump, name=name, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        pending = b""
        try:
            while True:
                try:
                    chunk = self._read(1 << 16)
                except (OSError, EOFError, ValueError):
                    chunk = b""
                if not chunk:
                    break
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    self._lines.put(line + b"\n")
            if pending:
                self._lines.put(pending)
        finally:
            self._ended.set()
            self._lines.put(_END)

    def readline(self, timeout: float) -> bytes | None:
        try:
            line = self._lines.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if line == _END:
            self._lines.put(_END)  # every later call sees the end too
        return line

    @property
    def ended(self) -> bool:
        return self._ended.is_set() and self._lines.qsize() <= 1

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)
