"""A throwaway SGLang plugin, installed the way SGLang discovers plugins, and a runner for orch's
planning probe (orchestrator/remote/probe, run as orch runs it: its bundle through the
bootstrap) -- shared by the stand-in tier and the real-SGLang tier, which run the same plugin
against the stand-in and against SGLang.

SGLang's ``load_plugins`` (sglang/srt/plugins/__init__.py) runs every entry point of the group
``sglang.srt.plugins``; a directory holding a module and a ``*.dist-info`` with
``entry_points.txt`` is such a distribution once it is on ``sys.path`` (``PYTHONPATH`` in the
request's environment). The plugin hooks ``ServerArgs.add_cli_args`` with SGLang's
``HookRegistry`` (sglang/srt/plugins/hook_registry.py): it adds ``--orch-plugin-flag`` and makes
4096 the default of ``--chunked-prefill-size``.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from orchestrator.fleet.bootstrap import run_here
from orchestrator.fleet.client import probe_bundle

PLUGIN_NAME = "orch_probe"  # the entry point's name (what SGLANG_PLUGINS lists)
PLUGIN_DIST = "orch-probe-plugin"
PLUGIN_FLAG = "--orch-plugin-flag"
PLUGIN_CHUNKED_PREFILL = 4096
HOOK_TARGET = "sglang.srt.server_args.ServerArgs.add_cli_args"

_MODULE = f'''\
"""A test plugin for SGLang (orch's tests): one more argument, one changed default."""

from sglang.srt.plugins.hook_registry import HookRegistry, HookType


def _with_plugin_args(original, parser):
    original(parser)
    parser.add_argument("{PLUGIN_FLAG}", action="store_true")
    parser.set_defaults(chunked_prefill_size={PLUGIN_CHUNKED_PREFILL})


def register():
    HookRegistry.register("{HOOK_TARGET}", _with_plugin_args, HookType.AROUND)
'''


def write_plugin(root: Path) -> Path:
    """The plugin as an installed distribution under ``root`` (put ``root`` on sys.path)."""
    info = root / "orch_probe_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (root / "orch_probe_plugin.py").write_text(_MODULE)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {PLUGIN_DIST}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        f"[sglang.srt.plugins]\n{PLUGIN_NAME} = orch_probe_plugin:register\n"
    )
    return root


def expected_hook() -> dict[str, Any]:
    """How the probe reports the plugin's hook, from SGLang's registry."""
    return {
        "target": HOOK_TARGET,
        "type": "around",
        "hook": "orch_probe_plugin._with_plugin_args",
        "plugin": PLUGIN_NAME,
        "dist": PLUGIN_DIST,
        "applied": True,
    }


def run_probe(
    python: Path | str,
    directory: Path,
    args: Sequence[str],
    env: Mapping[str, str],
    *,
    simulate_h200: bool = False,
    model_config: tuple[str, Path] | None = None,
) -> dict[str, Any]:
    """One answer of the probe, run with ``python`` as orch runs it (its bundle through the
    bootstrap, kept in ``directory/.orch``; a request file; started again under ``env``)."""
    request = {
        "args": list(args),
        "env": dict(env),
        "simulate_gpu": (
            {"name": "NVIDIA H200", "capability": [9, 0], "memory_mib": 144384}
            if simulate_h200
            else None
        ),
        "model_config": (
            {"path": model_config[0], "config": json.loads(model_config[1].read_text())}
            if model_config
            else None
        ),
    }
    path = directory / f"request-{len(list(directory.glob('request-*')))}.json"
    path.write_text(json.dumps(request))
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ORCH_STANDIN_", "SGLANG_")) and k != "PYTHONPATH"
    }
    done = run_here(
        str(python), probe_bundle(), (str(path),), home=directory / ".orch", env=clean, timeout=600
    )
    assert done.returncode == 0, done.stderr.decode()
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer
