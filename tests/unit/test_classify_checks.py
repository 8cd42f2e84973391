"""Exit classification of what SGLang, torch and the GPU kernel libraries report about their own
checks: a scheduler that died while SGLang waited for it (the 0.5.x wording), a weight partition
that a TP size splits off a quantization block or off a kernel's tiles, a module that lacks a name
its caller needs, a GPU without code for a kernel, cuBLAS's statuses, a kernel library refusing
its inputs. The lines are SGLang's and torch's own texts (sources in each test)."""

from __future__ import annotations

import signal

from orchestrator.remote.agent.classify import classify_exit
from orchestrator.remote.agent.verdict import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    MODEL_NOT_FOUND,
)

# sglang/srt/entrypoints/engine.py _scheduler_died_error (0.5.11 line 1216, 0.5.23 line 2000):
# raised by the main process out of _wait_for_scheduler_ready when a scheduler's pipe closes or
# the process is no longer alive, its exitcode being multiprocessing's (-N for signal N).
MAIN_WAIT = [
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.12/runpy.py", line 198, in _run_module_as_main',
    '  File "/opt/sglang/lib/python3.12/site-packages/sglang/launch_server.py", line 32, in '
    "<module>",
    "    run_server(server_args)",
    '  File "/opt/sglang/lib/python3.12/site-packages/sglang/srt/entrypoints/engine.py", line '
    "1233, in _wait_for_scheduler_ready",
    "    raise _scheduler_died_error(j, scheduler_procs[j])",
]


def died(code: int) -> str:
    return (
        f"RuntimeError: Rank 0 scheduler died during initialization (exit code: {code}). If exit "
        "code is -9 (SIGKILL), a common cause is the OS OOM killer. Run `dmesg -T | grep -i oom` "
        "to check."
    )


def test_a_scheduler_that_died_during_initialization_by_sigkill_was_killed() -> None:
    tail = [
        "[2026-11-30 10:00:01 TP0] Load weight begin. avail mem=78.50 GB",
        *MAIN_WAIT,
        died(-9),
    ]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KILLED
    assert "scheduler died during initialization (exit code: -9)" in verdict.message
    assert "SIGKILL" in verdict.message
    assert verdict.restart_helps


def test_a_scheduler_that_died_during_initialization_by_sigsegv_crashed() -> None:
    tail = ["[2026-11-30 10:00:01 TP0] Capture cuda graph begin.", *MAIN_WAIT, died(-11)]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CRASHED
    assert verdict.message.endswith("crashed with SIGSEGV")


def test_a_scheduler_that_reported_its_own_failure_is_judged_by_that_failure() -> None:
    # sglang#25118: the scheduler's traceback, then the main process's report (exit code -3)
    tail = [
        "[2026-05-13 02:15:18 DP2 TP2] Scheduler hit an exception: Traceback (most recent call "
        "last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/distributed/utils.py", line 23, in '
        "ensure_divisibility",
        "AssertionError: 16 is not divisible by 6",
        "",
        *MAIN_WAIT,
        died(-3),
    ]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert (verdict.cls, verdict.message) == (
        CONFIG_ERROR,
        "AssertionError: 16 is not divisible by 6",
    )


