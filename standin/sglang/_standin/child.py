"""A child of the stand-in (NOT SGLang): ``sglang::scheduler`` or ``sglang::detokenizer``.

Run as ``python -m sglang._standin.child SPEC_JSON`` by the main process. A scheduler prints what
SGLang's scheduler prints while it loads (weights, memory pools, CUDA graphs, token capacity),
reports ready to the main process over a pipe, then blocks until killed. Failures follow SGLang's
path: ``Scheduler hit an exception: <traceback>`` then SIGQUIT to the parent.

In a multi-node group (group.py) a scheduler stops after ``Init torch distributed begin.`` until
the main process, which holds the node's rendezvous connection, writes ``go`` on its stdin (or
``store-in-use PORT ERRNO``: torch's store failed to listen, the scheduler fails as SGLang's does).
``shutdown`` on stdin later is rank 0's ShutdownReq: the scheduler leaves its loop and exits 0.

With ``--gated-launch-port`` (0.5.19+, gate.py) every scheduler stops after ``Init torch
distributed ends.``, before ``Load weight begin``: world rank 0 serves the control server and,
once ``POST /gate/activate`` has set its flag, writes ``{"status": "activated"}`` on its status
pipe (the main process passes it on to every other rank); the other ranks wait for ``activate``
on stdin.

The memory lines are SGLang's own f-strings, per imitated release (``sglang/srt/`` of the PyPI
releases 0.5.11 and 0.5.23; a release between them gets one of the two wordings, switched where
server.py switches families, which is not checked against those releases); the figures in them
are the stand-in's illustrative ones (memory.py), not measured.
"""

from __future__ import annotations

import json
import os
import select
import signal
import sys
import time
from typing import Any

from sglang._standin import gate
from sglang._standin.logs import Log, Progress, bind_error, uvicorn_default
from sglang._standin.memory import KV_DTYPE, Figures
from sglang._standin.proc import die_with_parent, set_title
from sglang._standin.tracebacks import Traces


def _block_forever() -> None:
    while True:
        time.sleep(3600)


