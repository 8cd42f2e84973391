"""How smg (the SGLang Model Gateway, 1.13.0) lists a worker in ``GET /workers``, read the same
way by orch's client (fleet/gateway.py) and by the agent, which takes its server out of the
gateway and registers it again on its own (gateway.py, gateway_duty.py): part of the vocabulary
orch imports from the pushed package."""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class GatewayWorker:
    """One worker as the gateway sees it."""

    id: str  # smg's worker id (a UUID); the URL itself on a legacy router
    url: str
    status: str  # smg: pending, ready, not_ready, draining, failed; legacy: "listed"
    ready: bool  # the gateway routes to it (smg: status ready; legacy: listed)
    healthy: bool | None  # smg's is_healthy; None on a legacy router
    circuit: str | None  # closed, open, half_open (from metrics_url); None when not read
    labels: Mapping[str, str] = field(default_factory=dict)
    load: int | None = None  # requests the gateway has in flight to it (smg's "load")
    job: str | None = None  # smg's registration job while pending: "processing", "failed: ..."


def normal_url(url: str) -> str:
    """A worker URL as compared here: scheme and host lower-cased, no trailing slash (smg
    stores the URL as given, so orch compares, never rewrites, what it sends)."""
    parts = urllib.parse.urlsplit(url.strip())
    netloc = parts.netloc.lower()
    return urllib.parse.urlunsplit(
        (parts.scheme.lower(), netloc, parts.path.rstrip("/"), parts.query, "")
    )


def decode_smg_worker(entry: Mapping[str, Any], circuits: Mapping[str, str]) -> GatewayWorker:
    """One entry of smg's ``GET /workers`` (or a ``GET /workers/{id}`` answer)."""
    url = str(entry.get("url") or "")
    status = str(entry.get("status") or "unknown")
    healthy = entry.get("is_healthy")
    labels = entry.get("labels")
    load = entry.get("load")
    job = entry.get("job_status")
    job_text = None
    if isinstance(job, dict):
        job_text = str(job.get("status") or "")
        if job.get("message"):
            job_text += f": {job['message']}"
    return GatewayWorker(
        id=str(entry.get("id") or url),
        url=url,
        status=status,
        ready=status == "ready",
        healthy=healthy if isinstance(healthy, bool) else None,
        circuit=circuits.get(normal_url(url)),
        labels={str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {},
        load=load if isinstance(load, int) and not isinstance(load, bool) else None,
        job=job_text or None,
    )
