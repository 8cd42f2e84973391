"""orch's reading of smg 1.13.0's worker API, from real answers recorded by the gateway tier's
flags (tests/fixtures/gateway/smg-1.13.0-worker-api.json; tests/gateway runs them live)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.errors import UsageError
from orchestrator.fleet.gateway import (
    GatewayClient,
    decode_smg_worker,
    normal_url,
    parse_circuits,
)
from tests.conftest import REPO

ANSWERS = REPO / "tests" / "fixtures" / "gateway" / "smg-1.13.0-worker-api.json"


def answer(name: str) -> Any:
    return json.loads(ANSWERS.read_text())[name]


def test_a_listed_ready_worker_reads_ready_healthy_with_orchs_labels_and_smgs_own() -> None:
    entry = answer("list_ready")["body"]["workers"][0]
    worker = decode_smg_worker(entry, {})
    assert (worker.url, worker.status, worker.ready, worker.healthy) == (
        "http://127.0.0.1:31101",
        "ready",
        True,
        True,
    )
    assert worker.id == entry["id"]
    assert worker.labels["orch_profile"] == "demo"
    assert worker.labels["orch_replica"] == "0"
    assert worker.labels["version"] == "0.5.23"  # smg's own, from the worker's /server_info
    assert (worker.load, worker.job, worker.circuit) == (0, None, None)


def test_a_draining_worker_is_listed_but_not_ready() -> None:
    worker = decode_smg_worker(answer("list_draining")["body"]["workers"][0], {})
    assert (worker.status, worker.ready) == ("draining", False)


def test_a_pending_worker_carries_its_registration_job() -> None:
    worker = decode_smg_worker(answer("worker_pending")["body"], {})
    assert (worker.status, worker.ready, worker.healthy) == ("pending", False, False)
    assert worker.job == "processing"


def test_circuit_states_come_from_smgs_metrics_by_worker_url() -> None:
    text = (
        "# TYPE smg_worker_cb_state gauge\n"
        'smg_worker_cb_state{worker="http://127.0.0.1:31101"} 0\n'
        'smg_worker_cb_state{worker="http://127.0.0.1:31102/"} 1\n'
        'smg_worker_cb_consecutive_failures{worker="http://127.0.0.1:31101"} 0\n'
    )
    circuits = parse_circuits(text)
    assert circuits == {"http://127.0.0.1:31101": "closed", "http://127.0.0.1:31102": "open"}
    entry = answer("list_ready")["body"]["workers"][0]
    assert decode_smg_worker(entry, circuits).circuit == "closed"


def test_worker_urls_compare_without_case_or_trailing_slash() -> None:
    assert normal_url("HTTP://Node-A:30000/") == normal_url("http://node-a:30000")


@pytest.mark.parametrize(
    ("url", "problem"),
    [
        ("node-a:30000", "expected http://HOST:PORT"),
        ("http://admin:hunter2@node-a:30000", "credentials in a URL are not sent"),
        ("http://node-a:30000/?x=1", "expected a base URL, without"),
    ],
)
def test_a_gateway_url_orch_cannot_use_is_refused_before_anything_is_sent(
    url: str, problem: str
) -> None:
    with pytest.raises(UsageError, match=problem) as refused:
        GatewayClient(url)
    assert "hunter2" not in refused.value.message
