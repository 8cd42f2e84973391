"""SGLang's own pool-sizing functions, run on CPU for given inputs: the reference that
tests/sglang_real/test_memory_sglang.py holds orch's ``memory.plan_budget`` to.

Run BY the python of an SGLang venv (never orch's; it does not import orchestrator): a JSON
list of cases on stdin, a JSON list of results on stdout, one per case, in order.

A case starts where SGLang's ``_profile_available_bytes`` has read the GPU: ``rest_gib`` is
``avail_after_weights - P * (1 - mem_fraction_static)`` (that read needs a GPU and is not run).
From there each step is SGLang's own code, in the order its ``_resolve_memory_pool_config``
runs it; only the GPU read and the per-model shapes are supplied:

- 0.5.11 (sglang/srt/model_executor/model_runner_kv_cache_mixin.py): the methods of
  ``ModelRunnerKVCacheMixin`` on an instance carrying what they read: ``server_args`` is a real
  ``ServerArgs`` holding its field defaults (``__post_init__``, which wants a GPU and a model,
  is not run) with the case's values, ``spec_algorithm`` SGLang's enum, ``mambaish_config``
  the case's slot bytes. ``handle_max_mamba_cache`` -> bytes as ``_profile_available_bytes``
  returns them -> ``DefaultPoolConfigurator.calculate_pool_sizes`` (pool_configurator.py) ->
  ``_apply_token_constraints`` (-> ``calculate_pool_sizes_from_max_tokens``) ->
  ``_resolve_max_num_reqs``.
- 0.5.23 (sglang/srt/mem_cache/kv_cache_configurator.py): the methods of ``KVCacheConfigurator``
  on an instance made without its ``__init__`` (which builds the model's layer info and KV
  sharding), its fields set as model_runner.py sets them. The globals they read
  (``get_schedule()``, ``get_spec()``, ``get_memory()``, ``get_exec()``, ``get_context()``,
  ``get_disagg()``, ``get_parallel()``; sglang/srt/runtime_context.py) are a real published
  context: SGLang's own test seam ``get_context().override_server_args(...)``, which resolves a
  ``ServerArgs`` and declares the case's values on it, so derived leaves such as
  ``exec.mamba.enable_mamba_extra_buffer`` are SGLang's. ``_handle_max_mamba_cache`` -> bytes ->
  ``DefaultPoolConfigurator`` (its ``__init__`` runs: the EAGLE draft-layer cell scaling) ->
  ``calculate_pool_sizes`` -> ``_apply_token_constraints`` -> ``resolve_max_num_reqs``.

Supplied, not SGLang's: the per-model shapes (``mamba_cache_per_req``, the target's KV bytes per
token via ``_compute_cell_size``, which needs SGLang's distributed groups; the draft's KV
layers) and, for 0.5.23, ``attn_dp_size`` (resolution derives it from ``dp_size`` and
``enable_dp_attention``; the dummy config is resolved before the case's values are declared).
0.5.23's ``_profile_available_bytes`` raises ValueError when the rest after the mamba step is
<= 0; here ``calculate_pool_sizes`` then finds 0 tokens and ``MemoryPoolConfig`` raises instead.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import json
import logging
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from types import SimpleNamespace
from typing import Any

GIB = 1 << 30
SKIP_DECODE_LOCK = "SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK"


def _model(case: Mapping[str, Any]) -> tuple[Any, list[int]]:
    """(mambaish_config, full-attention layer ids): the shape of one rank's model."""
    full = int(case["full_attention_layers"])
    linear = int(case["mamba_layers"])
    full_ids = list(range(full))
    params = SimpleNamespace(
        mamba_cache_per_req=int(case["slot_bytes"]), layers=list(range(full, full + linear))
    )
    return SimpleNamespace(mamba2_cache_params=params, full_attention_layer_ids=full_ids), full_ids


def _with_cell(configurator_cls: Any, cell_bytes: int) -> Any:
    """SGLang's DefaultPoolConfigurator whose target KV bytes per token are the case's: the
    rest of its ``__init__`` and its sizing methods are SGLang's."""

    def _compute_cell_size(self: Any, runner: Any, num_layers: int) -> int:
        return cell_bytes

    return type(
        "CaseCellConfigurator", (configurator_cls,), {"_compute_cell_size": _compute_cell_size}
    )


def _sized(configurator: Any, runner: Any, rest_gib: float, page_size: int) -> Any:
    """_resolve_memory_pool_config after the profiling: the pool config from the rest."""
    available_bytes = int(rest_gib * GIB)  # _profile_available_bytes' return
    config = configurator.calculate_pool_sizes(available_bytes, page_size)
    constrained = runner._apply_token_constraints(config.max_total_num_tokens)
    if constrained != config.max_total_num_tokens:
        config = configurator.calculate_pool_sizes_from_max_tokens(constrained, page_size)
    return config


