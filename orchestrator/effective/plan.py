"""Plan: what SGLang will make of a profile, predicted by SGLang itself before launch.

Pure: it builds the request for the probe (``remote/probe``, run on the host, or in a local venv
of the same SGLang version with the GPU simulated from ``gpu.type``) and reads its answer into a
report: the fields the profile sets with their predicted effective values, which of them SGLang
would change and the SGLang step that did (``provenance``), with ``--all`` the defaults SGLang
fills in, and argparse or resolution errors with the function that raised. ``lock_document`` turns a
successful plan into the reviewable ``profiles/<name>.lock.json``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.effective import verify
from orchestrator.model import GpuType, Profile
from orchestrator.profile.fields import RequestedField
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang.argtable import RENAMES, ArgTable, format_version, spell
from orchestrator.sglang.memory.budget import Budget
from orchestrator.sglang.memory.shapes import MemoryAnswer
from orchestrator.sglang.pitfalls import ERROR, Pitfall

LOCK_FORMAT = "orch.lock/1"
# Values SGLang draws at random or that name this machine: never part of a lock.
UNLOCKABLE = frozenset({"random_seed", "nccl_port", "dist_init_addr", "host", "port"})


def simulated_gpu(gpu: GpuType) -> dict[str, Any]:
    """The GPU facts the probe answers SGLang with (docs/sglang-facts.md §6). Memory: the
    nominal size in GiB, close to what NVML reports as total (an H200's 141 -> 144384 MiB; NVML
    says 143771)."""
    return {
        "name": f"NVIDIA {gpu.name}",
        "capability": list(gpu.compute_capability),
        "memory_mib": gpu.memory_gb * 1024,
    }


def probe_request(
    arguments: Sequence[str],
    env: Mapping[str, str],
    *,
    simulate: GpuType | None = None,
    model_config: tuple[str, Mapping[str, Any]] | None = None,
    cache: PlanCacheUse | None = None,
    candidates: Sequence[Sequence[str]] = (),
) -> dict[str, Any]:
    """The probe's request; ``candidates``: more command lines (SGLang's arguments each) planned
    in the same process, each answered in the answer's ``candidates`` (orch plan --fit)."""
    request: dict[str, Any] = {
        **({"candidates": [list(c) for c in candidates]} if candidates else {}),
        "args": list(arguments),
        "env": dict(env),
        "simulate_gpu": simulated_gpu(simulate) if simulate is not None else None,
        "model_config": (
            {"path": model_config[0], "config": dict(model_config[1])} if model_config else None
        ),
        "remove_request": True,
    }
    if cache is not None:
        request["cache"] = {"dir": cache.directory, "read": cache.read}
    return request


@dataclass(frozen=True)
class PlanCacheUse:
    """Where the probe keeps its answers (remote/probe/cache.py) and whether it may answer
    from them (not ``--no-cache``: it plans afresh, and keeps that answer)."""

    directory: str
    read: bool = True


@dataclass(frozen=True)
class CachedAnswer:
    """What the probe's answer says of the plan cache (its ``cache`` section)."""

    hit: bool  # the answer is one kept from before: SGLang was not imported
    stored: bool  # a fresh answer, kept for next time
    key: str | None = None  # the key's first 16 hex digits
    age_s: float | None = None  # how old the kept answer is
    note: str | None = None  # why it was not used or kept
    lookup_s: float | None = None  # what the key and the look-up cost


@dataclass(frozen=True)
class Provenance:
    source: str  # the SGLang function (or 0.5.16+ declaration source) that set the value
    value: Any
    file: str | None = None
    line: int | None = None

    def describe(self) -> str:
        where = f" ({self.file}:{self.line})" if self.file and self.line else ""
        return f"{self.source}{where}"


@dataclass(frozen=True)
class PlannedField:
    field: str
    requested_as: str | None
    key_path: str | None
    profile: Any  # verify.ABSENT for fields the profile leaves to SGLang
    given: Any  # what argparse made of the command line (verify.ABSENT: not on it)
    effective: Any
    changed: bool
    provenance: tuple[Provenance, ...]
    why: str | None  # the line SGLang logged about it
    secret: bool = False


@dataclass(frozen=True)
class PlanError:
    stage: str  # import, parse, resolve
    kind: str  # ValueError, SystemExit ...
    message: str
    raised_in: str | None  # function (file:line)
    hint: str | None


