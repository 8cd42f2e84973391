"""What ``orch import`` and ``orch import --check`` show: values in, text out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from orchestrator.cli.show.text import Text, line
from orchestrator.commands.importing import Written
from orchestrator.importing.check import CheckReport
from orchestrator.profile.yamldoc import dump_yaml

_SHOWN_KINDS = (
    "lost",
    "dropped",
    "unresolved",
    "renamed",
    "replaced",
    "canonical",
    "secret",
    "default",
    "host",
    "skipped",
    "warning",
)


def written(items: Sequence[Written]) -> list[Text]:
    """Per profile: where it went, what was dropped/translated/left open, what to do next.
    With ``-o -`` the YAML is the output and every note goes to stderr."""
    texts: list[Text] = []
    for item in items:
        profile = item.profile
        to_stdout = item.path is None
        note_stream = to_stdout  # notes on stderr when stdout carries the YAML

        def say(text: str = "", *, err: bool = note_stream) -> None:
            texts.append(Text(text + "\n", err=err))

        if to_stdout:
            texts.append(Text(item.text))
        else:
            say(f"wrote {item.path}: profile {profile.name}", err=False)
        version = next((n.message for n in profile.notes if n.kind == "version"), None)
        if version:
            say(f"  SGLang: {version}")
        for kind in _SHOWN_KINDS:
            for note in profile.notes:
                if note.kind == kind:
                    say(f"  {kind}: {note.located()}")
        if profile.host_entry is not None:
            say("  add to hosts.yaml (under hosts:):")
            host = str(profile.document.get("host") or profile.host_entry["address"])
            for entry_line in dump_yaml({host: profile.host_entry}).splitlines():
                say(f"    {entry_line}")
        if profile.unresolved:
            open_ = profile.unresolved
            hosts = [n for n in open_ if n.startswith("host of rank")]
            names = [n for n in open_ if n.replace("_", "").isalnum()]
            rest = [n for n in open_ if n not in hosts and n not in names]
            hints = [f"--set {n}=..." for n in names] + (["--host H0,H1,..."] if hosts else [])
            if rest:
                hints.append("edit the profile" if not hints else "edit the profile for the rest")
            hint = " ".join(hints)
            say(f"  unresolved: {', '.join(profile.unresolved)} (placeholders: {hint})")
        for problem in item.problems:
            say(f"  validate: {problem}")
        if item.path is not None and not item.problems:
            say(f"  next: orch render {profile.name} && orch up {profile.name}")
    return texts


def check_report(report: CheckReport) -> list[Text]:
    texts: list[Text] = []
    for problem in report.problems:
        where = f"{problem.file}:{problem.position.line}:{problem.position.column}"
        texts.append(line(f"{where}: {problem.severity}: {problem.message} [{problem.code}]"))
        texts.append(line(f"    fix: {problem.fix}"))
    count = len(report.problems)
    summary = (
        (f"{count} finding{'s' if count != 1 else ''}" if count else "no findings")
        + f" in {report.launches} launch{'es' if report.launches != 1 else ''} (flags checked "
        f"against {report.version_said})"
    )
    texts.append(line(summary))
    return texts


def check_json(report: CheckReport) -> dict[str, Any]:
    return {
        "checked_against": report.version_said,
        "files": [
            {"file": file, "sglang": version, "checked_against": said}
            for file, version, said in report.targets
        ],
        "launches": report.launches,
        "findings": [
            {
                "file": p.file,
                "line": p.position.line,
                "column": p.position.column,
                "severity": p.severity,
                "code": p.code,
                "message": p.message,
                "fix": p.fix,
            }
            for p in report.problems
        ],
    }
