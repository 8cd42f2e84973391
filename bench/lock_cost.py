"""What the operation lock (issue 31, ``agent hold``) costs ``orch up``: the same up to READY
(no plan) over a real sshd behind bench/relay.py, without a lock, with the hold taken before
(``commands.locking.holding`` around it), and as ``orch up`` takes it (``pending_hold``: granted
beside up's first read), alternated; and the hold with its release alone on an open
connection. Figures, not assertions: ``python -m bench.lock_cost [--delay-ms 0 25] [--runs 5]``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from bench.lab import Lab, lab_in, median, ms
from bench.latency import _measured
from bench.relay import Counts
from orchestrator.commands.context import Context, UpOptions
from orchestrator.commands.events import Outcome
from orchestrator.commands.locking import deployments_of, holding, pending_hold
from orchestrator.commands.up import up
from orchestrator.profile.store import ProfileStore


def _context(lab: Lab) -> Context:
    return Context(
        store=ProfileStore(lab.profiles), environ=os.environ, local_python=sys.executable
    )


def _up(lab: Lab, host: str, name: str, mode: str) -> tuple[float, Counts]:
    ctx = _context(lab)

    def work() -> None:
        launch = ctx.launch(name)
        if mode == "before":
            with holding(ctx, deployments_of(launch), "orch up", wait_s=0):
                events = list(up(ctx, launch, UpOptions(check_plan=False)))
        elif mode == "beside":
            with pending_hold(ctx, launch.profile, "orch up", wait_s=0) as lock:
                events = list(up(ctx, launch, UpOptions(check_plan=False, lock=lock)))
        else:
            events = list(up(ctx, launch, UpOptions(check_plan=False)))
        last = events[-1]
        assert isinstance(last, Outcome), last
        assert last.ok, last.summary

    try:
        return _measured(lab, [host], work)
    finally:
        ctx.close()


def _hold_alone(lab: Lab, host: str, name: str) -> tuple[float, Counts]:
    """The hold and its release on a connection already open (its first command done)."""
    ctx = _context(lab)
    try:
        launch = ctx.launch(name)
        ctx.transport(launch.profile.host).home()  # the connection open beforehand

        def work() -> None:
            with holding(ctx, deployments_of(launch), "orch up", wait_s=0):
                pass

        work()  # the agent pushed, compiled code cached
        return _measured(lab, [host], work)
    finally:
        ctx.close()


def _row(label: str, samples: list[tuple[float, Counts]]) -> str:
    walls = [wall for wall, _ in samples]
    turns = sorted(counts.turns for _, counts in samples)[len(samples) // 2]
    return f"| {label} | {ms(median(walls))} · {turns} RT |"


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.lock_cost", description=__doc__)
    parser.add_argument("--delay-ms", type=float, nargs="*", default=[0.0, 25.0])
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    for delay in args.delay_ms:
        with (
            tempfile.TemporaryDirectory(prefix="orch-lock-bench-") as root,
            lab_in(Path(root)) as lab,
        ):
            (host,) = lab.add_hosts(1, delay_s=delay / 1000)
            modes = ("none", "before", "beside")
            rows: dict[str, list[tuple[float, Counts]]] = {mode: [] for mode in (*modes, "hold")}
            warm = lab.profile("warm", host)
            _up(lab, host, warm, "none")  # the agent pushed once, for all
            lab.orch("down", warm)
            for run in range(args.runs):
                for mode in modes:
                    name = lab.profile(f"up-{run}-{mode}", host)
                    rows[mode].append(_up(lab, host, name, mode))
                    lab.orch("down", name, "--lock-wait", "0")
                rows["hold"].append(_hold_alone(lab, host, warm))
            print(f"\n{delay:g} ms each way, median of {args.runs}")
            print(_row("orch up to READY (no plan), no lock", rows["none"]))
            print(_row("orch up to READY (no plan), the hold taken before", rows["before"]))
            print(_row("orch up to READY (no plan), the hold beside its read", rows["beside"]))
            print(_row("hold + release alone, connection open", rows["hold"]))
            walls = {key: median([w for w, _ in samples]) for key, samples in rows.items()}
            for mode in ("before", "beside"):
                print(f"| {mode} - none, medians | {ms(walls[mode] - walls['none'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
