"""The stand-in starts up the way SGLang does: log lines, server_args, endpoints."""

from __future__ import annotations

import ast
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.sglang import argtable
from orchestrator.sglang.observe import memory_figures
from tests.standin.conftest import (
    LOG_LINE,
    READY,
    Launcher,
    Running,
    log_messages,
    segments,
    write_model,
)

SPEC_ARGS = [
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "8",
]


def _fields(version: str) -> dict[str, Any]:
    return dict(argtable.load_table(version).fields)


def _server_args(stderr: str) -> str:
    lines = [m for m in log_messages(stderr) if m.startswith("server_args=")]
    assert len(lines) == 1
    return lines[0].removeprefix("server_args=")


@pytest.fixture(scope="module")
def server_0523(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Running]:
    directory = tmp_path_factory.mktemp("standin-0523")
    model = write_model(directory / "Qwen3.6-27B")
    launcher = Launcher(directory)
    running = launcher.start(
        "0.5.23",
        [
            "--model-path",
            str(model),
            "--served-model-name",
            "qwen-demo",
            "--context-length",
            "8k",
            "--mamba-radix-cache-strategy",
            "extra_buffer",
            *SPEC_ARGS,
        ],
    )
    running.wait_for(READY)
    yield running
    launcher.cleanup()


def test_every_bracketed_line_has_sglang_format(server_0523: Running) -> None:
    bracketed = [part for part in segments(server_0523.err()) if part.startswith("[")]
    assert len(bracketed) > 15
    for line in bracketed:
        assert LOG_LINE.match(line), line


def test_startup_says_it_is_a_stand_in_then_follows_sglang_order(server_0523: Running) -> None:
    stderr = server_0523.err()
    assert stderr.splitlines()[1].startswith("  Example: sglang serve --model-path <model>")
    assert (
        "UserWarning: 'python -m sglang.launch_server' is still supported" in stderr.splitlines()[0]
    )
    messages = log_messages(stderr)
    assert messages[0].startswith("orch SGLang stand-in (NOT SGLang): imitating sglang 0.5.23")

    def index(prefix: str) -> int:
        return next(i for i, m in enumerate(messages) if m.startswith(prefix))

    order = [
        "server_args=",
        "Load weight begin. avail mem=",
        "Load weight end. elapsed=",
        "Mamba Cache is allocated. max_mamba_cache_size: ",
        "KV Cache is allocated. dtype: torch.bfloat16, #tokens: ",
        "Memory pool end. avail mem=",
        "Capture target verify CUDA graph begin. backend=full, num_tokens_per_req=4, avail mem=",
        "Capture target verify CUDA graph end. bs=[1, 2, 3, ",
        "max_total_num_tokens=",
        "INFO:     Started server process [",
        "INFO:     Uvicorn running on http://127.0.0.1:",
        READY,
    ]
    positions = [index(prefix) for prefix in order]
    assert positions == sorted(positions)


def test_progress_bar_is_redrawn_with_carriage_returns(server_0523: Running) -> None:
    stderr = server_0523.err()
    assert (
        "\rLoading safetensors checkpoint shards:   0% Completed | 0/3 [00:00<?, ?it/s]" in stderr
    )
    assert "Loading safetensors checkpoint shards: 100% Completed | 3/3 [" in stderr


def test_server_args_dict_parses_and_holds_resolved_values(server_0523: Running) -> None:
    resolved = ast.literal_eval(_server_args(server_0523.err()))
    assert set(resolved) == set(_fields("0.5.23"))
    assert resolved["served_model_name"] == "qwen-demo"
    assert resolved["context_length"] == 8000  # SGLang's human_readable_int: 8k
    assert resolved["mamba_radix_cache_strategy"] == "extra_buffer"
    assert resolved["speculative_num_draft_tokens"] == 4  # 8 given, steps + 1 with topk 1
    assert resolved["max_running_requests"] == 48
    assert resolved["tokenizer_path"] == resolved["model_path"]
    messages = log_messages(server_0523.err())
    assert (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1" in messages
    )
    assert (
        "Max running requests is reset to 48 for speculative decoding. You can override this "
        "by explicitly setting --max-running-requests." in messages
    )


