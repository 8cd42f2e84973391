"""The supervisor's look at its deployment's disk while the server runs: about once a second,
the server output it could not write so far (no room) into state.json, and a state.json that
found no room written again once there is."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .files import DISK_LOOK_S, NO_DISK_TROUBLE
from .output import OutputWatcher


class DiskWatch:
    """The output dropped across the supervisor's runs, and when to look again (monotonic).
    ``disk``: state.json's ``disk`` now; ``record``: writes a new one; ``save``: state.json
    written again when its last write found no room."""

    def __init__(
        self,
        monotonic: Callable[[], float],
        wall: Callable[[], float],
        disk: Callable[[], dict[str, Any] | None],
        record: Callable[[dict[str, Any]], None],
        save: Callable[[], None],
    ) -> None:
        self._monotonic, self._wall = monotonic, wall
        self._disk, self._record, self._save = disk, record, save
        self._dropped_before = 0  # server output dropped in the runs before this one
        self._next_look = 0.0

    def look(self, watcher: OutputWatcher | None) -> None:
        """At most once each DISK_LOOK_S: the dropped output said, else state.json saved."""
        now = self._monotonic()
        if now < self._next_look:
            return
        self._next_look = now + DISK_LOOK_S
        dropped = self._dropped_before + (watcher.dropped_bytes if watcher is not None else 0)
        disk = self._disk() or NO_DISK_TROUBLE
        if watcher is not None and dropped != disk.get("dropped_bytes"):
            error = watcher.write_error or disk.get("last_error")
            self._record(
                dict(disk, dropped_bytes=dropped, last_error=error, last_error_at=self._wall())
            )
        else:
            self._save()

    def run_ended(self, watcher: OutputWatcher) -> None:
        """A run's last look, at once; its dropped output counts on in the total."""
        self._next_look = 0.0
        self.look(watcher)
        self._dropped_before += watcher.dropped_bytes
