"""``orch status --load``'s columns and each row's ``"load"`` in ``--json``: what a server's
``/v1/loads`` says (read now, or the last figures its supervisor kept, with their age), summed
over its DP ranks in the row, each rank listed under the table when there are several."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from orchestrator.cli.show.core import duration
from orchestrator.commands.ops import StatusRow
from orchestrator.model import RankLoad, ServerLoad
from orchestrator.sglang.loads import Cap, totals

LOAD_HEADER = ("RUN/WAIT", "KV%", "TOK/S", "HIT%", "ACCEPT", "CAP", "SEEN")
NO_LOAD = ("-",) * len(LOAD_HEADER)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f}%"


def rate(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.1f}" if value < 100 else f"{int(value + 0.5):,}"  # half up, not to even


def run_wait(running: int | None, waiting: int | None) -> str:
    if running is None and waiting is None:
        return "-"
    return f"{'-' if running is None else running}/{'-' if waiting is None else waiting}"


def cap_cell(cap: Cap | None) -> str:
    if cap is None:
        return "-"
    return f"{cap.requests} ({cap.by})" if cap.by else str(cap.requests)


def seen_cell(load: ServerLoad) -> str:
    """``live``, or how old the figures are (their age on the host's clock)."""
    if load.live:
        return "live"
    if not load.ranks:
        return "-"
    return f"{duration(load.age_s)} ago" if load.age_s is not None else "?"


def load_cells(row: StatusRow) -> tuple[str, ...]:
    load = row.state.load if row.state is not None else None
    if load is None or not load.ranks:
        return NO_LOAD[:-1] + ((seen_cell(load),) if load is not None else ("-",))
    total = totals(load.ranks)
    accept = "-" if total.accept_length is None else f"{total.accept_length:.2f}"
    return (
        run_wait(total.running, total.waiting),
        percent(total.token_usage),
        rate(total.gen_throughput),
        percent(total.cache_hit_rate),
        accept,
        cap_cell(row.cap),
        seen_cell(load),
    )


def rank_line(load: RankLoad) -> str:
    accept = "" if load.accept_length is None else f", accept {load.accept_length:.2f}"
    return (
        f"run/wait {run_wait(load.running, load.waiting)}, KV {percent(load.token_usage)}, "
        f"{rate(load.gen_throughput)} tok/s, hit {percent(load.cache_hit_rate)}{accept}, "
        f"max running {load.max_running_requests if load.max_running_requests is not None else '-'}"
    )


def load_lines(rows: Sequence[StatusRow]) -> list[str]:
    """Under the table: each DP rank of a server with several, and a read that failed."""
    lines: list[str] = []
    for row in rows:
        load = row.state.load if row.state is not None else None
        if load is None:
            continue
        name = row.deployment if row.rank is None else f"{row.deployment} r{row.rank}"
        if len(load.ranks) > 1:
            lines.extend(f"{name} DP{rank.dp_rank}: {rank_line(rank)}" for rank in load.ranks)
        if load.error:
            kept = " (the last figures shown)" if load.ranks else ""
            lines.append(f"{name}: load not read: {load.error}{kept}")
    return lines


def load_json(row: StatusRow) -> dict[str, object] | None:
    """A row's ``"load"``: ``live`` (read now) or not, ``at`` (the host's wall clock) and
    ``age_s``, each DP rank's figures, their ``total`` and what caps concurrency (``cap``)."""
    load = row.state.load if row.state is not None else None
    if load is None:
        return None
    return {
        "live": load.live,
        "at": load.at,
        "age_s": load.age_s,
        "error": load.error,
        "version": load.version,
        "ranks": [dataclasses.asdict(rank) for rank in load.ranks],
        "total": dataclasses.asdict(totals(load.ranks)) if load.ranks else None,
        "cap": dataclasses.asdict(row.cap) if row.cap is not None else None,
    }
