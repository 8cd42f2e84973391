"""``orch plan --fit``: what to change in a profile so that its launch fits, searched the way a
team searches by hand (more GPUs, another mem_fraction_static, a smaller mamba cache ...), but
over every combination of up to three knobs at once.  [pure]

Two stages. ``candidates`` lists the edits (only knobs the release's argument table has, never
a field the profile pins, tensor parallelism only in sizes the model's heads divide) and
``predict`` sizes each from the base plan's probe answer by the same budget arithmetic the plan
uses (``budget_for``): SGLang's resolved values with the edit written over them, the model's
shapes mirrored for another TP size or another dtype. ``shortlist`` ranks them (not will-fail
first, then the concurrency left: max_running_requests, then KV tokens, then the fewest
changes) and keeps a few for the second stage, where commands/fitting.py plans each, as
rendered from the edited profile, through SGLang's own resolution (one probe process) and
``choose`` ranks what that says."""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.model import GpuSpec, Profile, frozen_map
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable
from orchestrator.sglang.memory.budget import FAILS, FITS, Budget, budget_for
from orchestrator.sglang.memory.rules import inputs_from
from orchestrator.sglang.memory.shapes import GpuMemory, MemoryAnswer, ModelMemory, mirrored_model

MAX_CHANGES = 4  # knobs changed at once: tp with its devices counts as one
SHORTLIST = 8  # candidates planned through SGLang's own resolution (stage 2)
SHOWN = 5  # suggestions printed
PER_GPU_COUNT = 2  # in a shortlist, first this many per GPU count: fewer GPUs stay in view
MAX_TP_WITHOUT_NVML = 8  # where the probe saw no NVML, how far more GPUs are proposed

MFS_VALUES = (0.70, 0.75, 0.80, 0.85, 0.88, 0.90, 0.92, 0.94)
MAMBA_RATIOS = (0.5, 0.7, 0.9)
TOKEN_CAP_CONTEXTS = (4, 16, 64)  # max_total_tokens tried: this many whole contexts
STRATEGY_FIELDS = ("mamba_scheduler_strategy", "mamba_radix_cache_strategy")  # argtable.RENAMES
TP_KEY = "tp_size"
DEVICES_KEY = "gpu.devices"
# the model's shapes change with these: the base answer's per-rank shapes no longer hold
RESHAPING = ("tp_size", "kv_cache_dtype", "mamba_ssm_dtype")


@dataclass(frozen=True)
class Knob:
    """One field the search may move, and the values it tries (None: unset the field)."""

    field: str  # the ServerArgs field, as the release's table names it
    key: str  # the dotted profile key that sets it (args.<the profile's own spelling>)
    values: tuple[Any, ...]


@dataclass(frozen=True)
class Candidate:
    """One edit of the profile: SGLang fields and the dotted profile keys that set them."""

    fields: Mapping[str, Any]  # ServerArgs field -> value (None: the field unset)
    changes: Mapping[str, Any]  # dotted profile key -> value, as written in the YAML
    devices: tuple[str, ...] | None = None  # gpu.devices when the edit changes them

    @property
    def identity(self) -> frozenset[tuple[str, Any]]:
        return frozenset((name, _hashable(value)) for name, value in self.fields.items())

    @property
    def size(self) -> int:
        """How many fields of the profile it changes (tp_size and gpu.devices are two)."""
        return len(self.changes)


@dataclass(frozen=True)
class Prediction:
    """What a budget says of a launch, as a suggestion shows it."""

    verdict: str
    max_running_requests: int
    kv_tokens: int
    headroom_gib: float
    failure: str | None = None

    @classmethod
    def of(cls, budget: Budget) -> Prediction:
        return cls(
            verdict=budget.verdict,
            max_running_requests=budget.max_running_requests,
            kv_tokens=budget.kv_tokens,
            headroom_gib=budget.headroom_gib,
            failure=budget.failure,
        )

    @property
    def score(self) -> tuple[int, int, int, int]:
        """Smaller is better: not will-fail, fits before the rest, room left for what is
        estimated (CUDA graphs, activations) before none, then the concurrency left."""
        order = 0 if self.verdict == FITS else 2 if self.verdict == FAILS else 1
        short = 0 if self.headroom_gib >= 0 else 1
        return (order, short, -self.max_running_requests, -self.kv_tokens)


