"""``orch sync``: each deployment against what the repository says, and the order the fleet is
brought to it in. Pure: ``commands/sync.py`` reads the hosts and the repository, this module
decides.

The state of one deployment (each rank, each replica), first match wins:

1. ``down``: nothing of it runs READY: not deployed, stopped (EXITED), FATAL, BACKOFF, still
   starting, its supervisor gone, or its host could not be asked (each says which). A server
   that does not serve is the first thing to know about, whatever launched it.
2. ``out-of-band``: what runs is not the wanted launch AND it was not started from the
   repository's history: a dirty tree, a commit the wanted one does not contain (another
   branch), a commit unknown here, no commit at all, or another profiles repository. Syncing it
   would throw away a launch nobody reviewed into the repository: skipped unless asked.
3. ``version-skew``: the host's SGLang is not the profile's pin (only where both are known):
   a relaunch would fail the preflight, so it is shown and skipped.
4. ``pending``: the wanted launch differs (its digest), or ``orch diff`` from the running commit
   to the wanted one finds a change the digest does not hold (agent-only, live, replace).
5. ``clean``: the wanted launch runs, READY. Launched from a dirty tree or another commit whose
   launch is the same: clean, with a note.

``unmanaged`` is not a state of a deployment orch knows: it is a deployment directory a host
holds that no profile renders (shown, never touched).

The apply order (``apply``) is pure too, driven through ``SyncOps`` as ``rolling.roll`` is: the
changes that touch no server first (agent-only, live, a rendering whose effect is none), then the
``down`` ones started, then the relaunches: ONE canary alone, then ``max_unavailable`` at a time.
The rollout halts at the first failure (a failed canary always halts) or, with ``max_failures``
N, at the Nth; what was not reached is left as it was. A failed relaunch is put back on the
launch it ran before (the agent keeps it) and the report says whether that worked.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from orchestrator.model import RunState
from orchestrator.remote.agent.states import (
    BACKOFF,
    EXITED,
    FATAL,
    READY,
    RUNNING,
    STARTING,
    STOPPING,
    UNHEALTHY,
)

CLEAN = "clean"
PENDING = "pending"
OUT_OF_BAND = "out-of-band"
DOWN = "down"
VERSION_SKEW = "version-skew"
UNMANAGED = "unmanaged"
# the precedence of the states: the first that holds is the deployment's
PRECEDENCE = (DOWN, OUT_OF_BAND, VERSION_SKEW, PENDING, CLEAN)

# where the running commit stands against the wanted one (``Seen.history``)
SAME = "same"  # the wanted commit itself
ANCESTOR = "ancestor"  # in the wanted commit's history: the repository moved on since
DIVERGED = "diverged"  # known here, not in the wanted commit's history (another branch)
UNKNOWN = "unknown"  # not a commit of this repository (not fetched, or another repository)
NO_COMMIT = "none"  # none recorded: launched from profiles that were not in git

# review's actions (effective.review) sync acts on, and its own for the others
AGENT_ONLY, LIVE, NONE, RESTART, REPLACE = "agent-only", "live", "none", "restart", "replace"
BLOCKED, NEW, REMOVED = "blocked", "new", "removed"
START = "start"  # a down deployment: started on the wanted launch
RELAUNCH_ACTIONS = frozenset({RESTART, REPLACE, NEW, REMOVED, START})
IN_PLACE_ACTIONS = frozenset({AGENT_ONLY, LIVE, NONE})  # the server is not touched


@dataclass(frozen=True)
class Wanted:
    """What the repository says one deployment runs."""

    commit: str | None  # None: the profiles are not committed anywhere (a bare directory)
    digest: str  # render.launch_digest of the wanted launch
    sglang_pin: str | None = None  # the profile's ``sglang:``
    repo: str | None = None  # the profiles repository's identity (ProfilesOrigin.repo)


@dataclass(frozen=True)
class Seen:
    """What the host said of the deployment."""

    state: RunState | None  # None: it could not be asked (``error`` says why)
    error: str | None = None
    history: str = NO_COMMIT  # the running commit against the wanted one (SAME, ANCESTOR ...)
    host_sglang: str | None = None  # the host's SGLang; None: not known (never a skew)


@dataclass(frozen=True)
class Reviewed:
    """``orch diff RUNNING..WANTED``'s verdict on the deployment (None where not reviewed)."""

    action: str
    forced_by: tuple[str, ...] = ()
    live: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)  # endpoint -> body


@dataclass(frozen=True)
class Verdict:
    state: str
    why: str
    action: str | None = None  # what sync does about it (review's action, START); None: nothing
    forced_by: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


def classify(wanted: Wanted, seen: Seen, reviewed: Reviewed | None = None) -> Verdict:
    """The deployment's state by ``PRECEDENCE`` (the module's docstring says each)."""
    down = _down(seen)
    if down is not None:
        return Verdict(DOWN, down, START)
    state = seen.state
    assert state is not None  # noqa: S101 - _down says why there is none
    same_launch = state.launch_digest == wanted.digest
    if not same_launch:
        out = _out_of_band(wanted, seen)
        if out is not None:
            return Verdict(OUT_OF_BAND, out, RESTART, ("launch",))
    if wanted.sglang_pin and seen.host_sglang and seen.host_sglang != wanted.sglang_pin:
        return Verdict(
            VERSION_SKEW,
            f"the host has SGLang {seen.host_sglang}, the profile pins {wanted.sglang_pin}",
        )
    if not same_launch:
        # a launch that differs with no reviewed change: a restart, forced by the launch
        action: str = RESTART
        forced: tuple[str, ...] = ("launch",)
        if reviewed is not None and reviewed.action != NONE:
            action, forced = reviewed.action, reviewed.forced_by
        elif reviewed is not None:  # the rendering moved, the effective configuration did not
            action, forced = NONE, reviewed.forced_by
        why = f"launch {state.launch_digest or '?'} -> {wanted.digest}"
        return Verdict(PENDING, why, action, forced)
    if reviewed is not None and reviewed.action != NONE:
        why = f"the same launch; {reviewed.action}: " + (", ".join(reviewed.forced_by) or "-")
        return Verdict(PENDING, why, reviewed.action, reviewed.forced_by)
    notes: list[str] = []
    if state.git_dirty:
        notes.append("launched from a dirty tree; its launch is the wanted one")
    if seen.history in (DIVERGED, UNKNOWN, NO_COMMIT) and state.git_commit != wanted.commit:
        notes.append(f"launched from {_commit(state.git_commit)}; its launch is the wanted one")
    return Verdict(CLEAN, "runs the wanted launch, READY", notes=tuple(notes))


def _down(seen: Seen) -> str | None:
    state = seen.state
    if state is None:
        return f"host unreachable: {seen.error}" if seen.error else "not asked"
    if not state.deployed:
        return "not deployed"
    if state.stale:
        return "its supervisor died and the server is gone"
    if state.unsupervised:
        return f"unsupervised (was {state.recorded_state}): its supervisor died"
    if state.state == READY and state.alive:
        return None
    words = {
        EXITED: "stopped (EXITED)",
        FATAL: "FATAL",
        BACKOFF: "BACKOFF: waiting to start again after an exit",
        STARTING: "STARTING: not READY yet",
        RUNNING: "RUNNING: loading, not READY yet",
        UNHEALTHY: "UNHEALTHY: being stopped",
        STOPPING: "STOPPING",
    }
    said = words.get(state.state or "", state.state or "no state")
    return f"{said}: {state.message}" if state.message and state.state == FATAL else said


def _out_of_band(wanted: Wanted, seen: Seen) -> str | None:
    state = seen.state
    assert state is not None  # noqa: S101 - asked after _down
    commit = _commit(state.git_commit)
    if wanted.repo and state.profiles_repo and state.profiles_repo != wanted.repo:
        return f"launched from another profiles repository ({state.profiles_repo})"
    if state.git_dirty:
        return f"launched from a dirty tree at {commit}"
    if seen.history == DIVERGED:
        return f"launched from {commit}, not in the wanted commit's history"
    if seen.history == UNKNOWN:
        return f"launched from {commit}, a commit this repository does not have"
    if seen.history == NO_COMMIT:
        return "launched from profiles that were not committed"
    return None


def _commit(commit: str | None) -> str:
    return commit[:8] if commit else "no commit"


# -- what sync does: units, their order, their outcomes ------------------------------------------

IN_PLACE = "in-place"  # agent-only, live, none: the supervisor takes the new spec
STARTS = "start"  # a down deployment started
RELAUNCH = "relaunch"  # up --replace (a group: every rank at once)
ROLL = "roll"  # replicas behind a gateway: restarting.rolling_restart
PHASES = (IN_PLACE, STARTS, RELAUNCH)  # ROLL units go with the relaunches

DONE, FAILED, SKIPPED, NOT_REACHED = "done", "failed", "skipped", "not reached"


