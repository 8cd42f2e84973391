"""What a change to the profiles does to each deployment: ``orch diff BASE..HEAD``.

Pure: ``commands/review.py`` reads the two revisions, loads, renders and (where asked) plans
every deployment on each side; this module compares one deployment's two sides and decides.

Values are compared, never text: each side's command line is read back through its release's
argument table (``sglang.config.parse_arguments``) and set over that release's defaults, so a
field written at its default is no change, and a field renamed between the releases is compared
with itself under its new name. Where both sides were planned by SGLang itself, its resolution
decides instead (``upgrade.effective``: every effective field that moves, with SGLang's step).

The action is the most disruptive any change forces, with the fields that force it:

- ``replace``: the host, the GPU set, the node count or the SGLang release (a new place);
- ``restart``: a field of the command line or the environment SGLang reads at start;
- ``live``: only fields the running release changes in place (``sglang/live.py``);
- ``agent-only``: the supervisor's settings (restart policy, health, stop timeout);
- ``none``: the rendering changed, the effective configuration did not;
- ``blocked``: orch's validation or SGLang's resolution refuses the new side (the reason whole);
- ``new`` / ``removed``: the deployment exists on one side only (a replica added to
  ``replicas:`` or taken out of it is one).

Every replica of a profile with ``replicas:`` is a deployment of its own (``NAME@I``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.effective import upgrade, verify
from orchestrator.effective.plan import PlanReport
from orchestrator.model import deployment_name
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang.argtable import RENAMES, ArgTable, parse_version
from orchestrator.sglang.live import live_fields

NONE = "none"
AGENT_ONLY = "agent-only"
LIVE = "live"
RESTART = "restart"
REPLACE = "replace"
BLOCKED = "blocked"
NEW = "new"
REMOVED = "removed"
# the summary's order: what needs a reviewer's eyes first
ACTIONS = (BLOCKED, REPLACE, RESTART, NEW, REMOVED, LIVE, AGENT_ONLY, NONE)

# how a change was found (FieldChange.basis)
PLACEMENT = "placement"  # where it runs: host, GPUs, nodes, release
ARGTABLE = "argtable"  # the release's argument table: the value given, or the release's default
RELEASE_DEFAULT = "release-default"  # left to SGLang; the two releases' defaults differ
RENAME = "rename"  # the field's name differs between the two releases
SGLANG = "sglang"  # SGLang's own resolution of both sides (--local-sglang, --remote)
ENV = "env"  # the server's environment
LAUNCHER = "launcher"  # the program and what is not an SGLang argument
SUPERVISION = "supervision"  # the agent's settings: restart.*, health.*, stop_timeout_s


@dataclass(frozen=True)
class Placement:
    """Where a deployment runs: a change of any of these is a new place (``replace``)."""

    host: str  # the inventory's name and what reaches it (user@address:port, workdir)
    gpus: str  # the GPU type and devices
    sglang: str  # the release, or "detected on the host"
    nodes: int

    def items(self) -> tuple[tuple[str, str], ...]:
        return (
            ("host", self.host),
            ("gpu", self.gpus),
            ("sglang", self.sglang),
            ("group.nodes", str(self.nodes)),
        )


@dataclass(frozen=True)
class Rendered:
    """One deployment's launch on one side, as shown: secrets masked (by reference, by name)."""

    argv: tuple[str, ...]
    env: Mapping[str, str]
    placement: Placement
    supervision: Mapping[str, str]  # restart.mode -> on-failure, health.interval_s -> 5.0 ...


@dataclass(frozen=True)
class Side:
    """One deployment at one revision."""

    rendered: Rendered | None  # None: orch could not load or render it (``problems`` says why)
    table: ArgTable | None = None  # the release its command line is spelled for
    # the SGLang arguments as parsed for comparing (secret references as their placeholder,
    # literal secrets as written: compared, never shown)
    arguments: tuple[str, ...] = ()
    program: tuple[str, ...] = ()  # what precedes the SGLang arguments (python -m ...)
    env_values: Mapping[str, str] = field(default_factory=dict)  # compared, never shown
    problems: tuple[str, ...] = ()  # orch's validation or render errors, whole lines
    secret_fields: frozenset[str] = frozenset()  # fields whose values are never shown
    plan: PlanReport | None = None
    plan_note: str | None = None  # why there is no plan, or where it was made
    digest: str | None = None  # render.launch_digest: what the agent records as running
    version: str | None = None  # the profile's ``sglang:``


