"""``orch export``'s command line: the engine, the profile(s), where to write, Slurm's side of
the job (docs/export.md)."""

from __future__ import annotations

import argparse
from pathlib import Path

from orchestrator.model import EXPORT_ENGINES, FLEET_EXPORTS


def add_export(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``orch export ENGINE PROFILE`` (``prometheus-sd``: any number of profiles, or --all)."""
    export = commands.add_parser(
        "export",
        help="write the manifest another engine runs the profile with: Kubernetes "
        "(LeaderWorkerSet, Deployment), SkyPilot, dstack, Slurm",
        description="The profile's exact argv and env for another engine: Kubernetes in exec "
        "form with every $ escaped, SkyPilot and dstack as shell with every word quoted once, "
        "Slurm as a batch script whose tasks each read their own rank. "
        "What an engine cannot run is an error naming the profile key (docs/export.md).",
    )
    export.add_argument(
        "engine",
        metavar="ENGINE",
        choices=EXPORT_ENGINES + FLEET_EXPORTS,
        help=", ".join(EXPORT_ENGINES + FLEET_EXPORTS),
    )
    export.add_argument(
        "profile",
        metavar="PROFILE",
        nargs="*",
        help="the profile (prometheus-sd: any number, or --all; docs/export.md)",
    )
    export.add_argument(
        "--all",
        action="store_true",
        dest="all_profiles",
        help="prometheus-sd: every profile's running servers (the default without PROFILE)",
    )
    export.add_argument(
        "-o", "--output", metavar="FILE", type=Path, help="write here (default: stdout)"
    )
    slurm = export.add_argument_group("slurm", "the cluster's side of the job (engine slurm only)")
    slurm.add_argument("--partition", metavar="P", help="#SBATCH --partition")
    slurm.add_argument("--account", metavar="A", help="#SBATCH --account")
    slurm.add_argument("--time", metavar="T", help="#SBATCH --time (e.g. 4:00:00, 2-00:00:00)")
    slurm.add_argument(
        "--no-gres",
        action="store_true",
        help="no --gpus-per-node, for clusters that reject GRES requests",
    )
    slurm.add_argument(
        "--exclusive", action="store_true", help="#SBATCH --exclusive: each rank's whole node"
    )
    export.set_defaults(command="export")
