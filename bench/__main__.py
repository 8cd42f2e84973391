"""python -m bench [--quick] [--out FILE] [--only NAME ...]: run the benchmarks, print a table,
write the results (with the machine and the command) to bench/results.md."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

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
    time_to_verdict,
)
from bench.latency import latency
from bench.plan_cache import plan_cache
from orchestrator.cli.show import calibration
from orchestrator.commands.context import Context, UpOptions
from orchestrator.commands.events import Outcome
from orchestrator.commands.up import up
from orchestrator.profile.store import ProfileStore
from orchestrator.transport.ssh import SSHTransport
from tests.ssh.sshd import free_port


def up_overhead(lab: Lab, host: str, runs: int) -> Section:
    overheads, walls, connections, commands, files = [], [], [], [], []
    for run in range(runs):
        name = lab.profile(f"ready-{run}", host)
        ctx = Context(
            store=ProfileStore(lab.profiles), environ=os.environ, local_python=sys.executable
        )
        started = time.monotonic()
        events = list(up(ctx, ctx.launch(name), UpOptions()))
        wall = time.monotonic() - started
        verdict = events[-1]
        assert isinstance(verdict, Outcome), verdict
        assert verdict.ok, verdict.summary
        state = verdict.state
        own = (state.ready_at or 0) - (state.started_at or 0)
        transport = ctx._transports[host]
        assert isinstance(transport, SSHTransport)
        connections.append(transport.connections_opened)
        commands.append(transport.commands_run)
        files.append(transport.file_operations)
        ctx.close()
        walls.append(wall)
        overheads.append(wall - own)
        lab.orch("down", name)

    # by hand: ssh mkdir, scp the launcher, ssh nohup, then poll the log every second until ready
    hand_walls, hand_connections = [], []
    for run in range(runs):
        port = str(free_port())
        workdir = Path(lab.hosts[host]["workdir"]) / f"hand-up-{run}"
        script = lab.root / f"launch-{run}.sh"
        script.write_text(
            textwrap.dedent(f"""\
            cd {workdir}
            PYTHONPATH={STANDIN} nohup {sys.executable} -m sglang.launch_server \\
                --model-path {MODEL} --port {port} --host 127.0.0.1 --skip-server-warmup \\
                > server.log 2>&1 &
        """)
        )
        entry = lab.hosts[host]
        started = time.monotonic()
        count = 0
        subprocess.run([*lab.ssh_argv(host), f"mkdir -p {workdir}"], check=True)
        count += 1
        subprocess.run(
            [
                "scp",
                "-q",
                "-F",
                "/dev/null",
                "-o",
                "BatchMode=yes",
                "-o",
                f"UserKnownHostsFile={entry['known_hosts']}",
                "-i",
                entry["identity_file"],
                "-P",
                str(entry["port"]),
                str(script),
                f"{entry['user']}@127.0.0.1:{workdir}/launch.sh",
            ],
            check=True,
        )
        count += 1
        subprocess.run([*lab.ssh_argv(host), f"bash {workdir}/launch.sh"], check=True)
        count += 1
        while True:
            count += 1
            done = subprocess.run(
                [*lab.ssh_argv(host), f"cat {workdir}/server.log"],
                capture_output=True,
                text=True,
                check=True,
            )
            if "fired up and ready" in done.stdout:
                break
            time.sleep(1.0)
        hand_walls.append(time.monotonic() - started)
        hand_connections.append(count)
        kill_by_token(port)
    return Section(
        "`up` overhead",
        "`orch up` (in-process, the plan preflight included) of a stand-in profile to READY, "
        "minus the stand-in's own start-to-ready time as the agent recorded it; SSH "
        "connections and round trips counted by the transport. Beside the hand-written sequence "
        f"(ssh mkdir, scp, ssh nohup, poll the log every second over ssh). {runs} runs each.",
        [
            Row("up overhead", "orch up wall time", ms(median(walls))),
            Row(
                "up overhead", "orch up minus the server's own time to ready", ms(median(overheads))
            ),
            Row(
                "up overhead",
                "SSH connections / commands / SFTP operations",
                f"{median(connections):.0f} / {median(commands):.0f} / {median(files):.0f}",
            ),
            Row("up overhead", "hand-written wall time (poll every 1 s)", ms(median(hand_walls))),
            Row("up overhead", "hand-written SSH connections", f"{median(hand_connections):.0f}"),
        ],
    )


# -- 3. many hosts ------------------------------------------------------------------------------


def many_hosts(lab: Lab, hosts: list[str], sizes: Sequence[int], runs: int) -> Section:
    rows: list[Row] = []
    orch_times: dict[int, float] = {}
    orch_cpu: dict[int, float] = {}
    loop_times: dict[int, float] = {}
    parallel_times: dict[int, float] = {}
    for size in sizes:
        directory = lab.root / f"profiles-{size}"
        directory.mkdir()
        (directory / "hosts.yaml").write_text((lab.profiles / "hosts.yaml").read_text())
        for index, host in enumerate(hosts[:size]):
            lab.profile(f"svc{index:02d}", host, directory=directory)
        lab.orch("status", "--all", profiles=directory)  # the agent is pushed once per host
        times, cpu = [], []
        for _ in range(runs):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.monotonic()
            process = lab.orch_process("status", "--all", "--json", profiles=directory)
            process.communicate(timeout=120)
            times.append(time.monotonic() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        orch_times[size] = median(times)
        orch_cpu[size] = median(cpu)
        times = []
        for _ in range(runs):
            started = time.monotonic()
            for index, host in enumerate(hosts[:size]):
                state = Path(lab.hosts[host]["workdir"]) / f"svc{index:02d}" / "state.json"
                subprocess.run(
                    [*lab.ssh_argv(host), f"cat {state} 2>/dev/null || true"],
                    capture_output=True,
                    check=True,
                )
            times.append(time.monotonic() - started)
        loop_times[size] = median(times)
        # the same remote work as orch (the agent's status) through parallel OpenSSH clients:
        # the floor this machine sets when every "host" shares its CPUs
        agent = f"{sys.executable} -m orchestrator.remote.agent"  # its package's __main__
        times = []
        for _ in range(runs):
            started = time.monotonic()
            clients = []
            for host in hosts[:size]:
                remote = f"{agent} status --dir {lab.hosts[host]['workdir']}/x"
                clients.append(
                    subprocess.Popen([*lab.ssh_argv(host), remote], stdout=subprocess.DEVNULL)
                )
            for client in clients:
                client.wait(timeout=120)
            times.append(time.monotonic() - started)
        parallel_times[size] = median(times)
        rows.append(Row("many hosts", f"orch status --all, {size} host(s)", ms(orch_times[size])))
        rows.append(Row("many hosts", f"orch process CPU time, {size} host(s)", ms(orch_cpu[size])))
        rows.append(Row("many hosts", f"bash loop of ssh, {size} host(s)", ms(loop_times[size])))
        rows.append(
            Row(
                "many hosts",
                f"parallel ssh running the agent, {size} host(s)",
                ms(parallel_times[size]),
            )
        )
    big, small = max(sizes), min(sizes)
    rows.append(
        Row(
            "many hosts",
            f"orch {big}/{small} ratio",
            f"{orch_times[big] / orch_times[small]:.2f}",
            "<= 2",
        )
    )
    rows.append(
        Row("many hosts", f"orch CPU {big}/{small} ratio", f"{orch_cpu[big] / orch_cpu[small]:.2f}")
    )
    rows.append(
        Row(
            "many hosts",
            f"parallel ssh {big}/{small} ratio",
            f"{parallel_times[big] / parallel_times[small]:.2f}",
        )
    )
    rows.append(
        Row(
            "many hosts",
            f"bash loop {big}/{small} ratio",
            f"{loop_times[big] / loop_times[small]:.2f}",
        )
    )
    return Section(
        "Many hosts",
        "`orch status --all --json` (a process, as a user runs it) over "
        f"{', '.join(map(str, sizes))} hosts, each its own sshd on loopback; beside a "
        f"sequential bash loop of `ssh host cat state.json`. Median of {runs} runs. On "
        "loopback every host's sshd session and agent process runs on this machine's "
        f"{os.cpu_count()} CPUs, beside orch: the wall-time ratio includes that shared work; "
        "the orch process's own CPU time (getrusage) shows what orch adds per host, and "
        "parallel OpenSSH clients doing the same remote work (the agent's status) show the "
        "floor this machine sets.",
        rows,
    )


# -- 4. CLI start-up ----------------------------------------------------------------------------


def cli_startup(runs: int) -> Section:
    rows = []
    # As installed: pip compiles the bytecode (this machine sets PYTHONDONTWRITEBYTECODE=1,
    # which would compile every module on every run); one run first writes it.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    for argv in (["--help"], ["render", "qwen36-mtp-b200"], ["validate"]):
        times = []
        for attempt in range(runs + 1):
            started = time.monotonic()
            subprocess.run(
                [sys.executable, "-m", "orchestrator", *argv],
                cwd=REPO,
                capture_output=True,
                check=True,
                env=env,
            )
            if attempt:
                times.append(time.monotonic() - started)
        rows.append(Row("CLI start-up", f"orch {' '.join(argv)}", ms(median(times)), "< 150 ms"))
    probe = (
        "import sys, io\nfrom orchestrator.cli.main import main\n"
        "main(['render', 'qwen36-mtp-b200'], out=io.StringIO())\n"
        "print('paramiko' in sys.modules, 'jinja2' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, check=True
    )
    paramiko_loaded, jinja_loaded = done.stdout.split()
    rows.append(
        Row(
            "CLI start-up",
            "paramiko / jinja2 imported by render",
            f"{paramiko_loaded} / {jinja_loaded}",
            "False / False",
        )
    )
    rows += argument_tables(runs)
    return Section(
        "CLI start-up",
        f"Wall time of `python -m orchestrator ...` processes, shipped profiles, with the "
        f"bytecode compiled as an installation has it; median of {runs}.",
        rows,
    )


def argument_tables(runs: int) -> list[Row]:
    """Every release's table ships; a command reads one. What that costs, and the pack's size
    beside the same tables as separate files (what orch shipped before: one JSON per release)."""
    from orchestrator.sglang import argtable_pack

    directory = REPO / "orchestrator" / "sglang" / "argtables"
    documents = argtable_pack.read_documents(directory)
    packed = sum(len(t.encode()) for t in argtable_pack.pack_files(documents).values())
    separate = sum(
        len((json.dumps(d, sort_keys=True, indent=1, ensure_ascii=False) + "\n").encode())
        for d in documents.values()
    )
    probe = (
        "import time\nstarted = time.perf_counter()\nfrom orchestrator.sglang import argtable\n"
        "argtable.load_table('0.5.11')\nprint(time.perf_counter() - started)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    times = []
    for _ in range(runs + 1):  # the first writes the bytecode
        done = subprocess.run(
            [sys.executable, "-c", probe],
            cwd=REPO,
            capture_output=True,
            text=True,
            check=True,
            env=env,
        )
        times.append(float(done.stdout))
    times = times[1:]
    return [
        Row(
            "CLI start-up",
            f"argument tables: {len(documents)} releases, pack on disk",
            f"{packed / 1e6:.2f} MB",
            f"{separate / 1e6:.1f} MB as one file each",
        ),
        Row(
            "CLI start-up",
            "import argtable + load one release's table",
            ms(median(times)),
            "a command reads one release",
        ),
    ]


# -- 5. following a large log -------------------------------------------------------------------


def large_log(lab: Lab, host: str, sizes_mb: Sequence[int], runs: int) -> Section:
    name = lab.profile("logs", host)
    code, output = lab.orch("up", name, "--no-plan")
    assert code == 0, output
    state = lab.state(host, name)
    assert state is not None
    run_id, log = str(state["run_id"]), Path(str(state["log"]))
    lab.orch("down", name)
    block = "".join(
        f"[2026-11-30 12:00:00] Decode batch. #running-req: 48, #token: {i}, gen throughput "
        "(token/s): 1234.56, #queue-req: 0\n"
        for i in range(8000)
    ).encode()
    rows = []
    for size in sizes_mb:
        with log.open("ab") as handle:
            while handle.tell() < size * (1 << 20):
                handle.write(block)
        actual = log.stat().st_size
        times = []
        for _ in range(runs):
            started = time.monotonic()
            process = lab.orch_process("logs", name, "--run", run_id, "-n", "100")
            out, _ = process.communicate(timeout=120)
            times.append(time.monotonic() - started)
            assert out.count("\n") >= 100
        rows.append(
            Row(
                "large log",
                f"orch logs -n 100, {actual / (1 << 20):,.0f} MiB log",
                ms(median(times)),
            )
        )
    return Section(
        "Following a large log",
        "`orch logs PROFILE -n 100` over SSH (a process) on one run's log grown to each size: it "
        "asks the agent for the last lines (`tail`: a window from the end, read on the host), "
        f"never the whole file, in one command. Median of {runs}.",
        rows,
    )


# -- 6. READY with a long line ------------------------------------------------------------------

# A server that logs its config line, then one line of N bytes without a newline, then serves
# /health and logs SGLang's ready line. Writing blocks while the agent's pump lags (a pipe holds
# 64 KiB), so READY waits for the pump.
_LONG_LINE_SERVER = """\
import http.server, os, sys, threading, time
out = sys.stdout.buffer
out.write(b"[2026-11-30 12:00:00] server_args=ServerArgs(model_path='/m')\\n")
out.write(b"x" * int(os.environ["BENCH_LINE_BYTES"]))
out.write(b"\\n")
out.flush()
class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(os.environ["BENCH_PORT"])), Health)
threading.Thread(target=server.serve_forever, daemon=True).start()
out.write(b"[2026-11-30 12:00:01] The server is fired up and ready to roll!\\n")
out.flush()
time.sleep(600)
"""


def ready_with_long_line(root: Path, sizes: Sequence[int], runs: int) -> Section:
    rows = []
    for size in sizes:
        times = []
        for run in range(runs):
            deployment = root / f"long-line-{size}-{run}"
            deployment.mkdir(parents=True)
            port = free_port()
            spec = {
                "protocol": 1,
                "deployment": deployment.name,
                "argv": [sys.executable, "-c", _LONG_LINE_SERVER],
                "env": {"BENCH_LINE_BYTES": str(size), "BENCH_PORT": str(port)},
                "port": port,
                "health": {"endpoint": "/health", "interval_s": 0.5, "startup_timeout_s": 300},
                "restart": {"mode": "no"},
                "stop_timeout_s": 2,
                "meta": {},
            }
            spec_path = root / f"spec-{size}-{run}.json"
            spec_path.write_text(json.dumps(spec))
            agent_argv = [sys.executable, "-m", "orchestrator.remote.agent"]
            start = [*agent_argv, "start", "--dir", str(deployment), "--spec", str(spec_path)]
            subprocess.run(start, check=True, capture_output=True, timeout=60)
            state: dict[str, Any] = {}
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                with contextlib.suppress(FileNotFoundError, ValueError):
                    state = json.loads((deployment / "state.json").read_text())
                if state.get("state") in ("READY", "EXITED", "FATAL"):
                    break
                time.sleep(0.02)
            subprocess.run(
                [*agent_argv, "stop", "--dir", str(deployment), "--timeout", "2"],
                check=False,
                capture_output=True,
                timeout=60,
            )
            assert state.get("state") == "READY", state
            times.append(float(state["ready_at"]) - float(state["started_at"]))
        label = "no long line" if size == 0 else f"a {size / 1e6:g} MB line without a newline"
        rows.append(
            Row(
                "ready with a long line",
                f"start -> READY, {label}",
                ms(median(times)),
                "< 2 s" if size else "",
            )
        )
    return Section(
        "READY with a long line",
        "The agent (`agent start`, a real process) supervising a server that logs its config "
        "line, then one line of the given size without a newline, then serves /health and logs "
        "SGLang's ready line; from the server's start to READY as the agent recorded it. The "
        "pump notes at most the first 1 MiB of a line and writes all of it to the log; with "
        "the previous pump (which re-joined the partial line on every read) the same benchmark "
        "measured 177 ms without and 67.4 s with the 30 MB line. "
        f"Median of {runs}.",
        rows,
    )


# -- 7. the memory plan ------------------------------------------------------------------------

MEMORY_LOGS = REPO / "tests" / "fixtures" / "sglang" / "memory-logs"


def memory_plan(runs: int) -> Section:
    """What the plan's memory arithmetic and the log reader cost, and what the real captures
    allow: each is read, and its figures are listed; a prediction error needs the inputs of the
    run that wrote it (model config, GPU free memory, flags), which no public capture carries."""
    from orchestrator.sglang import observe
    from orchestrator.sglang.memory.budget import plan_budget
    from orchestrator.sglang.memory.measured import measured_figures
    from orchestrator.sglang.memory.rules import BudgetInputs
    from orchestrator.sglang.memory.shapes import mirrored_model, nominal_gpu

    config = json.loads((MODEL / "config.json").read_text())
    model = mirrored_model(config, attention_tp=1)
    assert model is not None
    gpu = nominal_gpu("H200", 141)
    inputs = BudgetInputs(
        mem_fraction_static=0.92,
        max_running_requests=48,
        max_mamba_cache_size=24,
        extra_buffer=True,
        speculative=True,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=4,
        context_len=8192,
        chunked_prefill_size=8192,
        cuda_graph_max_bs=256,
    )
    times = []
    for _ in range(runs * 200):
        started = time.perf_counter()
        plan_budget(model, (gpu,), inputs, version=(0, 5, 11))
        times.append(time.perf_counter() - started)
    rows = [
        Row(
            "memory plan",
            "one budget (the incident on an H200, 0.5.11 rules)",
            f"{median(times) * 1e6:.0f} us",
            "",
        )
    ]
    lines = [
        line for path in sorted(MEMORY_LOGS.glob("*.log")) for line in path.read_text().splitlines()
    ]
    many = lines * max(1, 200_000 // max(1, len(lines)))
    started = time.perf_counter()
    observe.memory_figures(many)
    took = time.perf_counter() - started
    rows.append(
        Row("memory plan", f"read {len(many):,} log lines for memory figures", ms(took), "")
    )
    for path in sorted(MEMORY_LOGS.glob("*.log")):
        ranks = observe.memory_figures(path.read_text().splitlines())
        found = sorted(
            {
                name
                for rank in ranks
                for name, value in measured_figures(rank).items()
                if value is not None
            }
        )
        rows.append(
            Row(
                "memory plan",
                f"capture {path.stem}",
                f"{len(ranks)} rank(s): {', '.join(found) or 'no comparable figure'}",
                "prediction: inputs not in the capture",
            )
        )
    return Section(
        "Memory plan",
        "The budget's arithmetic (`memory.budget.plan_budget`, pure) and the reader of SGLang's "
        "memory lines (`observe.memory_figures`) on this machine; then each real capture in "
        "tests/fixtures/sglang/memory-logs (public GitHub threads) with the figures orch reads "
        "in it. None of them carries what a prediction needs (the model's config.json, the "
        "GPU's free memory and every flag), so no prediction error is reported for them; the "
        "arithmetic is checked instead against SGLang's own sizing functions, run on the same "
        "inputs (tests/sglang_real/test_memory_sglang.py), and the model shapes against "
        "SGLang's own classes (test_memory_real.py). No GPU was lent to this work: the "
        "`--load-format dummy` calibration against real SGLang (docs/memory.md) is still to do. "
        f"Median of {runs * 200} budgets.",
        rows,
    )


# -- report -------------------------------------------------------------------------------------


def machine() -> str:
    sshd = subprocess.run(["ssh", "-V"], capture_output=True, text=True, check=False)
    cpu = platform.processor() or platform.machine()
    return (
        f"{platform.node()}: {platform.system()} {platform.release()}, {cpu}, "
        f"{os.cpu_count()} CPUs, {psutil.virtual_memory().total / (1 << 30):.0f} GiB RAM; "
        f"Python {platform.python_version()}; {(sshd.stderr or sshd.stdout).strip()}"
    )


def render_table(sections: Sequence[Section]) -> str:
    rows = [("BENCHMARK", "FIGURE", "VALUE", "GOAL")]
    rows += [(r.benchmark, r.figure, r.value, r.goal) for s in sections for r in s.rows]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def render_markdown(sections: Sequence[Section], command: str, took: float) -> str:
    out = [
        "# orch benchmarks",
        "",
        f"- command: `{command}`",
        f"- date: {time.strftime('%Y-%m-%d %H:%M:%S %Z')}",
        f"- machine: {machine()}",
        f"- took: {took:.0f} s",
        "",
        "Loopback (real OpenSSH sshd, orch's SGLang stand-in, NOT SGLang); the latency sections "
        "put each sshd behind a relay that delays each direction. Medians; ratios "
        "are measured in the same run. Figures, not assertions.",
    ]
    for section in sections:
        out += [
            "",
            f"## {section.title}",
            "",
            section.text,
            "",
            "| figure | value | goal |",
            "|---|---|---|",
        ]
        out += [f"| {r.figure} | {r.value} | {r.goal} |" for r in section.rows]
    return "\n".join(out) + "\n"


BENCHMARKS = (
    "verdict",
    "up",
    "hosts",
    "cli",
    "logs",
    "ready",
    "memory",
    "groups",
    "latency",
    "plancache",
)


# -- launch groups ------------------------------------------------------------------------------


def group_profile(lab: Lab, name: str, hosts: Sequence[str], *, tp: int) -> str:
    """A stand-in group, rank r on ``hosts[r]`` (each its own sshd), each node its own --port."""
    document = {
        "sglang": "0.5.23",
        "model": {"path": str(MODEL), "served_model_name": "bench"},
        "port": free_port(),
        "bind": "127.0.0.1",
        "env": {"PYTHONPATH": str(STANDIN)},
        "args": {"skip_server_warmup": True, "tp_size": tp},
        "restart": {"mode": "on-failure", "delay_s": 0.1, "max_delay_s": 0.1, "start_limit": 50},
        "stop_timeout_s": 3,
        "health": {"startup_timeout_s": 120, "interval_s": 0.5},
        "group": {
            "nodes": [{"host": hosts[0]}]
            + [{"host": host, "port": free_port()} for host in hosts[1:]],
            "rendezvous_port": free_port(),
            "control_port": free_port(),
            # a free one too: the default (rendezvous + 50) may be any process's on this machine
            "gate_port": free_port(),
            "join_timeout_s": 60,
        },
    }
    (lab.profiles / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    return name


def launch_groups(lab: Lab, hosts: Sequence[str], runs: int) -> Section:
    """Group up against one node's up, and the time from a rank's death to the group's verdict
    (rank 0's supervisor recording the failure) and to the whole group READY again."""
    single_walls, group_walls, group_own = [], [], []
    verdicts, recoveries = [], []
    for run in range(runs):
        single = lab.profile(f"single-{run}", hosts[0])
        started = time.monotonic()
        code, text = lab.orch("up", single, "--no-plan")
        single_walls.append(time.monotonic() - started)
        assert code == 0, text
        lab.orch("down", single)

        name = group_profile(lab, f"group-{run}", hosts[:2], tp=2)
        started = time.monotonic()
        code, text = lab.orch("up", name, "--no-plan")
        group_walls.append(time.monotonic() - started)
        assert code == 0, text
        leader = lab.state(hosts[0], name) or {}
        group_own.append((leader.get("ready_at") or 0) - (leader.get("started_at") or 0))

        worker = lab.state(hosts[1], name) or {}
        first_generation = (leader.get("group") or {}).get("generation")
        os.kill(int(worker["pid"]), signal.SIGKILL)
        killed = time.time()
        verdict_at = ready_at = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and ready_at is None:
            leader = lab.state(hosts[0], name) or {}
            group = leader.get("group") or {}
            if verdict_at is None and group.get("failure"):
                verdict_at = time.time()
            worker = lab.state(hosts[1], name) or {}
            again = group.get("generation") != first_generation
            if again and leader.get("state") == "READY" and worker.get("state") == "READY":
                ready_at = time.time()
            time.sleep(0.001)
        if verdict_at is not None:
            verdicts.append(verdict_at - killed)
        if ready_at is not None:
            recoveries.append(ready_at - killed)
        lab.orch("down", name)
    return Section(
        "Launch groups",
        "A 2-node group (TP 2, one rank per node, each node its own sshd on loopback) of the "
        "stand-in, beside one node's `orch up` of the same server: wall time of `orch up "
        "--no-plan` to READY (the group's: every node probed, the nodes compared, the rendezvous "
        "and control ports reached from the other node, both supervisors started, both ranks "
        "READY). Then SIGKILL of rank 1's server: time until rank 0's supervisor recorded the "
        "group failure in state.json (polled every 1 ms), and until both ranks were READY "
        f"again as the next group start (restart delay 0.1 s). SGLang 0.5.23's gated launch is "
        "on: every start waits for rank 0's supervisor to activate the gate, and the stand-in, "
        f"as SGLang, polls it once a second. {runs} runs each.",
        [
            Row("groups", "orch up, one node", ms(median(single_walls))),
            Row("groups", "orch up, 2-node group", ms(median(group_walls))),
            Row("groups", "  of which the group's own start to READY", ms(median(group_own))),
            Row(
                "groups",
                "rank 1 killed -> group failure recorded",
                ms(median(verdicts)) if verdicts else "-",
                "< 1000 ms",
            ),
            Row(
                "groups",
                "rank 1 killed -> whole group READY again",
                ms(median(recoveries)) if recoveries else "-",
            ),
        ],
    )


DELAYS = (0.0, 0.025, 0.075)  # one way: loopback, a near region, a far one (GPU boxes: 20-150 ms)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer runs, smaller sizes (smoke)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results.md")
    parser.add_argument("--only", nargs="*", choices=BENCHMARKS, default=list(BENCHMARKS))
    parser.add_argument(
        "--delays",
        nargs="*",
        type=lambda ms: float(ms) / 1000,
        metavar="MS",
        help="one-way delays for the latency benchmark, in ms (default 0 25 75)",
    )
    args = parser.parse_args(argv)
    quick = args.quick
    started = time.monotonic()
    sections: list[Section] = []
    with tempfile.TemporaryDirectory(prefix="orch-bench-") as scratch, lab_in(Path(scratch)) as lab:
        on_hosts = {"verdict", "up", "hosts", "groups", "logs"} & set(args.only)
        hosts = lab.add_hosts(4 if quick else 16) if on_hosts else []
        if "verdict" in args.only:
            human_sleep = 3 if quick else 60
            runs = 1 if quick else 3
            sections.append(time_to_verdict(lab, hosts[0], runs, human_sleep, die_after=2))
        if "up" in args.only:
            sections.append(up_overhead(lab, hosts[0], runs=1 if quick else 5))
        if "hosts" in args.only:
            sizes = (1, 4) if quick else (1, 4, 16)
            sections.append(many_hosts(lab, hosts, sizes, runs=1 if quick else 5))
        if "cli" in args.only:
            sections.append(cli_startup(runs=3 if quick else 15))
        if "ready" in args.only:
            sections.append(ready_with_long_line(Path(scratch), (0, 30_000_000), 1 if quick else 3))
        if "memory" in args.only:
            sections.append(memory_plan(runs=1 if quick else 5))
        if "plancache" in args.only:
            sections.append(plan_cache(runs=1 if quick else 5))
        if "groups" in args.only:
            sections.append(launch_groups(lab, hosts, runs=1 if quick else 5))
        if "logs" in args.only:
            sizes_mb = (1, 16) if quick else (1, 100, 1024)
            sections.append(large_log(lab, hosts[0], sizes_mb, runs=1 if quick else 5))
    if "latency" in args.only:
        delays = tuple(args.delays) if args.delays else ((0.025,) if quick else DELAYS)
        many = (1, 2) if quick else (1, 4, 16)
        sections.extend(latency(delays, runs=1 if quick else 3, many=many))
    took = time.monotonic() - started
    print(render_table(sections))
    command = "python -m bench " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = render_markdown(sections, command.strip(), took)
    # scripts/calibrate-memory's section (measured on a GPU box) is not this run's: kept as it is
    kept = calibration.section_of(args.out.read_text()) if args.out.is_file() else None
    args.out.write_text(calibration.replace_section(text, kept) if kept else text)
    print(f"\nwritten {args.out} ({took:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
