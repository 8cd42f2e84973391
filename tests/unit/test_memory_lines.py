"""SGLang's startup memory lines -> one MeasuredMemory per rank (``observe.memory_figures``).

The hand-written lines follow SGLang's own f-strings, cited file:line under ``sglang/srt/`` of the
PyPI releases 0.5.11 and 0.5.23; the figures in them are made up for these tests. The real
captures (tests/fixtures/sglang/memory-logs/README.md says where each was pasted) are checked
against the figures they show.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from orchestrator.sglang.memory.measured import MeasuredMemory
from orchestrator.sglang.observe import memory_figures
from tests.conftest import REPO

MEMORY_LOGS = REPO / "tests" / "fixtures" / "sglang" / "memory-logs"


def capture(name: str) -> list[str]:
    return (MEMORY_LOGS / name).read_text(encoding="utf-8").splitlines()


def records(rank: str, messages: list[str]) -> list[str]:
    """SGLang's record prefix (``[%(asctime)s <rank>] ``) on each message."""
    prefix = f" {rank}" if rank else ""
    return [f"[2026-03-02 11:04:{i:02d}{prefix}] {message}" for i, message in enumerate(messages)]


# -- 0.5.11 --------------------------------------------------------------------------------------

LINES_0511 = [
    # model_executor/model_runner.py:1290
    "Load weight begin. avail mem=78.53 GB",
    # model_executor/model_runner.py:1468-1474 (quant_str "quant=fp8, fmt=e4m3" from
    # configs/model_config.py:910)
    "Load weight end. elapsed=41.06 s, type=Qwen3_5ForConditionalGeneration, quant=fp8, "
    "fmt=e4m3, avail mem=49.87 GB, mem usage=28.66 GB.",
    "Using KV cache dtype: torch.bfloat16",
    # mem_cache/memory_pool.py:325-331 (speculative decoding: intermediate states too)
    "Mamba Cache is allocated. max_mamba_cache_size: 131, conv_state size: 0.37GB, "
    "ssm_state size: 18.19GB intermediate_ssm_state_cache size: 6.55GB "
    "intermediate_conv_window_cache size: 0.14GB ",
    # mem_cache/memory_pool.py:735
    "KV Cache is allocated. #tokens: 95613, K size: 5.84 GB, V size: 5.84 GB",
    # model_executor/model_runner_kv_cache_mixin.py:769
    "Memory pool end. avail mem=9.43 GB",
    # model_executor/model_runner.py:2779, then 2797-2798
    "Capture cuda graph begin. This can take up to several minutes. avail mem=9.41 GB",
    "Capture cuda graph bs [1, 2, 3, 4, 5, 6, 7, 8]",
    "Capture cuda graph end. Time elapsed: 7.92 s. mem usage=0.61 GB. avail mem=8.80 GB.",
    # model_executor/model_runner.py:2919-2920
    "Capture piecewise CUDA graph end. Time elapsed: 21.30 s. mem usage=0.27 GB. "
    "avail mem=8.53 GB.",
    # speculative/eagle_worker.py:289 and :304
    "Capture draft cuda graph end. Time elapsed: 3.11 s. mem usage=0.18 GB. avail mem=7.02 GB.",
    "Capture draft extend cuda graph end. Time elapsed: 2.48 s. mem usage=0.09 GB. "
    "avail mem=6.93 GB.",
    # managers/scheduler.py:764-770 (tp_rank 0)
    "max_total_num_tokens=95613, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=32, context_len=262144, available_gpu_mem=6.90 GB",
]


def test_0511_lines_of_a_single_gpu_fill_every_field() -> None:
    (measured,) = memory_figures(records("", LINES_0511))
    assert measured == MeasuredMemory(
        rank=None,
        avail_before_load_gib=78.53,
        weights_gib=28.66,
        avail_after_load_gib=49.87,
        kv_tokens=95613,
        kv_gib=11.68,
        mamba_slots=131,
        mamba_gib=25.25,
        mamba_intermediate_gib=6.69,
        avail_after_pools_gib=9.43,
        graphs_gib=0.61,
        avail_after_graphs_gib=8.80,
        max_total_num_tokens=95613,
        max_running_requests=32,
        available_gpu_mem_gib=6.90,
        capped_by_mamba=None,  # 0.5.11 caps silently
        prefill_graphs_gib=0.27,
        draft_graphs_gib=0.27,  # draft decode + draft extend
    )


