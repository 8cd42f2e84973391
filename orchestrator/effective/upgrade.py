"""What moving a profile to another SGLang release changes, before anyone tries it on a GPU.

Pure: ``commands/upgrading.py`` loads the profile, runs the two plans and writes files; this
module decides. Three layers, each read with the releases' own data:

- **spelling** (the argument tables): a field the profile names by a renamed flag is re-spelled
  with the new name (``mamba_scheduler_strategy`` -> ``mamba_radix_cache_strategy``) where it is
  written, its ``pin:`` entries too, as a minimal text edit that keeps comments and layout; a
  switch the target replaced by a value of another field is written as that value
  (``disable_piecewise_cuda_graph: true`` -> ``cuda_graph_backend_prefill: disabled``; a false one,
  its default, is dropped); a field the target no longer has is an error; a deprecated one a
  warning;
- **effective configuration** (SGLang's real resolution of each release, ``plan``): every field
  whose effective value differs between the two, with SGLang's own provenance on each side, and
  the values the profile asks for that either release changes (the speculative draft-token
  adjustment); a pinned field that would move is an error;
- **memory** (the memory plan of each side, when there is one): the pools side by side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.effective import verify
from orchestrator.effective.plan import PlanReport, Provenance
from orchestrator.model import Profile
from orchestrator.profile.fields import RequestedField, requested_fields
from orchestrator.profile.yamldoc import Position
from orchestrator.sglang import pitfalls
from orchestrator.sglang.argtable import (
    RENAMES,
    ArgTable,
    format_version,
    load_table,
    natural_flag,
    parse_version,
    spell,
)
from orchestrator.sglang.memory.budget import Budget

ERROR = "error"
WARNING = "warning"


@dataclass(frozen=True)
class Finding:
    severity: str  # error, warning
    key_path: str
    message: str
    hint: str | None = None


@dataclass(frozen=True)
class Respelling:
    """One key of a profile file to write under another name."""

    key_path: str  # args.mamba_scheduler_strategy, pin[0]
    old: str
    new: str
    source: str  # the file (as displayed) that holds it
    line: int
    column: int
    why: str


@dataclass(frozen=True)
class Replacing:
    """A switch of a profile file the target replaced by one value of another field: its line
    rewritten as ``new: value``, or dropped (``value`` None: a false switch, or a true one whose
    value the profile already sets)."""

    key_path: str  # args.disable_piecewise_cuda_graph
    old: str
    new: str  # cuda_graph_backend_prefill
    value: str | None
    source: str
    line: int
    column: int
    why: str

    @property
    def written(self) -> str:
        return "(dropped)" if self.value is None else f"{self.new}: {self.value}"


@dataclass(frozen=True)
class Spelling:
    respellings: tuple[Respelling, ...]
    findings: tuple[Finding, ...]
    replacings: tuple[Replacing, ...] = ()


def spelling(
    profile: Profile,
    source: ArgTable,
    target: ArgTable,
    positions: Mapping[tuple[str | int, ...], Position],
    versions: Sequence[str],
) -> Spelling:
    """How the profile's field names read for ``target``: renames to write, fields it lacks.

    ``positions``: where each key path of the merged profile is written (file, line, column);
    ``versions``: every release with a table, to say in which one a field went away.
    """
    respellings: list[Respelling] = []
    findings: list[Finding] = []
    replacings: list[Replacing] = []
    requested = requested_fields(profile)
    for wanted in requested:
        if wanted.key_path.startswith("group."):
            continue  # orch's own fields (dist_init_addr ...): rendered for whatever release
        replacement = pitfalls.replaced_in(target, wanted.name)
        if replacement is not None:
            replaced, problems = _replacing(
                wanted, replacement, profile, requested, replacings, target, positions
            )
            replacings.extend(replaced)
            findings.extend(problems)
            continue
        to = spell(target, wanted.name)
        if to is None:
            gone = _first_without(wanted.name, source, versions, target)
            findings.append(
                Finding(
                    ERROR,
                    wanted.key_path,
                    f"SGLang {target.version} has no {natural_flag(wanted.name)}"
                    + (f" (gone since {gone})" if gone else ""),
                    "remove the key, or keep the profile on a release that has it; "
                    "docs/sglang-versions.md lists what each release changed",
                )
            )
            continue
        rename = to.rename
        if rename is not None and wanted.name == rename.old and wanted.key_path.startswith("args."):
            position = positions.get(("args", rename.old))
            if position is not None:
                respellings.append(
                    Respelling(
                        wanted.key_path,
                        rename.old,
                        rename.new,
                        position.source,
                        position.line,
                        position.column,
                        rename.describe() + _ambiguity(rename.old, target),
                    )
                )
        elif to.option.deprecated:
            findings.append(
                Finding(
                    WARNING,
                    wanted.key_path,
                    f"{to.flag} is deprecated in SGLang {target.version}: {to.option.help[:160]}",
                )
            )
    for index, name in enumerate(profile.pin):
        new = _new_name(name, target.parsed_version)
        position = positions.get(("pin", index))
        if new is not None and position is not None:
            respellings.append(
                Respelling(
                    f"pin[{index}]",
                    name,
                    new,
                    position.source,
                    position.line,
                    position.column,
                    f"the pinned field's new name in SGLang {target.version}",
                )
            )
    return Spelling(tuple(respellings), tuple(findings), tuple(replacings))


def _replacing(
    wanted: RequestedField,
    replacement: pitfalls.Replacement,
    profile: Profile,
    requested: Sequence[RequestedField],
    earlier: Sequence[Replacing],
    target: ArgTable,
    positions: Mapping[tuple[str | int, ...], Position],
) -> tuple[list[Replacing], list[Finding]]:
    """The edit for one replaced switch, or why it cannot be made without the user."""
    old, new, value = replacement.old, replacement.new, replacement.value
    removed = format_version(pitfalls.REPLACEMENT_REMOVED_IN)
    why = (
        f"SGLang {format_version(pitfalls.REPLACED_IN)} made {natural_flag(old)} a shorthand for "
        f"{natural_flag(new)} {value}; {removed} removed it"
    )
    if old in profile.pin:
        return [], [
            Finding(
                ERROR,
                f"pin[{profile.pin.index(old)}]",
                f"pinned switch {old} is replaced by {new}: {value} in SGLang {target.version}: "
                "the pin cannot hold a field the release lacks",
                f"remove {old} from pin:, run orch upgrade --write, then pin {new}",
            )
        ]
    position = positions.get(("args", old))
    if not wanted.key_path.startswith("args.") or position is None:
        return [], [
            Finding(
                ERROR,
                wanted.key_path,
                f"{why}; orch cannot locate the switch to rewrite it",
                f"write args.{replacement.write()} in place of it by hand",
            )
        ]
    if not isinstance(wanted.value, bool):
        return [], [
            Finding(
                ERROR,
                wanted.key_path,
                f"{old} is a switch (true or false), not {wanted.value!r}",
                f"write args.{replacement.write()} for true, or remove the key",
            )
        ]

    def edit(written: str | None, because: str) -> Replacing:
        return Replacing(
            wanted.key_path,
            old,
            new,
            written,
            position.source,
            position.line,
            position.column,
            because,
        )

    if wanted.value is False:
        return [edit(None, f"false is its default; {why}")], []
    if not pitfalls.replacement_accepted(target, replacement):
        option = target.option_for_name(new)
        choices = ", ".join(str(c) for c in (option.choices or ())) if option else ""
        return [], [
            Finding(
                ERROR,
                wanted.key_path,
                f"{why}, and SGLang {target.version}'s {natural_flag(new)} has no {value}"
                + (f" (choices: {choices})" if choices else ""),
                "remove the switch and choose one of those values, or keep the profile on "
                "a release that has it",
            )
        ]
    given = [w for w in requested if w.name == new and w.value is not None]
    given_value = given[-1].value if given else None
    given_value = next((e.value for e in earlier if e.new == new and e.value), given_value)
    if given_value is not None and given_value != value:
        return [], [
            Finding(
                ERROR,
                wanted.key_path,
                f"{old}: true means {new}: {value} ({why}), and the profile already sets "
                f"{new}: {given_value}",
                f"keep one: remove args.{old}, or set {new}: {value}",
            )
        ]
    if given_value == value:
        return [edit(None, f"the profile already sets {new}: {value}; {why}")], []
    return [edit(value, why)], []


def _new_name(name: str, version: tuple[int, ...]) -> str | None:
    """The name ``version`` gives a field renamed by then (None: not renamed)."""
    for rename in RENAMES:
        if name == rename.old and version >= rename.renamed_in:
            return rename.new
    return None


def _ambiguity(old: str, target: ArgTable) -> str:
    """argparse takes a unique prefix of a long option: once the old flag is gone and two
    options start with it, scripts that still write it fail (0.5.20: --cuda-graph-max-bs)."""
    flag = natural_flag(old)
    if flag in target.by_flag:
        return ""
    starting = sorted(f for f in target.by_flag if f.startswith(flag))
    if len(starting) > 1:
        return f"; {flag} alone is now an ambiguous abbreviation of {', '.join(starting)}"
    return ""


def _first_without(name: str, source: ArgTable, versions: Sequence[str], target: ArgTable) -> str:
    """The first release after ``source`` whose table lacks the field."""
    low, high = source.parsed_version, target.parsed_version
    for version in versions:
        parsed = parse_version(version)
        if parsed is None or not (low < parsed <= high):
            continue
        if spell(load_table(version), name) is None:
            return version
    return ""


# -- the effective configuration ---------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    value: Any  # verify.ABSENT: the release has no such field
    how: str  # "as given", "SGLang's default", or SGLang's step that set it
    why: str | None = None  # the line SGLang logged about it


@dataclass(frozen=True)
class FieldMove:
    """A field of the effective configuration that differs between the two releases, or one
    the profile sets that a release changes."""

    field: str  # the target's name
    requested: Any  # the profile's value, verify.ABSENT when it leaves the field to SGLang
    before: Side
    after: Side
    pinned: bool
    adjusted: bool = False  # the profile's value is changed by SGLang (either side)


@dataclass(frozen=True)
class Effective:
    moves: tuple[FieldMove, ...]
    new_fields: tuple[str, ...]  # only the target has them, at their defaults
    gone_fields: tuple[str, ...]  # only the source has them
    findings: tuple[Finding, ...]


DEFAULT = "SGLang's default"
# Values SGLang draws at random when the profile leaves them open: a difference is no change.
_DRAWN = frozenset({"random_seed"})


def _renamed_or_same(name: str, version: tuple[int, ...]) -> str:
    return _new_name(name, version) or name


def _side(report: PlanReport, name: str) -> Side:
    value = verify.resolved_value(report.effective, name)
    if value is verify.ABSENT:
        return Side(verify.ABSENT, "no such field")
    planned = {f.field: f for f in (*report.fields, *report.defaulted)}
    row = planned.get(name)
    if row is not None and row.changed:
        return Side(value, _provenance(row.provenance) or "SGLang's resolution", row.why)
    if row is not None and row.profile is not verify.ABSENT:
        return Side(value, "as the profile asks")
    return Side(value, DEFAULT)  # argparse's default, which resolution kept


def _provenance(steps: Sequence[Provenance]) -> str:
    return "; ".join(step.describe() for step in steps)


def effective(before: PlanReport, after: PlanReport, pins: Sequence[str]) -> Effective:
    """Field by field under the target's names (renamed fields compared with each other)."""
    version = parse_version(after.sglang_version or "") or ()
    old_names = {_renamed_or_same(name, version): name for name in before.effective}
    # a switch replaced by a value of another field, on before's side: compared as that value
    stood_for = _replaced_switches(before, after)
    for switch in stood_for.values():
        old_names.pop(switch.old, None)
    pinned = {_renamed_or_same(name, version) for name in pins}
    moves: list[FieldMove] = []
    new_fields: list[str] = []
    requested = {f.field: f for f in after.fields}
    requested_before = {_renamed_or_same(f.field, version): f for f in before.fields}
    for name in sorted(set(old_names) | set(after.effective)):
        if name.startswith("_") or name in verify.SECRET_FIELDS:
            continue
        was = _side(before, old_names[name]) if name in old_names else Side(verify.ABSENT, "-")
        if name in stood_for:
            switch = stood_for[name]
            said = _side(before, switch.old)
            was = Side(switch.value, f"{switch.old}: true, {said.how}", said.why)
        now = _side(after, name) if name in after.effective else Side(verify.ABSENT, "-")
        asked = requested.get(name) or requested_before.get(name)
        adjusted = asked is not None and (
            bool(requested.get(name) and requested[name].changed)
            or bool(requested_before.get(name) and requested_before[name].changed)
        )
        if was.value is verify.ABSENT and now.how == DEFAULT and not adjusted:
            new_fields.append(name)
            continue
        if now.value is verify.ABSENT and was.how == DEFAULT:
            continue  # listed as gone
        if verify.same(was.value, now.value) and not adjusted:
            continue
        if name in _DRAWN and asked is None:
            continue
        moves.append(
            FieldMove(
                name,
                asked.profile if asked is not None else verify.ABSENT,
                was,
                now,
                pinned=name in pinned,
                adjusted=adjusted,
            )
        )
    gone = sorted(
        n for n, old in old_names.items() if n not in after.effective and not old.startswith("_")
    )
    findings = []
    for move in moves:
        if move.pinned and not verify.same(move.before.value, move.after.value):
            findings.append(
                Finding(
                    ERROR,
                    f"pin ({move.field})",
                    f"pinned field {move.field} would move: {verify.display(move.before.value)} on "
                    f"SGLang {before.sglang_version} -> {verify.display(move.after.value)} on "
                    f"{after.sglang_version} ({move.after.how})",
                    "set the value the profile needs explicitly, or unpin it once the new value "
                    "is wanted",
                )
            )
        elif (
            move.pinned
            and move.adjusted
            and move.requested is not verify.ABSENT
            and not (verify.same(move.requested, move.after.value))
        ):
            findings.append(
                Finding(
                    ERROR,
                    f"pin ({move.field})",
                    f"SGLang {after.sglang_version} changes pinned field {move.field}: "
                    f"{verify.display(move.requested)} -> {verify.display(move.after.value)} "
                    f"({move.after.how})",
                    "ask for the value SGLang keeps, or unpin it",
                )
            )
    return Effective(tuple(moves), tuple(new_fields), tuple(gone), tuple(findings))


