"""The probe's command line: ``REQUEST.json`` or ``-`` (the request on stdin), started again once
under the request's environment (the server's), answering one JSON document on stdout."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sys
import tempfile
from collections.abc import Mapping
from typing import Any

from orchestrator.remote.host import gpus, program
from orchestrator.remote.probe.cache import through_cache
from orchestrator.remote.probe.resolve import plan
from orchestrator.remote.probe.values import PROTOCOL

PACKAGE = __name__.rpartition(".")[0]  # orchestrator.remote.probe, the program run again
IN_ENV_FLAG = "--in-server-env"


def handed_on(data: bytes, directory: str | None) -> tuple[str, bool]:
    """Where the request read from stdin waits for the probe started again under the server's
    environment: a pipe it inherits (``/dev/fd/N``: never a file), or, when the request
    outgrows the pipe, a 0600 file in ``directory`` (None: the temporary directory) it removes
    once read. The path, and whether it is a file."""
    reader, writer = os.pipe()
    with contextlib.suppress(OSError, AttributeError):
        fcntl.fcntl(writer, fcntl.F_SETPIPE_SZ, 1 << 20)
    try:
        room = fcntl.fcntl(writer, fcntl.F_GETPIPE_SZ)
    except (OSError, AttributeError):
        room = 1 << 16
    if len(data) < room:
        os.write(writer, data)
        os.close(writer)
        os.set_inheritable(reader, True)
        return f"/dev/fd/{reader}", False
    os.close(reader)
    os.close(writer)
    fd, path = tempfile.mkstemp(prefix=".plan-", suffix=".json", dir=directory)
    with os.fdopen(fd, "wb") as handle:  # mkstemp: 0600
        handle.write(data)
    return path, True


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or len(argv) > 2 or (len(argv) == 2 and argv[1] != IN_ENV_FLAG):
        sys.stderr.write("usage: probe REQUEST.json|-\n")
        return 2
    source = argv[0]
    if source == "-":  # the request on stdin (orch's way: it holds the server's environment)
        data = sys.stdin.buffer.read()
        request = json.loads(data)
        request["remove_request"] = False
    else:
        with open(source, "rb") as handle:
            data = handle.read()
        request = json.loads(data)
    env = {str(k): str(v) for k, v in (request.get("env") or {}).items()}
    if env and IN_ENV_FLAG not in argv:
        # Start again under the server's environment, as the server starts: PYTHONPATH,
        # LD_LIBRARY_PATH and SGLANG_* take effect only from the interpreter's start.
        # The same checked bytes run again (program.rerun_argv): never this program's file by name.
        merged = {**os.environ, **env}
        if source == "-":
            source, is_file = handed_on(data, program.home(PACKAGE))
            if is_file:
                request["remove_request"] = True
                with open(source, "w", encoding="utf-8") as handle:
                    json.dump(request, handle)
        again = program.rerun_argv(PACKAGE)
        os.execve(again[0], [*again, source, IN_ENV_FLAG], merged)
    if request.get("remove_request") and not source.startswith("/dev/fd/"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(source)  # it holds the server's environment (tokens)
    # the cache is looked up before SGLang is imported (that import is what it saves)
    result = through_cache(
        request,
        lambda: _planned(request),
        probe_digest=lambda: program.digest(PACKAGE),
        read_gpus=lambda: gpus.read(None),
    )
    sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
    sys.stdout.flush()
    return 0


def _planned(request: Mapping[str, Any]) -> dict[str, Any]:
    try:
        return plan(request)
    except ImportError as exc:
        return {
            "protocol": PROTOCOL,
            "ok": False,
            "error": {"stage": "import", "type": type(exc).__name__, "message": str(exc)},
        }