def legacy(case: Mapping[str, Any], result: dict[str, Any]) -> None:
    """SGLang 0.5.11."""
    mixin = importlib.import_module("sglang.srt.model_executor.model_runner_kv_cache_mixin")
    pools = importlib.import_module("sglang.srt.model_executor.pool_configurator")
    spec_info = importlib.import_module("sglang.srt.speculative.spec_info")
    server_args_cls = importlib.import_module("sglang.srt.server_args").ServerArgs

    server_args = object.__new__(server_args_cls)
    for field in dataclasses.fields(server_args_cls):
        if field.default is not dataclasses.MISSING:
            setattr(server_args, field.name, field.default)
        elif field.default_factory is not dataclasses.MISSING:
            setattr(server_args, field.name, field.default_factory())
    values = {
        "max_running_requests": case["max_running_requests"],
        "max_mamba_cache_size": case["max_mamba_cache_size"],
        "mamba_full_memory_ratio": case["mamba_full_memory_ratio"],
        "speculative_algorithm": case["speculative_algorithm"],
        "speculative_num_draft_tokens": case["speculative_num_draft_tokens"],
        "mamba_scheduler_strategy": case["strategy"],
        "disable_overlap_schedule": case["disable_overlap_schedule"],
        "disable_radix_cache": case["disable_radix_cache"],
        "dp_size": case["dp_size"],
        "enable_dp_attention": case["enable_dp_attention"],
        "page_size": case["page_size"],
        "max_total_tokens": case["max_total_tokens"],
        "context_length": case["context_len"],
    }
    for name, value in values.items():
        if not hasattr(server_args, name):
            raise AttributeError(f"SGLang 0.5.11's ServerArgs has no field {name!r}")
        setattr(server_args, name, value)

    mambaish, _ = _model(case)
    runner = mixin.ModelRunnerKVCacheMixin()
    vars(runner).update(
        server_args=server_args,
        mambaish_config=mambaish,
        spec_algorithm=spec_info.SpeculativeAlgorithm.from_string(case["speculative_algorithm"]),
        dp_size=server_args.dp_size,  # ModelRunner.__init__: self.dp_size = server_args.dp_size
        pp_size=1,
        model_config=SimpleNamespace(context_len=case["context_len"]),
        start_layer=0,
        end_layer=int(case["full_attention_layers"]) + int(case["mamba_layers"]),
        is_draft_worker=False,
        mem_fraction_static=None,
    )
    result["mamba_ratio"] = runner._calculate_mamba_ratio()
    rest = runner.handle_max_mamba_cache(float(case["rest_gib"]))
    result["max_mamba_cache_size"] = server_args.max_mamba_cache_size
    result["rest_after_mamba_gib"] = rest
    configurator = _with_cell(pools.DefaultPoolConfigurator, int(case["cell_bytes"]))(runner)
    result["cell_bytes"] = configurator._cell_size
    config = _sized(configurator, runner, rest, server_args.page_size)
    result["kv_tokens"] = config.max_total_num_tokens
    result["max_running_requests"] = runner._resolve_max_num_reqs(config.max_total_num_tokens)


