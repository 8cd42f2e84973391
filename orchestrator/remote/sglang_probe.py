"""orch's planning probe: runs SGLang's own parsing and resolution on a command line, no server.

ONE file, standard library only, importing nothing from orchestrator: orch pushes it to the host
(like agent.py) or runs it with a local python, in either case one that has the target sglang::

    python sglang_probe.py REQUEST.json      # answers one JSON document on stdout

It re-executes itself once under the request's environment (the server's), then removes the
request file when asked to (it may hold tokens).

The request: ``{"args": [...SGLang arguments...], "env": {...}, "simulate_gpu": null | {...},
"model_config": null | {"path": P, "config": {...}}}``. What it does, as SGLang's entry points
do it (sglang/launch_server.py's ``__main__`` block, sglang/cli/serve.py's ``serve``):

- from 0.5.11, ``sglang.srt.plugins.load_plugins()`` first: SGLang's plugins (entry points of the
  group ``sglang.srt.plugins``) may add arguments or patch ServerArgs; the answer's ``plugins``
  names those loaded, ``plugin_hooks`` lists the hooks they registered (target, type, plugin);
- up to 0.5.18, ``prepare_server_args(args)`` parses and resolves (``ServerArgs.__post_init__``,
  sglang/srt/server_args.py); every attribute write during post-init is recorded with the
  function and line that made it;
- from 0.5.19, ``prepare_server_args`` returns the raw input and ``resolve_once()`` resolves;
  SGLang's own ``_resolved_overrides`` declarations (0.5.16+; sglang/srt/arg_groups/overrides.py,
  ``declare_resolution``) say which step changed what.

argparse errors (exit 2), exceptions raised during resolution (type, message, and the SGLang
function, file and line that raised) and everything SGLang logged are reported. With
``simulate_gpu`` (``{"name", "capability": [major, minor], "memory_mib"}``) the GPU facts SGLang
asks for are answered from it, so a machine without a GPU predicts what a given GPU would get;
without it, the host's real facts are used. No model weights are read: resolution reads the
model's ``config.json`` only (``model_config`` supplies one when the path is not on this
machine; the path is put back in the results).

A successful resolution's answer has a ``"memory"`` section for orch's GPU memory budget
(docs/agent.md, "The planning probe's answer"), found without a GPU and never failing the plan:
the model's shapes per rank from SGLang's own classes (``ModelConfig``, its mamba state's
``mamba2_cache_params``, ``DefaultPoolConfigurator._compute_cell_size``) or, where they cannot
run, the text config for orch to mirror them; the checkpoint's bytes from its safetensors
headers; each GPU's memory (NVML, or the simulated GPU); SGLang's default
``mem_fraction_static`` (a second resolution without ``--mem-fraction-static``).

orch's SGLang stand-in (standin/, NOT SGLang) provides the same modules, shaped as the release it
imitates, and goes through the same path; its package says what it is (``sglang.__orch_standin__``)
and the answer carries that as ``"standin": true``.
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this file's directory first on sys.path; beside orch's own
# modules that would shadow the standard library (orchestrator/profile/store.py vs `profile`).
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import contextlib
import dataclasses
import fcntl
import importlib
import io
import json
import logging
import tempfile
import time
import traceback
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

PROTOCOL = 1
UNSET = "<unset>"


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON form of a ServerArgs value: dataclasses and msgspec structs become dicts, enums
    their value, anything else unknown its repr."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
        )
    if isinstance(value, list | tuple | set | frozenset):
        items = sorted(value, key=repr) if isinstance(value, set | frozenset) else value
        return [jsonable(item, depth + 1) for item in items]
    if isinstance(value, dict):
        return {str(key): jsonable(item, depth + 1) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
    struct_fields = getattr(type(value), "__struct_fields__", None)
    if struct_fields is not None:
        return {name: jsonable(getattr(value, name, None), depth + 1) for name in struct_fields}
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        return jsonable(enum_value, depth + 1)
    return repr(value)


def field_names(server_args_cls: Any) -> list[str]:
    if dataclasses.is_dataclass(server_args_cls):
        return [f.name for f in dataclasses.fields(server_args_cls)]
    return list(getattr(server_args_cls, "__struct_fields__", ()))


def snapshot(server_args: Any, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        try:
            out[name] = jsonable(getattr(server_args, name))
        except Exception:  # noqa: BLE001 - a property that cannot answer before resolution
            out[name] = UNSET
    return out


# -- GPU facts -------------------------------------------------------------------------------


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
            "is_cuda": True, "is_hip": False, "is_npu": False, "is_xpu": False,
            "is_musa": False, "is_mps": False, "is_sm90": major == 9,
            "is_sm100": major == 10, "is_sm100_or_sm110": major in (10, 11),
            "is_sm110": major == 11, "is_sm120": major == 12,
            "is_blackwell": major in (10, 11, 12), "is_hopper_with_cuda_12_3": major == 9,
            "has_amx": False, "has_flashinfer": True, "device_sm": major * 10 + minor,
            "device_capability": (major, minor),
        }  # fmt: skip
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


# -- tracing post-init writes (up to 0.5.18) ---------------------------------------------------


class WriteTrace:
    """Records every attribute write on ServerArgs during ``__post_init__``."""

    def __init__(self, server_args_cls: Any, sglang_root: str) -> None:
        self.cls = server_args_cls
        self.root = sglang_root
        self.writes: dict[str, list[dict[str, Any]]] = {}
        self.raw: dict[str, Any] | None = None
        self._active = False
        self._names = field_names(server_args_cls)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        cls = self.cls
        original_setattr = cls.__setattr__
        original_post_init = cls.__post_init__
        trace = self

        def traced_setattr(obj: Any, name: str, value: Any) -> None:
            if trace._active and name in trace._names:
                old = obj.__dict__.get(name, UNSET)
                if jsonable(old) != jsonable(value):
                    frame = sys._getframe(1)
                    trace.writes.setdefault(name, []).append(
                        {
                            "source": frame.f_code.co_name,
                            "file": os.path.relpath(frame.f_code.co_filename, trace.root),
                            "line": frame.f_lineno,
                            "value": jsonable(value),
                        }
                    )
            original_setattr(obj, name, value)

        def traced_post_init(obj: Any) -> None:
            trace.raw = snapshot(obj, trace._names)
            trace._active = True
            try:
                original_post_init(obj)
            finally:
                trace._active = False

        cls.__setattr__ = traced_setattr
        cls.__post_init__ = traced_post_init
        try:
            yield
        finally:
            cls.__setattr__ = original_setattr
            cls.__post_init__ = original_post_init


# -- plugins (0.5.11+) --------------------------------------------------------------------------


def load_plugins() -> tuple[list[str] | None, list[dict[str, Any]]] | None:
    """What SGLang's entry points do before they parse: ``sglang.srt.plugins.load_plugins()``
    (sglang/srt/plugins/__init__.py) runs every entry point of the group ``sglang.srt.plugins``
    once (``SGLANG_PLUGINS``, comma-separated names, restricts which; a plugin that fails to load
    or run is logged and skipped), then ``HookRegistry.apply_hooks()`` patches the functions and
    classes they registered hooks on. None where the installed SGLang has no plugins (< 0.5.11);
    else the names of the plugins loaded and the hooks registered.

    SGLang keeps no list of the plugins it ran: the names are read off what
    ``load_plugins_by_group`` hands ``load_plugins`` (None if that function is gone), the hooks
    off SGLang's registry (with the plugin and distribution of each)."""
    try:
        plugins: Any = importlib.import_module("sglang.srt.plugins")
    except ModuleNotFoundError as exc:
        if exc.name in ("sglang.srt.plugins", "sglang.srt"):
            return None
        raise
    load = getattr(plugins, "load_plugins", None)
    if not callable(load):
        return None
    general = getattr(plugins, "GENERAL_PLUGINS_GROUP", "sglang.srt.plugins")
    by_group: Any = getattr(plugins, "load_plugins_by_group", None)
    recorded = callable(by_group)
    loaded: list[str] = []

    def recording(group: str, *args: Any, **kwargs: Any) -> Any:
        found = by_group(group, *args, **kwargs)
        if group == general and isinstance(found, dict):
            loaded.extend(str(name) for name in found)
        return found

    if recorded:
        plugins.load_plugins_by_group = recording
    try:
        load()
    finally:
        if recorded:
            plugins.load_plugins_by_group = by_group
    return (loaded if recorded else None), _registered_hooks()


