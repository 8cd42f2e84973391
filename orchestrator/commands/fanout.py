"""Work on several hosts at once: every node of a group is its own connection and round trips."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")


def parallel(work: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``work`` on every item at once (each node is its own connection and round trips); the
    first error is raised once all have ended."""
    if len(items) <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(max_workers=len(items)) as pool:
        futures = [pool.submit(work, item) for item in items]
        return [future.result() for future in futures]
