"""SGLang's log vocabulary, defined once in the agent: the record prefix, the config line, the
ready line; what `up` keeps from the log it follows, and what the agent keeps from the log it
watches, for comparing a crashed server's configuration."""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from orchestrator.commands.follow import StartupLog
from orchestrator.remote.agent.cmd_inspect import config_from_log
from orchestrator.remote.agent.output import (
    LINE_SCAN_BYTES,
    TAIL_LINE_CHARS,
    LogSink,
    OutputWatcher,
)
from orchestrator.remote.agent.protocol import CONFIG_FILE
from orchestrator.remote.agent.sglang_log import (
    LOG_RECORD,
    READY_LINE,
    LogRecord,
    config_line_payload,
    is_ready_line,
    log_record,
)
from orchestrator.remote.agent.states import READY, RUNNING
from orchestrator.sglang import observe
from orchestrator.sglang.observe import parse_line
from tests.conftest import capture_lines

CONFIG_CAPTURES = ("server_args-logline-0511-simcuda.txt", "server_args-logline-0523-simcuda.txt")
TRACEBACK_CAPTURES = (
    "launch_server-0511-seed-without-mamba-flag-cpu.stderr",
    "launch_server-0523-seed-renamed-flag-cpu.stderr",
    "sglang-serve-0511-seed-without-mamba-flag-cpu.stderr",
    "sglang-serve-0523-seed-renamed-flag-cpu.stderr",
    "resolve-0511-G_spec_draft8_topk1.txt",
    "resolve-0523-G_spec_draft8_topk1.txt",
)


def feed(log: StartupLog, lines: list[str]) -> None:
    for line in lines:
        log.add(line, parse_line(line))


# -- the vocabulary -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "record"),
    [
        (
            "[2026-11-29 07:36:28] Load weight begin. avail mem=139.20 GB",
            LogRecord("2026-11-29 07:36:28", None, "Load weight begin. avail mem=139.20 GB"),
        ),
        (
            "[2026-11-29 07:36:28.512 TP0] Capture cuda graph begin.",
            LogRecord("2026-11-29 07:36:28.512", "TP0", "Capture cuda graph begin."),
        ),
        (
            "[2026-11-29 07:36:28 DP1 TP3] Scheduler hit an exception:",
            LogRecord("2026-11-29 07:36:28", "DP1 TP3", "Scheduler hit an exception:"),
        ),
        ("Traceback (most recent call last):", None),
        ('  File "/opt/sglang/srt/server_args.py", line 2163, in check_server_args', None),
        ("INFO:     Uvicorn running on http://0.0.0.0:30000 (Press CTRL+C to quit)", None),
        ("[exit 3]", None),
        ("[2026-11-29 07:36:28]no space", None),
    ],
)
def test_log_record_reads_sglang_prefix(line: str, record: LogRecord | None) -> None:
    assert log_record(line) == record


def test_line_re_is_the_agents_regex_with_the_message_in_group_3() -> None:
    line = "[2026-11-29 07:36:28.512 TP0] Memory pool end. avail mem=12.1 GB"
    match = observe.LINE_RE.match(line)
    assert observe.LINE_RE is LOG_RECORD
    assert match is not None
    assert match.group(1, 2, 3) == tuple(log_record(line) or ())


@pytest.mark.parametrize("capture", CONFIG_CAPTURES)
def test_the_config_line_of_each_format_gives_its_payload(capture: str) -> None:
    (line,) = capture_lines(capture)
    payload = config_line_payload(line)
    assert payload is not None
    assert payload.startswith(("ServerArgs(", "{"))
    record = log_record(line)
    assert record is not None
    assert record.message.rstrip() == f"server_args={payload}"
    ast.parse(payload, mode="eval")  # what verify reads, never evaluates
    assert config_line_payload(line + "\r\n") == payload


@pytest.mark.parametrize("capture", TRACEBACK_CAPTURES)
def test_real_logs_without_a_config_line_give_no_payload(capture: str) -> None:
    assert [line for line in capture_lines(capture) if config_line_payload(line)] == []


@pytest.mark.parametrize(
    "line",
    [
        "server_args=ServerArgs(port=30000)",  # not a record of SGLang's logger
        "  print(f'server_args={server_args}')",  # a traceback's source line
        "[2026-11-29 07:36:27] server_args=<ServerArgs object at 0x7f>",
        "[2026-11-29 07:36:27] Using server_args={'port': 1} from the cache",
    ],
)
def test_other_mentions_of_server_args_are_not_the_config_line(line: str) -> None:
    assert config_line_payload(line) is None
    event = parse_line(line)
    assert event is None or event.kind != "config"


def test_the_ready_line_is_a_record_of_sglangs_logger() -> None:
    assert is_ready_line(f"[2026-11-29 07:43:40] {READY_LINE}")
    assert is_ready_line(f"[2026-11-29 07:43:40.001] {READY_LINE}")
    assert is_ready_line(f"[2026-11-29 07:43:40] {READY_LINE}\r\n")
    assert not is_ready_line(f'    logger.info("{READY_LINE}")')  # a traceback's source line
    assert not is_ready_line("[2026-11-29 07:43:40] Uvicorn running on http://0.0.0.0:30000")