def _registered_hooks() -> list[dict[str, Any]]:
    """SGLang's ``HookRegistry``: ``_hooks`` = {target: [(HookType, hook, HookSource)]}."""
    registry = getattr(sys.modules.get("sglang.srt.plugins.hook_registry"), "HookRegistry", None)
    hooks = getattr(registry, "_hooks", None)
    patched: Any = getattr(registry, "_patched", None) or set()
    out: list[dict[str, Any]] = []
    if not isinstance(hooks, dict):
        return out
    for target, entries in hooks.items():
        for entry in entries:
            try:
                hook_type, hook, source = entry
            except (TypeError, ValueError):
                continue
            out.append(
                {
                    "target": str(target),
                    "type": jsonable(hook_type),
                    "hook": f"{getattr(hook, '__module__', '?')}."
                    f"{getattr(hook, '__qualname__', repr(hook))}",
                    "plugin": getattr(source, "plugin_name", None),
                    "dist": getattr(source, "dist_name", None),
                    "applied": target in patched,
                }
            )
    return out


# -- the probe ----------------------------------------------------------------------------------


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
    args = [str(a) for a in request["args"]]
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
                host_path = _host_path(swapped)
                try:
                    result["memory"] = memory_section(
                        server_args_module, *resolved, result, request, host_path
                    )
                except Exception as exc:  # noqa: BLE001 - the plan stands without it
                    result["memory"] = {"error": _describe(exc)}
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
        with _captured(logs):
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
        result["logs"] = _lines(logs.getvalue())
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
        result["logs"] = _lines(logs.getvalue())
        if trace is not None and trace.raw is not None:
            result["raw"] = trace.raw
            result["provenance"] = trace.writes  # what SGLang changed before it raised
        return None
    result["resolve_s"] = round(time.monotonic() - resolve_started, 3)
    result["ok"] = True
    result["logs"] = _lines(logs.getvalue())
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


