"""The requests a stand-in server is generating (SGLang's ``rid_to_state``): what ``/v1/loads``
counts as running and waiting, and what the SIGTERM drain waits for."""

from __future__ import annotations

import contextlib
import threading
import time
import uuid
from collections.abc import Iterator


class InFlight:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rids: dict[str, float] = {}  # rid -> when it arrived

    @contextlib.contextmanager
    def request(self) -> Iterator[str]:
        """One generation request, counted from arrival until its answer is written."""
        rid = uuid.uuid4().hex
        with self._lock:
            self._rids[rid] = time.monotonic()
        try:
            yield rid
        finally:
            with self._lock:
                self._rids.pop(rid, None)

    def rids(self) -> list[str]:
        """The requests in flight, oldest first."""
        with self._lock:
            return sorted(self._rids, key=self._rids.__getitem__)

    def split(self, max_running: int) -> tuple[int, int]:
        """(running, waiting): the scheduler runs up to ``max_running`` at once, the rest wait
        in its queue, as SGLang's ``num_running_reqs`` / ``num_waiting_reqs``."""
        with self._lock:
            count = len(self._rids)
        running = min(count, max(1, max_running))
        return running, count - running
