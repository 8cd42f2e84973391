"""A READY server's load as SGLang reports it (``GET /v1/loads``, 0.5.11+; no ``--enable-metrics``
needed): read live by ``status --load`` and sampled by the supervisor every
:data:`SAMPLE_INTERVAL_S` while READY, the last figures kept in state.json (``load``) so a stopped
deployment still shows them, with when they were taken.

Both shapes are read: 0.5.23's (managers/load_snapshot.py ``LoadSnapshot.to_dict``: a
``dp_rank`` on every load, a ``timestamp``) and 0.5.11's (managers/io_struct.py
``GetLoadsReqOutput`` through ``dataclasses.asdict`` without None: ``dp_rank`` only with DP,
an ``aggregate`` beside the loads). Of each DP rank only what status shows is kept (a few
hundred bytes a rank): requests running and waiting, tokens in use and the pool, the effective
``max_running_requests``, token usage, generation throughput, cache hit rate, utilization, the
speculative accept length and rate (the ``speculative`` section appears once a speculative
forward ran). The server's ``--api-key`` (SGLang asks for it on ``/v1/loads``) is read from the
argv the spec starts it with, sent as a bearer token and never recorded.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .http_json import Unreachable, exchange

SAMPLE_INTERVAL_S = 15.0  # the supervisor's samples while READY
LIVE_TIMEOUT_S = 1.0  # status --load: a busy server must not stall status
LOADS_PATH = "/v1/loads?include=core,memory,spec,queues"

# core figures kept per DP rank (0.5.11 and 0.5.23 name them alike)
CORE_KEYS = (
    "num_running_reqs",
    "num_waiting_reqs",
    "num_used_tokens",
    "max_total_num_tokens",
    "max_running_requests",
    "token_usage",
    "gen_throughput",
    "cache_hit_rate",
    "utilization",
)
SPEC_KEYS = ("accept_length", "accept_rate")


def server_api_key(argv: Sequence[str]) -> str | None:
    """The ``--api-key`` the server is started with (``--api-key K`` or ``--api-key=K``)."""
    for index, arg in enumerate(argv):
        if arg == "--api-key" and index + 1 < len(argv):
            return argv[index + 1]
        if arg.startswith("--api-key="):
            return arg.partition("=")[2]
    return None


def _number(value: Any) -> float | int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def summarize(document: Any) -> list[dict[str, Any]] | str:
    """The figures kept of a ``/v1/loads`` answer (either release's shape), one dict per DP
    rank sorted by rank; a string saying why when the answer has no loads."""
    loads = document.get("loads") if isinstance(document, dict) else None
    if not isinstance(loads, list):
        return "no loads in the answer"
    kept: list[dict[str, Any]] = []
    for index, load in enumerate(loads):
        if not isinstance(load, dict):
            continue
        rank = load.get("dp_rank")  # 0.5.11 without DP: none (its asdict drops None)
        figures: dict[str, Any] = {"dp_rank": rank if isinstance(rank, int) else index}
        for key in CORE_KEYS:
            value = _number(load.get(key))
            if value is not None:
                figures[key] = value
        spec = load.get("speculative")
        if isinstance(spec, dict):
            numbers = {key: _number(spec.get(key)) for key in SPEC_KEYS}
            figures["speculative"] = {k: v for k, v in numbers.items() if v is not None}
        kept.append(figures)
    return sorted(kept, key=lambda figures: int(figures["dp_rank"]))


def read_loads(
    host: str, port: int, *, key: str | None, timeout_s: float = LIVE_TIMEOUT_S
) -> dict[str, Any]:
    """One ``GET /v1/loads`` bounded by ``timeout_s``: ``{"loads": [...]}``, or ``{"error":
    why}`` (no answer in time, an older SGLang, another server behind the port)."""
    url = f"http://{host}:{port}{LOADS_PATH}"
    try:
        reply = exchange("GET", url, key=key, timeout_s=timeout_s)
    except Unreachable as exc:
        return {"error": f"/v1/loads: {exc.reason}"}
    if reply.status != 200:
        return {"error": f"/v1/loads: HTTP {reply.status} {reply.text(120)}"}
    document = reply.json()
    kept = summarize(document)
    if isinstance(kept, str):
        return {"error": f"/v1/loads: {kept}"}
    version = document.get("version") if isinstance(document, dict) else None
    return {"loads": kept, "version": version if isinstance(version, str) else None}


def sample(previous: dict[str, Any] | None, read: dict[str, Any], at: float) -> dict[str, Any]:
    """state.json's ``load`` after one read at ``at`` (the host's wall clock): new figures
    replace the old; a failed read keeps the last figures and their time, and says why."""
    if "loads" in read:
        figures = {"loads": read["loads"], "version": read.get("version")}
        return {"at": at, **figures, "error": None, "error_at": None}
    kept = dict(previous or {"at": None, "loads": []})
    kept.update(error=read.get("error"), error_at=at)
    return kept


def serves_loads(state: Any) -> bool:
    """Whether the deployment's server answers /v1/loads: not a launch group's rank >= 1 (its
    node serves only SGLang's dummy health app; rank 0 answers for the whole group)."""
    group = state.get("group") if isinstance(state, dict) else None
    return not (isinstance(group, dict) and group.get("rank"))


class Supervised(Protocol):
    """What LoadWatch.of needs of a supervisor (supervisor.py's Supervisor)."""

    @property
    def spec(self) -> Any: ...

    @property
    def world(self) -> Any: ...

    @property
    def clock(self) -> Any: ...

    @property
    def record(self) -> Any: ...

    def update(self, **fields: Any) -> None: ...


class LoadWatch:
    """The supervisor's samples of its server's load while READY: at READY, then every
    ``interval_s`` (monotonic), each written with ``record`` (state.json's ``load``). Called
    from the supervisor's loop; a read is bounded by :data:`LIVE_TIMEOUT_S`."""

    def __init__(
        self,
        read: Callable[[], dict[str, Any]],
        record: Callable[[dict[str, Any]], None],
        wall: Callable[[], float],
        interval_s: float = SAMPLE_INTERVAL_S,
        serves: Callable[[], bool] = lambda: True,
    ) -> None:
        self._read = read
        self._serves = serves
        self._record = record
        self._wall = wall
        self.interval_s = interval_s
        self._next: float | None = None
        self.last: dict[str, Any] | None = None  # set from state.json by a resuming supervisor

    @classmethod
    def of(cls, supervisor: Supervised) -> LoadWatch:
        """A supervisor's: its world reads its server (the spec's port, its --api-key), each
        sample written to state.json through ``update``."""

        def read() -> dict[str, Any]:
            spec = supervisor.spec  # a reconfigure's spec applies at once
            key = server_api_key(spec.argv)
            answer: dict[str, Any] = supervisor.world.loads(spec.health_host, spec.port, key)
            return answer

        def record(load: dict[str, Any]) -> None:
            supervisor.update(load=load)

        def serves() -> bool:
            return serves_loads(supervisor.record.extra)

        return cls(read, record, supervisor.clock.wall, serves=serves)

    def look(self, now: float, ready: bool) -> None:
        """A sample when one is due and the server is READY; the first at once after READY."""
        if not ready or not self._serves():
            self._next = None  # the next READY samples at once
            return
        if self._next is not None and now < self._next:
            return
        self._next = now + self.interval_s
        self.last = sample(self.last, self._read(), self._wall())
        self._record(self.last)


def status_load(recorded: Any, live: dict[str, Any] | None, now: float) -> dict[str, Any] | None:
    """``status``'s ``load``: the figures read now (``live``: ``status --load`` of a READY
    server) or else the last ones recorded, with ``live`` saying which and ``age_s`` their age
    on the host's clock (orch's clock may differ from the host's); a failed live read keeps the
    recorded figures and says why in ``error``. None when there are none and none were read."""
    if live is not None and "loads" in live:
        figures = {"loads": live["loads"], "version": live.get("version")}
        return {"at": now, "age_s": 0.0, "live": True, **figures, "error": None}
    load = dict(recorded) if isinstance(recorded, dict) else None
    if load is None and live is None:
        return None
    load = load or {"at": None, "loads": []}
    if live is not None:  # asked now and no figures came: why, beside the last ones
        load["error"] = live.get("error")
    at = load.get("at")
    load["age_s"] = max(now - at, 0.0) if isinstance(at, (int, float)) else None
    load["live"] = False
    load.pop("error_at", None)
    return load
