"""The latency benchmark: orch's commands over a link like a rented GPU box's (each direction
delayed by bench/relay.py), beside the same work done by a careful hand-written ``ssh`` sequence
and by parallel OpenSSH clients. Per delay: wall time, SSH connections, round trips (turns the
relay counted), bytes. Figures, not assertions."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import psutil
import yaml

from bench.lab import (
    MODEL,
    REPO,
    STANDIN,
    Lab,
    Row,
    Section,
    kill_by_token,
    lab_in,
    median,
    ms,
    orch_death_to_verdict,
)
from bench.relay import Counts
from orchestrator.commands.context import Context, UpOptions
from orchestrator.commands.events import Outcome
from orchestrator.commands.up import up
from orchestrator.profile.store import ProfileStore
from orchestrator.transport import mux
from orchestrator.transport.ssh import SSHTransport
from tests.ssh.sshd import free_port

READY_LINE = "fired up and ready"


def _measured(lab: Lab, hosts: Sequence[str], work: Callable[[], object]) -> tuple[float, Counts]:
    """Wall time of ``work`` and what the relays in front of ``hosts`` saw meanwhile."""
    before = [lab.relays[h].snapshot() for h in hosts]
    started = time.monotonic()
    work()
    wall = time.monotonic() - started
    seen = Counts()
    for host, first in zip(hosts, before, strict=True):
        delta = lab.relays[host].snapshot().minus(first)
        seen = Counts(
            seen.connections + delta.connections,
            seen.bytes_up + delta.bytes_up,
            seen.bytes_down + delta.bytes_down,
            seen.turns + delta.turns,
        )
    return wall, seen


def _shown(wall: float, counts: Counts, extra: str = "") -> str:
    kib = (counts.bytes_up + counts.bytes_down) / 1024
    return f"{ms(wall)} · {counts.turns} RT · {counts.connections} conn · {kib:,.0f} KiB" + (
        f" · {extra}" if extra else ""
    )


def _median_of(samples: list[tuple[float, Counts]]) -> tuple[float, Counts]:
    wall = median([w for w, _ in samples])
    turns = sorted(c.turns for _, c in samples)[len(samples) // 2]
    middle = next(c for _, c in samples if c.turns == turns)
    return wall, middle


def _orch(lab: Lab, *argv: str) -> Callable[[], object]:
    def run() -> None:
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator", "--profiles", str(lab.profiles), *argv],
            capture_output=True,
            text=True,
            cwd=REPO,
            timeout=300,
            check=False,
        )
        if done.returncode not in (0, 1):
            raise RuntimeError(f"orch {' '.join(argv)}: {done.stdout}{done.stderr}")

    return run


def _ssh(lab: Lab, host: str, command: str, stdin: str | None = None) -> Callable[[], object]:
    def run() -> None:
        done = subprocess.run(
            [*lab.ssh_argv(host), command],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=300,
        )
        if done.returncode != 0:
            raise RuntimeError(f"ssh {host} {command!r}: exit {done.returncode}: {done.stderr}")

    return run


@contextlib.contextmanager
def _persisting(inventory: Path, hosts: Sequence[str]) -> Iterator[None]:
    """``persist_s`` on these hosts of this inventory, their kept connections' sockets in a
    scratch directory; afterwards the inventory as it was and those connections' servers gone."""
    plain = inventory.read_text()
    document = yaml.safe_load(plain)
    for host in hosts:
        document["hosts"][host]["persist_s"] = 300
    inventory.write_text(yaml.safe_dump(document))
    with tempfile.TemporaryDirectory(prefix="orch-bench-mux-") as sockets:
        os.environ[mux.MUX_DIR_ENV] = sockets
        try:
            yield
        finally:
            inventory.write_text(plain)
            for process in psutil.process_iter(["cmdline"]):
                with contextlib.suppress(psutil.Error):
                    if "orchestrator.transport.mux" in (process.info["cmdline"] or []) and (
                        process.environ().get(mux.MUX_DIR_ENV) == sockets
                    ):
                        process.kill()
            del os.environ[mux.MUX_DIR_ENV]


def _kept_connection(lab: Lab, host: str, name: str, runs: int, bench: str) -> list[Row]:
    """The same commands with ``persist_s`` on the host: the first starts the kept connection,
    the later ones reach the host through it (transport/mux/)."""
    rows = []
    with _persisting(lab.profiles / "hosts.yaml", [host]):
        first = _measured(lab, [host], _orch(lab, "status", name))
        rows.append(
            Row(bench, "orch status, persist_s: the first (starts the connection)", _shown(*first))
        )
        for figure, argv in (
            ("status", ("status", name)),
            ("logs -n 100", ("logs", name, "-n", "100")),
            ("diff-effective", ("diff-effective", name)),
        ):
            kept = _median_of([_measured(lab, [host], _orch(lab, *argv)) for _ in range(runs)])
            rows.append(Row(bench, f"orch {figure}, persist_s: a later command", _shown(*kept)))
    return rows


