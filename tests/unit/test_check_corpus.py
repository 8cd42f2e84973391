"""``orch import --check`` on the corpus of public launch scripts: of the pitfalls a careful
reviewer marks (tests/fixtures/launchscripts/FINDINGS.yaml, by reading each script), how many
it finds, per pitfall class and overall. A label is found when --check reports a finding of one
of the class's codes on that line. The table is printed (``pytest -s``) and is the failure
message."""

from __future__ import annotations

from collections import Counter
from typing import Any

import yaml

from orchestrator.importing.check import check_scripts
from orchestrator.importing.scripts import ScriptFile
from tests.conftest import REPO

CORPUS = REPO / "tests" / "fixtures" / "launchscripts"
LABELS: dict[str, Any] = yaml.safe_load((CORPUS / "FINDINGS.yaml").read_text(encoding="utf-8"))
GOAL = 0.90


def _recall() -> tuple[Counter[str], Counter[str], list[str]]:
    marked: Counter[str] = Counter()
    found: Counter[str] = Counter()
    missed: list[str] = []
    codes: dict[str, list[str]] = LABELS["classes"]
    for name, labels in LABELS["scripts"].items():
        # the bytes as they are: a CRLF file stays CRLF
        text = (CORPUS / name).read_bytes().decode("utf-8", "surrogateescape")
        report = check_scripts([ScriptFile(name, text)], sglang=None, given={})
        reported = {(p.code, p.position.line) for p in report.problems}
        for label in labels:
            kind, line = label["class"], label["line"]
            marked[kind] += 1
            if any((code, line) in reported for code in codes[kind]):
                found[kind] += 1
            else:
                missed.append(f"{name}:{line}: {kind}")
    return marked, found, missed


def _table(marked: Counter[str], found: Counter[str], missed: list[str]) -> str:
    lines = [f"{'pitfall class':28} {'found':>5} / {'marked':<6} recall"]
    for kind in LABELS["classes"]:
        if marked[kind]:
            share = found[kind] / marked[kind]
            lines.append(f"{kind:28} {found[kind]:>5} / {marked[kind]:<6} {share:.0%}")
    total, hit = sum(marked.values()), sum(found.values())
    lines.append(f"{'overall':28} {hit:>5} / {total:<6} {hit / total:.0%}")
    lines.extend(f"missed: {m}" for m in missed)
    return "\n".join(lines)


def test_every_labelled_script_is_in_the_corpus_and_every_class_is_known() -> None:
    for name, labels in LABELS["scripts"].items():
        assert (CORPUS / name).is_file(), name
        for label in labels:
            assert label["class"] in LABELS["classes"], label


def test_check_finds_the_pitfalls_a_reviewer_marks() -> None:
    marked, found, missed = _recall()
    table = _table(marked, found, missed)
    print("\n" + table)  # noqa: T201 - the table, with -s
    total = sum(marked.values())
    assert total >= 30, "too few labels to measure"
    assert sum(found.values()) / total >= GOAL, table
