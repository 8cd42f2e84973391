"""The agent's client: push the agent (``remote/agent/``) and ``remote/sglang_probe.py``, call
them, and hand back every answer decoded (``protocol/``, each command's request beside its
decoder) into a frozen value.

Everything crosses to the host as an argv (``<python> <agent.py> <command> --dir ...``) and comes
back as one JSON document on the last line of stdout, or as JSON lines while it happens (a
stream). The run spec, which holds the server's environment (secrets included), travels on the
command's stdin (the agent writes it 0600) and never appears in an argv.

Round trips decide how orch feels on a host 20-150 ms away, so ``up`` asks in two commands on
one connection: ``probe --dir`` (the deployment's status and the host's facts), then ``start
--watch`` (the supervisor started, the startup streamed on the same channel, the inspection at
READY ahead of the READY state).
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import posixpath
import threading
import zlib
from collections.abc import Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.effective.plan import PlanAnswer
from orchestrator.effective.verify import Observation
from orchestrator.errors import (
    OrchError,
    PreflightError,
    ProgramNotFound,
    RemoteCommandError,
    SupervisorError,
)
from orchestrator.fleet.protocol.common import Request, last_json_line
from orchestrator.fleet.protocol.inspect import (
    InspectRequest,
    LastRun,
    decode_inspect,
    inspect_request,
)
from orchestrator.fleet.protocol.plan import decode_plan_answer, plan_request
from orchestrator.fleet.protocol.probe import HostFacts, decode_probe_reply, probe_request
from orchestrator.fleet.protocol.reach import (
    ProbeAnswer,
    decode_probe_answer,
    listen_request,
    reach_request,
)
from orchestrator.fleet.protocol.runs import RunInfo, RunsReply, decode_runs_reply, runs_request
from orchestrator.fleet.protocol.start import (
    StartReply,
    adopt_request,
    decode_start,
    start_request,
    start_stdin,
    start_watch_args,
)
from orchestrator.fleet.protocol.status import decode_state, status_request
from orchestrator.fleet.protocol.stop import StopReply, decode_stop, stop_request
from orchestrator.fleet.protocol.tail import TailReply, decode_tail, tail_request
from orchestrator.fleet.protocol.watch import watch_args
from orchestrator.model import Host, RunState
from orchestrator.remote import agent as agent_package
from orchestrator.remote.agent.protocol import PROTOCOL
from orchestrator.transport import Stream, Transport, expand_home


class PendingStart:
    """``agent.py start --watch`` opened before its spec is known (``Agent.open_start``)."""

    def __init__(self, agent: Agent, args: tuple[str, ...]) -> None:
        self._agent = agent
        self._args = args
        self._opened: Stream | None = None
        self._done = False
        deployment = agent.deployment
        self._argv = (deployment.python, "-c", BOOTSTRAP, deployment.agent_path, AGENT_SHA256,
                      "--stdin-first", *args)  # fmt: skip
        self._thread = threading.Thread(target=self._open, name="orch-open-start", daemon=True)
        self._thread.start()

    def _open(self) -> None:
        with contextlib.suppress(OrchError, OSError):  # send() starts it again and says why
            self._opened = self._agent.transport.stream(self._argv, hold_stdin=True)

    def send(
        self, spec: Mapping[str, Any], launch_script: str
    ) -> tuple[StartReply, Generator[dict[str, Any], None, None] | None]:
        """Start: the spec and the launch script on the waiting command's stdin."""
        self._thread.join()
        self._done = True
        bundle = start_stdin(spec, launch_script)
        opened = self._opened
        if opened is not None:
            opened.finish_stdin(bundle)
        events = self._agent._stream(self._args, bundle, opened=opened, stdin_first=True)
        return self._agent._started(events)

    def cancel(self) -> None:
        """Called off: an empty stdin, on which the bootstrap ends having done nothing."""
        if self._done:
            return
        self._done = True
        self._thread.join()
        if self._opened is not None:
            self._opened.finish_stdin(b"")
            self._opened.close()


@functools.cache
def _compressed(source: bytes) -> bytes:
    return zlib.compress(source, 6)


def _carrying(
    argv: tuple[str, ...], source: bytes, stdin: bytes | None
) -> tuple[tuple[str, ...], bytes]:
    """The bootstrap's argv and stdin that carry ``source`` (see BOOTSTRAP's ``--carried``)."""
    blob = _compressed(source)
    return (*argv[:5], "--carried", str(len(blob)), *argv[5:]), blob + (stdin or b"")