def test_server_info_has_every_field_and_says_stand_in(server_0523: Running) -> None:
    info = server_0523.get_json("/server_info")
    assert set(_fields("0.5.23")) <= set(info)
    assert info["orch_standin"] is True
    assert info["version"] == "0.5.23"
    assert info["status"] == "ready"
    assert info["speculative_num_draft_tokens"] == 4
    assert info["launch_command"].startswith("--model-path ")
    assert "--speculative-num-draft-tokens 8" in info["launch_command"]
    assert isinstance(info["internal_states"], list)
    assert info["internal_states"]
    assert info["max_req_input_len"] == 7999


def test_endpoints_answer_like_sglang(server_0523: Running) -> None:
    assert server_0523.get("/health") == (200, b"")
    assert server_0523.get("/ready")[0] == 200
    models = server_0523.get_json("/v1/models")
    assert models["data"][0]["id"] == "qwen-demo"
    assert models["data"][0]["max_model_len"] == 8000
    assert server_0523.get_json("/model_info")["architectures"] == [
        "Qwen3_5ForConditionalGeneration"
    ]
    assert server_0523.get("/no-such-endpoint")[0] == 404
    assert server_0523.get_json("/get_server_info")["orch_standin"] is True
    time.sleep(0.05)
    assert (
        "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
        "Please use '/server_info' instead." in log_messages(server_0523.err())
    )


def test_access_log_goes_to_stdout_in_uvicorn_format(server_0523: Running) -> None:
    server_0523.get("/health")
    time.sleep(0.05)
    lines = server_0523.out().splitlines()
    assert any('"POST /generate HTTP/1.1" 200 OK' in line for line in lines)  # the warm-up
    assert all(LOG_LINE.match(line) for line in lines)
    assert all(" INFO:     127.0.0.1:" in line for line in lines)
    assert '"GET /health HTTP/1.1"' not in server_0523.err()


def test_0511_serve_prints_a_dataclass_repr_of_every_field(
    launcher: Launcher, model_dir: Path
) -> None:
    running = launcher.start(
        "0.5.11",
        ["--model-path", str(model_dir), "--mamba-scheduler-strategy", "extra_buffer", *SPEC_ARGS],
        entry="serve",
    )
    running.wait_for(READY)
    stderr = running.err()
    assert "UserWarning" not in stderr  # only python -m sglang.launch_server warns
    call = ast.parse(_server_args(stderr), mode="eval").body
    assert isinstance(call, ast.Call)
    assert isinstance(call.func, ast.Name)
    assert call.func.id == "ServerArgs"
    values = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords}
    assert len(call.keywords) == len(_fields("0.5.11")) == len(values)
    assert values["mamba_scheduler_strategy"] == "extra_buffer"
    assert values["speculative_num_draft_tokens"] == 4
    assert values["attention_backend"] == "fa3"
    messages = log_messages(stderr)
    assert (
        "Spec v2 is enabled by default for eagle/eagle3/standalone speculative decoding."
        in messages
    )
    assert any(
        m.startswith("Capture cuda graph begin. This can take up to several minutes.")
        for m in messages
    )
    assert "launch_command" not in running.get_json("/server_info")  # 0.5.20+


