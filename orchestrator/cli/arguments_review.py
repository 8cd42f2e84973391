"""``orch diff``'s command line: a revision range, the profiles, the forms of the report."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.errors import ExitCode


def _comment_limit(text: str) -> int:
    if not text.isdigit() or int(text) < MIN_COMMENT_LIMIT:
        raise argparse.ArgumentTypeError(
            f"expected a size in bytes of at least {MIN_COMMENT_LIMIT}, got {text!r}"
        )
    return int(text)


MIN_COMMENT_LIMIT = 2048  # a body must hold the summary's head and one whole blocked reason


def add_review(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``orch diff``: review a change to the profiles before it ships (docs/review.md)."""
    review = commands.add_parser(
        "diff",
        help="review a change to the profiles in git: each deployment it touches, what it "
        "changes and whether merging it restarts a server",
        description="Read the profiles repository at two revisions (BASE..HEAD; BASE alone: "
        "against the working tree; default HEAD against the working tree; BASE...HEAD: from "
        "their merge base, as a pull request) without touching the checkout, and list every "
        "deployment (each rank of a group) whose launch differs, through `extends` and "
        "hosts.yaml: the rendered launch before -> after, the effective values (the argument "
        "tables; SGLang's own resolution with --local-sglang or --remote), the action it forces "
        "(none, agent-only, live, restart, replace, blocked, new, removed) and the fields that "
        f"force it. Exit {ExitCode.OK}: no change; {ExitCode.CHANGES}: changes; "
        f"{ExitCode.DIFF_USAGE}: a usage error; other codes: docs/exit-codes.md.",
    )
    review.add_argument(
        "words",
        metavar="[BASE..HEAD] [PROFILE ...]",
        nargs="*",
        help="a revision range, then the profiles to review (default: every deployment); the "
        "first word is a range when it holds '..' or names a commit",
    )
    review_form = review.add_mutually_exclusive_group()
    review_form.add_argument(
        "--json", action="store_true", help="the stable machine-readable format, both renderings"
    )
    review_form.add_argument(
        "--format",
        choices=("text", "markdown"),
        default="text",
        help="markdown: pull-request comment bodies, each within --comment-limit",
    )
    review.add_argument(
        "--comment-limit",
        metavar="BYTES",
        type=_comment_limit,
        default=65_536,
        help="the largest comment body (default 65536, GitHub's; Bitbucket's is 32768); a longer "
        "report is split into self-contained bodies separated by the line "
        "'<!-- orch diff: next comment -->'",
    )
    review.add_argument(
        "--local-sglang",
        metavar="PYTHON",
        nargs="?",
        const="",
        help="plan both sides with SGLang's own resolution here, the GPU simulated from "
        "gpu.type: with this python, or (no value) each side's release from the venv cache "
        "(scripts/build-sglang-venv.sh VERSION)",
    )
    review.add_argument(
        "--remote",
        action="store_true",
        help="plan both sides with each host's SGLang through orch's probe (SSH)",
    )
    review.add_argument(
        "--model-config",
        metavar="FILE",
        type=Path,
        help="the model's config.json, when model.path is not on this machine",
    )
    review.add_argument(
        "--status",
        action="store_true",
        help="ask each deployment's agent what runs now (its launch and profiles commit)",
    )
    review.add_argument("--wide", action="store_true", help="values whole, never cut")
    review.set_defaults(command="diff")