WATCH_SILENCE_S = 5.0  # the watcher beats every second: this long without a line, it is lost


class WatchSilent(Exception):
    """The agent's watch stream went silent: follow falls back to looking itself."""


# INTERIM (issue 27): the bundle branch replaces this with its deterministic zip (fleet/bundle.py)
# and a bootstrap that imports from the checked bytes. Until then the agent package travels as
# ONE Python file, pushed, checked and run by the bootstrap below as the single-file agent was:
# its modules' sources in a dict, imported through a finder of its own (never from the disk: a
# supervisor that imports a module days later gets the bytes that were checked), then the
# package's __main__ run. The file's bytes depend only on the sources.
_INTERIM_RUNNER = """\
import importlib.abc, importlib.util, runpy, sys
MODULES = %s
class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        if name not in MODULES:
            return None
        return importlib.util.spec_from_loader(name, self, is_package=MODULES[name][1])
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        module.__file__ = MODULES[module.__name__][2]
        exec(self.get_code(module.__name__), module.__dict__)
    def get_code(self, name):
        return compile(MODULES[name][0], MODULES[name][2], "exec", dont_inherit=True)
    def get_source(self, name):
        return MODULES[name][0]
    def is_package(self, name):
        return MODULES[name][1]
sys.meta_path.insert(0, Finder())
runpy.run_module("orch_agent", run_name="__main__", alter_sys=True)
"""


def _interim_agent_source() -> bytes:
    """The agent package as one Python file (see _INTERIM_RUNNER), its package ``orch_agent``."""
    root = Path(agent_package.__file__).parent
    modules: dict[str, tuple[str, bool, str]] = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        package = parts[-1] == "__init__"
        name = ".".join(("orch_agent", *(parts[:-1] if package else parts)))
        where = "/".join(("orch-agent", *path.relative_to(root).parts))  # tracebacks name it
        modules[name] = (path.read_text(encoding="utf-8"), package, where)
    return (_INTERIM_RUNNER % repr(modules)).encode("utf-8")


AGENT_SOURCE = _interim_agent_source()
AGENT_SHA256 = hashlib.sha256(AGENT_SOURCE).hexdigest()
AGENT_DIGEST = AGENT_SHA256[:12]
PROBE_FILE = Path(agent_package.__file__).parent.with_name("sglang_probe.py")
PROBE_SOURCE = PROBE_FILE.read_bytes()
PROBE_SHA256 = hashlib.sha256(PROBE_SOURCE).hexdigest()
PROBE_DIGEST = PROBE_SHA256[:12]