@contextlib.contextmanager
def _captured(logs: io.StringIO) -> Iterator[None]:
    """What SGLang and its plugins print or log goes to ``logs``: stdout carries the answer."""
    handler = logging.StreamHandler(logs)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    with contextlib.redirect_stderr(logs), contextlib.redirect_stdout(logs):
        logging.getLogger().addHandler(handler)
        try:
            yield
        finally:
            logging.getLogger().removeHandler(handler)


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
    for name, default in zip(tail, defaults, strict=True):
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


def _lines(text: str) -> list[str]:
    return [line for line in text.replace("\r", "\n").splitlines() if line.strip()][-400:]


# -- the memory section (orch plan's GPU memory budget) -----------------------------------------

MIB = 1 << 20
MAMBA_ENV = ("SGLANG_MAMBA_SSM_DTYPE", "SGLANG_MAMBA_CONV_DTYPE")
SAFETENSORS_INDEX = "model.safetensors.index.json"
MAX_SAFETENSORS_HEADER = 100 * MIB  # the format's own limit is 100 MB
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
            lambda why: {"default_mem_fraction_static": None,
                         "default_mem_fraction_static_error": why},
        ),
        (
            lambda: _model_part(server_args),
            lambda why: {"shapes": None, "basis": "config.json", "shapes_error": why},
        ),
        (
            lambda: {"weights": _weights(host_path(model_path))},
            lambda why: {"weights": {"path": model_path, "bytes": None, "error": why}},
        ),
        (
            lambda: {"draft_weights": _weights(host_path(draft)) if draft else None},
            lambda why: {"draft_weights": {"path": draft, "bytes": None, "error": why}},
        ),
        (
            lambda: _gpus(request.get("simulate_gpu")),
            lambda why: {"gpus": [], "gpu_error": why},
        ),
    ]  # fmt: skip
    out: dict[str, Any] = {}
    logs = io.StringIO()
    with _captured(logs):
        for part, failed in parts:
            try:
                out.update(part())
            except (Exception, SystemExit) as exc:  # noqa: BLE001 - never costs the plan
                out.update(failed(_describe(exc)))
    out["logs"] = _lines(logs.getvalue())[-40:]
    out["elapsed_s"] = round(time.monotonic() - started, 3)
    return out


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _host_path(swapped: tuple[str, str] | None) -> Callable[[str], str]:
    """A path as it is on the host: the request's model directory stood in for a path that is
    not on this machine (its config.json only); the weights are looked for at the real one."""

    def host_path(path: str) -> str:
        if swapped is not None and path.startswith(swapped[0]):
            return swapped[1] + path[len(swapped[0]) :]
        return path

    return host_path


# -- the model's shapes, with SGLang's own classes


def _model_part(server_args: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"env": _mamba_env()}
    try:
        out["shapes"] = _shapes(server_args)
        out["basis"] = "sglang"
    except Exception as exc:  # noqa: BLE001 - not importable (the stand-in), an unknown model
        out["shapes"] = None
        out["shapes_error"] = _describe(exc)
        out["basis"] = "config.json"
    out.update(_text_config(str(getattr(server_args, "model_path", ""))))
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


def _resolved_view(server_args: Any) -> Any:
    """The resolved values: 0.5.19+ keep them out of the fields (``resolving_view``, what
    ``ModelConfig.from_server_args`` reads); up to 0.5.18 the fields are resolved."""
    try:
        overrides: Any = importlib.import_module("sglang.srt.arg_groups.model_override_base")
    except ImportError:
        return server_args
    view = getattr(overrides, "resolving_view", None)
    return view(server_args) if callable(view) else server_args


