"""``orch sync``'s command line: the selection, the wanted revision, the rollout's limits."""

from __future__ import annotations

import argparse

from orchestrator.cli.options import lock_wait_option
from orchestrator.errors import ExitCode


def _count(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


def add_sync(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``orch sync``: bring the deployments to what the repository says (docs/sync.md)."""
    sync = commands.add_parser(
        "sync",
        help="bring the running deployments to what the profiles repository says: each one "
        "clean, pending, out-of-band, down or version-skew; --dry-run reads only",
        description="Compare every selected deployment (each rank of a group, each replica) "
        "with what the repository's HEAD (or --rev) renders, and bring the pending and down "
        "ones to it: in-place changes first (agent-only, live), then the down ones started, "
        "then the restarts: one canary alone, then --max-unavailable at a time; the rollout "
        "halts at the first failure (--max-failures N: at the Nth) and a failed relaunch goes "
        "back to its previous launch. Out-of-band launches (a dirty tree, another branch) and "
        "version skew are shown and left. With no profile named, every profile. "
        f"Exit {ExitCode.OK}: all clean (or all done); {ExitCode.CHANGES}: the dry run found "
        f"something to change; {ExitCode.SYNC}: the apply failed or halted; "
        f"{ExitCode.DIFF_USAGE}: a usage error; other codes: docs/exit-codes.md.",
    )
    sync.add_argument(
        "names", metavar="PROFILE", nargs="*", help="the profiles to sync (default: every one)"
    )
    chosen = sync.add_mutually_exclusive_group()
    chosen.add_argument("--all", action="store_true", help="every launchable profile")
    chosen.add_argument(
        "--on",
        metavar="LABEL",
        help="the profiles labelled LABEL (labels: in the profile) or placed on host LABEL",
    )
    sync.add_argument(
        "--rev",
        metavar="REV",
        help="sync to this commit, branch or tag (read with git; the checkout is not touched)",
    )
    sync.add_argument(
        "--dry-run", action="store_true", help="only say what each deployment is; change nothing"
    )
    sync.add_argument("--json", action="store_true", help="the stable machine-readable format")
    sync.add_argument(
        "--max-unavailable",
        metavar="N",
        type=_count,
        default=1,
        help="after the canary, restart at most N deployments at once (default 1)",
    )
    halting = sync.add_mutually_exclusive_group()
    halting.add_argument(
        "--halt-on-failure",
        action="store_true",
        help="stop at the first failed deployment (the default, said explicitly)",
    )
    halting.add_argument(
        "--max-failures",
        metavar="N",
        type=_count,
        default=1,
        help="stop the rollout at the Nth failed deployment (default 1; a failed canary always "
        "stops it)",
    )
    sync.add_argument(
        "--include-out-of-band",
        action="store_true",
        help="also replace deployments launched from a dirty tree, another branch or another "
        "profiles repository",
    )
    sync.add_argument(
        "--allow-dirty",
        action="store_true",
        help="act from a working tree with uncommitted changes (its launches are recorded dirty)",
    )
    sync.add_argument("--yes", "-y", action="store_true", help="act without asking")
    lock_wait_option(sync)
    sync.add_argument("--wide", action="store_true", help="values whole, never cut")
    sync.set_defaults(command="sync")