@contextlib.contextmanager
def _environment(name: str, value: str | None) -> Iterator[None]:
    before = os.environ.get(name)
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def joint(case: Mapping[str, Any], result: dict[str, Any]) -> None:
    """SGLang 0.5.23."""
    torch = importlib.import_module("torch")
    runtime = importlib.import_module("sglang.srt.runtime_context")
    configurators = importlib.import_module("sglang.srt.mem_cache.kv_cache_configurator")
    pools = importlib.import_module("sglang.srt.model_executor.pool_configurator")
    spec_info = importlib.import_module("sglang.srt.speculative.spec_info")

    attn_dp = case["dp_size"] if case["enable_dp_attention"] else 1
    declared = {
        "max_running_requests": case["max_running_requests"],
        "max_mamba_cache_size": case["max_mamba_cache_size"],
        "mamba_full_memory_ratio": case["mamba_full_memory_ratio"],
        "speculative_algorithm": case["speculative_algorithm"],
        "speculative_num_draft_tokens": case["speculative_num_draft_tokens"],
        "mamba_radix_cache_strategy": case["strategy"],
        "disable_overlap_schedule": case["disable_overlap_schedule"],
        "disable_radix_cache": case["disable_radix_cache"],
        "dp_size": case["dp_size"],
        "enable_dp_attention": case["enable_dp_attention"],
        "attn_dp_size": attn_dp,
        "page_size": case["page_size"],
        "max_total_tokens": case["max_total_tokens"],
        "context_length": case["context_len"],
    }
    skip = "1" if case["skip_decode_lock"] else None
    with (
        _environment(SKIP_DECODE_LOCK, skip),
        runtime.get_context().override_server_args(**declared),
    ):
        mambaish, full_ids = _model(case)
        draft_layers = case["draft_kv_layers"]
        total_layers = int(case["full_attention_layers"]) + int(case["mamba_layers"])
        kvc = object.__new__(configurators.KVCacheConfigurator)
        fields: dict[str, Any] = {
            # model_runner.py builds the configurator with these
            "attn_dp_size": runtime.get_parallel().attn_dp_size,
            "pp_size": runtime.get_parallel().pp_size,
            "spec_algorithm": spec_info.SpeculativeAlgorithm.from_string(
                case["speculative_algorithm"]
            ),
            "is_draft_worker": False,
            "page_size": runtime.get_schedule().page_size,
            "kv_cache_dtype": torch.bfloat16,
            "kv_cache_dtype_str": None,
            "use_mla_backend": False,
            "is_hybrid_swa": False,
            "post_capture_kv_active": False,
            "extra_mamba_cache_bytes_per_req": 0,
            # __post_init__'s: mambaish_config(model_config) and friends
            "mambaish_config": mambaish,
            "hybrid_gdn_config": None,
            "hybrid_kda_config": None,
            "model_config": SimpleNamespace(
                context_len=case["context_len"],
                num_hidden_layers=total_layers,
                is_multimodal=False,
                is_draft_model=False,
                # hybrid_arch.mambaish_config(model_config) finds the shapes here (the
                # linear-attention registry's answer) when no known hf config class matches
                hf_config=SimpleNamespace(
                    architectures=["CaseModel"], model_type="case", get_text_config=lambda: None
                ),
                linear_attn_registry_result=(None, mambaish),
            ),
            "layer_info": SimpleNamespace(
                start_layer=0, end_layer=total_layers, num_effective_layers=len(full_ids)
            ),
            # spec_aux_hidden_state.py: a path-less MTP draft has num_nextn_predict_layers
            "spec_aux_config": SimpleNamespace(
                eagle_draft_num_layers=draft_layers,
                draft_kv_num_layers=draft_layers,
                draft_model_config=None,
                dflash_draft_num_layers=None,
            ),
        }
        for name, value in fields.items():
            setattr(kvc, name, value)
        if kvc.attn_dp_size != attn_dp:
            raise AssertionError(f"attn_dp_size {kvc.attn_dp_size} != {attn_dp}")
        result["mamba_ratio"] = kvc._calculate_mamba_ratio()
        rest = kvc._handle_max_mamba_cache(float(case["rest_gib"]))
        result["max_mamba_cache_size"] = runtime.get_schedule().max_mamba_cache_size
        result["rest_after_mamba_gib"] = rest
        configurator = _with_cell(pools.DefaultPoolConfigurator, int(case["cell_bytes"]))(kvc)
        result["cell_bytes"] = configurator._cell_size
        config = _sized(configurator, kvc, rest, runtime.get_schedule().page_size)
        result["kv_tokens"] = config.max_total_num_tokens
        result["max_running_requests"] = kvc.resolve_max_num_reqs(config.max_total_num_tokens)


def run(
    case: Mapping[str, Any], family: Callable[[Mapping[str, Any], dict[str, Any]], None]
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "name": case["name"],
        "mamba_ratio": None,
        "max_mamba_cache_size": None,
        "rest_after_mamba_gib": None,
        "cell_bytes": None,
        "kv_tokens": None,
        "max_running_requests": None,
        "error": None,
    }
    try:
        family(case, result)
    except (RuntimeError, ValueError) as exc:  # SGLang's refusal is the answer
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result


def main() -> int:
    logging.disable(logging.WARNING)  # SGLang's own warnings (the mamba cap) are not the answer
    warnings.simplefilter("ignore")
    cases = json.load(sys.stdin)
    with contextlib.redirect_stdout(sys.stderr):  # whatever SGLang prints is not the answer
        version = str(importlib.import_module("sglang").__version__)
        parts = tuple(int(part) for part in version.split(".")[:3])
        family = joint if parts >= (0, 5, 23) else legacy
        results = [run(case, family) for case in cases]
    json.dump({"sglang_version": version, "results": results}, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
