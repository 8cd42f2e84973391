"""SGLang's plugins (0.5.11+), loaded as SGLang's entry points load them before they parse: the
answer names those loaded and the hooks they registered."""

from __future__ import annotations

import importlib
import sys
from typing import Any

from orchestrator.remote.probe.values import jsonable


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
