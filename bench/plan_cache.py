"""The plan cache: ``orch plan`` planned afresh (SGLang imported, its parsing and resolution run)
beside the same plan repeated (answered from the cache, SGLang not imported), with a real SGLang
CPU venv: locally (``--local-sglang``) and through the host path (the probe pushed into the
deployment's workdir and run there, this machine as the host over the local transport; no sshd
here, so no SSH round trip is in it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import yaml

from bench.lab import MODEL, REPO, Row, Section, median, ms

VERSION = "0.5.11"
VENV = Path.home() / ".cache" / "orch" / "sglang-venvs" / VERSION / "bin" / "python"


def _profile(root: Path, host: str, model: str) -> None:
    (root / "seed.yaml").write_text(
        textwrap.dedent(f"""\
            sglang: "{VERSION}"
            host: {host}
            model: {{path: {model}}}
            gpu: {{type: H200, devices: [0]}}
            port: 30000
            spec_decode: {{algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}}
            env: {{SGLANG_ENABLE_SPEC_V2: "1"}}
            args:
              mamba_scheduler_strategy: extra_buffer
              context_length: 8192
              trust_remote_code: true
              max_mamba_cache_size: 24
              mamba_full_memory_ratio: 0.4
              mem_fraction_static: 0.92
        """)
    )


def _timed(argv: list[str], env: dict[str, str], want_hit: bool) -> tuple[float, float | None]:
    """One ``orch plan --json`` process: its wall time and the probe's look-up time."""
    started = time.monotonic()
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, env=env, check=False)
    took = time.monotonic() - started
    cache = json.loads(done.stdout)["cache"]
    assert cache["hit"] is want_hit, (cache, done.stderr[-2000:])
    return took, cache.get("lookup_s")


def _measure(
    argv: list[str], env: dict[str, str], runs: int
) -> tuple[list[float], list[float], list[float]]:
    _timed(argv, env, want_hit=False)  # the bundle written, the bytecode compiled, one entry
    fresh = [_timed([*argv, "--no-cache"], env, want_hit=False)[0] for _ in range(runs)]
    repeated, lookups = [], []
    for _ in range(runs):
        took, lookup = _timed(argv, env, want_hit=True)
        repeated.append(took)
        if lookup is not None:
            lookups.append(lookup)
    return fresh, repeated, lookups


def plan_cache(runs: int) -> Section:
    if not VENV.exists():
        return Section(
            "Plan cache",
            f"skipped: no SGLang {VERSION} venv at {VENV}",
            [Row("plan cache", "-", "-")],
        )
    rows: list[Row] = []
    # as installed: bytecode compiled (see cli_startup)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    with tempfile.TemporaryDirectory(prefix="orch-bench-plan-cache-") as scratch:
        root = Path(scratch)
        env["XDG_CACHE_HOME"] = str(root / "xdg")
        orch = [sys.executable, "-m", "orchestrator", "--profiles"]

        local = root / "local"
        local.mkdir()
        (local / "hosts.yaml").write_text("hosts: {}\n")
        _profile(local, "local", "/models/Qwen3.6-27B")
        argv = [*orch, str(local), "plan", "seed", "--json", "--local-sglang", str(VENV)]
        argv += ["--model-config", str(MODEL / "config.json")]
        cases = [("--local-sglang", argv)]

        host = root / "host"
        host.mkdir()
        inventory = {"hosts": {"local": {"python": str(VENV), "workdir": str(root / "workdir")}}}
        (host / "hosts.yaml").write_text(yaml.safe_dump(inventory))
        _profile(host, "local", str(MODEL))
        cases.append(("on the host", [*orch, str(host), "plan", "seed", "--json"]))

        for label, case in cases:
            fresh, repeated, lookups = _measure(case, env, runs)
            first, again = median(fresh), median(repeated)
            rows += [
                Row("plan cache", f"{label}: first plan (SGLang imported)", ms(first)),
                Row("plan cache", f"{label}: repeated plan (from the cache)", ms(again)),
                Row(
                    "plan cache",
                    f"{label}: repeated / first",
                    f"{again / first:.1%}",
                    "<= 25 %",
                ),
            ]
            if lookups:
                rows.append(
                    Row(
                        "plan cache",
                        f"{label}: the probe's key and look-up",
                        ms(median(lookups)),
                        "<= 100 ms",
                    )
                )
    return Section(
        "Plan cache",
        f"`orch plan --json` processes (`python -m orchestrator`, bytecode compiled) of the "
        f"incident's profile (Qwen3.6-27B + MTP on an H200, simulated for --local-sglang) with "
        f"the real SGLang {VERSION} CPU venv: planned afresh (`--no-cache`: SGLang imported, "
        "parsed and resolved twice) beside the same plan repeated (the probe's cache: SGLang "
        "not imported). `--local-sglang` runs the probe bundle with the venv's python; 'on the "
        "host' is the host path (the bundle in the deployment's workdir, the cache in its "
        "`.orch/plan-cache/seed`), this machine as the host over orch's local transport: no "
        "SSH round trip is in it (no sshd on this machine); with no GPU here, SGLang's answer "
        "there is its refusal after the import (`RuntimeError: No accelerator`), which is kept "
        "as any answer is (the NVML reading that failed is in the key). The first run of each "
        "case, which "
        f"writes the bundle, is not counted. Median of {runs}.",
        rows,
    )