def _parallel_sizes(view: Any) -> dict[str, Any]:
    """The widths each rank's groups will have, as SGLang derives them: 0.5.19+
    ``runtime_context.parallel_widths_of``; up to 0.5.18 ``dp_attention.
    compute_dp_attention_world_info`` (attention TP = TP / DP with DP attention, / CP)."""
    tp, pp = int(view.tp_size), int(getattr(view, "pp_size", 1) or 1)
    dp = int(getattr(view, "dp_size", 1) or 1)
    dp_attention = bool(getattr(view, "enable_dp_attention", False))
    cp = int(getattr(view, "attn_cp_size", 1) or 1)
    sizes: dict[str, Any] = {"tp_size": tp, "pp_size": pp, "dp_size": dp, "attn_cp_size": cp}
    context: Any = None
    with contextlib.suppress(ImportError):
        context = importlib.import_module("sglang.srt.runtime_context")
    widths_of = getattr(context, "parallel_widths_of", None)
    if callable(widths_of):
        widths = dict(widths_of(view))
        sizes.update(widths)
        sizes["source"] = "runtime_context.parallel_widths_of"
        sizes["enable_dp_attention"] = int(widths.get("attn_dp_size", 1)) > 1 or dp_attention
        return sizes
    sizes["enable_dp_attention"] = dp_attention
    try:
        dp_module: Any = importlib.import_module("sglang.srt.layers.dp_attention")
        info = dp_module.compute_dp_attention_world_info(dp_attention, 0, tp, dp, cp)
        sizes["attn_tp_size"] = int(info[1])
        sizes["source"] = "dp_attention.compute_dp_attention_world_info"
    except (ImportError, AttributeError, TypeError):
        sizes["attn_tp_size"] = tp // (dp if dp_attention else 1) // cp
        sizes["source"] = "tp_size / dp_size (DP attention) / attn_cp_size"
    sizes["attn_dp_size"] = dp if dp_attention else 1
    return sizes


@contextlib.contextmanager
def _rank_parallel_state(view: Any, sizes: Mapping[str, Any]) -> Iterator[None]:
    """The parallel state one rank of this launch would have, for SGLang's config code to read:
    0.5.19+ through SGLang's own ``get_parallel().override(...)`` (the widths, the configured
    leaves, rank 0); up to 0.5.18 by standing in for the unbuilt process groups of
    ``parallel_state`` (``_TP``, ``_ATTN_TP`` ...), which ``get_attention_tp_size()`` and
    ``get_tensor_model_parallel_world_size()`` read. Everything is put back afterwards."""
    with contextlib.ExitStack() as stack:
        context: Any = None
        with contextlib.suppress(ImportError):
            context = importlib.import_module("sglang.srt.runtime_context")
        get_parallel = getattr(context, "get_parallel", None)
        known_of = getattr(context, "_parallel_fields", None)
        if callable(get_parallel) and callable(known_of):
            known = set(known_of())
            values = {name: getattr(view, name) for name in known if _has(view, name)}
            values.update({k: v for k, v in sizes.items() if k in known})
            values.update({name: 0 for name in known if name.endswith("_rank")})
            stack.enter_context(get_parallel().override(**values))
        state: Any = None
        with contextlib.suppress(ImportError):
            state = importlib.import_module("sglang.srt.distributed.parallel_state")
        groups = {
            "_TP": sizes["tp_size"], "_ATTN_TP": sizes["attn_tp_size"],
            "_ATTN_CP": sizes["attn_cp_size"], "_PP": sizes["pp_size"],
        }  # fmt: skip
        for name, width in groups.items():
            if state is not None and name in vars(state) and getattr(state, name) is None:
                group = types.SimpleNamespace(
                    world_size=width, rank_in_group=0, rank=0, ranks=list(range(width))
                )
                setattr(state, name, group)
                stack.callback(setattr, state, name, None)
        yield


def _has(view: Any, name: str) -> bool:
    try:
        getattr(view, name)
    except Exception:  # noqa: BLE001 - a field this view does not hold
        return False
    return True


def _shapes(server_args: Any) -> dict[str, Any]:
    """Bytes per mamba slot and per KV token on one rank, by SGLang's own classes: the
    ``ModelConfig`` each TP worker builds (``ModelConfig.from_server_args``), the model's
    mamba-ish config (0.5.19+ ``configs.hybrid_arch.mambaish_config``; up to 0.5.18
    ``ModelRunner.mambaish_config``) and its ``mamba2_cache_params``; the KV cell by
    ``DefaultPoolConfigurator._compute_cell_size`` (``_kv_cell``). Each is computed inside the
    parallel state of rank 0 of this launch (``_rank_parallel_state``)."""
    config_module: Any = importlib.import_module("sglang.srt.configs.model_config")
    torch: Any = importlib.import_module("torch")
    view = _resolved_view(server_args)
    sizes = _parallel_sizes(view)
    sources = ["ModelConfig.from_server_args", str(sizes.pop("source"))]
    notes: list[str] = []
    with _rank_parallel_state(view, sizes):
        model_config = config_module.ModelConfig.from_server_args(server_args)
        mambaish, found_by = _mambaish(model_config)
        sources.append(found_by)
        mamba = None
        if mambaish is not None:
            mamba = _mamba_state(mambaish, notes)
            if mamba is not None:
                sources.append(f"{type(mambaish).__name__}.mamba2_cache_params")
        kv = _kv_cell(torch, config_module, model_config, server_args, mambaish, sizes, notes)
        if kv["kv_cell_source"] != "formula":
            sources.append(str(kv["kv_cell_source"]))
        architectures = getattr(model_config.hf_config, "architectures", None) or [None]
        if int(sizes["pp_size"]) > 1:
            notes.append("pp_size > 1: layers are counted for the whole model, not per stage")
        if getattr(model_config, "is_hybrid_swa", False):
            notes.append("a hybrid SWA model: SGLang sizes separate full and SWA pools")
        shapes = {
            "architecture": architectures[0],
            "context_len": int(model_config.context_len),
            "model_dtype": _dtype_name(model_config.dtype),
            "nextn_predict_layers": getattr(model_config, "num_nextn_predict_layers", None),
            "multimodal": bool(getattr(model_config, "is_multimodal", False)),
            **{k: v for k, v in sizes.items() if isinstance(v, int | bool)},
            **kv,
            "hybrid": mamba is not None,
            "mamba": mamba,
            "sources": sources,
            "notes": notes,
        }
        # last: SGLang's draft-mode rewrite changes the cached config the target's shares
        shapes["draft"] = (
            _draft_config(config_module, server_args, view, shapes["nextn_predict_layers"])
            if _speculative(view)
            else None
        )
    return shapes


