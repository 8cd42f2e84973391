"""A GPU that is not here: SGLang's questions about the machine's GPU answered from the request's
``simulate_gpu``, so that a machine without one predicts what a given GPU would get."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any


@contextlib.contextmanager
def simulated_gpu(facts: Mapping[str, Any] | None) -> Iterator[None]:
    """Answer SGLang's questions about the GPU from ``facts``: up to 0.5.18 by rebinding the
    probes sglang/srt/server_args.py imported by name (``is_cuda``, ``is_sm90_supported`` ...),
    from 0.5.19 with SGLang's own ``sglang.srt.runtime_context.override_platform``."""
    if not facts:
        yield
        return
    major, minor = (int(part) for part in facts["capability"])
    memory_mib = float(facts["memory_mib"])
    name = str(facts.get("name", "simulated GPU"))
    undo: list[Callable[[], None]] = []

    def patch(owner: Any, attribute: str, value: Any) -> None:
        if not hasattr(owner, attribute):
            return
        old = getattr(owner, attribute)
        setattr(owner, attribute, value)
        undo.append(lambda: setattr(owner, attribute, old))

    # orch's stand-in has neither torch nor model_config: it answers for an sm90 host itself
    with contextlib.suppress(ImportError):
        torch = importlib.import_module("torch")
        patch(torch.cuda, "get_device_capability", lambda *_a, **_k: (major, minor))
        patch(torch.cuda, "get_device_name", lambda *_a, **_k: name)
        patch(torch.cuda, "device_count", lambda *_a, **_k: 1)
    with contextlib.suppress(ImportError):
        importlib.import_module("sglang.srt.configs.model_config")  # what the rebinding follows
    server_args_module = importlib.import_module("sglang.srt.server_args")

    answers: dict[str, Any] = {
        "is_cuda": lambda *_a, **_k: True,
        "is_hip": lambda *_a, **_k: False,
        "is_npu": lambda *_a, **_k: False,
        "is_cpu": lambda *_a, **_k: False,
        "is_mps": lambda *_a, **_k: False,
        "is_xpu": lambda *_a, **_k: False,
        "is_musa": lambda *_a, **_k: False,
        "is_sm90_supported": lambda *_a, **_k: major == 9,
        "is_sm100_supported": lambda *_a, **_k: major == 10,
        "is_sm120_supported": lambda *_a, **_k: major == 12,
        "is_blackwell_supported": lambda *_a, **_k: major in (10, 11, 12),
        "is_blackwell": lambda *_a, **_k: major in (10, 11, 12),
        "is_hopper_with_cuda_12_3": lambda *_a, **_k: major == 9,
        "is_triton_kernels_available": lambda *_a, **_k: True,
        "get_device": lambda *_a, **_k: "cuda",
        "get_device_sm": lambda *_a, **_k: major * 10 + minor,
        "get_device_name": lambda *_a, **_k: name,
        "get_device_memory_capacity": lambda *_a, **_k: memory_mib,
        "get_nvidia_driver_version": lambda *_a, **_k: (580, 95, 5),
        "is_flashinfer_available": lambda *_a, **_k: True,
    }
    runtime_context: Any = None
    with contextlib.suppress(ImportError):
        runtime_context = importlib.import_module("sglang.srt.runtime_context")
    override = getattr(runtime_context, "override_platform", None)
    if override is None:
        # up to 0.5.18: server_args asks probes it imported by name; answer them there only
        # (patching utils.common would make lazily imported kernels look for CUDA builds)
        for attribute, value in answers.items():
            if callable(getattr(server_args_module, attribute, None)):
                patch(server_args_module, attribute, value)
    else:
        # 0.5.19+: SGLang's own "one place to override" the machine's facts, and the memory
        # hook's capacity probe; the device itself is passed as --device cuda (see plan()).
        facts = {
            "is_cuda": True,
            "is_hip": False,
            "is_npu": False,
            "is_xpu": False,
            "is_musa": False,
            "is_mps": False,
            "is_sm90": major == 9,
            "is_sm100": major == 10,
            "is_sm100_or_sm110": major in (10, 11),
            "is_sm110": major == 11,
            "is_sm120": major == 12,
            "is_blackwell": major in (10, 11, 12),
            "is_hopper_with_cuda_12_3": major == 9,
            "has_amx": False,
            "has_flashinfer": True,
            "device_sm": major * 10 + minor,
            "device_capability": (major, minor),
        }
        known = set(getattr(runtime_context, "_PLATFORM_PROBES", {})) | set(
            getattr(runtime_context, "_PLATFORM_VALUES", {})
        )
        scope = override(**{k: v for k, v in facts.items() if not known or k in known})
        scope.install()
        undo.append(scope.restore)
        with contextlib.suppress(ImportError):
            memory_hook = importlib.import_module("sglang.srt.arg_groups.memory_hook")
            patch(memory_hook, "get_device_memory_capacity", answers["get_device_memory_capacity"])
    try:
        yield
    finally:
        for step in reversed(undo):
            step()