def _replaced_switches(before: PlanReport, after: PlanReport) -> dict[str, pitfalls.Replacement]:
    """The replaced field -> the switch that is true on ``before``'s side and that ``after``'s
    release expresses as a value of the field (``disable_piecewise_cuda_graph`` ->
    ``cuda_graph_backend_prefill: disabled``)."""
    found: dict[str, pitfalls.Replacement] = {}
    for replacement in pitfalls.REPLACEMENTS:
        if replacement.new in found or replacement.old in after.effective:
            continue
        value = verify.resolved_value(before.effective, replacement.old)
        if value is True and replacement.new in after.effective:
            found[replacement.new] = replacement
    return found


# -- memory ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryRow:
    label: str
    before: str
    after: str


def memory_rows(before: Budget | None, after: Budget | None) -> tuple[MemoryRow, ...]:
    """The two budgets' pools side by side (empty when neither side has one)."""
    if before is None and after is None:
        return ()

    def gib(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f} GiB"

    def rows(budget: Budget | None) -> list[str]:
        if budget is None:
            return ["-"] * len(_MEMORY_LABELS)
        mamba = budget.mamba
        return [
            f"{budget.gpu_name}, {budget.free_gib:.0f} of {budget.total_gib:.0f} GiB free",
            gib(budget.weights_gib),
            f"{budget.mem_fraction_static:.3g}",
            gib(mamba.pool_gib) if mamba is not None else "-",
            gib(budget.spec_allocated_gib) if mamba is not None else "-",
            f"{budget.kv_tokens:,} tokens, {gib(budget.kv_gib)}",
            f"{budget.max_running_requests} ({budget.limited_by})",
            f"{gib(budget.headroom_gib)} ({budget.headroom_worst_gib:.1f} to "
            f"{budget.headroom_best_gib:.1f})",
            f"{budget.verdict}: {budget.deciding}",
        ]

    return tuple(
        MemoryRow(label, a, b)
        for label, a, b in zip(_MEMORY_LABELS, rows(before), rows(after), strict=True)
    )


