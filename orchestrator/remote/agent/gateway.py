"""The agent's side of the SGLang Model Gateway its server sits behind (a profile's ``router:``):
what the run spec says of it (GatewaySpec), how smg lists a worker (GatewayWorker, read by orch's
client too: fleet/gateway.py), and a small client of smg's worker API (SmgWorkers), stdlib only.

smg 1.13.0's worker API, as orch's client speaks it (fleet/gateway.py has the details):
``GET /workers`` lists ``{"workers": [...]}``; ``POST /workers {url, labels?, api_key?}`` answers
202 and registers in the background (the worker is absent from the list until its job is done,
then ``status: ready, is_healthy: true``); ``DELETE /workers/{id}`` answers 202, the worker is
listed ``status: draining`` (no new request routed to it) for smg's drain settle time (5 s), then
vanishes; a URL still listed is 409 to a ``POST``. The control plane wants
``Authorization: Bearer KEY`` when smg runs with ``--control-plane-api-keys``.

Only smg's ``/workers`` dialect is spoken here: the older sglang-router (``/add_worker``) is left
to orch (its ``/add_worker`` blocks for minutes, which a supervisor loop must not).

The keys (the control plane's, the worker's own) come in the spec (0600) and go out only as
``Authorization`` headers and in a ``POST /workers`` body: never in a reason, a state or an event
(``GatewayTrouble`` messages are scrubbed of them).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from .http_json import Reply, Unreachable
from .smg import GatewayWorker, decode_smg_worker, normal_url

CALL_TIMEOUT_S = 2.0  # one control-plane call from the supervisor's loop; smg answers in ms


class Exchange(Protocol):
    """One HTTP exchange (http_json.exchange; a scripted gateway in tests)."""

    def __call__(
        self,
        method: str,
        url: str,
        *,
        key: str | None,
        timeout_s: float,
        payload: Mapping[str, Any] | None = None,
    ) -> Reply: ...


@dataclass(frozen=True)
class GatewaySpec:
    """The run spec's ``gateway``: where the gateway is, how it reaches the server, the labels
    to register it with; the keys are never shown (``repr`` leaves them out)."""

    url: str  # the gateway's HTTP API, e.g. http://10.0.0.5:30000
    worker_url: str  # the server as the gateway reaches it
    labels: Mapping[str, str] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)  # the control plane's key
    worker_api_key: str | None = field(default=None, repr=False)  # the server's own --api-key
    ready_timeout_s: float = 120.0  # a registration the gateway has not made ready by then fails

    @staticmethod
    def from_json(data: Mapping[str, Any]) -> GatewaySpec:
        url = str(data["url"]).rstrip("/")
        worker_url = str(data["worker_url"])
        for what, value in (("gateway.url", url), ("gateway.worker_url", worker_url)):
            parts = urllib.parse.urlsplit(value)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise ValueError(f"{what}: expected http(s)://HOST:PORT")
        labels = data.get("labels") or {}
        if not isinstance(labels, dict):
            raise ValueError("gateway.labels: expected a mapping")
        api_key = data.get("api_key")
        worker_key = data.get("worker_api_key")
        return GatewaySpec(
            url=url,
            worker_url=worker_url,
            labels={str(k): str(v) for k, v in labels.items()},
            api_key=str(api_key) if api_key else None,
            worker_api_key=str(worker_key) if worker_key else None,
            ready_timeout_s=float(data.get("ready_timeout_s", 120.0)),
        )

    def secrets(self) -> tuple[str, ...]:
        return tuple(key for key in (self.api_key, self.worker_api_key) if key)


class GatewayTrouble(Exception):
    """The gateway did not do what was asked (unreachable, a refused key, an answer not
    understood): one line, without any key."""


class SmgWorkers:
    """The server's worker entry at an smg gateway: found, added, removed. Each call is bounded
    by ``call_timeout_s``; every failure is a GatewayTrouble whose message carries no key."""

    def __init__(
        self, spec: GatewaySpec, exchange: Exchange, call_timeout_s: float = CALL_TIMEOUT_S
    ) -> None:
        self.spec = spec
        self._exchange = exchange
        self._timeout_s = call_timeout_s
        self._wanted = normal_url(spec.worker_url)

    def listed(self) -> GatewayWorker | None:
        """The server's entry in ``GET /workers``; None when the gateway does not list it."""
        reply = self._call("GET", "/workers")
        payload = reply.json()
        if reply.status == 404:
            raise self._trouble(
                "GET /workers is 404: not smg's worker API (an sglang-router before 0.2?); the "
                "agent re-registers with smg only"
            )
        if reply.status != 200 or not isinstance(payload, dict) or "workers" not in payload:
            raise self._trouble(f"GET /workers answered HTTP {reply.status}: {_error_text(reply)}")
        for entry in payload.get("workers") or []:
            if isinstance(entry, dict) and normal_url(str(entry.get("url") or "")) == self._wanted:
                return decode_smg_worker(entry, {})
        return None

    def add(self) -> str:
        """``POST /workers``: queued; the id of the registration."""
        body: dict[str, Any] = {"url": self.spec.worker_url}
        if self.spec.labels:
            body["labels"] = dict(self.spec.labels)
        if self.spec.worker_api_key:
            body["api_key"] = self.spec.worker_api_key
        reply = self._call("POST", "/workers", body)
        answer = reply.json()
        if reply.status == 409:
            raise self._trouble(f"POST /workers: already listed ({_error_text(reply)})")
        worker_id = ""
        if isinstance(answer, dict):
            worker_id = str(answer.get("worker_id") or answer.get("id") or "")
        if reply.status not in (200, 201, 202) or not worker_id:
            raise self._trouble(f"POST /workers answered HTTP {reply.status}: {_error_text(reply)}")
        return worker_id

    def remove(self, worker_id: str) -> bool:
        """``DELETE /workers/{id}``: False when the gateway did not know it (404)."""
        path = f"/workers/{urllib.parse.quote(worker_id, safe='')}"
        reply = self._call("DELETE", path)
        if reply.status == 404:
            return False
        if reply.status not in (200, 202, 204):
            raise self._trouble(f"DELETE {path} answered HTTP {reply.status}: {_error_text(reply)}")
        return True

    def _call(self, method: str, path: str, payload: Mapping[str, Any] | None = None) -> Reply:
        try:
            reply = self._exchange(
                method,
                self.spec.url + path,
                key=self.spec.api_key,
                timeout_s=self._timeout_s,
                payload=payload,
            )
        except Unreachable as exc:
            raise self._trouble(f"cannot reach it: {exc.reason}") from exc
        if reply.status in (401, 403):
            said = "refused the key" if self.spec.api_key else "wants a key; the spec has none"
            raise self._trouble(f"{method} {path}: HTTP {reply.status}: its control plane {said}")
        return reply

    def _trouble(self, message: str) -> GatewayTrouble:
        return GatewayTrouble(scrub(f"gateway {self.spec.url}: {message}", self.spec.secrets()))


def scrub(text: str, secrets: tuple[str, ...]) -> str:
    """``text`` without any of ``secrets`` (a gateway that echoes what it was sent)."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _error_text(reply: Reply) -> str:
    """smg's ``{"error": ..., "code": ...}``, or the body as one line."""
    payload = reply.json()
    if isinstance(payload, dict) and isinstance(payload.get("error"), str):
        return str(payload["error"])[:200]
    return reply.text() or reply.reason
