"""The pitfalls a plan shows: the profile's own (as ``validate`` reads them) over SGLang's
resolved values, the model's config.json and the memory budget's numbers.  [pure]"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from orchestrator.model import Profile
from orchestrator.profile.launch_pitfalls import profile_facts
from orchestrator.sglang import pitfalls
from orchestrator.sglang.argtable import ArgTable
from orchestrator.sglang.memory.budget import Budget
from orchestrator.sglang.memory.shapes import MemoryAnswer
from orchestrator.sglang.pitfalls import Pitfall


def model_config(
    given: Mapping[str, Any] | None, memory: MemoryAnswer | None
) -> Mapping[str, Any] | None:
    """The model's config.json as the plan knows it: the one given (a local plan), else what
    the probe read on the host (its text part and the architecture SGLang saw)."""
    if given is not None:
        return given
    if memory is None or memory.text_config is None:
        return None
    config: dict[str, Any] = {"text_config": dict(memory.text_config)}
    if memory.model is not None and memory.model.architecture:
        config["architectures"] = [memory.model.architecture]
    return config


def plan_pitfalls(
    profile: Profile,
    table: ArgTable,
    effective: Mapping[str, Any],
    env: Mapping[str, str],
    *,
    config: Mapping[str, Any] | None,
    budget: Budget | None,
) -> tuple[Pitfall, ...]:
    """Every pitfall of the planned launch, errors first. ``effective`` is empty when SGLang
    refused the command line: the profile's values are read alone then."""
    facts = profile_facts(profile, table, config)
    facts = replace(
        facts,
        args={**facts.args, **{k: v for k, v in effective.items() if v is not None}},
        env={**facts.env, **env},
        resolved=bool(effective),
    )
    found = list(pitfalls.check(facts))
    if budget is not None and budget.mamba is not None:
        asked = profile_facts(profile, table).args.get("max_running_requests")
        whose = "requested"
        if not isinstance(asked, int):  # SGLang's own choice (48 under speculative decoding)
            asked, whose = effective.get("max_running_requests"), "resolved by SGLang"
        capped = pitfalls.mamba_cap(
            asked if isinstance(asked, int) else None,
            budget.max_running_requests,
            budget.mamba.slots,
            budget.mamba.slots_per_request,
            table.version,
            whose=whose,
        )
        if capped is not None:
            found.append(capped)
    order = {pitfalls.ERROR: 0, pitfalls.WARNING: 1, pitfalls.NOTICE: 2}
    return tuple(sorted(found, key=lambda p: order.get(p.severity, 3)))
