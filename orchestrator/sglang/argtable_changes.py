"""What changed in SGLang's command line between two releases, read off their argument tables.

Used by ``scripts/argtables.py`` only: docs/sglang-versions.md, and the release check that fails
when ``argtable.RENAMES`` misses a rename. ``orch upgrade`` reads ``RENAMES`` (kept complete by
that check), never this module: a user's command never diffs two whole tables.

A rename is seen two ways: an old flag that now stores into another field whose own field is gone
(0.5.14: ``--mamba-scheduler-strategy`` became a deprecated alias of
``mamba_radix_cache_strategy``), or a field removed in the same release that another appears with
the same help text and the same type.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from orchestrator.sglang.argtable import (
    RENAMES,
    ArgOption,
    ArgTable,
    Rename,
    const_of,
    format_version,
    load_table,
    natural_flag,
    parse_version,
)


@dataclass(frozen=True)
class Change:
    """One difference between two releases' parsers, about one ServerArgs field."""

    kind: str  # one of _ORDER: renamed, removed, added, deprecated, choices, default ...
    field: str
    text: str  # the change in words, flags spelled as users type them


@dataclass(frozen=True)
class SeenRename:
    old: str
    new: str
    version: str  # the release that made it
    evidence: str


@dataclass(frozen=True)
class SeenReplacement:
    """A switch that became a shorthand for one value of another field (0.5.14:
    ``--disable-piecewise-cuda-graph`` = ``--cuda-graph-backend-prefill=disabled``): not a
    rename, the value changes meaning."""

    old: str
    new: str
    value: object
    version: str


def field_of(option: ArgOption, table: ArgTable) -> str:
    """The ServerArgs field an option sets: its dest, or the field one of its flags names
    (0.5.11: ``--tp-size`` has dest ``tensor_parallel_size``, the field is ``tp_size``)."""
    if option.dest in table.fields:
        return option.dest
    for flag in option.flags:
        name = flag.lstrip("-").replace("-", "_")
        if name in table.fields:
            return name
    return option.dest


def _options_by_field(table: ArgTable) -> dict[str, list[ArgOption]]:
    grouped: dict[str, list[ArgOption]] = {}
    for option in table.options:
        grouped.setdefault(field_of(option, table), []).append(option)
    return grouped


def _main_option(options: Sequence[ArgOption]) -> ArgOption:
    live = [o for o in options if not o.deprecated]
    return (live or list(options))[0]


def _help_key(text: str) -> str:
    return re.sub(r"\W+", " ", text).strip().lower()


def _shown(value: object) -> str:
    if isinstance(value, dict) and set(value) == {"repr"}:
        return str(value["repr"])
    if isinstance(value, dict) and value.get("factory"):
        return "(computed)"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, bool) or value is None:
        return "null" if value is None else str(value).lower()
    return str(value)


def _type_of(option: ArgOption) -> tuple[object, ...]:
    action = "switch" if option.nargs == 0 else option.action
    return (action, option.type, option.nargs)


def _moved_flags(old: ArgTable, new: ArgTable) -> list[tuple[str, str, str, ArgOption]]:
    """(flag, old field, new field, the flag's option in ``new``) for each flag that now stores
    into another field, the old field gone."""
    new_fields = _options_by_field(new)
    moved = []
    for option in new.options:
        target = field_of(option, new)
        for flag in option.flags:
            before = old.by_flag.get(flag)
            if before is None:
                continue
            source = field_of(before, old)
            if source != target and source not in new.fields and source not in new_fields:
                moved.append((flag, source, target, option))
    return moved


def seen_replacements(old: ArgTable, new: ArgTable) -> list[SeenReplacement]:
    """Switches turned into a shorthand for one value of another field."""
    found = {}
    new_fields = _options_by_field(new)
    for _, source, target, option in _moved_flags(old, new):
        main = _main_option(new_fields[target])
        value = const_of(option)
        if option.nargs == 0 and value is not None and main.nargs != 0:
            found[source] = SeenReplacement(source, target, value, new.version)
    return sorted(found.values(), key=lambda r: r.old)


