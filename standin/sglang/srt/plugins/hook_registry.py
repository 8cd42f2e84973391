"""``sglang.srt.plugins.hook_registry`` of orch's SGLang stand-in (NOT SGLang): the registry
through which SGLang plugins patch SGLang (sglang/srt/plugins/hook_registry.py, 0.5.11 on), so a
plugin written for SGLang runs unchanged on the stand-in.

A hook is registered on a dotted target (``sglang.srt.server_args.ServerArgs.add_cli_args``) as
BEFORE (may return new ``(args, kwargs)``), AFTER (may return a new result), AROUND (gets the
original first) or REPLACE (a function, or a class for a class target); ``apply_hooks()`` patches
each target once, class replacements first, keeps a classmethod or staticmethod one, and rebinds
``from X import Y`` copies of the original in loaded modules. Each hook records the plugin that
registered it (``HookSource``), which ``load_plugins`` sets while the plugin runs.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import pkgutil
import sys
import types
from collections import defaultdict
from collections.abc import Callable
from enum import Enum
from typing import Any, NamedTuple

logger = logging.getLogger(__name__)


class HookSource(NamedTuple):
    plugin_name: str  # the entry point's name
    dist_name: str | None  # its distribution's name


_current_plugin_source: contextvars.ContextVar[HookSource | None] = contextvars.ContextVar(
    "_current_plugin_source", default=None
)


def _format_source(source: HookSource | None) -> str:
    if source is None:
        return "unknown"
    if source.dist_name:
        return f"plugin={source.plugin_name}, dist={source.dist_name}"
    return f"plugin={source.plugin_name}"


class HookType(Enum):
    BEFORE = "before"
    AFTER = "after"
    AROUND = "around"
    REPLACE = "replace"


Hook = tuple[HookType, Callable[..., Any], HookSource | None]


class HookRegistry:
    # SGLang's registry is class-level state: one per process
    _hooks: dict[str, list[Hook]] = defaultdict(list)  # noqa: RUF012
    _patched: set[str] = set()  # noqa: RUF012

    @classmethod
    def register(
        cls,
        target: str,
        hook: Callable[..., Any],
        hook_type: HookType = HookType.AFTER,
        *,
        source: HookSource | None = None,
    ) -> None:
        if isinstance(hook, type) and hook_type != HookType.REPLACE:
            raise TypeError(
                f"Class {hook.__name__} can only be used with HookType.REPLACE, "
                f"got HookType.{hook_type.name}. Use a function for BEFORE/AFTER/AROUND hooks."
            )
        resolved_source = source or _current_plugin_source.get()
        cls._hooks[target].append((hook_type, hook, resolved_source))
        logger.debug(
            "Registered %s hook on %s [%s]",
            hook_type.value,
            target,
            _format_source(resolved_source),
        )

    @classmethod
    def apply_hooks(cls) -> None:
        for target, hooks in sorted(cls._hooks.items(), key=cls._target_sort_key):
            if target in cls._patched:
                continue
            try:
                cls._apply_target(target, hooks)
                cls._patched.add(target)
            except Exception:
                logger.exception("Failed to apply hooks to %s", target)

    @staticmethod
    def _target_sort_key(item: tuple[str, list[Hook]]) -> tuple[int, str]:
        target, hooks = item
        replaces_class = any(isinstance(h, type) and t == HookType.REPLACE for t, h, _ in hooks)
        return (0 if replaces_class else 1, target)

    @classmethod
    def _apply_target(cls, target: str, hooks: list[Hook]) -> None:
        obj_path, _, attr_name = target.rpartition(".")
        if not obj_path:
            raise ValueError(f"Invalid target path (need at least module.attr): {target}")
        obj = pkgutil.resolve_name(obj_path)
        original = getattr(obj, attr_name)
        decorator: Callable[[Any], Any] | None = None  # classmethod / staticmethod, kept
        if isinstance(obj, type):
            raw = obj.__dict__.get(attr_name)
            if isinstance(raw, classmethod | staticmethod):
                decorator = type(raw)
                original = raw.__func__
        if isinstance(original, type) and any(t != HookType.REPLACE for t, _, _ in hooks):
            raise TypeError(f"Target '{target}' is a class. Only HookType.REPLACE is allowed.")
        wrapped = original
        for hook_type, hook, _source in sorted(hooks, key=lambda h: h[0] != HookType.REPLACE):
            if isinstance(hook, type) and hook_type == HookType.REPLACE:
                wrapped = hook
            else:
                wrapped = _wrap_fn(wrapped, hook, hook_type)
        setattr(obj, attr_name, wrapped if decorator is None else decorator(wrapped))
        if wrapped is not original:
            _propagate_patch(original, wrapped, obj)
        sources = sorted({_format_source(source) for _, _, source in hooks})
        logger.info("Applied %d hook(s) to %s (from: %s)", len(hooks), target, ", ".join(sources))

    @classmethod
    def reset(cls) -> None:
        cls._hooks.clear()
        cls._patched.clear()


def _propagate_patch(original: object, wrapped: object, source_module: object) -> None:
    """Rebind ``from source_module import name`` copies of ``original`` in loaded modules."""
    for module in list(sys.modules.values()):
        if module is source_module or not isinstance(module, types.ModuleType):
            continue
        for name, value in list(vars(module).items()):
            if value is original:
                try:
                    setattr(module, name, wrapped)
                except (AttributeError, TypeError):
                    continue


def _wrap_fn(
    original_fn: Callable[..., Any], hook: Callable[..., Any], hook_type: HookType
) -> Callable[..., Any]:
    if hook_type == HookType.REPLACE:

        def replaced(*args: Any, **kwargs: Any) -> Any:
            return hook(*args, **kwargs)

        wrapper = replaced
    elif hook_type == HookType.BEFORE:

        def before(*args: Any, **kwargs: Any) -> Any:
            result = hook(*args, **kwargs)
            if result is not None:
                args, kwargs = result
            return original_fn(*args, **kwargs)

        wrapper = before
    elif hook_type == HookType.AFTER:

        def after(*args: Any, **kwargs: Any) -> Any:
            result = original_fn(*args, **kwargs)
            modified = hook(result, *args, **kwargs)
            return modified if modified is not None else result

        wrapper = after
    else:

        def around(*args: Any, **kwargs: Any) -> Any:
            return hook(original_fn, *args, **kwargs)

        wrapper = around
    functools.update_wrapper(wrapper, original_fn)
    return wrapper


def plugin_hook(
    target: str, type: HookType = HookType.AFTER
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function or class as a hook on ``target``."""

    def decorator(hook: Callable[..., Any]) -> Callable[..., Any]:
        HookRegistry.register(target, hook, type)
        return hook

    return decorator
