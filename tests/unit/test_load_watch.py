"""The agent's reading of /v1/loads (remote/agent/load_watch.py): both releases' shapes, the
figures kept, a failed read beside the last figures, the supervisor's sampling interval, and
what ``status`` answers from them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from orchestrator.remote.agent.load_watch import (
    LoadWatch,
    sample,
    server_api_key,
    serves_loads,
    status_load,
    summarize,
)
from tests.conftest import REPO

pytestmark = pytest.mark.unit

LOADS = REPO / "tests" / "fixtures" / "v1-loads"


def _answer(name: str) -> Any:
    return json.loads((LOADS / name).read_text())


def test_summarize_keeps_each_dp_rank_of_0_5_23_sorted_with_its_speculative_figures() -> None:
    kept = summarize(_answer("0.5.23-dp2-spec.json"))
    assert isinstance(kept, list)
    assert [rank["dp_rank"] for rank in kept] == [0, 1]
    assert kept[0] == {
        "dp_rank": 0,
        "num_running_reqs": 12,
        "num_waiting_reqs": 3,
        "num_used_tokens": 168000,
        "max_total_num_tokens": 400000,
        "max_running_requests": 48,
        "token_usage": 0.42,
        "gen_throughput": 1234.5,
        "cache_hit_rate": 0.7,
        "utilization": 0.25,
        "speculative": {"accept_length": 2.1, "accept_rate": 0.55},
    }
    # what status never shows is not carried (memory is memory_loads', once at READY)
    assert "memory" not in kept[1]
    assert "decode_moments" not in kept[1]


def test_summarize_reads_0_5_11_without_dp_rank_or_speculative_section() -> None:
    kept = summarize(_answer("0.5.11-single.json"))
    assert isinstance(kept, list)
    (only,) = kept
    assert only["dp_rank"] == 0  # 0.5.11 without DP says none: the load's place
    assert only["num_running_reqs"] == 7
    assert only["num_waiting_reqs"] == 2
    assert only["max_running_requests"] == 1024
    assert "speculative" not in only


@pytest.mark.parametrize(
    "document", [None, [], {"loads": "x"}, {"detail": "Invalid include sections"}]
)
def test_summarize_says_why_when_the_answer_has_no_loads(document: Any) -> None:
    assert summarize(document) == "no loads in the answer"


def test_summarize_drops_figures_that_are_not_numbers() -> None:
    kept = summarize({"loads": [{"dp_rank": 0, "token_usage": "high", "gen_throughput": True}]})
    assert kept == [{"dp_rank": 0}]


def test_server_api_key_is_read_from_either_spelling() -> None:
    assert server_api_key(["sglang", "serve", "--api-key", "k 1"]) == "k 1"
    assert server_api_key(["sglang", "--api-key=k2", "--port", "1"]) == "k2"
    assert server_api_key(["sglang", "--port", "1"]) is None


def test_a_failed_sample_keeps_the_last_figures_and_their_time() -> None:
    first = sample(
        None, {"loads": [{"dp_rank": 0, "num_running_reqs": 2}], "version": "0.5.23"}, 100.0
    )
    assert first["at"] == 100.0
    assert first["error"] is None
    failed = sample(first, {"error": "/v1/loads: no answer within 1 s"}, 115.0)
    assert failed["loads"] == first["loads"]
    assert failed["at"] == 100.0
    assert failed["error"] == "/v1/loads: no answer within 1 s"
    assert failed["error_at"] == 115.0
    again = sample(failed, {"loads": [], "version": None}, 130.0)
    assert again["at"] == 130.0
    assert again["error"] is None


def test_load_watch_samples_at_ready_then_every_interval_and_again_at_once_after_a_restart() -> (
    None
):
    reads: list[float] = []
    recorded: list[dict[str, Any]] = []
    now = [0.0]

    def read() -> dict[str, Any]:
        reads.append(now[0])
        return {"loads": [{"dp_rank": 0, "num_running_reqs": len(reads)}]}

    watch = LoadWatch(read, recorded.append, lambda: 1000.0 + now[0], interval_s=15.0)
    for tick in range(40):
        now[0] = float(tick)
        watch.look(now[0], ready=tick < 31 or tick >= 35)  # not READY from 31 s to 35 s
    assert reads == [0.0, 15.0, 30.0, 35.0]
    assert recorded[-1]["loads"] == [{"dp_rank": 0, "num_running_reqs": 4}]
    assert recorded[-1]["at"] == 1035.0


def test_status_load_live_figures_are_marked_live_and_fresh() -> None:
    live = {"loads": [{"dp_rank": 0}], "version": "0.5.23"}
    shown = status_load({"at": 10.0, "loads": []}, live, 50.0)
    assert shown == {
        "at": 50.0,
        "age_s": 0.0,
        "live": True,
        "loads": [{"dp_rank": 0}],
        "version": "0.5.23",
        "error": None,
    }


def test_status_load_recorded_figures_carry_their_age_and_a_failed_live_read() -> None:
    recorded = {"at": 100.0, "loads": [{"dp_rank": 0}], "error": None, "error_at": None}
    shown = status_load(recorded, None, 160.0)
    assert shown is not None
    assert shown["live"] is False
    assert shown["age_s"] == 60.0
    assert shown["error"] is None
    assert "error_at" not in shown
    busy = status_load(recorded, {"error": "/v1/loads: no answer within 1 s"}, 160.0)
    assert busy is not None
    assert busy["loads"] == [{"dp_rank": 0}]
    assert busy["error"] == "/v1/loads: no answer within 1 s"


def test_status_load_is_none_without_figures_or_a_read() -> None:
    assert status_load(None, None, 1.0) is None
    failed = status_load(None, {"error": "refused"}, 1.0)
    assert failed == {"at": None, "loads": [], "error": "refused", "age_s": None, "live": False}


def test_a_groups_rank_above_0_is_never_asked_for_loads() -> None:
    assert serves_loads({"group": {"rank": 0, "nnodes": 2}})
    assert serves_loads({})
    assert not serves_loads({"group": {"rank": 1, "nnodes": 2}})
    reads: list[float] = []

    def read() -> dict[str, Any]:
        reads.append(0.0)
        return {"loads": []}

    watch = LoadWatch(read, lambda _: None, lambda: 0.0, serves=lambda: False)
    watch.look(0.0, ready=True)
    assert reads == []
