"""The tracebacks SGLang prints when it fails, per entry point and release family.

Frames, line numbers and messages come from the real captures where there is one
(``captures/launch_server-0511-*``, ``sglang-serve-*``, ``resolve-0523-M``); the rest follow
SGLang's and torch's module layout. Paths are those of a venv at ``sys.prefix``, as a real
install would show. Only the last line and the shape (``Traceback (most recent call last):``,
frames, ``ExcType: message``) are meant to be relied on.
"""

from __future__ import annotations

import errno as errno_module
import os
import sys
from dataclasses import dataclass
from pathlib import Path

INCIDENT = (
    "Speculative decoding for {arch} is not compatible with radix cache when using "
    "--mamba-scheduler-strategy no_buffer.To use radix cache with speculative decoding, please "
    "use --mamba-scheduler-strategy extra_buffer and set SGLANG_ENABLE_SPEC_V2=1."
)
EXTRA_BUFFER_NO_RADIX = (
    "mamba extra_buffer is not compatible with --disable-radix-cache Overlap scheduling is "
    "already supported with no_buffer + disable_radix_cache. Please use "
    "--mamba-scheduler-strategy no_buffer instead."
)
NO_BUFFER_OVERLAP = (
    "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."
)
CUDA_OOM = (
    "CUDA out of memory. Tried to allocate 7.50 GiB. GPU 0 has a total capacity of 139.81 GiB "
    "of which 3.21 GiB is free. Including non-PyTorch memory, this process has 136.59 GiB memory "
    "in use. Of the allocated memory 134.02 GiB is allocated by PyTorch, and 1.12 GiB is reserved "
    "by PyTorch but unallocated. If reserved but unallocated memory is large try setting "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation "
    "for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
)
ILLEGAL_ACCESS = (
    "CUDA error: an illegal memory access was encountered\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the "
    "stacktrace below might be incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions."
)
NCCL = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3690, unhandled "
    "system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or "
    "device error. \n"
    "Last error:\n"
    "socketStartConnect: Connect to 127.0.0.1<41203> failed : Software caused connection abort"
)
NOT_A_MODEL = (
    "Incorrect path_or_model_id: '{path}'. Please provide either the path to a local folder or "
    "the repo_id of a model on the Hub."
)
NOT_A_REPO_ID = (
    "Repo id must be in the form 'repo_name' or 'namespace/repo_name': '{path}'. "
    "Use `repo_type` argument if needed."
)
HEAD = "Traceback (most recent call last):\n"


@dataclass(frozen=True)
class Frame:
    file: str
    line: int
    func: str
    code: str | None = None
    mark: str | None = None  # the part of ``code`` Python 3.11 underlines with carets

    def render(self) -> str:
        text = f'  File "{self.file}", line {self.line}, in {self.func}\n'
        if self.code is not None:
            text += f"    {self.code}\n"
            if self.mark is not None:
                text += "    " + " " * self.code.index(self.mark) + "^" * len(self.mark) + "\n"
        return text


def _render(frames: list[Frame], exc: str) -> str:
    return HEAD + "".join(frame.render() for frame in frames) + exc + "\n"