def _speculative(view: Any) -> bool:
    algorithm = getattr(view, "speculative_algorithm", None)
    return algorithm is not None and str(jsonable(algorithm)).upper() not in ("", "NONE")


def _draft_config(
    config_module: Any, server_args: Any, view: Any, target_nextn: int | None
) -> dict[str, Any]:
    """The draft's layers as SGLang reads its checkpoint in draft mode (``ModelConfig(...,
    is_draft_model=True)``: an MTP head of the target checkpoint is rewritten to its MTP form,
    ``num_nextn_predict_layers``); the path is the draft's, or the target's when it has none.
    ``eagle_draft_layers``: the draft layers 0.5.23 adds to the target's KV cell under EAGLE
    (``spec_aux_hidden_state._resolve_eagle_aux_hidden_state``: with a draft path the draft-mode
    config's MTP layers, else its layers; without one the TARGET config's MTP layers, often
    none)."""
    path = getattr(view, "speculative_draft_model_path", None)
    out: dict[str, Any] = {"path": path}
    try:
        config = config_module.ModelConfig.from_server_args(
            server_args, model_path=path or None, is_draft_model=True
        )
    except Exception as exc:  # noqa: BLE001 - a draft elsewhere, a Hub id offline
        out["error"] = _describe(exc)
        return out
    architectures = getattr(config.hf_config, "architectures", None) or [None]
    nextn = getattr(config, "num_nextn_predict_layers", None)
    layers = max(
        int(config.num_hidden_layers), int(getattr(config, "num_attention_layers", 0) or 0)
    )
    eagle = (nextn if nextn is not None else layers) if path else target_nextn
    out.update(
        architecture=architectures[0], nextn_predict_layers=nextn, layers=layers,
        eagle_draft_layers=eagle,
    )  # fmt: skip
    return out


def _mambaish(model_config: Any) -> tuple[Any, str]:
    """The config SGLang sizes the mamba pool from, found as SGLang finds it."""
    try:
        hybrid_arch: Any = importlib.import_module("sglang.srt.configs.hybrid_arch")
    except ImportError:
        pass
    else:
        return hybrid_arch.mambaish_config(model_config), "hybrid_arch.mambaish_config"
    try:
        runner_module: Any = importlib.import_module("sglang.srt.model_executor.model_runner")
    except ImportError as exc:
        # ModelRunner needs a serving install (einops, kernels); its properties pick the config
        # that has SGLang's mamba state: the same classes, asked directly
        found = _mambaish_by_class(model_config)
        return found[0], f"{found[1]} (ModelRunner not importable: {_describe(exc)})"
    runner = object.__new__(runner_module.ModelRunner)  # its properties read only these
    runner.model_config = model_config
    runner.is_draft_worker = False
    return runner.mambaish_config, "ModelRunner.mambaish_config"


def _mambaish_by_class(model_config: Any) -> tuple[Any, str]:
    hf_config = model_config.hf_config
    text = getattr(hf_config, "get_text_config", None)
    candidates = [
        hf_config,
        getattr(hf_config, "llm_config", None),
        text() if callable(text) else None,
    ]
    for config in candidates:
        if config is not None and isinstance(
            getattr(type(config), "mamba2_cache_params", None), property
        ):
            return config, f"{type(config).__name__} (the config class with mamba2_cache_params)"
    try:
        registry: Any = importlib.import_module("sglang.srt.configs.linear_attn_model_registry")
    except ImportError:
        return None, "no config class with mamba2_cache_params"
    found = registry.get_linear_attn_config(hf_config)
    return (found[1] if found else None), "linear_attn_model_registry.get_linear_attn_config"


