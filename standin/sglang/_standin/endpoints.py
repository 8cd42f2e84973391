"""SGLang's HTTP endpoints, served by the standard library instead of uvicorn/FastAPI.

``/health`` and ``/health_generate`` answer 503 until the server is ready (and again while it
drains after SIGTERM), then 200. ``/server_info`` (and the deprecated ``/get_server_info``) carry
every resolved ServerArgs field at top level, as SGLang's do, plus ``"orch_standin": true``.
``/v1/loads`` answers in the imitated release's JSON shape, with the stand-in's illustrative
memory figures (memory.py) and the requests in flight (inflight.py) as running, and waiting
beyond ``max_running_requests``. Generation endpoints return a tiny canned answer after
``ORCH_STANDIN_GENERATE_S`` plus ``ORCH_STANDIN_TOKEN_S`` per ``max_new_tokens`` asked for, and
keep answering while the server drains after SIGTERM, as SGLang 0.5.23 does (its request path
has no ``gracefully_exit`` check). Every request gets uvicorn's access-log line on stdout.

In a multi-node group (group.py), node 0 serves this app; when a peer node is gone its
``/health`` waits ``ORCH_STANDIN_HEALTH_TIMEOUT_S`` and answers 503 with SGLang's "Health check
failed" line (the health generation never comes back from a scheduler hung in NCCL), and a
generation request hangs, as it would there. Nodes of rank >= 1 serve only the dummy health app
(``dummy.make_dummy_server``): 200 whatever state the group is in, as SGLang's
``launch_dummy_health_check_server``.
"""

from __future__ import annotations

import hmac
import json
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from sglang._standin import live, metrics
from sglang._standin.group import Placement
from sglang._standin.inflight import InFlight
from sglang._standin.knobs import Knobs
from sglang._standin.logs import Log
from sglang._standin.memory import ACCELERATOR, Figures
from sglang._standin.model import ModelFacts
from sglang._standin.render import redacted

CANNED_TEXT = " Paris. It is the capital"
# /v1/loads?include=...: 0.5.23 managers/load_snapshot.py LoadSnapshot.VALID_SECTIONS (0.5.11:
# managers/io_struct.py GetLoadsReqInput.VALID_SECTIONS, the same)
LOAD_SECTIONS = frozenset({"core", "memory", "spec", "lora", "disagg", "queues", "all"})
CANNED_IDS = [12095, 13, 1084, 374, 279, 6722, 323, 7001]


