"""Preflight: the host's facts (``agent probe``) checked against the launch, before anything
starts: the python and its SGLang version, the port, the model path, the GPUs."""

from __future__ import annotations

from collections.abc import Generator, Iterator, Mapping

from orchestrator.commands.context import Launch
from orchestrator.commands.events import Step, UpEvent, Warn
from orchestrator.errors import PreflightError
from orchestrator.fleet.protocol.probe import GpuFacts, HostFacts
from orchestrator.model import Profile, RunState
from orchestrator.sglang import argtable


def check(
    launch: Launch,
    facts: HostFacts,
    environ: Mapping[str, str],
    *,
    replacing: RunState | None = None,
    rank: int = 0,
) -> Generator[UpEvent, None, Launch]:
    """Check the host of rank ``rank`` (0: a single server's) against the launch; returns it,
    spelled for the host's SGLang when the profile leaves the version open. ``replacing``: the
    server this launch will replace (its port is in use by it, and will be free)."""
    profile = launch.members[rank].profile
    host = profile.host.name
    version = facts.sglang_version
    on = f"{host}: " if launch.is_group else ""
    yield Step(f"{on}python {facts.python} ({facts.executable}), sglang {version or '-'}")
    if version is None:
        raise PreflightError(
            f"sglang is not importable with {facts.executable} on {host}: "
            f"{facts.sglang_error or 'unknown error'}",
            f"point hosts.{host}.python at the venv that holds sglang",
        )
    if profile.sglang_version is not None and version != profile.sglang_version:
        raise PreflightError(
            f"profile targets SGLang {profile.sglang_version}, the host has {version}",
            "flags are spelled per version: fix `sglang:` in the profile, or the host's python",
        )
    if profile.sglang_version is None:
        choice = argtable.table_for(version)
        if not choice.exact:
            raise PreflightError(
                f"{host} has SGLang {version}, and orch has no argument table for it: its flags "
                "cannot be spelled or checked",
                argtable.adding_hint(version) + "; or point the host's python at a release orch "
                "knows",
            )
        if choice.table.version != launch.table.version:
            launch = launch.spelled_for(choice.table, environ)
            yield Step(f"{on}flags spelled for the host's SGLang {version}")
    ours = replacing is not None and facts.port.holder_pid in (replacing.pid, None)
    if not facts.port.free and not ours:
        who = ""
        if facts.port.holder_pid:
            who = f" by pid {facts.port.holder_pid} ({' '.join(facts.port.holder_cmdline)})"
        raise PreflightError(
            f"port {profile.port} on {host} is in use{who}",
            "stop what holds it, or set another `port:`",
        )
    model = facts.model
    if model is not None and not model.exists and not model.looks_like_hub_id:
        raise PreflightError(
            f"model path {profile.model.path} does not exist on {host}",
            "model.path is a directory on the host (or a Hub id org/name)",
        )
    yield from _gpu_report(profile, facts.gpus, on)
    return launch


def _gpu_report(profile: Profile, gpus: GpuFacts, on: str) -> Iterator[UpEvent]:
    host = profile.host.name
    if not gpus.available:
        yield Warn(
            f"no GPU information on {host}: {gpus.reason}",
            "SGLang needs an NVIDIA driver to serve; fine for a stand-in or a dry run",
        )
        return
    wanted = set(profile.gpu.devices) or {str(d.index) for d in gpus.devices}
    for device in gpus.devices:
        if str(device.index) not in wanted and device.uuid not in wanted:
            continue
        total, free = device.memory_total / 1e9, device.memory_free / 1e9
        yield Step(f"{on}GPU{device.index} {device.name}: {free:.0f} of {total:.0f} GB free")
        gpu_type = profile.gpu.type
        if gpu_type is not None and not any(n in device.name for n in gpu_type.nvml_names):
            yield Warn(f"profile says {gpu_type.name}, GPU{device.index} is {device.name}")
        for process in device.processes:
            yield Warn(
                f"GPU{device.index} is in use by pid {process.pid} "
                f"({' '.join(process.cmdline)}, {process.used_bytes / 1e9:.1f} GB)",
                "another server may hold memory SGLang expects to be free",
            )
    present = {str(d.index) for d in gpus.devices} | {d.uuid for d in gpus.devices}
    absent = [device for device in profile.gpu.devices if device not in present]
    if absent:
        raise PreflightError(
            f"gpu.devices lists {', '.join(absent)}, which {host} does not have",
            f"the host has {len(gpus.devices)} GPU(s)",
        )