class Commands:
    """The main process's commands, one per line on stdin, read straight from the descriptor
    (``select`` + ``os.read``, no ``sys.stdin`` buffer) so that a timed wait sees every line."""

    def __init__(self, descriptor: int = 0) -> None:
        self.descriptor = descriptor
        self._buffer = b""
        self._eof = False

    def next(self, timeout: float | None = None) -> str | None:
        """The next line, stripped; ``""`` when ``timeout`` passes first; None at EOF (the main
        process is gone)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            if self._eof:
                return None
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            readable, _, _ = select.select([self.descriptor], [], [], left)
            if not readable:
                return ""
            chunk = os.read(self.descriptor, 4096)
            if not chunk:
                self._eof = True
                if self._buffer:
                    self._buffer += b"\n"  # a last line without its newline still counts
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode(errors="replace").strip()


class Scheduler:
    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.commands = Commands()
        self.log = Log(bool(spec["log_ms"]), str(spec["prefix"]))
        self.figures = Figures.from_json(spec["figures"])
        self.traces = Traces(str(spec["entry"]), bool(spec["modern"]))
        self.fails = set(spec["fails"])
        self.rank0 = bool(spec["rank0"])  # global TP rank 0: the progress bars
        # the node's first scheduler: where ORCH_STANDIN_FAIL strikes, per node
        self.first = bool(spec.get("first", self.rank0))

    def fail(self, traceback_text: str) -> None:
        """SGLang's run_scheduler_process: log the traceback, SIGQUIT the parent, return."""
        self.log(f"Scheduler hit an exception: {traceback_text}")
        parent = int(self.spec["parent"])
        if os.getppid() == parent:
            os.kill(parent, signal.SIGQUIT)
        sys.exit(0)

    def run(self) -> None:
        figures = self.figures
        self.log("Init torch distributed begin.")
        if self.spec.get("rendezvous"):
            self.wait_for_group()
        if "nccl" in self.fails and self.first:
            self.fail(self.traces.nccl())
        self.log("Init torch distributed ends. mem usage=0.00 GB")
        if self.spec.get("gate"):
            self.gated_launch(self.spec["gate"])
        self.log(f"Load weight begin. avail mem={figures.avail_start_gb:.2f} GB")
        if "hang" in self.fails:
            _block_forever()
        started = time.monotonic()
        self.load_weights()
        self.log(
            f"Load weight end. elapsed={time.monotonic() - started:.2f} s, "
            f"type={self.spec['architecture']}, avail mem={figures.avail_after_load_gb:.2f} GB, "
            f"mem usage={figures.weights_gb:.2f} GB."
        )
        if "cuda-oom" in self.fails and self.first:
            self.fail(self.traces.cuda_oom())
        self.allocate_pools()
        if figures.graphs:
            self.capture_graphs()
        if self.spec.get("tp_rank0", self.rank0):  # managers/scheduler.py: tp_rank 0 only
            self.log(
                f"max_total_num_tokens={figures.max_total_num_tokens}, "
                f"chunked_prefill_size={figures.chunked_prefill_size}, "
                f"max_prefill_tokens={figures.max_prefill_tokens}, "
                f"max_running_requests={figures.max_running_requests}, "
                f"context_len={figures.context_len}, "
                f"available_gpu_mem={figures.avail_after_graph_gb:.2f} GB"
            )
        self.report("ready")
        os.close(int(self.spec["status_fd"]))
        self.serve_commands()

    def report(self, status: str) -> None:
        """A line on the status pipe to the main process."""
        os.write(int(self.spec["status_fd"]), json.dumps({"status": status}).encode() + b"\n")

    def gated_launch(self, config: dict[str, Any]) -> None:
        """SGLang's ``maybe_wait_for_gated_launch`` (gate.py): world rank 0 serves the control
        server; every rank waits until rank 0's flag is set (forever if it never is)."""
        rank = int(self.spec.get("world_rank", 0))
        if self.rank0:
            host, port = str(config["host"]), int(config["port"])
            server = gate.GateServer()
            error = server.serve(host, port)
            self.log(gate.control_server_started(host, port))  # logged as the thread starts
            if error is not None:  # uvicorn's thread logs it, exits; the flag stays unset
                uvicorn_default("ERROR", bind_error(error, host, port))
            self.log(gate.waiting(rank))
            elapsed = gate.wait_until_activated(server.flag.is_set, time.sleep, self.log, rank)
            self.report("activated")  # the broadcast: the main process passes it on
        else:
            self.log(gate.waiting(rank))
            got: list[bool] = []

            def pause(seconds: float) -> None:
                """Blocked in the broadcast: wait for rank 0's ``activate`` meanwhile."""
                deadline = time.monotonic() + seconds
                while not got and (left := deadline - time.monotonic()) > 0:
                    command = self.commands.next(left)
                    if command is None or command == "shutdown":
                        sys.exit(0)  # the main process is gone, or rank 0's ShutdownReq
                    if command == "activate":
                        got.append(True)

            elapsed = gate.wait_until_activated(lambda: bool(got), pause, self.log, rank)
        self.log(gate.activated(elapsed))

    def wait_for_group(self) -> None:
        """Block in init_process_group until the main process says the world is complete."""
        line = self.commands.next()
        if line is None:  # the main process is gone
            sys.exit(0)
        command = line.split()
        if command[:1] == ["store-in-use"] and len(command) == 4:
            self.fail(
                self.traces.store_in_use(int(command[1]), int(command[2]), command[3] == "ipv6")
            )
        if self.spec.get("tp_spans_nodes"):
            # distributed/device_communicators/custom_all_reduce_utils.py (0.5.11 l.432)
            self.log("CustomAllreduce is disabled because this process group spans across nodes.")

    def allocate_pools(self) -> None:
        """The mamba state pool (hybrid models), the KV pool, then ``Memory pool end``."""
        figures = self.figures
        modern = self.spec.get("memory_wording") == "0.5.23"
        self.log(f"Using KV cache dtype: {KV_DTYPE}")
        if figures.capped_by_mamba is not None and modern:
            # 0.5.23 mem_cache/kv_cache_configurator.py:3141 (0.5.11 caps silently)
            self.log(
                f"max_running_requests is capped to {figures.capped_by_mamba} by the mamba state "
                f"cache (max_mamba_cache_size={figures.mamba_slots}, "
                f"{figures.mamba_slots_per_request} state slots per "
                "request). To raise it: increase --mamba-full-memory-ratio or "
                "--max-mamba-cache-size, or halve the state size with --mamba-ssm-dtype bfloat16."
            )
        if figures.mamba_slots:
            # mem_cache/memory_pool.py:325/335 (0.5.11), :984/1005 (0.5.23): no space before GB
            line = (
                f"Mamba Cache is allocated. max_mamba_cache_size: {figures.mamba_slots}, "
                f"conv_state size: {figures.mamba_conv_gb:.2f}GB, "
                f"ssm_state size: {figures.mamba_ssm_gb:.2f}GB "
            )
            if figures.speculative:
                line += (
                    f"intermediate_ssm_state_cache size: {figures.mamba_intermediate_ssm_gb:.2f}GB "
                    "intermediate_conv_window_cache size: "
                    f"{figures.mamba_intermediate_conv_gb:.2f}GB "
                )
            self.log(line)
        half = figures.kv_gb / 2
        dtype = f"dtype: {KV_DTYPE}, " if modern else ""  # memory_pool.py:735 / :2088
        self.log(
            f"KV Cache is allocated. {dtype}#tokens: {figures.max_total_num_tokens}, "
            f"K size: {half:.2f} GB, V size: {half:.2f} GB"
        )
        self.log(f"Memory pool end. avail mem={figures.avail_after_pool_gb:.2f} GB")

    def load_weights(self) -> None:
        shards = int(self.spec["shards"])
        pause = float(self.spec["load_s"]) / shards
        if not self.rank0:
            time.sleep(pause * shards)
            return
        bar = Progress("Loading safetensors checkpoint shards", shards)
        for _ in range(shards):
            time.sleep(pause)
            bar.update()
        bar.close()

    def capture_graphs(self) -> None:
        figures = self.figures
        sizes: list[int] = list(self.spec["graph_bs"])
        started = time.monotonic()
        # 0.5.14+ (cuda_graph_config): 0.5.23's model_runner_components/cuda_graph_setup.py:759
        # and :788, "target verify" under speculation; up to 0.5.13: 0.5.11's model_runner.py:2779
        # and :2797
        modern = self.spec["graph_wording"] == "decode"
        name = "target verify" if figures.speculative else "target decode"
        if modern:
            per_request = figures.draft_tokens if figures.speculative else 1
            self.log(
                f"Capture {name} CUDA graph begin. backend={self.spec.get('graph_backend', 'full')}"
                f", num_tokens_per_req={per_request}, "
                f"avail mem={figures.avail_after_pool_gb:.2f} GB"
            )
        else:
            self.log(
                "Capture cuda graph begin. This can take up to several minutes. "
                f"avail mem={figures.avail_after_pool_gb:.2f} GB"
            )
            self.log(f"Capture cuda graph bs {sizes}")
        pause = float(self.spec["graph_s"]) / max(1, len(sizes))
        if self.rank0:
            bar = Progress(
                f"Capturing batches (bs=1 avail_mem={figures.avail_after_graph_gb:.2f} GB)",
                len(sizes),
                style="tqdm",
            )
            for _ in sizes:
                time.sleep(pause)
                bar.update()
            bar.close()
        else:
            time.sleep(pause * len(sizes))
        elapsed = time.monotonic() - started
        if modern:
            self.log(
                f"Capture {name} CUDA graph end. bs={sizes}, elapsed={elapsed:.2f} s, "
                f"mem usage={figures.graph_gb:.2f} GB, "
                f"avail mem={figures.avail_after_graph_gb:.2f} GB."
            )
        else:
            self.log(
                f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. "
                f"mem usage={figures.graph_gb:.2f} GB. "
                f"avail mem={figures.avail_after_graph_gb:.2f} GB."
            )

    def serve_commands(self) -> None:
        """Commands from the main process, one per line on stdin; EOF when it is gone."""
        while (line := self.commands.next()) is not None:
            if line == "crash":
                self.fail(self.traces.illegal_memory_access())
            if line == "shutdown":  # ShutdownReq: leave the event loop, exit 0
                sys.exit(0)
        if self.spec["orphan"]:
            time.sleep(float(self.spec["orphan_ttl_s"]))
            sys.exit(0)
        _block_forever()


def main(argv: list[str]) -> None:
    spec: dict[str, Any] = json.loads(argv[0])
    set_title(str(spec["title"]))
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C on the group: die quietly
    if spec.get("ignore_sigterm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if spec.get("orphan"):
        os.setsid()  # out of the launcher's process group, and no PDEATHSIG
    else:
        die_with_parent()
        if os.getppid() != int(spec["parent"]):  # the parent died before prctl took effect
            sys.exit(0)
    if spec["role"] == "scheduler":
        Scheduler(spec).run()
    else:
        for _ in sys.stdin:
            pass
        _block_forever()


if __name__ == "__main__":
    main(sys.argv[1:])
