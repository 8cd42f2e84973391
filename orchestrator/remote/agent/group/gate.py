"""SGLang's gated launch in a launch group (--gated-launch-port, 0.5.19+): every rank waits at
the gate after the rendezvous, before its large GPU allocations; the coordinator gathers which
global ranks each node logged waiting (GateProgress), activates the gate once all are there
(open_gate), or names what each node lacks when they are not there in time."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from ..spec import GateSpec, GroupSpec
from .control import connect_failure
from .failure import GROUP_RENDEZVOUS_TIMEOUT


@dataclass(frozen=True)
class GateProgress:
    """One generation's gated launch as the coordinator sees it: which global ranks each node
    reported at the gate, and how it ended. Replaced on every change (the coordinator's
    connection threads and its supervisor's share it)."""

    gate: GateSpec
    generation: int
    started: float  # monotonic: the generation's start, where gate.timeout_s counts from
    arrived: tuple[frozenset[int], ...]  # by group rank: its global ranks logged waiting
    activated_at: float | None = None  # wall clock
    activated_after_s: float | None = None  # from the generation's start
    failed: str | None = None  # GROUP_RENDEZVOUS_TIMEOUT or GROUP_GATE_UNREACHABLE

    @staticmethod
    def begin(gate: GateSpec, generation: int, started: float) -> GateProgress:
        return GateProgress(gate, generation, started, tuple(frozenset() for _ in gate.node_ranks))

    def arrive(self, rank: int, ranks: Iterable[int]) -> GateProgress:
        """With ``ranks`` (of ``range(world_size)``) at the gate on node ``rank``: ``self`` when
        nothing is new."""
        if not 0 <= rank < len(self.arrived):
            return self
        known = self.arrived[rank]
        now = known | {r for r in ranks if 0 <= r < self.gate.world_size}
        if now == known:
            return self
        return replace(
            self, arrived=(*self.arrived[:rank], frozenset(now), *self.arrived[rank + 1 :])
        )

    @property
    def waiting(self) -> frozenset[int]:
        return frozenset().union(*self.arrived)

    @property
    def complete(self) -> bool:
        return len(self.waiting) == self.gate.world_size

    @property
    def settled(self) -> bool:
        return self.activated_at is not None or self.failed is not None

    def missing(self, rank: int) -> list[int]:
        """Node ``rank``'s global ranks not at the gate (reported by any node)."""
        waiting = self.waiting
        return [r for r in self.gate.node_ranks[rank] if r not in waiting]

    def view(self) -> dict[str, Any]:
        """state.json's ``group.gate`` on the coordinator."""
        waiting = self.waiting
        if self.activated_at is not None:
            status = "activated"
        elif self.failed == GROUP_RENDEZVOUS_TIMEOUT:
            status = "timed-out"
        elif self.failed is not None:
            status = "unreachable"
        else:
            status = "waiting"
        return {
            "generation": self.generation,
            "url": self.gate.url,
            "world_size": self.gate.world_size,
            "timeout_s": self.gate.timeout_s,
            "status": status,
            "waiting": sorted(waiting),
            "missing": [r for r in range(self.gate.world_size) if r not in waiting],
            "by_node": {str(rank): sorted(ranks) for rank, ranks in enumerate(self.arrived)},
            "activated_at": self.activated_at,
            "activated_after_s": self.activated_after_s,
        }


def rank_runs(ranks: Iterable[int]) -> str:
    """``8-15``, ``0, 2-3``: ranks as runs."""
    runs: list[list[int]] = []
    for rank in sorted(set(ranks)):
        if runs and rank == runs[-1][1] + 1:
            runs[-1][1] = rank
        else:
            runs.append([rank, rank])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def rendezvous_shortfall(progress: GateProgress, group: GroupSpec) -> tuple[int, str]:
    """The group did not reach the gate in time: the first node with ranks missing (never rank
    0 when its ranks are all there) and the message naming what each node lacks."""
    short: list[str] = []
    whole: list[str] = []
    first: int | None = None
    for rank, ranks in enumerate(progress.gate.node_ranks):
        missing = progress.missing(rank)
        name = group.name(rank)
        if not missing:
            whole.append(f"{name} has all")
            continue
        first = rank if first is None else first
        if len(missing) == len(ranks):
            short.append(f"{name} has none of its ranks {rank_runs(ranks)} at the gate")
        else:
            short.append(
                f"{name} lacks {rank_runs(missing)} of its ranks {rank_runs(ranks)} at the gate"
            )
    message = f"the group did not rendezvous within {progress.gate.timeout_s:g} s: " + "; ".join(
        short + whole
    )
    return (0 if first is None else first), message


def open_gate(url: str, timeout: float) -> str | None:
    """POST the activation to SGLang's gate server: None once it answered 2xx, else why not.
    Never through a proxy: the gate is on this node."""
    import http.client
    import urllib.error
    import urllib.request

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    request = urllib.request.Request(url, data=b"", method="POST")  # noqa: S310 - GateSpec.url
    try:
        with opener.open(request, timeout=timeout) as response:
            response.read(4096)
            return None
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except urllib.error.URLError as exc:
        reason = exc.reason
        return connect_failure(reason, timeout) if isinstance(reason, OSError) else str(reason)
    except OSError as exc:  # a timeout reading the answer, a reset
        return connect_failure(exc, timeout)
    except http.client.HTTPException as exc:  # it closed without an answer, or spoke no HTTP
        return f"no HTTP answer ({type(exc).__name__}: {exc})"
