"""Every crash log of the corpus (tests/fixtures/crashlogs/, real SGLang output from public issue
threads and captures; README.md there) gets its true class from ``classify_exit``, given what the
supervisor would give it: the exit status, the last 400 lines, and the startup phase reached.
The confusion table is printed (``pytest -s``) and is the failure message.

tests/fixtures/crashlogs-holdout/ holds real logs labelled and committed before the classifier
ran on them (issue 25, five rounds; README.md there): the classifier was not tuned on them. The
misses a round was tuned on moved to the tuned corpus, so the figure here (>= 90 %) guards that
later changes keep what was right untuned; the figure on unseen logs is each round's before its
tuning (tests/fixtures/crashlogs/README.md).

tests/fixtures/crashlogs-unseen/ holds the logs of the last round (issue 25, round 6: the final
classifier measured once, 31 / 46; README.md there) that it got right: its misses were tuned on
and moved to the tuned corpus, so it is no longer unseen; every log there must stay right."""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.remote.agent.classify import classify_exit
from orchestrator.remote.agent.verdict import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    MODEL_NOT_FOUND,
    NCCL,
    PORT_IN_USE,
)
from tests.conftest import REPO

CORPUS = REPO / "tests" / "fixtures" / "crashlogs"
HOLDOUT = REPO / "tests" / "fixtures" / "crashlogs-holdout"
UNSEEN = REPO / "tests" / "fixtures" / "crashlogs-unseen"
HOLDOUT_GOAL = 0.9  # issue 25: right on at least 90 % of the logs it was not tuned on
CLASSES = (
    CONFIG_ERROR,
    IMPORT_ERROR,
    MODEL_NOT_FOUND,
    PORT_IN_USE,
    CUDA_OOM,
    KERNEL_ERROR,
    NCCL,
    KILLED,
    CRASHED,
)
TAIL_LINES = 400  # what the supervisor keeps (OutputWatcher's tail)
FIELDS = ("class", "returncode", "saw_config_line", "was_ready", "sglang", "source")


@dataclass(frozen=True)
class CrashLog:
    name: str  # <class>/<file>
    cls: str
    returncode: int
    saw_config_line: bool
    was_ready: bool
    lines: tuple[str, ...]


def _yes(value: str) -> bool:
    if value not in ("yes", "no"):
        raise ValueError(f"expected yes or no, got {value!r}")
    return value == "yes"


def load(path: Path) -> CrashLog:
    """A corpus file: ``# key: value`` header lines up to ``# ---``, then the log as pasted."""
    text = path.read_text(encoding="utf-8")
    head, separator, body = text.partition("\n# ---\n")
    assert separator, f"{path}: no '# ---' line ends the header"
    fields: dict[str, str] = {}
    for line in head.splitlines():
        assert line.startswith("#"), f"{path}: header line {line!r}"
        key, colon, value = line[2:].partition(": ")
        if colon and not line.startswith("#   "):
            fields[key] = value
    missing = [key for key in FIELDS if key not in fields]
    assert not missing, f"{path}: header lacks {missing}"
    lines = body.splitlines()
    prefix = fields.get("strip_prefix")
    if prefix is not None:  # a container's prefix, which the agent never sees
        cut = ast.literal_eval(prefix)
        lines = [line.removeprefix(cut) for line in lines]
    return CrashLog(
        name=f"{path.parent.name}/{path.name}",
        cls=fields["class"],
        returncode=int(fields["returncode"]),
        saw_config_line=_yes(fields["saw_config_line"]),
        was_ready=_yes(fields["was_ready"]),
        lines=tuple(lines),
    )


def corpus(root: Path = CORPUS) -> list[CrashLog]:
    return [load(path) for path in sorted(root.glob("*/*.log"))]


def classified(logs: list[CrashLog]) -> list[tuple[CrashLog, str]]:
    results = []
    for log in logs:
        verdict = classify_exit(
            log.returncode,
            list(log.lines[-TAIL_LINES:]),
            saw_config_line=log.saw_config_line,
            was_ready=log.was_ready,
        )
        assert verdict.message, log.name
        assert verdict.restart_why, log.name
        results.append((log, verdict.cls))
    return results


def confusion_table(results: list[tuple[CrashLog, str]]) -> str:
    counts = Counter((log.cls, got) for log, got in results)
    width = max(len(cls) for cls in CLASSES)
    rows = ["true \\ verdict".ljust(width) + " " + " ".join(c[:6].rjust(6) for c in CLASSES)]
    for true in CLASSES:
        cells = " ".join(str(counts[true, got] or ".").rjust(6) for got in CLASSES)
        rows.append(f"{true.ljust(width)} {cells}")
    wrong = [f"  {log.name}: {log.cls}, classified {got}" for log, got in results if got != log.cls]
    return "\n".join(rows + (["wrong:", *wrong] if wrong else []))


def test_the_corpus_has_enough_real_logs_per_class() -> None:
    logs = corpus()
    per_class = Counter(log.cls for log in logs)
    assert len(logs) >= 30, len(logs)
    assert set(per_class) <= set(CLASSES), per_class
    short = {cls: n for cls in CLASSES if (n := per_class[cls]) < 3}
    assert not short, short
    for log in logs:
        assert log.name.startswith(f"{log.cls}/"), f"{log.name} is labelled {log.cls}"


def test_every_corpus_log_gets_its_true_class() -> None:
    results = classified(corpus())
    table = confusion_table(results)
    print(f"\ncrash corpus: {len(results)} logs\n{table}")  # noqa: T201 - the table, with -s
    assert all(log.cls == got for log, got in results), table


def test_the_holdout_logs_get_their_true_class_at_least_nine_times_in_ten() -> None:
    logs = corpus(HOLDOUT)
    assert len(logs) >= 4, "the holdout set is missing"
    for log in logs:
        assert log.name.startswith(f"{log.cls}/"), f"{log.name} is labelled {log.cls}"
    results = classified(logs)
    right = sum(1 for log, got in results if log.cls == got)
    table = confusion_table(results)
    print(f"\nholdout: {right}/{len(results)} right\n{table}")  # noqa: T201 - the table, with -s
    assert right >= HOLDOUT_GOAL * len(results), table


def test_the_last_rounds_logs_it_got_right_once_stay_right() -> None:
    logs = corpus(UNSEEN)
    assert len(logs) >= 30, "the last round's logs are missing"
    for log in logs:
        assert log.name.startswith(f"{log.cls}/"), f"{log.name} is labelled {log.cls}"
    results = classified(logs)
    table = confusion_table(results)
    print(f"\nunseen (round 6, right when measured once): {len(results)} logs\n{table}")  # noqa: T201
    assert all(log.cls == got for log, got in results), table


@pytest.mark.parametrize(
    "path",
    sorted([*CORPUS.glob("*/*.log"), *HOLDOUT.glob("*/*.log"), *UNSEEN.glob("*/*.log")]),
    ids=lambda p: p.stem,
)
def test_each_corpus_log_names_its_source(path: Path) -> None:
    source = load(path)
    text = path.read_text(encoding="utf-8")
    assert "# source: https://github.com/" in text or "# source: capture" in text, source.name
