"""``orch sync``: bring the deployments to what the profiles repository says.

The wanted side is the repository's HEAD (the working tree when it is clean, HEAD read with git
into a private directory when it is not: uncommitted edits are not what the repository says;
``--allow-dirty`` takes the working tree as it is), or ``--rev REV`` read the same way. Each
selected deployment (each rank, each replica) is surveyed on its host (``sync_read.survey``),
each distinct running commit reviewed once against the wanted one (``review.run``: the action
and the fields forcing it), and ``effective.sync`` says its state. The dry run stops there: it
reads only.

The apply acts on the plan ``effective.sync.plan`` makes, in the order ``effective.sync.apply``
keeps. Each unit is acted on under its deployments' locks (``locking.holding``), and only under
them: its state is read again there (someone else may have synced it meanwhile: then it is left,
"already clean"), then the supervisor takes the new spec in place (agent-only, live, none), or
``up --replace`` relaunches it (restart, replace, a down one started; a group's ranks at once),
or the rolling restart moves a profile's replicas behind their gateway one at a time.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import render
from orchestrator.commands import review, sync_read
from orchestrator.commands.context import Context, HostAgent, Launch, profiles_origin
from orchestrator.commands.ops import StatusRow
from orchestrator.commands.revisions import Repository, repository_of
from orchestrator.commands.sync_apply import SyncRow, UnitActions
from orchestrator.effective import sync as esync
from orchestrator.effective.review import DeploymentChange
from orchestrator.errors import OrchError, RevisionError, UsageError
from orchestrator.model import Host, Profile, RunState
from orchestrator.profile.store import ProfileStore


class DirtyTree(OrchError):
    """``orch sync`` would act from a profiles tree with uncommitted changes."""

    exit_code = UsageError.exit_code


@dataclass(frozen=True)
class Request:
    names: tuple[str, ...] = ()  # none: every launchable profile
    on: str | None = None  # --on LABEL: profiles labelled LABEL or placed on host LABEL
    rev: str | None = None  # --rev REV; None: HEAD
    allow_dirty: bool = False


@dataclass(frozen=True)
class WantedRevision:
    commit: str | None
    dirty: bool  # the working tree was taken with uncommitted changes (--allow-dirty)
    rev: str | None  # as asked (--rev), None: HEAD


@dataclass(frozen=True)
class DryRun:
    wanted: WantedRevision
    rows: tuple[SyncRow, ...]
    unmanaged: tuple[tuple[str, str], ...] = ()  # (host, deployment dir)
    invalid: tuple[tuple[str, str], ...] = ()  # (profile, why it does not load)
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        """Anything not clean (the dry run's exit 2)."""
        return bool(self.invalid) or any(r.row.verdict.state != esync.CLEAN for r in self.rows)


class Session:
    """The wanted side read once (its store, its launches, a context to act with), kept open
    from the dry run through the apply."""

    def __init__(
        self,
        profiles_dir: Path,
        request: Request,
        *,
        environ: Mapping[str, str],
        local_python: str,
        redactor: render.Redactor,
        agent_factory: Callable[[Profile], HostAgent] | None = None,
        host_agent_factory: Callable[[Host], HostAgent] | None = None,
    ) -> None:
        self.profiles_dir, self.request = profiles_dir, request
        self.local_python, self.redactor = local_python, redactor
        self._scratch = tempfile.TemporaryDirectory(prefix="orch-sync-")
        self.repository: Repository | None = None
        try:
            self.repository = repository_of(profiles_dir)
        except RevisionError:
            if request.rev is not None:
                raise
        origin = profiles_origin(profiles_dir)
        self.wanted, store = self._wanted_store(origin.dirty is True)
        self.ctx = Context(
            store=store, environ=environ, local_python=local_python, redactor=redactor
        )
        if agent_factory is not None:
            self.ctx.agent_factory = agent_factory
        if host_agent_factory is not None:
            self.ctx.host_agent_factory = host_agent_factory
        # what each launch records: the real repository, the wanted commit (never the
        # private directory a revision was read into)
        self.ctx.known_origin = dataclasses.replace(
            origin, commit=self.wanted.commit, dirty=self.wanted.dirty
        )
        self.launches: dict[str, Launch] = {}
        self.reviewed: dict[tuple[str, str], esync.Reviewed] = {}  # (running commit, row)

    def _wanted_store(self, dirty: bool) -> tuple[WantedRevision, ProfileStore]:
        request, repository = self.request, self.repository
        if repository is None:
            store = ProfileStore(self.profiles_dir, self.profiles_dir, self.local_python)
            return WantedRevision(None, False, None), store
        if request.rev is None and (not dirty or request.allow_dirty):
            commit = repository.commit("HEAD")
            root = repository.root / repository.prefix if repository.prefix else repository.root
            return WantedRevision(commit, dirty, None), ProfileStore(
                root, repository.root, self.local_python
            )
        commit = repository.commit(request.rev or "HEAD")
        into = Path(self._scratch.name) / "wanted"
        exported = repository.export(commit, into)
        return WantedRevision(commit, False, request.rev), ProfileStore(
            exported, into, self.local_python
        )

    def close(self) -> None:
        self.ctx.close()
        self._scratch.cleanup()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def tree_dirty(self) -> bool:
        origin = profiles_origin(self.profiles_dir)
        return origin.dirty is True

    def refuse_dirty(self) -> None:
        """An apply from a tree with uncommitted changes launches what nobody committed."""
        if self.tree_dirty and not self.request.allow_dirty and self.request.rev is None:
            raise DirtyTree(
                f"{self.profiles_dir} has uncommitted changes: orch sync acts on what the "
                "repository says",
                "commit them (or git stash), or give --allow-dirty to launch the working tree "
                "as it is (its launches read out-of-band until committed)",
            )

    # -- the dry run ---------------------------------------------------------------------------

    def selected(self) -> list[str]:
        store, request = self.ctx.store, self.request
        known = store.names()
        names = list(request.names) if request.names else known
        if request.on is None:
            return names
        chosen = []
        for name in names:
            try:
                profile = store.load(name).profile
            except OrchError:
                continue
            hosts = {profile.host.name}
            hosts |= {node.host.name for node in profile.group.nodes} if profile.group else set()
            hosts |= {replica.host.name for replica in profile.replicas}
            if request.on in profile.labels or request.on in hosts:
                chosen.append(name)
        if not chosen:
            raise UsageError(
                f"--on {request.on}: no profile is labelled {request.on!r} or placed on a host "
                "of that name",
                "labels: [NAME] in a profile, or a host name from hosts.yaml",
            )
        return chosen

    def dry_run(self) -> DryRun:
        store = self.ctx.store
        invalid: list[tuple[str, str]] = []
        members: list[
            tuple[Launch, Profile, int | None]
        ] = []  # (deployment's launch, member, rank)
        for name in self.selected():
            try:
                launch = self.ctx.launch(name, require_secrets=False)
            except OrchError as exc:
                if name in self.request.names or not _abstract(store, name):
                    invalid.append((name, exc.message))
                continue
            if launch.profile.abstract:
                continue
            self.launches[name] = launch
            for one in launch.replicas or (launch,):
                members += [(one, m.profile, m.rank if one.is_group else None) for m in one.members]
        hosts = list({profile.host.name: profile.host for _, profile, _ in members}.values())
        surveyed = sync_read.survey(self.ctx, hosts)
        origin = self.ctx.origin()
        rows: list[SyncRow] = []
        seen: list[tuple[Launch, Profile, int | None, esync.Seen]] = []
        for one, profile, rank in members:
            seen.append((one, profile, rank, self._seen(profile, surveyed)))
        histories = self._histories(
            {s.state.git_commit for *_, s in seen if s.state and s.state.git_commit}
        )
        reviews = self.reviewed = self._reviews(seen, histories)
        for one, profile, rank, observed in seen:
            state = observed.state
            commit = state.git_commit if state is not None else None
            observed = dataclasses.replace(
                observed, history=histories.get(commit or "", esync.NO_COMMIT)
            )
            wanted = esync.Wanted(
                self.wanted.commit, one.digest, profile.sglang_version, origin.repo
            )
            name = profile.deployment if rank is None else f"{profile.deployment}[{rank}]"
            reviewed = reviews.get((commit or "", name))
            verdict = esync.classify(wanted, observed, reviewed)
            row = esync.Row(
                name,
                profile.name,
                profile.deployment,
                rank,
                profile.replica,
                profile.host.name,
                verdict,
                behind_router=profile.router is not None and profile.replica is not None,
            )
            rows.append(SyncRow(row, state, wanted))
        unmanaged = self._unmanaged(surveyed)
        notes: tuple[str, ...] = ()
        if self.tree_dirty and not self.request.allow_dirty and self.request.rev is None:
            notes = ("the working tree has uncommitted changes: compared with HEAD",)
        return DryRun(self.wanted, tuple(rows), unmanaged, tuple(invalid), notes)

    def _seen(
        self,
        profile: Profile,
        surveyed: Mapping[str, sync_read.HostSurvey | sync_read.Unreachable],
    ) -> esync.Seen:
        answer = surveyed.get(profile.host.name)
        if answer is None:
            return esync.Seen(None, "not surveyed")
        if isinstance(answer, sync_read.Unreachable):
            return esync.Seen(None, answer.error.message)
        if profile.deployment in answer.unreadable:
            why = answer.unreadable[profile.deployment]
            return esync.Seen(None, f"its state could not be read: {why}")
        state = answer.deployments.get(profile.deployment, RunState(deployed=False))
        return esync.Seen(state, host_sglang=answer.sglang_version)

    def _histories(self, commits: set[str]) -> dict[str, str]:
        return histories(self.repository, self.wanted.commit, commits)

    def _reviews(
        self,
        seen: Sequence[tuple[Launch, Profile, int | None, esync.Seen]],
        histories: Mapping[str, str],
    ) -> dict[tuple[str, str], esync.Reviewed]:
        """One ``orch diff RUNNING..WANTED`` per distinct running commit in the wanted one's
        history: each deployment's action and the fields forcing it, by (commit, row name)."""
        by_commit: dict[str, set[str]] = {}
        for _, profile, _, observed in seen:
            state = observed.state
            if state is None or not state.deployed or not state.git_commit or state.git_dirty:
                continue
            if histories.get(state.git_commit) == esync.ANCESTOR:
                by_commit.setdefault(state.git_commit, set()).add(profile.name)
        out: dict[tuple[str, str], esync.Reviewed] = {}
        head = self.wanted.commit if self.wanted.rev is not None or not self.wanted.dirty else None
        for commit, names in sorted(by_commit.items()):
            words = f"{commit}..{head}" if head else commit
            result = review.run(
                self.profiles_dir,
                review.Request(words=(words, *sorted(names))),
                local_python=self.local_python,
                redactor=self.redactor,
            )
            for change in result.deployments:
                out[(commit, change.name)] = esync.Reviewed(
                    change.action, change.forced_by, _live(change)
                )
        return out

    def _unmanaged(
        self, surveyed: Mapping[str, sync_read.HostSurvey | sync_read.Unreachable]
    ) -> tuple[tuple[str, str], ...]:
        """Deployment dirs on the surveyed hosts that no profile of the store renders. Two
        inventory names for one machine and workdir (an alias) see the same directories: a
        deployment is known by where it lives, not by the name its host goes by."""
        known: set[tuple[tuple[object, ...], str]] = set()
        places: dict[str, tuple[object, ...]] = {}
        for name in self.ctx.store.names():
            try:
                launch = self.launches.get(name) or self.ctx.launch(name, require_secrets=False)
            except OrchError:
                continue
            for one in launch.replicas or (launch,):
                for member in one.members:
                    where = member.profile.host
                    places[where.name] = _place(where)
                    known.add((_place(where), member.profile.deployment))
        out = []
        for name, answer in surveyed.items():
            if isinstance(answer, sync_read.HostSurvey):
                place = places.get(name, (name,))
                listed = set(answer.deployments) | set(answer.unreadable)
                out += [(name, d) for d in sorted(listed) if (place, d) not in known]
        return tuple(out)

    # -- the apply -----------------------------------------------------------------------------

    def apply(
        self,
        found: DryRun,
        options: esync.Options,
        *,
        lock_wait_s: float,
        say: Callable[[str], None] = lambda line: None,
    ) -> tuple[esync.Plan, esync.Report]:
        self.refuse_dirty()
        planned = esync.plan([r.row for r in found.rows], options)
        ops = UnitActions(
            self.ctx,
            self.wanted.commit,
            self.reviewed,
            found.rows,
            options,
            lock_wait_s=lock_wait_s,
            say=say,
        )
        report = esync.apply(planned, ops, options, say=lambda outcome: say(_said(outcome)))
        return planned, report


def histories(
    repository: Repository | None, wanted: str | None, commits: set[str]
) -> dict[str, str]:
    """Each running commit against the wanted one: SAME, ANCESTOR, DIVERGED or UNKNOWN."""
    out: dict[str, str] = {}
    for commit in commits:
        if repository is None or wanted is None:
            out[commit] = esync.UNKNOWN
        elif commit == wanted:
            out[commit] = esync.SAME
        else:
            try:
                full = repository.commit(commit)
            except RevisionError:
                out[commit] = esync.UNKNOWN
                continue
            try:
                repository.git("merge-base", "--is-ancestor", full, wanted)
                out[commit] = esync.ANCESTOR
            except RevisionError:  # exit 1: not an ancestor
                out[commit] = esync.DIVERGED
    return out


def status_verdicts(
    ctx: Context, rows: Sequence[StatusRow]
) -> dict[tuple[str, int | None], esync.Verdict]:
    """``orch status``'s SYNC column: each row's state against the profiles as ``ctx`` loaded
    them (the working tree) at its HEAD commit, by the same ``effective.sync.classify``; no
    review is run (an agent-only change shows in ``orch sync --dry-run``), and the host's SGLang
    is not asked (no version-skew here). Keyed by (deployment, rank)."""
    origin = ctx.origin()
    try:
        repository: Repository | None = repository_of(ctx.store.root)
    except RevisionError:
        repository = None
    commits = {r.state.git_commit for r in rows if r.state is not None and r.state.git_commit}
    known = histories(repository, origin.commit, commits)
    launches: dict[str, Launch | None] = {}
    out: dict[tuple[str, int | None], esync.Verdict] = {}
    for row in rows:
        if row.profile not in launches:
            try:
                launches[row.profile] = ctx.launch(row.profile, require_secrets=False)
            except OrchError:
                launches[row.profile] = None
        launch = launches[row.profile]
        if launch is None:
            continue
        one = launch.replicas[row.replica] if row.replica is not None else launch
        profile = one.members[row.rank or 0].profile
        wanted = esync.Wanted(origin.commit, one.digest, profile.sglang_version, origin.repo)
        state = row.state
        commit = state.git_commit if state is not None else None
        seen = esync.Seen(
            state,
            row.error.message if row.error is not None else None,
            known.get(commit or "", esync.NO_COMMIT),
        )
        out[(row.deployment, row.rank)] = esync.classify(wanted, seen)
    return out


def _place(host: Host) -> tuple[object, ...]:
    """Where a host's deployments live: the machine as reached, and the workdir."""
    return (host.address, host.port, host.user, host.workdir)


def _said(outcome: esync.Outcome) -> str:
    unit = outcome.unit
    text = f"{unit.name}: {unit.action}: {outcome.result}"
    return text + (f" ({outcome.why})" if outcome.why else "")


def _abstract(store: ProfileStore, name: str) -> bool:
    try:
        return store.merged(name).get("abstract") is True
    except OrchError:
        return False


def _live(change: DeploymentChange) -> dict[str, dict[str, Any]]:
    """A live change's requests: endpoint -> its body, the fields at their new values
    (``/set_internal_state`` takes them under ``server_args``, as SGLang reads them)."""
    fields: dict[str, dict[str, Any]] = {}
    values = {c.field: c.after for c in change.changes}
    for name, endpoint in change.live_endpoints.items():
        fields.setdefault(endpoint, {})[name] = values.get(name)
    return {
        endpoint: {"server_args": body} if endpoint == "/set_internal_state" else body
        for endpoint, body in fields.items()
    }


@contextlib.contextmanager
def session(
    profiles_dir: Path,
    request: Request,
    *,
    environ: Mapping[str, str],
    local_python: str,
    redactor: render.Redactor,
    agent_factory: Callable[[Profile], HostAgent] | None = None,
    host_agent_factory: Callable[[Host], HostAgent] | None = None,
) -> Iterator[Session]:
    opened = Session(
        profiles_dir,
        request,
        environ=environ,
        local_python=local_python,
        redactor=redactor,
        agent_factory=agent_factory,
        host_agent_factory=host_agent_factory,
    )
    try:
        yield opened
    finally:
        opened.close()
