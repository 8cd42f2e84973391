"""Whose deployment is it? Deployments are named by profile on their host, so two unrelated
profiles repositories with a profile of the same name meet there. Each deployment records the
repository its profile came from (``Launch.meta``); ``up``, ``down`` and ``restart`` of one that
came from another repository refuse while anything of it runs, unless told ``--take-over``. One
that holds nothing (stopped, exited, FATAL) is no one's: another checkout's ``make demo``, or an
installed orch's, starts in its place, and its runs stay in the deployment's history."""

from __future__ import annotations

from orchestrator.commands.context import ProfilesOrigin
from orchestrator.errors import Conflict
from orchestrator.model import Profile, RunState

TAKE_OVER = "--take-over"


def check(
    profile: Profile, state: RunState, ours: ProfilesOrigin, verb: str, *, take_over: bool
) -> str | None:
    """Raise Conflict when something of ``state`` runs and it was launched from another
    profiles repository; a note when it was, and nothing of it runs. A state that recorded
    none (an orch before this check) is taken as ours."""
    if take_over or state.profiles_repo is None or state.profiles_repo == ours.repo:
        return None
    who = f", by {state.launched_by}" if state.launched_by else ""
    where = f"{_shown(state.profiles_repo)} at {state.profiles_dir or '?'}{who}"
    if not (state.alive or state.unsupervised or state.stale):
        return (
            f"{profile.deployment} on {profile.host.name} was last launched from another "
            f"profiles repository ({where}); "
            f"nothing of it runs ({state.state}): this one goes in its place, its runs are kept"
        )
    raise Conflict(
        f"{profile.deployment} on {profile.host.name} was launched from another profiles "
        f"repository ({where}); this one is "
        f"{_shown(ours.repo)}: refusing to {verb} it",
        f"it is probably someone else's deployment of the same name: rename your profile, or "
        f"{TAKE_OVER} to {verb} it anyway",
    )


def _shown(repo: str) -> str:
    kind, _, value = repo.partition(":")
    return value if kind in ("git", "dir") else f"repository {value[:12]}"
