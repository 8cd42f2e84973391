"""The stand-in's knobs (``ORCH_STANDIN_*`` environment variables) and the imitated version.

Only the knobs' parsed values are ever printed, never an environment value as such.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

DEFAULT_VERSION = "0.5.23"

# Failure modes, ORCH_STANDIN_FAIL=mode[,mode:SECONDS...]; see README.md for what each prints.
FAIL_MODES = frozenset(
    {
        "config-error",
        "argparse",
        "cuda-oom",
        "crash-after-ready",
        "die-after",
        "hang",
        "ignore-sigterm",
        "orphan",
        "import-error",
        "model-not-found",
        "nccl",
    }
)
_TIMED_MODES = frozenset({"crash-after-ready", "die-after"})

Version = tuple[int, ...]


class KnobError(Exception):
    """A knob the stand-in cannot honour (a harness mistake, not an SGLang behaviour)."""


def parse_version(text: str) -> Version:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", text.strip())
    if match is None:
        raise KnobError(f"ORCH_STANDIN_VERSION is not a version like 0.5.23: {text!r}")
    return tuple(int(part) for part in match.groups() if part is not None)


@dataclass(frozen=True)
class Knobs:
    version_text: str
    version: Version
    load_s: float = 1.0  # total weight-loading time
    shards: int = 11  # safetensors shards shown by the progress bar
    graph_s: float = 0.3  # CUDA-graph capture time
    warmup_s: float = 0.0  # the warm-up request (seconds of JIT on a real GPU)
    drain_s: float = 0.2  # SIGTERM to the drain's first look (SGLang's watchdog ticks every 5 s)
    drain_poll_s: float = 0.2  # between two looks while requests remain (SGLang: 5 s)
    generate_s: float = 0.0  # each generation request takes this long ...
    token_s: float = 0.0  # ... plus this per max_new_tokens it asks for (a long one holds)
    orphan_ttl_s: float = (
        600.0  # the orphan's own safety exit, so a failed sweep leaks no forever-process
    )
    health_timeout_s: float = 2.0  # /health of a hung group (SGLANG_HEALTH_CHECK_TIMEOUT: 20)
    log_ms: bool = False  # SGLANG_LOG_MS=1: milliseconds in the timestamps
    fails: Mapping[str, float | None] = field(default_factory=dict)
    # ORCH_STANDIN_LOADS: /v1/loads figures set by a test, per DP rank (parse_loads)
    loads: tuple[Mapping[str, Any], ...] = ()

    def load_figures(self, rank: int) -> Mapping[str, Any]:
        """What ORCH_STANDIN_LOADS sets for DP rank ``rank``: one object is every rank's."""
        if len(self.loads) == 1:
            return self.loads[0]
        return self.loads[rank] if rank < len(self.loads) else {}

    def failing(self, mode: str) -> bool:
        return mode in self.fails

    def seconds(self, mode: str) -> float:
        value = self.fails.get(mode)
        return 0.0 if value is None else value

    # What the imitated release does differently (docs/sglang-facts.md §1).
    @property
    def dict_style_server_args(self) -> bool:
        return self.version >= (0, 5, 19)

    @property
    def has_launch_command(self) -> bool:
        return self.version >= (0, 5, 20)

    @property
    def has_ready_endpoint(self) -> bool:
        return self.version >= (0, 5, 23)

    @property
    def logs_kill_process_tree(self) -> bool:
        return self.version >= (0, 5, 23)

    @property
    def broadcasts_shutdown(self) -> bool:
        """0.5.14+: SIGTERM's drain ends with a ShutdownReq that reaches every node's schedulers
        (managers/tokenizer_manager.py, absent from 0.5.13.post1)."""
        return self.version >= (0, 5, 14)

    @property
    def worker_ignores_sigterm(self) -> bool:
        """0.5.21+: a node of rank >= 1 logs SIGTERM and waits for rank 0's ShutdownReq."""
        return self.version >= (0, 5, 21)

    @property
    def has_gated_launch(self) -> bool:
        """0.5.19+: ``--gated-launch-port`` (distributed/gated_launch.py; the argument tables from
        0.5.19 on have the flag, earlier ones reject it)."""
        return self.version >= (0, 5, 19)

    @property
    def resolves_in_run_server(self) -> bool:
        """0.5.19+: parsing does not resolve; ``run_server`` calls ``resolve_once()``."""
        return self.version >= (0, 5, 19)