class Traces:
    """Builds the texts for one process: ``entry`` is ``launch_server`` or ``serve``."""

    def __init__(self, entry: str, modern: bool) -> None:
        self.entry = entry
        self.modern = modern  # 0.5.19+: run_server() resolves (resolve_once); else parsing does
        minor = f"python{sys.version_info.major}.{sys.version_info.minor}"
        self.site = Path(sys.prefix) / "lib" / minor / "site-packages"
        self.bin = str(Path(sys.prefix) / "bin" / "sglang")

    def _sg(self, module: str) -> str:
        return str(self.site / "sglang" / module)

    def _lib(self, module: str) -> str:
        return str(self.site / module)

    # --- the main process, up to and including resolution ---

    def _entry_frames(self) -> list[Frame]:
        if self.entry == "serve":
            main = Frame(self.bin, 8, "<module>", "sys.exit(main())", "main()")
            if self.modern:
                return [
                    main,
                    Frame(self._sg("cli/main.py"), 51, "main", "serve(args, extra_argv)"),
                    Frame(
                        self._sg("cli/serve.py"), 223, "serve", "registered.backend.run(request)"
                    ),
                    Frame(self._sg("cli/serve.py"), 106, "_run_llm", "run_server(server_args)"),
                ]
            return [
                main,
                Frame(self._sg("cli/main.py"), 40, "main", "serve(args, extra_argv)"),
            ]
        runpy = [
            Frame("<frozen runpy>", 198, "_run_module_as_main"),
            Frame("<frozen runpy>", 88, "_run_code"),
        ]
        if self.modern:
            return [
                *runpy,
                Frame(self._sg("launch_server.py"), 84, "<module>", "run_server(server_args)"),
            ]
        return runpy

    def _resolution_frames(self) -> list[Frame]:
        """From the entry down to SGLang's model-specific adjustments."""
        server_args = self._sg("srt/server_args.py")
        if self.modern:
            return [
                *self._entry_frames(),
                Frame(self._sg("launch_server.py"), 29, "run_server", "server_args.resolve_once()"),
                Frame(server_args, 277, "resolve_once", "run_resolution_pipeline(self)"),
                Frame(
                    self._sg("srt/arg_groups/pipeline.py"),
                    225,
                    "run_resolution_pipeline",
                    "run_hook(handle_model_specific_adjustments, server_args)",
                ),
                Frame(
                    self._sg("srt/arg_groups/resolution_hooks.py"),
                    139,
                    "run_hook",
                    "step(server_args)",
                ),
            ]
        if self.entry == "serve":
            parse = Frame(
                self._sg("cli/serve.py"),
                126,
                "serve",
                "server_args = prepare_server_args(dispatch_argv)",
                "prepare_server_args(dispatch_argv)",
            )
        else:
            parse = Frame(
                self._sg("launch_server.py"),
                66,
                "<module>",
                "server_args = prepare_server_args(sys.argv[1:])",
                "prepare_server_args(sys.argv[1:])",
            )
        return [
            *self._entry_frames(),
            parse,
            Frame(
                server_args,
                7299,
                "prepare_server_args",
                "return ServerArgs.from_cli_args(raw_args)",
                "ServerArgs.from_cli_args(raw_args)",
            ),
            Frame(
                server_args,
                6685,
                "from_cli_args",
                "return cls(**{attr: getattr(args, attr) for attr in attrs})",
                "cls(**{attr: getattr(args, attr) for attr in attrs})",
            ),
            Frame("<string>", 371, "__init__"),
            Frame(server_args, 845, "__post_init__", "self._handle_model_specific_adjustments()"),
        ]

    def _mamba_frames(self, legacy_line: int) -> list[Frame]:
        if self.modern:
            return [
                *self._resolution_frames(),
                Frame(
                    self._sg("srt/arg_groups/model_hook.py"),
                    737,
                    "handle_model_specific_adjustments",
                    "handle_mamba_radix_cache(server_args, hf_config)",
                ),
            ]
        server_args = self._sg("srt/server_args.py")
        return [
            *self._resolution_frames(),
            Frame(
                server_args,
                2236,
                "_handle_model_specific_adjustments",
                "self._handle_mamba_radix_cache(",
            ),
            Frame(server_args, legacy_line, "_handle_mamba_radix_cache", "raise ValueError("),
        ]

    def incident(self, arch: str) -> str:
        """The incident's ValueError (0.5.11; message verbatim, missing space included)."""
        frames = self._mamba_frames(2453)
        if self.modern:
            frames.append(
                Frame(
                    self._sg("srt/arg_groups/model_hook.py"),
                    1058,
                    "handle_mamba_radix_cache",
                    "raise ValueError(",
                )
            )
        return _render(frames, "ValueError: " + INCIDENT.format(arch=arch))

    def extra_buffer_without_radix(self) -> str:
        return _render(self._mamba_frames(2397), "ValueError: " + EXTRA_BUFFER_NO_RADIX)

    def no_buffer_overlap(self) -> str:
        """0.5.14+: explicit no_buffer with the overlap schedule on (capture resolve-0523-M)."""
        if not self.modern:  # 0.5.14 .. 0.5.18: still the monolithic server_args.py
            server_args = self._sg("srt/server_args.py")
            frames = [
                *self._resolution_frames(),
                Frame(
                    server_args,
                    2236,
                    "_handle_model_specific_adjustments",
                    "self._handle_mamba_radix_cache(",
                ),
                Frame(
                    server_args,
                    2431,
                    "_handle_mamba_radix_cache",
                    "assert self.disable_overlap_schedule, (",
                ),
            ]
            return _render(frames, "AssertionError: " + NO_BUFFER_OVERLAP)
        frames = [
            *self._mamba_frames(0),
            Frame(
                self._sg("srt/arg_groups/model_hook.py"),
                1076,
                "handle_mamba_radix_cache",
                "validate_mamba_no_buffer(view, hf_config.architectures[0])",
            ),
            Frame(
                self._sg("srt/arg_groups/mamba_hook.py"),
                158,
                "validate_mamba_no_buffer",
                "assert view.disable_overlap_schedule, (",
            ),
        ]
        return _render(frames, "AssertionError: " + NO_BUFFER_OVERLAP)

    def model_not_found(self, path: str) -> str:
        """transformers on a path that is neither a local folder nor a Hub id (chained)."""
        hub = self._lib("transformers/utils/hub.py")
        validators = self._lib("huggingface_hub/utils/_validators.py")
        cause = _render(
            [
                Frame(hub, 479, "cached_files", "hf_hub_download("),
                Frame(validators, 106, "_inner_fn", "validate_repo_id(arg_value)"),
                Frame(validators, 154, "validate_repo_id", "raise HFValidationError("),
            ],
            "huggingface_hub.errors.HFValidationError: " + NOT_A_REPO_ID.format(path=path),
        )
        if self.modern:
            config_frames = [
                *self._resolution_frames(),
                Frame(
                    self._sg("srt/arg_groups/model_hook.py"),
                    712,
                    "handle_model_specific_adjustments",
                    "hf_config = server_args.get_model_config().hf_config",
                    "server_args.get_model_config()",
                ),
            ]
        else:
            config_frames = [
                *self._resolution_frames(),
                Frame(
                    self._sg("srt/server_args.py"),
                    2180,
                    "_handle_model_specific_adjustments",
                    "hf_config = self.get_model_config().hf_config",
                    "self.get_model_config()",
                ),
            ]
        config_utils = self._lib("transformers/configuration_utils.py")
        effect = _render(
            [
                *config_frames,
                Frame(
                    self._sg("srt/utils/hf_transformers_utils.py"),
                    263,
                    "get_config",
                    "config = AutoConfig.from_pretrained(",
                ),
                Frame(
                    self._lib("transformers/models/auto/configuration_auto.py"),
                    1332,
                    "from_pretrained",
                    "config_dict, unused_kwargs = PretrainedConfig.get_config_dict("
                    "pretrained_model_name_or_path, **kwargs)",
                    "PretrainedConfig.get_config_dict(pretrained_model_name_or_path, **kwargs)",
                ),
                Frame(
                    config_utils,
                    662,
                    "get_config_dict",
                    "config_dict, kwargs = cls._get_config_dict("
                    "pretrained_model_name_or_path, **kwargs)",
                    "cls._get_config_dict(pretrained_model_name_or_path, **kwargs)",
                ),
                Frame(
                    config_utils,
                    721,
                    "_get_config_dict",
                    "resolved_config_file = cached_file(",
                    "cached_file(",
                ),
                Frame(
                    hub,
                    322,
                    "cached_file",
                    "file = cached_files("
                    "path_or_repo_id=path_or_repo_id, filenames=[filename], **kwargs)",
                    "cached_files(path_or_repo_id=path_or_repo_id, filenames=[filename], **kwargs)",
                ),
                Frame(hub, 531, "cached_files", "raise OSError("),
            ],
            "OSError: " + NOT_A_MODEL.format(path=path),
        )
        return (
            cause
            + "\nThe above exception was the direct cause of the following exception:\n\n"
            + effect
        )

    def import_error(self) -> str:
        """``sgl_kernel`` missing: raised where run_server imports the HTTP server."""
        launch = self._sg("launch_server.py")
        if self.modern:
            frames = [*self._entry_frames()]
            frames.append(
                Frame(
                    launch,
                    31,
                    "run_server",
                    "from sglang.srt.entrypoints.http_server import launch_server",
                )
            )
        elif self.entry == "serve":
            frames = [
                *self._entry_frames(),
                Frame(self._sg("cli/serve.py"), 131, "serve", "launch_server(server_args)"),
                Frame(
                    launch,
                    24,
                    "run_server",
                    "from sglang.srt.entrypoints.http_server import launch_server",
                ),
            ]
        else:
            frames = [
                *self._entry_frames(),
                Frame(launch, 70, "<module>", "run_server(server_args)"),
                Frame(
                    launch,
                    24,
                    "run_server",
                    "from sglang.srt.entrypoints.http_server import launch_server",
                ),
            ]
        frames += [
            Frame(
                self._sg("srt/entrypoints/http_server.py"),
                55,
                "<module>",
                "from sglang.srt.entrypoints.engine import _launch_subprocesses",
            ),
            Frame(
                self._sg("srt/entrypoints/engine.py"),
                40,
                "<module>",
                "from sglang.srt.managers.data_parallel_controller import (",
            ),
            Frame(
                self._sg("srt/managers/data_parallel_controller.py"),
                33,
                "<module>",
                "from sglang.srt.managers.scheduler import run_scheduler_process",
            ),
            Frame(
                self._sg("srt/managers/scheduler.py"),
                63,
                "<module>",
                "from sglang.srt.layers.logits_processor import LogitsProcessorOutput",
            ),
            Frame(
                self._sg("srt/layers/logits_processor.py"),
                37,
                "<module>",
                "from sglang.srt.layers.dp_attention import (",
            ),
            Frame(
                self._sg("srt/layers/dp_attention.py"),
                21,
                "<module>",
                "from sglang.srt.layers.activation import get_act_fn",
            ),
            Frame(
                self._sg("srt/layers/activation.py"),
                39,
                "<module>",
                "from sgl_kernel import gelu_and_mul, gelu_tanh_and_mul, silu_and_mul",
            ),
        ]
        return _render(frames, "ModuleNotFoundError: No module named 'sgl_kernel'")

    # --- a scheduler process (logged as "Scheduler hit an exception: <traceback>") ---

    def _scheduler_init_frames(self) -> list[Frame]:
        scheduler = self._sg("srt/managers/scheduler.py")
        tp_worker = self._sg("srt/managers/tp_worker.py")
        return [
            Frame(scheduler, 3118, "run_scheduler_process", "scheduler = Scheduler(", "Scheduler("),
            Frame(scheduler, 363, "__init__", "self.init_model_worker()"),
            Frame(scheduler, 559, "init_model_worker", "self.init_tp_model_worker()"),
            Frame(
                scheduler,
                517,
                "init_tp_model_worker",
                "self.tp_worker = TpModelWorker(",
                "TpModelWorker(",
            ),
            Frame(tp_worker, 247, "__init__", "self._init_model_runner()"),
            Frame(
                tp_worker,
                330,
                "_init_model_runner",
                "self._model_runner = ModelRunner(",
                "ModelRunner(",
            ),
            Frame(
                self._sg("srt/model_executor/model_runner.py"),
                415,
                "__init__",
                "self.initialize(min_per_gpu_memory)",
            ),
        ]

    def cuda_oom(self) -> str:
        runner = self._sg("srt/model_executor/model_runner.py")
        frames = [
            *self._scheduler_init_frames(),
            Frame(runner, 590, "initialize", "self.init_memory_pool(min_per_gpu_memory)"),
            Frame(
                runner,
                1893,
                "init_memory_pool",
                "self.token_to_kv_pool = MHATokenToKVPool(",
                "MHATokenToKVPool(",
            ),
            Frame(
                self._sg("srt/mem_cache/memory_pool.py"), 612, "__init__", "self._create_buffers()"
            ),
            Frame(self._sg("srt/mem_cache/memory_pool.py"), 668, "_create_buffers", "torch.zeros("),
        ]
        return _render(frames, "torch.OutOfMemoryError: " + CUDA_OOM)

    def nccl(self) -> str:
        runner = self._sg("srt/model_executor/model_runner.py")
        c10d = self._lib("torch/distributed/distributed_c10d.py")
        frames = [
            *self._scheduler_init_frames(),
            Frame(
                runner,
                512,
                "initialize",
                "min_per_gpu_memory = self.init_torch_distributed()",
                "self.init_torch_distributed()",
            ),
            Frame(
                runner,
                781,
                "init_torch_distributed",
                "initialize_model_parallel(",
                "initialize_model_parallel(",
            ),
            Frame(
                self._sg("srt/distributed/parallel_state.py"),
                1598,
                "initialize_model_parallel",
                "_TP = init_model_parallel_group(",
                "init_model_parallel_group(",
            ),
            Frame(
                self._lib("torch/distributed/c10d_logger.py"),
                81,
                "wrapper",
                "return func(*args, **kwargs)",
                "func(*args, **kwargs)",
            ),
            Frame(
                c10d, 4815, "barrier", "work = group.barrier(opts=opts)", "group.barrier(opts=opts)"
            ),
        ]
        return _render(frames, "torch.distributed.DistBackendError: " + NCCL)

    def store_in_use(self, port: int, code: int, ipv6: bool = False) -> str:
        """Rank 0's torch TCPStore cannot listen on the ``--dist-init-addr`` port (multi-node).
        The last line is torch's wording (libuv store backend, ``TCPStoreLibUvBackend.cpp``)."""
        runner = self._sg("srt/model_executor/model_runner.py")
        c10d = self._lib("torch/distributed/distributed_c10d.py")
        rendezvous = self._lib("torch/distributed/rendezvous.py")
        frames = [
            *self._scheduler_init_frames(),
            Frame(
                runner,
                512,
                "initialize",
                "min_per_gpu_memory = self.init_torch_distributed()",
                "self.init_torch_distributed()",
            ),
            Frame(
                runner,
                763,
                "init_torch_distributed",
                "init_distributed_environment(",
                "init_distributed_environment(",
            ),
            Frame(
                self._sg("srt/distributed/parallel_state.py"),
                1497,
                "init_distributed_environment",
                "torch.distributed.init_process_group(",
                "torch.distributed.init_process_group(",
            ),
            Frame(
                self._lib("torch/distributed/c10d_logger.py"),
                81,
                "wrapper",
                "return func(*args, **kwargs)",
                "func(*args, **kwargs)",
            ),
            Frame(
                self._lib("torch/distributed/c10d_logger.py"),
                95,
                "wrapper",
                "func_return = func(*args, **kwargs)",
                "func(*args, **kwargs)",
            ),
            Frame(
                c10d,
                1744,
                "init_process_group",
                "store, rank, world_size = next(rendezvous_iterator)",
                "next(rendezvous_iterator)",
            ),
            Frame(
                rendezvous,
                214,
                "_tcp_rendezvous_handler",
                "store = _create_c10d_store(",
                "_create_c10d_store(",
            ),
            Frame(rendezvous, 189, "_create_c10d_store", "return TCPStore(", "TCPStore("),
        ]
        name = errno_module.errorcode.get(code, "EADDRINUSE")
        message = os.strerror(code).lower()
        return _render(
            frames,
            "torch.distributed.DistNetworkError: The server socket has failed to listen on any "
            f"local network address. port: {port}, useIpv6: {str(ipv6).lower()}, code: -{code}, "
            f"name: {name}, "
            f"message: {message}",
        )

    def illegal_memory_access(self) -> str:
        scheduler = self._sg("srt/managers/scheduler.py")
        frames = [
            Frame(scheduler, 3125, "run_scheduler_process", "scheduler.run_event_loop()"),
            Frame(scheduler, 1134, "run_event_loop", "dispatch_event_loop(self)"),
            Frame(scheduler, 3054, "dispatch_event_loop", "scheduler.event_loop_overlap()"),
            Frame(
                self._lib("torch/utils/_contextlib.py"),
                120,
                "decorate_context",
                "return func(*args, **kwargs)",
                "func(*args, **kwargs)",
            ),
            Frame(
                scheduler,
                1178,
                "event_loop_overlap",
                "batch_result = self.run_batch(batch)",
                "self.run_batch(batch)",
            ),
            Frame(
                scheduler,
                2254,
                "run_batch",
                "batch_result = self.model_worker.forward_batch_generation(",
                "self.model_worker.forward_batch_generation(",
            ),
            Frame(
                self._sg("srt/managers/tp_worker.py"),
                452,
                "forward_batch_generation",
                "next_token_ids = self.model_runner.sample(logits_output, forward_batch)",
                "self.model_runner.sample(logits_output, forward_batch)",
            ),
        ]
        return _render(frames, "torch.AcceleratorError: " + ILLEGAL_ACCESS)
