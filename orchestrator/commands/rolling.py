"""``orch restart NAME --rolling``: the replicas behind a gateway, one batch at a time, without
dropping a request.

The order is what the measurement on this machine and the peers' hard lessons say (ROUND3 facts
§2): a replica leaves the gateway BEFORE it is stopped (SGLang's own SIGTERM drains but keeps
accepting new requests, and a worker relaunched at the same URL stays shut out by its open
circuit breaker), waits until it is idle (bounded: SGLang's drain has no time limit), is stopped,
relaunched, checked (READY and its effective configuration), registered again, and must be ready
at the gateway and stay healthy through a soak before the next one goes. The first replica goes
alone (the canary); then ``max_unavailable`` at a time. Before each step, the others must carry
the load: never fewer than N - max_unavailable ready at the gateway.

A relaunch or soak that fails stops the roll: that replica goes back to the launch it ran before
(the agent keeps it), is registered again, the replicas not yet rolled are left untouched, and the
roll ends with the verdict. This module decides the order and the checks; ``ReplicaOps`` does the
work (the gateway, the agents), so the unit tier drives it with a recording double and the gateway
tier with the real smg.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


class ReplicaOps(Protocol):
    """What a roll does to one replica (``i``: its index in the profile's ``replicas:``)."""

    def ready_at_gateway(self) -> frozenset[int]:
        """The replicas the gateway lists as ready and healthy now."""
        ...

    def deregister(self, i: int, timeout: float) -> bool:
        """Remove it from the gateway and wait until the gateway no longer lists it."""
        ...

    def wait_idle(self, i: int, timeout: float) -> tuple[bool, str]:
        """Wait until it has no request running or waiting: (False, why) when cut at
        ``timeout``; (True, how) otherwise (how long it took, or why it was not waited for)."""
        ...

    def stop(self, i: int) -> None: ...

    def launch(self, i: int) -> str | None:
        """Start its new launch and wait for READY and its effective check: None, or why not."""
        ...

    def restore(self, i: int) -> str | None:
        """Start the launch it ran before the roll: None, or why that failed too."""
        ...

    def register(self, i: int, timeout: float) -> bool:
        """Add it to the gateway and wait until the gateway says it is ready."""
        ...

    def soak(self, i: int, seconds: float) -> str | None:
        """Watch it serve for ``seconds``: None, or what went wrong (a crash, errors, aborts)."""
        ...


@dataclass(frozen=True)
class RollOptions:
    max_unavailable: int = 1
    drain_timeout_s: float = 300.0
    soak_s: float = 30.0
    gateway_timeout_s: float = 120.0  # registration and removal each


@dataclass(frozen=True)
class Step:
    """One thing the roll did, for the CLI to show as it happens."""

    replica: int | None
    what: str  # deregistered, drained, drain-cut, stopped, launched, registered, soaked, ...
    detail: str = ""


@dataclass(frozen=True)
class RollResult:
    rolled: tuple[int, ...]  # the replicas now on the new launch
    untouched: tuple[int, ...]  # never taken out of the gateway
    failed: int | None = None  # the replica whose relaunch or soak failed
    verdict: str | None = None  # why the roll stopped (None: it completed)
    restored: bool | None = None  # whether the failed replica runs its previous launch again
    steps: tuple[Step, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return self.verdict is None


class RollRefused(Exception):
    """The roll cannot start or go on safely (too few ready replicas): nothing more is touched."""


def batches(replicas: Sequence[int], max_unavailable: int) -> list[list[int]]:
    """The canary alone, then ``max_unavailable`` at a time."""
    if not replicas:
        return []
    width = max(1, max_unavailable)
    rest = list(replicas[1:])
    return [[replicas[0]], *(rest[i : i + width] for i in range(0, len(rest), width))]


def roll(
    ops: ReplicaOps,
    replicas: Sequence[int],
    options: RollOptions,
    *,
    say: Callable[[Step], None] = lambda step: None,
) -> RollResult:
    """Roll ``replicas`` in order; returns what happened (a failed step is a result, not an
    exception: the caller exits non-zero with its verdict)."""
    run = _Roll(ops, tuple(replicas), options, say)
    return run.go()


class _Roll:
    def __init__(
        self,
        ops: ReplicaOps,
        replicas: tuple[int, ...],
        options: RollOptions,
        say: Callable[[Step], None],
    ) -> None:
        self.ops, self.replicas, self.options, self.say = ops, replicas, options, say
        self.steps: list[Step] = []
        self.rolled: list[int] = []
        self.touched: set[int] = set()  # taken out of the gateway at some point

    def note(self, replica: int | None, what: str, detail: str = "") -> None:
        step = Step(replica, what, detail)
        self.steps.append(step)
        self.say(step)

    def go(self) -> RollResult:
        needed = len(self.replicas) - self.options.max_unavailable
        for batch in batches(self.replicas, self.options.max_unavailable):
            ready = self.ops.ready_at_gateway()
            others = ready - set(batch)
            if len(others) < needed:
                missing = sorted(set(self.replicas) - ready)
                verdict = (
                    f"{len(others)} other replica(s) ready at the gateway, {needed} needed to "
                    f"carry the load while {_names(batch)} restart(s)"
                    + (f"; not ready: {_names(missing)}" if missing else "")
                )
                self.note(None, "refused", verdict)
                return self.result(None, verdict, None)
            failed = self.batch(batch)
            if failed is not None:
                return failed
        return self.result(None, None, None)

    def batch(self, batch: list[int]) -> RollResult | None:
        ops, options = self.ops, self.options
        taken: list[int] = []  # out of the gateway, not yet back
        for i in batch:
            if not ops.deregister(i, options.gateway_timeout_s):
                self.note(i, "deregister-failed", "the gateway still lists it")
                for j in taken:  # the batch's others go back as they were: still running
                    self.register(j)
                return self.result(i, "the gateway did not remove it", None)
            self.note(i, "deregistered")
            taken.append(i)
            self.touched.add(i)
        for i in batch:
            idle, how = ops.wait_idle(i, options.drain_timeout_s)
            if idle:
                self.note(i, "drained", how)
            else:
                self.note(i, "drain-cut", f"{how}: stopped")
            ops.stop(i)
            self.note(i, "stopped")
        for index, i in enumerate(batch):
            problem = ops.launch(i)
            if problem is None:
                self.note(i, "launched")
                if self.register(i):
                    self.rolled.append(i)
                else:
                    problem = "the gateway never marked it ready"
            else:
                self.note(i, "launch-failed", problem)
                problem = f"relaunch failed: {problem}"
            if problem is not None:
                return self.restore(i, problem, stopped=batch[index + 1 :])
        for i in batch:
            problem = ops.soak(i, options.soak_s) if options.soak_s > 0 else None
            if problem is not None:
                self.note(i, "soak-failed", problem)
                self.rolled.remove(i)
                if ops.deregister(i, options.gateway_timeout_s):  # out before it is stopped
                    self.note(i, "deregistered")
                ops.wait_idle(i, options.drain_timeout_s)
                return self.restore(i, f"failed its soak: {problem}", stopped=[])
            if options.soak_s > 0:
                self.note(i, "soaked", f"{options.soak_s:g} s")
        return None

    def register(self, i: int) -> bool:
        if self.ops.register(i, self.options.gateway_timeout_s):
            self.note(i, "registered")
            return True
        self.note(i, "register-failed", "the gateway never said it is ready")
        return False

    def restore(self, failed: int, verdict: str, *, stopped: Sequence[int]) -> RollResult:
        """The failed replica (and the batch's others still stopped) back on the launch they
        ran before the roll, registered again; the rest untouched."""
        self.ops.stop(failed)
        restored = True
        for i in (failed, *stopped):
            problem = self.ops.restore(i)
            if problem is None:
                self.note(i, "restored", "its previous launch")
                self.register(i)
            else:
                self.note(i, "restore-failed", problem)
                restored = restored and i != failed
        return self.result(failed, verdict, restored)

    def result(self, failed: int | None, verdict: str | None, restored: bool | None) -> RollResult:
        untouched = tuple(r for r in self.replicas if r not in self.touched)
        return RollResult(
            tuple(self.rolled), untouched, failed, verdict, restored, tuple(self.steps)
        )


def _names(replicas: Sequence[int]) -> str:
    return ", ".join(f"replica {r}" for r in replicas)
