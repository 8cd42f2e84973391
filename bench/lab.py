"""The benchmarks' harness: a lab (a real sshd, hosts, profiles, orch in-process), figures, and
the death -> verdict measurement the latency benchmark shares."""

from __future__ import annotations

import contextlib
import io
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.relay import DelayRelay  # noqa: E402
from orchestrator.cli.main import main as orch_main  # noqa: E402
from tests.ssh.sshd import SshServer, free_port, start_sshd, stop_sshd  # noqa: E402

STANDIN = REPO / "standin"
MODEL = STANDIN / "models" / "Qwen3.6-27B"


@dataclass
class Row:
    benchmark: str
    figure: str
    value: str
    goal: str = ""


@dataclass
class Section:
    title: str
    text: str
    rows: list[Row] = field(default_factory=list)


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


# -- the loopback lab ---------------------------------------------------------------------------


class Lab:
    """sshd instances on 127.0.0.1, a profiles directory whose hosts are them, stand-in profiles."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.profiles = root / "profiles"
        self.profiles.mkdir(parents=True)
        self.servers: list[SshServer] = []
        self._processes: list[subprocess.Popen[bytes]] = []
        self.hosts: dict[str, dict[str, Any]] = {}
        self.relays: dict[str, DelayRelay] = {}

    def add_hosts(self, count: int, delay_s: float | None = None) -> list[str]:
        """``count`` sshds; with ``delay_s``, each behind a relay that delays each direction."""
        names = []
        for _ in range(count):
            index = len(self.servers)
            server, process = start_sshd(self.root / f"sshd-{index:02d}")
            self.servers.append(server)
            self._processes.append(process)
            name = f"h{index:02d}"
            port, known_hosts = server.port, server.known_hosts
            if delay_s is not None:
                relay = DelayRelay(server.port, delay_s)
                self.relays[name] = relay
                port = relay.port
                known_hosts = self.root / f"known_hosts-{name}"
                known_hosts.write_text(f"[127.0.0.1]:{port} ssh-ed25519 {server.host_key_b64}\n")
            self.hosts[name] = {
                "address": "127.0.0.1",
                "port": port,
                "user": server.user,
                "identity_file": str(server.client_key),
                "known_hosts": str(known_hosts),
                "python": sys.executable,
                "workdir": str(self.root / "remote" / name),
            }
            names.append(name)
        (self.profiles / "hosts.yaml").write_text(yaml.safe_dump({"hosts": self.hosts}))
        return names

    def profile(
        self,
        name: str,
        host: str,
        *,
        env: dict[str, str] | None = None,
        directory: Path | None = None,
    ) -> str:
        document = {
            "sglang": "0.5.23",
            "host": host,
            "model": {"path": str(MODEL), "served_model_name": "bench"},
            "port": free_port(),
            "bind": "127.0.0.1",
            "env": {"PYTHONPATH": str(STANDIN), **(env or {})},
            "args": {"skip_server_warmup": True},
            "restart": {"mode": "no"},
            "stop_timeout_s": 3,
            "health": {"startup_timeout_s": 120, "interval_s": 0.5},
        }
        target = directory or self.profiles
        target.mkdir(parents=True, exist_ok=True)
        (target / f"{name}.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
        return name

    def orch(self, *argv: str, profiles: Path | None = None) -> tuple[int, str]:
        out = io.StringIO()
        code = orch_main(["--profiles", str(profiles or self.profiles), *argv], out=out, err=out)
        return code, out.getvalue()

    def orch_process(self, *argv: str, profiles: Path | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "orchestrator",
                "--profiles",
                str(profiles or self.profiles),
                *argv,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )

    def ssh_argv(self, host: str) -> list[str]:
        entry = self.hosts[host]
        return [
            "ssh",
            "-F",
            "/dev/null",
            "-o",
            "BatchMode=yes",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            f"UserKnownHostsFile={entry['known_hosts']}",
            "-i",
            entry["identity_file"],
            "-p",
            str(entry["port"]),
            f"{entry['user']}@127.0.0.1",
        ]

    def state(self, host: str, name: str) -> dict[str, Any] | None:
        path = Path(self.hosts[host]["workdir"]) / name / "state.json"
        try:
            document: dict[str, Any] = json.loads(path.read_text())
        except (FileNotFoundError, ValueError):
            return None
        return document

    def close(self) -> None:
        for name in [p.stem for p in self.profiles.glob("*.yaml") if p.stem != "hosts"]:
            with contextlib.suppress(Exception):
                self.orch("down", name)
        for relay in self.relays.values():
            relay.close()
        for process in self._processes:
            stop_sshd(process)


def kill_by_token(token: str) -> None:
    for process in psutil.process_iter(["cmdline"]):
        if token in (process.info["cmdline"] or []):
            with contextlib.suppress(psutil.Error):
                for child in process.children(recursive=True):
                    child.kill()
                process.kill()


def watch_death(find_pid: Callable[[], int | None], timeout: float) -> Callable[[], float | None]:
    """Poll every millisecond for a process to appear then end; returns a getter of the wall-
    clock moment it ended (a zombie counts as ended: that is when it stopped running)."""
    died: list[float] = []

    def run() -> None:
        deadline = time.monotonic() + timeout
        pid = None
        while pid is None and time.monotonic() < deadline:
            pid = find_pid()
            time.sleep(0.001)
        if pid is None:
            return
        with contextlib.suppress(psutil.Error):
            process = psutil.Process(pid)
            while time.monotonic() < deadline:
                if process.status() in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD):
                    break
                time.sleep(0.001)
        died.append(time.time())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()

    def result() -> float | None:
        thread.join(timeout)
        return died[0] if died else None

    return result


def pid_by_token(token: str) -> Callable[[], int | None]:
    def find() -> int | None:
        for process in psutil.process_iter(["cmdline"]):
            cmdline = process.info["cmdline"] or []
            if token in cmdline and "sglang.launch_server" in cmdline:
                return int(process.pid)
        return None

    return find


# -- 1. time to verdict -------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    """Seconds from a server's death to orch's verdict line on its output, and to its exit."""

    printed: float
    exited: float


VERDICT_LINE = "server failed:"  # cli/show's failure line


def orch_death_to_verdict(lab: Lab, host: str, name: str, die_after: float) -> Verdict | None:
    """From a stand-in's death (``die_after`` s after start, during weight loading) to ``orch
    up`` having printed the verdict (its line read from orch's output as it is written), and to
    its exit (after the comparison of the logged configuration and the connection's close);
    None when the death or the verdict was not seen."""
    dying = {"ORCH_STANDIN_FAIL": f"die-after:{die_after:g}", "ORCH_STANDIN_LOAD_S": "30"}
    name = lab.profile(name, host, env=dying)
    port = str(yaml.safe_load((lab.profiles / f"{name}.yaml").read_text())["port"])
    died = watch_death(pid_by_token(port), timeout=120)
    process = lab.orch_process("up", name, "--no-plan")
    assert process.stdout is not None
    printed_at = None
    for line in process.stdout:  # unbuffered enough: cli/show flushes after the verdict
        if printed_at is None and VERDICT_LINE in line:
            printed_at = time.time()
    process.wait(timeout=180)
    exited_at = time.time()
    death = died()
    if death is None or printed_at is None:
        return None
    return Verdict(printed_at - death, exited_at - death)


def time_to_verdict(
    lab: Lab, host: str, runs: int, human_sleep: float, die_after: float
) -> Section:
    orch_delays, exit_delays, human_delays = [], [], []
    for run in range(runs):
        delay = orch_death_to_verdict(lab, host, f"dies-{run}", die_after)
        if delay is not None:
            orch_delays.append(delay.printed)
            exit_delays.append(delay.exited)

        # the incident's way: nohup over ssh, sleep, cat the log
        port = str(free_port())
        workdir = Path(lab.hosts[host]["workdir"]) / f"by-hand-{run}"
        launch = (
            f"mkdir -p {workdir} && cd {workdir} && PYTHONPATH={STANDIN} "
            f"ORCH_STANDIN_FAIL=die-after:{die_after} ORCH_STANDIN_LOAD_S=30 nohup "
            f"{sys.executable} -m sglang.launch_server --model-path {MODEL} --port {port} "
            "> server.log 2>&1 &"
        )
        died = watch_death(pid_by_token(port), timeout=120)
        subprocess.run([*lab.ssh_argv(host), launch], check=True, timeout=60)
        time.sleep(human_sleep)
        subprocess.run(
            [*lab.ssh_argv(host), f"cat {workdir}/server.log"],
            check=True,
            timeout=60,
            capture_output=True,
        )
        seen_at = time.time()
        death = died()
        if death is not None:
            human_delays.append(seen_at - death)
        kill_by_token(port)
    orch_median = median(orch_delays) if orch_delays else float("nan")
    human_median = median(human_delays) if human_delays else float("nan")
    return Section(
        "Time to verdict",
        f"The stand-in dies {die_after:g} s after start (`ORCH_STANDIN_FAIL=die-after:"
        f"{die_after:g}`, during weight loading). Measured from the moment the process ended "
        "(polled every 1 ms with psutil) to `orch up`'s classified verdict line read from its "
        "output, and to its exit; beside the incident's way: `ssh host 'nohup ... > log 2>&1 "
        f"&'`, `sleep {human_sleep:g}`, `ssh host cat log`. {len(orch_delays)} runs each.",
        [
            Row(
                "time to verdict", "orch up: death -> verdict printed", ms(orch_median), "< 100 ms"
            ),
            Row(
                "time to verdict",
                "orch up: death -> orch exited",
                ms(median(exit_delays)) if exit_delays else "n/a",
            ),
            Row(
                "time to verdict",
                f"hand-written (sleep {human_sleep:g}; cat log)",
                f"{human_median:.1f} s",
            ),
            Row(
                "time to verdict", "ratio hand-written / orch", f"{human_median / orch_median:.0f}x"
            ),
        ],
    )


# -- 2. up overhead -----------------------------------------------------------------------------


@contextlib.contextmanager
def lab_in(root: Path) -> Iterator[Lab]:
    lab = Lab(root)
    try:
        yield lab
    finally:
        lab.close()


RESULTS = Path(__file__).resolve().parent / "results.md"


def write_section(title: str, text: str) -> None:
    """``text`` (starting with its ``title`` line) in place of that section of
    bench/results.md, or after the last one; the rest of the file kept."""
    current = RESULTS.read_text() if RESULTS.is_file() else ""
    if title in current:
        head, _, rest = current.partition(title)
        after = rest.split("\n## ", 1)
        tail = "\n## " + after[1] if len(after) > 1 else ""
        current = head + text + tail
    else:
        current = current.rstrip("\n") + "\n\n" + text
    RESULTS.write_text(current)
