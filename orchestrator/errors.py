"""One error tree for orch, and the exit codes the CLI maps it to.

Every failure orch reports is an ``OrchError``: a one-line ``message`` saying what was wrong
(file, key path, what was expected) and a ``hint`` saying what to do about it. Third-party
exceptions are translated at the edge (``raise ProfileError(...) from exc``) so that ``cli.main``
catches this root only. Messages never carry secret values: callers build them from names and
positions, never from the values of ``from_env`` entries.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes, stable for scripts (documented in docs/exit-codes.md)."""

    OK = 0
    DRIFT = 1  # a result, like diff(1): the effective configuration differs from the profile
    USAGE = 2  # argparse's own code for a bad command line
    CONFIG = 3  # a profile, inventory or argument table is invalid; nothing ran
    RENDER = 4  # a valid profile that cannot become a launch plan (e.g. a secret is not set)
    CONNECT = 5  # the host cannot be reached (DNS, refused, timeout, proxy)
    AUTH = 6  # the host refused our credentials
    HOST_KEY = 7  # the host key is unknown or has changed: refused, nothing was sent
    REMOTE_COMMAND = 8  # a command orch ran on the host failed
    PREFLIGHT = 9  # the host is not ready for this profile (no python, no sglang, port taken ...)
    SUPERVISOR = 10  # the remote agent failed or answered in a way orch does not understand
    NOT_DEPLOYED = 11  # no server of this profile on its host
    CONFLICT = 12  # another plan already runs there (use --replace)
    STARTUP_TIMEOUT = 13  # the server did not become ready within health.startup_timeout_s
    NOT_RESOLVED = 14  # diff-effective: the server has not shown its resolved configuration yet
    PLAN_REFUSED = 15  # SGLang rejects the command line, or the memory plan says it fails
    IMPORT = 16  # orch import: the script cannot be read, or holds no SGLang launch to import
    UPGRADE = 17  # orch upgrade: the profile cannot move as it is (a field the release lacks, a
    # pinned field that would move); nothing was written
    WRITE = 18  # a file orch was asked to write is not one it may replace (a device, a FIFO, a
    # link to another's file, a directory every user may write) or cannot be written
    NO_FIT = 19  # orch plan --fit: no edit of the searched fields plans as not will fail
    # The server died; one code per crash class, so scripts can tell them apart.
    CONFIG_ERROR = 20
    CUDA_OOM = 21
    KILLED = 22
    PORT_IN_USE = 23
    IMPORT_ERROR = 24
    MODEL_NOT_FOUND = 25
    NCCL = 26
    CRASHED = 27
    HUNG = 28  # READY, then /health failed health.failures times in a row: the agent stopped it
    SPAWN_FAILED = 29  # the server could not be started at all (exec failed): never restarted
    GROUP = 30  # a launch group did not form or fell apart: a node never joined, the rendezvous
    # did not complete, a supervisor of the group was lost (the class names which: group-*)
    KERNEL_ERROR = 31  # the server died: a GPU kernel failed (a CUDA error it raised, a kernel
    # that cannot be built or loaded, a kernel's shape check); 20-29 were taken
    REVISION = 32  # orch diff: the profiles are not in a git repository, or git cannot read a
    # revision of them
    GATEWAY = 33  # the SGLang Model Gateway refused or did not complete a worker change: a worker
    # it never marks ready, one it never lets go, an answer that is not its worker API
    ROLL = 34  # orch restart --rolling stopped: a replica failed its relaunch or its soak (and was
    # put back on its previous launch), or the others could not carry the load
    LOCKED = 35  # another orch holds the deployment's operation lock (up, down, restart, sync
    # act under it): the message names the holder; --lock-wait SECONDS waits for it
    SYNC = 36  # orch sync stopped its rollout or a deployment failed (the report says each)
    # orch diff's results, as terraform's -detailed-exitcode: 0 no change, 2 changes. Its usage
    # errors exit EX_USAGE, so that a mistyped command line never reads as "changes".
    CHANGES = 2
    DIFF_USAGE = 64
    INTERNAL = 70  # a bug in orch (EX_SOFTWARE)
    INTERRUPTED = 130  # Ctrl-C


