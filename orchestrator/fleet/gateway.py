"""orch's client for the SGLang Model Gateway a team runs in front of its replicas.

Two dialects, told apart once per client, on its first call, by one ``GET /workers``:

- **smg** (the ``smg`` package, 1.13.0; also ``sglang-router`` 0.2 and 0.3, which already
  served it): ``GET /workers`` answers ``{"workers": [...], "total": N, "stats": {...}}``.
  ``POST /workers {url, labels?, api_key?}`` answers 202 with a ``worker_id`` and registers in the
  background: the worker is *absent* from ``GET /workers`` while its registration job runs, and
  ``GET /workers/{id}`` says ``status: pending`` with a ``job_status``; once smg has read the
  worker's ``/server_info`` and ``/health`` it is listed ``status: ready, is_healthy: true``.
  ``DELETE /workers/{id}`` answers 202, the worker is listed ``status: draining`` (no new
  requests are routed to it) for smg's drain settle time (5 s), then vanishes. A URL already
  registered is 409. The control plane (these calls, ``GET /workers`` included) wants
  ``Authorization: Bearer KEY`` when smg runs with ``--control-plane-api-keys``: 401 otherwise.
- **legacy** (``sglang-router`` up to 0.1.x): ``GET /workers`` is 404 and ``GET /list_workers``
  answers ``{"urls": [...]}``. ``POST /add_worker?url=U`` blocks until the worker is healthy
  (up to the router's ``--worker-startup-timeout-secs``; 400 with the reason after it),
  ``POST /remove_worker?url=U`` removes at once. No ids, no labels, no health, no per-worker key:
  a legacy worker is listed with its URL as its id, ready and healthy unknown beyond "listed".

smg 1.13.0's worker JSON carries no circuit-breaker state; its metrics listener does
(``smg_worker_cb_state{worker="URL"}``, 0 closed, 1 open, 2 half-open). Given ``metrics_url``
(``http://HOST:PROMETHEUS_PORT``), :meth:`GatewayClient.workers` reads it there too.

Waits take an injected clock and sleep (house rule): tests and the rolling restart drive them.
"""

from __future__ import annotations

import re
import time
import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.errors import (
    GatewayAuthError,
    GatewayError,
    GatewayUnreachable,
    GatewayWorkerNotGone,
    GatewayWorkerNotReady,
)
from orchestrator.fleet import http_json

# How smg lists a worker is read the same way by the agent (which re-registers its server after
# a restart, remote/agent/gateway_duty.py): defined there, where the agent's bundle has it.
from orchestrator.remote.agent.smg import GatewayWorker, decode_smg_worker, normal_url

__all__ = [
    "GatewayClient",
    "GatewayWorker",
    "Registration",
    "decode_smg_worker",
    "normal_url",
    "parse_circuits",
]

Dialect = Literal["smg", "legacy"]

CALL_TIMEOUT_S = 10.0  # one control-plane call; smg answers in milliseconds
LEGACY_ADD_TIMEOUT_S = 330.0  # /add_worker blocks up to the router's startup timeout (300 s)
POLL_S = 0.25  # between two looks at the gateway while waiting
CIRCUIT_STATES = {0: "closed", 1: "open", 2: "half_open"}
_CB_STATE = re.compile(r'^smg_worker_cb_state\{worker="([^"]*)"\}\s+([0-9.]+)\s*$', re.MULTILINE)


@dataclass(frozen=True)
class Registration:
    """What ``register`` left behind: the id to poll (smg), or the URL (legacy)."""

    url: str
    id: str


