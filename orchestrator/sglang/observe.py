"""SGLang's log lines -> LogEvents: phases, weight-loading progress, readiness, errors; and each
rank's startup memory figures (``memory_figures``).  [pure]

Formats are SGLang's real ones (docs/sglang-facts.md §2):
``[YYYY-mm-dd HH:MM:SS(.mmm)( TP0)] message``;
tqdm progress redrawn with ``\\r``. The log vocabulary (the record prefix, the config line, the
ready line) live in the agent's vocabulary (remote/agent/sglang_log.py: it decides states and
restarts on the host by them) and are used here, so that orch and its agent read a log the same
way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orchestrator.model import frozen_map
from orchestrator.remote.agent.sglang_log import (
    LOG_RECORD,
    LogRecord,
    config_line_payload,
    is_ready_line,
    last_exception_line,
    log_record,
)
from orchestrator.sglang.memory.measured import MeasuredMemory

__all__ = [
    "LINE_RE",
    "LineSplitter",
    "LogEvent",
    "LogRecord",
    "config_line_payload",
    "is_ready_line",
    "last_exception_line",
    "log_record",
    "memory_figures",
    "parse_line",
]

# SGLang's log-record prefix, groups timestamp (1), rank (2) and message (3): the agent's one
# regex under the name orch has used for it.
LINE_RE = LOG_RECORD
_PROGRESS_RE = re.compile(
    r"Loading (?:safetensors )?checkpoint shards:\s+(\d+)% Completed \| (\d+)/(\d+)"
)
_KEY_VALUE_RE = re.compile(r"([a-z_ ]+?)=([^,]+?)(?:,|\.?$)")


@dataclass(frozen=True)
class LogEvent:
    kind: str  # config, load_begin, load_progress, load_end, memory_pool, graph_begin,
    #            graph_end, capacity, http_up, ready, error, warning
    text: str  # the message, without SGLang's timestamp prefix
    timestamp: str | None = None
    rank: str | None = None  # TP0, DP1 TP3 ... on scheduler lines of parallel runs
    done: int | None = None
    total: int | None = None
    fields: Mapping[str, str] = field(default_factory=frozen_map)


def parse_line(line: str) -> LogEvent | None:
    """The event a line of SGLang output stands for, or None for ordinary chatter."""
    record = log_record(line)
    timestamp = rank = None
    text = line.strip()
    if record is not None:
        timestamp, rank, text = record

    def event(kind: str, **extra: object) -> LogEvent:
        return LogEvent(kind, text, timestamp, rank, **extra)  # type: ignore[arg-type]

    if (progress := _PROGRESS_RE.search(text)) is not None:
        return event("load_progress", done=int(progress.group(2)), total=int(progress.group(3)))
    if config_line_payload(line) is not None:
        return event("config")
    if is_ready_line(line):
        return event("ready")
    if text.startswith("Load weight begin."):
        return event("load_begin", fields=_key_values(text))
    if text.startswith("Load weight end."):
        return event("load_end", fields=_key_values(text))
    if text.startswith("Memory pool end."):
        return event("memory_pool", fields=_key_values(text))
    lowered = text.lower()
    if lowered.startswith("capture") and "graph begin" in lowered:
        return event("graph_begin", fields=_key_values(text))
    if lowered.startswith("capture") and "graph end" in lowered:
        return event("graph_end", fields=_key_values(text))
    if text.startswith("max_total_num_tokens="):
        return event("capacity", fields=_key_values(text))
    if "Uvicorn running on " in text:
        return event("http_up")
    if text.startswith("Scheduler hit an exception") or _is_exception_line(text, record):
        return event("error")
    if text.startswith(("WARNING", "Warning")) or " warning" in lowered[:40]:
        return event("warning")
    return None


def _is_exception_line(text: str, record: LogRecord | None) -> bool:
    return record is None and last_exception_line([text]) is not None


def _key_values(text: str) -> Mapping[str, str]:
    """``avail mem=88.10 GB, mem usage=51.10 GB.`` -> {"avail_mem": "88.10 GB", ...}."""
    body = text.split(". ", 1)[1] if ". " in text else text
    found = {
        key.strip().replace(" ", "_"): value.strip().rstrip(".")
        for key, value in _KEY_VALUE_RE.findall(body)
        if "[" not in value and "]" not in value  # lists (num_tokens=[1, 2, ...]) are noise here
    }
    return frozen_map(found)


# -- the memory figures a scheduler logs at startup -----------------------------------------------
# SGLang's own f-strings, per rank, matched at the start of a record's message. "GB" in them is
# GiB (bytes / (1 << 30)); figures have two decimals. Sources: 0.5.11 and 0.5.23 from PyPI.
_GIB = r"\d+(?:\.\d+)?"
# model_runner.py:1290 (0.5.11), :1274 (0.5.23)
_LOAD_BEGIN = re.compile(rf"Load weight begin\. avail mem=(?P<avail>{_GIB}) GB")
# model_runner.py:1468 (0.5.11), :1373 (0.5.23): "elapsed=.. s, type=.., [quant=.., ]avail mem=..
# GB, mem usage=.. GB." (older: "type=.., dtype=.., avail mem=..", sglang PR #4826's paste of
# 2025-03). 0.5.23's overlapped load ends with "Load weight end. Committed real weights after ..."
# (startup_weight_load.py:538): no figures.
_LOAD_END = re.compile(
    rf"Load weight end\. .*?avail mem=(?P<avail>{_GIB}) GB, mem usage=(?P<usage>{_GIB}) GB"
)
# mem_cache/memory_pool.py:735/741 (0.5.11: "#tokens: N, K size: X GB, V size: Y GB", MLA "KV size:
# X GB"), :2088/2096 (0.5.23: "dtype: torch.bfloat16, " first; a labelled pool says "Full KV Cache",
# "SWA KV Cache" ...; under post-capture sizing "KV Cache VA upper bound." instead, not a pool).
_KV = re.compile(
    r"(?:(?P<label>.+?) )?KV Cache is allocated\. (?:dtype: [^,]+, )?#tokens: (?P<tokens>\d+), "
    rf"(?:K size: (?P<k>{_GIB}) GB, V size: (?P<v>{_GIB}) GB|KV size: (?P<kv>{_GIB}) GB)"
)
# 0.5.23 model_runner_components/kv_pool_runtime.py:195 (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING=1)
_KV_POST_CAPTURE = re.compile(
    r"Post-capture KV sizing: KV cache allocated\. dtype: [^,]+, #tokens: (?P<tokens>\d+), "
    rf"KV size: (?P<kv>{_GIB}) GB"
)
# memory_pool.py:325/335 (0.5.11), :984/1005 (0.5.23): no space before "GB"; the intermediate
# (speculative) sizes follow the SSM state's, space-separated.
_MAMBA = re.compile(
    rf"Mamba Cache is allocated\. max_mamba_cache_size: (?P<slots>\d+), "
    rf"conv_state size: (?P<conv>{_GIB}) ?GB, ssm_state size: (?P<ssm>{_GIB}) ?GB"
    rf"(?: intermediate_ssm_state_cache size: (?P<issm>{_GIB}) ?GB "
    rf"intermediate_conv_window_cache size: (?P<iconv>{_GIB}) ?GB)?"
)
# model_executor/model_runner_kv_cache_mixin.py:769 (0.5.11), mem_cache/kv_cache_configurator.py:499
_POOL_END = re.compile(rf"Memory pool end\. avail mem=(?P<avail>{_GIB}) GB")
# 0.5.11: "Capture cuda graph end. Time elapsed: .. s. mem usage=X GB. avail mem=Y GB."
# (model_runner.py:2797; piecewise :2919; draft: speculative/eagle_worker.py:289/304 ...);
# 0.5.23: "Capture target decode CUDA graph end. bs=[..], elapsed=.. s, mem usage=X GB, avail
# mem=Y GB." (cuda_graph_setup.py:788; "target verify" with speculation, "target prefill" :696;
# draft: speculative/eagle_worker_v2.py:533/654 ...).
_GRAPH_END = re.compile(
    rf"Capture (?P<what>.+?) graph end\. .*?mem usage=(?P<usage>{_GIB}) GB[.,] "
    rf"avail mem=(?P<avail>{_GIB}) GB"
)
# managers/scheduler.py:764 (0.5.11), :1269 (0.5.23); tp_rank 0 only
_SUMMARY = re.compile(
    r"max_total_num_tokens=(?P<tokens>\d+),(?:.*?\bmax_running_requests=(?P<requests>\d+))?"
    rf"(?:.*?\bavailable_gpu_mem=(?P<avail>{_GIB}) GB)?"
)
# 0.5.23 mem_cache/kv_cache_configurator.py:3141
_CAPPED = re.compile(r"max_running_requests is capped to (?P<cap>\d+) by the mamba state cache")
# A record written after another process's unfinished tqdm bar ("Capturing batches (...):  0%|
# ... [00:00<?, ?it/s][2026-06-08 07:21:05 TP1] ..." in sglang PR #27537): it starts mid-line.
_RECORD_START = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d")
_RANK_PART = re.compile(r"([A-Z]+)(\d+)")
_COUNTS = (
    "kv_tokens",
    "mamba_slots",
    "max_total_num_tokens",
    "max_running_requests",
    "capped_by_mamba",
)


def memory_figures(lines: Iterable[str]) -> tuple[MeasuredMemory, ...]:
    """What each rank logged about GPU memory at startup: one ``MeasuredMemory`` per rank that
    logged a figure, in rank order (an unprefixed single-GPU log's ``None`` first, then TP0, TP1
    ... or DP0 TP0, DP0 TP1 ...). Lines of any other kind are skipped; one pass. A record that
    starts mid-line, after another rank's unfinished tqdm bar, is read from where it starts.

    Each field keeps the first figure its rank logged. Speculative decoding's draft worker runs
    the same ModelRunner code after the target, and its ``Load weight``, ``KV Cache is
    allocated`` and ``Memory pool end`` lines carry no word that tells them apart. Both releases
    start the target first (``Scheduler.init_model_worker``): 0.5.11 builds the whole draft
    worker after the target's ModelRunner has its weights, pools and graphs; 0.5.23 loads target
    then draft weights, then target then draft pools, then target then draft graphs. So the
    first line of each kind is the target's and a later
    one is the draft's. Graph lines do name the draft (``Capture draft ...``): those are summed
    into ``draft_graphs_gib`` and never touch the target's graph figures.
    """
    ranks: dict[str | None, dict[str, float]] = {}
    for raw in lines:
        if "GB" not in raw and "capped to" not in raw:
            continue  # every memory line but the mamba cap carries a GB figure: skip the rest fast
        line = raw.rstrip("\r\n")
        record = log_record(line)
        if record is None and (start := _RECORD_START.search(line, 1)) is not None:
            record = log_record(line[start.start() :])
        rank, text = (None, line.strip()) if record is None else (record.rank, record.message)
        found = _memory_line(text)
        if not found:
            continue
        figures = ranks.setdefault(rank, {})
        draft = found.pop("draft_graphs_gib", None)
        if draft is not None:
            figures["draft_graphs_gib"] = round(figures.get("draft_graphs_gib", 0.0) + draft, 2)
        for name, value in found.items():
            figures.setdefault(name, value)
    return tuple(_measured(rank, ranks[rank]) for rank in sorted(ranks, key=_rank_order))


def _memory_line(text: str) -> dict[str, float] | None:
    """The figures one SGLang message states, by MeasuredMemory's field names; None for others."""
    if text.startswith("Load weight "):
        if (match := _LOAD_BEGIN.match(text)) is not None:
            return {"avail_before_load_gib": float(match["avail"])}
        if (match := _LOAD_END.match(text)) is not None:
            return {
                "weights_gib": float(match["usage"]),
                "avail_after_load_gib": float(match["avail"]),
            }
        return None
    if "KV Cache is allocated." in text:
        match = _KV.match(text)
        if match is None or match["label"] not in (None, "Full"):  # SWA, index pools: not counted
            return None
        if match["kv"] is not None:
            size = float(match["kv"])
        else:
            size = round(float(match["k"]) + float(match["v"]), 2)
        return {"kv_tokens": float(match["tokens"]), "kv_gib": size}
    if text.startswith("Post-capture KV sizing: KV cache allocated."):
        if (match := _KV_POST_CAPTURE.match(text)) is None:
            return None
        return {"kv_tokens": float(match["tokens"]), "kv_gib": float(match["kv"])}
    if text.startswith("Mamba Cache is allocated."):
        return _mamba(text)
    if text.startswith("Memory pool end."):
        if (match := _POOL_END.match(text)) is None:
            return None
        return {"avail_after_pools_gib": float(match["avail"])}
    if text.startswith("Capture "):
        return _graph(text)
    if text.startswith("max_total_num_tokens="):
        return _summary(text)
    if text.startswith("max_running_requests is capped to"):
        if (match := _CAPPED.match(text)) is None:
            return None
        return {"capped_by_mamba": float(match["cap"])}
    return None


