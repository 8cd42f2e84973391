"""What a server's ``/v1/loads`` figures mean (pure): one row's figures over its DP ranks, and
what caps its concurrency, ``max_running_requests``.

SGLang decides ``max_running_requests`` per DP worker once its pools are sized (0.5.23
mem_cache/kv_cache_configurator.py ``resolve_max_num_reqs``; 0.5.11 the model runner's
``_resolve_max_num_reqs``): the ``--max-running-requests`` asked for, divided by the attention-DP
size (0.5.11: by ``--dp-size``), or else its estimate from the KV tokens and the context length
(2048..4096); either bounded by the KV pool (``tokens // 2``; 0.5.11 bounds an asked value by the
estimate instead); then, for a hybrid (mamba / linear attention) model, capped by the mamba state
slots (``max_mamba_cache_size // slots per request``; 0.5.23 logs "max_running_requests is capped
to N by the mamba state cache"). ``/v1/loads`` reports the result and the KV pool, not the
mamba slots: the bound is found by elimination, or taken from ``orch up``'s memory plan when it
predicted the same value (its ``limited_by``, kept in the run's meta).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.model import RankLoad
from orchestrator.sglang.memory.rules import rules_for

ESTIMATE_LOW, ESTIMATE_HIGH = 2048, 4096  # SGLang's estimate is clamped to these

# what decides max_running_requests, as the CAP column says it
BY_ARGUMENT = "--max-running-requests"
BY_KV_POOL = "KV pool"
BY_ESTIMATE = "KV estimate"
BY_MAMBA = "mamba slots"


@dataclass(frozen=True)
class Totals:
    """One server's figures over its DP ranks: requests and throughput summed; token usage the
    fullest rank's (the first to refuse requests); cache hit rate and accept length the mean of
    the ranks that report them."""

    running: int | None
    waiting: int | None
    token_usage: float | None
    gen_throughput: float | None
    cache_hit_rate: float | None
    accept_length: float | None
    max_running_requests: int | None  # per DP rank (every rank is sized alike)


def totals(ranks: Sequence[RankLoad]) -> Totals:
    def summed(values: list[float | int | None]) -> float | None:
        known = [value for value in values if value is not None]
        return float(sum(known)) if known else None

    def mean(values: list[float | None]) -> float | None:
        known = [value for value in values if value is not None]
        return sum(known) / len(known) if known else None

    running = summed([rank.running for rank in ranks])
    waiting = summed([rank.waiting for rank in ranks])
    usage = [rank.token_usage for rank in ranks if rank.token_usage is not None]
    caps = [rank.max_running_requests for rank in ranks if rank.max_running_requests is not None]
    return Totals(
        running=None if running is None else int(running),
        waiting=None if waiting is None else int(waiting),
        token_usage=max(usage) if usage else None,
        gen_throughput=summed([rank.gen_throughput for rank in ranks]),
        cache_hit_rate=mean([rank.cache_hit_rate for rank in ranks]),
        accept_length=mean([rank.accept_length for rank in ranks]),
        max_running_requests=max(caps) if caps else None,
    )


@dataclass(frozen=True)
class LaunchFacts:
    """What the launch's argv says that decides max_running_requests."""

    requested: int | None = None  # --max-running-requests
    dp_size: int = 1
    dp_attention: bool = False


def launch_facts(argv: Sequence[str]) -> LaunchFacts:
    def value(*names: str) -> str | None:
        found = None
        for index, arg in enumerate(argv):
            for name in names:
                if arg == name and index + 1 < len(argv):
                    found = argv[index + 1]
                elif arg.startswith(name + "="):
                    found = arg.partition("=")[2]
        return found

    def integer(text: str | None) -> int | None:
        try:
            return int(text) if text is not None else None
        except ValueError:
            return None

    return LaunchFacts(
        requested=integer(value("--max-running-requests")),
        dp_size=max(1, integer(value("--dp-size", "--dp")) or 1),
        dp_attention="--enable-dp-attention" in argv,
    )


@dataclass(frozen=True)
class Cap:
    requests: int  # max_running_requests per DP rank, as the server reports it
    by: str | None  # BY_*; None when nothing known explains the value


def concurrency_cap(
    observed: int | None,
    token_capacity: int | None,
    facts: LaunchFacts,
    *,
    version: str | None = None,
    planned: int | None = None,
    planned_by: str | None = None,
) -> Cap | None:
    """What decides the server's ``max_running_requests`` (``observed``, per DP rank), from
    the KV pool it reports, the launch's argv and, when it predicted this very value, the
    memory plan's ``limited_by``."""
    if observed is None:
        return None
    if planned_by and planned == observed:
        return Cap(observed, _plan_bound(planned_by))
    rules = rules_for(_version(version))
    kv_bound = token_capacity // 2 if token_capacity else None
    if facts.requested is not None:
        attn_dp = facts.dp_size if facts.dp_attention else 1
        divisor = attn_dp if rules.requests_per_attn_dp else facts.dp_size
        per_worker = facts.requested // divisor
        if rules.requests_floor_one:
            per_worker = max(1, per_worker)
        if observed == per_worker:
            return Cap(observed, BY_ARGUMENT)
        below = per_worker
    else:
        below = ESTIMATE_LOW
    if kv_bound is not None and observed == kv_bound:
        return Cap(observed, BY_KV_POOL)
    if ESTIMATE_LOW <= observed <= ESTIMATE_HIGH and (kv_bound is None or observed < kv_bound):
        return Cap(observed, BY_ESTIMATE)
    if observed < below and (kv_bound is None or observed < kv_bound):
        return Cap(observed, BY_MAMBA)  # the only bound SGLang applies below the others
    return Cap(observed, None)


def _plan_bound(limited_by: str) -> str:
    """memory/pools.py's ``limited_by`` sentence as a CAP word."""
    if limited_by.startswith("mamba"):
        return BY_MAMBA
    if limited_by.startswith("max_running_requests"):
        return BY_ARGUMENT
    if limited_by.startswith("the KV pool"):
        return BY_KV_POOL
    return BY_ESTIMATE


def _version(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    parts: list[int] = []
    for part in text.split(".")[:3]:
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts) or None