class OrchError(Exception):
    """Root of every error orch reports to a user."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class RevisionError(OrchError):
    """``orch diff``: no git repository holds the profiles, or git cannot read a revision."""

    exit_code = ExitCode.REVISION


class UsageError(OrchError):
    """The command line asks for something that does not exist (a rank a profile lacks ...)."""

    exit_code = ExitCode.USAGE


class ProfileError(OrchError):
    """A profile or the host inventory is wrong: syntax, unknown key, type, range, reference."""

    exit_code = ExitCode.CONFIG

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        source: str | None = None,
        key_path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.problem = message
        self.source = source
        self.key_path = key_path
        self.line = line
        self.column = column
        super().__init__(_locate(message, source, key_path, line, column), hint)


class ProfileNotFound(ProfileError):
    """A profile name that matches no file under the profiles directory."""


class ArgTableError(OrchError):
    """The shipped SGLang argument tables are missing or unreadable (a packaging fault)."""

    exit_code = ExitCode.CONFIG


class ImportScriptError(OrchError):
    """``orch import``: a script that cannot be read or holds nothing orch can import."""

    exit_code = ExitCode.IMPORT


class ImportBoundError(ImportScriptError):
    """``orch import``: a script that asks for more work than any launch script needs (a
    variable that doubles itself, loops or functions that multiply, a brace product): ``bound``
    names which of ``import_budget.BOUNDS`` was passed."""

    def __init__(self, message: str, hint: str | None = None, *, bound: str) -> None:
        super().__init__(message, hint)
        self.bound = bound


class WriteRefused(OrchError):
    """A file orch writes (``export -o``, a lock, ``upgrade --write``, ``init``, a pinned host
    key) that it may not or cannot write; nothing was written (orchestrator/files.py)."""

    exit_code = ExitCode.WRITE


class RenderError(OrchError):
    """A validated profile that cannot be turned into a launch plan here and now."""

    exit_code = ExitCode.RENDER


class InvalidProfile(OrchError):
    """Several profile errors found in one pass (``orch validate`` reports them all)."""

    exit_code = ExitCode.CONFIG

    def __init__(self, errors: list[ProfileError]) -> None:
        self.errors = errors
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(first.message + more, first.hint)


def _locate(
    message: str,
    source: str | None,
    key_path: str | None,
    line: int | None,
    column: int | None,
) -> str:
    """``file:line:col: key.path: message``, leaving out the parts that are unknown."""
    where = ""
    if source is not None:
        where = source
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        where += ": "
    if key_path:
        where += f"{key_path}: "
    return where + message


class TransportError(OrchError):
    """Talking to a host failed."""

    exit_code = ExitCode.CONNECT


class ConnectError(TransportError):
    exit_code = ExitCode.CONNECT


class AuthError(TransportError):
    exit_code = ExitCode.AUTH


class HostKeyError(TransportError):
    exit_code = ExitCode.HOST_KEY


class RemoteCommandError(TransportError):
    """A command run on the host exited non-zero; carries the argv, exit code, stderr tail."""

    exit_code = ExitCode.REMOTE_COMMAND

    def __init__(
        self, argv: tuple[str, ...], returncode: int, stderr: str, hint: str | None = None
    ) -> None:
        self.argv = argv
        self.returncode = returncode
        self.stderr_tail = stderr[-2000:]
        last = stderr.strip().splitlines()[-1] if stderr.strip() else "no output on stderr"
        super().__init__(f"{argv[0]} exited with {returncode} on the host: {last}", hint)


class ProgramNotFound(TransportError):
    """The program an argv names could not be started on the host: ``reason`` is "not found" or
    "not executable". Raised alike by every transport's ``run``. A missing interpreter is a host
    not ready for the profile, hence PREFLIGHT; the caller, which knows which setting names the
    program, adds the hint (``with_hint``)."""

    exit_code = ExitCode.PREFLIGHT

    def __init__(
        self, program: str, host: str, reason: str = "not found", hint: str | None = None
    ) -> None:
        self.program = program
        self.host = host
        self.reason = reason
        super().__init__(f"{program}: {reason} on {host}", hint)

    def with_hint(self, hint: str) -> ProgramNotFound:
        """The same error with the caller's hint: ``raise exc.with_hint(...) from exc``."""
        return ProgramNotFound(self.program, self.host, self.reason, hint)


class PreflightError(OrchError):
    exit_code = ExitCode.PREFLIGHT


class SupervisorError(OrchError):
    exit_code = ExitCode.SUPERVISOR


class Locked(OrchError):
    """Another orch holds a deployment's operation lock on its host (``agent hold``): the
    message names the deployment, the host and the holder (who, where from, what, since when)."""

    exit_code = ExitCode.LOCKED

    def __init__(self, message: str, hint: str, *, deployment: str, host: str) -> None:
        super().__init__(message, hint)
        self.deployment = deployment
        self.host = host


class NotDeployed(OrchError):
    exit_code = ExitCode.NOT_DEPLOYED


class NotResolved(OrchError):
    """Nothing to compare yet: no readable process and no ``server_args=`` line."""

    exit_code = ExitCode.NOT_RESOLVED


class UpgradeBlocked(OrchError):
    """orch upgrade: the profile cannot move to the release as it is; nothing was written."""

    exit_code = ExitCode.UPGRADE


class PlanRefused(OrchError):
    """SGLang's parsing or resolution, run before launch, rejects the plan, or would change a
    field the profile pins."""

    exit_code = ExitCode.PLAN_REFUSED


class Conflict(OrchError):
    exit_code = ExitCode.CONFLICT


class StartupTimeout(OrchError):
    """The server did not become ready in time; carries the last log lines."""

    exit_code = ExitCode.STARTUP_TIMEOUT

    def __init__(self, message: str, last_lines: tuple[str, ...], hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.last_lines = last_lines


class RollStopped(OrchError):
    """``orch restart --rolling`` did not complete: the replicas not yet rolled are untouched."""

    exit_code = ExitCode.ROLL


class GatewayError(OrchError):
    """The SGLang Model Gateway (``smg``, or an older ``sglang-router``) did not do what its
    worker API was asked (orchestrator/fleet/gateway.py). Messages name the gateway's URL and
    the worker's, never the control-plane key."""

    exit_code = ExitCode.GATEWAY


class GatewayUnreachable(GatewayError):
    """Nothing answers at the gateway's URL (refused, DNS, timeout, TLS)."""

    exit_code = ExitCode.CONNECT


class GatewayAuthError(GatewayError):
    """The gateway's control plane answered 401/403: no key, or not one of its keys."""

    exit_code = ExitCode.AUTH


class GatewayWorkerNotReady(GatewayError):
    """A registered worker the gateway did not mark ready in time (or whose registration it
    gave up on); ``last`` is what the gateway said of it last."""

    def __init__(self, message: str, last: str, hint: str | None = None) -> None:
        super().__init__(message, hint)
        self.last = last


class GatewayWorkerNotGone(GatewayError):
    """A deregistered worker the gateway still listed when the wait ended."""
