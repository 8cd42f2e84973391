"""Deregistering a worker from a real smg while a request runs on it: the gateway stops sending
it new requests at once, the request in flight finishes, and the worker's own /v1/loads (what
``wait_idle`` reads) is how orch knows when it has. What a rolling restart rests on."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from orchestrator.fleet.drain import read_load, wait_idle
from tests.gateway.conftest import Gateway, Worker, generate

SLOW = {"ORCH_STANDIN_TOKEN_S": "0.01"}  # max_new_tokens=800: 8 s, longer than smg's 5 s settle


def test_a_deregistered_worker_finishes_its_request_in_flight_while_the_other_takes_new_ones(
    gateway: Gateway, start_worker: Callable[..., Worker]
) -> None:
    first, second = start_worker(env=SLOW), start_worker(env=SLOW)
    client = gateway.client()
    for worker in (first, second):
        client.register(worker.url, {"orch_replica": worker.url[-5:]})
        client.wait_ready(worker.url, timeout_s=20)

    long_status: list[int] = []
    long_request = threading.Thread(
        target=lambda: long_status.append(generate(gateway.url, max_new_tokens=800)),
        daemon=True,
    )
    long_request.start()
    deadline = time.monotonic() + 10
    while read_load(first.url, api_key=None)[0] + read_load(second.url, api_key=None)[0] == 0:
        assert time.monotonic() < deadline, "the request never reached a worker"
        time.sleep(0.05)
    holder, other = (first, second) if read_load(first.url, api_key=None)[0] else (second, first)
    assert read_load(holder.url, api_key=None) == (1, 0)

    assert client.deregister(holder.url)
    short = [generate(gateway.url) for _ in range(6)]  # while smg drains the holder
    client.wait_gone(holder.url, timeout_s=15)
    assert short == [200] * 6
    assert read_load(other.url, api_key=None) == (0, 0)
    assert '"POST /generate HTTP/1.1" 200' in other.process.log.read_text()

    drained = wait_idle(holder.url, timeout_s=15, poll_s=0.1)
    long_request.join(15)
    assert drained.idle
    assert long_status == [200]  # smg removed the worker without cutting its request
    assert [w.url for w in client.workers()] == [other.url]


def test_loads_of_a_worker_with_an_api_key_need_the_key(
    start_worker: Callable[..., Worker],
) -> None:
    worker = start_worker(api_key="worker-key-1")
    assert read_load(worker.url, api_key="worker-key-1") == (0, 0)
    refused = wait_idle(worker.url, timeout_s=0.2, poll_s=0.1)
    assert not refused.idle
    assert refused.problem is not None
    assert "HTTP 401" in refused.problem
    assert "worker-key-1" not in refused.problem