@dataclass(frozen=True)
class FieldChange:
    field: str  # the new side's name (an SGLang field, env.NAME, restart.delay_s, host ...)
    before: Any  # verify.ABSENT: not there
    after: Any
    basis: str
    how: str = ""  # SGLang's step, "given", the release's default ...
    renamed_from: str | None = None
    secret: bool = False  # the values are masked wherever shown


@dataclass(frozen=True)
class Memory:
    """The memory plan of each side, where there is one."""

    before_verdict: str | None
    after_verdict: str | None
    before_deciding: str | None
    after_deciding: str | None
    before_max_running_requests: int | None
    after_max_running_requests: int | None
    before_headroom_gib: float | None
    after_headroom_gib: float | None


@dataclass(frozen=True)
class Running:
    """What runs now, as the deployment's agent records it (``orch diff --status``)."""

    state: str | None  # the agent's state; None: nothing deployed
    commit: str | None  # the profiles' commit it was launched from
    dirty: bool | None  # launched with uncommitted changes to the profiles
    launches: str  # "base", "head", "another launch", or "-" (nothing runs)
    error: str | None = None  # the host could not be asked


@dataclass(frozen=True)
class DeploymentChange:
    profile: str
    rank: int | None  # a group's rank; None for a single-node profile
    action: str
    forced_by: tuple[str, ...]  # the fields (FieldChange.field) that force the action
    before: Side | None
    after: Side | None
    changes: tuple[FieldChange, ...]
    reasons: tuple[str, ...] = ()  # blocked: orch's or SGLang's refusal, whole
    notes: tuple[str, ...] = ()
    memory: Memory | None = None
    live_endpoints: Mapping[str, str] = field(default_factory=dict)  # live: field -> endpoint
    running: Running | None = None  # --status
    replica: int | None = None  # one of the profile's ``replicas:`` (a deployment each)

    @property
    def deployment(self) -> str:
        """The deployment on its host: the profile, or ``NAME@I`` for a replica."""
        return deployment_name(self.profile, self.replica)

    @property
    def name(self) -> str:
        return self.deployment if self.rank is None else f"{self.deployment}[{self.rank}]"


def compare(
    profile: str,
    rank: int | None,
    before: Side | None,
    after: Side | None,
    *,
    nodes: tuple[int, int] | None = None,
    replica: int | None = None,
) -> DeploymentChange | None:
    """One deployment's change, or None when nothing about it changed. ``nodes``: the profile's
    node count on each side, when a rank exists on one side only because the group grew or
    shrank (a new place for the whole group, not a new deployment). ``replica``: the
    deployment is that replica of ``profile``; one only on one side is new or removed."""
    change = _compare(profile, rank, before, after, nodes)
    if change is None or replica is None:
        return change
    return dataclasses.replace(change, replica=replica)


def _compare(
    profile: str,
    rank: int | None,
    before: Side | None,
    after: Side | None,
    nodes: tuple[int, int] | None,
) -> DeploymentChange | None:
    if before is None and after is None:
        return None
    if before is None or after is None:
        resized = nodes is not None and nodes[0] != nodes[1] and min(nodes) > 0
        if resized and nodes is not None:
            change = FieldChange("group.nodes", nodes[0], nodes[1], PLACEMENT)
            action = REPLACE
            reasons = _refusals(after) if after is not None else ()
            if reasons:
                action = BLOCKED
            return DeploymentChange(
                profile, rank, action, ("group.nodes",), before, after, (change,), reasons
            )
        if after is None:
            return DeploymentChange(profile, rank, REMOVED, (), before, None, ())
        assert before is None  # noqa: S101 - narrowed above
        reasons = _refusals(after)
        action = BLOCKED if reasons else NEW
        return DeploymentChange(profile, rank, action, (), None, after, (), reasons, _notes(after))
    if _unchanged(before, after):
        return None
    changes = _changes(before, after)
    memory = _memory(before.plan, after.plan)
    notes = tuple(dict.fromkeys((*_notes(before), *_notes(after))))
    reasons = _refusals(after)
    if reasons:
        if _refusals(before):
            notes = (*notes, "the base revision is refused too: this change does not cause it")
        return DeploymentChange(
            profile, rank, BLOCKED, (), before, after, changes, reasons, notes, memory
        )
    action, forced, endpoints = _action(changes, before)
    return DeploymentChange(
        profile, rank, action, forced, before, after, changes, (), notes, memory, endpoints
    )


