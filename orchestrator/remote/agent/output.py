"""The server's output as it arrives: written to the run's log (LogSink: rotated, never
truncated, dropped and counted when the disk is full) and noted (OutputWatcher: the config line,
the ready lines, the gated launch's lines, SGLang's memory lines, the last lines for the exit
verdict)."""

from __future__ import annotations

import contextlib
import os
import re
from collections import deque

from .files import open_append, os_error_text, write_json_atomic
from .protocol import MEMORY_FILE
from .sglang_log import (
    GATE_LINE_MARK,
    config_line_payload,
    gate_waiting_rank,
    is_batch_line,
    is_gate_activated_line,
    is_ready_line,
    is_worker_ready_line,
)


class LogSink:
    """The run's log: every byte the server prints, rotated at a size cap, never truncated.

    A write that fails (a full disk, a quota: NO_ROOM_ERRNOS; any OSError alike) never stops
    the reader of the server's output, which would block the server on its full pipe: the bytes
    are dropped and counted, and the next write that finds room puts one marker line first
    (``[orch: N bytes of output dropped: no space left on device]``). Raw writes (no buffer): a
    failed write loses exactly what it says."""

    def __init__(self, path: str, max_bytes: int, keep: int) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.keep = keep
        self.dropped_total = 0  # bytes dropped over the run
        self.last_error: str | None = None  # why the last write failed
        self._dropped = 0  # since the last marker
        self._fd: int | None = None
        self._size = 0
        self._open()

    def _open(self) -> bool:
        """The log opened (0600, appended to); False when it cannot be now (retried later)."""
        try:
            self._fd = open_append(self.path)  # lives as long as the run
        except OSError as exc:
            self.last_error = os_error_text(exc)
            return False
        self._size = os.fstat(self._fd).st_size
        return True

    def write(self, data: bytes) -> None:
        if self._fd is None and not self._open():
            self._drop(len(data))
            return
        if self._size + len(data) > self.max_bytes and self._size > 0:
            self._rotate()
            if self._fd is None:
                self._drop(len(data))
                return
        if self._dropped:
            marker = (
                f"[orch: {self._dropped} bytes of output dropped: {self.last_error}]\n"
            ).encode()
            if self._put(marker) < len(marker):
                self._drop(len(data))  # still no room (a piece of the marker may be there)
                return
            self._dropped = 0
        written = self._put(data)
        if written < len(data):
            self._drop(len(data) - written)

    def _put(self, data: bytes) -> int:
        """Bytes of ``data`` written (all of them, unless a write failed)."""
        view = memoryview(data)
        written = 0
        while written < len(data):
            assert self._fd is not None  # noqa: S101 - opened by the caller
            try:
                count = os.write(self._fd, view[written:])
            except OSError as exc:
                self.last_error = os_error_text(exc)
                break
            written += count
        self._size += written
        return written

    def _drop(self, count: int) -> None:
        self._dropped += count
        self.dropped_total += count

    def _rotate(self) -> None:
        assert self._fd is not None  # noqa: S101 - rotated only while open
        os.close(self._fd)
        self._fd = None
        try:
            for index in range(self.keep - 1, 0, -1):
                older = f"{self.path}.{index}"
                if os.path.exists(older):
                    os.replace(older, f"{self.path}.{index + 1}")
            os.replace(self.path, f"{self.path}.1")
        except OSError as exc:
            self.last_error = os_error_text(exc)
        self._open()

    def close(self) -> None:
        if self._fd is None:
            return
        if self._dropped:  # the run ended while dropping: its log says so, if there is room
            self._put(
                f"[orch: {self._dropped} bytes of output dropped: {self.last_error}]\n".encode()
            )
        os.close(self._fd)
        self._fd = None


# A line is noted (config line, ready line, the verdict's tail) by its first LINE_SCAN_BYTES;
# the log gets all of it. SGLang's config line is 12 KB (0.5.11) to 19 KB (0.5.23) and grows
# with inline templates and JSON overrides: a cap that cut it would keep a server from READY.
LINE_SCAN_BYTES = 1 << 20
# SGLang's startup memory lines (weights, pools, graphs, the capacity summary), in 0.5.11's and
# 0.5.23's words; kept per run in MEMORY_FILE, at most MEMORY_LINES of them (TP ranks x ~8).
MEMORY_MARKERS = (
    "avail mem=",
    "KV Cache is allocated",
    "KV cache allocated",
    "Mamba Cache is allocated",
    "max_total_num_tokens=",
    "is capped to",
)
MEMORY_LINES = 400

TAIL_LINE_CHARS = 16 << 10  # per line of the 400 kept for the exit verdict
_LINE_BREAK = re.compile(rb"[\r\n]")