def seen_renames(old: ArgTable, new: ArgTable) -> list[SeenRename]:
    """Renames between two releases, by the two signs the module docstring names; a field
    whose values change meaning (a switch become one value of another field) is not one."""
    old_fields, new_fields = _options_by_field(old), _options_by_field(new)
    found: dict[str, SeenRename] = {}
    replaced = {r.old for r in seen_replacements(old, new)}
    for flag, source, target, _ in _moved_flags(old, new):
        if source not in replaced:
            found[source] = SeenRename(
                source, target, new.version, f"{flag} stores into {target} in {new.version}"
            )
    gone = [
        f
        for f in old_fields
        if f not in new_fields and f not in new.fields and f not in found and f not in replaced
    ]
    born = [f for f in new_fields if f not in old_fields and f not in old.fields]
    for source in gone:
        before = _main_option(old_fields[source])
        if not before.help:
            continue
        matches = [
            target
            for target in born
            if _help_key(_main_option(new_fields[target]).help) == _help_key(before.help)
            and _type_of(_main_option(new_fields[target])) == _type_of(before)
        ]
        if len(matches) == 1:
            found[source] = SeenRename(
                source,
                matches[0],
                new.version,
                f"{natural_flag(source)} removed and {natural_flag(matches[0])} added with the "
                "same help text and type",
            )
    return sorted(found.values(), key=lambda r: r.old)


def changes(old: ArgTable, new: ArgTable) -> list[Change]:
    """Every difference a user of the command line meets, one per field and kind."""
    renamed = {r.old: r for r in seen_renames(old, new)}
    replaced = {r.old: r for r in seen_replacements(old, new)}
    renamed_to = {r.new for r in renamed.values()}
    old_fields, new_fields = _options_by_field(old), _options_by_field(new)
    out: list[Change] = []
    for replacement in replaced.values():
        out.append(
            Change(
                "replaced",
                replacement.old,
                f"{natural_flag(replacement.old)} is now "
                f"{_main_option(new_fields[replacement.new]).flag}={replacement.value} "
                "(the old switch kept as a deprecated shorthand)",
            )
        )
    for rename in renamed.values():
        out.append(
            Change(
                "renamed",
                rename.old,
                f"{natural_flag(rename.old)} -> {_main_option(new_fields[rename.new]).flag}"
                + (
                    " (the old flag kept as a deprecated alias)"
                    if natural_flag(rename.old) in new.by_flag
                    else ""
                ),
            )
        )
    for name in sorted(set(old_fields) | set(new_fields)):
        if name in renamed or name in replaced:
            continue
        before, after = old_fields.get(name), new_fields.get(name)
        if before is None and after is not None:
            if name not in renamed_to:
                out.append(Change("added", name, _describe(_main_option(after))))
            continue
        if after is None:
            if before is not None:
                out.append(Change("removed", name, f"{_main_option(before).flag} removed"))
            continue
        if before is None:
            continue
        out.extend(_field_changes(name, before, after, old, new))
    return out


def _describe(option: ArgOption) -> str:
    text = option.flag
    if option.choices:
        text += " {" + ",".join(str(c) for c in option.choices) + "}"
    elif option.nargs != 0:
        text += f" ({option.type or 'str'})"
    if option.default not in (None, False) and not isinstance(option.default, dict):
        text += f", default {_shown(option.default)}"
    return text


def _field_changes(
    name: str,
    before: Sequence[ArgOption],
    after: Sequence[ArgOption],
    old: ArgTable,
    new: ArgTable,
) -> Iterable[Change]:
    old_flags = {f for o in before for f in o.flags}
    new_flags = {f for o in after for f in o.flags}
    for flag in sorted(new_flags - old_flags):
        yield Change("alias-added", name, f"{flag} added for {name}")
    for flag in sorted(old_flags - new_flags):
        yield Change("alias-removed", name, f"{flag} removed ({name} stays)")
    was, now = _main_option(before), _main_option(after)
    for flag in sorted(old_flags & new_flags):
        was_deprecated = old.by_flag[flag].deprecated
        if not was_deprecated and new.by_flag[flag].deprecated:
            yield Change("deprecated", name, f"{flag} deprecated: {new.by_flag[flag].help[:120]}")
    if was.choices != now.choices and (was.choices or now.choices):
        gained = [c for c in now.choices or () if c not in (was.choices or ())]
        lost = [c for c in was.choices or () if c not in (now.choices or ())]
        parts = []
        if gained:
            parts.append("gains " + ", ".join(_shown(c) for c in gained))
        if lost:
            parts.append("loses " + ", ".join(_shown(c) for c in lost))
        if not parts:
            parts.append("reordered")
        yield Change("choices", name, f"{now.flag} choices: {'; '.join(parts)}")
    if _type_of(was) != _type_of(now):
        yield Change("type", name, f"{now.flag}: {_kind(was)} -> {_kind(now)}")
    old_default = old.fields.get(name, was.default)
    new_default = new.fields.get(name, now.default)
    if old_default != new_default:
        yield Change(
            "default", name, f"{name} default {_shown(old_default)} -> {_shown(new_default)}"
        )