def _unchanged(before: Side, after: Side) -> bool:
    if before.problems or after.problems:
        return before.problems == after.problems
    return (
        before.rendered == after.rendered
        and before.arguments == after.arguments
        and before.env_values == after.env_values
    )


def _refusals(side: Side) -> tuple[str, ...]:
    """Why the side cannot launch: orch's validation, SGLang's resolution, the memory plan."""
    reasons = list(side.problems)
    plan = side.plan
    if plan is not None:
        reasons += [f"{p.message} [{p.kind}]" for p in plan.blocking_pitfalls]
        if plan.error is not None:
            reasons.append(plan.refusal())
        elif plan.budget is not None and plan.budget.refusal is not None:
            reasons.append(plan.budget.refusal)
    return tuple(reasons)


def _notes(side: Side) -> tuple[str, ...]:
    notes = [side.plan_note] if side.plan_note else []
    if side.plan is not None:
        notes += side.plan.notes
    return tuple(notes)


def _action(
    changes: Sequence[FieldChange], before: Side
) -> tuple[str, tuple[str, ...], dict[str, str]]:
    placement = [c.field for c in changes if c.basis == PLACEMENT]
    if placement:
        return REPLACE, tuple(placement), {}
    server = [c for c in changes if c.basis not in (PLACEMENT, SUPERVISION)]
    if server:
        live = live_fields(before.version or (before.table.version if before.table else None))
        fixed = [c.field for c in server if c.field not in live or c.basis in (ENV, LAUNCHER)]
        if fixed:
            return RESTART, tuple(dict.fromkeys(fixed)), {}
        return LIVE, tuple(c.field for c in server), {c.field: live[c.field] for c in server}
    supervision = [c.field for c in changes if c.basis == SUPERVISION]
    if supervision:
        return AGENT_ONLY, tuple(supervision), {}
    return NONE, (), {}


# -- the changes ---------------------------------------------------------------------------------


def _changes(before: Side, after: Side) -> tuple[FieldChange, ...]:
    b, a = before.rendered, after.rendered
    if b is None or a is None:
        return ()
    out = [
        FieldChange(name, old, new, PLACEMENT)
        for (name, old), (_, new) in zip(b.placement.items(), a.placement.items(), strict=True)
        if old != new
    ]
    out += _sglang_changes(before, after)
    if before.program != after.program:
        out.append(
            FieldChange("launcher", " ".join(before.program), " ".join(after.program), LAUNCHER)
        )
    old_env, new_env = before.env_values or b.env, after.env_values or a.env
    for name in sorted(set(old_env) | set(new_env)):
        if old_env.get(name) == new_env.get(name):
            continue
        secret = b.env.get(name) != old_env.get(name) or a.env.get(name) != new_env.get(name)
        out.append(
            FieldChange(
                f"env.{name}",
                b.env.get(name, verify.ABSENT),  # as shown: a literal secret masked
                a.env.get(name, verify.ABSENT),
                ENV,
                "a secret: changed" if secret else "",
                secret=secret,
            )
        )
    for name in sorted(set(b.supervision) | set(a.supervision)):
        old_value = b.supervision.get(name, verify.ABSENT)
        new_value = a.supervision.get(name, verify.ABSENT)
        if old_value != new_value:
            out.append(FieldChange(name, old_value, new_value, SUPERVISION))
    return tuple(out)


