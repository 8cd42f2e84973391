"""``runs``: every run of a deployment with its start, READY and exit, and the host's clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, exit_info, refused
from orchestrator.model import ExitInfo


def runs_request(directory: str) -> Request:
    return Request(("runs", "--dir", directory))


@dataclass(frozen=True)
class RunInfo:
    """One run (a server start) of a deployment; what events.jsonl kept of it (agents before
    this version answered only ``run_id``, ``log`` and ``size``)."""

    run_id: str
    log: str
    size: int | None  # bytes of its server.log; None when it has none
    started_at: float | None = None  # the host's wall clock
    ready_at: float | None = None
    pid: int | None = None
    exit: ExitInfo | None = None  # how it ended; None while it runs, or when not recorded


@dataclass(frozen=True)
class RunsReply:
    runs: tuple[RunInfo, ...]
    now: float | None  # the host's wall clock when it answered (None: an older agent)
    skipped_events: int = 0  # lines of events.jsonl that are no event (too long, too deep)


def decode_runs_reply(document: Any) -> RunsReply:
    """``runs``: each run with its start, READY and exit when the agent recorded them."""
    refused(document)
    reader = Reader(document, "agent runs")
    runs = []
    for index, raw in enumerate(reader.items("runs")):
        run = Reader(raw, f"agent runs.runs[{index}]")
        ended = run.child("exit")
        info = RunInfo(
            run.text("run_id"),
            run.text("log"),
            run.opt_integer("size"),
            started_at=run.opt_number("started_at"),
            ready_at=run.opt_number("ready_at"),
            pid=run.opt_integer("pid"),
            exit=None if ended is None else exit_info(ended),
        )
        runs.append(info)
    return RunsReply(tuple(runs), reader.opt_number("now"), reader.integer("skipped_events", 0))
