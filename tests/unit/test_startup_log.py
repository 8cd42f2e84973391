"""What `up` keeps from the log it follows, for comparing a crashed server's configuration."""

from __future__ import annotations

from orchestrator.observe import parse_line
from orchestrator.pipeline import StartupLog


def feed(log: StartupLog, lines: list[str]) -> None:
    for line in lines:
        log.add(line, parse_line(line))


def test_keeps_the_config_line_and_what_came_before_it_only() -> None:
    log = StartupLog()
    lines = [
        "[2026-11-29 07:36:26] Max running requests is reset to 48 for speculative decoding.",
        "[2026-11-29 07:36:27] server_args=ServerArgs(port=30000, page_size=1)",
        "[2026-11-29 07:36:28] Load weight begin. avail mem=139.20 GB",
    ]
    feed(log, lines)
    assert log.config_line == lines[1]
    assert log.before == lines[:1]


def test_a_config_line_that_is_not_a_literal_is_kept_not_evaluated_while_following() -> None:
    # following must never fail on what the server prints; reading it is done (safely) later
    log = StartupLog()
    line = "[2026-11-29 07:36:27] server_args=ServerArgs(port=__import__('os').getpid())"
    feed(log, [line])
    assert log.config_line == line


def test_an_unprefixed_mention_is_not_the_config_line() -> None:
    log = StartupLog()
    feed(log, ["  print(f'server_args={server_args}')"])  # a traceback's source line
    assert log.config_line is None