def _mamba(text: str) -> dict[str, float] | None:
    match = _MAMBA.match(text)
    if match is None:
        return None
    state = float(match["conv"]) + float(match["ssm"])
    found = {"mamba_slots": float(match["slots"]), "mamba_gib": round(state, 2)}
    if match["issm"] is not None:
        intermediate = float(match["issm"]) + float(match["iconv"])
        found["mamba_intermediate_gib"] = round(intermediate, 2)
        found["mamba_gib"] = round(state + intermediate, 2)
    return found


def _graph(text: str) -> dict[str, float] | None:
    match = _GRAPH_END.match(text)
    if match is None:
        return None
    what = match["what"].lower()
    usage = float(match["usage"])
    if "draft" in what:
        return {"draft_graphs_gib": usage}
    if "piecewise" in what or "prefill" in what:
        return {"prefill_graphs_gib": usage}
    return {"graphs_gib": usage, "avail_after_graphs_gib": float(match["avail"])}


def _summary(text: str) -> dict[str, float] | None:
    match = _SUMMARY.match(text)
    if match is None:
        return None
    found = {"max_total_num_tokens": float(match["tokens"])}
    if match["requests"] is not None:
        found["max_running_requests"] = float(match["requests"])
    if match["avail"] is not None:
        found["available_gpu_mem_gib"] = float(match["avail"])
    return found