def _mamba_state(mambaish: Any, notes: list[str]) -> dict[str, Any] | None:
    params = mambaish.mamba2_cache_params
    if params is None:
        return None
    shape, dtype, layers = params.shape, params.dtype, len(params.layers)
    conv_shapes = [[int(n) for n in conv] for conv in shape.conv]
    temporal = [int(n) for n in shape.temporal]
    conv_bytes = sum(_product(conv) for conv in conv_shapes) * dtype.conv.itemsize * layers
    ssm_bytes = _product(temporal) * dtype.temporal.itemsize * layers
    slot_bytes = int(params.mamba_cache_per_req)
    if conv_bytes + ssm_bytes != slot_bytes:
        notes.append(
            f"mamba_cache_per_req {slot_bytes} != conv {conv_bytes} + SSM {ssm_bytes}: "
            f"{type(params).__name__} counts its state its own way"
        )
    return {
        "params": type(params).__name__,
        "layers": layers,
        "conv_shapes": conv_shapes,
        "temporal_shape": temporal,
        "conv_dtype": _dtype_name(dtype.conv),
        "ssm_dtype": _dtype_name(dtype.temporal),
        "conv_bytes": conv_bytes,
        "ssm_bytes": ssm_bytes,
        "slot_bytes": slot_bytes,
    }


def _product(numbers: list[int]) -> int:
    out = 1
    for number in numbers:
        out *= number
    return out


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


# --kv-cache-dtype -> torch dtype, as ModelRunner.configure_kv_cache_dtype (0.5.11) and
# mem_cache/kv_cache_dtype.py (0.5.23) map them on CUDA; "auto" is the model's dtype
KV_DTYPES = {
    "fp8_e5m2": "float8_e5m2", "fp8_e4m3": "float8_e4m3fn", "mxfp8": "float8_e4m3fn",
    "bf16": "bfloat16", "bfloat16": "bfloat16", "fp4_e2m1": "float4_e2m1fn_x2",
    "nvfp4": "float4_e2m1fn_x2", "fp4_mx_block16": "float4_e2m1fn_x2",
}  # fmt: skip


