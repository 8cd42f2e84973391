"""The agent's output pump with a real child process: a 30 MB line without a newline, then
SGLang's ready line. The pump once re-copied its partial line on every 64 KiB read, so the
ready line came 68 s later instead of at once, and the server blocked on its full pipe."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from orchestrator.remote.agent.output import LogSink, OutputWatcher
from orchestrator.remote.agent.sglang_log import READY_LINE
from orchestrator.remote.agent.world import RealClock, RealWorld

READY_RECORD = f"[2026-11-29 07:43:40] {READY_LINE}"
HUGE = 30_000_000


def _time_to_ready_line(tmp_path: Path, huge: int) -> tuple[float, int]:
    """Seconds from spawning a child that prints ``huge`` bytes without a newline and then the
    ready record, to the watcher having noted the ready record; and the log's size."""
    program = (
        "import sys, time\n"
        "out = sys.stdout.buffer\n"
        f"out.write(b'x' * {huge})\n"
        f"out.write(b'\\n' + {READY_RECORD.encode()!r} + b'\\n')\n"
        "out.flush()\n"
        "time.sleep(60)\n"
    )
    log = tmp_path / f"server-{huge}.log"
    watcher = OutputWatcher(LogSink(str(log), max_bytes=1 << 30, keep=1))
    world = RealWorld(RealClock())
    began = time.monotonic()
    process = world.spawn([sys.executable, "-c", program], str(tmp_path), dict(os.environ), watcher)
    try:
        while not watcher.saw_ready_line and time.monotonic() - began < 30:
            time.sleep(0.005)
        took = time.monotonic() - began
    finally:
        os.kill(process.pid, 9)
        process.wait()
        process.drain(5.0)
    return took, log.stat().st_size


def test_a_30_mb_line_does_not_delay_the_ready_line(tmp_path: Path) -> None:
    plain, _ = _time_to_ready_line(tmp_path, 0)
    took, size = _time_to_ready_line(tmp_path, HUGE)
    assert size == HUGE + 1 + len(READY_RECORD) + 1  # every byte reached the log
    assert took < 3.0, f"ready line noted {took:.2f} s after the start ({plain:.2f} s without)"
