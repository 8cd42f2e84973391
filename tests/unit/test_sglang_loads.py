"""What caps a server's concurrency, from its /v1/loads figures, its argv and the memory plan
(orchestrator/sglang/loads.py), and its figures over DP ranks."""

from __future__ import annotations

import pytest

from orchestrator.model import RankLoad
from orchestrator.sglang.loads import (
    BY_ARGUMENT,
    BY_ESTIMATE,
    BY_KV_POOL,
    BY_MAMBA,
    Cap,
    LaunchFacts,
    concurrency_cap,
    launch_facts,
    totals,
)

pytestmark = pytest.mark.unit


def test_launch_facts_read_the_arguments_that_decide_max_running_requests() -> None:
    argv = ["sglang", "serve", "--max-running-requests", "256", "--dp-size=4"]
    assert launch_facts(argv) == LaunchFacts(256, 4, False)
    assert launch_facts([*argv, "--enable-dp-attention"]) == LaunchFacts(256, 4, True)
    assert launch_facts(["sglang", "--max-running-requests", "many"]) == LaunchFacts()


def test_the_argument_caps_when_the_server_runs_what_was_asked_per_attention_dp_rank() -> None:
    facts = launch_facts(
        ["--max-running-requests", "256", "--dp-size", "4", "--enable-dp-attention"]
    )
    assert concurrency_cap(64, 400_000, facts) == Cap(64, BY_ARGUMENT)
    # plain DP (no DP attention): 0.5.23 divides by the attention-DP size, 1
    plain = launch_facts(["--max-running-requests", "256", "--dp-size", "4"])
    assert concurrency_cap(256, 400_000, plain) == Cap(256, BY_ARGUMENT)
    # 0.5.11 divided by --dp-size
    assert concurrency_cap(64, 400_000, plain, version="0.5.11") == Cap(64, BY_ARGUMENT)


def test_below_the_argument_and_the_kv_pool_the_mamba_slots_cap() -> None:
    facts = LaunchFacts(requested=256)
    assert concurrency_cap(48, 400_000, facts) == Cap(48, BY_MAMBA)
    assert concurrency_cap(48, 400_000, LaunchFacts()) == Cap(48, BY_MAMBA)  # below 2048


def test_the_kv_pool_caps_at_half_its_tokens() -> None:
    assert concurrency_cap(1000, 2000, LaunchFacts(requested=4096)) == Cap(1000, BY_KV_POOL)
    assert concurrency_cap(1000, 2000, LaunchFacts()) == Cap(1000, BY_KV_POOL)


def test_without_an_argument_sglangs_estimate_from_the_kv_tokens_decides() -> None:
    assert concurrency_cap(2048, 400_000, LaunchFacts()) == Cap(2048, BY_ESTIMATE)
    assert concurrency_cap(3000, None, LaunchFacts()) == Cap(3000, BY_ESTIMATE)


def test_the_memory_plan_names_the_bound_when_it_predicted_this_value() -> None:
    facts = LaunchFacts(requested=256)
    planned_by = "mamba slots: max_mamba_cache_size 96 // 2 slots per request"
    assert concurrency_cap(48, 400_000, facts, planned=48, planned_by=planned_by) == Cap(
        48, BY_MAMBA
    )
    resolved = "max_running_requests as resolved"
    assert concurrency_cap(256, None, facts, planned=256, planned_by=resolved) == Cap(
        256, BY_ARGUMENT
    )
    # another value than the plan's: found from the figures, not taken from the plan
    assert concurrency_cap(256, 400_000, facts, planned=48, planned_by=planned_by) == Cap(
        256, BY_ARGUMENT
    )


def test_an_unexplained_value_and_an_unknown_one() -> None:
    assert concurrency_cap(300, 400_000, LaunchFacts(requested=256)) == Cap(300, None)
    assert concurrency_cap(None, 400_000, LaunchFacts()) is None


def test_totals_sum_requests_and_throughput_and_take_the_fullest_rank() -> None:
    ranks = [
        RankLoad(
            0,
            running=12,
            waiting=3,
            token_usage=0.42,
            gen_throughput=1234.5,
            cache_hit_rate=0.7,
            accept_length=2.1,
            max_running_requests=48,
        ),
        RankLoad(
            1,
            running=5,
            waiting=0,
            token_usage=0.075,
            gen_throughput=410.0,
            cache_hit_rate=0.5,
            accept_length=None,
            max_running_requests=48,
        ),
    ]
    total = totals(ranks)
    assert (total.running, total.waiting) == (17, 3)
    assert total.token_usage == 0.42
    assert total.gen_throughput == pytest.approx(1644.5)
    assert total.cache_hit_rate == pytest.approx(0.6)
    assert total.accept_length == pytest.approx(2.1)  # the ranks that report it
    assert total.max_running_requests == 48


def test_totals_of_ranks_that_report_nothing_are_unknown() -> None:
    total = totals([RankLoad(0)])
    assert total.running is None
    assert total.token_usage is None
    assert total.accept_length is None
