"""STAND-IN (sync-core branch): a no-op ``holding`` with exactly the signature of the LOCK
branch's per-deployment lock (31-shared.md), so that ``orch sync`` is written against it. The
integrator REPLACES this whole file with the LOCK branch's ``commands/locking.py``; nothing here
locks anything."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from orchestrator.commands.context import Context
from orchestrator.model import Profile


@contextmanager
def holding(
    ctx: Context,
    profiles: Sequence[Profile],
    command: str,
    *,
    wait_s: float,
    on_wait: Callable[[str, Any], None] | None = None,
) -> Iterator[None]:
    """STAND-IN: holds nothing (the LOCK branch's takes each deployment's lock on its host)."""
    del ctx, profiles, command, wait_s, on_wait
    yield
