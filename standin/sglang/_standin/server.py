"""The stand-in's main process (NOT SGLang), in SGLang's order of events.

plugins (``load_plugins``, 0.5.11+) -> parse -> resolve (``prepare_server_args`` up to 0.5.18,
``resolve_once`` from 0.5.19: the stand-in's ``sglang/srt/server_args.py``, which orch's planning
probe runs too) -> ``server_args=`` -> spawn schedulers and the detokenizer -> wait until every
scheduler has loaded -> uvicorn starts and binds -> warm-up request to itself -> ``The server is
fired up and ready to roll!`` -> serve until a signal.

Exits, as SGLang's: argparse error 2; a resolution or import error 1 (traceback on stderr, before
any ``server_args=`` line); port in use 1; a child's failure (SIGQUIT from it) or SIGTERM end in
SGLang's ``kill_process_tree(include_parent=True)``, which SIGKILLs the main process itself (-9);
SIGINT goes through uvicorn's graceful shutdown, exit 0.

With ``--nnodes N`` > 1 (group.py): the schedulers this node runs are its share of the ranks, and
they wait after ``Init torch distributed begin.`` until the rendezvous over ``--dist-init-addr``
completes (forever if it never does). Node 0 then goes on as above, and broadcasts the shutdown to
the other nodes when it drains after SIGTERM (0.5.14+). A node of rank >= 1 starts no API server:
once its schedulers are ready it serves the dummy health app on ``--host``/``--port``, then waits
for its schedulers to exit (rank 0's shutdown: each ``terminated with 0``, then exit 0). When a
peer node goes away after the rendezvous, nothing is logged and nothing exits: the survivors are
"hung in NCCL" until killed.

With ``--gated-launch-port P`` (0.5.19+, gate.py) every scheduler waits after ``Init torch
distributed ends.`` until ``POST /gate/activate`` reaches world rank 0's control server on
``--host:P``. The main process carries the activation: when its world-rank-0 scheduler reports
``activated`` on its status pipe it writes ``activate`` to its other schedulers and broadcasts
it to the other nodes (group.py), whose main processes pass it on to theirs.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Sequence
from types import FrameType
from typing import Any, NoReturn

from sglang._standin import argtable, render
from sglang._standin import knobs as knobs_module
from sglang._standin.dummy import make_dummy_server
from sglang._standin.endpoints import ServerState, make_server
from sglang._standin.group import Peer, Placement, Store, StoreInUse, parse_address
from sglang._standin.logs import Log, bind_error
from sglang._standin.memory import startup_figures
from sglang._standin.model import model_facts
from sglang._standin.proc import spawn_child
from sglang._standin.resolve import refusal, refusal_of
from sglang._standin.tracebacks import Traces

MAX_SCHEDULERS = 16  # one child per rank, capped: the stand-in must stay cheap
WARMUP_PROMPT = {
    "text": "The capital city of France is",
    "sampling_params": {"temperature": 0, "max_new_tokens": 8},
}


class _Stop(Exception):
    """Raised out of serve_forever() by the SIGINT handler."""


def _unknown_flag(table: argtable.Table) -> list[str]:
    """An argument this release does not know: the other spelling of the mamba flag (the incident's
    mistake in either direction), else a plainly foreign flag."""
    known = {flag for option in table.options for flag in option["flags"]}
    for flag in ("--mamba-scheduler-strategy", "--mamba-radix-cache-strategy"):
        if flag not in known:
            return [flag, "extra_buffer"]
    return ["--orch-standin-unknown-flag", "1"]


class Launcher:
    def __init__(self, knobs: knobs_module.Knobs, entry: str) -> None:
        self.knobs = knobs
        self.entry = entry
        self.log = Log(knobs.log_ms)
        self.traces = Traces(entry, knobs.resolves_in_run_server)
        self.children: list[subprocess.Popen[bytes]] = []
        self.schedulers: list[subprocess.Popen[bytes]] = []
        self.orphan: subprocess.Popen[bytes] | None = None
        self.state: ServerState | None = None
        self.started = time.monotonic()
        self.placement = Placement(nnodes=1, node_rank=0, tp=1, pp=1, dp=1)  # set by run()
        self.store: Store | None = None  # node 0 of a multi-node group
        self.peer: Peer | None = None  # a node of rank >= 1
        self.group_broken = threading.Event()  # a peer node is gone after the rendezvous
        self.group_went = threading.Event()  # "go" written to this node's schedulers

    # --- SGLang's kill_process_tree ---

    def kill_tree(self, include_parent: bool) -> None:
        pid = os.getpid()
        if self.knobs.logs_kill_process_tree:
            self.log(
                f"kill_process_tree called: parent_pid={pid}, "
                f"include_parent={include_parent}, pid={pid}"
            )
        for child in self.children:
            if child is self.orphan:
                continue  # the failure mode: this one got away
            with contextlib.suppress(OSError):
                child.kill()
        for child in self.children:
            if child is not self.orphan:
                with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                    child.wait(timeout=2)
        if include_parent:
            sys.stderr.flush()
            os.kill(pid, signal.SIGKILL)

    def on_sigquit(self, signum: int, frame: FrameType | None) -> None:
        self.log("Received sigquit from a child process. It usually means the child failed.")
        self.kill_tree(include_parent=True)

    def on_sigterm(self, signum: int, frame: FrameType | None) -> None:
        state = self.state
        if state is None or state.draining.is_set():
            return
        state.draining.set()
        self.log("SIGTERM received. signum=None frame=None. Draining requests and shutting down...")
        threading.Thread(target=self._drain_then_die, daemon=True).start()

    def _drain_then_die(self) -> None:
        """SGLang 0.5.23's ``sigterm_watchdog``: at its next tick, look at the requests in
        flight; while any remain, log them and look again (every 5 s there), with no upper
        bound; new requests keep being served meanwhile (only /health and /ready say 503)."""
        time.sleep(self.knobs.drain_s)
        state = self.state
        while True:
            rids = state.inflight.rids() if state is not None else []
            self.log(
                f"Gracefully exiting... Remaining number of requests {len(rids)}. "
                f"Remaining requests remaining_rids={rids!r}."
            )
            if not rids:
                break
            time.sleep(self.knobs.drain_poll_s)
        if self.store is not None and self.knobs.broadcasts_shutdown:
            self.store.broadcast_shutdown()  # ShutdownReq, reaching the other nodes' schedulers
        self.kill_tree(include_parent=True)

    def on_worker_sigterm(self, signum: int, frame: FrameType | None) -> None:
        """0.5.21+ on a node of rank >= 1: SIGTERM is logged and otherwise ignored."""
        self.log(
            f"SIGTERM received on node_rank {self.placement.node_rank}; waiting for the rank-0 "
            "ShutdownReq broadcast to stop the schedulers."
        )

    def on_sigint(self, signum: int, frame: FrameType | None) -> None:
        raise _Stop

    # --- the run ---

    def run(self, argv: Sequence[str]) -> int:
        knobs = self.knobs
        table = argtable.load_table(knobs.version_text)
        self.log(
            f"orch SGLang stand-in (NOT SGLang): imitating sglang {knobs.version_text} "
            f"(argument table {table.sglang_version}), pid {os.getpid()}"
        )
        args = list(argv)
        if knobs.failing("argparse"):
            args += _unknown_flag(table)
        _load_plugins()
        from sglang.srt import server_args as srt  # builds ServerArgs from the knobs read above

        # The knobs' failures (the server's alone: the planning probe never sees them) win over
        # SGLang's own, except over a model path that transformers rejects.
        forced = "model_not_found" if knobs.failing("model-not-found") else None
        forced = forced or ("incident" if knobs.failing("config-error") else None)
        try:
            record = srt.prepare_server_args(args)  # argparse errors exit 2; <= 0.5.18 resolves
            if forced is not None:
                raise refusal(forced, str(record.model_path))
            if knobs.resolves_in_run_server:
                record.resolve_once()  # 0.5.19+: sglang/launch_server.py, run_server()
        except (ValueError, AssertionError, OSError) as error:
            found = refusal_of(error)
            if found is None:
                raise
            kind, model_path = found
            if forced is not None and kind != "model_not_found":
                kind = forced
            return self.fail_in_main(self.failure_text(kind, model_path))
        if knobs.failing("import-error"):
            return self.fail_in_main(self.traces.import_error())

        if knobs.resolves_in_run_server:
            values: dict[str, Any] = record.resolved_dict()
        else:
            values = {name: getattr(record, name) for name in srt.FIELDS}
        model = model_facts(str(values["model_path"]))
        self.log(render.server_args_line(values, knobs.dict_style_server_args))
        signal.signal(signal.SIGQUIT, self.on_sigquit)
        placement = self.placement = Placement.of(values)
        worker = placement.multi_node and placement.worker
        if worker and knobs.worker_ignores_sigterm and not knobs.failing("ignore-sigterm"):
            signal.signal(signal.SIGTERM, self.on_worker_sigterm)
        graphs = self.graphs_enabled(values)
        figures = startup_figures(values, model, graphs)
        tp = int(values.get("tp_size") or 1)
        state = ServerState(
            knobs=knobs,
            values=values,
            launch_command=render.launch_command(argv),
            figures=figures,
            model=model,
            log=self.log,
            scheduler_log=Log(knobs.log_ms, " TP0" if tp > 1 else ""),
            dp_size=max(1, int(values.get("dp_size") or 1)),
            group_broken=self.group_broken,
        )
        self.state = state
        status_fds = self.spawn(values, figures.to_json(), model.architecture, graphs)
        if placement.multi_node:
            self.join_group(values)
        if not self.wait_for_schedulers(status_fds):
            self.kill_tree(include_parent=False)
            return 1
        host = str(values.get("host") or "127.0.0.1")
        port = int(values.get("port") or 30000)
        if placement.multi_node:
            self.group_loaded()
        if worker:
            return self.serve_worker(host, port)
        return self.serve(state, host, port)

    # --- multi-node groups (group.py) ---

    def join_group(self, values: dict[str, Any]) -> None:
        """torch's rendezvous, node-wide: blocks until every node has joined (forever if one
        never does), then lets the schedulers past ``Init torch distributed begin.``"""
        placement = self.placement
        address = parse_address(values.get("dist_init_addr"))
        if address is None:
            _block_forever()  # 127.0.0.1:<random nccl port>: no other node can ever join
        if placement.worker:
            peer = self.peer = Peer(
                address,
                placement,
                self.group_broken,
                self.stop_schedulers,
                on_activate=self.activate_schedulers,
            )
            peer.start()
            _wait(peer.complete)
        else:
            store = Store(address, placement, self.group_broken)
            try:
                store.listen()
            except StoreInUse as error:
                # torch's store lives in the TP0 scheduler: it fails there, SIGQUIT follows
                family = "ipv6" if ":" in address[0] else "ipv4"
                failure = f"store-in-use {error.port} {error.code} {family}"
                if self.schedulers:
                    self.command(self.schedulers[0], failure)
                return
            self.store = store
            store.start()
            _wait(store.complete)
        for scheduler in self.schedulers:
            self.command(scheduler, "go")
        self.group_went.set()

    def group_loaded(self) -> None:
        """The ranks meet in collectives while they initialise: node 0 goes on once every node's
        schedulers are ready; a node gone meanwhile leaves everyone hanging, silently."""
        if self.peer is not None:
            self.peer.report_loaded()
        elif self.store is not None:
            loaded = self.store.loaded
            while not (loaded.wait(0.2) or self.group_broken.is_set()):
                pass
        if self.group_broken.is_set():
            _block_forever()

    @staticmethod
    def command(child: subprocess.Popen[bytes], line: str) -> None:
        if child.stdin is not None:
            with contextlib.suppress(OSError):
                child.stdin.write(line.encode() + b"\n")
                child.stdin.flush()

    def activate_schedulers(self) -> None:
        """Rank 0's gate flag reached this node (a node of rank >= 1): its schedulers go on."""
        _wait(self.group_went)  # "go" first: the schedulers read their commands in order
        for scheduler in self.schedulers:
            self.command(scheduler, "activate")

    def gate_activated(self) -> None:
        """World rank 0 (this node's first scheduler) saw its gate flag set: the broadcast of
        the flag to every other rank, on this node and on the others."""
        for scheduler in self.schedulers[1:]:
            self.command(scheduler, "activate")
        if self.store is not None:
            self.store.broadcast_activate()

    def stop_schedulers(self) -> None:
        """Rank 0's ShutdownReq reached this node: every scheduler leaves its loop and exits."""
        for scheduler in self.schedulers:
            self.command(scheduler, "shutdown")

    def serve_worker(self, host: str, port: int) -> int:
        """A node of rank >= 1 once its schedulers are ready: SGLang's dummy health server,
        then ``block_until_scheduler_exits`` (engine.py), one line per scheduler that exits."""
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        try:
            state = self.state
            metrics_on = state is not None and bool(state.values.get("enable_metrics"))
            metrics_text = state.metrics_text if state is not None and metrics_on else None
            httpd = make_dummy_server(host, port, metrics_text)
        except OSError as error:
            # SGLang logs "started" as it starts the thread; uvicorn's bind error follows from
            # the thread, through SGLang's root logger (log_config=None), and the node runs on
            # without a health server
            self.log(f"Dummy health check server started in background thread at {shown}")
            self.log(bind_error(error, host, port))
            self.log(f"Dummy health check server stopped at {shown}")
        else:
            threading.Thread(
                target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True
            ).start()
            self.log(f"Dummy health check server started in background thread at {shown}")
        if self.knobs.failing("crash-after-ready") and self.schedulers:
            seconds = self.knobs.seconds("crash-after-ready")
            threading.Thread(target=self._crash_later, args=(seconds,), daemon=True).start()
        for scheduler in self.schedulers:
            # poll, not wait(): a SIGQUIT handler's kill_tree waits on the same child, and would
            # block on the lock an interrupted wait() holds
            while scheduler.poll() is None:
                time.sleep(0.1)
            self.log(
                f"Scheduler or DataParallelController {scheduler.pid} "
                f"terminated with {scheduler.returncode}"
            )
        for child in self.children:
            if child is not self.orphan:
                with contextlib.suppress(OSError):
                    child.kill()
        return 0

    def failure_text(self, kind: str, model_path: str) -> str:
        arch = "Qwen3_5ForConditionalGeneration"
        with contextlib.suppress(OSError):
            arch = model_facts(model_path).architecture
        if kind == "incident":
            return self.traces.incident(arch)
        if kind == "extra_buffer_without_radix":
            return self.traces.extra_buffer_without_radix()
        if kind == "no_buffer_overlap":
            return self.traces.no_buffer_overlap()
        return self.traces.model_not_found(model_path)

    def fail_in_main(self, traceback_text: str) -> int:
        """An uncaught exception in SGLang's main process: (0.5.23: the finally's
        kill_process_tree line), the traceback on stderr, exit 1."""
        if self.knobs.logs_kill_process_tree:
            pid = os.getpid()
            self.log(f"kill_process_tree called: parent_pid={pid}, include_parent=False, pid={pid}")
        sys.stderr.write(traceback_text)
        sys.stderr.flush()
        return 1

    @staticmethod
    def graphs_enabled(values: dict[str, Any]) -> bool:
        config = values.get("cuda_graph_config")
        if isinstance(config, dict):
            return bool(config.get("decode", {}).get("backend") != "disabled")
        return not values.get("disable_cuda_graph")

    @staticmethod
    def graph_backend(values: dict[str, Any]) -> str:
        config = values.get("cuda_graph_config")
        if isinstance(config, dict):
            return str(config.get("decode", {}).get("backend") or "full")
        return "full"

    @staticmethod
    def graph_sizes(values: dict[str, Any]) -> list[int]:
        config = values.get("cuda_graph_config")
        if isinstance(config, dict):
            return list(config.get("decode", {}).get("bs") or [])
        return list(values.get("cuda_graph_bs") or [])

    def spawn(
        self, values: dict[str, Any], figures: dict[str, Any], architecture: str, graphs: bool
    ) -> list[int]:
        """This node's schedulers (all ranks on a single node; the node's share of TP/PP ranks
        in a group, as SGLang's _calculate_rank_ranges), capped, then the detokenizer (none on
        a node of rank >= 1, which runs no tokenizer either)."""
        knobs = self.knobs
        placement = self.placement
        tp, pp, dp = placement.tp, placement.pp, placement.dp
        group = placement.multi_node
        gate_port = values.get("gated_launch_port")
        gate = None
        if knobs.has_gated_launch and gate_port is not None:
            gate = {"host": str(values.get("host") or "127.0.0.1"), "port": int(gate_port)}
        common = {
            "parent": os.getpid(),
            "log_ms": knobs.log_ms,
            "ignore_sigterm": knobs.failing("ignore-sigterm"),
            "orphan_ttl_s": knobs.orphan_ttl_s,
        }
        status_fds: list[int] = []
        ranks = placement.local_ranks()
        for index, (d, p, t) in enumerate(ranks[:MAX_SCHEDULERS]):
            prefix = (
                (f" DP{d}" if dp > 1 else "")
                + (f" PP{p}" if pp > 1 else "")
                + (f" TP{t}" if tp > 1 else "")
            )
            rank0 = (d, p, t) == (0, 0, 0)
            first = index == 0  # the node's first scheduler: its failure modes strike here
            read_fd, write_fd = os.pipe()
            spec = {
                **common,
                "role": "scheduler",
                "title": "sglang::scheduler" + prefix.replace(" ", "_"),
                "prefix": prefix,
                "rank0": rank0,
                "world_rank": p * tp + t,  # torch's rank: pp_rank * tp_size + tp_rank
                "gate": gate,
                "first": first,
                "rendezvous": group,
                "tp_spans_nodes": group and placement.tp_spans_nodes and tp > 1,
                "orphan": first and knobs.failing("orphan"),
                "status_fd": write_fd,
                "fails": sorted(knobs.fails),
                "figures": figures,
                "architecture": architecture,
                "tp_rank0": t == 0,
                "graph_wording": "decode" if "cuda_graph_config" in values else "legacy",
                "graph_backend": self.graph_backend(values),
                "memory_wording": "0.5.23" if knobs.resolves_in_run_server else "0.5.11",
                "graph_bs": self.graph_sizes(values) if graphs else [],
                "shards": knobs.shards,
                "load_s": knobs.load_s,
                "graph_s": knobs.graph_s,
                "entry": self.entry,
                "modern": knobs.resolves_in_run_server,
            }
            child = spawn_child(spec, pass_fds=(write_fd,))
            os.close(write_fd)
            self.children.append(child)
            self.schedulers.append(child)
            if spec["orphan"]:
                self.orphan = child
            status_fds.append(read_fd)
        if group and placement.worker:
            return status_fds
        detokenizer = spawn_child(
            {**common, "role": "detokenizer", "title": "sglang::detokenizer", "orphan": False}
        )
        self.children.append(detokenizer)
        return status_fds

    def wait_for_schedulers(self, status_fds: list[int]) -> bool:
        """Read each scheduler's status pipe until ``ready``. World rank 0 (the first scheduler
        of node 0) reports ``activated`` before it, when the gated launch's flag is set."""
        for rank, descriptor in enumerate(status_fds):
            status = None
            with os.fdopen(descriptor, "rb", buffering=0) as pipe:
                data = b""
                while status != "ready":
                    chunk = pipe.read(4096)
                    if not chunk:
                        break
                    data += chunk
                    while b"\n" in data:
                        raw, _, data = data.partition(b"\n")
                        status = json.loads(raw).get("status")
                        if status == "activated":
                            self.gate_activated()
            if status == "ready":
                continue
            time.sleep(0.2)  # a failing child's SIGQUIT is handled here, if one is coming
            child = self.schedulers[rank]
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=2)
            self.log(f"Rank {rank} scheduler is dead. Please check if there are relevant logs.")
            self.log(f"Exit code: {child.returncode}")
            return False
        return True

    def serve(self, state: ServerState, host: str, port: int) -> int:
        knobs = self.knobs
        if not knobs.failing("ignore-sigterm"):
            signal.signal(signal.SIGTERM, self.on_sigterm)
        signal.signal(signal.SIGINT, self.on_sigint)
        pid = os.getpid()
        self.log.uvicorn("INFO", f"Started server process [{pid}]")
        self.log.uvicorn("INFO", "Waiting for application startup.")
        self.log.uvicorn("INFO", "Application startup complete.")
        skip_warmup = bool(state.values.get("skip_server_warmup"))
        if (
            skip_warmup
        ):  # SGLang's warm-up thread starts before the bind and has nothing to wait for
            self.mark_ready(state)
        try:
            httpd = make_server(state, host, port)
        except OSError as error:
            self.log.uvicorn("ERROR", bind_error(error, host, port))
            self.log.uvicorn("INFO", "Waiting for application shutdown.")
            self.log.uvicorn("INFO", "Application shutdown complete.")
            self.kill_tree(include_parent=False)
            return 1
        self.log.uvicorn("INFO", f"Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        if not skip_warmup:
            threading.Thread(target=self.warm_up, args=(state, host, port), daemon=True).start()
        with contextlib.suppress(_Stop):
            httpd.serve_forever(poll_interval=0.1)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not interrupt this
        state.draining.set()
        self.log.uvicorn("INFO", "Shutting down")
        httpd.server_close()
        self.log.uvicorn("INFO", "Waiting for application shutdown.")
        self.log.uvicorn("INFO", "Application shutdown complete.")
        self.log.uvicorn("INFO", f"Finished server process [{pid}]")
        self.kill_tree(include_parent=False)
        return 0

    def warm_up(self, state: ServerState, host: str, port: int) -> None:
        """SGLang's _wait_and_warmup: wait for the model-info endpoint, one /generate, ready."""
        wildcard = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}  # noqa: S104 - a map
        target = wildcard.get(host, host)
        base = f"http://[{target}]:{port}" if ":" in target else f"http://{target}:{port}"
        info = "/model_info" if self.knobs.resolves_in_run_server else "/get_model_info"
        # with --api-key, SGLang's warm-up sends it (0.5.23 http_server._execute_server_warmup)
        key = state.values.get("api_key")
        auth = {"Authorization": f"Bearer {key}"} if key else {}
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                asked = urllib.request.Request(base + info, headers=auth)  # noqa: S310 - own loopback
                with urllib.request.urlopen(asked, timeout=5) as response:  # noqa: S310 - own loopback
                    response.read()
                break
            except OSError:
                time.sleep(0.05)
        time.sleep(self.knobs.warmup_s)
        request = urllib.request.Request(  # noqa: S310 - own loopback
            base + "/generate",
            data=json.dumps(WARMUP_PROMPT).encode(),
            headers={"content-type": "application/json", **auth},
            method="POST",
        )
        with contextlib.suppress(OSError), urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            response.read()
        self.mark_ready(state)

    def mark_ready(self, state: ServerState) -> None:
        if self.group_broken.is_set():
            return  # the warm-up request never came back from a hung group
        state.ready_after_s = round(time.monotonic() - self.started, 3)
        state.ready.set()
        self.log("The server is fired up and ready to roll!")
        crash_after = self.knobs.fails.get("crash-after-ready", None)
        if self.knobs.failing("crash-after-ready") and self.schedulers:
            threading.Thread(
                target=self._crash_later, args=(crash_after or 0.0,), daemon=True
            ).start()

    def _crash_later(self, seconds: float) -> None:
        time.sleep(seconds)
        stdin = self.schedulers[0].stdin
        if stdin is not None:
            with contextlib.suppress(OSError):
                stdin.write(b"crash\n")
                stdin.flush()


