"""``probe``: the host's facts orch checks before a launch (python, sglang, psutil, the port,
the model path, the GPUs, the environment a distributed run inherits)."""

from __future__ import annotations

import json
import os
import re
import sys
from typing import Any

from ..host import gpus
from .cmd_status import cmd_status
from .files import read_json, remove_env_file
from .identity import cmdline, port_holder
from .protocol import PROTOCOL
from .trust import check_file


def cmd_probe(
    port: int,
    model: str | None,
    bind: str,
    env_file: str | None,
    deployment_dir: str | None = None,
) -> dict[str, Any]:
    """Facts orch checks before a launch; secrets are never part of them. ``env_file``: the
    server's environment (0600, removed once read), so that ``import sglang`` is checked the
    way the server will import it (PYTHONPATH, LD_LIBRARY_PATH ...). With ``deployment_dir``,
    the deployment's status (cmd_status) comes with them, in one command; while something of
    that deployment runs (or died without an end) only the status: the facts would be those
    of a host the next step changes (``"facts": "skipped"``)."""
    import socket

    env = dict(os.environ)
    inherited = distributed_env(env)  # before the spec's own: what this host adds by itself
    if env_file == "-":  # with the command, on stdin: never in a file, never in an argv
        given = json.loads(sys.stdin.buffer.read().decode("utf-8") or "{}")
        env.update({str(k): str(v) for k, v in given.items()} if isinstance(given, dict) else {})
    elif env_file is not None:
        try:
            check_file(env_file, "the probe's environment file")
            env.update(read_json(env_file) or {})
        finally:
            remove_env_file(env_file)

    status = cmd_status(deployment_dir) if deployment_dir is not None else None
    if status is not None and (
        status.get("agent_alive") or status.get("server_alive") or status.get("stale")
    ):
        return {"protocol": PROTOCOL, "facts": "skipped", "status": status}
    facts: dict[str, Any] = {
        "protocol": PROTOCOL,
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "hostname": socket.gethostname(),
    }
    facts["sglang"] = _sglang_version(env)
    try:
        import psutil

        facts["psutil"] = psutil.__version__
    except ImportError:
        facts["psutil"] = None
    facts["port"] = {"port": port, "free": _port_free(bind, port), "holder": port_holder(port)}
    if model is not None:
        facts["model"] = {
            "path": model,
            "exists": os.path.exists(model),
            "looks_like_hub_id": bool(re.fullmatch(r"[\w.-]+/[\w.-]+", model))
            and not model.startswith(("/", ".")),
        }
    facts["gpus"] = _gpus(env.get("CUDA_VISIBLE_DEVICES"))
    facts["env"] = inherited
    if status is not None:
        facts["status"] = status
    return facts


# Variables of the host's own environment that shape a distributed run: a launch group's nodes
# must agree on them (orch compares them across nodes), and a server inherits them silently.
DISTRIBUTED_ENV_PREFIXES = (
    "NCCL_",
    "GLOO_",
    "SGLANG_",
    "TORCH_",
    "PYTORCH_",
    "CUDA_",
    "NVSHMEM_",
    "UCX_",
    "HF_",
    "TRANSFORMERS_",
    "FLASHINFER_",
    "TRITON_",
    "NVIDIA_",
    "MC_",
    "TP_SOCKET_IFNAME",
    "MASTER_ADDR",
    "MASTER_PORT",
    "LD_LIBRARY_PATH",
    "OMP_NUM_THREADS",
)
_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSW|KEY|CREDENTIAL", re.IGNORECASE)


def distributed_env(environ: dict[str, str]) -> dict[str, str]:
    """``environ``'s variables of DISTRIBUTED_ENV_PREFIXES; a secret-looking one (HF_TOKEN) as a
    digest of its value: enough to tell two nodes apart, nothing to read."""
    import hashlib

    found = {}
    for name, value in environ.items():
        if not name.startswith(DISTRIBUTED_ENV_PREFIXES):
            continue
        if _SECRET_NAME.search(name):
            value = "sha256:" + hashlib.sha256(value.encode()).hexdigest()[:12]
        found[name] = value
    return dict(sorted(found.items()))


_VERSION_PROBE = """
try:
    from importlib import metadata
    print(metadata.version("sglang"))
except Exception:
    import sglang
    print(sglang.__version__)
"""


def _sglang_version(env: dict[str, str]) -> dict[str, Any]:
    """In a child with the server's environment: metadata first (fast), else the import."""
    import subprocess

    try:
        done = subprocess.run(
            [sys.executable, "-c", _VERSION_PROBE],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=env,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"version": None, "error": str(exc)}
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        return {"version": None, "error": lines[-1] if lines else "import sglang failed"}
    return {"version": done.stdout.strip().splitlines()[-1]}


def _port_free(bind: str, port: int) -> bool:
    import socket

    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        # As uvicorn does: connections of a server that just stopped linger in TIME_WAIT and
        # would make a plain bind fail although the server itself could bind.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((bind, port))
        except OSError:
            return False
    return True


def _gpus(visible_devices: str | None) -> dict[str, Any]:
    """The GPUs a server started with this environment would see (``CUDA_VISIBLE_DEVICES``), as
    the one NVML reader of the pushed programs reads them (remote/host/gpus.py), in the probe
    answer's shape: the devices read, or why none (a device NVML stops at leaves the others)."""
    reading = gpus.read(visible_devices, processes=True)
    if not reading.gpus:
        return {"available": False, "reason": reading.error or "no GPU visible"}
    devices = [
        {
            "index": gpu.index,
            "name": gpu.name,
            "uuid": gpu.uuid,
            "memory_total": gpu.total_bytes,
            "memory_free": gpu.free_bytes,
            "compute_capability": list(gpu.compute_capability or ()),
            "processes": [
                {"pid": p.pid, "used_bytes": p.used_bytes, "cmdline": cmdline(p.pid)}
                for p in gpu.processes
            ],
        }
        for gpu in reading.gpus
    ]
    answer: dict[str, Any] = {"available": True, "driver": reading.driver, "devices": devices}
    if reading.error:
        answer["reason"] = reading.error  # read part of the way: why not further
    return answer