_MEMORY_LABELS = (
    "GPU",
    "weights",
    "mem_fraction_static",
    "mamba pool",
    "speculative states",
    "KV cache",
    "max running requests",
    "headroom",
    "verdict",
)


# -- the whole answer --------------------------------------------------------------------------


@dataclass(frozen=True)
class Upgrade:
    profile: str
    source_version: str
    target_version: str
    spelling: Spelling
    files: Mapping[str, str] = field(default_factory=dict)  # displayed path -> new text
    originals: Mapping[str, str] = field(default_factory=dict)  # the same files' text before
    shared: tuple[str, ...] = ()  # other profiles built on an edited file, launches unchanged
    effective: Effective | None = None
    plan_notes: tuple[str, ...] = ()  # why a side was not planned, and where each was
    refused: str | None = None  # SGLang rejects the target's plan
    memory: tuple[MemoryRow, ...] = ()
    target_plan: PlanReport | None = None  # SGLang's plan of the upgraded profile
    written: tuple[str, ...] = ()  # --write: the files changed
    lock: str | None = None  # --write: what happened to the lock

    @property
    def findings(self) -> tuple[Finding, ...]:
        found = list(self.spelling.findings)
        if self.effective is not None:
            found += self.effective.findings
        return tuple(found)

    @property
    def blocked(self) -> bool:
        return self.refused is not None or any(f.severity == ERROR for f in self.findings)