def test_a_weight_partition_off_marlins_thread_tiles_is_a_kernel_error() -> None:
    # sglang/srt/layers/quantization/marlin_utils.py verify_marlin_supports_shape (as vLLM's)
    tail = [
        "[2026-11-30 10:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "ValueError: Weight input_size_per_partition = 14784 is not divisible by min_thread_k = "
        "128. Consider reducing tensor_parallel_size or running with --quantization gptq.",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR
    assert not verdict.restart_helps
    # the f-string of output_size_per_partition's check puts two blanks before min_thread_n
    tail[1] = (
        "ValueError: Weight output_size_per_partition = 2736 is not divisible by  min_thread_n = "
        "64. Consider reducing tensor_parallel_size or running with --quantization gptq."
    )
    assert classify_exit(-9, tail, saw_config_line=True, was_ready=False).cls == KERNEL_ERROR


def test_a_weight_partition_off_the_checkpoints_quantization_blocks_is_a_config_error() -> None:
    # sglang#3491 (one line pasted): sglang/srt/layers/quantization/fp8.py create_weights
    tail = [
        "ValueError: Weight output_partition_size = 576 is not divisible by weight quantization "
        "block_n = 128."
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CONFIG_ERROR
    assert not verdict.restart_helps


def test_a_module_that_lacks_a_name_its_caller_needs_is_an_install_mismatch() -> None:
    # sglang#3392: raised inside a function while capturing CUDA graphs, not by an import
    tail = [
        "[2025-02-08 05:57:37 TP6] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/home/deepseek/sglang/python/sglang/srt/layers/moe/fused_moe_triton/fused_moe.py",'
        " line 992, in fused_experts_impl",
        "    ops.silu_and_mul(intermediate_cache2, intermediate_cache1.view(-1, N))",
        "AttributeError: module 'vllm._custom_ops' has no attribute 'silu_and_mul'",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == IMPORT_ERROR
    assert not verdict.restart_helps


def test_an_objects_missing_attribute_inside_a_function_is_still_a_crash() -> None:
    tail = [
        "[2025-09-22 08:10:54] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/srt/model_executor/cuda_graph_runner.py", line 366, in capture',
        "AttributeError: 'NoneType' object has no attribute 'get_seqlens_expanded'",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CRASHED


def test_a_gpu_without_code_for_a_kernel_is_a_kernel_error() -> None:
    # torch's HIP build: hipErrorInvalidDeviceFunction (CUDA: cudaErrorInvalidDeviceFunction)
    tail = [
        "[2025-04-27 07:30:56 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: HIP error: invalid device function",
        "HIP kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect.",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR


def test_cublas_refusing_a_gemm_is_a_kernel_error_and_its_allocation_failure_an_oom() -> None:
    # torch's TORCH_CUDABLAS_CHECK: "CUDA error: <status> when calling `...`"
    tail = [
        "[2025-04-29 09:06:52 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED when calling `cublasLtMatmul( ... )`",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == KERNEL_ERROR
    tail[1] = (
        "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`"
    )
    assert classify_exit(-9, tail, saw_config_line=True, was_ready=True).cls == CUDA_OOM


def test_a_kernel_library_refusing_its_inputs_is_a_kernel_error() -> None:
    # sglang#7847: aiter's MLA decode asserts the head count per rank while capturing
    tail = [
        "[2025-07-08 07:10:20 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/layers/attention/aiter_backend.py", line '
        "657, in forward_decode",
        "    mla_decode_fwd(",
        '  File "/sgl-workspace/aiter/aiter/mla.py", line 107, in get_meta_param',
        '    assert nhead in get_mgc, f"{nhead=} not supported"',
        "           ^^^^^^^^^^^^^^^^",
        "AssertionError: nhead=8 not supported",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR
    assert not verdict.restart_helps


def test_an_assertion_of_sglangs_own_code_stays_a_crash() -> None:
    # sglang#25118's scheduler: SGLang's KV pool asserting its dtype, not a kernel's check
    tail = [
        "[2026-05-13 02:15:18 DP2 TP2] Scheduler hit an exception: Traceback (most recent call "
        "last):",
        '  File "/sgl-workspace/sglang/python/sglang/srt/mem_cache/deepseekv4_memory_pool.py", '
        "line 144, in create_buffer",
        "    assert self.store_dtype == torch.uint8",
        "AssertionError",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CRASHED


def test_a_jit_build_without_ninja_is_a_kernel_error() -> None:
    # torch/utils/cpp_extension.py verify_ninja_availability (sglang#2527: wrapped by SGLang's
    # "Capture cuda graph failed")
    tail = [
        "[2024-12-20 02:00:44 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "Exception: Capture cuda graph failed: Ninja is required to load C++ extensions",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR
    assert not verdict.restart_helps


def test_a_kernels_own_cuda_check_that_exits_the_process_names_its_error() -> None:
    # the CUDACHECK macro of custom all-reduce kernels (vLLM's, sgl-kernel's, NCCL's examples):
    # printf("Failed: Cuda error %s:%d '%s'\n", ...); exit(EXIT_FAILURE) -- sglang#3667, glued to
    # a progress bar once and then on its own line
    tail = [
        " 13%|██▏             | 3/23 [00:11<00:55,  2.79s/it]Failed: Cuda error /workspace/csrc/"
        "custom_all_reduce.c",
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:368 'an illegal memory access "
        "was encountered'",
        "[2025-02-18 09:50:38] DataParallelController hit an exception: Traceback (most recent "
        "call last):",
        "EOFError",
        "[2025-02-18 09:50:38] Received sigquit from a child proces. It usually means the child "
        "failed.",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR
    assert verdict.message.startswith("Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh")
    tail[1] = "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:368 'out of memory'"
    assert classify_exit(-9, tail, saw_config_line=True, was_ready=False).cls == CUDA_OOM


def test_a_model_file_that_is_not_json_is_the_models_fault() -> None:
    # sglang#5035: model_loader/weight_utils.py json.load of model.safetensors.index.json
    tail = [
        "[2025-04-03 17:50:31 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.10/dist-packages/sglang/srt/model_loader/weight_utils.py",'
        " line 322, in filter_duplicate_safetensors_files",
        '    weight_map = json.load(f)["weight_map"]',
        '  File "/usr/lib/python3.10/json/decoder.py", line 355, in raw_decode',
        '    raise JSONDecodeError("Expecting value", s, err.value) from None',
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == MODEL_NOT_FOUND
    # transformers' configuration_utils: its own words for a config.json that is not JSON
    config = [
        "OSError: It looks like the config file at '/models/m/config.json' is not a valid JSON "
        "file."
    ]
    assert classify_exit(1, config, saw_config_line=False, was_ready=False).cls == MODEL_NOT_FOUND


def test_a_requests_json_that_does_not_parse_is_no_fault_of_the_model() -> None:
    tail = [
        "[2025-04-03 17:50:31 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/srt/constrained/xgrammar_backend.py", line 160, in dispatch_json',
        "    schema = json.loads(key_string)",
        '  File "/usr/lib/python3.10/json/decoder.py", line 355, in raw_decode',
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == CRASHED


def test_a_kernel_launch_the_gpu_refuses_is_a_kernel_error() -> None:
    # CUDA's launch errors as kernels' own checks print them: flashinfer's "<op> failed with error
    # code <cudaGetErrorString>" (sglang#3304), DeepEP's "Failed: CUDA error <file>:<line> '...'"
    # (sglang#6056), Triton's launcher on HIP "Triton Error [HIP]: ..." (sglang#3400)
    head = "[2025-02-04 21:18:29 DP3 TP3] TpModelWorkerClient hit an exception: Traceback (most "
    for line in (
        "RuntimeError: RMSNorm failed with error code invalid configuration argument",
        "RuntimeError: Failed: CUDA error /media/ssd1/DeepEP/csrc/kernels/internode_ll.cu:341 "
        "'too many blocks in cooperative launch'",
        "RuntimeError: Triton Error [HIP]:  Code: 1, Messsage: invalid argument",
        "RuntimeError: CUDA error: too many resources requested for launch",
    ):
        verdict = classify_exit(
            -9, [head + "recent call last):", line], saw_config_line=True, was_ready=False
        )
        assert verdict.cls == KERNEL_ERROR, line


def test_a_triton_kernel_its_compiler_cannot_lower_is_a_kernel_error() -> None:
    # sglang#5705: Triton's MLIR pass manager (triton/backends/*/compiler.py, pm.run(mod))
    tail = [
        "/sgl/srt/layers/moe/ep_moe/kernels.py:606:42: error: Unsupported conversion from "
        "'f8E4M3FN' to 'f16'",
        "[2025-04-24 07:50:01 TP2] TpModelWorkerClient hit an exception: Traceback (most recent "
        "call last):",
        '  File "/usr/local/lib/python3.10/dist-packages/triton/backends/nvidia/compiler.py", line '
        "216, in make_ttgir",
        "    pm.run(mod)",
        "RuntimeError: PassManager::run failed",
    ]
    verdict = classify_exit(-9, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == KERNEL_ERROR


def test_a_gpu_hardware_fault_is_neither_a_kernels_nor_ncclss() -> None:
    # sglang#3204: an uncorrectable ECC error, seen by a kernel's CUDACHECK and by torch's NCCL
    # watchdog (a c10::DistBackendError that carries a CUDA error, not a collective's failure)
    watchdog = (
        "[rank1]:[E129 08:52:51.685329145 ProcessGroupNCCL.cpp:1595] [PG ID 2 PG GUID 3 Rank 1] "
        "Process group watchdog thread terminated with exception: CUDA error: uncorrectable ECC "
        "error encountered"
    )
    trailer = (
        "CUDA kernel errors might be asynchronously reported at some other API call, so the "
        "stacktrace below might be incorrect."
    )
    tail = [
        "  9%|▊         | 2/23 [00:08<01:20,  3.82s/it]" + watchdog,
        trailer,
        "Failed: Cuda error /workspace/csrc/custom_all_reduce.cuh:364 'uncorrectable ECC error "
        "encountered'",
        "terminate called after throwing an instance of 'c10::DistBackendError'",
        "  what():  [PG ID 2 PG GUID 3 Rank 1] Process group watchdog thread terminated with "
        "exception: CUDA error: uncorrectable ECC error encountered",
        trailer,
        "Fatal Python error: Aborted",
    ]
    verdict = classify_exit(-signal.SIGABRT, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CRASHED
    assert "uncorrectable ECC error" in verdict.message


def test_sglangs_own_dependency_check_is_an_import_error() -> None:
    # sglang/srt/utils (assert_pkg_version): the two texts it raises
    for message in (
        "Exception: flashinfer_python with minimum required version 0.2.5 is not installed. "
        "Please uninstall the old version and reinstall the latest version by following the "
        "instructions at https://docs.flashinfer.ai/installation.html.",
        "Exception: sgl-kernel is installed with version 0.0.9.post1, which is less than the "
        "minimum required version 0.1.0. Please reinstall the latest version",
    ):
        verdict = classify_exit(
            1,
            ["Traceback (most recent call last):", message],
            saw_config_line=True,
            was_ready=False,
        )
        assert (verdict.cls, verdict.restart_helps) == (IMPORT_ERROR, False), message


def test_any_failure_while_a_library_module_is_imported_is_an_import_error() -> None:
    # sglang#4159: SGLang's config module registers with transformers at import time, and the
    # installed transformers already has that name (a release that does not fit)
    tail = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
        '  File "/sgl-workspace/sglang/python/sglang/launch_server.py", line 6, in <module>',
        "    from sglang.srt.entrypoints.http_server import launch_server",
        '  File "/sgl-workspace/sglang/python/sglang/srt/configs/qwen2_5_vl_config.py", line 1005,'
        " in <module>",
        "    AutoImageProcessor.register(Qwen2_5_VLConfig, None, Qwen2_5_VLImageProcessor, None)",
        '  File "/usr/local/lib/python3.10/dist-packages/transformers/models/auto/'
        'image_processing_auto.py", line 628, in register',
        "    raise ValueError(f\"'{key}' is already used by a Transformers model.\")",
        "ValueError: '<class 'sglang.srt.configs.qwen2_5_vl_config.Qwen2_5_VLConfig'>' is already "
        "used by a Transformers model.",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == IMPORT_ERROR


def test_sglang_0_2s_exception_in_component_line_is_its_own_failure_not_a_kill() -> None:
    # SGLang 0.1-0.3: logger.error("Exception in ControllerSingle:\n" + traceback), then
    # kill_parent_process() (SIGKILL); the TP worker logs "Exception in ModelTpServer:" first
    tail = [
        "Exception in ModelTpServer:",
        "Traceback (most recent call last):",
        '  File "/sgl/srt/managers/controller/tp_worker.py", line 209, in exposed_step',
        "AssertionError",
        "",
        "Exception in ControllerSingle:",
        "Traceback (most recent call last):",
        "AssertionError",
    ]
    verdict = classify_exit(-signal.SIGKILL, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == CRASHED
    # Python's own "Exception in thread ..." (threading's excepthook) is no such report
    tail = ["Exception in thread Thread-1:", "Traceback (most recent call last):", "ValueError: x"]
    assert classify_exit(-9, tail, saw_config_line=True, was_ready=True).cls == KILLED


def test_flashinfers_cuda_error_lines_name_their_error() -> None:
    # flashinfer's FLASHINFER_CUDA_CALL: "CUDA Error: <string> (<code>) <file>: line N at function
    # <call>", and its ops' "<Op> failed with error <string>" (sglang#109, #1058)
    tail = [
        "CUDA Error: out of memory (2) /sglang/3rdparty/flashinfer/include/flashinfer/handler.cuh: "
        "line 100 at function cudaMallocAsync(&float_buffer_, tmp_size, stream_)",
        "Exception in ModelTpServer:",
        "Traceback (most recent call last):",
        "RuntimeError: BatchDecodeWithPagedKVCache failed with error out of memory",
    ]
    assert classify_exit(-9, tail, saw_config_line=True, was_ready=True).cls == CUDA_OOM
    tail = [
        tail[0].replace(
            "out of memory (2)", "no kernel image is available for execution on the device (209)"
        )
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == KERNEL_ERROR


def test_sglang_0_1s_not_enough_memory_spelling_is_an_oom() -> None:
    # SGLang 0.1.x's router: raise RuntimeError("Not enought memory. Please try to increase ...")
    tail = [
        "router init state: Traceback (most recent call last):",
        "RuntimeError: Not enought memory. Please try to increase --mem-fraction-static.",
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == CUDA_OOM


def test_a_library_saying_a_package_must_be_installed_is_an_import_error() -> None:
    # FastAPI (sglang#949): RuntimeError: Form data requires "python-multipart" to be installed.
    tail = [
        "Traceback (most recent call last):",
        '  File "/usr/local/lib/python3.10/dist-packages/fastapi/dependencies/utils.py", line 100',
        'RuntimeError: Form data requires "python-multipart" to be installed.',
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == IMPORT_ERROR


def test_a_compiler_that_fails_a_jit_build_is_a_kernel_error() -> None:
    # Triton builds its launcher with gcc (sglang#1240); torch's cpp_extension and flashinfer run
    # ninja, DeepGEMM nvcc
    tail = [
        "Traceback (most recent call last):",
        "subprocess.CalledProcessError: Command '['/usr/bin/gcc', '/tmp/tmpx4yubctp/main.c', "
        "'-O3', '-shared', '-fPIC', '-o', '/tmp/tmpx4yubctp/cuda_utils.cpython-310-x86_64-linux-"
        "gnu.so', '-lcuda']' returned non-zero exit status 1.",
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == KERNEL_ERROR
    tail[1] = (
        "subprocess.CalledProcessError: Command '['git', 'clone', 'x']' returned non-zero exit"
    )
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == CRASHED