def test_0511_mla_kv_line_and_mamba_line_without_speculation() -> None:
    lines = records(
        "TP0",
        [
            # mem_cache/memory_pool.py:335-339
            "Mamba Cache is allocated. max_mamba_cache_size: 412, conv_state size: 1.02GB, "
            "ssm_state size: 30.51GB ",
            # mem_cache/memory_pool.py:741 (MLA: one latent buffer)
            "KV Cache is allocated. #tokens: 1204733, KV size: 39.41 GB",
        ],
    )
    (measured,) = memory_figures(lines)
    assert (measured.rank, measured.mamba_slots, measured.mamba_gib) == ("TP0", 412, 31.53)
    assert measured.mamba_intermediate_gib is None
    assert (measured.kv_tokens, measured.kv_gib) == (1204733, 39.41)


# -- 0.5.23 --------------------------------------------------------------------------------------

LINES_0523 = [
    # distributed/bootstrap.py:220
    "Memory baseline taken. mem usage=0.48 GB",
    # model_executor/model_runner.py:1274
    "Load weight begin. avail mem=131.77 GB",
    # model_executor/model_runner.py:1373-1379
    "Load weight end. elapsed=63.18 s, type=Qwen3_5ForConditionalGeneration, "
    "avail mem=106.02 GB, mem usage=25.75 GB.",
    # mem_cache/memory_pool.py:1005-1009
    "Mamba Cache is allocated. max_mamba_cache_size: 604, conv_state size: 1.71GB, "
    "ssm_state size: 42.97GB ",
    # mem_cache/memory_pool.py:2087-2091
    "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1433600, K size: 21.88 GB, "
    "V size: 21.88 GB",
    # mem_cache/kv_cache_configurator.py:3141-3150 (a warning, on every rank)
    "max_running_requests is capped to 201 by the mamba state cache (max_mamba_cache_size=604, "
    "3 state slots per request). To raise it: increase --mamba-full-memory-ratio or "
    "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16.",
    # mem_cache/kv_cache_configurator.py:499
    "Memory pool end. avail mem=17.19 GB",
    # model_executor/model_runner_components/cuda_graph_setup.py:759-762, then 788-792
    "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
    "avail mem=17.11 GB",
    "Capture target decode CUDA graph end. bs=[1, 2, 4, 8, 12, 16, 24, 32], elapsed=5.07 s, "
    "mem usage=1.38 GB, avail mem=15.73 GB.",
    # model_executor/model_runner_components/cuda_graph_setup.py:696-700
    "Capture target prefill CUDA graph end. elapsed=11.52 s, mem usage=0.44 GB, "
    "avail mem=15.29 GB.",
    # managers/scheduler.py:1269-1276
    "max_total_num_tokens=1433600, chunked_prefill_size=8192, max_prefill_tokens=16384, "
    "max_running_requests=201, context_len=262144, available_gpu_mem=15.21 GB",
]


def test_0523_lines_fill_every_field() -> None:
    (measured,) = memory_figures(records("TP0", LINES_0523))
    assert measured == MeasuredMemory(
        rank="TP0",
        avail_before_load_gib=131.77,
        weights_gib=25.75,
        avail_after_load_gib=106.02,
        kv_tokens=1433600,
        kv_gib=43.76,
        mamba_slots=604,
        mamba_gib=44.68,
        mamba_intermediate_gib=None,
        avail_after_pools_gib=17.19,
        graphs_gib=1.38,
        avail_after_graphs_gib=15.73,
        max_total_num_tokens=1433600,
        max_running_requests=201,
        available_gpu_mem_gib=15.21,
        capped_by_mamba=201,
        prefill_graphs_gib=0.44,
        draft_graphs_gib=None,
    )


