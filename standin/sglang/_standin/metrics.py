"""``GET /metrics`` of the stand-in (NOT SGLang): SGLang's Prometheus text exposition, served only
with ``--enable-metrics`` (without it SGLang mounts no ``/metrics`` route: FastAPI's 404
``{"detail": "Not Found"}``, which the endpoints answer).

What it imitates (0.5.23 ``srt/observability/metrics_collector.py``): the scheduler collector's
gauges, named ``sglang:<name>``, each series labelled as ``SchedulerMetricsCollector`` labels it:
``model_name`` (the served model name), ``engine_type`` (``unified`` without PD disaggregation,
else ``prefill``/``decode``), ``tp_rank``, ``pp_rank``, ``moe_ep_rank`` and, with DP, ``dp_rank``
(in that order, as prometheus_client's multiprocess collector writes them). One series per
scheduler that reports: the stats-logging rank (attention TP rank 0) always, every scheduler with
``--enable-metrics-for-all-schedulers``. A small, fleet-relevant subset of SGLang's ~169 names is
served (``GAUGES``); the values agree with ``/v1/loads`` (running and waiting from the requests in
flight, the KV pool's size from the stand-in's memory figures; usage, throughput, hit rate 0).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

# name -> HELP text, as SGLang 0.5.23's collector documents each (metrics_collector.py)
GAUGES: dict[str, str] = {
    "num_running_reqs": "The number of running requests.",
    "num_queue_reqs": "The number of requests in the waiting queue.",
    "num_used_tokens": "The number of used tokens.",
    "max_total_num_tokens": "Maximum total number of tokens in the KV cache pool.",
    "token_usage": "The token usage.",
    "gen_throughput": "The generation throughput (token/s).",
    "cache_hit_rate": "The prefix cache hit rate.",
}


@dataclass(frozen=True)
class SchedulerLabels:
    """One scheduler's label values."""

    tp_rank: int
    pp_rank: int = 0
    moe_ep_rank: int = 0
    dp_rank: int | None = None


def engine_type(values: Mapping[str, Any]) -> str:
    """``DisaggregationMode.to_engine_type``: prefill, decode, else unified."""
    mode = values.get("disaggregation_mode")
    return mode if mode in ("prefill", "decode") else "unified"


def reporting_schedulers(
    values: Mapping[str, Any], tp_ranks: Iterable[int], pp_ranks: Iterable[int]
) -> list[SchedulerLabels]:
    """The schedulers of this node that export their series: attention-TP rank 0 of each PP
    rank (the stats-logging rank), or every one with ``--enable-metrics-for-all-schedulers``."""
    every = bool(values.get("enable_metrics_for_all_schedulers"))
    tp = max(1, int(values.get("tp_size") or 1))
    dp = max(1, int(values.get("dp_size") or 1))
    ep = max(1, int(values.get("ep_size") or 1))
    dp_attention = bool(values.get("enable_dp_attention"))
    attn_tp = tp // dp if dp_attention else tp
    out = []
    for pp_rank in pp_ranks:
        for tp_rank in tp_ranks:
            if not every and tp_rank % attn_tp != 0:
                continue
            dp_rank = tp_rank // attn_tp if dp_attention else (0 if dp > 1 else None)
            moe_ep_rank = tp_rank % ep if ep > 1 else 0
            out.append(SchedulerLabels(tp_rank, pp_rank, moe_ep_rank, dp_rank))
    return out


def exposition(
    values: Mapping[str, Any],
    schedulers: Iterable[SchedulerLabels],
    load_of: Callable[[SchedulerLabels], Mapping[str, float]],
) -> str:
    """The text format (version 0.0.4) prometheus_client writes: HELP, TYPE, then one sample per
    scheduler for each gauge; a gauge the load does not name is 0.0."""
    model_name = str(values.get("served_model_name") or values.get("model_path") or "")
    kind = engine_type(values)
    rows = [(labels, load_of(labels)) for labels in schedulers]
    lines: list[str] = []
    for name, help_text in GAUGES.items():
        lines.append(f"# HELP sglang:{name} {help_text}")
        lines.append(f"# TYPE sglang:{name} gauge")
        for labels, load in rows:
            pairs = [
                ("model_name", model_name),
                ("engine_type", kind),
                ("tp_rank", str(labels.tp_rank)),
                ("pp_rank", str(labels.pp_rank)),
                ("moe_ep_rank", str(labels.moe_ep_rank)),
            ]
            if labels.dp_rank is not None:
                pairs.append(("dp_rank", str(labels.dp_rank)))
            text = ",".join(f'{key}="{_escape(value)}"' for key, value in pairs)
            lines.append(f"sglang:{name}{{{text}}} {float(load.get(name, 0.0))!r}")
    return "\n".join(lines) + "\n"


def _escape(value: str) -> str:
    """A label value as the text format quotes it."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
