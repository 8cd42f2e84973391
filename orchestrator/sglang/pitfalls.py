"""Launch pitfalls SGLang only reports late (in its resolution with a bare ``TypeError``, in model
init, in CUDA-graph warm-up, or never), checked before launch.  [pure]

Each check reads a :class:`LaunchFacts`: the SGLang fields as orch knows them (in ``validate`` the
profile's own values; in ``plan`` SGLang's resolved values over them), the server's environment,
the model's ``config.json`` when the plan has it, and the release. A :class:`Pitfall` says what
is wrong in SGLang's terms and what to write instead (``hint``); ``error`` for an input SGLang
rejects (at startup, or in the resolution ``plan`` runs), ``warning`` for a risk, ``notice`` for
what is inert. docs/pitfalls.md lists them with their evidence.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.sglang.argtable import ArgTable, Version, format_version

ERROR, WARNING, NOTICE = "error", "warning", "notice"

# the EAGLE family whose step/top-k/draft-token triple SGLang resolves together
# (server_args._handle_speculative_decoding, 0.5.11; arg_groups/speculative_hook.py, 0.5.23)
_EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})
TRIPLE = ("speculative_num_steps", "speculative_eagle_topk", "speculative_num_draft_tokens")

# Qwen3.5-family hybrids (gated delta net + full attention) whose radix cache needs the mamba
# extra_buffer strategy under speculative decoding in 0.5.11-0.5.13 (server_args.py
# _handle_mamba_radix_cache raises a ValueError otherwise); 0.5.14 renamed the strategy
QWEN35_FAMILY = frozenset(
    {
        "Qwen3NextForCausalLM",
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3_5ForCausalLM",
        "Qwen3_5MoeForCausalLM",
    }
)
_QWEN35_NAMES = ("qwen3.5", "qwen3_5", "qwen3.6", "qwen3_6", "qwen3-next", "qwen3next")
STRATEGY_RENAMED_IN = (0, 5, 14)  # mamba_scheduler_strategy -> mamba_radix_cache_strategy
SPEC_V2 = "SGLANG_ENABLE_SPEC_V2"

# Switches SGLang turned into one value of another flag in 0.5.14 and removed in 0.5.20
# (argtable_changes.seen_replacements over the tables finds the same three).
REPLACED_IN, REPLACEMENT_REMOVED_IN = (0, 5, 14), (0, 5, 20)


@dataclass(frozen=True)
class Replacement:
    old: str  # the switch
    new: str  # the field it became a value of
    value: str

    def write(self) -> str:
        return f"{self.new}: {self.value}"


REPLACEMENTS: tuple[Replacement, ...] = (
    Replacement("disable_piecewise_cuda_graph", "cuda_graph_backend_prefill", "disabled"),
    Replacement("enforce_piecewise_cuda_graph", "cuda_graph_backend_prefill", "tc_piecewise"),
    Replacement("enable_breakable_cuda_graph", "cuda_graph_backend_prefill", "breakable"),
)


def replacement_for(name: str) -> Replacement | None:
    return next((r for r in REPLACEMENTS if r.old == name), None)


def replaced_in(table: ArgTable, name: str) -> Replacement | None:
    """The replacement of switch ``name`` for ``table``'s release: from 0.5.14, where the switch
    is a deprecated shorthand for the value (0.5.14-0.5.19) or gone (0.5.20+). None before, or
    for a name that is no replaced switch."""
    replacement = replacement_for(name)
    if replacement is None or table.parsed_version < REPLACED_IN:
        return None
    switch = table.option_for_name(name)
    if switch is not None and not switch.deprecated:
        return None  # a release that still has it as its own switch (none known)
    return replacement


def replacement_accepted(table: ArgTable, replacement: Replacement) -> bool:
    """Whether ``table``'s release takes the replacement's value (0.5.23's
    --cuda-graph-backend-prefill has no tc_piecewise)."""
    option = table.option_for_name(replacement.new)
    if option is None:
        return False
    return not option.choices or replacement.value in option.choices


# DeepGEMM compiles its kernels on first use: 10-20 min cold (sglang PR #15891's log line)
DEEPGEMM_COLD_COMPILE_S = 20 * 60
DG_CACHE = "SGLANG_DG_CACHE_DIR"
_EPHEMERAL_ROOTS = ("/tmp", "/var/tmp", "/dev/shm", "/run", "/var/run")  # noqa: S108 - compared


@dataclass(frozen=True)
class Pitfall:
    kind: str  # speculative-triple, qwen35-spec-strategy, replaced-switch, ...
    severity: str  # error, warning, notice
    message: str
    hint: str
    fields: tuple[str, ...] = ()  # the SGLang fields (or env names) it is about, first is where


@dataclass(frozen=True)
class LaunchFacts:
    """What a check reads. ``args``: SGLang field -> value under the release's current names;
    ``resolved``: they are SGLang's resolved values (a plan), not only the profile's."""

    version: Version | None
    args: Mapping[str, Any]
    env: Mapping[str, str]
    config: Mapping[str, Any] | None = None  # the model's config.json (top level)
    model_path: str = ""
    resolved: bool = False
    startup_timeout_s: float | None = None

    def get(self, name: str, default: Any = None) -> Any:
        value = self.args.get(name)
        return default if value is None else value

    @property
    def shown_version(self) -> str:
        return format_version(self.version) if self.version else "?"


def check(facts: LaunchFacts) -> tuple[Pitfall, ...]:
    """Every pitfall of the launch, errors first."""
    found = [
        *speculative_triple(facts),
        *qwen35_speculative(facts),
        *replaced_switches(facts),
        *piecewise_context(facts),
        *divisibility(facts),
        *deepgemm_cache(facts),
    ]
    order = {ERROR: 0, WARNING: 1, NOTICE: 2}
    return tuple(sorted(found, key=lambda p: order.get(p.severity, 3)))


# -- 1. the speculative triple --------------------------------------------------------------------


def speculative_triple(facts: LaunchFacts) -> list[Pitfall]:
    """SGLang chooses the three itself only when all are unset; ``steps`` without ``topk`` dies
    on ``None > 1`` (TypeError), ``topk``/``draft`` without ``steps`` on a bare assert."""
    algorithm = str(facts.get("speculative_algorithm", "")).upper()
    if algorithm not in _EAGLE_FAMILY or facts.resolved:
        return []
    steps, topk, drafts = (facts.get(name) for name in TRIPLE)
    given = [
        name for name, value in zip(TRIPLE, (steps, topk, drafts), strict=True) if value is not None
    ]
    if not given or len(given) == 3:
        if topk == 1 and drafts is not None and steps is not None and drafts != steps + 1:
            return [
                Pitfall(
                    "speculative-topk-1",
                    WARNING,
                    f"with speculative_eagle_topk 1 SGLang sets speculative_num_draft_tokens to "
                    f"speculative_num_steps + 1 = {steps + 1}, not {drafts}",
                    f"write num_draft_tokens: {steps + 1} (or raise eagle_topk to keep {drafts})",
                    ("speculative_num_draft_tokens",),
                )
            ]
        return []
    if steps is not None and topk == 1 and drafts is None:
        return []  # SGLang fills draft tokens = steps + 1 itself
    missing = [name for name in TRIPLE if name not in given]
    crash = (
        "a bare AssertionError (it chooses the three itself only when all are unset)"
        if steps is None
        else "a bare TypeError ('>' between None and int)"
    )
    return [
        Pitfall(
            "speculative-triple",
            ERROR,
            f"{algorithm} speculative decoding with {', '.join(given)} but not "
            f"{', '.join(missing)}: SGLang {facts.shown_version} stops in its resolution with "
            f"{crash}",
            "set all three of spec_decode.num_steps, eagle_topk and num_draft_tokens (e.g. 3, "
            "1, 4), or none of them and let SGLang choose",
            (given[0],),
        )
    ]


# -- 2. Qwen3.5-family speculative decoding on <= 0.5.13 ------------------------------------------


def architecture(config: Mapping[str, Any] | None) -> str | None:
    names = config.get("architectures") if config else None
    return str(names[0]) if isinstance(names, list) and names else None


def qwen35_speculative(facts: LaunchFacts) -> list[Pitfall]:
    if not facts.get("speculative_algorithm") or facts.version is None:
        return []
    arch = architecture(facts.config)
    by_name = posixpath.basename(facts.model_path.rstrip("/")).lower()
    if arch is not None:
        if arch not in QWEN35_FAMILY:
            return []
        what = arch
    elif any(name in by_name for name in _QWEN35_NAMES):
        what = f"{posixpath.basename(facts.model_path.rstrip('/'))} (a Qwen3.5-family name)"
    else:
        return []
    flag = str(facts.env.get(SPEC_V2, "")).strip().lower()
    if facts.version >= STRATEGY_RENAMED_IN:
        if SPEC_V2 in facts.env:
            return [
                Pitfall(
                    "spec-v2-inert",
                    NOTICE,
                    f"{SPEC_V2} is not read by SGLang {facts.shown_version} (it left environ.py "
                    "in 0.5.14): spec v2 is the default there",
                    f"remove env.{SPEC_V2}",
                    (SPEC_V2,),
                )
            ]
        return []
    out = []
    strategy = facts.get("mamba_scheduler_strategy", "auto")
    if strategy != "extra_buffer" and not facts.get("disable_radix_cache", False):
        out.append(
            Pitfall(
                "qwen35-spec-strategy",
                ERROR if arch is not None else WARNING,
                f"speculative decoding of {what} with the radix cache on needs "
                f"mamba_scheduler_strategy extra_buffer on SGLang {facts.shown_version}; with "
                f"{strategy!r} (auto is no_buffer there) its resolution raises ValueError "
                "'... is not compatible with radix cache when using --mamba-scheduler-strategy "
                "no_buffer'",
                f'write args.mamba_scheduler_strategy: extra_buffer and env.{SPEC_V2}: "1" '
                "(SGLang's own advice), or args.disable_radix_cache: true",
                ("mamba_scheduler_strategy",),
            )
        )
    if flag in ("0", "false", "no", "off"):
        out.append(
            Pitfall(
                "spec-v2-off",
                WARNING,
                f"{SPEC_V2}={facts.env[SPEC_V2]} makes SGLang {facts.shown_version} fall back to "
                "spec v1 (overlap schedule off) for this Qwen3.5-family hybrid",
                f'write env.{SPEC_V2}: "1"',
                (SPEC_V2,),
            )
        )
    return out


# -- 3. switches that became a value of another flag ----------------------------------------------


def replaced_switches(facts: LaunchFacts) -> list[Pitfall]:
    version = facts.version
    if version is None or version < REPLACED_IN or facts.resolved:
        return []
    out = []
    for replacement in REPLACEMENTS:
        value = facts.args.get(replacement.old)
        if value is None:
            continue
        gone = version >= REPLACEMENT_REMOVED_IN
        if value is False:
            hint = f"remove args.{replacement.old}: false is its default"
        else:
            hint = f"write args.{replacement.write()}; orch upgrade rewrites it"
        out.append(
            Pitfall(
                "replaced-switch",
                ERROR if gone else WARNING,
                f"--{replacement.old.replace('_', '-')} became --"
                f"{replacement.new.replace('_', '-')} {replacement.value} in SGLang 0.5.14"
                + (
                    f"; SGLang {facts.shown_version} rejects it (unrecognized arguments)"
                    if gone
                    else f" and is removed in {format_version(REPLACEMENT_REMOVED_IN)}"
                ),
                hint,
                (replacement.old,),
            )
        )
    return out


# -- 4. piecewise CUDA graphs longer than the context ---------------------------------------------


def piecewise_state(facts: LaunchFacts) -> tuple[bool, int | None, str]:
    """(piecewise CUDA graphs on, their token maximum, the field that holds it), as resolved."""
    if facts.get("disable_cuda_graph", False):
        return False, None, ""
    config = facts.args.get("cuda_graph_config")
    if isinstance(config, Mapping) and isinstance(config.get("prefill"), Mapping):
        prefill = config["prefill"]  # 0.5.20+: the resolved backends in one place
        backend = prefill.get("backend")
        maximum = prefill.get("max_bs")
        return (
            backend not in (None, "disabled"),
            maximum if isinstance(maximum, int) else None,
            "cuda_graph_max_bs_prefill",
        )
    if facts.version is not None and facts.version >= REPLACED_IN:
        backend = facts.get("cuda_graph_backend_prefill")
        maximum = facts.get("cuda_graph_max_bs_prefill")
        on = backend not in ("disabled",) and not facts.get("disable_prefill_cuda_graph", False)
        return on and backend is not None, maximum, "cuda_graph_max_bs_prefill"
    on = not facts.get("disable_piecewise_cuda_graph", False)
    return on, facts.get("piecewise_cuda_graph_max_tokens"), "piecewise_cuda_graph_max_tokens"


def piecewise_context(facts: LaunchFacts) -> list[Pitfall]:
    """Piecewise CUDA graphs capture prefill shapes up to their token maximum; SGLang's warm-up
    of shapes above ``context_length`` crashes (CUBLAS_STATUS_EXECUTION_FAILED in
    piecewise_cuda_graph_runner.warmup_compile, dynamo PR #8609). Only a resolved plan knows
    whether they are on and their maximum (0.5.11: chunked_prefill_size, 8192 on an H200)."""
    if not facts.resolved:
        return []
    on, maximum, field = piecewise_state(facts)
    context = facts.get("context_length")
    if not on or not isinstance(maximum, int) or not isinstance(context, int):
        return []
    if context >= maximum:
        return []
    off = (
        "cuda_graph_backend_prefill: disabled"
        if facts.version is not None and facts.version >= REPLACED_IN
        else "disable_piecewise_cuda_graph: true"
    )
    return [
        Pitfall(
            "piecewise-context",
            WARNING,
            f"piecewise CUDA graphs are on with {field} {maximum} above context_length "
            f"{context}: their warm-up captures prefill shapes the context cannot hold "
            "(a CUBLAS_STATUS_EXECUTION_FAILED crash at startup was reported)",
            f"write args.{field}: {context} (at most context_length), or args.{off}",
            ("context_length", field),
        )
    ]


# -- 5. parallelism against the model's shapes ----------------------------------------------------


def _count(config: Mapping[str, Any], *names: str) -> tuple[str, int] | None:
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return name, value
    return None


def divisibility(facts: LaunchFacts) -> list[Pitfall]:
    """Model init shards heads and experts with ``divide`` (``assert numerator % denominator ==
    0``); SGLang's resolution does not check it. (tp x pp over a group's nodes is validate's
    own check, ``profile.layout.check_parallelism``.)"""
    out: list[Pitfall] = []
    tp = int(facts.get("tp_size", 1) or 1)
    config = facts.config
    if not config:
        return out
    text = config.get("text_config")
    shapes: Mapping[str, Any] = text if isinstance(text, Mapping) else config
    attention_tp = tp
    dp = int(facts.get("dp_size", 1) or 1)
    if facts.get("enable_dp_attention", False) and dp > 1:
        attention_tp = max(1, tp // dp)
    what = f"tp_size {tp}" if attention_tp == tp else f"the attention TP ({tp} // dp {dp})"
    for names in (("num_attention_heads",), ("linear_num_key_heads",), ("linear_num_value_heads",)):
        found = _count(shapes, *names)
        if found and found[1] % attention_tp:
            out.append(_not_divisible(found, what, attention_tp, "tp_size"))
    kv = _count(shapes, "num_key_value_heads")
    if kv is not None:
        name, heads = kv
        if (attention_tp >= heads and attention_tp % heads) or (
            attention_tp < heads and heads % attention_tp
        ):
            out.append(
                Pitfall(
                    "kv-heads-tp",
                    ERROR,
                    f"{name} {heads} and {what}: SGLang splits KV heads over TP ranks, or "
                    f"replicates them when TP exceeds them; neither divides evenly, and model "
                    "init stops on `assert numerator % denominator == 0`",
                    f"use a tp_size that divides {heads} or that {heads} divides",
                    ("tp_size",),
                )
            )
    experts = _count(shapes, "n_routed_experts", "num_experts", "num_local_experts")
    ep = int(facts.get("ep_size", 1) or 1)
    if experts is not None and ep > 1 and experts[1] % ep:
        out.append(_not_divisible(experts, f"ep_size {ep}", ep, "ep_size"))
    return out


def _not_divisible(found: tuple[str, int], what: str, by: int, field: str) -> Pitfall:
    name, count = found
    divisors = [d for d in (1, 2, 4, 8, 16) if count % d == 0]
    return Pitfall(
        "heads-tp" if field == "tp_size" else "experts-ep",
        ERROR,
        f"the model's {name} {count} is not divisible by {what}: model init stops on "
        "`assert numerator % denominator == 0` after the weights are read",
        f"use a {field} that divides {count} ({', '.join(map(str, divisors))})",
        (field,),
    )


# -- 7. DeepGEMM's JIT cache ----------------------------------------------------------------------


def uses_deepgemm(facts: LaunchFacts) -> bool:
    """An FP8 checkpoint (its quantization_config) or --quantization fp8: SGLang's FP8 GEMMs
    go through DeepGEMM on Hopper and Blackwell (SGLANG_ENABLE_JIT_DEEPGEMM, on by default)."""
    if str(facts.env.get("SGLANG_ENABLE_JIT_DEEPGEMM", "1")).lower() in ("0", "false"):
        return False
    if "fp8" in str(facts.get("quantization", "")).lower():
        return True
    config = facts.config or {}
    quant = config.get("quantization_config")
    if not isinstance(quant, Mapping):
        text = config.get("text_config")
        quant = text.get("quantization_config") if isinstance(text, Mapping) else None
    return isinstance(quant, Mapping) and "fp8" in str(quant.get("quant_method", "")).lower()


def deepgemm_cache(facts: LaunchFacts) -> list[Pitfall]:
    """What can be checked without a GPU: whether the compiled kernels' directory is one that
    does not outlive a reboot or a container, and whether the readiness timeout covers a cold
    compile. Whether the host's path is really persistent (a mount) is not known here."""
    out = []
    directory = facts.env.get(DG_CACHE)
    if directory and _ephemeral(directory):
        out.append(
            Pitfall(
                "deepgemm-cache-ephemeral",
                WARNING,
                f"{DG_CACHE}={directory} does not survive a reboot (or a container): DeepGEMM "
                "then recompiles its kernels on every start, 10-20 min",
                f"point env.{DG_CACHE} at a persistent directory (SGLang's default is under "
                "~/.cache)",
                (DG_CACHE,),
            )
        )
    timeout = facts.startup_timeout_s
    if uses_deepgemm(facts) and timeout is not None and timeout < DEEPGEMM_COLD_COMPILE_S:
        out.append(
            Pitfall(
                "deepgemm-cold-timeout",
                WARNING,
                f"an FP8 model's first start compiles DeepGEMM kernels (10-20 min cold); "
                f"health.startup_timeout_s {timeout:g} s may end it before it is ready",
                f"raise health.startup_timeout_s to {DEEPGEMM_COLD_COMPILE_S} or more, or warm "
                "the cache first (python -m sglang.compile_deep_gemm)",
                ("health.startup_timeout_s",),
            )
        )
    return out


def _ephemeral(directory: str) -> bool:
    path = posixpath.normpath(directory)
    return any(path == root or path.startswith(root + "/") for root in _EPHEMERAL_ROOTS)


# -- 6. concurrency capped by the mamba state cache (the budget's numbers) ------------------------


def mamba_cap(
    requested: int | None,
    cap: int,
    slots: int,
    per_request: int,
    version: str,
    *,
    whose: str = "requested",
) -> Pitfall | None:
    """A requested max_running_requests above what the mamba state slots admit: SGLang caps it
    (silently before 0.5.17), so the concurrency asked for is never reached."""
    if requested is None or requested <= cap:
        return None
    return Pitfall(
        "capped-by-mamba",
        WARNING,
        f"capped by mamba: max_running_requests {requested} {whose}, SGLang {version} runs at "
        f"most {cap} ({slots} mamba state slots // {per_request} slots per request)",
        "raise max_mamba_cache_size (or mamba_full_memory_ratio), or halve the state with "
        f"mamba_ssm_dtype bfloat16; or request {cap}",
        ("max_running_requests",),
    )