# The pushed files are never run by name: this runs them only after checking, on the host, that
# their directory and the file belong to the SSH user and nobody else can write them (OpenSSH's
# StrictModes), and that their content is what this orch pushed (sha256). It then runs the bytes
# it checked, as ``__main__`` with the script's own directory first on sys.path (as
# ``python FILE`` would). Exit codes 90-92 say why it did not run. Python 3.9+, stdlib only.
#
# ``--carried N`` (before the script's arguments): the first N bytes of stdin are the file,
# zlib-compressed, sent with the command instead of by a file transfer of its own. Written when
# the host lacks it (0600, atomically; missing directories 0700), checked like any other, then
# run with the rest of stdin.
#
# ``--stdin-first`` (after ``--carried``, if both): all of stdin is read before anything else is
# looked at; empty, it ends there, having done nothing. A command can thus be started before
# orch knows what it will send it (``Agent.open_start``), and called off.
#
# The compiled code is kept beside the file (``<file>.<cache tag>.code``, 0600, written
# atomically): compiling the agent costs ~60 ms of every command on the host. It is used only
# when it is as safe as the file (ours, not writable by others, no link) and names the sha256
# of the checked file and of its own content; anything else and the file is compiled again.
BOOTSTRAP = """\
import hashlib, marshal, os, sys, types, zlib
path, want = sys.argv[1], sys.argv[2]
def stop(code, why):
    sys.stderr.write("orch-bootstrap: " + why + "\\n")
    raise SystemExit(code)
def unsafe(st):
    return st.st_uid != os.getuid() or st.st_mode & 0o022
directory = os.path.dirname(path)
rest = sys.argv[3:]
if rest[:1] == ["--carried"]:
    carried, rest = sys.stdin.buffer.read(int(rest[1])), rest[2:]
    if not os.path.exists(path):
        data = zlib.decompress(carried)
        if hashlib.sha256(data).hexdigest() != want:
            stop(91, path + ": the carried file is not the one orch sent")
        made = ""
        for part in directory.split("/")[1:]:
            made += "/" + part
            try:
                os.mkdir(made, 0o700)
            except FileExistsError:
                pass
        if unsafe(os.stat(directory)):
            stop(92, directory + " is not owned by you or is writable by others")
        temp = path + "." + str(os.getpid()) + ".tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(temp, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temp, path)
        except BaseException:
            os.unlink(temp)
            raise
if rest[:1] == ["--stdin-first"]:
    import io
    rest, held = rest[1:], sys.stdin.buffer.read()
    if not held:
        raise SystemExit(0)
    sys.stdin = io.TextIOWrapper(io.BytesIO(held), encoding="utf-8")
try:
    if unsafe(os.stat(directory)):
        stop(92, directory + " is not owned by you or is writable by others")
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
except FileNotFoundError:
    stop(90, path + " is missing")
except OSError as exc:
    stop(92, path + ": " + exc.strerror + " (a symlink?)")
with os.fdopen(fd, "rb") as handle:
    if unsafe(os.fstat(handle.fileno())):
        stop(92, path + " is not owned by you or is writable by others")
    data = handle.read()
if hashlib.sha256(data).hexdigest() != want:
    stop(91, path + " is not the file orch pushed")
cache = path + "." + str(sys.implementation.cache_tag) + ".code"
code = None
try:
    fd = os.open(cache, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        if not unsafe(os.fstat(handle.fileno())):
            blob = handle.read()
            body = blob[128:]
            if blob[:128] == (want + hashlib.sha256(body).hexdigest()).encode():
                code = marshal.loads(body)
except (OSError, ValueError, EOFError, TypeError):
    code = None
if code is None:
    code = compile(data, path, "exec")
    temp = cache + "." + str(os.getpid()) + ".tmp"
    try:
        body = marshal.dumps(code)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(temp, flags, 0o600), "wb") as handle:
            handle.write((want + hashlib.sha256(body).hexdigest()).encode() + body)
        os.rename(temp, cache)
    except (OSError, ValueError):
        try:
            os.unlink(temp)  # a full disk: never a cache cut short left behind
        except OSError:
            pass
module = types.ModuleType("__main__")
module.__file__ = path
sys.modules["__main__"] = module
sys.argv = [path] + rest
sys.path[0] = directory
exec(code, module.__dict__)
"""
BOOT_MISSING, BOOT_CHANGED, BOOT_UNSAFE = 90, 91, 92


@dataclass(frozen=True)
class Deployment:
    """Where one profile's server lives on its host."""

    name: str
    host: Host
    python: str
    workdir: str  # absolute, ``~`` expanded

    @property
    def dir(self) -> str:
        return posixpath.join(self.workdir, self.name)

    @property
    def agent_path(self) -> str:
        return posixpath.join(self.workdir, ".orch", f"agent-{AGENT_DIGEST}.py")

    @property
    def probe_path(self) -> str:
        return posixpath.join(self.workdir, ".orch", f"sglang_probe-{PROBE_DIGEST}.py")

    @property
    def state_path(self) -> str:
        return posixpath.join(self.dir, "state.json")

    def run_log(self, run_id: str) -> str:
        return posixpath.join(self.dir, "runs", run_id, "server.log")


def locate(transport: Transport, name: str, python: str) -> Deployment:
    host = transport.host
    workdir = expand_home(host.workdir, transport.home()) if "~" in host.workdir else host.workdir
    return Deployment(name=name, host=host, python=python, workdir=workdir)


# -- the client ------------------------------------------------------------------------------------


