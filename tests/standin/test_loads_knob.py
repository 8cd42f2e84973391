"""ORCH_STANDIN_LOADS: /v1/loads figures a test sets, in the imitated release's shape (the keys and
sections SGLang's code emits stay as they are; only the values change)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.standin.conftest import READY, Launcher

FIGURES = {
    "num_running_reqs": 3,
    "num_waiting_reqs": 1,
    "token_usage": 0.42,
    "gen_throughput": 1234.5,
    "cache_hit_rate": 0.615,
    "speculative": {"accept_length": 2.31, "accept_rate": 0.66},
}


def test_0523_loads_take_the_figures_rank_by_rank(launcher: Launcher, model_dir: Path) -> None:
    ranks = [FIGURES, {"num_running_reqs": 7, "max_running_requests": 12}]
    running = launcher.start(
        "0.5.23",
        ["--model-path", str(model_dir), "--dp-size", "2"],
        ORCH_STANDIN_LOADS=json.dumps(ranks),
    )
    running.wait_for(READY)
    loads = running.get_json("/v1/loads?include=core,memory,spec,queues")["loads"]
    first, second = loads
    assert first["num_running_reqs"] == 3
    assert first["num_waiting_reqs"] == 1
    assert first["gen_throughput"] == 1234.5
    assert first["cache_hit_rate"] == 0.615
    assert first["speculative"] == {"accept_length": 2.31, "accept_rate": 0.66}
    assert first["queues"]["waiting"] == 1  # the section agrees with the core figure
    assert second["num_running_reqs"] == 7
    assert second["max_running_requests"] == 12
    assert "speculative" not in second  # no speculative forward ran there
    # the section only when spec is asked for, as SGLang's to_dict
    assert "speculative" not in running.get_json("/v1/loads?include=core")["loads"][0]


def test_0511_loads_take_one_object_for_every_rank(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start(
        "0.5.11", ["--model-path", str(model_dir)], ORCH_STANDIN_LOADS=json.dumps(FIGURES)
    )
    running.wait_for(READY)
    answer = running.get_json("/v1/loads")
    (load,) = answer["loads"]
    assert "dp_rank" not in load  # 0.5.11 without DP
    assert load["num_running_reqs"] == 3
    assert load["num_total_reqs"] == 4
    assert load["speculative"]["accept_length"] == 2.31
    assert answer["aggregate"]["total_waiting_reqs"] == 1


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "not JSON"),
        ('{"num_runing_reqs": 1}', "unknown ['num_runing_reqs']"),
        ('{"token_usage": "high"}', "token_usage must be a number"),
        ("[1]", "a JSON object"),
    ],
)
def test_a_knob_the_standin_cannot_honour_is_refused(text: str, why: str) -> None:
    from sglang._standin.knobs import KnobError, parse_loads

    with pytest.raises(KnobError, match=why.replace("[", r"\[").replace("]", r"\]")):
        parse_loads(text)
