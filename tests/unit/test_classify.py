"""Exit classification on SGLang's real outputs, and the restart policy's arithmetic."""

from __future__ import annotations

import signal

import pytest

from orchestrator.remote.agent.classify import classify_exit
from orchestrator.remote.agent.policy import RestartPolicy
from orchestrator.remote.agent.verdict import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    MODEL_NOT_FOUND,
    NCCL,
    PORT_IN_USE,
    ExitVerdict,
    Restart,
    restart_for,
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
    assert (verdict.cls, verdict.message) == (
        CONFIG_ERROR,
        "sglang serve: error: unrecognized arguments: --x 1",
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
]


def test_sglang_killing_its_own_tree_is_classified_by_the_cause() -> None:
    # SGLang SIGKILLs its tree, itself included, after a child's failure (docs/sglang-facts.md §2):
    # the -9 is a consequence, the log says the cause.
    verdict = classify_exit(
        -signal.SIGKILL, SELF_KILL_AFTER_OOM, saw_config_line=True, was_ready=False
    )
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
    assert (verdict.cls, verdict.message) == (CRASHED, "RuntimeError: boom")
    assert not verdict.deterministic


def test_silent_exit_is_crashed_with_the_code() -> None:
    verdict = classify_exit(3, [], saw_config_line=True, was_ready=True)
    assert (verdict.cls, verdict.message) == (CRASHED, "exited with code 3")


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
    assert (verdict.cls, verdict.message) == (CRASHED, "RuntimeError: boom")


# -- structure, not keywords (issue 10 §3) ------------------------------------------------------