class Agent:
    """Calls into ``agent.py`` (and ``sglang_probe.py``) on the deployment's host."""

    def __init__(self, transport: Transport, deployment: Deployment) -> None:
        self.transport = transport
        self.deployment = deployment

    def _missing_python(self, exc: ProgramNotFound) -> PreflightError:
        host = self.deployment.host.name
        return PreflightError(
            exc.message,
            f"set hosts.{host}.python to the interpreter of the venv that holds sglang",
        )

    def _run(self, argv: Sequence[str], stdin: bytes | None, timeout: float) -> Any:
        try:
            return self.transport.run(argv, stdin=stdin, timeout=timeout)
        except ProgramNotFound as exc:
            raise self._missing_python(exc) from exc

    def run_pushed(
        self,
        path: str,
        source: bytes,
        sha256: str,
        args: Sequence[str],
        timeout: float,
        stdin: bytes | None = None,
        *,
        carry: bool = False,
    ) -> Any:
        """Run a pushed file through the checking bootstrap. Optimistic: when the host does
        not have this version, the same command again, carrying the file on its stdin (one
        more command, once per orch version and host; no file transfer). ``carry``: carry it
        on the first try (57 KB, where a round trip costs more)."""
        argv = (self.deployment.python, "-c", BOOTSTRAP, path, sha256, *args)
        if carry:
            result = self._run(*_carrying(argv, source, stdin), timeout)
        else:
            result = self._run(argv, stdin, timeout)
        if result.returncode == BOOT_MISSING:
            result = self._run(*_carrying(argv, source, stdin), timeout)
        if result.returncode == BOOT_CHANGED:  # not what orch pushed under its digest: replace
            self.transport.put(source, path, 0o600)
            result = self._run(argv, stdin, timeout)
        if result.returncode == BOOT_UNSAFE:
            raise self._unsafe(result.stderr)
        return result

    def _unsafe(self, stderr: bytes) -> PreflightError:
        why = (stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        return PreflightError(
            f"refusing to run orch's files on {self.deployment.host.name}: "
            + why.removeprefix("orch-bootstrap: "),
            f"hosts.{self.deployment.host.name}.workdir must be a directory only you can "
            "write (chmod go-w; chown to the SSH user)",
        )

    def watch(
        self, run_id: str, offset: int, seconds: float, inspect: InspectRequest | None = None
    ) -> Generator[dict[str, Any], None, None]:
        """The agent's ``watch`` stream for one run (``agent.py watch``): each event as it
        happens, on one channel. Ends with the stream; WatchSilent when the host said nothing
        for WATCH_SILENCE_S (the watcher beats every second: the connection is in trouble)."""
        return self._stream(watch_args(self.deployment.dir, run_id, offset, seconds, inspect))

    def open_start(self, seconds: float, inspect: InspectRequest | None = None) -> PendingStart:
        """``start`` and ``watch`` in one command (``agent.py start --watch``), its channel
        opened now, on a thread, while orch still checks the launch; ``PendingStart.send``
        gives it the spec, ``cancel`` calls it off (the agent then does nothing). The opening,
        and sshd's opening of the channel's window for stdin, overlap the probe's round trips."""
        return PendingStart(self, start_watch_args(self.deployment.dir, seconds, inspect))

    def _started(
        self, events: Generator[dict[str, Any], None, None]
    ) -> tuple[StartReply, Generator[dict[str, Any], None, None] | None]:
        """The supervisor's answer, then, when it started a run, that run's startup streamed on
        the same channel (None when it did not)."""
        first = next(events, None)
        if first is not None and isinstance(first.get("start"), dict):
            return decode_start(first["start"]), events
        events.close()
        if first is None:
            raise SupervisorError(
                f"agent start said nothing on {self.deployment.host.name}",
                f"the agent's own log: {posixpath.join(self.deployment.dir, 'agent.log')}",
            )
        return decode_start(first), None  # refused: no run to follow

    def _stream(
        self,
        args: Sequence[str],
        stdin: bytes | None = None,
        *,
        opened: Stream | None = None,
        stdin_first: bool = False,
    ) -> Generator[dict[str, Any], None, None]:
        """An agent command read as JSON lines as they come (its final answer included).
        Pushes the agent first when the host lacks this version, like ``run_pushed``.
        ``opened``: the command already started (its stdin given); ``stdin_first``: it was
        started with the bootstrap's ``--stdin-first``."""
        path = self.deployment.agent_path
        plain = (self.deployment.python, "-c", BOOTSTRAP, path, AGENT_SHA256,
                 *(("--stdin-first",) if stdin_first else ()), *args)  # fmt: skip
        argv, given = plain, stdin
        for attempt in (1, 2):
            try:
                stream = opened or self.transport.stream(argv, stdin=given)
            except ProgramNotFound as exc:
                raise self._missing_python(exc) from exc
            opened = None
            said = False
            try:
                while True:
                    line = stream.readline(WATCH_SILENCE_S)
                    if line is None:
                        raise WatchSilent(f"{self.deployment.host.name}: the watcher went silent")
                    if not line:
                        break
                    try:
                        document = json.loads(line)
                    except ValueError:
                        continue  # not ours (a sitecustomize printing?): the log is the truth
                    if isinstance(document, dict):
                        said = True
                        yield document
                code = stream.returncode
                if code == BOOT_UNSAFE:
                    raise self._unsafe(stream.stderr)
                if not said and code == BOOT_MISSING and attempt == 1:
                    argv, given = _carrying(plain, AGENT_SOURCE, stdin)
                    continue
                if not said and code == BOOT_CHANGED and attempt == 1:
                    self.transport.put(AGENT_SOURCE, path, 0o600)
                    continue
                if not said and code not in (0, 3, None):
                    raise self._failed(args[0], code, stream.stderr)
                return
            finally:
                stream.close()

    def call(
        self, *args: str, timeout: float = 60.0, stdin: bytes | None = None, carry: bool = False
    ) -> Any:
        """Run an agent command; its answer as JSON (decoded by the caller's decoder).
        ``carry``: the agent travels with it (see ``run_pushed``)."""
        path = self.deployment.agent_path
        result = self.run_pushed(
            path, AGENT_SOURCE, AGENT_SHA256, args, timeout, stdin, carry=carry
        )
        if result.returncode not in (0, 3):
            raise self._failed(args[0], result.returncode, result.stderr)
        try:
            document = json.loads(result.stdout.decode("utf-8").strip().splitlines()[-1])
        except (ValueError, IndexError) as exc:
            raise SupervisorError(
                f"agent {args[0]} answered something that is not JSON",
                "is the host's python a CPython >= 3.9?",
            ) from exc
        if isinstance(document, dict):
            protocol = document.get("protocol", PROTOCOL)
            if protocol != PROTOCOL:
                raise SupervisorError(
                    f"agent protocol {protocol}, orch speaks {PROTOCOL}",
                    "stop the deployment with the orch version that started it",
                )
        return document

    def ask(self, request: Request, *, carry: bool = False) -> Any:
        """One agent command of the protocol (``fleet/protocol/``): its answer as JSON, for
        the decoder beside the request."""
        return self.call(*request.args, timeout=request.timeout, stdin=request.stdin, carry=carry)

    def _failed(self, command: str, returncode: int, stderr_bytes: bytes) -> OrchError:
        """An agent command that ended without its answer (a traceback, a missing module)."""
        stderr = stderr_bytes.decode("utf-8", "replace")
        argv = (self.deployment.python, self.deployment.agent_path, command)
        if "No module named 'psutil'" in stderr:
            return PreflightError(
                f"{self.deployment.python} on {self.deployment.host.name} has no psutil",
                "psutil ships with sglang; is this the venv that holds sglang?",
            )
        error = SupervisorError(
            f"agent {command} failed on {self.deployment.host.name}: "
            + (stderr.strip().splitlines() or ["no output"])[-1],
            f"the agent's own log: {posixpath.join(self.deployment.dir, 'agent.log')}",
        )
        error.__cause__ = RemoteCommandError(argv, returncode, stderr)
        return error

    def probe(self, port: int, model: str | None, bind: str, env: Mapping[str, str]) -> HostFacts:
        """Preflight facts, with ``import sglang`` checked under the server's environment
        (sent on the command's stdin: it may hold secrets, so never in an argv nor a file;
        and no transfer of its own before the command)."""
        facts, _ = self._probe(port, model, bind, env, with_status=False)
        if facts is None:  # pragma: no cover - only skipped when asked with the status
            raise SupervisorError("agent probe skipped the facts")
        return facts

    def status_and_probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str]
    ) -> tuple[RunState, HostFacts | None]:
        """The deployment's status and the preflight facts in one command; no facts (None)
        while something of the deployment runs or died without an end: the next step changes
        the host (attach, adopt, stop), so ``probe`` asks again when they are needed."""
        facts, status = self._probe(port, model, bind, env, with_status=True)
        if status is None:
            raise SupervisorError("agent probe answered without the deployment's status")
        return status, facts

    def _probe(
        self, port: int, model: str | None, bind: str, env: Mapping[str, str], *, with_status: bool
    ) -> tuple[HostFacts | None, RunState | None]:
        request = probe_request(
            port, model, bind, env, self.deployment.dir if with_status else None
        )
        # up's first command: the agent travels with it, so that a host without this orch's
        # agent costs no extra round trip
        return decode_probe_reply(self.ask(request, carry=with_status))

    def start(self, spec: Mapping[str, Any], launch_script: str) -> StartReply:
        """Detach a supervisor; the spec (the server's environment, secrets included) and the
        launch script go with the command, on its stdin: one round trip, no file transfer,
        written 0600 by the agent."""
        return decode_start(self.ask(start_request(self.deployment.dir, spec, launch_script)))

    def adopt(self) -> StartReply:
        """A new supervisor for a server whose supervisor died: it verifies the server's
        identity and watches it without restarting it (see ``agent.py adopt``)."""
        return decode_start(self.ask(adopt_request(self.deployment.dir)))

    def status(self) -> RunState:
        return decode_state(self.ask(status_request(self.deployment.dir)))

    def read_state(self) -> RunState | None:
        """state.json read directly (one SFTP read, no process started): for fast polling."""
        try:
            raw = self.transport.read(self.deployment.state_path)
        except FileNotFoundError:
            return None
        try:
            document = json.loads(raw)
        except (ValueError, RecursionError):
            return None  # never partial (replaced atomically), but be safe
        if not isinstance(document, dict):
            return None  # corrupt (null, []): the agent's status says so, and finds what runs
        return decode_state(document, agent_alive=True)

    def stop(self, timeout: float) -> StopReply:
        return decode_stop(self.ask(stop_request(self.deployment.dir, timeout)))

    def tail(self, lines: int, bytes_per_line: int, run_id: str | None = None) -> TailReply:
        """The last ``lines`` of a run's log (default the current run, else the newest), in
        one command (``agent.py tail``)."""
        request = tail_request(self.deployment.dir, lines, bytes_per_line, run_id)
        return decode_tail(self.ask(request))

    def runs(self) -> tuple[RunInfo, ...]:
        return self.runs_reply().runs

    def runs_reply(self) -> RunsReply:
        """Every run with its start, READY and exit, and the host's clock."""
        return decode_runs_reply(self.ask(runs_request(self.deployment.dir)))

    def plan(self, request: Mapping[str, Any], timeout: float = 300.0) -> PlanAnswer:
        """Run SGLang's parsing and resolution on the host (``sglang_probe.py -``); the
        request, which carries the server's environment, travels on the command's stdin (no
        file, no transfer of its own)."""
        probe = self.deployment.probe_path
        asked = plan_request(request, timeout)
        result = self.run_pushed(
            probe, PROBE_SOURCE, PROBE_SHA256, asked.args, asked.timeout, asked.stdin
        )
        answer = last_json_line(result.stdout, result.stderr, result.returncode, "sglang_probe.py")
        return decode_plan_answer(answer)

    def inspect(
        self,
        *,
        port: int,
        host: str,
        env_names: Sequence[str],
        pid: int | None = None,
        log: str | None = None,
    ) -> tuple[Observation, LastRun | None]:
        """What the server received and resolved (see ``agent.py inspect``)."""
        request = inspect_request(
            self.deployment.dir, port=port, host=host, env_names=env_names, pid=pid, log=log
        )
        return decode_inspect(self.ask(request))

    # -- a launch group's preflight --

    def listen(
        self, bind: str, port: int, token: str, seconds: float, *, expect: int
    ) -> ProbeAnswer:
        """A short-lived listener on ``bind:port`` (``agent.py listen``, detached): what the
        other nodes of a group try to reach before any server starts. It ends after ``expect``
        exchanges (the port is the server's right after) or ``seconds``."""
        request = listen_request(bind, port, token, seconds, expect=expect)
        return decode_probe_answer(self.ask(request), "listen")

    def reach(self, host: str, port: int, token: str, timeout: float) -> ProbeAnswer:
        """Connect from this node to ``host:port`` and exchange ``token`` (``agent.py reach``)."""
        return decode_probe_answer(self.ask(reach_request(host, port, token, timeout)), "reach")
