"""What ``up`` reports as it goes: values, never text (``cli/show`` words them)."""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.effective import verify
from orchestrator.effective.plan import PlanReport
from orchestrator.errors import ExitCode, OrchError
from orchestrator.fleet.protocol.stop import StopReply
from orchestrator.model import ExitInfo, RunState
from orchestrator.sglang.memory.budget import Budget
from orchestrator.sglang.memory.measured import Comparison, MeasuredMemory
from orchestrator.sglang.observe import LogEvent


@dataclass(frozen=True)
class Step:
    message: str


@dataclass(frozen=True)
class Warn:
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Planned:
    """The plan ``up`` ran before launching (SGLang's own parsing and resolution)."""

    report: PlanReport


@dataclass(frozen=True)
class Started:
    run_id: str
    pid: int | None
    log: str


@dataclass(frozen=True)
class Attached:
    """The same launch already runs there: ``up`` follows it instead of starting another."""

    state: RunState


@dataclass(frozen=True)
class LogLine:
    event: LogEvent


@dataclass(frozen=True)
class Effective:
    """diff-effective, run by ``up`` once the server is ready (or has died after resolving)."""

    report: verify.Report
    pinned: tuple[verify.FieldRow, ...]


@dataclass(frozen=True)
class MemoryMeasured:
    """Once READY: the pools SGLang logged, beside the plan's prediction (when there was one)."""

    measured: tuple[MeasuredMemory, ...]
    budget: Budget | None
    comparisons: tuple[Comparison, ...]
    standin: bool = False  # measured by orch's stand-in: illustrative figures, NOT SGLang's


@dataclass(frozen=True)
class Outcome:
    """How ``up`` ends: READY, or the server's failure with its class, or pinned drift."""

    ok: bool
    exit_code: ExitCode
    state: RunState
    summary: str
    last_lines: tuple[str, ...] = ()
    hint: str | None = None
    lines_of: str = "the log"  # whose last lines: a group's failed rank's log


UpEvent = (
    Step | Warn | Planned | Started | Attached | LogLine | Effective | MemoryMeasured | Outcome
)


# -- down and logs ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Stopping:
    """``down`` is about to ask the agent to stop (the call blocks for up to ``timeout_s``)."""

    profile: str
    pid: int | None  # the server's, when one runs (none in BACKOFF)
    state: str | None
    timeout_s: float


@dataclass(frozen=True)
class Stopped:
    """``down``'s answer for one server (one rank of a group)."""

    label: str  # the profile, or "<profile> rank N (<host>)"
    reply: StopReply


@dataclass(frozen=True)
class LogChunk:
    text: str
    run_id: str
    path: str


@dataclass(frozen=True)
class RunEnded:
    """The followed run ended. With ``next_run`` the agent started another, followed from its
    start; without, the deployment ended (``state`` EXITED or FATAL) and so does ``logs``,
    with ``exit_code``."""

    run_id: str
    verdict: ExitInfo | None  # None when no exit of the run was recorded
    next_run: str | None
    state: str | None = None
    message: str = ""
    exit_code: ExitCode = ExitCode.OK


@dataclass(frozen=True)
class ReplicaEvent:
    """One event of one replica's ``up``."""

    replica: int
    deployment: str  # NAME@I
    event: UpEvent


@dataclass(frozen=True)
class ReplicaDone:
    """One replica's ``up`` ended: with its Outcome among its events, or with ``error``."""

    replica: int
    deployment: str
    host: str
    error: OrchError | None = None