def _kv_cell(
    torch: Any,
    config_module: Any,
    model_config: Any,
    server_args: Any,
    mambaish: Any,
    sizes: Mapping[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """Bytes per KV token on one rank: SGLang's ``DefaultPoolConfigurator._compute_cell_size``
    called on what it reads of a model runner, else (a model whose cell needs more of the
    runtime than the probe provides) its MHA / MLA formula, said so in the notes."""
    view = _resolved_view(server_args)
    requested = str(getattr(view, "kv_cache_dtype", "auto") or "auto")
    if requested == "auto":
        kv_dtype = model_config.dtype
        algo = _kv_cache_quant_algo(model_config.hf_config)
        if algo is not None and algo.upper() == "FP8":
            kv_dtype = torch.float8_e4m3fn  # the checkpoint's kv_cache_quant_algo
            notes.append("kv_cache_dtype auto: FP8, the checkpoint's kv_cache_quant_algo")
    elif requested in KV_DTYPES:
        kv_dtype = getattr(torch, KV_DTYPES[requested])
    else:
        raise ValueError(f"Unsupported kv_cache_dtype: {requested}")
    dtype_bytes = int(torch._utils._element_size(kv_dtype))
    if mambaish is not None:
        layers = len(mambaish.full_attention_layer_ids)
    else:
        layers = max(
            int(model_config.num_hidden_layers),
            int(getattr(model_config, "num_attention_layers", 0) or 0),
        )
    arch = getattr(config_module, "AttentionArch", None)
    mla = arch is not None and model_config.attention_arch == arch.MLA
    out: dict[str, Any] = {
        "kv_cache_dtype": requested, "kv_dtype": _dtype_name(kv_dtype),
        "kv_dtype_bytes": dtype_bytes, "attention": "MLA" if mla else "MHA",
        "full_attention_layers": layers,
    }  # fmt: skip
    if mla:
        width = int(model_config.kv_lora_rank) + int(model_config.qk_rope_head_dim)
        formula = width * layers * dtype_bytes
        out["kv_lora_rank"] = int(model_config.kv_lora_rank)
        out["qk_rope_head_dim"] = int(model_config.qk_rope_head_dim)
    else:
        dcp = int(sizes.get("attn_dcp_size", 1) or 1)
        attn_tp = int(sizes["attn_tp_size"])
        heads = int(
            model_config.get_num_kv_heads(attn_tp, dcp)
            if dcp > 1
            else model_config.get_num_kv_heads(attn_tp)
        )
        head_dim, v_head_dim = int(model_config.head_dim), int(model_config.v_head_dim)
        formula = heads * (head_dim + v_head_dim) * layers * dtype_bytes
        out.update(kv_heads_per_rank=heads, head_dim=head_dim, v_head_dim=v_head_dim)
    runner = types.SimpleNamespace(
        model_config=model_config, kv_cache_dtype=kv_dtype, kv_cache_dtype_str=requested,
        use_mla_backend=mla, server_args=server_args, is_draft_worker=False,
        model_dtype=model_config.dtype,
    )  # fmt: skip
    try:
        pools: Any = importlib.import_module("sglang.srt.model_executor.pool_configurator")
        configurator = object.__new__(pools.DefaultPoolConfigurator)
        configurator.kv_cache_dtype_str = requested  # 0.5.23 reads it off itself
        out["kv_cell_bytes"] = int(configurator._compute_cell_size(runner, layers))
        out["kv_cell_source"] = "DefaultPoolConfigurator._compute_cell_size"
    except Exception as exc:  # noqa: BLE001 - it wanted more of a runner: the formula
        out["kv_cell_bytes"] = formula
        out["kv_cell_source"] = "formula"
        notes.append(f"KV cell by its MHA/MLA formula: _compute_cell_size: {_describe(exc)}")
        if "float4" in str(kv_dtype):
            notes.append("an FP4 KV cache: SGLang adds scale buffers the formula leaves out")
    else:
        if out["kv_cell_bytes"] != formula:
            notes.append(f"KV cell {out['kv_cell_bytes']} != the MHA/MLA formula's {formula}")
    return out


def _kv_cache_quant_algo(hf_config: Any) -> str | None:
    quantization = getattr(hf_config, "quantization_config", None)
    if not isinstance(quantization, dict):
        return None
    for holder in (quantization, quantization.get("quantization")):
        if isinstance(holder, dict) and isinstance(holder.get("kv_cache_quant_algo"), str):
            return str(holder["kv_cache_quant_algo"])
    return None


def _text_config(model_path: str) -> dict[str, Any]:
    """``config.json`` of the model directory on this machine (the one the request supplied
    when the path is not here): its ``text_config`` (``llm_config``) for VL models, else the
    whole; what orch mirrors SGLang's arithmetic over when SGLang's classes were not run."""
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        return {"text_config": None, "text_config_error": f"{path}: {_describe(exc)}"}
    if not isinstance(config, dict):
        return {"text_config": None, "text_config_error": f"{path}: not a JSON object"}
    text = config.get("text_config") or config.get("llm_config")
    architectures = config.get("architectures") or [None]
    return {
        "text_config": text if isinstance(text, dict) else config,
        "text_config_key": "text_config" if isinstance(config.get("text_config"), dict) else (
            "llm_config" if isinstance(text, dict) else None),
        "config_architecture": architectures[0] if isinstance(architectures, list) else None,
    }  # fmt: skip


# -- the checkpoint's bytes


def _weights(path: str) -> dict[str, Any] | None:
    """The checkpoint's bytes on this host, no tensor data read: ``model.safetensors.index.
    json``'s ``metadata.total_size``, else the sum of the tensors' byte ranges in each
    safetensors header (those the index names, as SGLang's loader keeps them)."""
    if not path:
        return None
    out: dict[str, Any] = {"path": path, "bytes": None, "basis": None}
    if not os.path.isdir(path):
        hub_id = not path.startswith(("/", ".", "~")) and path.count("/") <= 1
        out["error"] = (
            "a Hub id: the checkpoint is not a directory on this host"
            if hub_id and not os.path.exists(path)
            else "not a directory on this host"
        )
        return out
    names = None
    index_path = os.path.join(path, SAFETENSORS_INDEX)
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as handle:
                index = json.load(handle)
            total = (index.get("metadata") or {}).get("total_size")
            if isinstance(total, int | float) and not isinstance(total, bool) and total > 0:
                return {**out, "bytes": int(total), "basis": f"{SAFETENSORS_INDEX} total_size"}
            weight_map = index.get("weight_map")
            if isinstance(weight_map, dict):
                names = sorted({str(name) for name in weight_map.values()})
        except (OSError, ValueError, AttributeError) as exc:
            out["note"] = f"{SAFETENSORS_INDEX} unreadable: {_describe(exc)}"
    if names is None:
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not names:
        return {**out, "error": "no *.safetensors files in the directory"}
    try:
        total = sum(safetensors_bytes(os.path.join(path, name)) for name in names)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return {**out, "error": _describe(exc)}
    return {**out, "bytes": total, "basis": f"safetensors headers of {len(names)} file(s)"}


def safetensors_bytes(path: str) -> int:
    """The bytes of a safetensors file's tensors, from its header alone: an 8-byte
    little-endian length, then that much JSON, ``{name: {"data_offsets": [begin, end]}}``."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if not 0 < length <= MAX_SAFETENSORS_HEADER:
            raise ValueError(f"{path}: not a safetensors file (header length {length})")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        total += int(end) - int(begin)
    return total


# -- the GPUs


def _gpus(simulated: Mapping[str, Any] | None) -> dict[str, Any]:
    """Each GPU's total and free bytes: the simulated GPU when the request has one (the plan is
    for that GPU, not this machine's), else NVML (``pynvml``, nvidia-ml-py), only the devices
    ``CUDA_VISIBLE_DEVICES`` leaves visible."""
    if simulated:
        total = int(float(simulated["memory_mib"]) * MIB)
        name = str(simulated.get("name", "simulated GPU"))
        gpu = {"index": 0, "name": name, "total_bytes": total, "free_bytes": None,
               "basis": "simulated"}  # fmt: skip
        return {"gpus": [gpu], "gpu_error": None}
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError as exc:
        return {"gpus": [], "gpu_error": f"pynvml (nvidia-ml-py) not importable: {exc}"}
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_* without a driver
        return {"gpus": [], "gpu_error": f"NVML: {_describe(exc)}"}
    gpus: list[dict[str, Any]] = []
    try:
        for index in range(int(nvml.nvmlDeviceGetCount())):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append(
                {
                    "index": index,
                    "name": _text(nvml.nvmlDeviceGetName(handle)),
                    "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
                    "total_bytes": int(memory.total),
                    "free_bytes": int(memory.free),
                    "basis": f"NVML on {os.uname().nodename}",
                }
            )
    except Exception as exc:  # noqa: BLE001
        return {"gpus": gpus, "gpu_error": f"NVML: {_describe(exc)}"}
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    shown = _visible(gpus, visible)
    if gpus and not shown:
        return {"gpus": [], "gpu_error": f"CUDA_VISIBLE_DEVICES={visible!r} leaves no GPU visible"}
    return {"gpus": shown, "gpu_error": None}


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _visible(gpus: list[dict[str, Any]], visible: str | None) -> list[dict[str, Any]]:
    """The devices CUDA would show, in its order: indices or (prefixes of) UUIDs."""
    if visible is None:
        return gpus
    chosen: list[dict[str, Any]] = []
    for token in (t.strip() for t in visible.split(",")):
        if not token:
            continue
        if token.isdigit():
            found = [gpu for gpu in gpus if gpu["index"] == int(token)]
        else:
            found = [gpu for gpu in gpus if str(gpu.get("uuid", "")).startswith(token)]
        if not found:
            break  # CUDA stops at the first device it cannot find
        chosen.append(found[0])
    return chosen


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
    if isinstance(value, bool) or not isinstance(value, int | float):
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
    return getattr(_resolved_view(server_args), "mem_fraction_static", None)


IN_ENV_FLAG = "--in-server-env"


def _handed_on(data: bytes, directory: str) -> tuple[str, bool]:
    """Where the request read from stdin waits for the probe started again under the server's
    environment: a pipe it inherits (``/dev/fd/N``: never a file), or, when the request
    outgrows the pipe, a 0600 file it removes once read. The path, and whether it is a file."""
    reader, writer = os.pipe()
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, 1 << 20)
    try:
        room = fcntl.fcntl(writer, fcntl.F_GETPIPE_SZ)
    except (OSError, AttributeError):
        room = 1 << 16
    if len(data) < room:
        os.write(writer, data)
        os.close(writer)
        os.set_inheritable(reader, True)
        return f"/dev/fd/{reader}", False
    os.close(reader)
    os.close(writer)
    fd, path = tempfile.mkstemp(prefix=".plan-", suffix=".json", dir=directory)
    with os.fdopen(fd, "wb") as handle:  # mkstemp: 0600
        handle.write(data)
    return path, True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or len(argv) > 2 or (len(argv) == 2 and argv[1] != IN_ENV_FLAG):
        sys.stderr.write("usage: sglang_probe.py REQUEST.json|-\n")
        return 2
    source = argv[0]
    if source == "-":  # the request on stdin (orch's way: it holds the server's environment)
        data = sys.stdin.buffer.read()
        request = json.loads(data)
        request["remove_request"] = False
    else:
        with open(source, "rb") as handle:
            data = handle.read()
        request = json.loads(data)
    env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    if env and IN_ENV_FLAG not in argv:
        # Start again under the server's environment, as the server starts: PYTHONPATH,
        # LD_LIBRARY_PATH and SGLANG_* take effect only from the interpreter's start.
        merged = {**os.environ, **env}
        script = os.path.abspath(__file__)
        if source == "-":
            source, is_file = _handed_on(data, os.path.dirname(script))
            if is_file:
                request["remove_request"] = True
                with open(source, "w", encoding="utf-8") as handle:
                    json.dump(request, handle)
        os.execve(sys.executable, [sys.executable, script, source, IN_ENV_FLAG], merged)
    if request.get("remove_request") and not source.startswith("/dev/fd/"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(source)  # it holds the server's environment (tokens)
    try:
        result = plan(request)
    except ImportError as exc:
        result = {"protocol": PROTOCOL, "ok": False, "error": {
            "stage": "import", "type": type(exc).__name__, "message": str(exc)}}  # fmt: skip
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
