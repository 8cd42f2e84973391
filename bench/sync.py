"""``orch sync --dry-run``: how long it takes to say what is behind the repository, over 1, 4 and
16 deployments of orch's SGLang stand-in (NOT SGLang) on 4 loopback hosts (a real sshd each; 16
is 4 per host), all clean, then with every one pending after a commit changed them all; beside
``orch status`` of the same deployments and the hand-written way (a loop of ``ssh host cat
state.json``, then ``git rev-parse HEAD`` to compare by eye).

``python -m bench.sync`` prints the table and writes its section into bench/results.md (the rest
of the file is kept).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.lab import REPO, Lab, lab_in, median, write_section

TITLE = "## Sync dry run"
HOSTS = 4
SIZES = (1, 4, 16)
RUNS = 5


def _git(root: Path, *argv: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.name=bench", "-c", "user.email=bench@example.net", *argv],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout.strip()


def _orch_process(lab: Lab, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator", "--profiles", str(lab.profiles), *argv],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=600,
        check=False,
    )


def _timed(work: Callable[[], object], runs: int = RUNS) -> float:
    walls = []
    for _ in range(runs):
        started = time.monotonic()
        work()
        walls.append(time.monotonic() - started)
    return median(walls)


def _names(size: int) -> list[str]:
    return [f"svc{index:02d}" for index in range(size)]


def measure(lab: Lab, hosts: Sequence[str]) -> list[tuple[str, int, float]]:
    names = _names(max(SIZES))
    for index, name in enumerate(names):
        lab.profile(name, hosts[index % len(hosts)])
    _git(lab.root, "init", "-q", "-b", "main")
    _git(lab.root, "add", "profiles")
    _git(lab.root, "commit", "-q", "-m", "A")

    def up(name: str) -> None:
        done = _orch_process(lab, "up", name)
        if done.returncode != 0:
            raise RuntimeError(f"orch up {name}: {done.stderr or done.stdout}")

    with ThreadPoolExecutor(max_workers=HOSTS) as pool:
        list(pool.map(up, names))

    figures: list[tuple[str, int, float]] = []

    def dry_run(size: int, expect: int) -> Callable[[], object]:
        selected = ["--all"] if size == len(names) else _names(size)

        def run() -> None:
            done = _orch_process(lab, "sync", "--dry-run", "--json", *selected)
            if done.returncode != expect:
                raise RuntimeError(f"orch sync --dry-run: {done.returncode}: {done.stderr}")

        return run

    def hand_written(size: int) -> Callable[[], object]:
        def run() -> None:
            for index, name in enumerate(_names(size)):
                host = hosts[index % len(hosts)]
                state = f"{lab.hosts[host]['workdir']}/{name}/state.json"
                subprocess.run([*lab.ssh_argv(host), f"cat {state}"], capture_output=True)
            _git(lab.root, "rev-parse", "HEAD")

        return run

    def status(size: int) -> Callable[[], object]:
        return lambda: _orch_process(lab, "status", "--json", *_names(size))

    for size in SIZES:
        figures.append(("orch sync --dry-run, all clean", size, _timed(dry_run(size, 0))))
        figures.append(("orch status (no sync state)", size, _timed(status(size))))
        figures.append(("ssh cat state.json loop + git", size, _timed(hand_written(size))))
    for name in names:  # one commit changes every profile: each one is pending (a restart)
        path = lab.profiles / f"{name}.yaml"
        path.write_text(
            path.read_text().replace(
                "skip_server_warmup: true", "context_length: 4096\n  skip_server_warmup: true"
            )
        )
    _git(lab.root, "commit", "-q", "-am", "B")
    for size in SIZES:
        figures.append(("orch sync --dry-run, all pending", size, _timed(dry_run(size, 2))))
    return figures


def section(figures: Sequence[tuple[str, int, float]]) -> str:
    rows: dict[str, dict[int, float]] = {}
    for figure, size, wall in figures:
        rows.setdefault(figure, {})[size] = wall
    lines = [
        TITLE,
        "",
        "`orch sync --dry-run --json` (a process, as a user runs it) over "
        f"{', '.join(map(str, SIZES))} deployments of the stand-in on {HOSTS} loopback hosts (a "
        "real sshd each; 16 is 4 a host), "
        f"median of {RUNS}: all clean (what runs is HEAD's launch), then after one commit changed "
        "every profile (each pending: one `orch diff` of the running commit against HEAD, read "
        "from git, nothing checked out). Beside it `orch status` of the same deployments (no sync "
        "state) and the hand-written way: a loop of `ssh host cat state.json` and `git rev-parse "
        "HEAD` (which still leaves the comparison to the reader). orch asks each host once (`agent "
        "survey`, nothing written there), the hosts in parallel.",
        "",
        "| figure | " + " | ".join(f"{size} deployment(s)" for size in SIZES) + " |",
        "|---|" + "---|" * len(SIZES),
    ]
    for figure, by_size in rows.items():
        cells = [f"{by_size[size] * 1000:.0f} ms" if size in by_size else "" for size in SIZES]
        lines.append(f"| {figure} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "`orch status` asks each deployment with a command of its own (4 a host at 16, one "
        "after another on each host's connection); the dry run asks each host once, so it grows "
        "with the hosts, not the deployments. The pending case adds one review of the running "
        "commit against HEAD. Measured on this 2-core machine; every sshd session, agent and "
        "stand-in server runs on the same 2 CPUs as orch.",
        "",
    ]
    return "\n".join(lines)


def run() -> int:
    with (
        tempfile.TemporaryDirectory(prefix="orch-bench-sync-") as scratch,
        lab_in(Path(scratch)) as lab,
    ):
        hosts = lab.add_hosts(HOSTS)
        figures = measure(lab, hosts)
    text = section(figures)
    write_section(TITLE, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(run())
