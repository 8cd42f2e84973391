"""``orch sync``'s apply, one unit at a time: under the unit's deployments' locks, their state
read again (someone may have synced them meanwhile), then the act: the supervisor takes the new
spec in place (agent-only, live, none), ``up --replace`` relaunches (restart, replace, a down one
started; a group's ranks at once), or the rolling restart moves a profile's replicas behind
their gateway one at a time; a failed relaunch put back on its previous launch before the locks
are let go."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator import render
from orchestrator.commands import locking, restarting, routing
from orchestrator.commands.context import Context, Launch, UpOptions
from orchestrator.commands.events import Outcome as UpOutcome
from orchestrator.commands.fanout import parallel
from orchestrator.commands.rolling import RollOptions
from orchestrator.commands.up import up
from orchestrator.effective import sync as esync
from orchestrator.errors import Locked, OrchError
from orchestrator.fleet.protocol.hold import holder_text
from orchestrator.fleet.protocol.start import build_spec
from orchestrator.model import LockHolder, Profile, RunState


@dataclass(frozen=True)
class SyncRow:
    """A deployment as the dry run found it: its row (state, action), what runs, what is wanted."""

    row: esync.Row
    running: RunState | None
    wanted: esync.Wanted


class UnitActions(esync.SyncOps):
    """The real work of each unit: under its locks, its state again, then the act.
    ``wanted_commit``: what a deployment synced meanwhile runs; ``reviewed``: the dry run's
    reviews by (running commit, row), their live values; ``rows``: the dry run's, by name."""

    def __init__(
        self,
        ctx: Context,
        wanted_commit: str | None,
        reviewed: Mapping[tuple[str, str], esync.Reviewed],
        rows: Sequence[SyncRow],
        options: esync.Options,
        *,
        lock_wait_s: float,
        say: Callable[[str], None],
    ) -> None:
        self.ctx, self.wanted_commit, self.reviewed = ctx, wanted_commit, reviewed
        self.options, self.lock_wait_s, self.say = options, lock_wait_s, say
        self.rows = {r.row.name: r for r in rows}

    def act(self, units: Sequence[esync.Unit]) -> Sequence[esync.Acted]:
        return parallel(self._one, list(units))

    def _launch(self, unit: esync.Unit) -> Launch:
        """The unit's launch, secrets resolved (an apply starts servers)."""
        return self.ctx.launch(unit.profile)

    def _deployments(self, unit: esync.Unit) -> list[tuple[Launch, Profile]]:
        """(the deployment's launch, the member profile) of each row the unit covers."""
        launch = self._launch(unit)
        out = []
        for one in launch.replicas or (launch,):
            for member in one.members:
                name = member.profile.deployment
                if one.is_group:
                    name += f"[{member.rank}]"
                if name in unit.rows:
                    out.append((one, member.profile))
        return out

    def _one(self, unit: esync.Unit) -> esync.Acted:
        try:
            deployments = self._deployments(unit)
            profiles = [profile for _, profile in deployments]
            how = "" if unit.kind == unit.action else f" ({unit.kind})"
            self.say(f"{unit.name}: {unit.action}{how} ...")
            with locking.holding(
                self.ctx, profiles, "orch sync", wait_s=self.lock_wait_s, on_wait=self._waiting
            ):
                return self._under_lock(unit, deployments)
        except Locked as exc:  # another orch acts on it: nothing was done here, nothing to undo
            return esync.Acted(exc.message, touched=False)
        except OrchError as exc:  # before its lock was held: nothing was done to it
            return esync.Acted(exc.message, touched=False)

    def _under_lock(
        self, unit: esync.Unit, deployments: list[tuple[Launch, Profile]]
    ) -> esync.Acted:
        """The unit's state again, the act, and a failed relaunch put back, all while its locks
        are held: no other orch acts in between."""
        if all(self._clean_now(one, profile) for one, profile in deployments):
            return esync.Acted(note="already clean (synced meanwhile)")
        try:
            acted = self._act(unit, deployments)
        except OrchError as exc:
            acted = esync.Acted(exc.message)
        if acted.problem is None or acted.restored is not None or not esync.wants_restore(unit):
            return acted
        problem = self.restore(unit)
        return dataclasses.replace(
            acted, problem=acted.problem + esync.restore_said(problem), restored=problem is None
        )

    def _waiting(self, label: str, holder: LockHolder) -> None:
        self.say(
            f"{label}: waiting: {holder_text(holder)} holds it; up to {self.lock_wait_s:g} s "
            "(--lock-wait)"
        )

    def _clean_now(self, launch: Launch, profile: Profile) -> bool:
        state = self.ctx.agent(profile).status()
        return (
            state.ready
            and state.launch_digest == launch.digest
            and state.git_commit == self.wanted_commit
            and not state.git_dirty
        )

    def _act(self, unit: esync.Unit, deployments: list[tuple[Launch, Profile]]) -> esync.Acted:
        if unit.kind == esync.IN_PLACE:
            return self._in_place(unit, deployments)
        if unit.kind == esync.ROLL:
            launch = self._launch(unit)
            chosen = tuple(one for one in launch.replicas if one.profile.replica in unit.replicas)
            result = restarting.rolling_restart(
                self.ctx,
                dataclasses.replace(launch, replicas=chosen),
                RollOptions(max_unavailable=self.options.max_unavailable),
                take_over=self.options.include_out_of_band,
                say=lambda step: self.say(f"{unit.name}: replica {step.replica}: {step.what}"),
            )
            return esync.Acted(result.verdict, result.restored if not result.ok else None)
        one = deployments[0][0]  # a group's ranks share one launch: relaunched together
        outcome: UpOutcome | None = None
        options = UpOptions(replace=True, take_over=self.options.include_out_of_band)
        for event in up(self.ctx, one, options):
            if isinstance(event, UpOutcome):
                outcome = event
        if outcome is None:
            return esync.Acted("up ended without an outcome")
        return esync.Acted(None if outcome.ok else outcome.summary)

    def _in_place(self, unit: esync.Unit, deployments: list[tuple[Launch, Profile]]) -> esync.Acted:
        origin = self.ctx.origin()
        for one, profile in deployments:
            member = one.members[profile.rank if one.is_group else 0]
            spec = build_spec(
                profile,
                member.argv,
                member.env,
                one.meta(origin),
                gateway=routing.spec_gateway(self.ctx, one),
            )
            row = self.rows.get(
                profile.deployment if not one.is_group else f"{profile.deployment}[{profile.rank}]"
            )
            live = None
            if row is not None and row.row.verdict.action == esync.LIVE:
                commit = row.running.git_commit if row.running is not None else None
                reviewed = self.reviewed.get((commit or "", row.row.name))
                live = dict(reviewed.live) if reviewed is not None else None
            agent = self.ctx.agent(profile)
            reply = agent.reconfigure(spec, render.launcher_script(member.command), live=live)
            if not reply.ok:
                return esync.Acted(f"{profile.deployment}: {reply.reason}")
        return esync.Acted()

    def restore(self, unit: esync.Unit) -> str | None:
        """The unit's deployments back on the launch they ran before (the agent keeps it)."""
        problems = []
        for _, profile in self._deployments(unit):
            problem = _start_previous(self.ctx, profile)
            if problem is not None:
                problems.append(f"{profile.deployment}: {problem}")
        return "; ".join(problems) or None


def _start_previous(ctx: Context, profile: Profile) -> str | None:
    """The launch before the failed one started again and READY: None, or why not."""
    agent = ctx.agent(profile)
    try:
        reply = agent.start_previous()
    except OrchError as exc:
        return exc.message
    if not reply.ok:
        return reply.reason or "the agent did not start the previous launch"
    deadline = ctx.clock() + profile.health.startup_timeout_s
    while ctx.clock() < deadline:
        state = agent.status()
        if state.ready:
            return None
        if state.state in ("EXITED", "FATAL", "BACKOFF"):
            return f"{state.state} {state.message}".rstrip()
        ctx.sleep(0.25)
    return "not READY within health.startup_timeout_s"
