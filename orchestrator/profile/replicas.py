"""``replicas:``: N independent servers of one launch, each a host of the inventory with what may
differ on it (its --port, its env, its GPUs), each its own deployment there (``NAME@I``).

``host:`` beside ``replicas:`` is the host of the entries that name none: a base profile's host
is inherited through ``extends`` without a ``host: null``, and two replicas on one machine are
written by their ports alone. Replicas may share a machine when their ports differ and their
GPUs do not overlap; two that name no GPUs there would both use every GPU of it (a warning:
it is what a CPU host or fractional ``mem_fraction_static`` servers do on purpose)."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.model import GpuSpec, Host, Replica, Severity, frozen_map
from orchestrator.profile.doccheck import MISSING, DocChecker, kind
from orchestrator.profile.inventory import INVENTORY_FILE
from orchestrator.profile.layout import node_host
from orchestrator.profile.values import device_list, env_section
from orchestrator.profile.yamldoc import KeyPath

_REPLICA_KEYS = ("host", "port", "env", "gpu")
_REPLICA_GPU_KEYS = ("devices",)


def replicas_section(
    checker: DocChecker,
    inventory: Mapping[str, Host],
    default_host: Host | None,
    port: int,
    gpu: GpuSpec,
    *,
    has_group: bool,
) -> tuple[Replica, ...]:
    """``replicas:`` read into its entries (empty when absent or wrong, the errors recorded)."""
    raw = checker.get(("replicas",))
    if raw is MISSING:
        return ()
    if has_group:
        checker.error(
            ("replicas",),
            "`replicas:` of a launch group (a whole group per replica) is not supported yet",
            "make each group its own profile (both extending one base), or drop `group:`",
        )
        return ()
    if not isinstance(raw, list) or len(raw) < 2:
        got = f"{len(raw)} replica" if isinstance(raw, list) else kind(raw)
        checker.error(
            ("replicas",),
            f"expected a list of at least 2 replicas, got {got}",
            "a single server needs no replicas: use `host:` (and `port:`)",
        )
        return ()
    replicas: list[Replica] = []
    for index, item in enumerate(raw):
        replica = _replica(checker, inventory, default_host, gpu, ("replicas", index), item)
        if replica is not None:
            replicas.append(replica)
    if len(replicas) != len(raw):
        return ()
    _check_shared_machines(checker, tuple(replicas), port, gpu)
    return tuple(replicas)


def _replica(
    checker: DocChecker,
    inventory: Mapping[str, Host],
    default_host: Host | None,
    gpu: GpuSpec,
    path: KeyPath,
    item: object,
) -> Replica | None:
    if isinstance(item, str):  # `- gpu-a`: a host name alone
        item = {"host": item}
    elif not isinstance(item, dict):
        checker.error(path, f"expected a host name or a mapping, got {kind(item)}")
        return None
    else:
        checker.keys(path, _REPLICA_KEYS)
        if checker.mapping((*path, "gpu")) is not None:
            checker.keys((*path, "gpu"), _REPLICA_GPU_KEYS)
    name = item.get("host")
    if name is None and default_host is not None:
        host: Host | None = default_host
    elif name is None:
        checker.error(
            path,
            "missing `host`",
            f"a host from {INVENTORY_FILE}, or `host:` beside `replicas:` for the replicas "
            "that name none",
        )
        host = None
    else:
        host = node_host(checker, path, name, inventory)
    replica_port = checker.integer((*path, "port"), 1, 65535)
    devices = device_list(checker, (*path, "gpu", "devices"))
    env = env_section(checker, (*path, "env"), GpuSpec(devices=devices or gpu.devices), host)
    if host is None:
        return None
    return Replica(host, replica_port, frozen_map(env), devices)


def _machine(host: Host) -> tuple[str | None, int | None]:
    """Two inventory entries with one address and SSH port are one machine (its GPUs, ports)."""
    return (host.address, host.port)


def _check_shared_machines(
    checker: DocChecker, replicas: tuple[Replica, ...], port: int, gpu: GpuSpec
) -> None:
    """Replicas on one machine: a --port each, and GPUs of their own."""
    for index, replica in enumerate(replicas):
        path: KeyPath = ("replicas", index)
        here = _machine(replica.host)
        mine = replica.port if replica.port is not None else port
        devices = replica.devices if replica.devices is not None else gpu.devices
        for before in range(index):
            other = replicas[before]
            if _machine(other.host) != here:
                continue
            where = (
                replica.host.name
                if other.host.name == replica.host.name
                else f"{replica.host.name} (the machine of {other.host.name})"
            )
            theirs = other.port if other.port is not None else port
            if mine == theirs:
                checker.error(
                    (*path, "port") if replica.port is not None else path,
                    f"replicas {before} and {index} both use --port {mine} on {where}",
                    f"give each replica on one machine its own port: replicas[{index}].port",
                )
            other_devices = other.devices if other.devices is not None else gpu.devices
            if devices and other_devices:
                shared = [d for d in devices if d in other_devices]
                if shared:
                    checker.error(
                        (*path, "gpu", "devices") if replica.devices is not None else path,
                        f"replicas {before} and {index} both use GPU {', '.join(shared)} "
                        f"on {where}",
                        f"give each replica on one machine GPUs of its own: "
                        f"replicas[{index}].gpu.devices",
                    )
            elif not devices or not other_devices:
                checker.note(
                    Severity.WARNING,
                    path,
                    f"replicas {before} and {index} share {where} and "
                    + ("neither names" if not devices and not other_devices else "one names no")
                    + " gpu.devices: both servers would use the same GPUs",
                    f"give each its GPUs: replicas[{index}].gpu.devices (e.g. [0, 1] and "
                    "[2, 3]); two servers on one GPU each take mem_fraction_static of it",
                )