def latency(delays: Sequence[float], runs: int, many: Sequence[int]) -> list[Section]:
    sections = []
    for delay in delays:
        with (
            tempfile.TemporaryDirectory(prefix="orch-bench-latency-") as scratch,
            lab_in(Path(scratch)) as lab,
        ):
            sections.append(_one_delay(lab, delay, runs, many))
    return sections


def _one_delay(lab: Lab, delay: float, runs: int, many: Sequence[int]) -> Section:
    hosts = lab.add_hosts(max(many), delay_s=delay)
    host = hosts[0]
    rows: list[Row] = []
    label = f"{delay * 1000:.0f} ms"
    bench = f"latency {label}"

    # a handshake alone: what a new connection costs on this link
    handshake = _median_of([_measured(lab, [host], _ssh(lab, host, "true")) for _ in range(runs)])
    rows.append(Row(bench, "ssh host true (OpenSSH: handshake + one command)", _shown(*handshake)))

    # -- up: orch in-process (its transport's counters), to READY, minus the server's own time
    samples, overheads, transport_counts = [], [], []
    name = ""
    for run in range(runs):
        name = lab.profile(f"ready-{run}", host)
        ctx = Context(
            store=ProfileStore(lab.profiles), environ=os.environ, local_python=sys.executable
        )
        outcome: list[Outcome] = []

        def start(ctx: Context = ctx, name: str = name, outcome: list[Outcome] = outcome) -> None:
            events = list(up(ctx, ctx.launch(name), UpOptions(check_plan=False)))
            last = events[-1]
            assert isinstance(last, Outcome), last
            assert last.ok, last.summary
            outcome.append(last)

        wall, counts = _measured(lab, [host], start)
        state = outcome[0].state
        own = (state.ready_at or 0) - (state.started_at or 0)
        transport = ctx._transports[host]
        assert isinstance(transport, SSHTransport)
        transport_counts.append(
            (transport.connections_opened, transport.commands_run, transport.file_operations)
        )
        ctx.close()
        samples.append((wall, counts))
        overheads.append(wall - own)
        if run + 1 < runs:
            _orch(lab, "down", name)()
    wall, counts = _median_of(samples)
    connections, commands, files = transport_counts[len(transport_counts) // 2]
    rows.append(Row(bench, "orch up (to READY, no plan)", _shown(wall, counts)))
    rows.append(Row(bench, "orch up minus the server's own time to ready", ms(median(overheads))))
    rows.append(
        Row(
            bench,
            "orch up: connections / commands / SFTP operations",
            f"{connections} / {commands} / {files}",
        )
    )

    # the careful hand-written way: one ssh that writes the script and starts it, one that waits
    hand = []
    for run in range(runs):
        port = str(free_port())
        workdir = Path(lab.hosts[host]["workdir"]) / f"hand-{run}"
        script = (
            f"PYTHONPATH={STANDIN} exec {sys.executable} -m sglang.launch_server --model-path "
            f"{MODEL} --port {port} --host 127.0.0.1 --skip-server-warmup\n"
        )
        launch = _ssh(
            lab,
            host,
            f"mkdir -p {workdir} && cat > {workdir}/launch.sh && cd {workdir} && "
            "{ nohup bash launch.sh >> server.log 2>&1 < /dev/null & }",
            stdin=script,
        )
        wait = _ssh(
            lab,
            host,
            f"until grep -q '{READY_LINE}' {workdir}/server.log 2>/dev/null; do sleep 0.05; done",
        )

        def both(launch: Callable[[], object] = launch, wait: Callable[[], object] = wait) -> None:
            launch()
            wait()

        hand.append(_measured(lab, [host], both))
        kill_by_token(port)
    careful = "hand-written: ssh 'mkdir && cat > f && { nohup ... & }'; ssh 'until grep'"
    rows.append(Row(bench, careful, _shown(*_median_of(hand))))

    # -- the commands a user runs next, on the READY server: orch beside the hand-written way
    recorded = lab.state(host, name)
    assert recorded is not None
    workdir = Path(lab.hosts[host]["workdir"]) / name
    for figure, orch_argv, by_hand in (
        ("status", ("status", name), f"cat {workdir}/state.json"),
        ("logs -n 100", ("logs", name, "-n", "100"), f"tail -n 100 {recorded['log']}"),
        ("diff-effective", ("diff-effective", name), f"cat /proc/{recorded['pid']}/cmdline"),
    ):
        ours = _median_of([_measured(lab, [host], _orch(lab, *orch_argv)) for _ in range(runs)])
        theirs = _median_of([_measured(lab, [host], _ssh(lab, host, by_hand)) for _ in range(runs)])
        rows.append(Row(bench, f"orch {figure}", _shown(*ours)))
        rows.append(Row(bench, f"hand-written: ssh '{by_hand.split()[0]} ...'", _shown(*theirs)))
    # SGLang's own parsing and resolution on the host, no server (no hand-written equivalent)
    planned = _median_of([_measured(lab, [host], _orch(lab, "plan", name)) for _ in range(runs)])
    rows.append(Row(bench, "orch plan (SGLang's resolution on the host)", _shown(*planned)))
    rows += _kept_connection(lab, host, name, runs, bench)
    down = _measured(lab, [host], _orch(lab, "down", name))
    rows.append(Row(bench, "orch down", _shown(*down)))

    # -- death -> verdict: the agent pushes the event on the open channel
    seen = [orch_death_to_verdict(lab, host, f"dies-{run}", 2.0) for run in range(runs)]
    delays = [d for d in seen if d is not None]
    rows.append(
        Row(
            bench,
            "orch up: death -> verdict printed",
            ms(median([d.printed for d in delays])) if delays else "n/a",
            f"<= {ms(delay + 0.05)} (one way + 50 ms)",
        )
    )
    rows.append(
        Row(
            bench,
            "orch up: death -> orch exited",
            ms(median([d.exited for d in delays])) if delays else "n/a",
        )
    )

    # -- status over many hosts, beside parallel OpenSSH doing the agent's status on each
    walls, kept_walls = {}, {}
    for size in many:
        directory = lab.root / f"profiles-{size}"
        directory.mkdir()
        (directory / "hosts.yaml").write_text((lab.profiles / "hosts.yaml").read_text())
        for index, each in enumerate(hosts[:size]):
            lab.profile(f"svc{index:02d}", each, directory=directory)

        def status(directory: Path = directory) -> None:
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "orchestrator",
                    "--profiles",
                    str(directory),
                    "status",
                    "--all",
                    "--json",
                ],
                capture_output=True,
                cwd=REPO,
                timeout=300,
                check=False,
            )

        status()  # the agent is pushed once per host
        ours = _median_of([_measured(lab, hosts[:size], status) for _ in range(runs)])
        walls[size] = ours[0]

        def parallel(size: int = size) -> None:
            agent = f"{sys.executable} -m orchestrator.remote.agent"  # its package's __main__
            clients = [
                subprocess.Popen(
                    [
                        *lab.ssh_argv(h),
                        f"{agent} status --dir {lab.hosts[h]['workdir']}/svc{index:02d}",
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                for index, h in enumerate(hosts[:size])
            ]
            for client in clients:
                client.wait(timeout=300)

        theirs = _median_of([_measured(lab, hosts[:size], parallel) for _ in range(runs)])
        rows.append(Row(bench, f"orch status --all, {size} host(s)", _shown(*ours)))
        rows.append(
            Row(
                bench,
                f"parallel OpenSSH running the agent's status, {size} host(s)",
                _shown(*theirs),
            )
        )
        with _persisting(directory / "hosts.yaml", hosts[:size]):
            status()  # starts each host's kept connection
            kept = _median_of([_measured(lab, hosts[:size], status) for _ in range(runs)])
        kept_walls[size] = kept[0]
        rows.append(
            Row(
                bench,
                f"orch status --all, {size} host(s), persist_s: a later command",
                _shown(*kept),
            )
        )
    big, small = max(many), min(many)
    rows.append(
        Row(
            bench,
            f"orch status --all {big}/{small} ratio",
            f"{walls[big] / walls[small]:.2f}",
            "<= 1.3",
        )
    )
    rows.append(
        Row(
            bench,
            f"orch status --all {big}/{small} ratio, persist_s",
            f"{kept_walls[big] / kept_walls[small]:.2f}",
            "<= 1.3",
        )
    )
    return Section(
        f"Latency: {label} each way",
        f"Every host is an sshd behind a relay that delays each direction by {label} "
        f"(bench/relay.py; a round trip costs {delay * 2000:.0f} ms). Per figure: wall time · "
        "round trips the client waited for (turns the relay counted) · SSH connections · bytes "
        f"both ways. orch's SGLang stand-in, NOT SGLang. Median of {runs}.",
        rows,
    )
