"""``orch upgrade``'s report as text and as ``--json``. Nothing prints."""

from __future__ import annotations

import difflib
from typing import Any

from orchestrator.cli.show.reports import jsonable
from orchestrator.cli.show.text import grid
from orchestrator.effective import upgrade, verify

VALUE_WIDTH = 28


def _value(value: Any, width: int = VALUE_WIDTH) -> str:
    if value is verify.ABSENT:
        return "(no such field)"
    return verify.display(value, limit=width)


def _side(side: upgrade.Side, requested: Any, adjusted: bool, wide: bool) -> str:
    text = _value(side.value)
    if adjusted and requested is not verify.ABSENT and not verify.same(requested, side.value):
        text = f"{_value(requested)} -> {text}"
    if side.how in ("-", "no such field"):
        return text
    how = side.how if wide else _cut(side.how, 60)
    return f"{text}  [{how}]"


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def _finding(finding: upgrade.Finding, *, located: bool) -> list[str]:
    where = f"{finding.key_path}: " if located else ""
    lines = [f"  {finding.severity}: {where}{finding.message}"]
    return lines + ([f"    hint: {finding.hint}"] if finding.hint else [])


def text(result: upgrade.Upgrade, *, wide: bool = False) -> str:
    """The report, with the diff of each file the upgrade changes."""
    lines = [
        f"{result.profile}: SGLang {result.source_version} -> {result.target_version}",
        "",
        "Spelling (the releases' argument tables):",
    ]
    spelled = result.spelling
    if not spelled.respellings and not spelled.findings and not spelled.replacings:
        lines.append("  every field keeps its name")
    for edit in spelled.respellings:
        lines.append(
            f"  {edit.key_path}: {edit.old} -> {edit.new}  ({edit.source}:{edit.line}; {edit.why})"
        )
    for replacing in spelled.replacings:
        lines.append(
            f"  {replacing.key_path}: replaced -> {replacing.written}  "
            f"({replacing.source}:{replacing.line}; {replacing.why})"
        )
    for finding in spelled.findings:
        lines += _finding(finding, located=True)
    if result.files:
        lines += ["", "Profile edits (--write applies them; comments and layout kept):"]
        for display, new in result.files.items():
            old = result.originals.get(display, "")
            diff = difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                fromfile=display,
                tofile=display + " (upgraded)",
                n=1,
            )
            lines += ["  " + line.rstrip("\n") for line in diff]
        if result.shared:
            lines.append(
                f"  also built on these files: {', '.join(result.shared)} (their launches do not "
                "change: a renamed key is spelled for each profile's own release)"
            )
    lines += ["", "Effective configuration (SGLang's own resolution of each release):"]
    lines += [f"  {note}" for note in result.plan_notes]
    if result.refused is not None:
        lines.append(f"  refused: {result.refused}")
    effective = result.effective
    if effective is not None:
        table = [("FIELD", f"SGLANG {result.source_version}", f"SGLANG {result.target_version}")]
        for move in effective.moves:
            name = move.field + (" (pinned)" if move.pinned else "")
            table.append(
                (
                    name,
                    _side(move.before, move.requested, move.adjusted, wide),
                    _side(move.after, move.requested, move.adjusted, wide),
                )
            )
        if len(table) > 1:
            lines += ["  " + row for row in grid(table).splitlines()]
        else:
            lines.append("  no effective value changes")
        whys = [
            (move.field, version, side.why)
            for move in effective.moves
            for version, side in (
                (result.source_version, move.before),
                (result.target_version, move.after),
            )
            if side.why
        ]
        for name, version, why in whys:
            lines.append(f"  {name} on {version}: SGLang logged: {_cut(why, 200)}")
        if effective.new_fields:
            lines.append(
                f"  {len(effective.new_fields)} fields new in {result.target_version}, at their "
                "defaults (--json lists them)"
            )
        if effective.gone_fields:
            lines.append(
                f"  gone in {result.target_version}: {', '.join(effective.gone_fields[:12])}"
                + (
                    f" and {len(effective.gone_fields) - 12} more"
                    if len(effective.gone_fields) > 12
                    else ""
                )
            )
        for finding in effective.findings:
            lines += _finding(finding, located=False)
    if result.memory:
        lines += ["", "Memory (the memory plan of each release):"]
        table = [("", f"SGLANG {result.source_version}", f"SGLANG {result.target_version}")]
        table += [(row.label, row.before, row.after) for row in result.memory]
        lines += ["  " + row for row in grid(table).splitlines()]
    lines.append("")
    if result.written:
        lines.append(f"written: {', '.join(result.written)}")
        if result.lock:
            lines.append(result.lock)
    elif result.blocked:
        lines.append("blocked: nothing written")
    elif result.files:
        lines.append("orch upgrade ... --write applies the edits and refreshes the lock")
    return "\n".join(lines).rstrip() + "\n"


def as_json(result: upgrade.Upgrade) -> dict[str, Any]:
    """The stable ``--json`` shape."""
    effective = result.effective

    def side(value: upgrade.Side) -> dict[str, Any]:
        return {"value": jsonable(value.value), "how": value.how, "why": value.why}

    return {
        "profile": result.profile,
        "from": result.source_version,
        "to": result.target_version,
        "blocked": result.blocked,
        "respellings": [
            {
                "key_path": e.key_path,
                "old": e.old,
                "new": e.new,
                "file": e.source,
                "line": e.line,
                "why": e.why,
            }
            for e in result.spelling.respellings
        ],
        "replacements": [
            {
                "key_path": r.key_path,
                "old": r.old,
                "new": r.new,
                "value": r.value,
                "dropped": r.value is None,
                "file": r.source,
                "line": r.line,
                "why": r.why,
            }
            for r in result.spelling.replacings
        ],
        "findings": [
            {"severity": f.severity, "key_path": f.key_path, "message": f.message, "hint": f.hint}
            for f in result.findings
        ],
        "files": sorted(result.files),
        "shared": list(result.shared),
        "plan_notes": list(result.plan_notes),
        "refused": result.refused,
        "effective": None
        if effective is None
        else {
            "moves": [
                {
                    "field": m.field,
                    "requested": jsonable(m.requested),
                    "pinned": m.pinned,
                    "adjusted": m.adjusted,
                    "from": side(m.before),
                    "to": side(m.after),
                }
                for m in effective.moves
            ],
            "new_fields": list(effective.new_fields),
            "gone_fields": list(effective.gone_fields),
        },
        "memory": [{"label": r.label, "from": r.before, "to": r.after} for r in result.memory],
        "written": list(result.written),
        "lock": result.lock,
    }