def _sglang_changes(before: Side, after: Side) -> list[FieldChange]:
    if before.table is None or after.table is None:
        return []
    secret = before.secret_fields | after.secret_fields | verify.SECRET_FIELDS
    renames = _renamed(before.table, after.table)
    old_given = _given(before)
    new_given = _given(after)
    spelled = {name: renames.get(name, name) for name in old_given}
    out: list[FieldChange] = []
    for old, new in spelled.items():
        if old != new and (new in new_given or new in after.table.fields):
            value = old_given[old]
            later = new_given.get(new, after.table.fields.get(new, verify.ABSENT))
            if verify.same(value, later):
                out.append(
                    FieldChange(new, value, later, RENAME, renamed_from=old, secret=new in secret)
                )
    both_planned = _planned(before.plan) and _planned(after.plan)
    if both_planned:
        assert before.plan is not None  # noqa: S101 - _planned said so
        assert after.plan is not None  # noqa: S101
        moves = upgrade.effective(before.plan, after.plan, ()).moves
        for move in moves:
            if verify.same(move.before.value, move.after.value):
                continue
            reverse = {new: old for old, new in renames.items()}
            out.append(
                FieldChange(
                    move.field,
                    move.before.value,
                    move.after.value,
                    SGLANG,
                    _how(move.before.how, move.after.how),
                    renamed_from=reverse.get(move.field),
                    secret=move.field in secret,
                )
            )
        return _secrets_masked(out)
    defaults_before = before.table.fields
    defaults_after = after.table.fields
    reverse = {new: old for old, new in spelled.items()}
    for name in sorted(set(spelled.values()) | set(new_given)):
        old_name = reverse.get(name, name)
        was = old_given.get(old_name, defaults_before.get(old_name, verify.ABSENT))
        now = new_given.get(name, defaults_after.get(name, verify.ABSENT))
        if verify.same(was, now):
            continue
        how = _how(
            "given" if old_name in old_given else f"SGLang {before.table.version}'s default",
            "given" if name in new_given else f"SGLang {after.table.version}'s default",
        )
        out.append(
            FieldChange(
                name,
                was,
                now,
                ARGTABLE,
                how,
                renamed_from=old_name if old_name != name else None,
                secret=name in secret,
            )
        )
    if before.table.version != after.table.version:
        given = set(spelled.values()) | set(new_given)
        for name in sorted(defaults_after):
            old_name = reverse.get(name, name)
            if name in given or name.startswith("_") or old_name not in defaults_before:
                continue
            if not verify.same(defaults_before[old_name], defaults_after[name]):
                out.append(
                    FieldChange(
                        name,
                        defaults_before[old_name],
                        defaults_after[name],
                        RELEASE_DEFAULT,
                        f"left to SGLang: {before.table.version}'s default -> "
                        f"{after.table.version}'s",
                        secret=name in secret,
                    )
                )
    return _secrets_masked(out)


def _planned(plan: PlanReport | None) -> bool:
    return plan is not None and plan.error is None


def _how(before: str, after: str) -> str:
    return after if before == after else f"{before} -> {after}"


def _given(side: Side) -> dict[str, Any]:
    """The fields the side's command line gives, as its release's parser reads them."""
    if side.table is None:
        return {}
    try:
        parsed = sglang_config.parse_arguments(side.table, side.arguments)
    except sglang_config.ArgvUnreadable:
        return {}
    return parsed.values


def _renamed(before: ArgTable, after: ArgTable) -> dict[str, str]:
    """Old name -> new name for every field renamed between the two releases (either way)."""
    old, new = parse_version(before.version), parse_version(after.version)
    if old is None or new is None or old == new:
        return {}
    out: dict[str, str] = {}
    for rename in RENAMES:
        if old < rename.renamed_in <= new:
            out[rename.old] = rename.new
        elif new < rename.renamed_in <= old:
            out[rename.new] = rename.old
    return out


def _secrets_masked(changes: list[FieldChange]) -> list[FieldChange]:
    """A secret's values never leave this module: a change of one says only that it changed."""
    out = []
    for change in changes:
        if change.secret:
            change = FieldChange(
                change.field,
                verify.SECRET_SHOWN if change.before is not verify.ABSENT else verify.ABSENT,
                verify.SECRET_SHOWN if change.after is not verify.ABSENT else verify.ABSENT,
                change.basis,
                "a secret: changed" if change.basis != RENAME else change.how,
                change.renamed_from,
                secret=True,
            )
        out.append(change)
    return out


def _memory(before: PlanReport | None, after: PlanReport | None) -> Memory | None:
    b = before.budget if before is not None else None
    a = after.budget if after is not None else None
    if b is None and a is None:
        return None
    return Memory(
        b.verdict if b else None,
        a.verdict if a else None,
        b.deciding if b else None,
        a.deciding if a else None,
        b.max_running_requests if b else None,
        a.max_running_requests if a else None,
        b.headroom_gib if b else None,
        a.headroom_gib if a else None,
    )


# -- the whole review ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Review:
    base: str  # the revision as given (a name or "HEAD")
    head: str  # a revision, or "working tree"
    base_commit: str
    head_commit: str | None  # None: the working tree
    deployments: tuple[DeploymentChange, ...]
    unchanged: int  # deployments on both sides whose launch did not change
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return bool(self.deployments)


def ordered(changes: Sequence[DeploymentChange]) -> tuple[DeploymentChange, ...]:
    """Most disruptive first, then by name, replica and rank."""
    return tuple(
        sorted(
            changes,
            key=lambda c: (
                ACTIONS.index(c.action),
                c.profile,
                -1 if c.replica is None else c.replica,
                c.rank or 0,
            ),
        )
    )