def test_health_is_503_until_ready(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start(
        "0.5.23", ["--model-path", str(model_dir)], ORCH_STANDIN_WARMUP_S="0.6"
    )
    running.wait_for("Uvicorn running on")
    assert running.get("/health")[0] == 503
    assert READY not in running.err()
    running.wait_for(READY)
    assert running.get("/health")[0] == 200


def test_scheduler_prefix_and_milliseconds(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start(
        "0.5.23",
        ["--model-path", str(model_dir), "--tp-size", "2", "--skip-server-warmup"],
        SGLANG_LOG_MS="1",
    )
    running.wait_for(READY)
    matches = [m for part in segments(running.err()) if (m := LOG_LINE.match(part))]
    prefixes = {m.group(2) for m in matches}
    assert {"", " TP0", " TP1"} <= prefixes
    stamped = [
        part for part in segments(running.err()) if part.startswith("[") and " INFO:" not in part
    ]
    assert all(part[20] == "." for part in stamped)  # [YYYY-mm-dd HH:MM:SS.mmm
    titles = sorted(" ".join(child.cmdline()).strip() for child in running.children())
    assert titles == ["sglang::detokenizer", "sglang::scheduler_TP0", "sglang::scheduler_TP1"]
    tp0, tp1 = memory_figures(segments(running.err()))
    assert (tp0.rank, tp1.rank) == ("TP0", "TP1")
    for rank in (tp0, tp1):  # every rank logs its weights, pools and graphs
        assert rank.weights_gib == 25.55  # the stand-in's 51.10 GB model, half a rank
        assert rank.kv_tokens is not None
        assert rank.mamba_slots is not None
        assert rank.mamba_intermediate_gib is None  # no speculative decoding
        assert rank.graphs_gib == 1.26
    assert tp0.max_total_num_tokens == tp0.kv_tokens
    assert tp1.max_total_num_tokens is None  # the summary: tp_rank 0 only, as SGLang


# -- memory lines and /v1/loads ------------------------------------------------------------------

# SGLang 0.5.23 mem_cache/memory_pool.py:984-991, and :2087-2091; kv_cache_configurator.py:3141
MAMBA_SPEC_LINE = re.compile(
    r"Mamba Cache is allocated\. max_mamba_cache_size: \d+, conv_state size: \d+\.\d\dGB, "
    r"ssm_state size: \d+\.\d\dGB intermediate_ssm_state_cache size: \d+\.\d\dGB "
    r"intermediate_conv_window_cache size: \d+\.\d\dGB $"
)
KV_LINE_0523 = re.compile(
    r"KV Cache is allocated\. dtype: torch\.bfloat16, #tokens: \d+, K size: \d+\.\d\d GB, "
    r"V size: \d+\.\d\d GB$"
)
CAPPED_LINE = re.compile(
    r"max_running_requests is capped to (\d+) by the mamba state cache "
    r"\(max_mamba_cache_size=(\d+), 5 state slots per request\)\. To raise it: increase "
    r"--mamba-full-memory-ratio or --max-mamba-cache-size, or halve the state size with "
    r"--mamba-ssm-dtype bfloat16\.$"
)
# SGLang 0.5.11 mem_cache/memory_pool.py:735, model_executor/model_runner.py:2797-2798
KV_LINE_0511 = re.compile(r"KV Cache is allocated\. #tokens: \d+, K size: \d+\.\d\d GB, V size: ")
GRAPH_END_0511 = re.compile(
    r"Capture cuda graph end\. Time elapsed: \d+\.\d\d s\. mem usage=\d+\.\d\d GB\. "
    r"avail mem=\d+\.\d\d GB\.$"
)
MEMORY_KEYS = ["weight_gb", "kv_cache_gb", "graph_gb", "token_capacity"]
# 0.5.23 managers/load_snapshot.py: LoadSnapshot's fields but the sections ("core")
CORE_KEYS_0523 = [
    "timestamp",
    "dp_rank",
    "num_running_reqs",
    "num_waiting_reqs",
    "num_waiting_uncached_tokens",
    "num_used_tokens",
    "num_total_tokens",
    "num_active_tokens",
    "num_prealloc_ready_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
    "total_prefill_uncached_tokens",
    "total_prefill_busy_us",
    "decode_moments",
]


def test_0523_memory_lines_are_sglangs_and_orch_reads_them_back(server_0523: Running) -> None:
    messages = log_messages(server_0523.err())
    assert sum(bool(MAMBA_SPEC_LINE.match(m)) for m in messages) == 1
    assert sum(bool(KV_LINE_0523.match(m)) for m in messages) == 1
    (capped,) = [match for m in messages if (match := CAPPED_LINE.match(m))]
    (measured,) = memory_figures(segments(server_0523.err()))
    assert measured.rank is None  # one GPU: SGLang's scheduler lines carry no prefix
    assert (measured.avail_before_load_gib, measured.weights_gib) == (139.20, 51.10)
    assert measured.kv_tokens == measured.max_total_num_tokens
    assert measured.mamba_slots == int(capped.group(2))
    assert measured.mamba_intermediate_gib  # speculative decoding: intermediate states
    assert measured.capped_by_mamba == int(capped.group(1)) == measured.max_running_requests
    assert measured.max_running_requests < 48  # what speculative decoding asked for
    assert measured.graphs_gib == 1.26
    assert measured.available_gpu_mem_gib == measured.avail_after_graphs_gib
    state = server_0523.get_json("/server_info")["internal_states"][0]
    assert state["max_running_requests"] == 48  # the argument, as SGLang keeps it
    assert state["effective_max_running_requests_per_dp"] == measured.max_running_requests


def test_0523_v1_loads_answers_in_sglangs_shape(server_0523: Running) -> None:
    (measured,) = memory_figures(segments(server_0523.err()))
    answer = server_0523.get_json("/v1/loads?include=memory")
    assert list(answer) == ["timestamp", "version", "accelerator", "num_accelerators", "loads"]
    assert (answer["version"], answer["num_accelerators"]) == ("0.5.23", 1)
    (load,) = answer["loads"]
    assert list(load) == [*CORE_KEYS_0523, "memory"]
    assert list(load["memory"]) == MEMORY_KEYS
    assert load["memory"]["token_capacity"] == measured.kv_tokens == load["max_total_num_tokens"]
    assert load["memory"]["weight_gb"] == measured.weights_gib
    assert round(load["memory"]["kv_cache_gb"], 1) == round(measured.kv_gib or 0, 1)
    assert load["memory"]["graph_gb"] == measured.graphs_gib
    assert load["max_running_requests"] == measured.max_running_requests
    everything = server_0523.get_json("/v1/loads")["loads"][0]
    assert list(everything)[len(CORE_KEYS_0523) :] == ["memory", "disaggregation", "queues"]
    assert "memory" not in server_0523.get_json("/v1/loads?include=core")["loads"][0]
    assert server_0523.get_json("/v1/loads?dp_rank=3")["loads"] == []
    status, body = server_0523.get("/v1/loads?include=memory,bogus")
    assert status == 400
    assert json.loads(body)["detail"].startswith("Invalid include sections: {'bogus'}. Valid")


def test_0511_memory_lines_cap_silently_and_v1_loads_has_its_shape(
    launcher: Launcher, model_dir: Path
) -> None:
    running = launcher.start(
        "0.5.11",
        ["--model-path", str(model_dir), "--mamba-scheduler-strategy", "extra_buffer", *SPEC_ARGS],
    )
    running.wait_for(READY)
    messages = log_messages(running.err())
    assert sum(bool(KV_LINE_0511.match(m)) for m in messages) == 1
    assert sum(bool(GRAPH_END_0511.match(m)) for m in messages) == 1
    assert sum(bool(MAMBA_SPEC_LINE.match(m)) for m in messages) == 1  # the same text as 0.5.23
    assert not any(m.startswith("max_running_requests is capped") for m in messages)
    (measured,) = memory_figures(segments(running.err()))
    assert measured.capped_by_mamba is None
    assert measured.max_running_requests is not None
    assert measured.max_running_requests < 48  # capped all the same
    answer = running.get_json("/v1/loads?include=memory")
    assert list(answer) == ["timestamp", "version", "dp_rank_count", "loads", "aggregate"]
    (load,) = answer["loads"]
    assert list(load) == [
        "num_running_reqs",
        "num_waiting_reqs",
        "num_used_tokens",
        "num_total_tokens",
        "max_total_num_tokens",
        "token_usage",
        "gen_throughput",
        "cache_hit_rate",
        "utilization",
        "max_running_requests",
        "memory",
        "num_total_reqs",
    ]
    assert list(load["memory"]) == MEMORY_KEYS
    assert load["memory"]["token_capacity"] == measured.max_total_num_tokens
    assert running.get_json("/v1/loads?include=bogus")["loads"][0].get("memory") is None


def test_a_model_without_mamba_state_logs_no_mamba_pool(launcher: Launcher, tmp_path: Path) -> None:
    model = tmp_path / "Qwen3-8B"
    model.mkdir()
    (model / "config.json").write_text(
        json.dumps({"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3"})
    )
    running = launcher.start("0.5.23", ["--model-path", str(model), "--skip-server-warmup"])
    running.wait_for(READY)
    messages = log_messages(running.err())
    assert not any(
        m.startswith(("Mamba Cache", "max_running_requests is capped")) for m in messages
    )
    (measured,) = memory_figures(segments(running.err()))
    assert (measured.mamba_slots, measured.capped_by_mamba) == (None, None)
    assert measured.kv_tokens == measured.max_total_num_tokens
