"""The answer's memory section (orch plan's GPU memory budget, docs/agent.md "The planning
probe's answer"): the model's shapes, the checkpoint's bytes, the GPUs' memory and SGLang's
default ``mem_fraction_static``, each found without a GPU and none failing the plan."""

from __future__ import annotations

import importlib
import io
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

from orchestrator.remote.host import gpus as host_gpus
from orchestrator.remote.probe.checkpoint import checkpoint_size, read_text_config
from orchestrator.remote.probe.shapes import rank_shapes, resolved_view
from orchestrator.remote.probe.values import MIB, UNSET, captured, describe, log_lines

MAMBA_ENV = ("SGLANG_MAMBA_SSM_DTYPE", "SGLANG_MAMBA_CONV_DTYPE")
MFS_FLAG = "--mem-fraction-static"


def memory_section(
    module: Any,
    server_args: Any,
    args: list[str],
    result: Mapping[str, Any],
    request: Mapping[str, Any],
    host_path: Callable[[str], str],
) -> dict[str, Any]:
    """What orch's memory budget needs from the host, found without a GPU (docs/agent.md, "The
    planning probe's answer"): the model's shapes per rank from SGLang's own classes (else the
    text config for orch to mirror them), the checkpoint's bytes, the GPUs' memory and SGLang's
    default ``mem_fraction_static``. Each part reports its own failure; none fails the plan."""
    started = time.monotonic()
    model_path = str(getattr(server_args, "model_path", "") or "")
    draft = (result.get("effective") or {}).get("speculative_draft_model_path")
    draft = draft if isinstance(draft, str) and draft else None
    # each part, and what it answers when it fails unexpectedly (a bug here, not SGLang's); the
    # second resolution first: the model's draft-mode config below rewrites SGLang's cached one
    parts: list[tuple[Callable[[], dict[str, Any]], Callable[[str], dict[str, Any]]]] = [
        (
            lambda: _default_mfs(module, args, result),
            lambda why: {
                "default_mem_fraction_static": None,
                "default_mem_fraction_static_error": why,
            },
        ),
        (
            lambda: _model_part(server_args),
            lambda why: {"shapes": None, "basis": "config.json", "shapes_error": why},
        ),
        (
            lambda: {"weights": checkpoint_size(host_path(model_path))},
            lambda why: {"weights": {"path": model_path, "bytes": None, "error": why}},
        ),
        (
            lambda: {"draft_weights": checkpoint_size(host_path(draft)) if draft else None},
            lambda why: {"draft_weights": {"path": draft, "bytes": None, "error": why}},
        ),
        (
            lambda: _gpus(request.get("simulate_gpu")),
            lambda why: {"gpus": [], "gpu_error": why},
        ),
    ]
    out: dict[str, Any] = {}
    logs = io.StringIO()
    with captured(logs):
        for part, failed in parts:
            try:
                out.update(part())
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - never costs the plan
                out.update(failed(describe(exc)))
    out["logs"] = log_lines(logs.getvalue())[-40:]
    out["elapsed_s"] = round(time.monotonic() - started, 3)
    return out


def host_path_for(swapped: tuple[str, str] | None) -> Callable[[str], str]:
    """A path as it is on the host: the request's model directory stood in for a path that is
    not on this machine (its config.json only); the weights are looked for at the real one."""

    def host_path(path: str) -> str:
        if swapped is not None and path.startswith(swapped[0]):
            return swapped[1] + path[len(swapped[0]) :]
        return path

    return host_path


def _model_part(server_args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"env": _mamba_env()}
    try:
        out["shapes"] = rank_shapes(server_args)
        out["basis"] = "sglang"
    except Exception as exc:  # noqa: BLE001 - not importable (the stand-in), an unknown model
        out["shapes"] = None
        out["shapes_error"] = describe(exc)
        out["basis"] = "config.json"
    out.update(read_text_config(str(getattr(server_args, "model_path", ""))))
    return out


