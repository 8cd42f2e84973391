"""``orch status --watch [SECONDS]``: the status table (with its load columns) redrawn every
SECONDS until Ctrl-C, which ends it with exit 0.

On a terminal it redraws in place, as ``watch(1)`` does: the cursor home, the screen cleared,
a header line (the interval and the time), the table. Anywhere else (a pipe, a file, CI's log)
escape sequences would be noise: each refresh is printed after the previous one, its header
line separating them, as ``kubectl get -w`` streams to a file. With ``--json`` each refresh is
one JSON document on one line (JSON Lines), on a terminal too.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode

HOME_AND_CLEAR = "\x1b[H\x1b[2J"  # cursor home, then erase the whole screen


def header(interval_s: float, now: float) -> str:
    at = time.strftime("%H:%M:%S", time.localtime(now))
    return f"Every {interval_s:g}s: orch status --load    {at}"


def watch(
    look: Callable[[], str],
    output: Output,
    interval_s: float,
    *,
    json_lines: bool = False,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    wall: Callable[[], float] = time.time,
) -> int:
    """``look`` (one status text) every ``interval_s`` seconds, from one refresh's start to the
    next, until Ctrl-C."""
    in_place = output.out.isatty() and not json_lines
    try:
        while True:
            started = clock()
            text = look()
            if json_lines:
                output.print(text)
            else:
                if in_place:
                    output.out.control(HOME_AND_CLEAR)
                output.print(f"{header(interval_s, wall())}\n\n{text}")
                if not in_place:
                    output.print()  # a blank line before the next refresh's header
            output.out.flush()
            sleep(max(interval_s - (clock() - started), 0.0))
    except KeyboardInterrupt:
        if in_place:
            output.print()
        return ExitCode.OK