def _wait(event: threading.Event) -> None:
    """Wait in short slices, so that signal handlers keep running on the main thread."""
    while not event.wait(0.2):
        pass


def _block_forever() -> NoReturn:
    """A hang: torch's rendezvous or an NCCL collective that never completes."""
    while True:
        time.sleep(3600)


def _load_plugins() -> None:
    """SGLang's entry points load the plugins before parsing (0.5.11+)."""
    try:
        from sglang.srt.plugins import load_plugins
    except ModuleNotFoundError:  # the imitated release predates them
        return
    load_plugins()


def _die_after(seconds: float) -> None:
    time.sleep(seconds)
    os._exit(1)


def main(argv: Sequence[str], entry: str) -> int:
    """Run the stand-in as ``python -m sglang.launch_server`` (entry ``launch_server``) or
    ``sglang serve`` (entry ``serve``); returns the exit code (or never returns: SIGKILL)."""
    try:
        knobs = knobs_module.read_knobs()
    except knobs_module.KnobError as error:
        sys.stderr.write(f"orch SGLang stand-in (NOT SGLang): {error}\n")
        return 2
    if knobs.failing("die-after"):
        threading.Thread(target=_die_after, args=(knobs.seconds("die-after"),), daemon=True).start()
    if knobs.failing("ignore-sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return Launcher(knobs, entry).run(argv)
