"""What a profile may write in place of plain text, checked the same in every section:
environment variables (``env:`` and a group node's ``env:``), ``{from_env: NAME}`` secrets,
``{from_orch: NAME}`` paths in this installation, and the bound on every duration."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.model import EnvValue, GpuSpec, Host, SecretRef
from orchestrator.profile.bundled import BUNDLED, bundled_path
from orchestrator.profile.doccheck import MISSING, DocChecker, kind
from orchestrator.profile.inventory import LOCAL_HOST
from orchestrator.profile.yamldoc import KeyPath

_DEVICE_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")
ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# Durations are slept and waited on by the agent: a finite bound keeps every one of them within
# what the host's clock and timers take (time.sleep(1e308) raises; .inf is refused by yamldoc).
MAX_SECONDS = 366 * 86400.0


def env_section(
    checker: DocChecker, at: KeyPath, gpu: GpuSpec, host: Host | None = None
) -> dict[str, EnvValue]:
    raw = checker.mapping(at) or {}
    env: dict[str, EnvValue] = {}
    if gpu.devices and at == ("env",):
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu.devices)
    for name, value in raw.items():
        path: KeyPath = (*at, name)
        if not ENV_NAME_RE.match(name):
            checker.error(
                path, f"bad environment variable name {name!r}", "use [A-Za-z_][A-Za-z0-9_]*"
            )
            continue
        if name == "CUDA_VISIBLE_DEVICES" and gpu.devices:
            checker.error(path, "set twice: also derived from gpu.devices", "keep gpu.devices")
            continue
        if isinstance(value, dict) and "from_orch" in value:
            bundled = from_orch(checker, path, host)
            if bundled is not None:
                env[name] = bundled
            continue
        secret = secret_ref(checker, path, value)
        if secret is not None:
            env[name] = secret
        elif isinstance(value, bool):
            checker.error(
                path,
                f"expected a string, got {str(value).lower()}",
                'quote it: "1", "0", "true" — the server reads text',
            )
        elif isinstance(value, str | int | float):
            text = str(value)
            if "\0" in text:
                checker.error(path, "NUL bytes cannot be in an environment variable")
            else:
                env[name] = text
        elif not isinstance(value, dict):
            checker.error(path, f"expected a string or {{from_env: NAME}}, got {kind(value)}")
    return env


def from_orch(checker: DocChecker, path: KeyPath, host: Host | None) -> str | None:
    """``{from_orch: NAME}``: a path in this installation of orch (profile/bundled.py), for a
    server on this machine only."""
    value = checker.get(path)
    if not isinstance(value, dict):
        return None
    name = value.get("from_orch")
    if set(value) != {"from_orch"} or name not in BUNDLED:
        checker.error(
            path,
            f"expected {{from_orch: NAME}} with NAME one of {', '.join(BUNDLED)}",
            "standin: the directory of orch's SGLang stand-in (for PYTHONPATH); "
            "standin-model: its model directory",
        )
        return None
    if host is None or host.name != LOCAL_HOST:
        checker.error(
            path,
            f"{{from_orch: {name}}} is a path on this machine: only for host: local",
            "give the path on the host instead",
        )
        return None
    return bundled_path(str(name))


def secret_ref(checker: DocChecker, path: KeyPath, value: Any) -> SecretRef | None:
    """``{from_env: NAME}``: a value read from the local environment at launch."""
    if not isinstance(value, dict):
        return None
    if set(value) != {"from_env"} or not isinstance(value["from_env"], str):
        checker.error(
            path,
            "expected {from_env: NAME}",
            "secrets come from your local environment and are never written in a profile",
        )
        return None
    source_name = value["from_env"]
    if not ENV_NAME_RE.match(source_name):
        checker.error((*path, "from_env"), f"bad environment variable name {source_name!r}")
        return None
    return SecretRef(source_name)


def looks_secret(value: object) -> bool:
    """In ``args`` a mapping is JSON for SGLang unless it is written as a secret reference."""
    return isinstance(value, dict) and "from_env" in value


def device_list(checker: DocChecker, path: KeyPath) -> tuple[str, ...] | None:
    """``gpu.devices`` (the profile's, a replica's): CUDA_VISIBLE_DEVICES entries, each a GPU
    index or a GPU-/MIG- UUID, none twice; None when the key is absent."""
    raw = checker.get(path)
    if raw is MISSING:
        return None
    if not isinstance(raw, list):
        checker.error(path, f"expected a list such as [0, 1], got {kind(raw)}")
        return ()
    devices: list[str] = []
    for index, item in enumerate(raw):
        at: KeyPath = (*path, index)
        if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
            device = str(item)
        elif isinstance(item, str) and _DEVICE_UUID_RE.match(item):
            device = item
        else:
            checker.error(at, f"expected a GPU index or GPU-/MIG- UUID, got {item!r}")
            continue
        if device in devices:
            checker.error(at, f"GPU {device} is listed twice")
        devices.append(device)
    return tuple(devices)
