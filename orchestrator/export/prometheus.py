"""Running servers -> a Prometheus ``file_sd_configs`` file (``orch export prometheus-sd``).

The file is a JSON list of target groups, ``{"targets": ["address:port"], "labels": {...}}``,
one group per HTTP server that serves SGLang's ``/metrics``:

- rank 0 of each deployment (a single server, a replica, a launch group's rank 0): its API
  server; listed whether or not it was started with ``--enable-metrics`` (without it SGLang
  answers ``/metrics`` 404, and Prometheus shows the target down: ``Export.notes`` says which and
  that ``metrics: true`` turns it on);
- a group's rank >= 1 only when it serves its schedulers' series: with
  ``--enable-metrics-for-all-schedulers`` (``metrics: true`` renders it for a group), its dummy
  health server (SGLang 0.5.23 ``launch_dummy_health_check_server``: ``--host``/``--port`` of
  that node, ``/metrics`` mounted with ``--enable-metrics``); without it a rank >= 1's
  schedulers report nothing (``metrics_collector.py``, ``current_scheduler_metrics_enabled``).

orch's labels are all prefixed ``orch_`` so they never collide with SGLang's own (``model_name``,
``engine_type``, ``tp_rank``, ``pp_rank``, ``moe_ep_rank``, ``dp_rank``) or with the gateway's.
``__metrics_path__`` is left out: SGLang serves ``/metrics``, Prometheus's default.

The target's address is the host's address as orch reaches it (hosts.yaml ``address``); a server
on this machine (no address) is reached at its bind address, or 127.0.0.1 for a wildcard bind. A
server bound to a loopback address on a remote host is listed (Prometheus then shows it down,
which is where an operator looks) with a note: nothing but that host can scrape it.

Gateways (``router:``) are their own target groups (``orch_role: gateway``), one per gateway
whatever the number of profiles behind it, when the profile says where the gateway serves its
metrics: smg serves them on a listener of its own (``--prometheus-host``/``--prometheus-port``,
default 0.0.0.0:29000), which ``router.url`` does not give, so ``router.metrics_url`` says it; a
gateway without it is left out with a note. Pure: no I/O; the caller writes ``text``
(atomically).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_BINDS = frozenset({"127.0.0.1", "localhost", "::1"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 (a bind read, not made)


@dataclass(frozen=True)
class RunningServer:
    """One server READY on its host, as its survey shows it, with what its launch renders."""

    profile: str
    deployment: str  # NAME or NAME@I
    rank: int | None  # a launch group's rank; None: a single server
    replica: int | None
    host: str  # the hosts.yaml name
    address: str | None  # as orch reaches the host; None: this machine
    bind: str  # --host
    port: int  # --port
    commit: str | None  # the profiles' commit it was launched from
    sglang_version: str | None  # the host's SGLang (survey), else the profile's pin
    metrics: bool  # --enable-metrics in its argv
    all_schedulers: bool  # --enable-metrics-for-all-schedulers in its argv

    @property
    def serves_metrics(self) -> bool:
        """Whether it is a target at all: rank 0 always, rank >= 1 only with every scheduler's."""
        return not self.rank or (self.metrics and self.all_schedulers)

    @property
    def target(self) -> str:
        address = self.address
        if address is None:
            address = "127.0.0.1" if self.bind in WILDCARD_BINDS else self.bind
        shown = f"[{address}]" if ":" in address else address
        return f"{shown}:{self.port}"

    @property
    def sort_key(self) -> tuple[str, int, int]:
        return (self.profile, -1 if self.replica is None else self.replica, self.rank or 0)


@dataclass(frozen=True)
class GatewayTarget:
    """A profile's gateway: its API (``router.url``) and where it serves metrics, if said."""

    profile: str
    url: str
    metrics_url: str | None


@dataclass(frozen=True)
class ServiceDiscovery:
    groups: tuple[dict[str, Any], ...]
    text: str  # the JSON to write
    notes: tuple[str, ...]


def labels_of(server: RunningServer) -> dict[str, str]:
    """orch's labels of one target (Prometheus label values are strings)."""
    labels = {
        "orch_role": "server",
        "orch_profile": server.profile,
        "orch_deployment": server.deployment,
        "orch_host": server.host,
        "orch_rank": str(server.rank or 0),
    }
    if server.replica is not None:
        labels["orch_replica"] = str(server.replica)
    if server.commit:
        labels["orch_commit"] = server.commit
    if server.sglang_version:
        labels["orch_sglang_version"] = server.sglang_version
    return labels


def service_discovery(
    servers: Iterable[RunningServer], gateways: Sequence[GatewayTarget] = ()
) -> ServiceDiscovery:
    """The target groups of ``servers`` (sorted by profile, replica, rank), then of the
    gateways (by metrics URL), and what to tell."""
    groups: list[dict[str, Any]] = []
    notes: list[str] = []
    for server in sorted(servers, key=lambda one: one.sort_key):
        if not server.serves_metrics:
            continue
        name = server.deployment if server.rank is None else f"{server.deployment}[{server.rank}]"
        groups.append({"targets": [server.target], "labels": labels_of(server)})
        if not server.metrics:
            notes.append(
                f"{name} runs without --enable-metrics: its /metrics answers 404 "
                "(set `metrics: true` in its profile)"
            )
        if server.address is not None and server.bind in LOOPBACK_BINDS:
            notes.append(
                f"{name} is bound to {server.bind} on {server.host}: only {server.host} itself "
                f"can scrape {server.target} (set `bind: 0.0.0.0` or an address of the host)"
            )
    groups += _gateway_groups(gateways)
    for gateway in gateways:
        if gateway.metrics_url is None:
            notes.append(
                f"{gateway.profile}'s gateway (router:) is not listed: smg serves its metrics on "
                "its own --prometheus-port (default 29000); set router.metrics_url to list it"
            )
    text = json.dumps(groups, indent=2) + "\n"
    return ServiceDiscovery(tuple(groups), text, tuple(notes))


def _gateway_groups(gateways: Sequence[GatewayTarget]) -> list[dict[str, Any]]:
    """One group per gateway metrics URL, naming the profiles behind it."""
    behind: dict[str, list[GatewayTarget]] = {}
    for gateway in gateways:
        if gateway.metrics_url is not None:
            behind.setdefault(gateway.metrics_url, []).append(gateway)
    groups: list[dict[str, Any]] = []
    for metrics_url, served in sorted(behind.items()):
        parts = urlsplit(metrics_url)
        host = parts.hostname or ""
        shown = f"[{host}]" if ":" in host else host
        labels = {
            "orch_role": "gateway",
            "orch_gateway": served[0].url,
            "orch_profiles": ",".join(sorted({g.profile for g in served})),
        }
        if parts.path and parts.path != "/metrics":
            labels["__metrics_path__"] = parts.path
        if parts.scheme == "https":
            labels["__scheme__"] = "https"
        groups.append({"targets": [f"{shown}:{parts.port}"], "labels": labels})
    return groups
