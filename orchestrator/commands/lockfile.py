"""``profiles/<name>.lock.json``: the reviewable prediction of a profile's effective values (written
by ``orch lock``), read back by diff-effective and checked by validate against its profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from orchestrator import render
from orchestrator.errors import ProfileError
from orchestrator.profile.store import LoadedProfile

SUFFIX = ".lock.json"


def lock_path(profiles: Path, name: str) -> Path:
    return profiles / f"{name}{SUFFIX}"


def read_lock(profiles: Path, name: str) -> dict[str, Any] | None:
    """The profile's lock, None when it has none; one of another shape is an error (checks that
    read it must never skip it without a word)."""
    from orchestrator.effective.plan import LOCK_FORMAT

    target = lock_path(profiles, name)
    hint = f"orch lock {name} rewrites it"
    try:
        document = json.loads(target.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (ValueError, RecursionError) as exc:
        raise ProfileError(f"not JSON: {exc}", hint, source=str(target)) from exc
    except OSError as exc:
        raise ProfileError(f"unreadable: {exc.strerror or exc}", hint, source=str(target)) from exc
    wrong = _shape_problem(document, LOCK_FORMAT)
    if wrong is not None:
        raise ProfileError(
            f"expected an {LOCK_FORMAT} object {{format, sglang: a version, effective: "
            f"{{field: value}}}}, got {wrong}",
            hint,
            source=str(target),
        )
    return dict(document)


def _shape_problem(document: Any, lock_format: str) -> str | None:
    """What in ``document`` is not a lock's shape, None when nothing is."""
    if not isinstance(document, dict):
        return _a(document)
    for key, wanted in (("format", lock_format), ("sglang", str), ("effective", dict)):
        if key not in document:
            return f"{key}: missing"
        value = document[key]
        if isinstance(wanted, str) and value != wanted:
            return f"{key}: {json.dumps(value) if isinstance(value, str) else _a(value)}"
        if isinstance(wanted, type) and not isinstance(value, wanted):
            return f"{key}: {_a(value)}"
    return None


def _a(value: Any) -> str:
    """``a list``, ``an int``: how a JSON value's type reads in a message."""
    name = type(value).__name__ if value is not None else "null"
    return f"{'an' if name[0] in 'aeiou' else 'a'} {name}"


def write_lock(profiles: Path, name: str, document: dict[str, Any]) -> Path:
    from orchestrator.effective import (
        plan,  # the plan's modules: only where a lock is written or read
    )
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
        from orchestrator.effective import plan

        digest = render.launch_digest(render.render(profile, loaded.table))
        problems = plan.lock_problems(profile, digest, document, profile.sglang_version)
    if not problems:
        return None
    return ProfileError(
        f"{path}: the lock no longer matches profile {profile.name}: {'; '.join(problems)}",
        f"orch lock {profile.name} (with --local-sglang PYTHON where the host is not at hand), "
        "then review the diff",
    )
