"""What a command's handler builds from the parsed arguments: the profile store, the commands'
``Context`` (its Redactor the output's), a checked ``--node``, ``--local-sglang``. The modules
behind them are imported when a handler asks, so ``orch --help`` never loads them."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from orchestrator.cli.arguments import find_profiles_dir
from orchestrator.cli.output import Output
from orchestrator.errors import ProfileError, UsageError

if TYPE_CHECKING:
    from orchestrator.commands.context import Context
    from orchestrator.commands.planning import LocalSGLang
    from orchestrator.profile.store import ProfileStore


def store_for(args: argparse.Namespace) -> ProfileStore:
    from orchestrator.profile.store import ProfileStore

    cwd = Path.cwd()
    return ProfileStore(
        find_profiles_dir(args.profiles, cwd), display_root=cwd, local_python=sys.executable
    )


def context_for(args: argparse.Namespace, output: Output) -> Context:
    from orchestrator.commands.context import Context

    return Context(
        store=store_for(args),
        environ=os.environ,
        local_python=sys.executable,
        redactor=output.redact,
    )


def node_rank(rank: int | None, profile: str, nodes: int) -> int:
    """``--node RANK`` checked against the profile's nodes (0 when not given)."""
    if rank is None:
        return 0
    if not 0 <= rank < nodes:
        raise UsageError(
            f"--node {rank}: {profile} has rank(s) 0-{nodes - 1}",
            "a rank of group.nodes, 0 for the first",
        )
    return rank


def local_sglang(args: argparse.Namespace) -> LocalSGLang | None:
    from orchestrator.commands.planning import LocalSGLang

    if args.local_sglang is None:
        if args.model_config is not None:
            raise ProfileError(
                "--model-config goes with --local-sglang", "add --local-sglang PYTHON"
            )
        return None
    return LocalSGLang(args.local_sglang, args.model_config)
