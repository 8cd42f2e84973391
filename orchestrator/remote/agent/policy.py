"""The restart policy in systemd's words: ``on-failure``/``always``/``no``, a delay in
exponential steps up to a cap, a start limit (N starts within T seconds, then FATAL)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from .verdict import ExitVerdict


@dataclass(frozen=True)
class RestartPolicy:
    mode: str = "on-failure"  # no | on-failure | always
    delay_s: float = 5.0
    multiplier: float = 2.0
    max_delay_s: float = 300.0
    start_limit: int = 5
    start_limit_interval_s: float = 600.0

    def delay(self, consecutive_failures: int) -> float:
        """Delay before the next start after ``consecutive_failures`` failures (>= 1)."""
        delay = self.delay_s
        for _ in range(max(consecutive_failures - 1, 0)):  # stops growing at the cap: a crash
            if delay >= self.max_delay_s:  # loop of any length never overflows a float
                break
            delay *= self.multiplier
        return float(min(delay, self.max_delay_s))

    def wants_restart(self, verdict: ExitVerdict, returncode: int) -> bool:
        if verdict.deterministic or self.mode == "no":
            return False
        if self.mode == "always":
            return True
        return returncode != 0

    def start_limit_hit(self, start_times: Sequence[float], now: float) -> bool:
        recent = [t for t in start_times if now - t < self.start_limit_interval_s]
        return len(recent) >= self.start_limit