def _float(environ: Mapping[str, str], name: str, default: float) -> float:
    text = environ.get(name)
    if text is None or text == "":
        return default
    try:
        value = float(text)
    except ValueError:
        raise KnobError(f"{name} must be a number of seconds") from None
    if value < 0:
        raise KnobError(f"{name} must not be negative")
    return value


def parse_fails(text: str) -> dict[str, float | None]:
    fails: dict[str, float | None] = {}
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        mode, _, arg = item.partition(":")
        if mode not in FAIL_MODES:
            raise KnobError(f"unknown ORCH_STANDIN_FAIL mode {mode!r}")
        if mode in _TIMED_MODES:
            try:
                fails[mode] = float(arg) if arg else 0.0
            except ValueError:
                raise KnobError(f"ORCH_STANDIN_FAIL mode {mode} takes :SECONDS") from None
        else:
            fails[mode] = None
    return fails


# ORCH_STANDIN_LOADS may set these of each load (SGLang's names: 0.5.23 LoadSnapshot, 0.5.11
# GetLoadsReqOutput), and ``speculative`` ({accept_length, accept_rate}: the section SGLang adds
# once a speculative forward ran)
SETTABLE_LOAD_KEYS = frozenset(
    {
        "num_running_reqs",
        "num_waiting_reqs",
        "num_used_tokens",
        "num_total_tokens",
        "max_total_num_tokens",
        "max_running_requests",
        "token_usage",
        "gen_throughput",
        "cache_hit_rate",
        "utilization",
        "speculative",
    }
)


def parse_loads(text: str) -> tuple[Mapping[str, Any], ...]:
    """ORCH_STANDIN_LOADS: a JSON object (every DP rank's figures) or a list of them (rank by
    rank); only SETTABLE_LOAD_KEYS, numbers (``speculative``: an object of numbers)."""
    if not text.strip():
        return ()
    try:
        parsed = json.loads(text)
    except ValueError as exc:
        raise KnobError(f"ORCH_STANDIN_LOADS is not JSON: {exc}") from None
    ranks = parsed if isinstance(parsed, list) else [parsed]
    for figures in ranks:
        if not isinstance(figures, dict):
            raise KnobError("ORCH_STANDIN_LOADS: each rank's figures are a JSON object")
        unknown = set(figures) - SETTABLE_LOAD_KEYS
        if unknown:
            raise KnobError(
                f"ORCH_STANDIN_LOADS: unknown {sorted(unknown)}; settable: "
                f"{sorted(SETTABLE_LOAD_KEYS)}"
            )
        for key, value in figures.items():
            section = key == "speculative" and isinstance(value, dict)
            numbers = value.values() if section else [value]
            if not all(isinstance(n, (int, float)) and not isinstance(n, bool) for n in numbers):
                raise KnobError(f"ORCH_STANDIN_LOADS: {key} must be a number")
    return tuple(ranks)


def read_knobs(environ: Mapping[str, str] = os.environ) -> Knobs:
    version_text = environ.get("ORCH_STANDIN_VERSION", DEFAULT_VERSION).strip() or DEFAULT_VERSION
    shards_text = environ.get("ORCH_STANDIN_SHARDS", "11")
    try:
        shards = max(1, int(shards_text))
    except ValueError:
        raise KnobError("ORCH_STANDIN_SHARDS must be an integer") from None
    return Knobs(
        version_text=version_text,
        version=parse_version(version_text),
        load_s=_float(environ, "ORCH_STANDIN_LOAD_S", 1.0),
        shards=shards,
        graph_s=_float(environ, "ORCH_STANDIN_GRAPH_S", 0.3),
        warmup_s=_float(environ, "ORCH_STANDIN_WARMUP_S", 0.0),
        drain_s=_float(environ, "ORCH_STANDIN_DRAIN_S", 0.2),
        drain_poll_s=_float(environ, "ORCH_STANDIN_DRAIN_POLL_S", 0.2),
        generate_s=_float(environ, "ORCH_STANDIN_GENERATE_S", 0.0),
        token_s=_float(environ, "ORCH_STANDIN_TOKEN_S", 0.0),
        orphan_ttl_s=_float(environ, "ORCH_STANDIN_ORPHAN_TTL", 600.0),
        health_timeout_s=_float(environ, "ORCH_STANDIN_HEALTH_TIMEOUT_S", 2.0),
        log_ms=environ.get("SGLANG_LOG_MS", "").strip().lower() in {"1", "true", "yes"},
        fails=parse_fails(environ.get("ORCH_STANDIN_FAIL", "")),
        loads=parse_loads(environ.get("ORCH_STANDIN_LOADS", "")),
    )
