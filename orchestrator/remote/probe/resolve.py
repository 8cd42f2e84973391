"""The plan: SGLang's own parsing and resolution of a command line (``plan(request)``), what it
changed and why, or where and why it refused; then the memory section."""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import os
import tempfile
import time
import traceback
from collections.abc import Mapping
from typing import Any

from orchestrator.remote.probe.memory import host_path_for, memory_section
from orchestrator.remote.probe.plugins import load_plugins
from orchestrator.remote.probe.post_init import WriteTrace
from orchestrator.remote.probe.simulate import simulated_gpu
from orchestrator.remote.probe.values import (
    PROTOCOL,
    UNSET,
    captured,
    describe,
    field_names,
    jsonable,
    log_lines,
    snapshot,
)


def raising_frame(tb: Any, sglang_root: str) -> dict[str, Any] | None:
    """The innermost frame inside sglang: the SGLang function that raised."""
    found = None
    for frame, line in traceback.walk_tb(tb):
        filename = frame.f_code.co_filename
        if filename.startswith(sglang_root):
            found = {
                "function": frame.f_code.co_name,
                "file": os.path.relpath(filename, sglang_root),
                "line": line,
            }
    return found


def plan(request: Mapping[str, Any]) -> dict[str, Any]:
    """The plan of ``request["args"]``; with ``"candidates": [[...arguments...], ...]`` (orch plan
    --fit) also the plan of each candidate command line, in this one process: SGLang imported
    once, each resolution as the single one does it (the simulated GPU patched and undone, the
    model directory made anew), the environment put back after each, since SGLang's resolution
    writes some of its values there (``envs.SGLANG_MAMBA_SSM_DTYPE.set`` ...)."""
    candidates = request.get("candidates")
    if not isinstance(candidates, list):
        return _plan_one(request, [str(a) for a in request["args"]])
    result = _isolated(request, request["args"])
    result["candidates"] = [_isolated(request, args) for args in candidates]
    return result


def _isolated(request: Mapping[str, Any], args: Any) -> dict[str, Any]:
    """One plan of a batch, the process's environment as it was before it."""
    saved = dict(os.environ)
    try:
        if not isinstance(args, list):
            raise TypeError(f"a candidate is a list of arguments, not {type(args).__name__}")
        return _plan_one(request, [str(a) for a in args])
    except ImportError:
        raise  # no SGLang here: the whole answer says so (main)
    except Exception as exc:  # noqa: BLE001 - one candidate's failure is its own answer
        return {
            "protocol": PROTOCOL,
            "ok": False,
            "error": {"stage": "candidate", "type": type(exc).__name__, "message": str(exc)},
        }
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _plan_one(request: Mapping[str, Any], args: list[str]) -> dict[str, Any]:
    result: dict[str, Any] = {"protocol": PROTOCOL, "ok": False}
    result["simulated_gpu"] = request.get("simulate_gpu")
    started = time.monotonic()
    sglang = importlib.import_module("sglang")
    result["sglang_version"] = getattr(sglang, "__version__", None)
    result["standin"] = getattr(sglang, "__orch_standin__", False) is True  # a label only
    sglang_root = os.path.dirname(os.path.dirname(os.path.abspath(str(sglang.__file__))))
    model_dir, swapped = _model_dir(request, args)

    try:
        with simulated_gpu(request.get("simulate_gpu")):
            server_args_module = importlib.import_module("sglang.srt.server_args")
            result["import_s"] = round(time.monotonic() - started, 3)
            simulated = bool(request.get("simulate_gpu"))
            resolved = _resolve(server_args_module, args, result, sglang_root, simulated)
            if resolved is not None:
                host_path = host_path_for(swapped)
                try:
                    result["memory"] = memory_section(
                        server_args_module, *resolved, result, request, host_path
                    )
                except Exception as exc:  # noqa: BLE001 - the plan stands without it
                    result["memory"] = {"error": describe(exc)}
    finally:
        if model_dir is not None:
            model_dir.cleanup()
    if swapped is not None:
        result = _put_back(result, *swapped)
    return result


def _model_dir(
    request: Mapping[str, Any], args: list[str]
) -> tuple[tempfile.TemporaryDirectory[str] | None, tuple[str, str] | None]:
    supplied = request.get("model_config")
    if not supplied:
        return None, None
    original = str(supplied["path"])
    holder = tempfile.TemporaryDirectory(prefix="orch-plan-")
    local = os.path.join(holder.name, os.path.basename(original.rstrip("/")) or "model")
    os.makedirs(local)
    with open(os.path.join(local, "config.json"), "w", encoding="utf-8") as handle:
        json.dump(supplied["config"], handle)
    for index, token in enumerate(args):
        if token == original:
            args[index] = local
        elif token.endswith("=" + original):
            args[index] = token[: -len(original)] + local
    return holder, (local, original)


def _put_back(document: Any, local: str, original: str) -> Any:
    if isinstance(document, str):
        return document.replace(local, original)
    if isinstance(document, list):
        return [_put_back(item, local, original) for item in document]
    if isinstance(document, dict):
        return {key: _put_back(item, local, original) for key, item in document.items()}
    return document


def _resolve(
    module: Any, args: list[str], result: dict[str, Any], sglang_root: str, simulated: bool
) -> tuple[Any, list[str]] | None:
    """Parse and resolve ``args`` into ``result``; the resolved ServerArgs and the arguments
    it was parsed from when SGLang accepted them, else None (the refusal is in ``result``)."""
    logs = io.StringIO()
    trace: WriteTrace | None = None
    stage = "plugins"
    resolve_started = time.monotonic()
    try:
        with captured(logs):
            plugins = load_plugins()
            if plugins is not None:
                names, result["plugin_hooks"] = plugins
                if names is not None:
                    result["plugins"] = names
            server_args_cls = module.ServerArgs  # read after the plugins: one may replace it
            names = field_names(server_args_cls)
            result["defaults"] = _defaults(server_args_cls, names)
            staged = hasattr(server_args_cls, "resolve_once")  # 0.5.19+
            if (
                staged
                and simulated
                and not any(a == "--device" or a.startswith("--device=") for a in args)
            ):
                # 0.5.19+ asks torch for the device, below the platform override: name it instead
                args = [*args, "--device", "cuda"]
                result["added_args"] = ["--device", "cuda"]
            result["mode"] = "prepare_server_args + resolve_once" if staged else "__post_init__"
            trace = None if staged else WriteTrace(server_args_cls, sglang_root)
            stage = "parse"
            resolve_started = time.monotonic()
            if trace is not None:
                with trace.installed():
                    server_args = module.prepare_server_args(args)
            else:
                server_args = module.prepare_server_args(args)
                result["raw"] = snapshot(server_args, names)
                stage = "resolve"
                server_args.resolve_once()
    except SystemExit as exc:
        result["error"] = {
            "stage": stage,
            "type": "SystemExit",
            "exit_code": exc.code,
            "message": _usage_error(logs.getvalue()),
        }
        result["logs"] = log_lines(logs.getvalue())
        return None
    except Exception as exc:  # noqa: BLE001 - SGLang's refusal is the answer
        if trace is not None and trace.raw is not None:
            stage = "resolve"
        result["error"] = {
            "stage": stage,
            "type": type(exc).__name__,
            "message": str(exc),
            "raised_in": raising_frame(exc.__traceback__, sglang_root),
        }
        result["logs"] = log_lines(logs.getvalue())
        if trace is not None and trace.raw is not None:
            result["raw"] = trace.raw
            result["provenance"] = trace.writes  # what SGLang changed before it raised
        return None
    result["resolve_s"] = round(time.monotonic() - resolve_started, 3)
    result["ok"] = True
    result["logs"] = log_lines(logs.getvalue())
    result["effective"] = _effective(server_args, names)
    if trace is not None:
        result["raw"] = trace.raw or {}
        result["provenance"] = trace.writes
    else:
        result["provenance"] = _declared_overrides(server_args)
    launch_command = getattr(server_args, "launch_command", None)
    if isinstance(launch_command, str):
        result["launch_command"] = launch_command
    return server_args, args


def _effective(server_args: Any, names: list[str]) -> dict[str, Any]:
    """The resolved values: 0.5.19+ keep the raw input in the fields and the resolution in
    declarations, read back by ``resolved_dict()`` (what the ``server_args=`` line logs)."""
    resolved_dict = getattr(server_args, "resolved_dict", None)
    if callable(resolved_dict):
        values = jsonable(resolved_dict())
        if isinstance(values, dict):
            return values
    return snapshot(server_args, names)


def _defaults(server_args_cls: Any, names: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if dataclasses.is_dataclass(server_args_cls):
        for f in dataclasses.fields(server_args_cls):
            if f.default is not dataclasses.MISSING:
                out[f.name] = jsonable(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                try:
                    out[f.name] = jsonable(f.default_factory())
                except Exception:  # noqa: BLE001 - a factory that needs a GPU
                    out[f.name] = UNSET
        return out
    defaults = getattr(server_args_cls, "__struct_defaults__", ())
    tail = names[len(names) - len(defaults) :]
    if len(tail) != len(defaults):  # zip(strict=True), which Python 3.9 lacks
        raise ValueError(f"{len(defaults)} defaults for {len(tail)} fields")
    for name, default in zip(tail, defaults):
        factory = getattr(default, "factory", None)
        try:
            out[name] = jsonable(factory() if callable(factory) else default)
        except Exception:  # noqa: BLE001
            out[name] = UNSET
    return out


def _declared_overrides(server_args: Any) -> dict[str, list[dict[str, Any]]]:
    """SGLang's own record (0.5.16+): ``_resolved_overrides`` = [(source, {field: value})]."""
    declared = getattr(server_args, "_resolved_overrides", None) or []
    out: dict[str, list[dict[str, Any]]] = {}
    for entry in declared:
        try:
            source, changes = entry
        except (TypeError, ValueError):
            continue
        if not isinstance(changes, dict):
            continue
        for name, value in changes.items():
            out.setdefault(str(name), []).append({"source": str(source), "value": jsonable(value)})
    return out


def _usage_error(text: str) -> str:
    lines = [line for line in text.splitlines() if ": error: " in line]
    return lines[-1] if lines else (text.strip().splitlines() or ["argparse error"])[-1]