@dataclass
class ServerState:
    knobs: Knobs
    values: dict[str, Any]  # resolved ServerArgs
    launch_command: str
    figures: Figures
    model: ModelFacts
    log: Log  # the main process's logger
    scheduler_log: Log  # lines the scheduler would print (prefix TP0 when tp > 1)
    dp_size: int
    started: float = field(default_factory=time.time)
    ready: threading.Event = field(default_factory=threading.Event)
    draining: threading.Event = field(default_factory=threading.Event)
    ready_after_s: float | None = None
    group_broken: threading.Event = field(default_factory=threading.Event)  # a peer node is gone
    last_receive: float = field(default_factory=time.time)  # the last answer from a scheduler
    inflight: InFlight = field(default_factory=InFlight)  # SGLang's rid_to_state
    # what POST /set_internal_state changed: every scheduler's view shows it (live.py)
    overrides: dict[str, Any] = field(default_factory=dict)

    # --- payloads ---

    def server_info(self) -> dict[str, Any]:
        knobs = self.knobs
        payload = redacted(self.values, knobs.dict_style_server_args)
        if knobs.has_launch_command:
            payload["launch_command"] = self.launch_command
        payload["status"] = "ready"
        payload["max_total_num_tokens"] = self.figures.max_total_num_tokens
        payload["max_req_input_len"] = self.figures.max_req_input_len
        if knobs.version >= (0, 5, 23):
            payload["startup_time"] = {
                "total": self.ready_after_s,
                "weight_loading": knobs.load_s,
                "cuda_graph": {"decode": knobs.graph_s if self.figures.graphs else 0.0},
            }
            payload["hicache_object_layout"] = None
            payload["kv_events"] = None
        payload["internal_states"] = [self.internal_state() for _ in range(self.dp_size)]
        payload["version"] = knobs.version_text
        if knobs.version >= (0, 5, 23):
            payload["frontend"] = "python"
        payload["orch_standin"] = True
        return payload

    def internal_state(self) -> dict[str, Any]:
        """A scheduler's view: its copy of ServerArgs as the scheduler changed it, plus stats."""
        state = redacted(self.values, self.knobs.dict_style_server_args)
        state.update(self.overrides)
        figures = self.figures
        # max_running_requests stays the resolved argument, as SGLang's does (0.5.11
        # scheduler.py get_internal_state, 0.5.23 scheduler_components/internal_state.py); the
        # scheduler's own, after the KV and mamba caps, is effective_max_running_requests_per_dp.
        state["last_gen_throughput"] = 0.0
        state["memory_usage"] = {
            "weight": round(figures.weights_gb, 2),
            "kvcache": round(figures.kv_gb, 2),
            "token_capacity": figures.max_total_num_tokens,
            "graph": round(figures.graph_gb, 2),
        }
        state["effective_max_running_requests_per_dp"] = figures.max_running_requests
        return state

    def loads(self, query: str) -> tuple[int, dict[str, Any]]:
        """``GET /v1/loads[?include=core,memory,...][&dp_rank=N]``: one load per DP rank, in the
        imitated release's shape: 0.5.23 entrypoints/v1_loads.py ``get_loads`` over
        managers/load_snapshot.py ``LoadSnapshot.to_dict``; up to 0.5.22 0.5.11's
        entrypoints/v1_loads.py over managers/io_struct.py ``GetLoadsReqOutput``. JSON whatever
        ``format`` asks (SGLang's ``format=prometheus`` text is not imitated)."""
        params = urllib.parse.parse_qs(query)
        include_text = (params.get("include") or [""])[0]
        include = {part.strip() for part in include_text.split(",")} if include_text else None
        ranks = list(range(self.dp_size))
        if "dp_rank" in params:
            dp_text = params["dp_rank"][0]
            try:
                wanted = int(dp_text)
            except ValueError:  # FastAPI's validation of the query parameter
                detail = {
                    "type": "int_parsing",
                    "loc": ["query", "dp_rank"],
                    "msg": "Input should be a valid integer, unable to parse string as an integer",
                    "input": dp_text,
                }
                return 422, {"detail": [detail]}
            # 0.5.11 filters on the scheduler's dp_rank, None without DP: nothing matches then
            has_rank = self.dp_size > 1 or self.knobs.version >= (0, 5, 23)
            ranks = [wanted] if has_rank and 0 <= wanted < self.dp_size else []
        if self.knobs.version >= (0, 5, 23):
            invalid = set() if include is None or "all" in include else include - LOAD_SECTIONS
            if invalid and ranks:  # LoadSnapshot.to_dict raises, once per load
                return 400, {
                    "detail": f"Invalid include sections: {invalid}. "
                    f"Valid options: {sorted(LOAD_SECTIONS)}"
                }
            return 200, self._loads_0523(include, ranks)
        return 200, self._loads_0511(include, ranks)

    def _memory_metrics(self) -> dict[str, Any]:
        figures = self.figures
        return {
            "weight_gb": round(figures.weights_gb, 3),
            "kv_cache_gb": round(figures.kv_gb, 3),
            "graph_gb": round(figures.graph_gb, 3),
            "token_capacity": figures.max_total_num_tokens,
        }

    def _loads_0523(self, include: set[str] | None, ranks: list[int]) -> dict[str, Any]:
        every = include is None or "all" in include
        tp = max(1, int(self.values.get("tp_size") or 1))
        pp = max(1, int(self.values.get("pp_size") or 1))
        accelerators = tp * pp
        if self.values.get("enable_dp_attention"):
            accelerators //= self.dp_size
        sections = (
            ("memory", "memory", self._memory_metrics()),
            # speculative: only once a speculative forward ran; lora: only with --enable-lora
            (
                "disaggregation",
                "disagg",
                {
                    "mode": "null",
                    "prefill_bootstrap_queue_reqs": 0,
                    "prefill_inflight_queue_reqs": 0,
                    "decode_prealloc_queue_reqs": 0,
                    "decode_transfer_queue_reqs": 0,
                    "decode_retracted_queue_reqs": 0,
                    "kv_transfer_speed_gb_s": 0.0,
                    "kv_transfer_latency_ms": 0.0,
                },
            ),
            (
                "queues",
                "queues",
                {"waiting": 0, "grammar": 0, "paused": 0, "retracted": 0, "prealloc_ready": 0},
            ),
        )
        loads = []
        for rank in ranks:
            running, waiting = self.rank_load(rank)
            load: dict[str, Any] = {
                "timestamp": time.time(),
                "dp_rank": rank,
                "num_running_reqs": running,
                "num_waiting_reqs": waiting,
                "num_waiting_uncached_tokens": 0,
                "num_used_tokens": 0,
                "num_total_tokens": 0,
                "num_active_tokens": 0,
                "num_prealloc_ready_tokens": 0,
                "max_total_num_tokens": self.figures.max_total_num_tokens,
                "max_running_requests": self.figures.max_running_requests,
                "token_usage": 0.0,
                "gen_throughput": 0.0,
                "cache_hit_rate": 0.0,
                "utilization": 0.0,
                "total_prefill_uncached_tokens": 0,
                "total_prefill_busy_us": 0,
                "decode_moments": None,
            }
            _set_figures(load, self.knobs.load_figures(rank), every or "spec" in (include or ()))
            if include != {"core"}:
                for key, name, section in sections:
                    if every or name in (include or ()):
                        waiting = load["num_waiting_reqs"]
                        load[key] = _queues(section, waiting) if key == "queues" else section
            loads.append(load)
        return {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": self.knobs.version_text,
            "accelerator": ACCELERATOR,
            "num_accelerators": accelerators,
            "loads": loads,
        }

    def _loads_0511(self, include: set[str] | None, ranks: list[int]) -> dict[str, Any]:
        every = include is None or "all" in include
        sections = (
            ("memory", "memory", self._memory_metrics()),
            (
                "disaggregation",
                "disagg",
                {
                    "mode": "null",
                    "prefill_prealloc_queue_reqs": 0,
                    "prefill_inflight_queue_reqs": 0,
                    "decode_prealloc_queue_reqs": 0,
                    "decode_transfer_queue_reqs": 0,
                    "decode_retracted_queue_reqs": 0,
                    "kv_transfer_speed_gb_s": 0.0,
                    "kv_transfer_latency_ms": 0.0,
                },
            ),
            ("queues", "queues", {"waiting": 0, "grammar": 0, "paused": 0, "retracted": 0}),
        )
        loads = []
        for rank in ranks:
            # dataclasses.asdict without None values and without the timestamp
            load: dict[str, Any] = {"dp_rank": rank} if self.dp_size > 1 else {}
            running, waiting = self.rank_load(rank)
            load.update(
                num_running_reqs=running,
                num_waiting_reqs=waiting,
                num_used_tokens=0,
                num_total_tokens=0,
                max_total_num_tokens=self.figures.max_total_num_tokens,
                token_usage=0.0,
                gen_throughput=0.0,
                cache_hit_rate=0.0,
                utilization=0.0,
                max_running_requests=self.figures.max_running_requests,
            )
            _set_figures(load, self.knobs.load_figures(rank), every or "spec" in (include or ()))
            for key, name, section in sections:
                if every or name in (include or ()):
                    waiting = load["num_waiting_reqs"]
                    load[key] = _queues(section, waiting) if key == "queues" else section
            load["num_total_reqs"] = load["num_running_reqs"] + load["num_waiting_reqs"]
            loads.append(load)
        count = len(loads)
        total_running = sum(load["num_running_reqs"] for load in loads)
        total_waiting = sum(load["num_waiting_reqs"] for load in loads)
        aggregate = {
            "total_running_reqs": total_running,
            "total_waiting_reqs": total_waiting,
            "total_reqs": total_running + total_waiting,
            "total_used_tokens": 0,
            "total_tokens": 0,
            "avg_token_usage": 0.0,
            "avg_throughput": 0.0,
            "avg_utilization": 0.0,
        }
        return {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": self.knobs.version_text,
            "dp_rank_count": count,
            "loads": loads,
            "aggregate": aggregate,
        }

    def metrics_text(self) -> str:
        """``GET /metrics`` (metrics.py): this node's reporting schedulers, their figures the
        ones ``/v1/loads`` gives their DP rank."""
        placement = Placement.of(self.values)
        schedulers = metrics.reporting_schedulers(
            self.values, placement.tp_ranks, placement.pp_ranks
        )
        return metrics.exposition(self.values, schedulers, self.scheduler_load)

    def scheduler_load(self, labels: metrics.SchedulerLabels) -> dict[str, float]:
        """One scheduler's gauges, as ``/v1/loads`` reports its DP rank (running and waiting
        on rank 0's queue only; the pool size from the memory figures; the rest 0)."""
        running, waiting = self.rank_load(labels.dp_rank or 0)
        return {
            "num_running_reqs": running,
            "num_queue_reqs": waiting,
            "max_total_num_tokens": self.figures.max_total_num_tokens,
        }

    def rank_load(self, rank: int) -> tuple[int, int]:
        """(running, waiting) of one DP rank: the stand-in's one scheduler queue is rank 0's
        (a request in flight is counted once, not once per rank)."""
        if rank != 0:
            return 0, 0
        return self.inflight.split(int(self.figures.max_running_requests or 1))

    def generation_time(self, body: dict[str, Any]) -> float:
        """How long a generation request takes: the knobs' fixed part, plus the per-token part
        times the ``max_new_tokens`` it asks for (sampling_params, or OpenAI's max_tokens)."""
        params = body.get("sampling_params")
        asked = params.get("max_new_tokens") if isinstance(params, dict) else None
        asked = asked if asked is not None else body.get("max_tokens")
        tokens = asked if isinstance(asked, int) and not isinstance(asked, bool) else 0
        return self.knobs.generate_s + self.knobs.token_s * max(tokens, 0)

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.values.get("model_path"),
            "tokenizer_path": self.values.get("tokenizer_path"),
            "is_generation": True,
            "preferred_sampling_params": self.values.get("preferred_sampling_params"),
            "weight_version": self.values.get("weight_version", "default"),
            "has_image_understanding": self.model.architecture.endswith("ConditionalGeneration"),
            "has_audio_understanding": False,
            "model_type": self.model.model_type,
            "architectures": [self.model.architecture],
        }

    def served_name(self) -> str:
        return str(self.values.get("served_model_name") or self.values.get("model_path"))

    def models(self) -> dict[str, Any]:
        name = self.served_name()
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": int(self.started),
                    "owned_by": "sglang",
                    "root": name,
                    "parent": None,
                    "max_model_len": self.figures.context_len,
                }
            ],
        }

    def health_check_failed(self) -> None:
        """SGLang's health_generate when no answer comes (http_server.py, 0.5.11 to 0.5.23)."""
        tic = time.time()
        time.sleep(self.knobs.health_timeout_s)
        timeout = f"{self.knobs.health_timeout_s:g}"
        tic_time = time.strftime("%H:%M:%S", time.localtime(tic))
        last = time.strftime("%H:%M:%S", time.localtime(self.last_receive))
        self.log(
            "Health check failed. Server couldn't get a response from detokenizer for last "
            f"{timeout} seconds. tic start time: {tic_time}. last_heartbeat time: {last}"
        )

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        self.log_prefill(7)
        return {
            "text": CANNED_TEXT,
            "output_ids": CANNED_IDS,
            "meta_info": {
                "id": uuid.uuid4().hex,
                "finish_reason": {"type": "length", "length": len(CANNED_IDS)},
                "prompt_tokens": 7,
                "weight_version": "default",
                "completion_tokens": len(CANNED_IDS),
                "cached_tokens": 0,
                "e2e_latency": 0.012,
            },
        }

    def chat(self, body: dict[str, Any], kind: str) -> dict[str, Any]:
        self.log_prefill(12)
        usage = {"prompt_tokens": 12, "total_tokens": 14, "completion_tokens": 2}
        common = {
            "id": uuid.uuid4().hex,
            "created": int(time.time()),
            "model": str(body.get("model") or self.served_name()),
            "usage": usage,
        }
        if kind == "chat":
            choice: dict[str, Any] = {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "Paris.",
                    "reasoning_content": None,
                    "tool_calls": None,
                },
                "logprobs": None,
                "finish_reason": "stop",
            }
            return {**common, "object": "chat.completion", "choices": [choice]}
        choice = {"index": 0, "text": " Paris.", "logprobs": None, "finish_reason": "stop"}
        return {**common, "object": "text_completion", "choices": [choice]}

    def log_prefill(self, tokens: int) -> None:
        self.last_receive = time.time()
        self.scheduler_log(
            f"Prefill batch, #new-seq: 1, #new-token: {tokens}, #cached-token: 0, "
            "token usage: 0.00, #running-req: 0, #queue-req: 0"
        )


