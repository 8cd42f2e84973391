"""``orch diff --format markdown`` is exactly tests/golden/review/<case>.md: a small review (one
comment) and a large one over small limits (several comments, a section cut and continued).

The reports are values (tests/review_reports.py), so the files change only with the wording.
Rewrite on purpose with ``pytest tests/golden --update-goldens`` and review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.cli.show import review_markdown
from orchestrator.effective import review
from tests import review_reports

GOLDEN = Path(__file__).resolve().parent / "review"
CASES = {
    "small": (review_reports.small, 65_536),
    "large-4096": (review_reports.large, 4096),
    "large-2048": (review_reports.large, 2048),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_review_markdown(request: pytest.FixtureRequest, case: str) -> None:
    build, limit = CASES[case]
    report: review.Review = build()
    text = review_markdown.document(report, limit) + "\n"
    path = GOLDEN / f"{case}.md"
    if request.config.getoption("--update-goldens"):
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
    assert path.exists(), f"no golden for {case}: pytest tests/golden --update-goldens"
    assert text == path.read_text(encoding="utf-8")
    bodies = text.rstrip("\n").split(f"\n{review_markdown.SEPARATOR}\n")
    assert all(len(body.encode("utf-8")) <= limit for body in bodies)
    assert (len(bodies) == 1) == (case == "small")
    for secret in review_reports.SECRETS:
        assert secret not in text


def test_every_review_golden_has_a_case() -> None:
    stale = {p.stem for p in GOLDEN.glob("*.md")} - set(CASES)
    assert stale == set(), f"golden reviews without a case: {sorted(stale)}"
