"""The marks and patterns classify.py reads a crash by, each with where it comes from (SGLang's,
torch's or a kernel library's own code; docs/sglang-facts.md §2; tests/fixtures/crashlogs/)."""

from __future__ import annotations

import re
import signal

# Signals sent from outside (kill, the OOM killer, a stop) as opposed to a crash of the
# process itself (SIGSEGV, SIGBUS, SIGABRT ...). 128 + N is how a shell or container reports N.
EXTERNAL_SIGNALS = (signal.SIGKILL, signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
REPORTED_SIGNALS = (*EXTERNAL_SIGNALS, signal.SIGABRT, signal.SIGSEGV, signal.SIGBUS)

# docs/sglang-facts.md §2 (runtime failures): what SGLang logs before it kills its own process
# tree (SIGKILL, itself included) after one of its processes failed.
SELF_KILL_MARKS = (
    "received sigquit from a child proces",  # "proces." in 0.4.2 (sglang#3460)
    "kill_process_tree called",
    "hit an exception",  # Scheduler, TpModelWorkerClient, DetokenizerManager ...
    "crashed with exit code",
    # http_server's warmup (0.3-0.5.x): logger.error("Initialization failed. warmup error: ...")
    # then kill_process_tree(os.getpid())
    "initialization failed. warmup error",
)
# SGLang 0.1-0.3's record of a failed process, before it killed its tree: logger.error("Exception
# in ControllerSingle:\n" + traceback) then kill_parent_process() ("Exception in ModelTpServer:",
# "Exception in ModelRpcClient:" likewise). Python's "Exception in thread X:" is not one. SGLang
# 0.1-0.2's main process prints the traceback its router (controller) sent through a pipe after
# "router init state:" ("Initialization failed. router_init_state:") and exits 1.
COMPONENT_FAILED = re.compile(
    r"^Exception in (?!thread\b)[A-Z]\w*:$"
    r"|^(?:Initialization failed\. )?(?:router|controller)[_ ]init[_ ]state: (?!init ok)"
)
# SGLang's own record of a stop it was asked for from outside.
EXTERNAL_STOP_MARKS = ("sigterm received. signum=",)
# Exceptions and fatal errors, by the first line of their text.
TORCH_RANK = re.compile(r"^\[rank\d+\]:\s?")
# torch's C++ error records: ``[E1206 18:44:16.997991020 ProcessGroupNCCL.cpp:1515] ...``, the
# month without its leading zero (``[E210 ...`` is 10 February). Two processes writing at once
# glue one to the middle of another's line: it is searched for, not only at the start.
TORCH_ERROR_RECORD = re.compile(r"\[E\d{3,4} \d\d:\d\d:\d\d\.\d+ [^\]]*\] ")
CPP_TERMINATE = re.compile(r"^terminate called after throwing an instance of '(?P<type>[^']+)'")
UVICORN_ERROR = re.compile(r"^ERROR:\s+\[Errno (?P<errno>\d+)\] ")
ARGPARSE_ERROR = re.compile(r"^(?:usage: )?[\w.\-/ ]+: error: \S")
# "Rank 0 scheduler is dead" + "Exit code: -9" (0.4.1+); "Child process unexpectedly failed with
# an exit code 9" / "exitcode=9" (SIGCHLD handler; a raw wait status: the signal in its low bits).
SCHEDULER_DEAD = re.compile(r"scheduler is dead\.")
# 0.5.x: the main process raises "Rank N scheduler died during initialization (exit code: -9).
# If exit code is -9 (SIGKILL), ..." out of its wait (entrypoints/engine.py _scheduler_died_error),
# the exit code being multiprocessing's: -N for signal N.
SCHEDULER_DIED = re.compile(r"scheduler died during initialization \(exit code: (?P<code>-?\d+)\)")
EXIT_CODE = re.compile(r"Exit code: (?P<code>-?\d+)$")
CHILD_FAILED = re.compile(
    r"Child process unexpectedly failed with (?:an exit code |exitcode=)(\d+)"
)
# A traceback frame in the entry point of one of SGLang's processes (scheduler, detokenizer,
# data parallel controller), or in the code only its model processes run (the TP worker, the
# model runner and its CUDA graphs, the model loader, torch.distributed's groups; 0.1's router,
# 0.2's controller): they report their failure to the main process, which kills the tree.
SUBPROCESS_FRAME = re.compile(
    r"\bin run_(?:scheduler|detokenizer|data_parallel_controller)_process"
    r"|/srt/(?:managers/(?:router/|controller/)?(?:tp_worker(?:_overlap_thread)?|model_rpc"
    r"|model_runner)|model_executor/(?:model_runner|cuda_graph_runner)|model_loader/loader"
    r"|distributed/parallel_state)\.py\""
)
CHAIN_SUPERSEDED = "during handling of the above exception, another exception occurred"
ABORTED = "Fatal Python error: Aborted"
# torch's trailer of a CUDA error a kernel raised; on its own (the error's line cut from the
# excerpt) it is still the evidence of one.
CUDA_ERROR_TRAILER = "CUDA kernel errors might be asynchronously reported"
ORPHAN_CUDA_ERROR = "CUDA error"
# The innermost frame of a traceback: ``File "...", line N, in <module>`` is an import running.
FRAME = re.compile(r'^File "(?P<path>[^"]*)", line \d+, in (?P<function>\S+)')
CARETS = re.compile(r"[\^~ ]+")  # Python 3.11+ marks the failing part of a frame's line
# How Python prints an exception of a class outside builtins: ``package.module.Name: message``.
QUALIFIED_EXCEPTION = re.compile(r"^(?:[A-Za-z_]\w*\.)+[A-Z]\w*: \S")
# CUDA's report of a kernel's failed assert(): "<file>:<line>: <function>: block: [x,y,z],
# thread: [x,y,z] Assertion `<condition>` failed." (torch's indexing kernels, any __assert_fail).
DEVICE_ASSERT = re.compile(
    r": block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] Assertion `.*` failed\."
)
# GPU kernel libraries: their Python wrappers check the shapes, dtypes and GPUs their kernels
# support (aiter's MLA decode asserts the head count, DeepGEMM its scale layouts, Triton's
# front end its operand types) before they launch or build anything.
KERNEL_LIBRARY = re.compile(r"/(?:aiter|flashinfer|sgl_kernel|deep_gemm|flash_attn|triton)/")
KERNEL_LIBRARY_CHECKS = ("AssertionError", "ValueError", "NotImplementedError")
# The kernel libraries' own exception texts: flashinfer::Error ("Error in function '<f>' at
# <file>:<line>: <message>", include/flashinfer/exception.h) and its dispatch macros
# (__PRETTY_FUNCTION__ " failed to dispatch " var " " value), DeepEP's EP_HOST_ASSERT
# ("Failed: Assertion error <file>:<line> '<condition>'", csrc/kernels/exception.cuh).
KERNEL_LIBRARY_ERROR = re.compile(
    r"\berror in function '[^']*' at \S*flashinfer\S*:\d+: |\bfailed to dispatch \w+ -?\d+"
    r"|\bfailed: assertion error \S+:\d+ '"
)
# torch.ops.<library>.<op> runs the library's compiled kernel: a RuntimeError out of torch's
# _ops.py is the op's own TORCH_CHECK refusing its inputs (vLLM's awq_dequantize and bfloat16).
COMPILED_OP = re.compile(r"/torch/_ops\.py$")
# torch's dispatcher refusing a call to a compiled op for its arguments (createStackForSchema):
# the op's library and its caller are of different releases (SGLang and a flashinfer JIT op).
OP_SIGNATURE_MISFIT = re.compile(
    r"\(\) expected at most \d+ argument\(s\) but received \d+ argument\(s\)"
)
REQUIRES_PACKAGE = re.compile(r'\brequires "?[\w.\-]+"? to be installed\b')
# A JIT build's compiler failing (Triton builds its launcher stubs with gcc, torch's cpp_extension
# and flashinfer run ninja, DeepGEMM nvcc): subprocess's CalledProcessError names the command.
COMPILER_FAILED = re.compile(
    r"command '\['[^']*\b(?:gcc|g\+\+|cc|c\+\+|clang|clang\+\+|nvcc|hipcc|ninja)'"
)
# What code of two releases that do not fit raises while a module is imported.
IMPORT_TIME_MISFITS = ("ValueError", "TypeError", "AttributeError", "NameError")
# Python's own text for a module that lacks a name (not an object's attribute: a bug's), and
# torch's for an op namespace whose installed library registers no such op (torch/_ops.py).
MODULE_LACKS = re.compile(
    r"^attributeerror: (?:module '[^']+'|'_opnamespace' '[^']+' object) has no attribute "
)

MISSING_MODEL_TYPES = (
    "RepositoryNotFoundError",
    "GatedRepoError",
    "HFValidationError",
    "LocalEntryNotFoundError",
    "RevisionNotFoundError",
    "EntryNotFoundError",
    "OfflineModeIsEnabled",  # HF_HUB_OFFLINE: the Hub, and the model's files on it, unreachable
)
MISSING_MODEL_MARKS = (
    "is not a local folder and is not a valid model identifier",
    "does not appear to have a file named",
    "incorrect path_or_model_id",
    "repo id must be in the form",  # a local path that does not exist (huggingface_hub >= 0.23)
    "repository not found",
    "can't load the configuration of",
    "can't load tokenizer for",
    "trying to access a gated repo",
    "cannot access gated repo",
    "is not a valid json file",  # transformers: a config.json cut or empty
)
# Code that reads the model's own files (SGLang's loader reads the safetensors index, transformers
# the config and tokenizer files): a JSONDecodeError there is a file cut or empty, the model's.
MODEL_FILE_READERS = re.compile(
    r"/sglang/srt/model_loader/|/transformers/(?:configuration|tokenization)_utils|/huggingface_hub/"
)
# The CUDACHECK/NCCLCHECK macros of CUDA code (vLLM's and sgl-kernel's custom all-reduce, NCCL's
# examples): printf("Failed: Cuda error %s:%d '%s'\n", ...) and exit(EXIT_FAILURE), no exception.
CHECK_MACRO = re.compile(r"Failed[:,] (?P<lib>Cuda|CUDA|NCCL) error \S+:\d+ '(?P<what>[^']*)'")
# flashinfer's FLASHINFER_CUDA_CALL: "CUDA Error: <string> (<code>) <file>: line N at function ...".
FLASHINFER_CUDA_CALL = re.compile(r"CUDA Error: (?P<what>.+?) \(\d+\) \S+: line \d+ at function")
# A CUDA error torch or a check names on a line of its own: what the trailer below it is about.
NAMED_DEVICE_ERROR = re.compile(r"\b(?:CUDA|HIP) error: .*")
# torch's NCCL watchdog reports any CUDA error it meets while checking a collective's completion
# as a c10::DistBackendError: with a CUDA error in it, the collective is not what failed.
CARRIES_CUDA_ERROR = "cuda error: "
HUB_HTTP_ERROR = re.compile(r"\b(?:401|403|404) client error\b.*huggingface\.co/")
PORT_MARKS = ("address already in use", "[errno 98]", "errno: 98", "is used by a process already")
# sglang/srt/utils/network.py wait_port_available: "<name> at <port> is not available in 30
# seconds" (it names the holder only when it can find it).
PORT_WAIT = re.compile(r" at \d+ is not available in \d+ seconds")
OOM_MARKS = (
    "cuda out of memory",
    "cuda error: out of memory",
    "hip out of memory",
    "cublas_status_alloc_failed",  # cuBLAS could not allocate its workspace
    "not enough memory. please try to increase --mem-fraction-static",
    "not enought memory. please try to increase --mem-fraction-static",  # SGLang 0.1's spelling
    "failed with error out of memory",  # flashinfer's ops: "<Op> failed with error <string>"
)
# GPU kernels (KERNEL_ERROR): torch's CUDA errors a kernel raises, Triton's compiler refusing or
# not fitting a kernel, a JIT build of one (torch's cpp_extension runs ninja), Marlin's shape
# checks (TORCH_CHECKs in gptq_marlin_repack / gptq_marlin_gemm: a TP size that splits a weight
# off the kernel's tiles). "CUDA error: out of memory" is CUDA_OOM, checked first.
KERNEL_TYPES = ("OutOfResources", "CompilationError", "PTXASError")
KERNEL_MARKS = (
    "an illegal memory access was encountered",
    "an illegal instruction was encountered",
    "misaligned address",
    "unspecified launch failure",
    "device-side assert triggered",
    "triton error [",  # Triton's launcher: the driver's error for a launch ([CUDA] or [HIP])
    "no kernel image is available for execution",
    "invalid device function",  # the build has no code for this GPU (CUDA's and HIP's text)
    # CUDA's launch errors (cudaErrorInvalidConfiguration, ...LaunchOutOfResources,
    # ...CooperativeLaunchTooLarge), whichever check prints them
    "invalid configuration argument",
    "too many resources requested for launch",
    "too many blocks in cooperative launch",
    "passmanager::run failed",  # Triton's MLIR passes cannot lower the kernel
    "cublas_status_",  # torch's TORCH_CUDABLAS_CHECK: cuBLAS refused or failed a GEMM
    "out of resource: shared memory",
    "invalid thread config",
    "error building extension",
    "command '['ninja', '-v']' returned non-zero exit status",
    "ninja is required to load c++ extensions",  # torch's cpp_extension: no build at all
)
MARLIN_SHAPE = re.compile(
    r"\b(?:size|prob)_[kmn] = \d+ is not divisible by (?:tile|thread)_"
    # SGLang's (and vLLM's) marlin_utils: a TP partition off the kernel's thread tiles
    r"|\bis not divisible by\s+(?:min_thread_[kn]|min_[kn]_threads)\b"
)
# SGLang's checks of its parallel sizes against the model (ensure_divisibility's "X is not
# divisible by Y" over heads, experts, vocabulary; its asserts on tp/dp/ep sizes): they hold or
# fail the same way for this argv and model, in whichever process makes them.
PARALLEL_CHECK = re.compile(
    r"\bis not divisible by \d|\bmust be divisible by\b"
    r"|\b(?:tp|dp|pp|ep|cp|attn_tp|attn_dp|moe_tp|moe_ep|moe_dp)_size\b"
    r"|\b(?:tensor|data|pipeline|expert) parallel size\b"
    # fp8.py, blockwise_int8.py, qoq.py, marlin_utils.py: a TP partition of a weight off the
    # checkpoint's quantization blocks or groups ("Weight output_partition_size = 576 is not
    # divisible by weight quantization block_n = 128"); a kernel's tiles are MARLIN_SHAPE's
    r"|\b\w+_(?:size_per_partition|partition_size) = \d+ is not divisible by\b"
)
# SGLang's ModelConfig._verify_quantization (vLLM's before it): --quantization against the
# checkpoint's own quantization config and the methods the release knows.
QUANTIZATION_CHECK = re.compile(
    r"does not match the quantization method specified in the `quantization` argument"
    r"|\bunknown quantization method: "
)
NCCL_TYPES = ("DistBackendError", "DistNetworkError", "DistStoreError")
NCCL_MARKS = (
    "nccl error",
    "watchdog caught collective operation timeout",
    "ncclunhandledcudaerror",
    "ncclsystemerror",
    "ncclinternalerror",
    "ncclremoteerror",
    "ncclinvalidusage",
)
