"""orch's gateway client (orchestrator/fleet/gateway.py) against a real smg 1.13.0 and real
stand-in workers, over real HTTP; and the legacy dialect against a real sglang-router 0.1.9."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from orchestrator.errors import (
    ExitCode,
    GatewayAuthError,
    GatewayUnreachable,
    GatewayWorkerNotGone,
    GatewayWorkerNotReady,
)
from orchestrator.fleet.gateway import GatewayClient
from tests.e2e.conftest import free_port
from tests.gateway.conftest import Gateway, Worker, generate

LABELS = {"orch_profile": "demo", "orch_replica": "0", "orch_commit": "0d13e15"}


def test_register_lists_the_worker_ready_and_requests_through_the_gateway_reach_it(
    gateway: Gateway, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    client = gateway.client()
    assert client.workers() == ()
    assert client.dialect == "smg"
    assert generate(gateway.url) == 404  # no worker yet: smg 1.13.0 knows no model to route to

    registration = client.register(worker.url, LABELS)
    ready = client.wait_ready(worker.url, timeout_s=20)

    assert ready.id == registration.id
    assert (ready.url, ready.status, ready.ready, ready.healthy) == (
        worker.url,
        "ready",
        True,
        True,
    )
    assert ready.circuit == "closed"  # read from smg's loopback metrics listener
    assert {k: ready.labels[k] for k in LABELS} == LABELS
    assert ready.labels["version"] == "0.5.23"  # smg read the stand-in's /server_info itself
    assert [w.url for w in client.workers()] == [worker.url]
    assert generate(gateway.url) == 200
    # the worker's access line is written after the answer: look until it is there
    deadline = time.monotonic() + 10
    while '"POST /generate HTTP/1.1" 200' not in worker.process.log.read_text():
        assert time.monotonic() < deadline, worker.process.log.read_text()[-2000:]
        time.sleep(0.05)


def test_deregister_drains_then_the_gateway_lets_the_worker_go(
    gateway: Gateway, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    client = gateway.client()
    client.register(worker.url, LABELS)
    client.wait_ready(worker.url, timeout_s=20)

    assert client.deregister(worker.url) is True
    draining = client.worker(worker.url)
    assert draining is not None
    assert draining.status == "draining"
    assert not draining.ready
    client.wait_gone(worker.url, timeout_s=15)  # smg's drain settle time is 5 s

    assert client.workers() == ()
    assert client.worker(worker.url) is None
    assert client.deregister(worker.url) is False  # not known any more: nothing to do
    assert worker.status("/health") == 200  # deregistering never touches the worker itself


def test_a_wrong_or_missing_key_is_refused_with_a_clear_error_that_never_shows_the_key(
    gateway: Gateway,
) -> None:
    wrong = GatewayClient(gateway.url, api_key="not-the-key-7f3a", key_name="router.api_key")
    with pytest.raises(GatewayAuthError) as refused:
        wrong.workers()
    assert refused.value.exit_code == ExitCode.AUTH
    assert "HTTP 401" in refused.value.message
    assert "router.api_key was refused" in refused.value.message
    assert "not-the-key-7f3a" not in f"{refused.value.message} {refused.value.hint}"

    with pytest.raises(GatewayAuthError, match=r"router.api_key is not set"):
        GatewayClient(gateway.url).register("http://127.0.0.1:1", LABELS)


def test_a_gateway_url_that_does_not_answer_is_a_connect_error() -> None:
    client = GatewayClient(f"http://127.0.0.1:{free_port()}", api_key="k", call_timeout_s=2)
    with pytest.raises(GatewayUnreachable) as unreachable:
        client.workers()
    assert unreachable.value.exit_code == ExitCode.CONNECT
    assert unreachable.value.message.startswith("cannot reach the gateway at http://127.0.0.1:")
    assert "smg launch --port" in (unreachable.value.hint or "")


def test_a_worker_the_gateway_cannot_reach_is_never_ready_and_the_error_says_what_it_said_last(
    gateway: Gateway,
) -> None:
    client = gateway.client(poll_s=0.2)
    nowhere = f"http://127.0.0.1:{free_port()}"
    registration = client.register(nowhere, LABELS)
    with pytest.raises(GatewayWorkerNotReady) as never:
        client.wait_ready(nowhere, timeout_s=3)
    assert never.value.exit_code == ExitCode.GATEWAY
    assert f"did not mark {nowhere} ready within 3 s" in never.value.message
    assert "status pending" in never.value.last  # smg's registration job still retrying
    assert "registration processing" in never.value.last
    # smg 1.13.0 cannot take back a registration still running: its removal job fails with
    # "not found" and the registration goes on retrying; orch says so rather than "gone"
    assert client.deregister(nowhere) is True
    with pytest.raises(GatewayWorkerNotGone, match="while it is still registering it") as kept:
        client.wait_gone(nowhere, timeout_s=15)
    assert "RemoveWorker" not in kept.value.message  # the job's own words, not its type
    assert "not found" in kept.value.message
    assert gateway.get(f"/workers/{registration.id}")["job_status"]["job_type"] == "RemoveWorker"


def test_a_worker_that_dies_is_marked_down_by_the_gateway(
    gateway: Gateway, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker()
    client = gateway.client()
    client.register(worker.url, LABELS)
    client.wait_ready(worker.url, timeout_s=20)
    worker.process.stop()
    deadline = time.monotonic() + 15
    seen = client.worker(worker.url)
    while seen is not None and seen.healthy and time.monotonic() < deadline:
        time.sleep(0.3)
        seen = client.worker(worker.url)
    assert seen is not None
    assert seen.healthy is False
    assert not seen.ready


def test_the_legacy_router_is_detected_and_spoken_to_by_its_own_names(
    start_legacy_router: Callable[[], Gateway], start_worker: Callable[..., Worker]
) -> None:
    router = start_legacy_router()
    worker = start_worker()
    client = GatewayClient(router.url)
    assert client.dialect == "legacy"
    assert client.workers() == ()

    client.register(worker.url, LABELS)  # /add_worker returns once the worker is healthy
    ready = client.wait_ready(worker.url, timeout_s=5)
    assert (ready.id, ready.url, ready.ready, ready.healthy) == (worker.url, worker.url, True, None)
    assert router.get("/list_workers") == {"urls": [worker.url]}
    assert generate(router.url) == 200

    assert client.deregister(worker.url) is True
    client.wait_gone(worker.url, timeout_s=5)
    assert router.get("/list_workers") == {"urls": []}


def test_the_legacy_router_refuses_a_worker_it_cannot_reach_with_its_reason(
    start_legacy_router: Callable[[], Gateway],
) -> None:
    router = start_legacy_router()  # started with --worker-startup-timeout-secs 10
    client = GatewayClient(router.url)
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(GatewayWorkerNotReady, match=r"did not add .*HTTP 400.*Timeout"):
        client.register(nowhere)


def test_a_worker_with_its_own_api_key_is_registered_with_it_and_served_through_the_gateway(
    gateway: Gateway, start_worker: Callable[..., Worker]
) -> None:
    worker = start_worker(api_key="worker-key-2")
    client = gateway.client()
    client.register(worker.url, LABELS, api_key="worker-key-2")
    ready = client.wait_ready(worker.url, timeout_s=20)
    assert ready.labels["version"] == "0.5.23"  # smg read /server_info with the worker's key
    assert generate(gateway.url) == 200  # and sends it with each request
    assert '"POST /generate HTTP/1.1" 200' in worker.process.log.read_text()
    assert '"POST /generate HTTP/1.1" 401' not in worker.process.log.read_text()
