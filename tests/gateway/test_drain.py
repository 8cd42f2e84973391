"""The stand-in drains after SIGTERM as SGLang 0.5.23 does, its ``/v1/loads`` counts what is in
flight, and orch's ``wait_idle`` (orchestrator/fleet/drain.py) reads it; real processes, real
HTTP (no gateway needed)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from orchestrator.fleet.drain import read_load, wait_idle
from tests.e2e.conftest import free_port
from tests.gateway.conftest import Worker, generate

# Every requested token takes 10 ms: max_new_tokens=8 answers in 0.08 s, 400 holds 4 s.
SLOW = {"ORCH_STANDIN_TOKEN_S": "0.01"}


def _in_background(call: Callable[[], int]) -> tuple[threading.Thread, list[int]]:
    results: list[int] = []
    thread = threading.Thread(target=lambda: results.append(call()), daemon=True)
    thread.start()
    return thread, results


def _until(check: Callable[[], bool], timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_loads_count_requests_in_flight_and_wait_idle_ends_when_they_finish(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(env=SLOW)
    assert read_load(worker.url, api_key=None) == (0, 0)
    held = [_in_background(lambda: generate(worker.url, max_new_tokens=300)) for _ in range(2)]
    _until(lambda: read_load(worker.url, api_key=None) == (2, 0))
    load = worker.loads()["loads"][0]
    assert (load["num_running_reqs"], load["num_waiting_reqs"]) == (2, 0)

    busy = wait_idle(worker.url, timeout_s=0.5, poll_s=0.1)
    assert (busy.idle, busy.running, busy.waiting, busy.problem) == (False, 2, 0, None)
    assert busy.waited_s >= 0.5

    done = wait_idle(worker.url, timeout_s=15, poll_s=0.1)
    assert done.idle
    assert (done.running, done.waiting) == (0, 0)
    for thread, results in held:
        thread.join(5)
        assert results == [200]


def test_requests_beyond_max_running_requests_are_waiting(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(env=SLOW)
    cap = worker.loads()["loads"][0]["max_running_requests"]
    held = [
        _in_background(lambda: generate(worker.url, max_new_tokens=300)) for _ in range(cap + 2)
    ]
    _until(lambda: read_load(worker.url, api_key=None) == (cap, 2))
    for thread, _ in held:
        thread.join(10)


def test_sigterm_drains_in_flight_requests_keeps_serving_and_health_says_503(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(env=SLOW)
    held, results = _in_background(lambda: generate(worker.url, max_new_tokens=300))  # 3 s
    _until(lambda: read_load(worker.url, api_key=None) == (1, 0))

    worker.terminate()
    _until(lambda: worker.status("/health") == 503)
    assert worker.status("/ready") == 503
    assert worker.process.popen.poll() is None  # still draining the held request
    assert generate(worker.url) == 200  # SGLang 0.5.23 does not refuse new requests meanwhile
    held.join(10)
    assert results == [200]  # the request in flight was answered, not cut
    worker.process.popen.wait(timeout=10)
    log = worker.process.log.read_text()
    assert "Draining requests and shutting down..." in log
    assert "Gracefully exiting... Remaining number of requests 1. Remaining requests" in log
    assert (
        "Gracefully exiting... Remaining number of requests 0. Remaining requests remaining_rids=[]."
        in log
    )


def test_a_drain_that_never_ends_is_cut_by_wait_idle_at_its_bound(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(env={"ORCH_STANDIN_TOKEN_S": "1"})
    _in_background(lambda: generate(worker.url, max_new_tokens=600, timeout_s=700))
    _until(lambda: read_load(worker.url, api_key=None) == (1, 0))
    worker.terminate()
    cut = wait_idle(worker.url, timeout_s=1.5, poll_s=0.2)
    assert (cut.idle, cut.running) == (False, 1)
    assert cut.waited_s >= 1.5
    assert worker.process.popen.poll() is None  # SGLang's drain has no bound of its own


def test_wait_idle_on_a_worker_that_does_not_answer_says_so() -> None:
    gone = wait_idle(f"http://127.0.0.1:{free_port()}", timeout_s=0.3, poll_s=0.1)
    assert not gone.idle
    assert gone.running is None
    assert gone.problem is not None
    assert "does not answer" in gone.problem


def test_loads_in_0_5_11s_shape_are_read_alike(start_worker: Callable[..., Worker]) -> None:
    worker = start_worker(env={**SLOW, "ORCH_STANDIN_VERSION": "0.5.11"})
    thread, results = _in_background(lambda: generate(worker.url, max_new_tokens=200))
    _until(lambda: read_load(worker.url, api_key=None) == (1, 0))
    assert worker.loads()["aggregate"]["total_running_reqs"] == 1
    thread.join(10)
    assert results == [200]
    assert wait_idle(worker.url, timeout_s=5, poll_s=0.1).idle
