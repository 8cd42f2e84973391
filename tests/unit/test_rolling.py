"""The rolling restart's order and its refusals, driven through a recording double of the
gateway and the agents (the real smg and stand-in replicas: tests/gateway/)."""

from __future__ import annotations

import pytest

from orchestrator.commands.rolling import RollOptions, batches, roll

OPTIONS = RollOptions(max_unavailable=1, drain_timeout_s=5, soak_s=1, gateway_timeout_s=5)


class Fleet:
    """N replicas behind a gateway: what is registered, what runs which launch, every call in
    order; after each call, the replicas ready at the gateway are checked against the floor."""

    def __init__(self, n: int, *, floor: int) -> None:
        self.registered = set(range(n))
        self.running: dict[int, str | None] = dict.fromkeys(range(n), "old")
        self.calls: list[tuple[str, int]] = []
        self.floor = floor
        self.lowest = n
        self.fail_launch: set[int] = set()
        self.fail_soak: set[int] = set()
        self.busy: set[int] = set()  # never goes idle

    def _record(self, what: str, i: int) -> None:
        self.calls.append((what, i))
        self.lowest = min(self.lowest, len(self.ready_at_gateway()))

    def ready_at_gateway(self) -> frozenset[int]:
        return frozenset(i for i in self.registered if self.running.get(i) is not None)

    def deregister(self, i: int, timeout: float) -> bool:
        self.registered.discard(i)
        self._record("deregister", i)
        return True

    def wait_idle(self, i: int, timeout: float) -> tuple[bool, str]:
        self._record("wait_idle", i)
        if i in self.busy:
            return False, f"1 request(s) still in flight after {timeout:g} s"
        return True, "0.1 s"

    def stop(self, i: int) -> None:
        assert i not in self.registered, f"replica {i} stopped while the gateway routes to it"
        self.running[i] = None
        self._record("stop", i)

    def launch(self, i: int) -> str | None:
        self._record("launch", i)
        if i in self.fail_launch:
            return "SGLang exited: config-error"
        self.running[i] = "new"
        return None

    def restore(self, i: int) -> str | None:
        self.running[i] = "old"
        self._record("restore", i)
        return None

    def register(self, i: int, timeout: float) -> bool:
        assert self.running.get(i) is not None, f"replica {i} registered while not running"
        self.registered.add(i)
        self._record("register", i)
        return True

    def soak(self, i: int, seconds: float) -> str | None:
        self._record("soak", i)
        return "2 aborted requests" if i in self.fail_soak else None


def test_each_replica_leaves_the_gateway_before_it_stops_and_returns_after_ready() -> None:
    fleet = Fleet(2, floor=1)
    result = roll(fleet, [0, 1], OPTIONS)
    assert result.ok
    assert result.rolled == (0, 1)
    per_replica = ["deregister", "wait_idle", "stop", "launch", "register", "soak"]
    assert fleet.calls == [(what, 0) for what in per_replica] + [(what, 1) for what in per_replica]
    assert fleet.running == {0: "new", 1: "new"}
    assert fleet.registered == {0, 1}
    assert fleet.lowest == 1  # never fewer than N - 1 ready


def test_too_few_ready_replicas_refuse_the_roll_before_anything_is_touched() -> None:
    fleet = Fleet(2, floor=1)
    fleet.registered.discard(1)  # replica 1 is not ready at the gateway
    result = roll(fleet, [0, 1], OPTIONS)
    assert not result.ok
    assert "0 other replica(s) ready at the gateway, 1 needed" in (result.verdict or "")
    assert "not ready: replica 1" in (result.verdict or "")
    assert fleet.calls == []
    assert result.untouched == (0, 1)


def test_a_failed_relaunch_restores_that_replica_and_leaves_the_rest_untouched() -> None:
    fleet = Fleet(3, floor=2)
    fleet.fail_launch.add(0)
    result = roll(fleet, [0, 1, 2], OPTIONS)
    assert not result.ok
    assert result.failed == 0
    assert result.restored is True
    assert result.verdict == "relaunch failed: SGLang exited: config-error"
    assert result.untouched == (1, 2)
    assert fleet.running == {0: "old", 1: "old", 2: "old"}
    assert fleet.registered == {0, 1, 2}
    assert ("restore", 0) in fleet.calls
    assert fleet.calls[-1] == ("register", 0)


def test_a_failed_soak_restores_the_replica_after_the_canary_rolled() -> None:
    fleet = Fleet(2, floor=1)
    fleet.fail_soak.add(1)
    result = roll(fleet, [0, 1], OPTIONS)
    assert result.rolled == (0,)
    assert result.failed == 1
    assert result.verdict == "failed its soak: 2 aborted requests"
    assert fleet.running == {0: "new", 1: "old"}


def test_a_drain_that_never_ends_is_cut_and_said() -> None:
    fleet = Fleet(2, floor=1)
    fleet.busy.add(0)
    result = roll(fleet, [0, 1], OPTIONS)
    assert result.ok
    cut = [step for step in result.steps if step.what == "drain-cut"]
    assert [(s.replica, s.detail) for s in cut] == [
        (0, "1 request(s) still in flight after 5 s: stopped")
    ]


def test_the_canary_goes_alone_then_max_unavailable_at_a_time() -> None:
    assert batches([0, 1, 2, 3], 2) == [[0], [1, 2], [3]]
    assert batches([0, 1, 2], 1) == [[0], [1], [2]]
    fleet = Fleet(4, floor=2)
    result = roll(fleet, [0, 1, 2, 3], RollOptions(max_unavailable=2, soak_s=0))
    assert result.ok
    assert fleet.lowest == 2
    assert [i for what, i in fleet.calls if what == "stop"] == [0, 1, 2, 3]
    assert ("soak", 0) not in fleet.calls  # no soak asked


@pytest.mark.parametrize("failing", [1, 2])
def test_a_failure_inside_a_batch_restores_the_batchs_stopped_replicas(failing: int) -> None:
    fleet = Fleet(4, floor=2)
    fleet.fail_launch.add(failing)
    result = roll(fleet, [0, 1, 2, 3], RollOptions(max_unavailable=2, soak_s=0))
    assert result.failed == failing
    assert result.untouched == (3,)
    assert all(fleet.running[i] is not None for i in range(4))  # nothing left stopped
    assert fleet.registered == {0, 1, 2, 3}
