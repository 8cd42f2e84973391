"""``orch status --load``'s columns, the DP ranks under the table and ``--json``'s ``load``,
from the agent's answer as decoded (fleet/protocol/status.py) through to the text."""

from __future__ import annotations

from typing import Any

import pytest

from orchestrator.cli.show.status import status_json, status_table
from orchestrator.cli.show.status_load import LOAD_HEADER, load_cells, rate
from orchestrator.commands.ops import StatusRow
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.sglang.loads import BY_MAMBA, Cap

pytestmark = pytest.mark.unit

RANK0 = {
    "dp_rank": 0,
    "num_running_reqs": 12,
    "num_waiting_reqs": 3,
    "max_total_num_tokens": 400000,
    "max_running_requests": 48,
    "token_usage": 0.42,
    "gen_throughput": 1234.5,
    "cache_hit_rate": 0.7,
    "speculative": {"accept_length": 2.1, "accept_rate": 0.55},
}
RANK1 = {
    **RANK0,
    "dp_rank": 1,
    "num_running_reqs": 5,
    "num_waiting_reqs": 0,
    "token_usage": 0.075,
    "gen_throughput": 410.0,
    "cache_hit_rate": 0.5,
    "speculative": {"accept_length": 2.5},
}


def _state(load: dict[str, Any] | None, state: str = "READY") -> dict[str, Any]:
    document: dict[str, Any] = {
        "protocol": 1,
        "deployed": True,
        "state": state,
        "pid": 4242 if state == "READY" else None,
        "port": 30000,
        "run_id": "0001-x",
        "agent_alive": state == "READY",
        "server_alive": state == "READY",
        "meta": {
            "memory_plan": {"max_running_requests": 48.0},
            "max_running_requests_by": "mamba slots: max_mamba_cache_size 48 // 1 slots per request",
        },
    }
    if load is not None:
        document["load"] = load
    return document


def _row(load: dict[str, Any] | None, state: str = "READY", cap: Cap | None = None) -> StatusRow:
    return StatusRow("qwen", "box", decode_state(_state(load, state)), cap=cap)


def test_a_live_load_fills_the_columns_summed_over_dp_ranks() -> None:
    load = {"live": True, "at": 1000.0, "age_s": 0.0, "loads": [RANK0, RANK1], "version": "0.5.23"}
    row = _row(load, cap=Cap(48, BY_MAMBA))
    assert load_cells(row) == ("17/3", "42%", "1,645", "60%", "2.30", "48 (mamba slots)", "live")
    text = status_table([row], load=True)
    header = text.splitlines()[0].split()
    assert header[header.index("RUN") + 1 : header.index("RUN") + 8] == list(LOAD_HEADER)
    # each DP rank listed under the table
    assert (
        "qwen DP0: run/wait 12/3, KV 42%, 1,235 tok/s, hit 70%, accept 2.10, max running 48"
        in text.splitlines()
    )
    assert "qwen DP1: run/wait 5/0, KV 8%, 410 tok/s, hit 50%, accept 2.50, max running 48" in text


def test_a_stopped_server_shows_its_last_figures_with_their_age() -> None:
    load = {"live": False, "at": 1000.0, "age_s": 190.0, "loads": [RANK0], "error": None}
    row = _row(load, state="EXITED")
    cells = load_cells(row)
    assert cells[0] == "12/3"
    assert cells[-1] == "3m ago"
    assert cells[-2] == "-"  # no cap computed for this row


def test_a_failed_read_is_said_under_the_table_beside_the_last_figures() -> None:
    load = {
        "live": False,
        "at": 1000.0,
        "age_s": 12.0,
        "loads": [RANK0],
        "error": "/v1/loads: no answer within 1 s",
    }
    text = status_table([_row(load)], load=True)
    assert "qwen: load not read: /v1/loads: no answer within 1 s (the last figures shown)" in text


def test_without_figures_the_columns_say_dash_and_without_load_there_are_none() -> None:
    row = _row(None)
    assert load_cells(row) == ("-",) * 7
    assert "RUN/WAIT" not in status_table([row])
    assert "RUN/WAIT" in status_table([row], load=True)


def test_status_json_carries_load_with_live_at_total_and_cap() -> None:
    load = {"live": True, "at": 1000.0, "age_s": 0.0, "loads": [RANK0, RANK1], "version": "0.5.23"}
    document = status_json(_row(load, cap=Cap(48, BY_MAMBA)))
    shown = document["load"]
    assert isinstance(shown, dict)
    assert shown["live"] is True
    assert shown["at"] == 1000.0
    assert shown["version"] == "0.5.23"
    assert shown["cap"] == {"requests": 48, "by": "mamba slots"}
    assert shown["total"]["running"] == 17
    assert shown["total"]["waiting"] == 3
    assert [rank["dp_rank"] for rank in shown["ranks"]] == [0, 1]
    assert shown["ranks"][0]["accept_length"] == 2.1
    assert document["planned_requests"] == 48
    assert "load" not in status_json(_row(None))


def test_rates_read_well_small_and_large() -> None:
    assert (rate(None), rate(12.345), rate(1234.5)) == ("-", "12.3", "1,235")
