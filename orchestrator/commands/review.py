"""``orch diff BASE..HEAD``: every deployment a change to the profiles repository touches.

Both revisions are read with git into private directories (``revisions``), each loaded as a
whole profiles directory: a base profile's edit reaches every profile that ``extends`` it,
transitively, and a ``hosts.yaml`` edit every profile on that host, because each side renders
every deployment (each rank of a group) from its own files, and only the renderings are
compared. Deployments whose launch changed are planned on both sides where asked
(``--local-sglang``: this machine's SGLang of each side's release; ``--remote``: the host's
probe), then ``effective.review`` decides each one's action.

No secret value is read: the launches are rendered with an empty environment (a ``from_env``
secret is its placeholder on both sides), and a literal value under a credential's name (an
``api_key`` written in a profile, ``HF_TOKEN: hf_...`` in ``env``) is shown masked and joins
the output's redactor.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from orchestrator import render
from orchestrator.commands import planning
from orchestrator.commands.context import Context, Launch
from orchestrator.commands.revisions import WORKING_TREE, Repository, parse_range, repository_of
from orchestrator.commands.upgrading import cached_venv_python
from orchestrator.effective import review, verify
from orchestrator.errors import (
    InvalidProfile,
    OrchError,
    ProfileNotFound,
    RevisionError,
    UsageError,
)
from orchestrator.importing.credentials import secret_name
from orchestrator.model import Profile, SecretRef, split_deployment
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang import config as sglang_config

CACHED = ""  # --local-sglang without a python: each side's release from the venv cache

# (deployment, rank): the profile, or NAME@I for a replica (model.deployment_name); rank None
# for a single-node profile
Key = tuple[str, int | None]


@dataclass(frozen=True)
class Request:
    # [BASE..HEAD | BASE...HEAD | BASE] [PROFILE ...]: no range is HEAD against the work tree;
    # no profile, every deployment
    words: tuple[str, ...] = ()
    local_sglang: str | None = None  # a python, CACHED, or None: no local plan
    remote: bool = False  # plan with the hosts' SGLang through their probe
    model_config: Path | None = None
    status: bool = False  # ask each deployment's agent what runs now


@dataclass
class _Revision:
    """One side: its store, its context (for plans and agents), its deployments."""

    label: str
    ctx: Context
    sides: dict[Key, review.Side]
    nodes: dict[str, int]  # deployment -> node count, for a group that grew or shrank
    launches: dict[Key, Launch]


def run(
    profiles_dir: Path,
    request: Request,
    *,
    local_python: str,
    redactor: render.Redactor,
    agent_factory: Callable[[Profile], object] | None = None,
) -> review.Review:
    repository = repository_of(profiles_dir)
    text, only = _range_and_profiles(repository, profiles_dir, request.words)
    request = dataclasses.replace(request, words=only)
    wanted = parse_range(text)
    head_commit = repository.commit(wanted.head) if wanted.head is not None else None
    base_commit = repository.commit(wanted.base)
    if wanted.merge_base and head_commit is not None:
        base_commit = repository.merge_base(base_commit, head_commit)
    with tempfile.TemporaryDirectory(prefix="orch-diff-") as scratch:
        base_root = Path(scratch) / "base"
        base_store = ProfileStore(
            repository.export(base_commit, base_root), base_root, local_python
        )
        if head_commit is None:
            head_store = ProfileStore(
                repository.root / repository.prefix if repository.prefix else repository.root,
                repository.root,
                local_python,
            )
        else:
            head_root = Path(scratch) / "head"
            head_store = ProfileStore(
                repository.export(head_commit, head_root), head_root, local_python
            )

        def context(store: ProfileStore) -> Context:
            ctx = Context(store=store, environ={}, local_python=local_python, redactor=redactor)
            if agent_factory is not None:
                ctx.agent_factory = agent_factory  # type: ignore[assignment]
            return ctx

        before = _read(wanted.base, context(base_store), redactor)
        after = _read(wanted.head or WORKING_TREE, context(head_store), redactor)
        try:
            return _review(
                repository, request, wanted.base, base_commit, head_commit, before, after
            )
        finally:
            before.ctx.close()
            after.ctx.close()


def _review(
    repository: Repository,
    request: Request,
    base: str,
    base_commit: str,
    head_commit: str | None,
    before: _Revision,
    after: _Revision,
) -> review.Review:
    _spread_failures(before, after)
    _spread_failures(after, before)
    keys = sorted(set(before.sides) | set(after.sides), key=lambda k: (k[0], k[1] or 0))
    if request.words:
        names = {split_deployment(name)[0] for name, _ in keys}
        unknown = [name for name in request.words if name not in names]
        if unknown:
            raise ProfileNotFound(
                f"no deployment {unknown[0]!r} at {base} or {after.label}",
                "name a profile that is not abstract on either side (orch profiles lists them)",
            )
        keys = [key for key in keys if split_deployment(key[0])[0] in request.words]
    changes: list[review.DeploymentChange] = []
    unchanged = 0
    planned: dict[tuple[str, str], review.Side] = {}
    for key in keys:
        old, new = before.sides.get(key), after.sides.get(key)
        nodes = (before.nodes.get(key[0], 0), after.nodes.get(key[0], 0))
        profile, replica = split_deployment(key[0])
        change = review.compare(profile, key[1], old, new, nodes=nodes, replica=replica)
        if change is None:
            unchanged += 1
            continue
        if request.local_sglang is not None or request.remote:
            old = _planned(before, key, old, request, planned)
            new = _planned(after, key, new, request, planned)
            change = (
                review.compare(profile, key[1], old, new, nodes=nodes, replica=replica) or change
            )
        if request.status:
            change = dataclasses.replace(change, running=_running(key, before, after, change))
        changes.append(change)
    notes: tuple[str, ...] = ()
    if request.local_sglang is None and not request.remote:
        notes = (
            "effective values from the argument tables (each release's defaults); "
            "--local-sglang or --remote adds SGLang's own resolution and the memory plans",
        )
    return review.Review(
        base,
        after.label,
        base_commit,
        head_commit,
        review.ordered(changes),
        unchanged,
        notes,
    )


def _spread_failures(failed: _Revision, other: _Revision) -> None:
    """A group that does not load on one side has no ranks there: its failure stands for each
    rank the other side has, so that every rank reads as blocked (or its base as broken). So
    for a profile with replicas that does not load: its failure stands for each replica."""
    for name, rank in list(failed.sides):
        if rank is not None:
            continue
        ranks = [key for key in other.sides if key[0] == name and key[1] is not None]
        if not ranks and failed.sides[(name, None)].rendered is None:
            ranks = [key for key in other.sides if split_deployment(key[0]) != (name, None)]
            ranks = [key for key in ranks if split_deployment(key[0])[0] == name]
        if ranks:
            side = failed.sides.pop((name, None))
            for key in ranks:
                failed.sides[key] = side


def _range_and_profiles(
    repository: Repository, profiles_dir: Path, words: tuple[str, ...]
) -> tuple[str | None, tuple[str, ...]]:
    """The first word is the range when it holds ``..`` or names a commit and no profile
    (``git diff``'s rule; a name that is both is refused rather than guessed)."""
    if not words:
        return None, ()
    first, rest = words[0], words[1:]
    if ".." in first:
        return first, rest
    is_profile = (profiles_dir / f"{first}.yaml").is_file()
    try:
        repository.commit(first)
    except RevisionError:
        return None, words
    if is_profile:
        raise UsageError(
            f"{first!r} is both a revision and a profile",
            f"write {first}..  to compare it with HEAD, or HEAD {first} to review the profile",
        )
    return first, rest


# -- one side ------------------------------------------------------------------------------------


def _read(label: str, ctx: Context, redactor: render.Redactor) -> _Revision:
    revision = _Revision(label, ctx, {}, {}, {})
    store = ctx.store
    for name in store.names():
        try:
            launch = ctx.launch(name, require_secrets=False)
        except (InvalidProfile, OrchError) as exc:
            if _abstract(store, name):
                continue
            revision.sides[(name, None)] = review.Side(None, problems=_problems(exc))
            continue
        profile = launch.profile
        if profile.abstract:
            continue
        for one in launch.replicas or (launch,):  # every replica is a deployment
            deployment = one.profile.deployment
            revision.nodes[deployment] = one.profile.nnodes
            for member in one.members:
                key = (deployment, member.rank if one.is_group else None)
                revision.sides[key] = _side(one, member.rank, redactor)
                revision.launches[key] = one
    return revision


def _abstract(store: ProfileStore, name: str) -> bool:
    try:
        return store.merged(name).get("abstract") is True
    except OrchError:
        return False


def _problems(exc: OrchError) -> tuple[str, ...]:
    errors = exc.errors if isinstance(exc, InvalidProfile) else [exc]
    return tuple(
        error.message + (f" (hint: {error.hint})" if error.hint else "") for error in errors
    )


def _side(launch: Launch, rank: int, redactor: render.Redactor) -> review.Side:
    member = launch.members[rank]
    profile = member.profile
    command = member.command
    tokens = [render.redacted(token) for token in command.argv]
    arguments = sglang_config.sglang_arguments(tokens) or ()
    program = tuple(tokens[: len(tokens) - len(arguments)])
    secret_fields = _secret_fields(launch, arguments)
    shown = list(tokens)
    literal: list[tuple[str, str]] = []
    for index in range(len(program), len(tokens) - 1):
        token = tokens[index]
        if (
            token.startswith("--")
            and _secret_flag(token, secret_fields)
            and not isinstance(command.argv[index + 1], SecretRef)
        ):
            literal.append((token.lstrip("-"), tokens[index + 1]))
            shown[index + 1] = f"<redacted: {token.lstrip('-').replace('-', '_')}>"
    env: dict[str, str] = {}
    env_values: dict[str, str] = {}
    for name, value in command.env.items():
        env_values[name] = render.redacted(value)
        if isinstance(value, SecretRef):
            env[name] = value.display()
        elif secret_name(name):
            literal.append((name, value))
            env[name] = f"<redacted: {name}>"
        else:
            env[name] = value
    redactor.add_found(literal)
    rendered = review.Rendered(tuple(shown), env, _placement(profile), _supervision(profile))
    return review.Side(
        rendered,
        launch.table,
        tuple(arguments),
        program,
        env_values,
        secret_fields=frozenset(secret_fields),
        digest=launch.digest,
        version=profile.sglang_version,
    )


def _secret_fields(launch: Launch, arguments: tuple[str, ...]) -> set[str]:
    """The SGLang fields whose values are credentials: by SGLang's own list, or by name."""
    names = set(verify.SECRET_FIELDS)
    for token in arguments:
        if token.startswith("--"):
            field = token[2:].split("=", 1)[0].replace("-", "_")
            if secret_name(field):
                names.add(field)
    for wanted in launch.primary.requested:
        if secret_name(wanted.name):
            names.add(wanted.name)
    return names


def _secret_flag(flag: str, fields: set[str]) -> bool:
    return flag[2:].split("=", 1)[0].replace("-", "_") in fields


def _placement(profile: Profile) -> review.Placement:
    host = profile.host
    if host.address is None:
        where = "this machine"
    else:
        where = (f"{host.user}@" if host.user else "") + host.address
        where += f":{host.port}" if host.port else ""
    gpu = profile.gpu
    gpus = gpu.type.name if gpu.type is not None else "GPU type not set"
    gpus += f" devices {','.join(gpu.devices)}" if gpu.devices else " (every visible GPU)"
    return review.Placement(
        f"{host.name} ({where}, workdir {host.workdir})",
        gpus,
        profile.sglang_version or "detected on the host",
        profile.nnodes,
    )


def _supervision(profile: Profile) -> Mapping[str, str]:
    restart, health = profile.restart, profile.health
    out = {
        "restart.mode": str(restart.mode),
        "restart.delay_s": f"{restart.delay_s:g}",
        "restart.multiplier": f"{restart.multiplier:g}",
        "restart.max_delay_s": f"{restart.max_delay_s:g}",
        "restart.start_limit": str(restart.start_limit),
        "restart.start_limit_interval_s": f"{restart.start_limit_interval_s:g}",
        "health.startup_timeout_s": f"{health.startup_timeout_s:g}",
        "health.interval_s": f"{health.interval_s:g}",
        "health.endpoint": health.endpoint,
        "health.failures": str(health.failures),
        "stop_timeout_s": f"{profile.stop_timeout_s:g}",
    }
    if profile.group is not None:
        out["group.join_timeout_s"] = f"{profile.group.join_timeout_s:g}"
    router = profile.router
    if router is not None:  # where orch registers the server: the server itself keeps running
        out["router.url"] = router.url
        out["router.api_key"] = router.api_key.display() if router.api_key else "-"
        out["router.labels"] = ", ".join(f"{k}={v}" for k, v in sorted(router.labels.items()))
        out["router.drain_timeout_s"] = f"{router.drain_timeout_s:g}"
        out["router.ready_timeout_s"] = f"{router.ready_timeout_s:g}"
    return out


# -- plans and what runs -------------------------------------------------------------------------


def _planned(
    revision: _Revision,
    key: Key,
    side: review.Side | None,
    request: Request,
    done: dict[tuple[str, str], review.Side],
) -> review.Side | None:
    """The side with SGLang's plan of its launch (one plan per launch: a group's ranks share
    rank 0's), or with the reason there is none."""
    if side is None or side.rendered is None or key not in revision.launches:
        return side
    launch = revision.launches[key]
    memo = (revision.label, f"{key[0]}:{launch.digest}")
    if memo not in done:
        done[memo] = _plan(revision.ctx, launch, side, request)
    planned = done[memo]
    return dataclasses.replace(side, plan=planned.plan, plan_note=planned.plan_note)


def _plan(ctx: Context, launch: Launch, side: review.Side, request: Request) -> review.Side:
    version = launch.profile.sglang_version
    local = None
    if not request.remote:
        python = request.local_sglang
        if python == CACHED:
            if version is None:
                return dataclasses.replace(
                    side, plan_note="not planned: no `sglang:` version to find a venv for"
                )
            cached = cached_venv_python(version)
            if not cached.is_file():
                return dataclasses.replace(
                    side,
                    plan_note=f"not planned: no SGLang {version} venv here "
                    f"(scripts/build-sglang-venv.sh {version})",
                )
            python = str(cached)
        assert python is not None  # noqa: S101 - local_sglang is set when not remote
        local = planning.LocalSGLang(python, request.model_config)
    try:
        report = planning.predict(ctx, launch, local=local)
    except OrchError as exc:
        return dataclasses.replace(side, plan_note=f"not planned: {exc.message}")
    answered = report.sglang_version
    if version is not None and answered and answered != version and not report.standin:
        return dataclasses.replace(
            side,
            plan_note=f"not planned: {report.where} has SGLang {answered}, the profile "
            f"asks for {version}",
        )
    return dataclasses.replace(side, plan=report, plan_note=f"planned by {report.where}")


def _running(
    key: Key, before: _Revision, after: _Revision, change: review.DeploymentChange
) -> review.Running:
    revision = after if key in after.launches else before
    launch = revision.launches.get(key)
    if launch is None:
        return review.Running(None, None, None, "-", "no launch to ask about")
    rank = key[1] or 0
    try:
        state = revision.ctx.agent(launch.members[rank].profile).read_state()
    except OrchError as exc:
        return review.Running(None, None, None, "-", exc.message)
    if state is None or not state.deployed:
        return review.Running(None, None, None, "-")
    digest = state.launch_digest
    launches = "another launch"
    if change.after is not None and digest == change.after.digest:
        launches = "head"
    elif change.before is not None and digest == change.before.digest:
        launches = "base"
    return review.Running(state.state, state.git_commit, state.git_dirty, launches)
