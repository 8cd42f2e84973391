"""``sglang.srt.plugins`` of orch's SGLang stand-in (NOT SGLang): SGLang's plugin loading, which
``python -m sglang.launch_server`` and ``sglang serve`` run before they parse their arguments
(sglang/launch_server.py's ``__main__`` block and sglang/cli/serve.py's ``serve``, 0.5.11 on).

As SGLang's ``load_plugins`` (sglang/srt/plugins/__init__.py): general plugins are the entry
points of the group ``sglang.srt.plugins``; each is loaded and called once per process, a failure
is logged and skipped; ``SGLANG_PLUGINS`` (comma-separated names) restricts which are loaded; with
``SGLANG_PLATFORM`` set, general plugins of distributions that provide another platform plugin
(group ``sglang.srt.platforms``) are skipped; then ``HookRegistry.apply_hooks()`` patches what they
registered. SGLang before 0.5.11 has no such module, nor has the stand-in imitating one.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Any

from sglang._standin import knobs as knobs_module
from sglang.srt.plugins.hook_registry import HookRegistry, HookSource, _current_plugin_source

if knobs_module.read_knobs().version < (0, 5, 11):
    raise ModuleNotFoundError(f"No module named {__name__!r}", name=__name__)

logger = logging.getLogger(__name__)

PLATFORM_PLUGINS_GROUP = "sglang.srt.platforms"
GENERAL_PLUGINS_GROUP = "sglang.srt.plugins"

_plugins_loaded = False


def load_plugins_by_group(
    group: str, excluded_dists: set[str] | None = None
) -> dict[str, tuple[Callable[[], Any], str | None]]:
    """Load the entry points of ``group``: ``{name: (callable, distribution name)}``."""
    allowed = {name.strip() for name in os.environ.get("SGLANG_PLUGINS", "").split(",")}
    allowed.discard("")
    discovered = entry_points(group=group)
    if len(discovered) == 0:
        logger.debug("No plugins found for group %s.", group)
        return {}
    logger.info("Available plugins for group %s:", group)
    for ep in discovered:
        logger.info("  - %s -> %s", ep.name, ep.value)
    plugins: dict[str, tuple[Callable[[], Any], str | None]] = {}
    for ep in discovered:
        if allowed and ep.name not in allowed:
            logger.info("Skipping plugin %s (not in SGLANG_PLUGINS)", ep.name)
            continue
        dist_name = ep.dist.name if ep.dist else None
        if excluded_dists and dist_name in excluded_dists:
            logger.info(
                "Skipping plugin %s (dist %s excluded by SGLANG_PLATFORM)", ep.name, dist_name
            )
            continue
        try:
            plugins[ep.name] = (ep.load(), dist_name)
            logger.info("Loaded plugin %s from group %s", ep.name, group)
        except Exception:
            logger.exception("Failed to load plugin %s from group %s", ep.name, group)
    return plugins


def _get_excluded_dists() -> set[str]:
    selected = os.environ.get("SGLANG_PLATFORM", "")
    if not selected:
        return set()
    platform_eps = entry_points(group=PLATFORM_PLUGINS_GROUP)
    return {ep.dist.name for ep in platform_eps if ep.dist and ep.name != selected}


def load_plugins() -> None:
    """Load and run every general plugin, then apply the hooks they registered (once)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    plugins = load_plugins_by_group(GENERAL_PLUGINS_GROUP, excluded_dists=_get_excluded_dists())
    for name, (func, dist_name) in plugins.items():
        token = _current_plugin_source.set(HookSource(plugin_name=name, dist_name=dist_name))
        try:
            func()
            logger.info("Executed general plugin: %s", name)
        except Exception:
            logger.exception("Failed to execute general plugin: %s", name)
        finally:
            _current_plugin_source.reset(token)
    HookRegistry.apply_hooks()