class UvicornHandler(BaseHTTPRequestHandler):
    """What every HTTP app of the stand-in answers with, as uvicorn does: its server header,
    JSON or text bodies with their length, nothing written for HEAD. ``answered`` is told each
    answer (the API server writes uvicorn's access line there; the dummy app logs nothing)."""

    protocol_version = "HTTP/1.1"
    server_version = "uvicorn"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        """http.server's own lines are never written (uvicorn's, where any, replace them)."""

    def answered(self, status: int) -> None:
        """Each answer once sent (the access line, where the app has one)."""

    def _respond(self, status: int, body: bytes, content_type: str | None) -> None:
        self.send_response(status)
        if content_type is not None:
            self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self.answered(status)

    def _send(self, status: int, payload: Any = None) -> None:
        body = b"" if payload is None else json.dumps(payload).encode()
        self._respond(status, body, None if payload is None else "application/json")

    def _send_text(self, status: int, text: str) -> None:
        """A Prometheus exposition (prometheus_client's content type)."""
        self._respond(status, text.encode(), metrics.CONTENT_TYPE)


class _Handler(UvicornHandler):
    state: ServerState  # set on the subclass make_server() builds

    def answered(self, status: int) -> None:
        host, port = self.client_address[:2]
        phrase = HTTPStatus(status).phrase
        self.state.log.uvicorn(
            "INFO",
            f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {status} {phrase}',
            stream=sys.stdout,
        )

    def _body(self) -> dict[str, Any]:
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            parsed = json.loads(raw or b"{}")
        except ValueError:
            return {}
        return parsed if isinstance(parsed, dict) else {}

    def _authorized(self, path: str) -> bool:
        """SGLang's API-key middleware (srt/utils/auth.py ``decide_request_auth``, the same in
        0.5.11 and 0.5.23) for its ordinary endpoints, the only kind the stand-in serves: with
        ``--api-key`` every path but ``/health*``, ``/ready*`` and ``/metrics*`` needs
        ``Authorization: Bearer KEY``, else 401 ``{"error": "Unauthorized"}``."""
        key = self.state.values.get("api_key")
        if not key or path.startswith(("/health", "/ready", "/metrics")):
            return True
        scheme, _, token = (self.headers.get("Authorization") or "").partition(" ")
        if scheme.lower() == "bearer" and hmac.compare_digest(token.encode(), str(key).encode()):
            return True
        self._send(401, {"error": "Unauthorized"})
        return False

    def do_GET(self) -> None:
        state = self.state
        path, _, query = self.path.partition("?")
        if not self._authorized(path):
            return
        if path in ("/health", "/health_generate"):
            if state.draining.is_set():
                state.log("Health check request received during shutdown. Returning 503.")
                self._send(503)
            elif state.ready.is_set() and state.group_broken.is_set():
                state.health_check_failed()
                self._send(503)
            elif state.ready.is_set():
                state.last_receive = time.time()  # the health generation came back
                self._send(200)
            else:
                self._send(503)
        elif path == "/ready" and state.knobs.has_ready_endpoint:
            self._send(200 if state.ready.is_set() and not state.draining.is_set() else 503)
        elif path == "/server_info":
            self._send(200, state.server_info())
        elif path == "/get_server_info":
            state.log(
                "Endpoint '/get_server_info' is deprecated and will be removed in a future "
                "version. Please use '/server_info' instead."
            )
            self._send(200, state.server_info())
        elif path in ("/model_info", "/get_model_info"):
            self._send(200, state.model_info())
        elif path == "/v1/models":
            self._send(200, state.models())
        elif path == "/v1/loads":
            self._send(*state.loads(query))
        elif path == "/metrics" and state.values.get("enable_metrics"):
            self._send_text(200, state.metrics_text())
        elif path in ("/generate", "/v1/chat/completions", "/v1/completions"):
            self._send(405, {"detail": "Method Not Allowed"})
        else:
            self._send(404, {"detail": "Not Found"})

    def do_POST(self) -> None:
        state = self.state
        path = self.path.split("?", 1)[0]
        body = self._body()
        if not self._authorized(path):
            return
        if state.group_broken.is_set() and path in _GENERATION:
            _hang()  # the request waits on a scheduler stuck in a collective, as in SGLang
        if path in _GENERATION:
            with state.inflight.request():
                time.sleep(state.generation_time(body))
                self._generate(path, body)
        elif path == "/configure_logging":
            state.log(live.logging_line(body, state.knobs.version))
            self._send(200)
        elif path == "/set_internal_state":
            updated, warning = live.update_internal_state(
                body,
                state.figures.max_running_requests,
                int(state.values.get("pp_size") or 1),
                state.overrides,
            )
            if warning is not None:
                state.scheduler_log(warning)
            self._send(200, [updated] * state.dp_size)
        else:
            self._send(404, {"detail": "Not Found"})

    def _generate(self, path: str, body: dict[str, Any]) -> None:
        state = self.state
        if path == "/generate":
            self._send(200, state.generate(body))
        elif path == "/v1/chat/completions":
            self._send(200, state.chat(body, "chat"))
        else:
            self._send(200, state.chat(body, "completion"))

    def do_PUT(self) -> None:
        self.do_POST()


_GENERATION = frozenset({"/generate", "/v1/chat/completions", "/v1/completions"})


def _set_figures(load: dict[str, Any], figures: Mapping[str, Any], with_spec: bool) -> None:
    """ORCH_STANDIN_LOADS's figures over the stand-in's own (knobs.parse_loads): the core ones
    in place, ``speculative`` as SGLang's section (when ``include`` asks for spec)."""
    for key, value in figures.items():
        if key != "speculative":
            load[key] = value
        elif with_spec:
            load["speculative"] = {"accept_length": 0.0, "accept_rate": 0.0, **value}


def _queues(section: dict[str, Any], waiting: int) -> dict[str, Any]:
    """The ``queues`` section with its ``waiting`` count."""
    return {**section, "waiting": waiting}


def _hang() -> None:
    while True:
        time.sleep(3600)


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


def server_class(host: str) -> type[ThreadingHTTPServer]:
    """A threading HTTP server of the address family ``host`` is written in."""
    return _Server6 if ":" in host else _Server


def make_server(state: ServerState, host: str, port: int) -> ThreadingHTTPServer:
    """Bind (OSError as the socket raises it) and return the server, not yet serving."""
    handler = type("Handler", (_Handler,), {"state": state})
    return server_class(host)((host, port), handler)