def _rank_order(rank: str | None) -> tuple[tuple[tuple[str, int], ...], str]:
    """``DP1 TP3`` -> ((DP, 1), (TP, 3)): numbers compare as numbers (TP10 after TP9)."""
    if rank is None:
        return (), ""
    return tuple((name, int(number)) for name, number in _RANK_PART.findall(rank)), rank


def _measured(rank: str | None, figures: dict[str, float]) -> MeasuredMemory:
    counts = {name: int(figures[name]) for name in _COUNTS if name in figures}
    return MeasuredMemory(
        rank=rank,
        avail_before_load_gib=figures.get("avail_before_load_gib"),
        weights_gib=figures.get("weights_gib"),
        avail_after_load_gib=figures.get("avail_after_load_gib"),
        kv_tokens=counts.get("kv_tokens"),
        kv_gib=figures.get("kv_gib"),
        mamba_slots=counts.get("mamba_slots"),
        mamba_gib=figures.get("mamba_gib"),
        mamba_intermediate_gib=figures.get("mamba_intermediate_gib"),
        avail_after_pools_gib=figures.get("avail_after_pools_gib"),
        graphs_gib=figures.get("graphs_gib"),
        avail_after_graphs_gib=figures.get("avail_after_graphs_gib"),
        max_total_num_tokens=counts.get("max_total_num_tokens"),
        max_running_requests=counts.get("max_running_requests"),
        available_gpu_mem_gib=figures.get("available_gpu_mem_gib"),
        capped_by_mamba=counts.get("capped_by_mamba"),
        prefill_graphs_gib=figures.get("prefill_graphs_gib"),
        draft_graphs_gib=figures.get("draft_graphs_gib"),
    )


class LineSplitter:
    """Bytes as they arrive -> complete lines, split on ``\\n`` and tqdm's ``\\r``."""

    def __init__(self) -> None:
        self._partial = b""

    def feed(self, chunk: bytes) -> list[str]:
        pieces = re.split(rb"[\r\n]", self._partial + chunk)
        self._partial = pieces.pop()
        return [piece.decode("utf-8", "replace") for piece in pieces if piece]

    def flush(self) -> list[str]:
        rest, self._partial = self._partial, b""
        return [rest.decode("utf-8", "replace")] if rest else []
