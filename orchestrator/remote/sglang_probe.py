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

orch's SGLang stand-in (standin/, NOT SGLang) provides the same modules, shaped as the release it
imitates, and goes through the same path; its package says what it is (``sglang.__orch_standin__``)
and the answer carries that as ``"standin": true``.
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts this file's directory first on sys.path; beside orch's own
# modules that would shadow the standard library (orchestrator/profile.py vs `profile`).
if sys.path and os.path.abspath(sys.path[0] or ".") == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import contextlib
import dataclasses
import importlib
import io
import json
import logging
import tempfile
import time
import traceback
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
            _resolve(server_args_module, args, result, sglang_root, simulated)
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
) -> None:
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
        return
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
        return
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


IN_ENV_FLAG = "--in-server-env"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or len(argv) > 2 or (len(argv) == 2 and argv[1] != IN_ENV_FLAG):
        sys.stderr.write("usage: sglang_probe.py REQUEST.json\n")
        return 2
    with open(argv[0], encoding="utf-8") as handle:
        request = json.load(handle)
    env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    if env and IN_ENV_FLAG not in argv:
        # Start again under the server's environment, as the server starts: PYTHONPATH,
        # LD_LIBRARY_PATH and SGLANG_* take effect only from the interpreter's start.
        merged = {**os.environ, **env}
        script = os.path.abspath(__file__)
        os.execve(sys.executable, [sys.executable, script, argv[0], IN_ENV_FLAG], merged)
    if request.get("remove_request"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(argv[0])  # it holds the server's environment (tokens)
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
