"""The per-deployment operation lock (issue 31): ``orch up``, ``down``, ``restart`` and ``sync``
act on a deployment only while they hold its lock on its host (``agent hold``), so that two
people acting on the same fleet from two laptops never both restart a server: the second waits,
saying who holds it, or gives up naming the holder (errors.Locked, exit 35).

The lock is taken around those commands by their callers (the CLI's handlers, ``orch sync``),
never inside ``up.up``, ``ops.down`` or ``restarting.rolling_restart`` themselves: sync holds
its deployments and calls ``up.up`` without taking a lock twice."""

from __future__ import annotations

import contextlib
import getpass
import os
import socket
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

from orchestrator.commands.context import Context, Launch, LockHandle
from orchestrator.model import LockHolder, Profile


def this_holder(command: str) -> LockHolder:
    """Who asks: this user on this machine, this process, what it does (``orch up``)."""
    return LockHolder(
        user=getpass.getuser(),
        machine=socket.gethostname(),
        pid=os.getpid(),
        command=command,
        since=time.time(),
    )


def deployments_of(launch: Launch, replica: int | None = None) -> tuple[Profile, ...]:
    """One profile per deployment ``launch`` acts on: each replica's (only ``replica``'s when
    one is named), else each rank's (one for a single server): each its own lock on its host."""
    if launch.replicas:
        chosen = [r for i, r in enumerate(launch.replicas) if replica is None or i == replica]
        return tuple(member.profile for r in chosen for member in r.members)
    return tuple(member.profile for member in launch.members)


@contextlib.contextmanager
def holding(
    ctx: Context,
    profiles: Sequence[Profile],
    command: str,
    *,
    wait_s: float,
    on_wait: Callable[[str, LockHolder], None] | None = None,
) -> Iterator[None]:
    """Hold the lock of every deployment of ``profiles`` while the block runs; all released on
    its exit, also on an exception or Ctrl-C. Taken in sorted (host, deployment) order, so two
    orch acting on overlapping sets never each hold what the other waits for; the hosts are
    asked in parallel, each host's deployments in that order. ``on_wait(label, holder)``: once
    per deployment found held (``NAME on HOST``), before waiting up to ``wait_s`` for it. The
    first one not obtained raises errors.Locked, the ones held are let go."""
    unique = {(p.host.name, p.deployment): p for p in profiles}
    by_host: dict[str, list[Profile]] = {}
    for key in sorted(unique):
        by_host.setdefault(key[0], []).append(unique[key])
    holder = this_holder(command)
    held: list[LockHandle] = []

    def take(host_profiles: list[Profile]) -> None:
        for profile in host_profiles:
            label = f"{profile.deployment} on {profile.host.name}"

            def said(other: LockHolder, label: str = label) -> None:
                if on_wait is not None:
                    on_wait(label, other)

            held.append(ctx.agent(profile).hold(holder, wait_s, said))  # list.append: atomic

    try:
        if len(by_host) == 1:
            take(next(iter(by_host.values())))
        else:
            with ThreadPoolExecutor(max_workers=min(len(by_host), 16)) as pool:
                futures = [pool.submit(take, group) for group in by_host.values()]
                for future in futures:
                    future.exception()  # every host done (held or not) before going on
                for future in futures:
                    future.result()  # the first failure, in host order
        yield
    finally:
        for lock in reversed(held):
            with contextlib.suppress(Exception):  # one host gone must not keep the others'
                lock.release()


class PendingHold:
    """One deployment's lock asked for on a thread of its own, so that the command's first
    read of the deployment runs while the hold is being granted (one round trip, not two):
    ``up`` awaits ``granted`` before it acts, and reads again when another hold came between
    its read and this one (``LockView.consistent_with``)."""

    def __init__(
        self,
        ctx: Context,
        profile: Profile,
        command: str,
        *,
        wait_s: float,
        on_wait: Callable[[str, LockHolder], None] | None = None,
    ) -> None:
        label = f"{profile.deployment} on {profile.host.name}"

        def said(other: LockHolder) -> None:
            if on_wait is not None:
                on_wait(label, other)

        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="orch-hold")
        agent = ctx.agent(profile)
        self._future = self._pool.submit(agent.hold, this_holder(command), wait_s, said)

    def granted(self) -> int | None:
        return self._future.result().generation

    def release(self) -> None:
        """Let it go once granted (a hold still being granted is waited for first: it is never
        left behind held)."""
        try:
            lock = self._future.result()
        except Exception:  # noqa: BLE001 - not granted: nothing to let go (its error was said)
            return
        finally:
            self._pool.shutdown(wait=True)
        lock.release()


@contextlib.contextmanager
def pending_hold(
    ctx: Context,
    profile: Profile,
    command: str,
    *,
    wait_s: float,
    on_wait: Callable[[str, LockHolder], None] | None = None,
) -> Iterator[PendingHold]:
    """``PendingHold`` for the block, released at its end (also on an error or Ctrl-C)."""
    pending = PendingHold(ctx, profile, command, wait_s=wait_s, on_wait=on_wait)
    try:
        yield pending
    finally:
        pending.release()
