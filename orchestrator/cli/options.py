"""Options several commands share."""

from __future__ import annotations

import argparse

from orchestrator.errors import ExitCode

DEFAULT_LOCK_WAIT_S = 60.0


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"expected seconds between 0 and 86400, got {text!r}")
    return value


def lock_wait_option(parser: argparse.ArgumentParser) -> None:
    """``--lock-wait``: how long to wait for another orch's hold on a deployment (issue 31)."""
    parser.add_argument(
        "--lock-wait",
        type=_seconds,
        default=DEFAULT_LOCK_WAIT_S,
        metavar="SECONDS",
        help="when another orch acts on a deployment (it holds its lock on the host), wait "
        f"this long for it, saying once who it is, then give up naming it (exit "
        f"{ExitCode.LOCKED}; orch sync counts that deployment failed) (default "
        f"{DEFAULT_LOCK_WAIT_S:g}; 0: do not wait)",
    )
