"""``tail``: the last lines of a run's log, read on the host in one command."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, refused


def tail_request(
    directory: str, lines: int, bytes_per_line: int, run_id: str | None = None
) -> Request:
    """The last ``lines`` of ``run_id``'s log (default the current run, else the newest)."""
    args = ["tail", "--dir", directory, "--lines", str(lines)]
    args += ["--bytes-per-line", str(bytes_per_line)]
    if run_id is not None:
        args += ["--run", run_id]
    return Request(tuple(args))


@dataclass(frozen=True)
class TailReply:
    """``tail``: the last lines of a run's log, read on the host."""

    ok: bool
    reason: str
    run_id: str | None
    log: str | None
    data: bytes  # as the log holds them: decoded by whoever shows them
    size: int | None  # where a follow goes on from
    rotated_size: int | None  # server.log.1's size: how a follow sees the next rotation


def decode_tail(document: Any) -> TailReply:
    refused(document)
    reader = Reader(document, "agent tail")
    try:
        data = base64.b64decode(reader.text("data", ""), validate=True)
    except ValueError as exc:
        raise reader.bad("data", "base64") from exc
    return TailReply(
        ok=reader.flag("ok", False),
        reason=reader.text("reason", ""),
        run_id=reader.opt_text("run_id"),
        log=reader.opt_text("log"),
        data=data,
        size=reader.opt_integer("size"),
        rotated_size=reader.opt_integer("rotated_size"),
    )