@dataclass(frozen=True)
class PlanReport:
    profile: str
    sglang_version: str | None
    where: str  # "host <name>" or "local <python>"
    simulated_gpu: str | None
    standin: bool
    mode: str
    error: PlanError | None
    fields: tuple[PlannedField, ...]
    defaulted: tuple[PlannedField, ...]
    logs: tuple[str, ...]
    effective: Mapping[str, Any]  # every field, for the lock
    defaults: Mapping[str, Any]
    notes: tuple[str, ...] = ()
    budget: Budget | None = None  # SGLang's pools predicted (planning.predict)
    budget_notes: tuple[str, ...] = ()  # what the budget rests on, or why there is none
    # launch pitfalls (effective/launch_pitfalls.py), errors first: shown before SGLang's error
    pitfalls: tuple[Pitfall, ...] = ()
    cache: CachedAnswer | None = None  # whether SGLang's part came from the plan cache

    @property
    def blocking_pitfalls(self) -> tuple[Pitfall, ...]:
        return tuple(p for p in self.pitfalls if p.severity == ERROR)

    @property
    def ok(self) -> bool:
        return self.error is None

    def refusal(self) -> str:
        """The one-line account of why SGLang rejects the plan ("" when it does not)."""
        error = self.error
        if error is None:
            return ""
        raised = f" (raised in {error.raised_in})" if error.raised_in else ""
        return (
            f"SGLang {self.sglang_version or '?'} rejects the plan at {error.stage}: "
            f"{error.kind}: {error.message}{raised}"
        )

    @property
    def changed(self) -> tuple[PlannedField, ...]:
        return tuple(f for f in self.fields if f.changed)

    def pinned_changes(self, pins: Sequence[str], table: ArgTable) -> tuple[PlannedField, ...]:
        wanted = set(pins)
        for name in pins:
            spelled = spell(table, name)
            if spelled is not None:
                wanted.add(sglang_config.field_name(table, spelled.dest))
        return tuple(
            f for f in self.changed if f.field in wanted or (f.requested_as or "") in wanted
        )


@dataclass(frozen=True)
class PlanAnswer:
    """The probe's answer, decoded (``protocol.decode_plan_answer``). The values of
    ``raw``/``effective``/``defaults`` are SGLang's own, as JSON: any type a field may hold."""

    ok: bool
    sglang_version: str | None
    standin: bool  # the host's ``sglang`` is orch's stand-in, NOT SGLang
    mode: str
    simulated_gpu: str | None
    error_stage: str | None  # import, parse, resolve; None when SGLang accepted it
    error_type: str | None
    error_message: str | None
    error_raised_in: str | None  # "function (file:line)"
    raw: Mapping[str, Any]  # what argparse made of the command line
    effective: Mapping[str, Any]  # after SGLang's resolution
    defaults: Mapping[str, Any]
    provenance: Mapping[str, tuple[Provenance, ...]]
    logs: tuple[str, ...]
    plugins: tuple[str, ...] = ()  # SGLang plugins the probe loaded, as the entrypoints do
    # what the host knows for the memory budget (the probe's "memory" section); None from a
    # probe older than it, and when SGLang refused the command line
    memory: MemoryAnswer | None = None
    cache: CachedAnswer | None = None  # None: the request asked for no cache (or an older probe)
    candidates: tuple[PlanAnswer, ...] = ()  # a batched request's other plans, in its order


def report(
    profile: Profile,
    table: ArgTable,
    answer: PlanAnswer,
    *,
    requested: Sequence[RequestedField],
    where: str,
    secrets: Mapping[str, str],
) -> PlanReport:
    """Read the probe's answer against the profile (``requested``: the SGLang fields it sets, as
    the launch read them)."""
    error = _error(answer, table)
    effective = answer.effective
    raw = answer.raw
    provenance = answer.provenance
    logs = answer.logs
    fields: list[PlannedField] = []
    asked: set[str] = set()
    if error is None:
        for want in verify.expected_fields(requested, table, secrets):
            asked.add(want.field)
            value = verify.resolved_value(effective, want.field)
            changed = (
                not want.unknown
                and value is not verify.ABSENT
                and not verify.same(want.value, value)
            )
            fields.append(
                PlannedField(
                    field=want.field,
                    requested_as=want.requested_as,
                    key_path=want.key_path,
                    profile=want.value,
                    given=raw.get(want.field, verify.ABSENT),
                    effective=value,
                    changed=changed,
                    provenance=provenance.get(want.field, ()) if changed else (),
                    why=verify.explain(want.field, logs)
                    if changed
                    else (verify.NOT_SET_HERE if want.unknown else None),
                    secret=want.secret,
                )
            )
    defaulted = []
    for name in sorted(effective):
        if name in asked or name.startswith("_") or name not in raw:
            continue
        before, after = raw[name], effective[name]
        if verify.same(before, after):
            continue
        defaulted.append(
            PlannedField(
                field=name,
                requested_as=None,
                key_path=None,
                profile=verify.ABSENT,
                given=before,
                effective=after,
                changed=True,
                provenance=provenance.get(name, ()),
                why=verify.explain(name, logs),
                secret=name in verify.SECRET_FIELDS,
            )
        )
    notes = tuple(f"SGLang plugin loaded: {plugin}" for plugin in answer.plugins)
    return PlanReport(
        profile=profile.name,
        sglang_version=answer.sglang_version,
        where=where,
        simulated_gpu=answer.simulated_gpu,
        standin=answer.standin,
        mode=answer.mode,
        error=error,
        fields=tuple(fields),
        defaulted=tuple(defaulted),
        logs=logs,
        effective=effective,
        defaults=answer.defaults,
        notes=notes,
        cache=answer.cache,
    )


