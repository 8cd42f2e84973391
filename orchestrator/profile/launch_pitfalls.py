"""The launch pitfalls a profile alone shows (``orch validate``), read with
:mod:`orchestrator.sglang.pitfalls` over the fields it sets; an error fails validation as any
other profile error, before SGLang's own (later, vaguer) failure.  [pure]"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from orchestrator.model import Profile, SecretRef, Severity
from orchestrator.profile.doccheck import DocChecker
from orchestrator.profile.fields import requested_fields
from orchestrator.profile.yamldoc import KeyPath
from orchestrator.sglang import pitfalls
from orchestrator.sglang.argtable import ArgTable, spell
from orchestrator.sglang.pitfalls import LaunchFacts, Pitfall


def profile_args(profile: Profile, table: ArgTable) -> dict[str, Any]:
    """SGLang field -> the profile's value, under the release's names (a renamed field under
    both, so a check may ask for either); secrets are left out."""
    out: dict[str, Any] = {}
    for field in requested_fields(profile):
        if isinstance(field.value, SecretRef):
            continue
        out[field.name] = field.value
        spelled = spell(table, field.name)
        if spelled is not None and spelled.rename is not None:
            out.setdefault(spelled.rename.new, field.value)
            out.setdefault(spelled.rename.old, field.value)
    return out


def profile_facts(
    profile: Profile, table: ArgTable, config: Mapping[str, Any] | None = None
) -> LaunchFacts:
    env = {name: value for name, value in profile.env.items() if isinstance(value, str)}
    return LaunchFacts(
        version=table.parsed_version,
        args=profile_args(profile, table),
        env=env,
        config=config,
        model_path=profile.model.path,
        startup_timeout_s=profile.health.startup_timeout_s,
    )


def key_path(profile: Profile, pitfall: Pitfall) -> KeyPath:
    """Where in the profile the pitfall points: the key that sets its first field."""
    if not pitfall.fields:
        return ()
    name = pitfall.fields[0]
    if name in profile.env:
        return ("env", name)
    for field in requested_fields(profile):
        if field.name == name:
            return tuple(field.key_path.split("."))
    if "." in name:
        return tuple(name.split("."))
    return ()


def check_pitfalls(checker: DocChecker, profile: Profile, table: ArgTable) -> None:
    if profile.abstract:
        return  # a base profile is checked in the profiles that extend it
    for pitfall in pitfalls.check(profile_facts(profile, table)):
        path = key_path(profile, pitfall)
        message = f"{pitfall.message} [{pitfall.kind}]"
        if pitfall.severity == pitfalls.ERROR:
            checker.error(path, message, pitfall.hint)
        else:
            severity = Severity.WARNING if pitfall.severity == pitfalls.WARNING else Severity.NOTICE
            checker.note(severity, path, message, pitfall.hint)