class OutputWatcher:
    """The server's combined output as it arrives: written to the log, and noted (the config
    line, the ready line, the last lines for the exit verdict). Fed by whoever reads the
    server's output (``World.spawn``'s reader thread)."""

    def __init__(
        self, sink: LogSink, tail_lines: int = 400, config_path: str | None = None
    ) -> None:
        self._sink = sink
        self.config_path = config_path
        self.tail: deque[str] = deque(maxlen=tail_lines)
        self.saw_config_line = False
        self.saw_ready_line = False
        self.saw_worker_line = False  # a group member's own ready line (is_worker_ready_line)
        # The gated launch: the global ranks that logged their waiting line (replaced, never
        # changed in place: the supervisor's thread reads it while the reader's adds to it),
        # and whether a rank logged that it passed the gate.
        self.gate_waiting: frozenset[int] = frozenset()
        self.gate_activated = False
        self.memory_lines: list[str] = []
        self.batch_lines = 0  # SGLang's prefill and decode batch lines: the server progresses
        # The line being received: its first LINE_SCAN_BYTES, in pieces (never re-joined per
        # read: a 30 MB line without a newline took READY from 0.1 s to 68 s when it was).
        self._partial: list[bytes] = []
        self._partial_size = 0

    def feed(self, chunk: bytes) -> None:
        """Every byte goes to the log as it came; lines are noted up to LINE_SCAN_BYTES each.
        Linear in the output: each chunk is split once and never copied again."""
        self._sink.write(chunk)
        # tqdm redraws with \r: split on both so each progress update is a line
        pieces = _LINE_BREAK.split(chunk)
        self._extend(pieces[0])
        if len(pieces) == 1:
            return
        self._end_line()
        for piece in pieces[1:-1]:
            if piece:
                self._note(piece[:LINE_SCAN_BYTES].decode("utf-8", "replace"))
        self._extend(pieces[-1])

    def close(self) -> None:
        """The output ended: its last, unterminated line counts too."""
        self._end_line()
        self._sink.close()

    @property
    def dropped_bytes(self) -> int:
        """Output the log could not take (a full disk): counted, never a blocked server."""
        return self._sink.dropped_total

    @property
    def write_error(self) -> str | None:
        return self._sink.last_error

    def _extend(self, piece: bytes) -> None:
        room = LINE_SCAN_BYTES - self._partial_size
        if piece and room > 0:
            kept = piece[:room]
            self._partial.append(kept)
            self._partial_size += len(kept)

    def _end_line(self) -> None:
        if self._partial:
            self._note(b"".join(self._partial).decode("utf-8", "replace"))
        self._partial = []
        self._partial_size = 0

    def _note(self, line: str) -> None:
        self.tail.append(line if len(line) <= TAIL_LINE_CHARS else line[:TAIL_LINE_CHARS])
        if not self.saw_config_line and config_line_payload(line) is not None:
            self.saw_config_line = True
            self._keep_config(line)
        elif (
            self.saw_config_line
            and not self.saw_ready_line
            and len(self.memory_lines) < MEMORY_LINES
            and any(marker in line for marker in MEMORY_MARKERS)
        ):
            self.memory_lines.append(line[:TAIL_LINE_CHARS])
            self._keep_memory()
        if is_batch_line(line):
            self.batch_lines += 1
        elif is_ready_line(line):
            self.saw_ready_line = True
            if not self.saw_worker_line and is_worker_ready_line(line):
                self.saw_worker_line = True
        elif GATE_LINE_MARK in line:
            rank = gate_waiting_rank(line)
            if rank is not None:
                if rank not in self.gate_waiting:
                    self.gate_waiting = self.gate_waiting | {rank}
            elif not self.gate_activated and is_gate_activated_line(line):
                self.gate_activated = True

    def _keep_memory(self) -> None:
        """SGLang's memory lines of this run's startup, beside its log: ``diff-effective``
        compares them with the plan's prediction (a rotated or huge log never hides them)."""
        if self.config_path is None:
            return
        path = os.path.join(os.path.dirname(self.config_path), MEMORY_FILE)
        with contextlib.suppress(OSError):
            write_json_atomic(path, {"lines": self.memory_lines}, 0o600)

    def _keep_config(self, line: str) -> None:
        """Keep the config line and what SGLang logged before it beside the log (which may
        rotate): ``orch diff-effective`` reads them from here."""
        if self.config_path is None:
            return
        document = {"server_args_line": line, "log_lines": list(self.tail)[:-1]}
        with contextlib.suppress(OSError):
            write_json_atomic(self.config_path, document, 0o600)
