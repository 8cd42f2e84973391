"""The supervisor's clock and its contacts with the world outside it, injected so that its logic
runs in-process in tests (tests/unit/test_supervisor_logic.py scripts both): Clock and World,
real by default (RealClock, RealWorld: spawning, the health probe, signals, the sweep of what a
run left behind), and the server processes it watches (a spawned child, an adopted stranger)."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import subprocess

from .http_json import Reply, exchange
from .identity import DEPLOYMENT_ENV, RUN_ID_ENV, proc_facts, process_identity, same_process
from .load_watch import read_loads
from .output import OutputWatcher
from .verdict import LOST_RETURNCODE


class Clock(Protocol):
    """Every time source of the supervisor. Intervals, deadlines, backoff, the start-limit
    window and health intervals use ``monotonic``; ``wall`` only stamps what users read."""

    def monotonic(self) -> float: ...

    def wall(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(self, event: threading.Event, timeout: float) -> bool:
        """Until ``event`` is set (True) or ``timeout`` seconds passed (False)."""


class RealClock:
    def monotonic(self) -> float:
        return time.monotonic()

    def wall(self) -> float:
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, event: threading.Event, timeout: float) -> bool:
        return event.wait(timeout)


class ServerProcess(Protocol):
    """A started server as the supervisor sees it (in subprocess.Popen's words)."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self) -> int: ...

    def drain(self, timeout: float) -> None:
        """Let the reader of the output reach its end, waiting at most ``timeout`` seconds
        (children that outlive the server can hold the pipe open)."""

    @property
    def ended(self) -> threading.Event:
        """Set as soon as the process ended (before it is reaped): the supervisor's loop waits
        on it between looks, so a death is seen when it happens, not at the next look."""
        ...


class World(Protocol):
    """The supervisor's contacts with the world outside it: RealWorld on a host, a scripted
    double in tests/unit/test_supervisor_logic.py."""

    def spawn(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], output: OutputWatcher
    ) -> ServerProcess:
        """Start the server in its own session and process group, stdin from /dev/null, its
        stdout and stderr fed to ``output`` (then closed); OSError when it cannot start."""

    def health_ok(self, host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool: ...

    def memory_loads(self, host: str, port: int) -> dict[str, Any]:
        """``GET /v1/loads?include=memory`` once READY: ``{"memory_loads": [...]}``, or
        ``{"memory_loads_error": why}`` (an older SGLang, another server)."""

    def loads(self, host: str, port: int, key: str | None) -> dict[str, Any]:
        """One bounded ``GET /v1/loads`` while READY (load_watch.read_loads): ``{"loads":
        [...]}`` or ``{"error": why}``."""

    def signal_group(self, pgid: int, sig: int) -> None:
        """Signal a process group; one that is gone already is no error."""

    def identity(self, pid: int) -> dict[str, Any] | None:
        """``process_identity``: pid, start, exe, head of cmdline; None when gone."""

    def received(self, pid: int, env_names: Sequence[str]) -> dict[str, Any] | None:
        """What the process runs as now: ``exe``, ``argv`` (/proc/PID/cmdline) and, of its
        environment, only ``env_names`` (``env``); None when it cannot be read."""

    def descendants(self, pid: int) -> dict[int, float]:
        """pid -> start time of every process under ``pid`` now (empty when it is gone)."""

    def sweep(self, deployment_dir: str, run_id: str, seen: dict[int, float]) -> list[int]:
        """Kill what is left of a run: every process carrying its markers or seen as a
        descendant (same pid and start time); the pids killed."""

    def gateway_exchange(
        self,
        method: str,
        url: str,
        *,
        key: str | None,
        timeout_s: float,
        payload: Mapping[str, Any] | None = None,
    ) -> Reply:
        """One call to the server's gateway (http_json.exchange): its reply whatever its
        status; http_json.Unreachable when none came."""


class RealWorld:
    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def spawn(
        self, argv: Sequence[str], cwd: str, env: dict[str, str], output: OutputWatcher
    ) -> ServerProcess:
        import subprocess

        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own session and process group
        )
        return _Spawned(process, output)

    def health_ok(self, host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool:
        return _health_ok(host, port, endpoint, timeout)

    def memory_loads(self, host: str, port: int) -> dict[str, Any]:
        return ask_memory_loads(host, port)

    def loads(self, host: str, port: int, key: str | None) -> dict[str, Any]:
        return read_loads(host, port, key=key)

    def signal_group(self, pgid: int, sig: int) -> None:
        _signal_group(pgid, sig)

    def identity(self, pid: int) -> dict[str, Any] | None:
        return process_identity(pid)

    def received(self, pid: int, env_names: Sequence[str]) -> dict[str, Any] | None:
        try:
            facts = proc_facts(pid, set(env_names))
        except OSError:  # it ended while being read: the last snapshot stands
            return None
        if not facts.get("argv"):
            return None
        try:
            exe: str | None = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            exe = None
        return {"exe": exe, "argv": facts["argv"], "env": facts.get("env", {})}

    def descendants(self, pid: int) -> dict[int, float]:
        found: dict[int, float] = {}
        try:
            import psutil

            for child in psutil.Process(pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    found[child.pid] = child.create_time()
        except Exception:  # noqa: BLE001, S110 - psutil missing or the root is gone: best effort
            pass
        return found

    def sweep(self, deployment_dir: str, run_id: str, seen: dict[int, float]) -> list[int]:
        return kill_leftovers(deployment_dir, run_id, seen, self.clock)

    def gateway_exchange(
        self,
        method: str,
        url: str,
        *,
        key: str | None,
        timeout_s: float,
        payload: Mapping[str, Any] | None = None,
    ) -> Reply:
        return exchange(method, url, key=key, timeout_s=timeout_s, payload=payload)


class _Spawned:
    """A real server process; a thread pumps its output into the watcher."""

    def __init__(self, process: subprocess.Popen[bytes], output: OutputWatcher) -> None:
        assert process.stdout is not None  # noqa: S101
        self.pid = process.pid
        self._process = process
        self._stream = process.stdout
        self._output = output
        self._thread = threading.Thread(target=self._pump, name="log-pump", daemon=True)
        self._thread.start()
        self.ended = threading.Event()
        threading.Thread(target=self._wait_exit, name="exit-waiter", daemon=True).start()

    def _wait_exit(self) -> None:
        """Block until the child ends, leaving it to be reaped by ``poll`` (WNOWAIT): the
        exit status stays Popen's."""
        try:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        except (ChildProcessError, OSError, AttributeError):  # reaped already; no waitid
            pass
        finally:
            self.ended.set()

    def _pump(self) -> None:
        """Read as fast as the server writes (a full pipe blocks the server): each read is
        fed once, in time linear in its size, whatever the length of the lines."""
        fd = self._stream.fileno()
        try:
            while True:
                try:
                    chunk = os.read(fd, 1 << 16)
                except OSError:
                    break
                if not chunk:
                    break
                self._output.feed(chunk)
        finally:
            self._output.close()
            self._stream.close()

    def poll(self) -> int | None:
        return self._process.poll()

    def wait(self) -> int:
        return self._process.wait()

    def drain(self, timeout: float) -> None:
        self._thread.join(timeout=timeout)


class Adopted:
    """A running server whose supervisor died, taken over by this one: not its child (no exit
    status, no pipe), so it is watched by identity, checked at every poll."""

    def __init__(self, identity: dict[str, Any], world: World, clock: Clock) -> None:
        self.pid = int(identity["pid"])
        self._identity = identity
        self._world = world
        self._clock = clock
        self._returncode: int | None = None
        self.ended = threading.Event()  # not our child: seen ended at a look, never woken

    def poll(self) -> int | None:
        if self._returncode is None and not same_process(
            self._identity, self._world.identity(self.pid)
        ):
            self._returncode = LOST_RETURNCODE
        return self._returncode

    def wait(self) -> int:
        while self.poll() is None:
            self._clock.sleep(0.05)
        return LOST_RETURNCODE

    def drain(self, timeout: float) -> None:
        """Nothing to read: its output went with the supervisor that died."""


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _health_ok(host: str, port: int, endpoint: str, timeout: float = 2.0) -> bool:
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}{endpoint}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


class Descendants:
    """Processes seen under the server while it ran: (pid, create_time), so that a pid reused
    by an unrelated process is never killed."""

    def __init__(self, root_pid: int, clock: Clock, world: World) -> None:
        self.root_pid = root_pid
        self.seen: dict[int, float] = {}
        self._clock = clock
        self._world = world
        self._next = 0.0

    def refresh(self) -> None:
        now = self._clock.monotonic()
        if now < self._next:
            return
        self._next = now + 0.5
        self.seen.update(self._world.descendants(self.root_pid))


def kill_leftovers(
    deployment_dir: str, run_id: str, seen: dict[int, float], clock: Clock
) -> list[int]:
    try:
        import psutil
    except ImportError:
        return []
    killed: list[int] = []
    for process in psutil.process_iter(["pid", "create_time"]):
        pid = process.info["pid"]
        if pid == os.getpid():
            continue
        mine = seen.get(pid) == process.info["create_time"]
        if not mine:
            with contextlib.suppress(psutil.Error):
                environ = process.environ()
                mine = (
                    environ.get(RUN_ID_ENV) == run_id
                    and environ.get(DEPLOYMENT_ENV) == deployment_dir
                )
        if mine:
            with contextlib.suppress(psutil.Error):
                process.kill()
                killed.append(pid)
    _wait_gone(killed, 5.0, clock)
    return killed


def _wait_gone(pids: Sequence[int], timeout: float, clock: Clock) -> None:
    """Until each pid is gone or a zombie (a reparented one is reaped by someone else)."""
    import psutil

    deadline = clock.monotonic() + timeout
    waiting = list(pids)
    while waiting and clock.monotonic() < deadline:
        still = []
        for pid in waiting:
            with contextlib.suppress(psutil.Error):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    still.append(pid)
        waiting = still
        if waiting:
            clock.sleep(0.02)


LOADS_TIMEOUT_S = 1.0


def ask_memory_loads(host: str, port: int) -> dict[str, Any]:
    """What the server says of its memory once READY (``GET /v1/loads?include=memory``,
    0.5.11+): per DP rank, the weights, KV cache and CUDA graphs in GB, its token capacity."""
    import urllib.error
    import urllib.request

    url = f"http://{host}:{port}/v1/loads?include=memory"
    try:
        with urllib.request.urlopen(url, timeout=LOADS_TIMEOUT_S) as response:
            document = json.loads(response.read(1 << 20))
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return {"memory_loads_error": f"/v1/loads: {exc}"}
    loads = document.get("loads") if isinstance(document, dict) else None
    if not isinstance(loads, list):
        return {"memory_loads_error": "/v1/loads: no loads in the answer"}
    kept = (
        "dp_rank",
        "memory",
        "max_total_num_tokens",
        "max_running_requests",
        "num_running_reqs",
        "token_usage",
    )
    return {
        "memory_loads": [
            {key: load[key] for key in kept if key in load}
            for load in loads
            if isinstance(load, dict)
        ]
    }


def spawn_failure(argv: Sequence[str], exc: OSError) -> str:
    """Why the server could not be started, in words that say what to fix."""
    program = argv[0] if argv else "?"
    why = f"cannot start {program}: {exc.strerror or exc}"
    if exc.errno == errno.E2BIG:
        longest = max((len(arg.encode()) for arg in argv), default=0)
        why += (
            f" (the longest argument is {longest} bytes; the kernel refuses any single "
            "argument over 128 KiB, MAX_ARG_STRLEN, and all of them with the environment over "
            "ARG_MAX)"
        )
    elif exc.errno == errno.ENOEXEC:
        why += " (not a program this host can run: a script without #!, or another architecture)"
    elif exc.errno == errno.ENOENT and os.path.exists(program):
        why += " (the program exists: the interpreter on its #! line does not)"
    return why