def _error(answer: PlanAnswer, table: ArgTable) -> PlanError | None:
    if answer.error_stage is None:
        return None if answer.ok else PlanError("probe", "?", "no answer", None, None)
    message = answer.error_message or ""
    stage = answer.error_stage
    hint = _hint(message, table)
    if stage == "resolve" and hint is None:
        hint = _resolved_before(message, answer.provenance, answer.raw) or (
            "SGLang's own check: the server would fail the same way at startup"
        )
    return PlanError(
        stage=stage,
        kind=answer.error_type or "?",
        message=message,
        raised_in=answer.error_raised_in,
        hint=hint,
    )


def _resolved_before(
    message: str, provenance: Mapping[str, tuple[Provenance, ...]], raw: Any
) -> str | None:
    """A value the error names that SGLang set itself before raising (the incident: the
    strategy nobody asked for, resolved from ``auto`` to ``no_buffer``)."""
    for name, entries in provenance.items():
        for entry in entries:
            shown = str(entry.value)
            if len(shown) >= 4 and shown in message:
                before = raw.get(name) if isinstance(raw, Mapping) else None
                return (
                    f"SGLang set {name} = {entry.value!r} itself (from {before!r}, in "
                    f"{entry.describe()}) before raising: give {name} explicitly"
                )
    return None


def _hint(message: str, table: ArgTable) -> str | None:
    """For an unrecognised flag that another SGLang version spells: what to write instead."""
    if "unrecognized arguments" not in message:
        return None
    version = table.parsed_version
    for rename in RENAMES:
        for old, new in ((rename.old, rename.new), (rename.new, rename.old)):
            flag = "--" + old.replace("_", "-")
            written = spell(table, old)
            if flag + " " in message + " " and written is not None:
                return (
                    f"{flag} is not an argument of SGLang {format_version(version)} "
                    f"({rename.describe()}): write {written.flag}, or `{old}:` in the profile's "
                    f"args and let orch spell it; `{new}` is the current name"
                )
    return "orch validate checks every argument against this version's table"


# -- the lock -----------------------------------------------------------------------------------


def lock_document(
    profile: Profile, report: PlanReport, launch_digest: str, gpu: GpuType | None
) -> dict[str, Any]:
    """The predicted effective values that differ from SGLang's defaults, sorted, stable."""
    locked = {}
    for name in sorted(report.effective):
        if name in UNLOCKABLE or name.startswith("_") or name in verify.SECRET_FIELDS:
            continue
        value = report.effective[name]
        default = report.defaults.get(name, verify.ABSENT)
        if default is not verify.ABSENT and verify.same(default, value):
            continue
        locked[name] = value
    document: dict[str, Any] = {
        "format": LOCK_FORMAT,
        "profile": profile.name,
        "sglang": report.sglang_version,
        "gpu_type": gpu.name if gpu is not None else None,
        "launch_digest": launch_digest,
        "effective": locked,
    }
    if report.standin:  # a reviewer must see that no SGLang made these predictions
        document["predicted_by"] = "orch's SGLang stand-in (NOT SGLang)"
    budget = report.budget
    if budget is not None:
        # what the scheduler will run: effective.max_running_requests is the resolved argument,
        # which the KV and mamba pools can lower (the figure plan, status and diff-effective show)
        document["scheduler"] = {
            "max_running_requests": budget.max_running_requests,
            "limited_by": budget.limited_by,
            "memory_verdict": budget.verdict,
        }
    return document


def lock_text(document: Mapping[str, Any]) -> str:
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def lock_problems(
    profile: Profile, launch_digest: str, document: Any, sglang_version: str | None
) -> list[str]:
    """Why a lock file no longer matches its profile (empty when it does)."""
    if not isinstance(document, dict) or document.get("format") != LOCK_FORMAT:
        return [f"not an {LOCK_FORMAT} document"]
    problems = []
    locked = document.get("launch_digest", document.get("plan_hash"))  # older locks: plan_hash
    if locked != launch_digest:
        problems.append(
            f"the profile's rendered command changed (locked {locked}, now {launch_digest})"
        )
    if sglang_version is not None and document.get("sglang") != sglang_version:
        problems.append(
            f"locked for SGLang {document.get('sglang')}, the profile targets {sglang_version}"
        )
    gpu = profile.gpu.type.name if profile.gpu.type is not None else None
    if document.get("gpu_type") != gpu:
        problems.append(f"locked for gpu {document.get('gpu_type')}, the profile has {gpu}")
    return problems
