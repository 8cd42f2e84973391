"""``start``: detach a supervisor for a deployment's server, from a spec file or stdin."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import sys
from typing import Any

from .daemon import start_detached, supervise
from .files import Paths, replace_private, write_json_atomic
from .roles import supervisor_for
from .spec import read_spec
from .trust import check_file, secure_deployment
from .world import RealClock


def _spec_from_stdin(paths: Paths) -> str:
    """``start --spec -``: the spec and the launch script arrive on stdin, in one JSON document
    (``{"spec": {...}, "launch_script": "..."}``), with the command: no file transfer before it.
    Written 0600 where ``start --spec FILE`` would have found them; the pending spec's path."""
    bundle = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    if not isinstance(bundle, dict) or not isinstance(bundle.get("spec"), dict):
        raise ValueError('start --spec -: stdin holds no {"spec": ...} document')
    if isinstance(bundle.get("launch_script"), str):
        check_file(paths.launch_script, "the launch script")
        replace_private(paths.launch_script, bundle["launch_script"].encode("utf-8"))
    pending = os.path.join(paths.root, f".spec-{secrets.token_hex(6)}.json")
    write_json_atomic(pending, bundle["spec"])
    return pending


def cmd_start(deployment_dir: str, spec_path: str, *, previous: bool = False) -> dict[str, Any]:
    """Detach a supervisor; answers once it holds its locks and has spawned the server.
    ``spec_path`` "-": the spec (and the launch script) are read from stdin. ``previous``: the
    launch before the current one, kept as ``spec.previous.json`` (the two change places, so
    that the launch it replaces is the previous one in turn)."""
    paths = Paths(deployment_dir)
    if previous:
        secure_deployment(paths, create=False)
        if not os.path.exists(paths.previous_spec):
            raise ValueError(f"{paths.previous_spec}: no previous launch to start again")
        spec = read_spec(paths.previous_spec)  # never unlinked on failure: it is the way back
        writer, answer = start_detached(paths, spec.port)
        if writer is None:
            return answer or {}
        swap = paths.spec + ".swap"
        os.replace(paths.previous_spec, swap)
        if os.path.exists(paths.spec):
            os.replace(paths.spec, paths.previous_spec)
        os.replace(swap, paths.spec)
        supervise(supervisor_for(spec, paths, clock=RealClock()), writer, None)
        return {}  # never reached: the supervisor exits itself
    try:
        secure_deployment(paths, create=True)
        if spec_path == "-":
            spec_path = _spec_from_stdin(paths)
        spec = read_spec(spec_path)
    except BaseException:
        if spec_path != "-":
            with contextlib.suppress(OSError):
                os.unlink(spec_path)  # it holds the server's environment: never left behind
        raise
    writer, answer = start_detached(paths, spec.port)
    if writer is None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(spec_path)
        return answer or {}
    if os.path.exists(paths.spec):
        os.replace(paths.spec, paths.previous_spec)  # 0600 already: the launch to go back to
    os.replace(spec_path, paths.spec)
    os.chmod(paths.spec, 0o600)
    supervisor = supervisor_for(spec, paths, clock=RealClock())
    supervise(supervisor, writer, None)
    return {}  # never reached: the supervisor exits itself
