"""The real-Slurm tier: one cluster for the session (tests/slurm/cluster.py), skipped, saying
why, where Slurm or munge is not installed (.ci/run installs them; a failed install only skips)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.slurm import cluster as slurm_cluster


@pytest.fixture(scope="session")
def cluster() -> Iterator[slurm_cluster.SlurmCluster]:
    missing = slurm_cluster.missing_programs()
    if missing:
        pytest.skip(
            f"no Slurm here ({', '.join(missing)} missing): apt-get install slurmctld slurmd "
            "slurm-client munge (.ci/run does)"
        )
    running = slurm_cluster.start()
    try:
        yield running
    finally:
        running.stop()
