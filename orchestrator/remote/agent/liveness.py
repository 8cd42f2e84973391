"""After READY, whether a server is alive: a Kubernetes-style liveness probe with SGLang's
progress beside it.

Every ``health.interval_s`` one probe of ``/health``; ``health.failures`` failed probes in a row
make the server UNHEALTHY, unless it made progress since the previous probe: SGLang logged a
prefill or decode batch (its ``/health`` runs a generation, which times out behind a long
prefill: a busy server is not a hung one). A dead process is another matter: the supervisor
sees it exit whatever ``/health`` says.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Probe:
    """What one probe changed."""

    failures: int  # failed probes in a row, after this one
    failures_changed: bool
    excused: bool  # failed, but the server made progress: said once per stretch
    unhealthy: bool  # ``needed`` failures in a row without progress


class Liveness:
    def __init__(self, needed: int) -> None:
        self.needed = needed
        self.failures = 0
        self._batches: int | None = None  # batch lines seen at the previous probe
        self._excused = False

    def ready(self, batch_lines: int | None) -> None:
        """READY: progress is counted from here."""
        self._batches = batch_lines
        self.failures = 0
        self._excused = False

    def probe(self, healthy: bool, batch_lines: int | None) -> Probe:
        """One probe's answer and the batch lines logged so far (None: no log to read, as for
        an adopted server, whose progress is unknown)."""
        progressed = batch_lines is not None and batch_lines != self._batches
        self._batches = batch_lines
        before = self.failures
        if healthy or progressed:
            excused = not healthy and not self._excused
            self._excused = not healthy
            self.failures = 0
            return Probe(0, before != 0, excused, unhealthy=False)
        self.failures += 1
        return Probe(self.failures, True, False, unhealthy=self.failures >= self.needed)
