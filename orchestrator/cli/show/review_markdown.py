"""``orch diff --format markdown``: the review as pull-request comment bodies (in progress)."""

from __future__ import annotations

from orchestrator.cli.show import review as show_review
from orchestrator.effective import review

SEPARATOR = "<!-- orch diff: next comment -->"


def document(report: review.Review, limit: int) -> str:
    """Every body, separated by ``SEPARATOR`` lines."""
    return "```\n" + show_review.text(report) + "```\n"