@dataclass(frozen=True)
class Ranked:
    candidate: Candidate
    predicted: Prediction


@dataclass(frozen=True)
class Base:
    """The launch the search starts from: its profile, its table, and its plan's answer."""

    profile: Profile
    table: ArgTable
    effective: Mapping[str, Any]  # SGLang's resolved values (the plan)
    env: Mapping[str, str]
    memory: MemoryAnswer
    version: tuple[int, ...] | None
    nominal: GpuMemory | None


# -- stage 1: the knobs, the candidates, their budgets from the base answer ----------------------


def knobs(base: Base) -> tuple[Knob, ...]:
    """The fields worth moving for this launch and release, less what the profile pins."""
    effective = base.effective
    found: list[Knob] = []

    def add(field: str, values: Iterable[Any]) -> None:
        name = _release_name(base.table, field)
        if name is None or _pinned(base.profile, name):
            return
        current = effective.get(name)
        tried = tuple(dict.fromkeys(v for v in values if v != current))
        if tried:
            found.append(Knob(name, "args." + _profile_key(base.profile, base.table, name), tried))

    mfs = _number(effective.get("mem_fraction_static"))
    default = base.memory.default_mem_fraction_static
    fractions = {*MFS_VALUES, *([round(default, 3)] if default else [])}
    add("mem_fraction_static", sorted(f for f in fractions if mfs is None or abs(f - mfs) > 1e-6))
    hybrid = _hybrid(base.memory)
    if hybrid:
        cache = _integer(effective.get("max_mamba_cache_size"))
        if cache is not None:
            add("max_mamba_cache_size", [v for v in (cache // 2, cache * 2, cache * 4) if v > 0])
            if "max_mamba_cache_size" in base.profile.args:
                add("max_mamba_cache_size", [None])
        add("mamba_full_memory_ratio", MAMBA_RATIOS)
        add("mamba_ssm_dtype", _choices(base.table, "mamba_ssm_dtype", ("bfloat16",)))
        add(
            STRATEGY_FIELDS[0],
            _choices(base.table, STRATEGY_FIELDS[0], ("extra_buffer", "no_buffer")),
        )
    graphs = _graph_max_bs(effective)
    if graphs is not None:
        add("cuda_graph_max_bs", [v for v in (graphs // 2, graphs // 4) if v >= 4])
    chunk = _integer(effective.get("chunked_prefill_size"))
    if chunk is not None and chunk > 0:
        add("chunked_prefill_size", [v for v in (chunk // 2, chunk // 4) if v >= 1024])
    context = _integer(effective.get("context_length"))
    context = (
        context if context is not None else _text_config_int(base.memory, "max_position_embeddings")
    )
    if context is not None:
        add("context_length", [v for v in (context // 2, context // 4) if v >= 4096])
    if context is not None and _integer(effective.get("max_total_tokens")) is None:
        # a cap on the KV pool: on 0.5.11 the draft worker's KV pool, sized from the target's
        # token count, comes out of what mem_fraction_static leaves; room for N whole contexts
        add("max_total_tokens", [context * n for n in TOKEN_CAP_CONTEXTS])
    if str(effective.get("kv_cache_dtype") or "auto") in ("auto", "bf16", "bfloat16"):
        add("kv_cache_dtype", _choices(base.table, "kv_cache_dtype", ("fp8_e4m3",)))
    merged: dict[str, Knob] = {}
    for knob in found:  # max_mamba_cache_size may come twice: one knob, its values together
        if knob.field in merged:
            values = dict.fromkeys((*merged[knob.field].values, *knob.values))
            knob = dataclasses.replace(knob, values=tuple(values))
        merged[knob.field] = knob
    return tuple(merged.values())


def tp_sizes(base: Base) -> tuple[int, ...]:
    """Larger TP sizes to try: powers of two the model's heads divide, up to the GPUs the host
    has where the probe saw them (NVML), else up to 8; none for a launch group, a pipeline, DP
    attention, a pinned tp_size, or devices named by UUID."""
    effective = base.effective
    name = _release_name(base.table, TP_KEY)
    if name is None or _pinned(base.profile, name) or base.profile.group is not None:
        return ()
    if (_integer(effective.get("pp_size")) or 1) > 1 or effective.get("enable_dp_attention"):
        return ()
    devices = base.profile.gpu.devices
    if devices and not all(d.isdigit() for d in devices):
        return ()
    current = _integer(effective.get("tp_size")) or 1
    measured = [g for g in base.memory.gpus if g.basis.startswith("NVML")]
    limit = len(measured) if measured else MAX_TP_WITHOUT_NVML
    sizes = []
    size = 2
    while size <= limit:
        if size > current and _heads_divide(base.memory, size):
            sizes.append(size)
        size *= 2
    return tuple(sizes)


def candidates(base: Base, max_changes: int = MAX_CHANGES) -> tuple[Candidate, ...]:
    """Every edit of at most ``max_changes`` knobs (tp with its devices being one)."""
    options: list[list[tuple[dict[str, Any], dict[str, Any], tuple[str, ...] | None]]] = []
    for knob in knobs(base):
        options.append([({knob.field: v}, {knob.key: v}, None) for v in knob.values])
    tp_name = _release_name(base.table, TP_KEY)
    if tp_name is not None:
        tp_key = "args." + _profile_key(base.profile, base.table, tp_name)
        tp_options = []
        for size in tp_sizes(base):
            changes: dict[str, Any] = {tp_key: size}
            devices = _devices_for(base, size) if base.profile.gpu.devices else None
            if devices is not None:
                changes[DEVICES_KEY] = [int(d) for d in devices]
            tp_options.append(({tp_name: size}, changes, devices))
        if tp_options:
            options.append(tp_options)
    found: list[Candidate] = []
    for count in range(1, max_changes + 1):
        for chosen in itertools.combinations(options, count):
            for picks in itertools.product(*chosen):
                fields: dict[str, Any] = {}
                changes = {}
                devices = None
                for pick_fields, pick_changes, pick_devices in picks:
                    fields.update(pick_fields)
                    changes.update(pick_changes)
                    devices = pick_devices or devices
                found.append(Candidate(frozen_map(fields), frozen_map(changes), devices))
    return tuple(found)


def predict(base: Base, candidate: Candidate) -> Prediction | None:
    """The candidate's budget from the base answer: its fields written over SGLang's resolved
    values, the shapes mirrored from the model's config where the edit reshapes them. None
    where that cannot be done (no config to mirror, no budget)."""
    effective = dict(base.effective)
    for name, value in candidate.fields.items():
        effective[name] = value
        if name == "cuda_graph_max_bs":
            effective = _with_graph_max_bs(effective, value)
    memory = base.memory
    if any(name in RESHAPING for name in candidate.fields):
        model = _reshaped(base, effective)
        if model is None:
            return None
        memory = dataclasses.replace(memory, model=model)
    devices = candidate.devices if candidate.devices is not None else base.profile.gpu.devices
    budget, _ = budget_for(
        memory,
        effective,
        base.env,
        version=base.version,
        devices=tuple(devices),
        nominal=base.nominal,
    )
    return None if budget is None else Prediction.of(budget)


def _reshaped(base: Base, effective: Mapping[str, Any]) -> ModelMemory | None:
    """The model's per-rank shapes for an edit that reshapes them (another TP size, KV or SSM
    dtype): orch's mirror of SGLang's shape code over the config (as ``budget_for`` mirrors
    it), keeping what SGLang's own classes said of the draft, which no edit here changes."""
    if base.memory.text_config is None:
        return None
    inputs = inputs_from(effective, base.env)
    seen = {**base.env, **{k: v for k, v in base.memory.env.items() if v}}
    if isinstance(effective.get("mamba_ssm_dtype"), str):
        seen["SGLANG_MAMBA_SSM_DTYPE"] = effective["mamba_ssm_dtype"]
    model = mirrored_model(
        base.memory.text_config,
        attention_tp=max(1, inputs.tp_size // inputs.attn_dp),
        kv_dtype=str(effective.get("kv_cache_dtype") or "auto"),
        env=seen,
    )
    known = base.memory.model
    if model is None or known is None:
        return model
    return dataclasses.replace(
        model,
        draft_kv_layers=known.draft_kv_layers,
        draft_worker_layers=known.draft_worker_layers,
        multimodal=known.multimodal,
    )


def shortlist(
    base: Base, baseline: Prediction | None, limit: int = SHORTLIST
) -> tuple[tuple[Ranked, ...], int]:
    """Stage 1: the best few edits to plan through SGLang, and how many were sized."""
    everything = candidates(base)
    ranked = []
    for candidate in everything:
        predicted = predict(base, candidate)
        if predicted is not None:
            ranked.append(Ranked(candidate, predicted))
    chosen = select(ranked, baseline, limit, ranks=lambda r: gpus_taken(base, r.candidate))
    return chosen, len(everything)


def select(
    ranked: Sequence[Ranked],
    baseline: Prediction | None,
    limit: int,
    *,
    ranks: Callable[[Ranked], int] | None = None,
) -> tuple[Ranked, ...]:
    """The best ``limit`` of ``ranked``: never will-fail, better than the launch as it is,
    not beaten by an edit of fewer of its own changes; ordered by ``Prediction.score`` then the
    fewest changes; the first ``PER_GPU_COUNT`` per GPU count (``ranks``) before the rest, so
    that an edit on the GPUs the launch has is not crowded out by ones that add GPUs."""
    useful = [
        r
        for r in ranked
        if r.predicted.verdict != FAILS and (baseline is None or r.predicted.score < baseline.score)
    ]
    best: dict[frozenset[tuple[str, Any]], tuple[int, ...]] = {}
    for r in useful:
        best[r.candidate.identity] = r.predicted.score
    kept = [r for r in useful if not _beaten_by_fewer(r, best)]
    kept.sort(key=lambda r: (r.predicted.score, r.candidate.size, sorted(r.candidate.changes)))
    if ranks is None:
        return tuple(kept[:limit])
    first: list[Ranked] = []
    per: dict[int, int] = {}
    for r in kept:
        count = ranks(r)
        if per.get(count, 0) < PER_GPU_COUNT:
            per[count] = per.get(count, 0) + 1
            first.append(r)
    chosen = first[:limit]
    for r in kept:
        if len(chosen) >= limit:
            break
        if r not in chosen:
            chosen.append(r)
    chosen.sort(key=lambda r: (r.predicted.score, r.candidate.size, sorted(r.candidate.changes)))
    return tuple(chosen)


def gpus_taken(base: Base, candidate: Candidate) -> int:
    """The tensor-parallel size a candidate launches with: the GPUs it takes."""
    size = candidate.fields.get(TP_KEY)
    if isinstance(size, int):
        return size
    return _integer(base.effective.get("tp_size")) or 1


# -- the edit written into the profile -------------------------------------------------------


def edited_profile(profile: Profile, changes: Mapping[str, Any]) -> Profile:
    """The profile with the dotted changes written in, as the YAML edit would load
    (``args.NAME: null`` removes the field)."""
    args = dict(profile.args)
    gpu = profile.gpu
    for key, value in changes.items():
        if key.startswith("args."):
            name = key.removeprefix("args.")
            if value is None:
                args.pop(name, None)
            else:
                args[name] = value
        elif key == DEVICES_KEY:
            gpu = GpuSpec(type=gpu.type, devices=tuple(str(d) for d in value))
        else:
            raise ValueError(f"--fit does not edit {key}")
    return dataclasses.replace(profile, args=frozen_map(args), gpu=gpu)


def yaml_snippet(changes: Mapping[str, Any]) -> str:
    """The changes as YAML to paste into the profile: nested keys, flow-style lists."""
    grouped: dict[str, dict[str, Any]] = {}
    for key, value in changes.items():
        section, _, name = key.partition(".")
        grouped.setdefault(section, {})[name] = value
    lines = []
    for section, values in grouped.items():
        lines.append(f"{section}:")
        lines.extend(f"  {name}: {_yaml_value(value)}" for name, value in values.items())
    return "\n".join(lines)


# -- helpers ------------------------------------------------------------------------------------


def _beaten_by_fewer(r: Ranked, best: Mapping[frozenset[tuple[str, Any]], tuple[int, ...]]) -> bool:
    items = tuple(r.candidate.identity)
    for count in range(1, len(items)):
        for subset in itertools.combinations(items, count):
            score = best.get(frozenset(subset))
            if score is not None and score <= r.predicted.score:
                return True
    return False


def _devices_for(base: Base, size: int) -> tuple[str, ...]:
    """The profile's devices, then the host's other GPUs (lowest index first) up to ``size``."""
    have = list(base.profile.gpu.devices)
    indices = sorted(
        g.index for g in base.memory.gpus if g.basis.startswith("NVML") and g.index is not None
    )
    pool = [str(i) for i in indices] if indices else [str(i) for i in range(MAX_TP_WITHOUT_NVML)]
    for index in pool:
        if len(have) >= size:
            break
        if index not in have:
            have.append(index)
    return tuple(have[:size])


def _heads_divide(memory: MemoryAnswer, size: int) -> bool:
    """SGLang shards attention heads (and a hybrid's linear-attention heads) over TP; KV heads
    are sharded or replicated: one must divide the other."""
    config = _text_config(memory)
    if config is None:
        return size <= MAX_TP_WITHOUT_NVML  # nothing to check against: SGLang's resolution will
    for name in ("num_attention_heads", "linear_num_key_heads", "linear_num_value_heads"):
        heads = config.get(name)
        if isinstance(heads, int) and heads % size:
            return False
    kv = config.get("num_key_value_heads")
    return not (isinstance(kv, int) and kv % size and size % kv)


def _text_config(memory: MemoryAnswer) -> Mapping[str, Any] | None:
    config = memory.text_config
    if config is None:
        return None
    inner = config.get("text_config")
    return inner if isinstance(inner, Mapping) else config


def _text_config_int(memory: MemoryAnswer, name: str) -> int | None:
    config = _text_config(memory)
    return None if config is None else _integer(config.get(name))


def _hybrid(memory: MemoryAnswer) -> bool:
    if memory.model is not None:
        return memory.model.hybrid
    config = _text_config(memory)
    return config is not None and "full_attention_interval" in config


def _release_name(table: ArgTable, field: str) -> str | None:
    """``field`` as the release's ServerArgs names it (following argtable.RENAMES), or None
    where the release has no such field or flag."""
    names = [field]
    for rename in argtable.RENAMES:
        if field in (rename.old, rename.new):
            names += [rename.old, rename.new]
    for name in names:
        if name in table.fields and table.option_for_name(name) is not None:
            return name
    return None


def _same_field(table: ArgTable, a: str, b: str) -> bool:
    first, second = argtable.spell(table, a), argtable.spell(table, b)
    return first is not None and second is not None and first.dest == second.dest


def _profile_key(profile: Profile, table: ArgTable, name: str) -> str:
    """The key the profile already sets ``name`` with (an alias, another release's spelling),
    else the release's own name."""
    for key in profile.args:
        if key == name or _same_field(table, key, name):
            return key
    return name


def _pinned(profile: Profile, name: str) -> bool:
    names = {name}
    for rename in argtable.RENAMES:
        if name in (rename.old, rename.new):
            names |= {rename.old, rename.new}
    return any(pin in names for pin in profile.pin)


def _choices(table: ArgTable, field: str, wanted: tuple[str, ...]) -> list[str]:
    name = _release_name(table, field)
    option = table.option_for_name(name) if name is not None else None
    if option is None:
        return []
    return [v for v in wanted if option.choices is None or v in option.choices]


def _graph_max_bs(effective: Mapping[str, Any]) -> int | None:
    config = effective.get("cuda_graph_config")
    if isinstance(config, Mapping) and isinstance(config.get("decode"), Mapping):
        return _integer(config["decode"].get("max_bs"))
    return _integer(effective.get("cuda_graph_max_bs"))


def _with_graph_max_bs(effective: dict[str, Any], value: Any) -> dict[str, Any]:
    config = effective.get("cuda_graph_config")
    if isinstance(config, Mapping) and isinstance(config.get("decode"), Mapping):
        effective["cuda_graph_config"] = {**config, "decode": {**config["decode"], "max_bs": value}}
    return effective


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _integer(value: Any) -> int | None:
    number = _number(value)
    return None if number is None else int(number)


def _hashable(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _yaml_value(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_value(v) for v in value) + "]"
    if isinstance(value, str):
        return value
    return repr(value) if isinstance(value, float) else str(value)