@dataclass(frozen=True)
class Row:
    """One deployment as sync sees it: ``name`` is NAME, NAME@I, or NAME[r] for a group's rank."""

    name: str
    profile: str
    deployment: str  # on the host: NAME or NAME@I
    rank: int | None
    replica: int | None
    host: str
    verdict: Verdict
    behind_router: bool = False  # a replica of a profile with router: (rolled, never restarted)


@dataclass(frozen=True)
class Unit:
    """What sync acts on at once: one deployment, a group's ranks together, or the pending
    replicas of a profile behind its gateway (one roll)."""

    name: str  # the deployment, the group's profile, or the profile whose replicas roll
    kind: str  # IN_PLACE, STARTS, RELAUNCH, ROLL
    action: str
    rows: tuple[str, ...]  # Row.name of each deployment it covers
    profile: str = ""
    replicas: tuple[int, ...] = ()  # ROLL: the replicas to roll


@dataclass(frozen=True)
class Options:
    max_unavailable: int = 1
    max_failures: int = 1  # halt at the Nth failure; 1: at the first
    include_out_of_band: bool = False


@dataclass(frozen=True)
class Plan:
    units: tuple[Unit, ...]
    skipped: tuple[tuple[str, str], ...]  # (row name, why)
    clean: tuple[str, ...]


def plan(rows: Sequence[Row], options: Options) -> Plan:
    """Group the rows into units (a group's ranks together, a profile's replicas behind a
    gateway into one roll), decide what is skipped and why, and order the units."""
    skipped: list[tuple[str, str]] = []
    clean: list[str] = []
    by_unit: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        why = _skip(row.verdict, options)
        if why is not None:
            skipped.append((row.name, why))
            continue
        if row.verdict.action is None:
            clean.append(row.name)
            continue
        kind = _kind(row.verdict)
        if row.rank is not None:  # a group acts together: its ranks are one unit
            key = ("group", row.deployment)
        elif row.behind_router and kind == RELAUNCH:
            key = ("roll", row.profile)
        else:
            key = ("one", row.deployment)
        by_unit.setdefault(key, []).append(row)
    units: list[Unit] = []
    for (how, name), members in by_unit.items():
        units.append(_unit(how, name, members))
    # a group with one rank skipped is skipped whole: its ranks never act apart
    held = {name for name, _ in skipped}
    kept: list[Unit] = []
    for unit in units:
        group_rows = [r for r in rows if unit.kind != ROLL and r.deployment == unit.name]
        blocked = [r.name for r in group_rows if r.name in held]
        if blocked and group_rows[0].rank is not None:
            skipped += [
                (n, f"another rank of the group is skipped ({blocked[0]})") for n in unit.rows
            ]
            continue
        kept.append(unit)
    order = {kind: index for index, kind in enumerate((IN_PLACE, STARTS, RELAUNCH, ROLL))}
    kept.sort(key=lambda unit: order[unit.kind] if unit.kind != ROLL else order[RELAUNCH])
    return Plan(tuple(kept), tuple(skipped), tuple(clean))


def _skip(verdict: Verdict, options: Options) -> str | None:
    if verdict.state == OUT_OF_BAND and not options.include_out_of_band:
        return f"out-of-band ({verdict.why}): --include-out-of-band to replace it"
    if verdict.state == VERSION_SKEW:
        return f"version-skew: {verdict.why}"
    if verdict.action == BLOCKED:
        return "blocked: orch diff refuses the wanted launch (orch diff shows why)"
    return None


def _kind(verdict: Verdict) -> str:
    if verdict.action in IN_PLACE_ACTIONS:
        return IN_PLACE
    if verdict.state == DOWN:
        return STARTS
    return RELAUNCH


def _unit(how: str, name: str, members: list[Row]) -> Unit:
    kinds = {_kind(row.verdict) for row in members}
    # the most disruptive need of any member decides the unit's: a group relaunches whole
    kind = RELAUNCH if RELAUNCH in kinds else STARTS if STARTS in kinds else IN_PLACE
    actions = [row.verdict.action or NONE for row in members]
    rank_of = {RESTART: 0, REPLACE: 1, NEW: 0, REMOVED: 0, START: 0}
    action = max(actions, key=lambda a: rank_of.get(a, -1))
    names = tuple(row.name for row in members)
    if how == "roll":
        replicas = tuple(sorted(r.replica for r in members if r.replica is not None))
        return Unit(name, ROLL, action, names, members[0].profile, replicas)
    return Unit(name, kind, action, names, members[0].profile)


