"""Process plumbing as SGLang does it: process titles, PR_SET_PDEATHSIG, spawning children.

SGLang's children call ``setproctitle("sglang::scheduler...")`` (which rewrites the argv area, so
``/proc/PID/cmdline`` reads ``sglang::scheduler_TP0`` plus NUL padding, and sets the 15-byte
``/proc/PID/comm`` to ``sglang::schedul``) and ``prctl(PR_SET_PDEATHSIG, SIGKILL)``. Without the
setproctitle package the stand-in does the same with ctypes and ``/proc/self/mem`` (Linux).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
PARENT_ENV = "ORCH_STANDIN_PARENT"  # every child's marker: the main process's pid
STANDIN_ROOT = Path(__file__).resolve().parents[2]  # the directory holding the sglang package


def _prctl(option: int, arg: int | bytes) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        value = ctypes.c_char_p(arg) if isinstance(arg, bytes) else ctypes.c_ulong(arg)
        return int(libc.prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def set_title(title: str) -> None:
    """Rename this process: comm (``sglang::schedul``) and, where /proc/self/mem allows, cmdline."""
    encoded = title.encode()
    _prctl(PR_SET_NAME, encoded[:15])
    with contextlib.suppress(OSError, ValueError, IndexError):
        stat = Path("/proc/self/stat").read_bytes()
        fields = stat[stat.rindex(b")") + 2 :].split()  # fields[0] is field 3 (state)
        arg_start, arg_end = int(fields[45]), int(fields[46])  # fields 48 and 49
        size = arg_end - arg_start
        if size < 2:
            return
        text = encoded[: size - 1]
        descriptor = os.open("/proc/self/mem", os.O_RDWR)
        try:
            os.pwrite(descriptor, text + b"\0" * (size - len(text)), arg_start)
        finally:
            os.close(descriptor)


def die_with_parent() -> bool:
    """PR_SET_PDEATHSIG=SIGKILL, as SGLang's kill_itself_when_parent_died()."""
    return _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL))


def spawn_child(spec: dict[str, Any], pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start ``python -m sglang._standin.child SPEC`` sharing this process's stdout and stderr."""
    env = dict(os.environ)
    env[PARENT_ENV] = str(os.getpid())
    python_path = env.get("PYTHONPATH", "")
    env["PYTHONPATH"] = str(STANDIN_ROOT) + (os.pathsep + python_path if python_path else "")
    return subprocess.Popen(
        [sys.executable, "-m", "sglang._standin.child", json.dumps(spec, separators=(",", ":"))],
        stdin=subprocess.PIPE,
        pass_fds=pass_fds,
        env=env,
    )
