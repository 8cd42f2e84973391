"""What a supervisor writes of itself: state.json (its AgentState, replaced atomically on every
change) and events.jsonl (one line per event). A write that finds no room (a full disk, a
quota) never ends the supervisor: state.json stays whole as it was and is written again at the
next chance, an event is dropped, and both are counted in the state's ``disk`` (issue 26)."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Mapping
from typing import Any

from .files import NO_DISK_TROUBLE, Paths, no_room, open_append, os_error_text, write_json_atomic
from .record import AgentState
from .world import Clock


class Journal:
    """One supervisor's state.json and events.jsonl. A launch group's coordinator's connection
    threads record what members say too: every write is under ``lock``."""

    def __init__(self, paths: Paths, record: AgentState, clock: Clock) -> None:
        self.paths = paths
        self.record = record
        self._clock = clock
        self.lock = threading.RLock()
        self.unsaved = False  # the last state.json write found no room: retried
        self._events_cut = False  # events.jsonl ends in a line cut short by a full disk
        # told of every write, outside the lock (a group member reports its state)
        self.on_write: Callable[[AgentState], None] = lambda record: None

    def write(self, fields: Mapping[str, Any]) -> None:
        with self.lock:
            self.record.update(fields)
            self.save()
        self.on_write(self.record)

    def save(self) -> None:
        """state.json written now; with no room for it (a full disk) the state stays in memory,
        the previous file whole, and the next chance writes it (``save_if_unsaved``). Under
        ``lock``."""
        try:
            write_json_atomic(self.paths.state, self.record.to_json())
        except OSError as exc:
            if not no_room(exc):
                raise
            self.unsaved = True
            self.disk_trouble(exc, "failed_writes")
        else:
            self.unsaved = False

    def save_if_unsaved(self) -> None:
        if self.unsaved:
            with self.lock:
                self.save()

    def disk_trouble(self, exc: OSError, counter: str) -> None:
        """One more write that found no room, in state.json's ``disk`` (written when it can)."""
        with self.lock:
            disk = dict(self.record.disk or NO_DISK_TROUBLE)
            disk[counter] = int(disk.get(counter) or 0) + 1
            disk.update(last_error=os_error_text(exc), last_error_at=self._clock.wall())
            self.record.disk = disk

    def event(self, kind: str, **details: Any) -> None:
        """One line of events.jsonl; dropped (counted) when the disk has no room for it."""
        record = {"at": self._clock.wall(), "event": kind, **details}
        line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
        with self.lock:  # one writer at a time: a line cut short is ended by the next
            if self._events_cut:
                line = b"\n" + line
            written = 0
            try:
                fd = open_append(self.paths.events)
                try:
                    while written < len(line):
                        written += os.write(fd, line[written:])
                finally:
                    os.close(fd)
            except OSError as exc:
                if not no_room(exc):
                    raise
                self._events_cut = self._events_cut or written > 0
                self.disk_trouble(exc, "dropped_events")
            else:
                self._events_cut = False
