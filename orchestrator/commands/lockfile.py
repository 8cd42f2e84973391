"""``profiles/<name>.lock.json``: the reviewable prediction of a profile's effective values (written
by ``orch lock``), read back by diff-effective and checked by validate against its profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator import render
from orchestrator.errors import ProfileError
from orchestrator.profile import LoadedProfile

SUFFIX = ".lock.json"


def lock_path(profiles: Path, name: str) -> Path:
    return profiles / f"{name}{SUFFIX}"


def read_lock(profiles: Path, name: str) -> dict[str, Any] | None:
    target = lock_path(profiles, name)
    try:
        document = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except ValueError as exc:
        raise ProfileError(f"{target}: not JSON: {exc}", f"orch lock {name} rewrites it") from exc
    return document if isinstance(document, dict) else None


def write_lock(profiles: Path, name: str, document: dict[str, Any]) -> Path:
    from orchestrator import plan  # the plan's modules: only where a lock is written or read
    from orchestrator.files import replace_file

    target = lock_path(profiles, name)
    return replace_file(
        target, plan.lock_text(document), hint=f"remove {target}; orch lock {name} writes it anew"
    )


def stale_lock(profiles: Path, loaded: LoadedProfile) -> ProfileError | None:
    """The error for a lock beside the profile that no longer matches it, if there is one."""
    profile = loaded.profile
    path = lock_path(profiles, profile.name)
    if profile.abstract or not path.exists():
        return None
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        problems = [f"unreadable: {exc}"]
    else:
        from orchestrator import plan

        digest = render.launch_digest(render.render(profile, loaded.table))
        problems = plan.lock_problems(profile, digest, document, profile.sglang_version)
    if not problems:
        return None
    return ProfileError(
        f"{path}: the lock no longer matches profile {profile.name}: {'; '.join(problems)}",
        f"orch lock {profile.name} (with --local-sglang PYTHON where the host is not at hand), "
        "then review the diff",
    )