def _kind(option: ArgOption) -> str:
    if option.nargs == 0:
        return "a switch"
    text = option.type or "str"
    return text + (f" x{option.nargs}" if option.nargs not in (None, "?") else "")


# -- the release check ---------------------------------------------------------------------


def rename_problems(versions: Sequence[str]) -> list[str]:
    """Where ``argtable.RENAMES`` and the tables disagree: a rename the tables show that the map
    misses (orch would render a flag the release no longer knows), or a release stated wrongly."""
    problems: list[str] = []
    known = {(r.old, r.new): r for r in RENAMES}
    seen_at: dict[tuple[str, str], str] = {}
    for previous, current in itertools.pairwise(versions):
        for rename in seen_renames(load_table(previous), load_table(current)):
            key = (rename.old, rename.new)
            seen_at.setdefault(key, current)
            if key not in known:
                problems.append(
                    f"SGLang {current} renamed {rename.old} -> {rename.new} ({rename.evidence}), "
                    "and argtable.RENAMES misses it: add "
                    f"Rename({rename.old!r}, {rename.new!r}, {_tuple(current)}, <removed_in>)"
                )
            elif format_version(known[key].renamed_in) != current:
                problems.append(
                    f"argtable.RENAMES says {rename.old} -> {rename.new} happened in "
                    f"{format_version(known[key].renamed_in)}; the tables show it in {current}"
                )
    covered = [parse_version(v) for v in versions]
    for listed in RENAMES:
        if (listed.old, listed.new) not in seen_at and listed.renamed_in in covered:
            problems.append(
                f"argtable.RENAMES lists {listed.old} -> {listed.new} in "
                f"{format_version(listed.renamed_in)}; the tables do not show it"
            )
        removed = _removed_in(listed, versions)
        if removed is not None and removed != listed.removed_in:
            problems.append(
                f"{natural_flag(listed.old)} is gone from SGLang {format_version(removed)}; "
                f"argtable.RENAMES says removed_in "
                f"{format_version(listed.removed_in) if listed.removed_in else None}"
            )
    return problems


def _removed_in(rename: Rename, versions: Sequence[str]) -> tuple[int, ...] | None:
    flag = natural_flag(rename.old)
    for version in versions:
        parsed = parse_version(version)
        if parsed is None or parsed < rename.renamed_in:
            continue
        if flag not in load_table(version).by_flag:
            return parsed
    return None


def _tuple(version: str) -> tuple[int, ...]:
    return parse_version(version) or ()


def release_report(versions: Sequence[str]) -> tuple[str, list[str]]:
    """docs/sglang-versions.md for these releases, and the rename map's problems."""
    lines = [
        "# SGLang releases and their command lines",
        "",
        "Generated by `python scripts/argtables.py report` from orch's argument tables",
        "(`orchestrator/sglang/argtables/`, built from each release's package by",
        '`make argtables VERSIONS="..."`); `make sglang-release-check` adds the releases the',
        "registry has and orch does not, rewrites this page and fails when `argtable.RENAMES`",
        "misses a rename. Do not edit by hand.",
        "",
        "| release | options | fields | renamed | removed | added | deprecated | choices "
        "| defaults |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    sections: list[str] = []
    previous: ArgTable | None = None
    for version in versions:
        table = load_table(version)
        found = changes(previous, table) if previous is not None else []
        count = {kind: sum(1 for c in found if c.kind == kind) for kind in _ORDER}
        lines.append(
            f"| {version} | {len(table.options)} | {len(table.fields)} | "
            f"{count['renamed'] + count['replaced']} | "
            f"{count['removed'] + count['alias-removed']} | "
            f"{count['added'] + count['alias-added']} | {count['deprecated']} | "
            f"{count['choices']} | {count['default']} |"
        )
        if previous is not None:
            sections.append(f"## {version} (from {previous.version})")
            sections.append("")
            if not found:
                sections.append("No change to the command line.")
            for kind in _ORDER:
                for change in (c for c in found if c.kind == kind):
                    sections.append(f"- {_TITLES[kind]}: {change.text}")
            sections.append("")
        previous = table
    problems = rename_problems(versions)
    text = "\n".join([*lines, "", *sections]).rstrip() + "\n"
    return text, problems


_ORDER = (
    "renamed",
    "replaced",
    "removed",
    "alias-removed",
    "added",
    "alias-added",
    "deprecated",
    "type",
    "choices",
    "default",
)
_TITLES = {
    "renamed": "renamed",
    "replaced": "replaced",
    "removed": "removed",
    "alias-removed": "spelling removed",
    "added": "added",
    "alias-added": "spelling added",
    "deprecated": "deprecated",
    "type": "type",
    "choices": "choices",
    "default": "default",
}
