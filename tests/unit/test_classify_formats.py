"""Exit classification from the formats in which SGLang's processes, torch and the GPU kernel
libraries report a failure (issue 25, round 6: the misses of tests/fixtures/crashlogs-unseen/).
SGLang: its warmup's failure before it kills its tree, 0.1-0.2's relayed init state, the modules
only its model processes run, its check of --quantization against the checkpoint. torch: an op
namespace without the op, the dispatcher refusing a call for its arguments, a compiled op's own
checks, CUDA's device-side assertion line. flashinfer's and DeepEP's exception texts. Python's
traceback format for an exception whose name has no usual suffix. Sources in each test."""

from __future__ import annotations

import signal

import pytest

from orchestrator.remote.agent.classify import classify_exit
from orchestrator.remote.agent.verdict import (
    CONFIG_ERROR,
    CRASHED,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    MODEL_NOT_FOUND,
)

SIGKILLED = -signal.SIGKILL


def test_sglangs_warmup_failure_is_its_own_kill_not_one_from_outside() -> None:
    # sglang/srt/entrypoints/http_server.py _execute_server_warmup (0.3-0.5.x):
    # logger.error(f"Initialization failed. warmup error: {last_traceback}") then
    # kill_process_tree(os.getpid()): the SIGKILL is SGLang's own (sglang#4094)
    tail = [
        "[2025-03-05 10:32:47] INFO:     Uvicorn running on http://0.0.0.0:8039",
        "[2025-03-05 10:34:48] Initialization failed. warmup error: Traceback (most recent call "
        "last):",
        '  File "/sgl/srt/entrypoints/http_server.py", line 548, in _wait_and_warmup',
        '    assert res.status_code == 200, f"{res=}, {res.text=}"',
        "AssertionError: res=<Response [503]>, res.text='<html>proxy</html>'",
        "",
        "Killed",
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CRASHED
    assert verdict.message.startswith("AssertionError: res=<Response [503]>")
    # the same exception in a request handler, then a SIGKILL: nothing says SGLang killed itself
    handler = [tail[0], "Traceback (most recent call last):", *tail[2:]]
    assert classify_exit(SIGKILLED, handler, saw_config_line=True, was_ready=True).cls == KILLED


@pytest.mark.parametrize(
    "relay",
    [
        "router init state: Traceback (most recent call last):",  # SGLang 0.1.x
        "Initialization failed. router_init_state: Traceback (most recent call last):",
        "Initialization failed. controller_init_state: Traceback (most recent call last):",
    ],
)
def test_sglang_0_1_and_0_2s_relayed_init_state_is_a_model_processs_failure(relay: str) -> None:
    # SGLang 0.1-0.2 server.py: the main process receives the router's (controller's) traceback
    # through a pipe, prints it after "router init state:" and exits 1; the exception is the model
    # process's, raised after the arguments were accepted (sglang#79, #99)
    tail = [
        relay,
        '  File "/sgl/srt/models/llava.py", line 177, in load_weights',
        "    self.language_model.load_weights(",
        "KeyError: 'model.vision_tower.vision_tower.vision_model.embeddings.class_embedding'",
        "detoken init state: init ok",
    ]
    verdict = classify_exit(1, tail, saw_config_line=False, was_ready=False)
    assert verdict.cls == CRASHED
    assert verdict.message.startswith("KeyError: 'model.vision_tower")
    # the main process's own exception before the configuration is still the configuration's
    own = ["Traceback (most recent call last):", *tail[1:]]
    assert classify_exit(1, own, saw_config_line=False, was_ready=False).cls == CONFIG_ERROR
    ok = ["Initialization failed. detoken_init_state: init ok", *own]
    assert classify_exit(1, ok, saw_config_line=False, was_ready=False).cls == CONFIG_ERROR


@pytest.mark.parametrize(
    "frame",
    [
        '  File "/sgl/srt/model_loader/loader.py", line 381, in load_model',  # sglang#7365
        '  File "/sgl/srt/distributed/parallel_state.py", line 241, in __init__',  # sglang#3890
        '  File "/sgl/srt/managers/tp_worker.py", line 441, in forward_prefill_batch',  # #1130
        '  File "/sgl/srt/managers/tp_worker_overlap_thread.py", line 109, in forward_thread_func',
        '  File "/sgl/srt/model_executor/model_runner.py", line 761, in forward',
        '  File "/sgl/srt/managers/router/model_rpc.py", line 130, in exposed_step',  # SGLang 0.1
    ],
)
def test_a_traceback_through_sglangs_model_process_code_is_its_own_failure(frame: str) -> None:
    # SGLang runs the model only in its scheduler (0.1: router, 0.2-0.3: controller/TP worker)
    # processes, never in the main process; a failure there makes SGLang kill its tree (-9),
    # whether or not the excerpt kept the "Scheduler hit an exception" line
    tail = [
        "Loading safetensors checkpoint shards:  45% Completed | 74/163 [00:43<00:52,  1.69it/s]",
        frame,
        "    expert_data.copy_(loaded_weight)",
        "RuntimeError: The size of tensor a (3584) must match the size of tensor b (7168)",
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CRASHED
    # a frame of the main process's own code says nothing of the kind
    main = [tail[0], '  File "/sgl/srt/entrypoints/http_server.py", line 9, in f', *tail[2:]]
    assert classify_exit(SIGKILLED, main, saw_config_line=True, was_ready=False).cls == KILLED


def test_flashinfers_own_exception_texts_are_kernel_errors() -> None:
    # flashinfer/include/flashinfer/exception.h: flashinfer::Error formats "Error in function
    # '<func>' at <file>:<line>: <message>" (FLASHINFER_ERROR, FLASHINFER_CHECK; sglang#4196)
    tail = [
        "[2025-03-08 05:53:08 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        "    return self._op(*args, **(kwargs or {}))",
        "RuntimeError: Error in function 'BatchPrefillWithRaggedKVCacheDispatched' at /usr/lib/"
        "python3.10/site-packages/flashinfer/data/include/flashinfer/attention/prefill.cuh:2215: "
        "Unsupported max_mma_kv: 0",
    ]
    assert classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False).cls == KERNEL_ERROR
    # its dispatch macros: __PRETTY_FUNCTION__ << " failed to dispatch " var_name " " << int(v)
    # (pytorch_extension_utils.h), here inside SGLang 0.2's capture wrapper (sglang#1109)
    tail = [
        "Initialization failed. controller_init_state: Traceback (most recent call last):",
        "Exception: Capture cuda graph failed: BatchDecodeWithPagedKVCachePyTorchWrapper::"
        "BeginForward(at::Tensor, unsigned int, float)::<lambda()>::<lambda()> failed to dispatch "
        "head_dim 80",
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == KERNEL_ERROR
    # the same words from anything but flashinfer's sources are not its exception
    tail = [
        "Traceback (most recent call last):",
        "RuntimeError: Error in function 'f' at x.py:3: y",
    ]
    assert classify_exit(1, tail, saw_config_line=True, was_ready=False).cls == CRASHED


def test_torchs_op_namespace_without_the_op_is_an_install_that_does_not_fit() -> None:
    # torch/_ops.py _OpNamespace.__getattr__: the installed extension (sgl_kernel, vLLM's _C)
    # registers no such op: a build of another release (sglang#5668)
    tail = [
        "[2025-04-23 16:14:48 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/site-packages/torch/_ops.py", line 1232, in __getattr__',
        "    raise AttributeError(",
        "AttributeError: '_OpNamespace' 'sgl_kernel' object has no attribute 'awq_dequantize'",
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == IMPORT_ERROR
    assert not verdict.restart_helps


def test_torchs_dispatcher_refusing_a_call_for_its_arguments_is_an_install_that_does_not_fit() -> (
    None
):
    # torch/csrc/jit/python/pybind_utils.h createStackForSchema: "<op>() expected at most N
    # argument(s) but received M argument(s). Declaration: ...": the caller and the compiled op
    # are of different releases (sglang#5022: SGLang calling a flashinfer JIT op)
    tail = [
        "[2025-04-03 03:19:53 TP0] TpModelWorkerClient hit an exception: Traceback (most recent "
        "call last):",
        '  File "/usr/lib/python3.12/site-packages/torch/_ops.py", line 723, in __call__',
        "    return self._op(*args, **kwargs)",
        "RuntimeError: batch_prefill_with_kv_cache_head_dim_128::plan() expected at most 15 "
        "argument(s) but received 16 argument(s). Declaration: plan(Tensor a) -> int[]",
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == IMPORT_ERROR


def test_a_compiled_op_refusing_its_inputs_is_a_kernel_error() -> None:
    # torch.ops.<library>.<op> runs the library's C++ kernel; its TORCH_CHECKs raise RuntimeError
    # out of torch/_ops.py (sglang#3780: vLLM's awq_dequantize refusing bfloat16 scales)
    tail = [
        "[2025-02-22 12:19:24 TP3] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib/python3.9/site-packages/vllm/_custom_ops.py", line 222, in awq_dequantize',
        "    return torch.ops._C.awq_dequantize(qweight, scales, zeros, split_k_iters,",
        '  File "/usr/lib/python3.9/site-packages/torch/_ops.py", line 1116, in __call__',
        "    return self._op(*args, **(kwargs or {}))",
        "RuntimeError: expected scalar type Half but found BFloat16",
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == KERNEL_ERROR
    # the same words raised by SGLang's own Python code are no compiled op's check
    own = [*tail[:3], '  File "/sgl/srt/models/llama.py", line 9, in forward', "    x", tail[-1]]
    assert classify_exit(SIGKILLED, own, saw_config_line=True, was_ready=False).cls == CRASHED


def test_deepeps_host_assertion_is_a_kernel_libraries_check() -> None:
    # DeepEP csrc/kernels/exception.cuh: EP_HOST_ASSERT throws EPException("Assertion", ...),
    # "Failed: Assertion error <file>:<line> '<condition>'" (sglang#5186)
    tail = [
        "[2025-04-09 10:35:31 TP2] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/usr/lib64/python3.11/site-packages/deep_ep/buffer.py", line 89, in __init__',
        "    self.runtime.sync(device_ids, ipc_handles, root_unique_id)",
        "RuntimeError: Failed: Assertion error /home/u/DeepEP/csrc/kernels/runtime.cu:56 "
        "'nvshmem_team_split_strided(NVSHMEM_TEAM_WORLD, rank % 8, 8, 2, &cpu_rdma_team) == 0'",
    ]
    assert classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False).cls == KERNEL_ERROR


def test_cudas_device_side_assertion_line_is_a_kernel_error_when_the_traceback_is_cut() -> None:
    # CUDA prints a kernel's failed assert() as "<file>:<line>: <function>: block: [x,y,z],
    # thread: [x,y,z] Assertion `<condition>` failed." (sglang#7139: the traceback cut before
    # its "CUDA error: device-side assert triggered")
    tail = [
        "/pytorch/aten/src/ATen/native/cuda/Indexing.cu:1500: indexSelectSmallIndex: block: "
        "[32,0,0], thread: [63,0,0] Assertion `srcIndex < srcSelectDimSize` failed.",
        "[2025-06-13 09:59:00] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sgl/srt/managers/scheduler.py", line 2506, in run_scheduler_process',
        "    scheduler.event_loop_normal()",
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=True)
    assert verdict.cls == KERNEL_ERROR
    assert "Assertion `srcIndex < srcSelectDimSize` failed." in verdict.message


@pytest.mark.parametrize(
    "message",
    [
        "ValueError: Quantization method specified in the model config (awq) does not match the "
        "quantization method specified in the `quantization` argument (awq_marlin).",
        "ValueError: Unknown quantization method: awq_foo. Must be one of ['awq', 'fp8'].",
    ],
)
def test_sglangs_check_of_the_quantization_argument_is_a_config_error(message: str) -> None:
    # sglang/srt/configs/model_config.py _verify_quantization (vLLM's ModelConfig before it, in
    # the scheduler of 0.3.x: sglang#1792): the argument against the checkpoint's config, the
    # same for this argv and model in whichever process checks it
    tail = [
        "[2024-10-25 18:12:30 TP0] Traceback (most recent call last):",
        '  File "/usr/lib/python3.10/site-packages/vllm/config.py", line 296, in '
        "_verify_quantization",
        "    raise ValueError(",
        message,
    ]
    verdict = classify_exit(SIGKILLED, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == CONFIG_ERROR
    assert not verdict.restart_helps


def test_an_exception_whose_name_lacks_the_usual_suffix_still_ends_its_traceback() -> None:
    # Python prints "<module>.<Name>: <message>" after the last frame whatever the class is
    # called: huggingface_hub.errors.OfflineModeIsEnabled (HF_HUB_OFFLINE=1, sglang#5386)
    tail = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3.12/site-packages/huggingface_hub/utils/_http.py", line 107, in '
        "send",
        "    raise OfflineModeIsEnabled(",
        "huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach https://huggingface.co/org/m/"
        "resolve/main/hf_quant_config.json: offline mode is enabled.",
    ]
    verdict = classify_exit(1, tail, saw_config_line=True, was_ready=False)
    assert verdict.cls == MODEL_NOT_FOUND
    assert verdict.message.startswith("huggingface_hub.errors.OfflineModeIsEnabled: Cannot reach")
    # such a line anywhere but after a frame is ordinary text
    text = ["[2025-04-14 16:54:24] loaded", "settings.Mode: offline"]
    assert classify_exit(1, text, saw_config_line=True, was_ready=False).message == (
        "exited with code 1"
    )
