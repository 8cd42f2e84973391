"""``tail``: the last lines of a run's log, read on the host in one command."""

from __future__ import annotations

import base64
import os
import re
from typing import Any

from .files import NOFOLLOW, Paths, read_json
from .protocol import PROTOCOL
from .trust import secure_deployment

TAIL_READ_MAX = 64 << 20  # the most of a log one tail reads, whatever -n asks


def _read_window(path: str, size: int, window: int) -> bytes:
    """The lines in the last ``window`` bytes of ``path`` (a line cut at the start left out)."""
    start = max(size - window, 0)
    try:
        fd = os.open(path, os.O_RDONLY | NOFOLLOW)
    except FileNotFoundError:
        return b""
    with os.fdopen(fd, "rb") as handle:
        handle.seek(start)
        data = handle.read(size - start)
    if start > 0:
        data = data.split(b"\n", 1)[1] if b"\n" in data else b""
    return data


def cmd_tail(
    deployment_dir: str, run_id: str | None, lines: int, bytes_per_line: int
) -> dict[str, Any]:
    """The last ``lines`` of a run's log, read on the host (``orch logs -n N`` in one command
    instead of a file session and a read per piece): ``run_id``, else the deployment's current
    run, else its newest on disk. From ``server.log.1`` too when the log holds fewer lines
    since a rotation. Answers the bytes (base64: orch decodes them), the log's size (where
    ``-f`` goes on from) and the rotated file's size (how ``-f`` sees the next rotation)."""
    paths = Paths(deployment_dir)
    if not secure_deployment(paths):
        return {"protocol": PROTOCOL, "ok": False, "reason": "not deployed"}
    if run_id is None:
        state = read_json(paths.state) or {}
        current = state.get("run_id")
        run_id = current if isinstance(current, str) else None
    if run_id is None:
        names = sorted(os.listdir(paths.runs)) if os.path.isdir(paths.runs) else []
        if not names:
            return {"protocol": PROTOCOL, "ok": False, "reason": "no runs"}
        run_id = names[-1]
    if not re.fullmatch(r"[A-Za-z0-9_-][A-Za-z0-9_.-]*", run_id):
        return {"protocol": PROTOCOL, "ok": False, "reason": f"not a run id: {run_id!r}"}
    log = os.path.join(paths.runs, run_id, "server.log")
    rotated = f"{log}.1"

    def size_of(path: str) -> int | None:
        try:
            return os.lstat(path).st_size
        except FileNotFoundError:
            return None

    rotated_size, size = size_of(rotated), size_of(log)
    answer: dict[str, Any] = {
        "protocol": PROTOCOL,
        "ok": size is not None,
        "run_id": run_id,
        "log": log,
        "size": size,
        "rotated_size": rotated_size,
    }
    if size is None:
        answer["reason"] = "no log"
        return answer
    window = min(max(lines, 0) * max(bytes_per_line, 1), TAIL_READ_MAX)
    data = _read_window(log, size, window) if lines > 0 else b""
    if lines > 0 and size < window and rotated_size and data.count(b"\n") < lines:
        data = _read_window(rotated, rotated_size, window - size) + data
    kept = b"".join(data.splitlines(keepends=True)[-lines:]) if lines > 0 else b""
    answer["data"] = base64.b64encode(kept).decode("ascii")
    return answer