def test_0523_speculative_lines_keep_the_targets_figures() -> None:
    """0.5.23's order (managers/scheduler.py init_model_worker): target then draft weights,
    target then draft pools, target then draft graphs. The draft's weight, KV and pool lines are
    the same text as the target's; its graph lines say "draft"."""
    lines = records(
        "TP1",
        [
            "Load weight begin. avail mem=139.20 GB",
            "Load weight end. elapsed=30.01 s, type=Qwen3_5ForConditionalGeneration, "
            "avail mem=113.11 GB, mem usage=26.09 GB.",
            "Load weight begin. avail mem=113.11 GB",  # the draft (MTP) model runner
            "Load weight end. elapsed=1.93 s, type=Qwen3_5ForCausalLMMTP, "
            "avail mem=111.70 GB, mem usage=1.41 GB.",
            # mem_cache/memory_pool.py:984-991
            "Mamba Cache is allocated. max_mamba_cache_size: 300, conv_state size: 0.85GB, "
            "ssm_state size: 21.34GB intermediate_ssm_state_cache size: 3.49GB "
            "intermediate_conv_window_cache size: 0.07GB ",
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2801664, K size: 42.75 GB, "
            "V size: 42.75 GB",
            "Memory pool end. avail mem=19.63 GB",
            "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 2801664, K size: 2.67 GB, "
            "V size: 2.67 GB",  # the draft's pool
            "Memory pool end. avail mem=14.29 GB",
            "Capture target verify CUDA graph end. bs=[1, 2, 4], elapsed=6.40 s, "
            "mem usage=2.02 GB, avail mem=12.27 GB.",
            # speculative/eagle_worker_v2.py:533-537 and :654-658
            "Capture draft decode CUDA graph end. elapsed=2.23 s, mem usage=0.35 GB, "
            "avail mem=11.92 GB.",
            "Capture draft extend CUDA graph end. elapsed=1.75 s, mem usage=0.16 GB, "
            "avail mem=11.76 GB.",
        ],
    )
    (measured,) = memory_figures(lines)
    assert measured.avail_before_load_gib == 139.20
    assert (measured.weights_gib, measured.avail_after_load_gib) == (26.09, 113.11)
    assert (measured.kv_tokens, measured.kv_gib) == (2801664, 85.5)
    assert (measured.mamba_gib, measured.mamba_intermediate_gib) == (25.75, 3.56)
    assert measured.avail_after_pools_gib == 19.63
    assert (measured.graphs_gib, measured.avail_after_graphs_gib) == (2.02, 12.27)
    assert measured.draft_graphs_gib == 0.51


def test_0511_draft_worker_lines_after_the_target_do_not_overwrite_it() -> None:
    """0.5.11 builds the whole draft worker after the target (speculative/eagle_worker.py)."""
    target = records("TP0", LINES_0511[:6])
    draft = records(
        "TP0",
        [
            "Load weight begin. avail mem=7.40 GB",
            "Load weight end. elapsed=2.20 s, type=Qwen3_5ForCausalLMMTP, avail mem=6.01 GB, "
            "mem usage=1.39 GB.",
            "KV Cache is allocated. #tokens: 95613, K size: 0.36 GB, V size: 0.36 GB",
            "Memory pool end. avail mem=5.29 GB",
        ],
    )
    (measured,) = memory_figures(target + draft)
    assert (measured.avail_before_load_gib, measured.weights_gib) == (78.53, 28.66)
    assert (measured.kv_gib, measured.avail_after_pools_gib) == (11.68, 9.43)


def test_0523_post_capture_kv_sizing_line_is_the_kv_pool() -> None:
    lines = records(
        "",
        [
            # mem_cache/memory_pool.py:2088 with post_capture_active: an address range, no pool
            "KV Cache VA upper bound. dtype: torch.bfloat16, #tokens: 4000000, K size: 61.04 GB, "
            "V size: 61.04 GB",
            # model_executor/model_runner_components/kv_pool_runtime.py:194-201
            "Post-capture KV sizing: KV cache allocated. dtype: torch.bfloat16, #tokens: 1818624, "
            "KV size: 55.50 GB, avail mem=3.12 GB",
            "Post-capture KV sizing: draft KV cache allocated. dtype: torch.bfloat16, "
            "#tokens: 1818624, KV size: 3.47 GB",
        ],
    )
    (measured,) = memory_figures(lines)
    assert (measured.kv_tokens, measured.kv_gib) == (1818624, 55.50)


def test_labelled_pools_count_the_full_attention_one_only() -> None:
    """0.5.23 names the pools of a sliding-window model (mem_cache/swa_memory_pool.py:81/92)."""
    lines = records(
        "",
        [
            "SWA KV Cache is allocated. dtype: torch.bfloat16, #tokens: 262144, K size: 1.50 GB, "
            "V size: 1.50 GB",
            "Full KV Cache is allocated. dtype: torch.bfloat16, #tokens: 327680, K size: 3.75 GB, "
            "V size: 3.75 GB",
        ],
    )
    (measured,) = memory_figures(lines)
    assert (measured.kv_tokens, measured.kv_gib) == (327680, 7.5)