@pytest.mark.parametrize(
    "line",
    [
        READY_LINE,  # printed, not logged
        f"[2026-11-29 07:36:27] server_args=ServerArgs(served_model_name='{READY_LINE}')",
        f"[2026-11-29 07:43:41] Receive: obj=GenerateReqInput(text='{READY_LINE}', rid='1')",
        f'[2026-11-29 07:43:41] INFO:     127.0.0.1:5 - "GET /v1/models/{READY_LINE} HTTP/1.1" 404',
        f"[2026-11-29 07:43:41] Model {READY_LINE} is loading",
    ],
)
def test_the_ready_words_anywhere_else_are_not_the_ready_line(line: str) -> None:
    assert not is_ready_line(line)
    event = parse_line(line)
    assert event is None or event.kind != "ready"


def test_a_served_model_name_saying_ready_never_makes_a_hung_server_ready(tmp_path: Path) -> None:
    """READY needs /health 200 (or SGLang's own ready record): a server whose served model name
    is the ready line, that logs that name and never answers /health, stays STARTING/RUNNING
    until stopped (issue 10 §3)."""
    from tests.unit.test_supervisor_logic import Script, supervise

    name = READY_LINE
    lines = (
        (0.5, f"[2026-11-29 07:36:27] server_args=ServerArgs(served_model_name='{name}')"),
        (1.0, f"[2026-11-29 07:36:28] Model {name} is loading"),
        (1.5, name),
        (2.0, f"[2026-11-29 07:36:29 TP0] Load weight begin. model={name}"),
    )
    outcome = supervise(tmp_path, Script(lines=lines), stop_at=60.0)
    assert READY not in outcome.states
    assert RUNNING in outcome.states  # it got as far as the config line
    assert outcome.of("ready") == []


def test_parse_line_uses_the_vocabulary() -> None:
    config = parse_line("[2026-11-29 07:36:27.004] server_args=ServerArgs(port=30000)")
    assert config is not None
    assert (config.kind, config.timestamp, config.rank) == (
        "config",
        "2026-11-29 07:36:27.004",
        None,
    )
    ready = parse_line(f"[2026-11-29 07:43:40 TP0] {READY_LINE}")
    assert ready is not None
    assert (ready.kind, ready.rank, ready.text) == ("ready", "TP0", READY_LINE)


# -- what `up` keeps ----------------------------------------------------------------------------


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


# -- what the agent keeps -----------------------------------------------------------------------


def test_the_agent_keeps_the_config_line_from_output_split_anywhere(tmp_path: Path) -> None:
    kept = tmp_path / CONFIG_FILE
    sink = LogSink(str(tmp_path / "server.log"), max_bytes=1 << 20, keep=1)
    watcher = OutputWatcher(sink, config_path=str(kept))
    output = (
        b"  print(f'server_args={server_args}')\n"
        b"[2026-11-29 07:36:26] Attention backend not specified.\n"
        b"Loading shards:  50% Completed\rLoading shards: 100% Completed\n"
        b"[2026-11-29 07:36:27] server_args={'port': 30000}\n"
        + f"[2026-11-29 07:36:40] {READY_LINE}".encode()  # no newline: the output ends
    )
    for start in range(0, len(output), 7):
        watcher.feed(output[start : start + 7])
    ready_before_the_end = watcher.saw_ready_line  # not a line until the output ends
    watcher.close()
    assert watcher.saw_config_line
    assert (ready_before_the_end, watcher.saw_ready_line) == (False, True)
    document = json.loads(kept.read_text())
    assert document["server_args_line"] == "[2026-11-29 07:36:27] server_args={'port': 30000}"
    assert document["log_lines"][-1] == "Loading shards: 100% Completed"
    assert (tmp_path / "server.log").read_bytes() == output


def test_the_agent_finds_the_config_line_past_a_mention_in_a_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text(
        "  print(f'server_args={server_args}')\n"
        "[2026-11-29 07:36:27] server_args=ServerArgs(port=30000)\n"
    )
    found = config_from_log(str(log))
    assert found["server_args_line"] == "[2026-11-29 07:36:27] server_args=ServerArgs(port=30000)"
    assert found["log_lines"] == ["  print(f'server_args={server_args}')"]


# -- the pump: linear, bounded ------------------------------------------------------------------


def test_a_line_longer_than_the_scan_cap_is_logged_whole_and_noted_by_its_head(
    tmp_path: Path,
) -> None:
    log = tmp_path / "server.log"
    watcher = OutputWatcher(LogSink(str(log), max_bytes=1 << 30, keep=1))
    huge = b"x" * (3 * LINE_SCAN_BYTES + 123)
    output = (
        b"[2026-11-29 07:36:26] before\n"
        + huge
        + b"\r"
        + f"[2026-11-29 07:43:40] {READY_LINE}\n".encode()
    )
    for start in range(0, len(output), 65536):
        watcher.feed(output[start : start + 65536])
    watcher.close()
    assert watcher.saw_ready_line
    before, long_line, ready = watcher.tail
    assert before == "[2026-11-29 07:36:26] before"
    assert long_line == "x" * TAIL_LINE_CHARS  # the head of the long line
    assert ready == f"[2026-11-29 07:43:40] {READY_LINE}"
    assert log.read_bytes() == output  # the log keeps every byte


def test_feeding_a_30_mb_line_is_linear(tmp_path: Path) -> None:
    # Re-joining the partial line on every read took minutes for this (68 s with a real pipe).
    watcher = OutputWatcher(LogSink(str(tmp_path / "log"), max_bytes=1 << 30, keep=1))
    chunk = b"y" * 65536
    began = time.monotonic()
    for _ in range(30_000_000 // len(chunk)):
        watcher.feed(chunk)
    watcher.feed(f"\n[2026-11-29 07:43:40] {READY_LINE}\n".encode())
    took = time.monotonic() - began
    watcher.close()
    assert watcher.saw_ready_line
    assert took < 5.0, took
