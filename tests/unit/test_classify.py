"""Exit classification on SGLang's real outputs, and the restart policy's arithmetic."""

from __future__ import annotations

import signal

import pytest

from orchestrator.remote.agent import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    IMPORT_ERROR,
    KILLED,
    MODEL_NOT_FOUND,
    NCCL,
    PORT_IN_USE,
    ExitVerdict,
    RestartPolicy,
    classify_exit,
)
from tests.conftest import capture_lines


def test_incident_value_error_before_config_line_is_a_config_error() -> None:
    tail = capture_lines("launch_server-0511-seed-without-mamba-flag-cpu.stderr")
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == CONFIG_ERROR
    assert verdict.message.startswith(
        "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible"
    )
    assert "no_buffer.To use radix cache" in verdict.message
    assert verdict.deterministic


def test_argparse_error_exit_2_is_a_config_error_with_the_usage_error_line() -> None:
    tail = capture_lines("sglang-serve-0523-seed-renamed-flag-cpu.stderr")
    argparse_line = [line for line in tail if ": error: " in line]
    if argparse_line:
        verdict = classify_exit(2, tail, saw_config_line=False, was_ready=False)
        assert verdict.cls == CONFIG_ERROR
        assert verdict.message == argparse_line[-1]
    verdict = classify_exit(
        2,
        ["usage: sglang serve [-h] ...", "sglang serve: error: unrecognized arguments: --x 1"],
        saw_config_line=False,
        was_ready=False,
    )
    assert verdict == ExitVerdict(
        CONFIG_ERROR, "sglang serve: error: unrecognized arguments: --x 1"
    )


def test_0523_assertion_at_resolution_is_a_config_error() -> None:
    tail = capture_lines("launch_server-0523-seed-renamed-flag-cpu.stderr")
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == CONFIG_ERROR
    assert verdict.message.startswith("AssertionError: extra_buffer requires platform support")


SELF_KILL_AFTER_OOM = [
    "[2026-11-29 07:42:58] Load weight end. elapsed=20.71 s, type=Qwen3_5ForConditionalGeneration",
    "[2026-11-29 07:42:59] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sglang-0.5.23/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py"',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB.",
    "[2026-11-29 07:42:59] Received sigquit from a child process. It usually means the child failed.",
    "[2026-11-29 07:42:59] kill_process_tree called: parent_pid=9555, include_parent=True, pid=9555",
]  # fmt: skip


def test_sglang_killing_its_own_tree_is_classified_by_the_cause() -> None:
    # SGLang SIGKILLs its tree, itself included, after a child's failure (docs/sglang-facts.md §2):
    # the -9 is a consequence, the log says the cause.
    verdict = classify_exit(-signal.SIGKILL, SELF_KILL_AFTER_OOM, saw_config_line=True,
                            was_ready=False)  # fmt: skip
    assert verdict.cls == CUDA_OOM
    assert verdict.message.startswith("torch.OutOfMemoryError: CUDA out of memory")


def test_sglang_self_kill_without_a_known_cause_is_crashed_not_killed() -> None:
    tail = [SELF_KILL_AFTER_OOM[-2]]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == CRASHED
    assert verdict.message.startswith("Received sigquit from a child process")


@pytest.mark.parametrize(
    ("returncode", "message"),
    [
        (-signal.SIGKILL, "killed by SIGKILL"),
        (137, "killed by SIGKILL"),
        (-signal.SIGTERM, "killed by SIGTERM"),
    ],
)
def test_signals_are_killed(returncode: int, message: str) -> None:
    verdict = classify_exit(
        returncode,
        ["[2026-11-29 07:42:55] Load weight begin."],
        saw_config_line=True,
        was_ready=False,
    )
    assert verdict.cls == KILLED
    assert verdict.message.startswith(message)


@pytest.mark.parametrize(
    ("lines", "cls"),
    [
        (
            [
                "[2026-11-29 07:42:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
            ],
            CUDA_OOM,
        ),
        (
            [
                "[2026-11-29 07:42:55] ERROR:    [Errno 98] error while attempting to bind on address "
                "('0.0.0.0', 30000): address already in use"
            ],
            PORT_IN_USE,
        ),
        (
            [
                "Traceback (most recent call last):",
                "ModuleNotFoundError: No module named 'sgl_kernel'",
            ],
            IMPORT_ERROR,
        ),
        (
            [
                "OSError: /models/x is not a local folder and is not a valid model identifier listed on "
                "'https://huggingface.co/models'"
            ],
            MODEL_NOT_FOUND,
        ),
        (
            [
                "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled system error"
            ],
            NCCL,
        ),
    ],
)
def test_runtime_failures_by_their_lines(lines: list[str], cls: str) -> None:
    assert classify_exit(1, lines, saw_config_line=True, was_ready=False).cls == cls


def test_traceback_after_the_config_line_is_a_crash_not_a_config_error() -> None:
    lines = ["[2026-11-29 07:42:55] server_args=ServerArgs(model_path='/m')", "RuntimeError: boom"]
    verdict = classify_exit(1, lines, saw_config_line=True, was_ready=False)
    assert verdict == ExitVerdict(CRASHED, "RuntimeError: boom")
    assert not verdict.deterministic


def test_silent_exit_is_crashed_with_the_code() -> None:
    assert classify_exit(3, [], saw_config_line=True, was_ready=True) == ExitVerdict(
        CRASHED, "exited with code 3"
    )


def test_backoff_grows_exponentially_to_the_cap() -> None:
    policy = RestartPolicy(delay_s=5, multiplier=2, max_delay_s=30)
    assert [policy.delay(n) for n in range(1, 6)] == [5, 10, 20, 30, 30]


def test_start_limit_counts_starts_within_the_window_only() -> None:
    policy = RestartPolicy(start_limit=3, start_limit_interval_s=60)
    assert not policy.start_limit_hit([0.0, 10.0], now=20.0)
    assert policy.start_limit_hit([0.0, 10.0, 20.0], now=30.0)
    assert not policy.start_limit_hit([0.0, 10.0, 20.0], now=65.0)


@pytest.mark.parametrize(
    ("mode", "cls", "code", "restart"),
    [
        ("on-failure", CRASHED, 1, True),
        ("on-failure", CRASHED, 0, False),
        ("on-failure", CONFIG_ERROR, 1, False),
        ("always", CRASHED, 0, True),
        ("always", CONFIG_ERROR, 1, False),
        ("no", KILLED, -9, False),
    ],
)
def test_restart_decision(mode: str, cls: str, code: int, restart: bool) -> None:
    assert RestartPolicy(mode=mode).wants_restart(ExitVerdict(cls, ""), code) is restart


def test_verdict_messages_lose_the_log_prefix_with_milliseconds_and_rank() -> None:
    lines = [
        "[2026-11-29 07:42:55.123 DP1 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        "[2026-11-29 07:42:55.124 DP1 TP3] RuntimeError: boom",
    ]
    verdict = classify_exit(1, lines, saw_config_line=True, was_ready=True)
    assert verdict == ExitVerdict(CRASHED, "RuntimeError: boom")