# -- ranks, partial logs, other lines ------------------------------------------------------------


def test_ranks_come_back_in_rank_order_each_with_its_own_figures() -> None:
    tp0 = records("TP0", LINES_0523)
    tp1 = records("TP1", [line.replace("17.19", "17.42") for line in LINES_0523[:7]])
    interleaved = [line for pair in zip(tp1, tp0, strict=False) for line in pair] + tp0[7:]
    first, second = memory_figures(interleaved)
    assert (first.rank, second.rank) == ("TP0", "TP1")
    assert (first.avail_after_pools_gib, second.avail_after_pools_gib) == (17.19, 17.42)
    assert first.max_total_num_tokens == 1433600
    assert second.max_total_num_tokens is None  # SGLang logs the summary on tp_rank 0 only
    assert second.kv_tokens == 1433600


def test_rank_order_is_numeric_and_dp_major() -> None:
    line = "Memory pool end. avail mem=1.00 GB"
    ranks = ["DP1 TP3", "DP0 TP10", "DP0 TP2", "DP1 TP2"]
    logged = [entry for rank in ranks for entry in records(rank, [line])]
    assert [m.rank for m in memory_figures(logged)] == ["DP0 TP2", "DP0 TP10", "DP1 TP2", "DP1 TP3"]


def test_a_log_cut_at_memory_pool_end_leaves_the_later_figures_unset() -> None:
    (measured,) = memory_figures(records("TP0", LINES_0523[:7]))
    assert measured.avail_after_pools_gib == 17.19
    assert measured.capped_by_mamba == 201
    assert measured.graphs_gib is None
    assert measured.avail_after_graphs_gib is None
    assert measured.max_total_num_tokens is None
    assert measured.max_running_requests is None
    assert measured.available_gpu_mem_gib is None


def test_a_record_written_after_another_ranks_progress_bar_is_read() -> None:
    """tqdm redraws with \\r and no newline until it ends: another rank's record lands on the same
    line (as in sglang PR #27537's paste, tests/fixtures/sglang/memory-logs/README.md)."""
    lines = [
        "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:03<00:03,  3.10s/it]"
        "[2026-03-02 11:04:07 TP1] Load weight end. elapsed=6.52 s, "
        "type=Qwen3_5ForConditionalGeneration, avail mem=114.04 GB, mem usage=25.16 GB.",
    ]
    (measured,) = memory_figures(lines)
    assert (measured.rank, measured.weights_gib, measured.avail_after_load_gib) == (
        "TP1",
        25.16,
        114.04,
    )


def test_other_lines_are_ignored() -> None:
    lines = [
        *records(
            "TP0",
            [
                "Init torch distributed ends. mem usage=0.51 GB",
                "Capture cuda graph begin. This can take up to several minutes. avail mem=9.41 GB",
                # model_executor/model_runner_components/startup_weight_load.py:538
                "Load weight end. Committed real weights after CUDA graph capture in 4.20 s "
                "(capture overlap window 1.10 s, startup overlap total 9.90 s)",
                # speculative/frozen_kv_mtp_worker_v2.py:411: no figures
                "Capture Frozen-KV MTP draft cuda graph end.",
                "Prefill batch, #new-seq: 1, #new-token: 7, #cached-token: 0, token usage: 0.00",
            ],
        ),
        "Capturing batches (bs=1 avail_mem=9.12 GB): 100%|##########| 8/8 [00:07<00:00,  1.01it/s]",
        "Traceback (most recent call last):",
    ]
    assert memory_figures(lines) == ()
    assert memory_figures([]) == ()


def test_a_long_log_is_read_in_one_fast_pass() -> None:
    chatter = records(
        "TP0", ["Decode batch, #running-req: 3, #token: 5120, token usage: 0.01, gen throughput"]
    )
    lines = records("TP0", LINES_0523) + chatter * 200_000
    began = time.perf_counter()
    (measured,) = memory_figures(iter(lines))  # any iterable, read once
    took = time.perf_counter() - began
    assert measured.max_total_num_tokens == 1433600
    assert took < 5  # well under a second here; loose, timing asserts are flaky


# -- real captures -------------------------------------------------------------------------------