@pytest.mark.parametrize(
    "capture", ["server_args-logline-0511-simcuda.txt", "server_args-logline-0523-simcuda.txt"]
)
def test_a_crash_after_the_config_dump_is_not_nccl(capture: str) -> None:
    # SGLang's real config line holds nccl_port, watchdog_timeout and dist_timeout: the words
    # of the old keyword rule. The crash is what the exception says.
    (config,) = capture_lines(capture)
    assert "nccl_port" in config
    assert "watchdog_timeout" in config
    tail = [
        config,
        "[2026-11-29 07:42:58] Load weight end. elapsed=20.71 s, type=Qwen3_5ForConditionalGeneration",
        "[2026-11-29 07:42:59] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/opt/sglang-0.5.23/lib/python3.11/site-packages/sglang/srt/managers/scheduler.py"',
        "KeyError: 'rope_theta'",
        "[2026-11-29 07:42:59] Received sigquit from a child process. It usually means the child failed.",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert (verdict.cls, verdict.message) == (CRASHED, "KeyError: 'rope_theta'")


def test_a_silent_exit_after_the_config_dump_is_crashed_not_nccl() -> None:
    (config,) = capture_lines("server_args-logline-0511-simcuda.txt")
    verdict = classify_exit(1, [config], saw_config_line=True, was_ready=True)
    assert (verdict.cls, verdict.message) == (CRASHED, "exited with code 1")


def test_an_oom_whose_message_mentions_nccl_is_an_oom() -> None:
    tail = [
        "[2026-11-29 07:42:55 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. Of the allocated "
        "memory 70.1 GiB is allocated by PyTorch (NCCL buffers: 1.2 GiB)",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CUDA_OOM


def test_a_ranks_oom_is_the_cause_of_the_other_ranks_nccl_errors() -> None:
    tail = [
        "[2026-11-29 07:42:55 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 7.50 GiB.",
        "[2026-11-29 07:42:55 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited",
        "[2026-11-29 07:42:55] Received sigquit from a child process. It usually means the child failed.",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert (verdict.cls, verdict.message) == (CUDA_OOM, tail[1])


def test_a_missing_model_directory_is_model_not_found_on_real_sglang_output() -> None:
    # SGLang 0.5.23's own output for --model-path /models/does-not-exist (tests/fixtures/crashlogs)
    tail = [
        "Traceback (most recent call last):",
        "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
        "'namespace/repo_name': '/models/does-not-exist'. Use `repo_type` argument if needed.",
        "",
        "The above exception was the direct cause of the following exception:",
        "",
        "Traceback (most recent call last):",
        "OSError: Repo id must be in the form 'repo_name' or 'namespace/repo_name': "
        "'/models/does-not-exist'. Use `repo_type` argument if needed.",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == MODEL_NOT_FOUND
    assert verdict.message.startswith("OSError: Repo id must be in the form")
    assert verdict.deterministic


def test_ordinary_records_with_a_failure_phrase_are_not_evidence() -> None:
    tail = [
        "[2026-12-01 01:15:22] Failed to load generation config for /models/m: /models/m does not "
        "appear to have a file named generation_config.json.",
        "[2026-12-01 01:15:22 TP0] sglang is using nccl==2.27.3",
        '[rank1]:[W516 12:46:57.49 ProcessGroupNCCL.cpp:1826] Failed to check the "should dump" flag',
        "Traceback (most recent call last):",
        "RuntimeError: boom",
    ]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert (verdict.cls, verdict.message) == (CRASHED, "RuntimeError: boom")


def test_an_exception_raised_during_handling_of_another_supersedes_it() -> None:
    tail = [
        "Traceback (most recent call last):",
        "ModuleNotFoundError: No module named 'flash_attn'",
        "",
        "During handling of the above exception, another exception occurred:",
        "",
        "Traceback (most recent call last):",
        "ValueError: unsupported attention backend",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert (verdict.cls, verdict.message) == (
        CONFIG_ERROR,
        "ValueError: unsupported attention backend",
    )


@pytest.mark.parametrize(
    ("report", "cls", "message"),
    [
        (
            [
                "[12-16 14:27:08] Rank 0 scheduler is dead. Please check if there are relevant logs.",
                "[12-16 14:27:10] Exit code: -9",
            ],
            KILLED,
            "killed by SIGKILL",
        ),
        (
            [
                "[2026-11-29 07:42:55] Rank 0 scheduler is dead. Please check if there are relevant logs.",
                "[2026-11-29 07:42:55] Exit code: -11",
            ],
            CRASHED,
            "crashed with SIGSEGV",
        ),
        (
            ["[2026-11-29 07:42:55] Child process unexpectedly failed with exitcode=9. pid=4711"],
            KILLED,
            "killed by SIGKILL",
        ),
    ],
)
def test_a_process_of_the_server_dead_by_a_signal_as_sglang_reports_it(
    report: list[str], cls: str, message: str
) -> None:
    tail = [*report, "Traceback (most recent call last):", "EOFError"]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == cls
    assert message in verdict.message


def test_children_sglang_killed_itself_after_a_failure_are_not_the_cause() -> None:
    tail = [
        "[2026-11-29 07:42:59 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "AssertionError: bad shape",
        "[2026-11-29 07:42:59] Received sigquit from a child process. It usually means the child failed.",
        "[2026-11-29 07:42:59] Child process unexpectedly failed with exitcode=9. pid=4712",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert (verdict.cls, verdict.message) == (CRASHED, "AssertionError: bad shape")


def test_a_crash_signal_is_crashed_not_killed() -> None:
    verdict = classify_exit(
        -signal.SIGSEGV,
        ["Fatal Python error: Segmentation fault"],
        saw_config_line=True,
        was_ready=True,
    )
    assert (verdict.cls, verdict.message) == (CRASHED, "Fatal Python error: Segmentation fault")
    verdict = classify_exit(139, [], saw_config_line=True, was_ready=True)
    assert (verdict.cls, verdict.message) == (CRASHED, "crashed with SIGSEGV")


def test_a_segfault_before_the_config_line_is_not_a_config_error() -> None:
    verdict = classify_exit(
        1, ["Fatal Python error: Segmentation fault"], saw_config_line=False, was_ready=False
    )
    assert verdict.cls == CRASHED


def test_an_exception_sglang_did_not_die_of_then_sigkill_is_killed() -> None:
    tail = [
        "Traceback (most recent call last):",
        "ValueError: bad request",
        "[2026-11-29 07:43:00] ok",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == KILLED


def test_a_scheduler_traceback_without_its_report_line_is_still_sglangs_failure() -> None:
    tail = [
        "Traceback (most recent call last):",
        '  File "/sgl/srt/managers/scheduler.py", line 2009, in run_scheduler_process',
        "Exception: Capture cuda graph failed: [gloo/transport/tcp/pair.cc:534] Connection closed",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert (verdict.cls, verdict.message) == (CRASHED, tail[-1])


def test_port_in_use_from_sglangs_own_port_check() -> None:
    tail = [
        "ValueError: port_base at 30234 is not available in 30 seconds. port_base is used by a "
        "process already. process.name()='python3'"
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == PORT_IN_USE


def test_port_in_use_when_sglang_cannot_name_the_holder() -> None:
    """wait_port_available's message without the holder (it could not see the process)."""
    tail = [
        "ValueError: dist_init_port at 41234 is not available in 30 seconds. dist_init_port "
        "at 41234 is not available"
    ]
    assert classify_exit(1, tail, saw_config_line=False, was_ready=False).cls == PORT_IN_USE


def test_a_nccl_watchdog_record_of_torch_is_nccl() -> None:
    tail = [
        "[rank6]:[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] [PG 1 Rank 6] Process group "
        "watchdog thread terminated with exception: [Rank 6] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=7753, OpType=_REDUCE_SCATTER_BASE) ran for 600003 milliseconds"
    ]
    assert classify_exit(-signal.SIGABRT, tail, saw_config_line=True, was_ready=True).cls == NCCL


def test_a_stop_sglang_logged_is_killed() -> None:
    tail = [
        "[2026-11-29 07:50:00] SIGTERM received. signum=None frame=None. Draining requests and "
        "shutting down...",
        "[2026-11-29 07:50:01] kill_process_tree called: parent_pid=9555, include_parent=True",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == KILLED
    assert verdict.message.startswith("SIGTERM received.")


def test_import_error_message_on_the_next_line() -> None:
    tail = ["ImportError: ", "[sgl_kernel] CRITICAL: Could not load any common_ops library!"]
    assert classify_exit(1, tail, saw_config_line=False, was_ready=False).cls == IMPORT_ERROR


# -- issue 25: classes the classifier missed on real logs, and the restart verdict --------------


def corpus_tail(name: str) -> tuple[list[str], bool, bool, int]:
    """A corpus log (tests/fixtures/crashlogs/<class>/<name>) as the supervisor would hold it:
    its last lines, whether SGLang had logged its configuration, READY, and its exit status."""
    from tests.unit.test_crash_corpus import CORPUS, TAIL_LINES, load

    log = load(next(CORPUS.glob(f"*/{name}")))
    return list(log.lines[-TAIL_LINES:]), log.saw_config_line, log.was_ready, log.returncode


def classify_corpus(name: str) -> ExitVerdict:
    tail, saw_config_line, was_ready, returncode = corpus_tail(name)
    return classify_exit(returncode, tail, saw_config_line=saw_config_line, was_ready=was_ready)


def test_a_parallelism_assertion_in_a_scheduler_is_a_config_error_that_repeats() -> None:
    # gpustack#4769: TP 6 does not divide the vision tower's 16 heads, in every rank
    verdict = classify_corpus("gpustack-4769-vision-heads-not-divisible-by-tp6.log")
    assert verdict.cls == CONFIG_ERROR
    assert verdict.message == "AssertionError: 16 is not divisible by 6"
    assert not verdict.restart_helps
    assert "this configuration" in verdict.restart_why


def test_a_tp_size_assertion_of_the_main_process_after_its_config_line_is_a_config_error() -> None:
    tail = [
        "[2025-03-18 15:24:52] server_args=ServerArgs(model_path='/m', tp_size=3)",
        "Traceback (most recent call last):",
        '  File "/sgl/srt/configs/model_config.py", line 212, in __init__',
        "ValueError: Total number of attention heads (28) must be divisible by tensor parallel "
        "size (3).",
    ]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert (verdict.cls, verdict.restart_helps) == (CONFIG_ERROR, False)


def test_an_nccl_watchdog_record_dated_in_a_month_before_october_is_nccl() -> None:
    # sglang#3424: the all-gather watchdog record is dated E210 (three digits), wrapped in two
    verdict = classify_corpus("sglang-3424-watchdog-allgather-e210-wrapped.log")
    assert verdict.cls == NCCL
    assert "OpType=_ALLGATHER_BASE" not in verdict.message or "Watchdog" in verdict.message
    assert verdict.restart_helps  # a timed-out collective is no property of the argv


def test_an_nccl_watchdog_record_glued_to_another_processs_line_is_nccl() -> None:
    tail = [
        "Extension modules: numpy.random._generator, torch._C, torch._C._nested[rank0]:[E223 "
        "11:14:34.009113793 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 0] Process group "
        "watchdog thread terminated with exception: [Rank 0] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=91885, OpType=ALLREDUCE) ran for 600053 milliseconds before "
        "timing out.",
        "Exception raised from checkTimeout at ../torch/csrc/distributed/c10d/"
        "ProcessGroupNCCL.cpp:618 (most recent call first):",
    ]
    verdict = classify_exit(-signal.SIGABRT, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == NCCL
    assert verdict.message.startswith("[PG ID 2 PG GUID 3 Rank 0] Process group watchdog")


def test_an_illegal_memory_access_during_cuda_graph_capture_is_a_kernel_error_that_repeats() -> (
    None
):
    # sglang#5029: the scheduler's end of traceback only, no self-kill line in the paste
    verdict = classify_corpus("sglang-5029-deepseek-r1-capture-illegal-memory-access.log")
    assert verdict.cls == KERNEL_ERROR
    assert verdict.message.startswith("Exception: Capture cuda graph failed: RuntimeError: CUDA")
    assert not verdict.restart_helps


def test_a_cuda_error_whose_line_the_paste_lost_is_a_kernel_error_by_torchs_trailer() -> None:
    verdict = classify_corpus("sglang-pr3613-torch-compile-cuda-error-in-capture.log")
    assert verdict.cls == KERNEL_ERROR


def test_a_kernel_build_that_failed_during_capture_is_a_kernel_error() -> None:
    # sglang#5389: flashinfer's JIT build (ninja) failed while TP0 captured its CUDA graphs
    verdict = classify_corpus("sglang-5389-flashinfer-jit-ninja-failed-in-capture.log")
    assert verdict.cls == KERNEL_ERROR
    assert not verdict.restart_helps


@pytest.mark.parametrize(
    "line",
    [
        # sglang#6001's title (SGLang 0.4.6 on MI308): Triton cannot fit the kernel's shared memory
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 196608, "
        "Hardware limit: 65536. Reducing block sizes or `num_stages` may help.",
        # Triton's compiler rejecting a kernel (its exception type, as torch.compile prints it)
        "triton.compiler.errors.CompilationError: at 8:11:",
        # zai-org/GLM-4.5#23 (SGLang, --tp 4 on GLM-4.5-Air-FP8): Marlin's repack shape check
        "RuntimeError: size_n = 5472 is not divisible by tile_n_size = 64",
    ],
)
def test_kernel_compile_and_marlin_shape_failures_at_startup_are_kernel_errors(line: str) -> None:
    tail = [
        "[2025-07-31 10:02:11 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/srt/managers/scheduler.py", line 2715, in run_scheduler_process',
        line,
        "[2025-07-31 10:02:11] Received sigquit from a child process. It usually means the child "
        "failed.",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR
    assert verdict.message == line
    assert not verdict.restart_helps


def test_a_kernel_error_while_serving_may_not_repeat_and_is_restarted() -> None:
    tail = [
        "[2025-07-28 11:09:15 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == KERNEL_ERROR
    assert verdict.restart_helps
    assert "serving" in verdict.restart_why


def test_an_attribute_error_raised_while_importing_is_an_import_error() -> None:
    tail = [
        "Traceback (most recent call last):",
        '  File "/opt/sglang/lib/python3.12/site-packages/sglang/launch_server.py", line 7, in '
        "<module>",
        "    from sglang.srt.server_args import prepare_server_args",
        '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/layers/quantization/fp8.py", '
        "line 41, in <module>",
        "    _is_fp8_fnuz = torch.float8_e4m3fnuz",
        "                   ^^^^^^^^^^^^^^^^^^^^^",
        "AttributeError: module 'torch' has no attribute 'float8_e4m3fnuz'",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == IMPORT_ERROR
    assert not verdict.restart_helps


def test_an_attribute_error_inside_a_function_before_the_config_line_stays_a_config_error() -> None:
    tail = [
        "Traceback (most recent call last):",
        '  File "/sgl/launch_server.py", line 11, in <module>',
        "    server_args = prepare_server_args(sys.argv[1:])",
        '  File "/sgl/srt/configs/model_config.py", line 201, in __init__',
        "    self.hf_text_config.hidden_size // self.hf_text_config.num_attention_heads,",
        "AttributeError: 'POINTSV15ChatConfig' object has no attribute 'hidden_size'",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == CONFIG_ERROR


def test_an_import_error_raised_while_composing_server_args_is_an_import_error() -> None:
    tail = [
        "Traceback (most recent call last):",
        '  File "/sgl/launch_server.py", line 11, in <module>',
        "    server_args = prepare_server_args(sys.argv[1:])",
        '  File "/sgl/srt/server_args.py", line 4166, in prepare_server_args',
        "    return ServerArgs.from_cli_args(raw_args)",
        '  File "/sgl/srt/server_args.py", line 712, in __post_init__',
        "    self._handle_attention_backend_compatibility()",
        '  File "/sgl/srt/server_args.py", line 1488, in _handle_attention_backend_compatibility',
        "    from sglang.srt.layers.attention.flashinfer_backend import FlashInferAttnBackend",
        "ImportError: cannot import name 'FlashInferAttnBackend' from 'sglang.srt.layers.attention."
        "flashinfer_backend'",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert (verdict.cls, verdict.restart_helps) == (IMPORT_ERROR, False)


def test_a_scheduler_traceback_whose_end_the_paste_lost_is_sglangs_crash_not_a_kill() -> None:
    # sglang#6342: a superseded exception, then the scheduler's traceback cut short; exit -9
    verdict = classify_corpus("sglang-6342-fa3-capture-rng-dynamo-superseded.log")
    assert verdict.cls == CRASHED


@pytest.mark.parametrize(
    ("cls", "was_ready", "helps"),
    [
        (CONFIG_ERROR, False, False),
        (IMPORT_ERROR, False, False),
        (MODEL_NOT_FOUND, False, False),
        (KERNEL_ERROR, False, False),
        (KERNEL_ERROR, True, True),
        (NCCL, False, True),
        (KILLED, True, True),
        (CUDA_OOM, False, True),
        (CRASHED, False, True),
    ],
)
def test_the_restart_verdict_of_each_class(cls: str, was_ready: bool, helps: bool) -> None:
    restart = restart_for(cls, was_ready=was_ready)
    assert restart.helps is helps
    assert restart.why
    assert ExitVerdict(cls, "m", restart).deterministic is (not helps)


def test_a_verdict_without_its_own_restart_verdict_takes_its_classs() -> None:
    assert not ExitVerdict(CONFIG_ERROR, "m").restart_helps
    assert ExitVerdict(CRASHED, "m").restart_helps
    assert not ExitVerdict(CRASHED, "m", Restart(False, "the same argv")).restart_helps


def test_a_divisibility_error_while_serving_is_no_config_error_and_is_restarted() -> None:
    # the configuration was accepted and served: a request's own ValueError is no verdict on it
    tail = [
        "[2026-11-29 08:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "ValueError: input length 4097 must be divisible by 8 for this kernel",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == CRASHED
    assert verdict.restart_helps
