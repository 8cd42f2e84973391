"""``probe``: what preflight checks before a launch (the interpreter, sglang, the port, the model,
the GPUs, the variables the server would inherit), asked with the deployment's status in the
same command when ``up`` starts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.fleet.protocol.common import Reader, Request, refused
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.model import RunState, frozen_map


def probe_request(
    port: int, model: str | None, bind: str, env: Mapping[str, str], directory: str | None
) -> Request:
    """The host's facts, ``import sglang`` checked under the server's environment (on the
    command's stdin: it may hold secrets, so never in an argv nor a file); with ``directory``,
    that deployment's status too."""
    # --opt=value: the agent's argparse takes any value so, even one starting with '-'
    # (validation refuses those; a profile is not the only way here)
    args = ["probe", "--port", str(port), f"--bind={bind}", "--env-file", "-"]
    if model is not None:
        args += [f"--model={model}"]
    if directory is not None:
        args += ["--dir", directory]
    return Request(tuple(args), json.dumps(dict(env)).encode(), timeout=180.0)


def decode_probe_reply(document: Any) -> tuple[HostFacts | None, RunState | None]:
    """The facts (None when the agent skipped them: something of the deployment runs) and the
    deployment's status (None when not asked)."""
    refused(document)  # an unsafe workdir or file: PreflightError naming it, with a hint
    status = document.get("status") if isinstance(document, dict) else None
    state = decode_state(status) if isinstance(status, dict) else None
    if isinstance(document, dict) and document.get("facts") == "skipped":
        return None, state
    return decode_probe(document), state


@dataclass(frozen=True)
class PortFacts:
    port: int
    free: bool
    holder_pid: int | None
    holder_cmdline: tuple[str, ...]


@dataclass(frozen=True)
class ModelFacts:
    path: str
    exists: bool
    looks_like_hub_id: bool


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int
    cmdline: tuple[str, ...]


@dataclass(frozen=True)
class GpuDevice:
    index: int
    name: str
    uuid: str
    memory_total: int
    memory_free: int
    compute_capability: tuple[int, int]
    processes: tuple[GpuProcess, ...]


@dataclass(frozen=True)
class GpuFacts:
    available: bool
    reason: str  # why not, when not available
    driver: str | None
    devices: tuple[GpuDevice, ...]


@dataclass(frozen=True)
class HostFacts:
    """``probe``: what preflight checks before a launch."""

    python: str
    executable: str
    hostname: str
    sglang_version: str | None
    sglang_error: str  # why ``import sglang`` failed, when it did
    psutil: str | None
    port: PortFacts
    model: ModelFacts | None
    gpus: GpuFacts
    # What the server would inherit of the host's environment, for the variables that shape a
    # distributed run (NCCL_*, GLOO_*, SGLANG_* ...); a secret-looking one as its digest only.
    inherited_env: Mapping[str, str] = field(default_factory=frozen_map)


def decode_probe(document: Any) -> HostFacts:
    reader = Reader(document, "agent probe")
    sglang = reader.child("sglang") or Reader({}, "agent probe.sglang")
    port = reader.child("port") or Reader({}, "agent probe.port")
    holder = port.child("holder")
    model = reader.child("model")
    return HostFacts(
        python=reader.text("python", "?"),
        executable=reader.text("executable", "?"),
        hostname=reader.text("hostname", "?"),
        sglang_version=sglang.opt_text("version"),
        sglang_error=sglang.opt_text("error") or "",
        psutil=reader.opt_text("psutil"),
        port=PortFacts(
            port=port.integer("port", 0),
            free=port.flag("free", True),
            holder_pid=holder.opt_integer("pid") if holder is not None else None,
            holder_cmdline=holder.texts("cmdline") if holder is not None else (),
        ),
        model=None
        if model is None
        else ModelFacts(
            path=model.text("path"),
            exists=model.flag("exists"),
            looks_like_hub_id=model.flag("looks_like_hub_id"),
        ),
        gpus=_decode_gpus(reader.child("gpus")),
        inherited_env=frozen_map(
            {str(k): str(v) for k, v in (reader.child("env") or Reader({}, "")).document.items()}
        ),
    )


def _decode_gpus(reader: Reader | None) -> GpuFacts:
    if reader is None or not reader.flag("available", False):
        reason = reader.opt_text("reason") if reader is not None else None
        return GpuFacts(False, reason or "NVML unavailable", None, ())
    devices = []
    for index, raw in enumerate(reader.items("devices")):
        device = Reader(raw, f"agent probe.gpus.devices[{index}]")
        processes = []
        for number, raw_process in enumerate(device.items("processes")):
            process = Reader(raw_process, f"{device.what}.processes[{number}]")
            processes.append(
                GpuProcess(
                    pid=process.integer("pid"),
                    used_bytes=process.opt_integer("used_bytes") or 0,
                    cmdline=process.texts("cmdline"),
                )
            )
        capability = [int(part) for part in device.items("compute_capability")] + [0, 0]
        devices.append(
            GpuDevice(
                index=device.integer("index"),
                name=device.text("name"),
                uuid=device.text("uuid", ""),
                memory_total=device.integer("memory_total"),
                memory_free=device.integer("memory_free"),
                compute_capability=(capability[0], capability[1]),
                processes=tuple(processes),
            )
        )
    return GpuFacts(True, "", reader.opt_text("driver"), tuple(devices))