def test_capture_hybrid_qwen35_moe_two_ranks() -> None:
    tp0, tp1 = memory_figures(capture("ktransformers-1870-qwen35-moe-tp2.log"))
    assert tp0 == MeasuredMemory(
        rank="TP0",
        weights_gib=3.76,
        avail_after_load_gib=19.08,
        kv_tokens=580364,
        kv_gib=8.30,
        mamba_slots=82,
        mamba_gib=7.42,
        avail_after_pools_gib=4.02,
        max_total_num_tokens=580364,
        max_running_requests=1,
        available_gpu_mem_gib=3.63,
    )
    assert tp1 == MeasuredMemory(
        rank="TP1",
        weights_gib=3.76,
        avail_after_load_gib=19.08,
        kv_tokens=580364,
        kv_gib=8.30,
        mamba_slots=82,
        mamba_gib=7.42,
        avail_after_pools_gib=4.02,
    )


def test_capture_eight_ranks_from_two_excerpts() -> None:
    measured = memory_figures(capture("sglang-pr11716-tp8.log"))
    assert [m.rank for m in measured] == [f"TP{n}" for n in range(8)]
    before = {m.rank: m.avail_before_load_gib for m in measured}
    assert before == {
        "TP0": 137.34,
        "TP1": 137.29,
        "TP2": 137.29,
        "TP3": 137.29,
        "TP4": 137.29,
        "TP5": 137.29,
        "TP6": 137.29,
        "TP7": 137.52,
    }
    pooled = {m.rank: (m.kv_tokens, m.kv_gib, m.avail_after_pools_gib) for m in measured}
    for rank in ("TP1", "TP3", "TP5", "TP6"):  # the ranks whose pool lines the excerpt holds
        assert pooled[rank] == (2795207, 106.62, 11.87)
    for rank in ("TP0", "TP2", "TP4", "TP7"):
        assert pooled[rank] == (None, None, None)
    assert all(m.weights_gib is None and m.graphs_gib is None for m in measured)


def test_capture_gemma3_older_load_weight_end() -> None:
    (measured,) = memory_figures(capture("sglang-pr4826-gemma3-tp0.log"))
    assert measured == MeasuredMemory(
        rank="TP0",
        weights_gib=8.13,
        avail_after_load_gib=131.08,
        kv_tokens=834615,
        kv_gib=108.24,
        avail_after_pools_gib=14.61,
    )


def test_capture_target_and_draft_graph_lines() -> None:
    tp0, tp6 = memory_figures(capture("sglang-10088-target-and-draft-graphs.log"))
    assert (tp0.rank, tp0.graphs_gib, tp0.avail_after_graphs_gib) == ("TP0", 0.54, 16.74)
    assert tp0.draft_graphs_gib is None
    assert (tp6.rank, tp6.draft_graphs_gib) == ("TP6", 0.21)
    assert (tp6.graphs_gib, tp6.avail_after_graphs_gib) == (None, None)


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("sglang-pr12978-graph-end-tp2.log", {"TP0": (1.00, 11.17), "TP1": (1.04, 11.22)}),
        ("sglang-pr20758-musa-graphs-tp2.log", {"TP0": (0.83, 10.81), "TP1": (0.83, 10.88)}),
    ],
)
def test_capture_0511_graph_end_lines(name: str, expected: dict[str, tuple[float, float]]) -> None:
    measured = memory_figures(capture(name))
    assert {m.rank: (m.graphs_gib, m.avail_after_graphs_gib) for m in measured} == expected


def test_capture_kv_line_with_dtype() -> None:
    (tp0,) = memory_figures(capture("sglang-pr27537-musa-kv-dtype-tp2.log"))
    assert (tp0.rank, tp0.kv_tokens, tp0.kv_gib, tp0.avail_after_pools_gib) == (
        "TP0",
        1106304,
        50.64,
        12.05,
    )


def test_capture_mamba_cap_quoted_without_prefix() -> None:
    (measured,) = memory_figures(capture("sglang-38846-capped-by-mamba.log"))
    assert measured == MeasuredMemory(rank=None, capped_by_mamba=9)


def test_every_capture_is_listed_in_the_readme() -> None:
    readme = (MEMORY_LOGS / "README.md").read_text(encoding="utf-8")
    names = sorted(path.name for path in Path(MEMORY_LOGS).glob("*.log"))
    assert names
    for name in names:
        assert f"`{name}`" in readme
        assert memory_figures(capture(name)), name
