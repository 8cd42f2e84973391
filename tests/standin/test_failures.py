"""The stand-in fails the way SGLang fails: same stream, same last line, same exit code."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.standin.conftest import (
    READY,
    Launcher,
    last_line,
    log_messages,
    run_to_exit,
)

INCIDENT = (
    "ValueError: Speculative decoding for Qwen3_5ForConditionalGeneration is not compatible with "
    "radix cache when using --mamba-scheduler-strategy no_buffer.To use radix cache with "
    "speculative decoding, please use --mamba-scheduler-strategy extra_buffer and set "
    "SGLANG_ENABLE_SPEC_V2=1."
)
SEED = [
    "--host",
    "127.0.0.1",
    "--context-length",
    "8192",
    "--trust-remote-code",
    "--speculative-algorithm",
    "EAGLE",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
]
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


def _no_server_args(stderr: str) -> bool:
    return not any(m.startswith("server_args=") for m in log_messages(stderr))


def test_0511_without_the_extra_buffer_flag_is_the_incident(model_dir: Path) -> None:
    result = run_to_exit("0.5.11", ["--model-path", str(model_dir), *SEED])
    assert result.returncode == 1
    assert last_line(result.stderr) == INCIDENT
    assert "Traceback (most recent call last):" in result.stderr
    assert _no_server_args(result.stderr)


def test_0511_with_the_extra_buffer_flag_resolves(launcher: Launcher, model_dir: Path) -> None:
    running = launcher.start(
        "0.5.11",
        ["--model-path", str(model_dir), *SEED, "--mamba-scheduler-strategy", "extra_buffer"],
    )
    running.wait_for("server_args=ServerArgs(")
    assert "ValueError" not in running.err()


def test_unknown_argument_is_sglangs_argparse_error(model_dir: Path) -> None:
    result = run_to_exit("0.5.23", ["--model-path", str(model_dir), "--foo", "bar"])
    assert result.returncode == 2
    lines = result.stderr.splitlines()
    usage = next(line for line in lines if line.startswith("usage:"))
    assert usage.startswith("usage: sglang serve [-h] --model-path MODEL_PATH")
    assert lines[-1] == "sglang serve: error: unrecognized arguments: --foo bar"


def test_0523_rejects_the_removed_mamba_flag(model_dir: Path) -> None:
    result = run_to_exit(
        "0.5.23", ["--model-path", str(model_dir), "--mamba-scheduler-strategy", "extra_buffer"]
    )
    assert result.returncode == 2
    assert last_line(result.stderr) == (
        "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer"
    )


def test_missing_model_path_is_transformers_oserror() -> None:
    result = run_to_exit("0.5.23", ["--model-path", "/no/such/model"], entry="serve")
    assert result.returncode == 1
    assert last_line(result.stderr) == (
        "OSError: Incorrect path_or_model_id: '/no/such/model'. Please provide either the path "
        "to a local folder or the repo_id of a model on the Hub."
    )
    assert "The above exception was the direct cause of the following exception:" in result.stderr
    assert _no_server_args(result.stderr)


@pytest.mark.parametrize(
    ("fail", "version", "code", "last"),
    [
        ("config-error", "0.5.23", 1, INCIDENT),
        ("import-error", "0.5.11", 1, "ModuleNotFoundError: No module named 'sgl_kernel'"),
        (
            "model-not-found",
            "0.5.11",
            1,
            "OSError: Incorrect path_or_model_id: '{model}'. Please provide either the path to a "
            "local folder or the repo_id of a model on the Hub.",
        ),
        (
            "argparse",
            "0.5.11",
            2,
            "sglang serve: error: unrecognized arguments: --mamba-radix-cache-strategy extra_buffer",
        ),
    ],
)
def test_failure_before_launch(
    model_dir: Path, fail: str, version: str, code: int, last: str
) -> None:
    result = run_to_exit(version, ["--model-path", str(model_dir)], fail)
    assert result.returncode == code
    assert last_line(result.stderr) == last.format(model=model_dir)
    assert _no_server_args(result.stderr)
    if version == "0.5.23":  # launch_server's finally: kill_process_tree(include_parent=False)
        assert any(m.startswith("kill_process_tree called:") for m in log_messages(result.stderr))


@pytest.mark.parametrize(
    ("fail", "version", "exception"),
    [
        ("cuda-oom", "0.5.11", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
        ("nccl", "0.5.23", "torch.distributed.DistBackendError: NCCL error in:"),
        (
            "crash-after-ready:0.2",
            "0.5.23",
            "torch.AcceleratorError: CUDA error: an illegal memory",
        ),
    ],
)
def test_scheduler_failure_takes_down_the_tree(
    model_dir: Path, fail: str, version: str, exception: str
) -> None:
    result = run_to_exit(version, ["--model-path", str(model_dir)], fail)
    assert result.returncode == -9  # kill_process_tree(include_parent=True) SIGKILLs itself
    messages = log_messages(result.stderr)
    assert any(m.startswith("Scheduler hit an exception: Traceback") for m in messages)
    assert exception in result.stderr
    assert SIGQUIT_LINE in messages
    if version == "0.5.11":
        assert last_line(result.stderr).endswith(SIGQUIT_LINE)
    else:
        assert "kill_process_tree called:" in last_line(result.stderr)
    assert (READY in result.stderr) == fail.startswith("crash-after-ready")


def test_die_after_exits_1_without_a_traceback(model_dir: Path) -> None:
    result = run_to_exit("0.5.23", ["--model-path", str(model_dir)], "die-after:0.3")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr


def test_port_in_use_is_uvicorns_bind_error(launcher: Launcher, model_dir: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = int(taken.getsockname()[1])
        running = launcher.start("0.5.23", ["--model-path", str(model_dir)], port=port)
        assert running.wait() == 1
    assert (
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): "
        "address already in use" in log_messages(running.err())
    )