class GatewayClient:
    """The gateway at ``url``; ``api_key`` for its control plane (None: send none), named in
    messages by ``key_name`` (e.g. ``router.api_key``), never shown."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        key_name: str = "router.api_key",
        metrics_url: str | None = None,
        call_timeout_s: float = CALL_TIMEOUT_S,
        legacy_add_timeout_s: float = LEGACY_ADD_TIMEOUT_S,
        poll_s: float = POLL_S,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = http_json.base_url(url, "router.url")
        self.metrics_url = (
            http_json.base_url(metrics_url, "router.metrics_url") if metrics_url else None
        )
        self._key = api_key
        self._key_name = key_name
        self._call_timeout_s = call_timeout_s
        self._legacy_add_timeout_s = legacy_add_timeout_s
        self._poll_s = poll_s
        self._clock = clock
        self._sleep = sleep
        self._dialect: Dialect | None = None
        self._ids: dict[str, str] = {}  # normal URL -> smg id, from register (pending: unlisted)

    # -- the dialect, once -------------------------------------------------------------------

    @property
    def dialect(self) -> Dialect:
        """``smg`` or ``legacy``, found by the first call (one ``GET /workers``, and
        ``GET /list_workers`` when that is 404) and kept."""
        if self._dialect is not None:
            return self._dialect
        dialect, _ = self._workers_reply()
        return dialect

    def _workers_reply(self) -> tuple[Dialect, Any]:
        """``GET /workers`` (or ``/list_workers``), its JSON and the dialect it shows."""
        if self._dialect != "legacy":
            reply = self._call("GET", "/workers")
            payload = reply.json()
            if reply.status == 200 and isinstance(payload, dict) and "workers" in payload:
                self._dialect = "smg"
                return "smg", payload
            if reply.status != 404 or self._dialect == "smg":
                raise self._unexpected("GET /workers", reply)
        reply = self._call("GET", "/list_workers")
        payload = reply.json()
        if reply.status == 200 and isinstance(payload, dict) and "urls" in payload:
            self._dialect = "legacy"
            return "legacy", payload
        raise GatewayError(
            f"{self.url} answers neither GET /workers nor GET /list_workers "
            f"(HTTP {reply.status}): not an SGLang Model Gateway",
            "router.url must be smg's (or sglang-router's) HTTP port, not a worker's or its "
            "metrics port",
        )

    # -- reading -----------------------------------------------------------------------------

    def workers(self) -> tuple[GatewayWorker, ...]:
        """Every worker the gateway lists (smg leaves out one still registering)."""
        dialect, payload = self._workers_reply()
        if dialect == "legacy":
            urls = payload.get("urls") or []
            return tuple(
                GatewayWorker(id=u, url=u, status="listed", ready=True, healthy=None, circuit=None)
                for u in urls
                if isinstance(u, str)
            )
        circuits = self._circuits()
        entries = payload.get("workers") or []
        return tuple(
            decode_smg_worker(entry, circuits) for entry in entries if isinstance(entry, dict)
        )

    def worker(self, url: str) -> GatewayWorker | None:
        """The worker at ``url`` as the gateway sees it: listed, or (smg) still registering
        under the id ``register`` got; None when the gateway does not know it."""
        wanted = normal_url(url)
        for worker in self.workers():
            if normal_url(worker.url) == wanted:
                return worker
        known = self._ids.get(wanted)
        if known is None or self.dialect != "smg":
            return None
        reply = self._call("GET", f"/workers/{known}")
        payload = reply.json()
        if reply.status == 404:
            return None
        if reply.status != 200 or not isinstance(payload, dict):
            raise self._unexpected(f"GET /workers/{known}", reply)
        return decode_smg_worker(payload, {})

    def _circuits(self) -> dict[str, str]:
        """Each worker URL's circuit state from smg's metrics listener; {} when not asked for
        or not answering (the state is an extra, never a reason to fail a listing)."""
        if self.metrics_url is None:
            return {}
        try:
            reply = http_json.exchange(
                "GET", self.metrics_url + "/metrics", key=None, timeout_s=self._call_timeout_s
            )
        except http_json.Unreachable:
            return {}
        if reply.status != 200:
            return {}
        return parse_circuits(reply.body.decode("utf-8", "replace"))

    # -- changing ----------------------------------------------------------------------------

    def register(
        self, url: str, labels: Mapping[str, str] | None = None, api_key: str | None = None
    ) -> Registration:
        """Ask the gateway to route to the worker at ``url`` (labels and the worker's own API
        key on smg). smg: queued (202); poll with :meth:`wait_ready`. Legacy: done when this
        returns (labels cannot be kept there; a worker key cannot be given)."""
        if self.dialect == "legacy":
            if api_key is not None:
                raise GatewayError(
                    f"{self.url} is an sglang-router without the /workers API: it cannot take a "
                    "worker's API key",
                    "start that router with --api-key (one key for all workers), or move to smg",
                )
            query = urllib.parse.urlencode({"url": url})
            reply = self._call("POST", f"/add_worker?{query}", timeout_s=self._legacy_add_timeout_s)
            if reply.status != 200:
                raise GatewayWorkerNotReady(
                    f"{self.url} did not add {url}: HTTP {reply.status}: {reply.text()}",
                    last=reply.text(),
                    hint="is the worker READY and reachable from the router's host?",
                )
            return Registration(url=url, id=url)
        payload: dict[str, Any] = {"url": url}
        if labels:
            payload["labels"] = dict(labels)
        if api_key is not None:
            payload["api_key"] = api_key
        reply = self._call("POST", "/workers", payload=payload)
        answer = reply.json()
        if reply.status == 409:
            raise GatewayError(
                f"{self.url} already has a worker at {url}: {_error_text(reply)}",
                "deregister it first (orch down, or DELETE /workers/ID), then register again",
            )
        if reply.status not in (200, 201, 202) or not isinstance(answer, dict):
            raise self._unexpected("POST /workers", reply)
        worker_id = str(answer.get("worker_id") or answer.get("id") or "")
        if not worker_id:
            raise self._unexpected("POST /workers", reply)
        self._ids[normal_url(url)] = worker_id
        return Registration(url=url, id=worker_id)

    def wait_ready(self, url: str, timeout_s: float) -> GatewayWorker:
        """Poll until the gateway lists ``url`` ready and healthy; its last view of it.
        Raises :class:`GatewayWorkerNotReady` (with what it said last) at ``timeout_s``, or as
        soon as smg's registration job failed."""
        deadline = self._clock() + timeout_s
        last = "not listed"
        while True:
            worker = self.worker(url)
            if worker is not None:
                if worker.ready and worker.healthy is not False:
                    return worker
                last = _said(worker)
                if worker.job is not None and worker.job.startswith("failed"):
                    raise GatewayWorkerNotReady(
                        f"{self.url} gave up registering {url}: {last}",
                        last=last,
                        hint="is the worker READY and reachable from the gateway's host?",
                    )
            if self._clock() >= deadline:
                raise GatewayWorkerNotReady(
                    f"{self.url} did not mark {url} ready within {timeout_s:g} s; it said "
                    f"last: {last}",
                    last=last,
                    hint="the gateway must reach the worker's URL (its /health and "
                    "/server_info) from its own host; check its log",
                )
            self._sleep(self._poll_s)

    def deregister(self, url: str) -> bool:
        """Ask the gateway to stop routing to ``url`` and let it go (smg drains it first);
        False when the gateway did not know it. Poll with :meth:`wait_gone`."""
        if self.dialect == "legacy":
            known = self.worker(url) is not None
            query = urllib.parse.urlencode({"url": url})
            reply = self._call("POST", f"/remove_worker?{query}")
            if reply.status != 200:
                raise self._unexpected("POST /remove_worker", reply)
            return known
        worker = self.worker(url)
        if worker is None:
            return False
        reply = self._call("DELETE", f"/workers/{worker.id}")
        if reply.status == 404:
            return False
        if reply.status not in (200, 202, 204):
            raise self._unexpected(f"DELETE /workers/{worker.id}", reply)
        return True

    def wait_gone(self, url: str, timeout_s: float) -> None:
        """Poll until the gateway no longer knows ``url``: not listed (smg: after its drain
        settle time, 5 s by default), nor still registering. Raises
        :class:`GatewayWorkerNotGone` at ``timeout_s``, or at once when smg refused to remove a
        worker whose registration is still running (1.13.0 cannot cancel one: its removal job
        fails with "not found" while the registration goes on retrying)."""
        deadline = self._clock() + timeout_s
        wanted = normal_url(url)
        while True:
            worker = self.worker(url)
            if worker is None:
                self._ids.pop(wanted, None)
                return
            said = _said(worker)
            if worker.status == "pending" and worker.job and worker.job.startswith("failed"):
                raise GatewayWorkerNotGone(
                    f"{self.url} cannot deregister {url} while it is still registering it ({said})",
                    "smg adds it as soon as it answers: stop that server, or wait for the "
                    "gateway's --worker-startup-timeout-secs to end the registration",
                )
            if self._clock() >= deadline:
                raise GatewayWorkerNotGone(
                    f"{self.url} still knows {url} ({said}) {timeout_s:g} s after it was "
                    "deregistered",
                    "the gateway may still be draining it; check its log (drain settle time)",
                )
            self._sleep(self._poll_s)

    # -- one call ----------------------------------------------------------------------------

    def _call(
        self,
        method: str,
        path: str,
        *,
        payload: Mapping[str, Any] | None = None,
        timeout_s: float | None = None,
    ) -> http_json.Reply:
        timeout = self._call_timeout_s if timeout_s is None else timeout_s
        try:
            reply = http_json.exchange(
                method, self.url + path, key=self._key, timeout_s=timeout, payload=payload
            )
        except http_json.Unreachable as exc:
            raise GatewayUnreachable(
                f"cannot reach the gateway at {self.url}: {exc.reason}",
                "is smg running there, and is router.url its HTTP port (smg launch --port)?",
            ) from exc
        if reply.status in (401, 403):
            sent = (
                f"the key from {self._key_name} was refused"
                if self._key is not None
                else f"{self._key_name} is not set"
            )
            raise GatewayAuthError(
                f"{self.url}: {method} {path.split('?')[0]}: HTTP {reply.status}: the gateway's "
                f"control plane wants a key; {sent}",
                "give router.api_key ({from_env: NAME}) one of the gateway's "
                "--control-plane-api-keys (role admin), and export NAME where orch runs",
            )
        return reply

    def _unexpected(self, what: str, reply: http_json.Reply) -> GatewayError:
        return GatewayError(
            f"{self.url}: {what} answered HTTP {reply.status}: {_error_text(reply)}",
            "is router.url an SGLang Model Gateway (smg) of a release orch knows (1.13)?",
        )


def parse_circuits(metrics_text: str) -> dict[str, str]:
    """Each worker URL's (normalised) circuit-breaker state from smg's Prometheus text."""
    return {
        normal_url(url): CIRCUIT_STATES.get(int(float(value)), value)
        for url, value in _CB_STATE.findall(metrics_text)
    }


def _said(worker: GatewayWorker) -> str:
    """What the gateway says of a worker, in one line."""
    parts = [f"status {worker.status}"]
    if worker.healthy is not None:
        parts.append("healthy" if worker.healthy else "not healthy")
    if worker.job:
        parts.append(f"registration {worker.job}")
    if worker.circuit:
        parts.append(f"circuit {worker.circuit}")
    return ", ".join(parts)


def _error_text(reply: http_json.Reply) -> str:
    """smg's ``{"error": ..., "code": ...}``, or the body as one line."""
    payload = reply.json()
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return str(payload["error"])
    return reply.text() or reply.reason
