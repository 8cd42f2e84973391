"""The GPU models orch knows, for validating ``gpu.type`` and (later) simulating and checking hosts.

Memory is the nominal size as sold; compute capability decides which kernels SGLang picks
(sm90 vs sm100 attention backends, docs/sglang-facts.md §5), which is why a profile names its GPU.
"""

from __future__ import annotations

import re

from orchestrator.model import GpuType

KNOWN_GPUS: tuple[GpuType, ...] = (
    GpuType("B300", 288, (10, 3), "Blackwell Ultra", ("B300",)),
    GpuType("GB200", 186, (10, 0), "Blackwell", ("GB200",)),
    GpuType("B200", 180, (10, 0), "Blackwell", ("B200",)),
    GpuType("RTX PRO 6000", 96, (12, 0), "Blackwell", ("RTX PRO 6000",)),
    GpuType("RTX 5090", 32, (12, 0), "Blackwell", ("RTX 5090",)),
    GpuType("H200", 141, (9, 0), "Hopper", ("H200",)),
    GpuType("H100", 80, (9, 0), "Hopper", ("H100",)),
    GpuType("H20", 96, (9, 0), "Hopper", ("H20",)),
    GpuType("L40S", 48, (8, 9), "Ada Lovelace", ("L40S",)),
    GpuType("L4", 24, (8, 9), "Ada Lovelace", ("L4",)),
    GpuType("RTX 6000 Ada", 48, (8, 9), "Ada Lovelace", ("RTX 6000 Ada",)),
    GpuType("RTX 4090", 24, (8, 9), "Ada Lovelace", ("RTX 4090",)),
    GpuType("A100", 80, (8, 0), "Ampere", ("A100-SXM4-80GB", "A100 80GB", "A100-PCIE-80GB")),
    GpuType("A100-40GB", 40, (8, 0), "Ampere", ("A100-SXM4-40GB", "A100-PCIE-40GB")),
    GpuType("A10G", 24, (8, 6), "Ampere", ("A10G",)),
)


def _squash(name: str) -> str:
    """``RTX PRO 6000``, ``rtx-pro-6000`` and ``RTXPRO6000`` name one GPU."""
    return re.sub(r"[\s_-]+", "", name).upper()


_BY_SQUASHED = {_squash(g.name): g for g in KNOWN_GPUS}


def gpu_type(name: str) -> GpuType | None:
    return _BY_SQUASHED.get(_squash(name))


def known_gpu_names() -> tuple[str, ...]:
    return tuple(g.name for g in KNOWN_GPUS)