def _mamba_env() -> dict[str, str | None]:
    """The dtype overrides of the mamba state as SGLang reads them (its ``envs``, defaults
    included; ``--mamba-ssm-dtype`` was written there by the resolution); without SGLang's
    ``envs`` (the stand-in) the environment's own values."""
    try:
        envs: Any = importlib.import_module("sglang.srt.environ").envs
    except ImportError:
        return {name: os.environ.get(name) for name in MAMBA_ENV}
    out: dict[str, str | None] = {}
    for name in MAMBA_ENV:
        value = getattr(envs, name).get()
        out[name] = None if value is None else str(value)
    return out


def _gpus(simulated: Mapping[str, Any] | None) -> dict[str, Any]:
    """Each GPU's total and free bytes: the simulated GPU when the request has one (the plan is
    for that GPU, not this machine's), else NVML (the host's one reader), only the devices
    ``CUDA_VISIBLE_DEVICES`` leaves visible."""
    if simulated:
        total = int(float(simulated["memory_mib"]) * MIB)
        name = str(simulated.get("name", "simulated GPU"))
        gpu = {
            "index": 0,
            "name": name,
            "total_bytes": total,
            "free_bytes": None,
            "basis": "simulated",
        }
        return {"gpus": [gpu], "gpu_error": None}
    return visible_gpus(host_gpus.read(None), os.environ.get("CUDA_VISIBLE_DEVICES"))


def visible_gpus(reading: host_gpus.GpuReading, visible_devices: str | None) -> dict[str, Any]:
    """The answer's ``gpus``/``gpu_error`` from NVML's reading of every device: those
    ``visible_devices`` (``CUDA_VISIBLE_DEVICES``) leaves visible, the server's view (the plan
    cache reads every device once, for its key and for a hit's free memory)."""
    shown = host_gpus.visible(list(reading.gpus), visible_devices)
    error = reading.error
    if reading.gpus and not shown:
        error = f"CUDA_VISIBLE_DEVICES={visible_devices!r} leaves no GPU visible"
    basis = f"NVML on {os.uname().nodename}"
    return {
        "gpus": [
            {
                "index": gpu.index,
                "name": gpu.name,
                "uuid": gpu.uuid,
                "total_bytes": gpu.total_bytes,
                "free_bytes": gpu.free_bytes,
                "basis": basis,
            }
            for gpu in shown
        ],
        "gpu_error": error,
    }


# -- SGLang's default mem_fraction_static


def _default_mfs(module: Any, args: list[str], result: Mapping[str, Any]) -> dict[str, Any]:
    """The ``mem_fraction_static`` SGLang would pick itself on this GPU for this launch
    (``_handle_gpu_memory_settings``): the resolved value when the command line sets none,
    else a second resolution of the same arguments without it (same environment and GPU)."""
    given = (result.get("raw") or {}).get("mem_fraction_static")
    if given in (None, UNSET):
        value = (result.get("effective") or {}).get("mem_fraction_static")
        basis = "resolved: the command line sets none"
    else:
        basis = f"resolved again without {MFS_FLAG}"
        value = _resolve_without_mfs(module, args)
    out: dict[str, Any] = {"default_mem_fraction_static_basis": basis}
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        out["default_mem_fraction_static_error"] = f"the resolution left it at {value!r}"
        value = None
    out["default_mem_fraction_static"] = None if value is None else float(value)
    return out


def _resolve_without_mfs(module: Any, args: list[str]) -> Any:
    """The resolved ``mem_fraction_static`` of ``args`` less the flag (and its value)."""
    stripped: list[str] = []
    skip = False
    for token in args:
        name = token.split("=", 1)[0]
        if skip:
            skip = False
        elif len(name) > len("--mem") and MFS_FLAG.startswith(name):
            skip = "=" not in token
        else:
            stripped.append(token)
    server_args = module.prepare_server_args(stripped)
    if hasattr(server_args, "resolve_once"):
        server_args.resolve_once()
    return getattr(resolved_view(server_args), "mem_fraction_static", None)