@dataclass(frozen=True)
class Acted:
    """What acting on a unit came to: ``problem`` None is success. ``restored``: a relaunch the
    ops put back themselves (a roll restores its failed replica); None: not tried."""

    problem: str | None = None
    restored: bool | None = None
    note: str = ""  # what a success amounted to (already clean: nothing done)
    touched: bool = True  # False: nothing was done to it (another orch held its lock)


class SyncOps(Protocol):
    """The work (``commands/sync.py``); the unit tier drives ``apply`` with a recording fake."""

    def act(self, units: Sequence[Unit]) -> Sequence[Acted]:
        """Act on every unit of a batch (concurrently); one Acted each, in order."""
        ...

    def restore(self, unit: Unit) -> str | None:
        """Put a failed relaunch back on the launch it ran before: None, or why not."""
        ...


@dataclass(frozen=True)
class Outcome:
    unit: Unit
    result: str  # DONE, FAILED, NOT_REACHED
    why: str = ""
    restored: bool | None = None


@dataclass(frozen=True)
class Report:
    outcomes: tuple[Outcome, ...]
    halted: str | None = None  # why the rollout stopped before its end

    @property
    def failures(self) -> int:
        return sum(1 for outcome in self.outcomes if outcome.result == FAILED)

    @property
    def ok(self) -> bool:
        return self.halted is None and self.failures == 0


def batches(units: Sequence[Unit], max_unavailable: int) -> list[list[Unit]]:
    """In-place changes one at a time, then the starts, then ONE relaunch alone (the canary),
    then ``max_unavailable`` relaunches at a time."""
    width = max(1, max_unavailable)
    in_place = [[u] for u in units if u.kind == IN_PLACE]
    starts = [u for u in units if u.kind == STARTS]
    relaunch = [u for u in units if u.kind in (RELAUNCH, ROLL)]
    out = in_place + [starts[i : i + width] for i in range(0, len(starts), width)]
    if relaunch:
        out.append([relaunch[0]])
        rest = relaunch[1:]
        out += [rest[i : i + width] for i in range(0, len(rest), width)]
    return out


def apply(
    planned: Plan,
    ops: SyncOps,
    options: Options,
    *,
    say: Callable[[Outcome], None] = lambda outcome: None,
) -> Report:
    """Act on ``planned.units`` in ``batches`` order until done or halted."""
    outcomes: list[Outcome] = []
    canary = next((u for u in planned.units if u.kind in (RELAUNCH, ROLL)), None)
    order = batches(planned.units, options.max_unavailable)
    halted: str | None = None
    for index, batch in enumerate(order):
        acted = list(ops.act(batch))
        if len(acted) != len(batch):
            raise ValueError(f"ops.act answered {len(acted)} results for {len(batch)} units")
        for unit, result in zip(batch, acted, strict=True):
            outcome = _outcome(unit, result, ops)
            outcomes.append(outcome)
            say(outcome)
        failed = [o for o in outcomes if o.result == FAILED]
        if not failed:
            continue
        if canary is not None and batch == [canary]:
            halted = f"the canary {canary.name} failed: {failed[-1].why}"
        elif len(failed) >= max(1, options.max_failures):
            halted = (
                f"{len(failed)} failure(s), the most --max-failures allows"
                if options.max_failures > 1
                else f"{failed[-1].unit.name} failed: {failed[-1].why}"
            )
        if halted is not None:
            for rest in order[index + 1 :]:
                for unit in rest:
                    outcome = Outcome(unit, NOT_REACHED, "the rollout halted before it")
                    outcomes.append(outcome)
                    say(outcome)
            break
    return Report(tuple(outcomes), halted)


def _outcome(unit: Unit, acted: Acted, ops: SyncOps) -> Outcome:
    if acted.problem is None:
        return Outcome(unit, DONE, acted.note)
    restored = acted.restored
    why = acted.problem
    if restored is None and acted.touched and wants_restore(unit):
        problem = ops.restore(unit)
        restored = problem is None
        why += restore_said(problem)
    return Outcome(unit, FAILED, why, restored)


def wants_restore(unit: Unit) -> bool:
    """A failed relaunch goes back to what ran before it (a start had nothing before it)."""
    return unit.kind == RELAUNCH and unit.action != START


def restore_said(problem: str | None) -> str:
    """How a restore ended, added to the failure it followed."""
    if problem is None:
        return "; put back on its previous launch"
    return f"; its previous launch did not come back: {problem}"
