"""The model's shapes on one rank, by SGLang's own classes (``ModelConfig``, the mamba state's
``mamba2_cache_params``, ``DefaultPoolConfigurator._compute_cell_size``), computed inside the
parallel state rank 0 of the launch would have."""

from __future__ import annotations

import contextlib
import importlib
import types
from collections.abc import Iterator, Mapping
from typing import Any

from orchestrator.remote.probe.values import describe, jsonable


def resolved_view(server_args: Any) -> Any:
    """The resolved values: 0.5.19+ keep them out of the fields (``resolving_view``, what
    ``ModelConfig.from_server_args`` reads); up to 0.5.18 the fields are resolved."""
    try:
        overrides: Any = importlib.import_module("sglang.srt.arg_groups.model_override_base")
    except ImportError:
        return server_args
    view = getattr(overrides, "resolving_view", None)
    return view(server_args) if callable(view) else server_args


def _parallel_sizes(view: Any) -> dict[str, Any]:
    """The widths each rank's groups will have, as SGLang derives them: 0.5.19+
    ``runtime_context.parallel_widths_of``; up to 0.5.18 ``dp_attention.
    compute_dp_attention_world_info`` (attention TP = TP / DP with DP attention, / CP)."""
    tp, pp = int(view.tp_size), int(getattr(view, "pp_size", 1) or 1)
    dp = int(getattr(view, "dp_size", 1) or 1)
    dp_attention = bool(getattr(view, "enable_dp_attention", False))
    cp = int(getattr(view, "attn_cp_size", 1) or 1)
    sizes: dict[str, Any] = {"tp_size": tp, "pp_size": pp, "dp_size": dp, "attn_cp_size": cp}
    context: Any = None
    with contextlib.suppress(ImportError):
        context = importlib.import_module("sglang.srt.runtime_context")
    widths_of = getattr(context, "parallel_widths_of", None)
    if callable(widths_of):
        widths = dict(widths_of(view))
        sizes.update(widths)
        sizes["source"] = "runtime_context.parallel_widths_of"
        sizes["enable_dp_attention"] = int(widths.get("attn_dp_size", 1)) > 1 or dp_attention
        return sizes
    sizes["enable_dp_attention"] = dp_attention
    try:
        dp_module: Any = importlib.import_module("sglang.srt.layers.dp_attention")
        info = dp_module.compute_dp_attention_world_info(dp_attention, 0, tp, dp, cp)
        sizes["attn_tp_size"] = int(info[1])
        sizes["source"] = "dp_attention.compute_dp_attention_world_info"
    except (ImportError, AttributeError, TypeError):
        sizes["attn_tp_size"] = tp // (dp if dp_attention else 1) // cp
        sizes["source"] = "tp_size / dp_size (DP attention) / attn_cp_size"
    sizes["attn_dp_size"] = dp if dp_attention else 1
    return sizes


@contextlib.contextmanager
def _rank_parallel_state(view: Any, sizes: Mapping[str, Any]) -> Iterator[None]:
    """The parallel state one rank of this launch would have, for SGLang's config code to read:
    0.5.19+ through SGLang's own ``get_parallel().override(...)`` (the widths, the configured
    leaves, rank 0); up to 0.5.18 by standing in for the unbuilt process groups of
    ``parallel_state`` (``_TP``, ``_ATTN_TP`` ...), which ``get_attention_tp_size()`` and
    ``get_tensor_model_parallel_world_size()`` read. Everything is put back afterwards."""
    with contextlib.ExitStack() as stack:
        context: Any = None
        with contextlib.suppress(ImportError):
            context = importlib.import_module("sglang.srt.runtime_context")
        get_parallel = getattr(context, "get_parallel", None)
        known_of = getattr(context, "_parallel_fields", None)
        if callable(get_parallel) and callable(known_of):
            known = set(known_of())
            values = {name: getattr(view, name) for name in known if _has(view, name)}
            values.update({k: v for k, v in sizes.items() if k in known})
            values.update({name: 0 for name in known if name.endswith("_rank")})
            stack.enter_context(get_parallel().override(**values))
        state: Any = None
        with contextlib.suppress(ImportError):
            state = importlib.import_module("sglang.srt.distributed.parallel_state")
        groups = {
            "_TP": sizes["tp_size"],
            "_ATTN_TP": sizes["attn_tp_size"],
            "_ATTN_CP": sizes["attn_cp_size"],
            "_PP": sizes["pp_size"],
        }
        for name, width in groups.items():
            if state is not None and name in vars(state) and getattr(state, name) is None:
                group = types.SimpleNamespace(
                    world_size=width, rank_in_group=0, rank=0, ranks=list(range(width))
                )
                setattr(state, name, group)
                stack.callback(setattr, state, name, None)
        yield


def _has(view: Any, name: str) -> bool:
    try:
        getattr(view, name)
    except Exception:  # noqa: BLE001 - a field this view does not hold
        return False
    return True


def rank_shapes(server_args: Any) -> dict[str, Any]:
    """Bytes per mamba slot and per KV token on one rank, by SGLang's own classes: the
    ``ModelConfig`` each TP worker builds (``ModelConfig.from_server_args``), the model's
    mamba-ish config (0.5.19+ ``configs.hybrid_arch.mambaish_config``; up to 0.5.18
    ``ModelRunner.mambaish_config``) and its ``mamba2_cache_params``; the KV cell by
    ``DefaultPoolConfigurator._compute_cell_size`` (``_kv_cell``). Each is computed inside the
    parallel state of rank 0 of this launch (``_rank_parallel_state``)."""
    config_module: Any = importlib.import_module("sglang.srt.configs.model_config")
    torch: Any = importlib.import_module("torch")
    view = resolved_view(server_args)
    sizes = _parallel_sizes(view)
    sources = ["ModelConfig.from_server_args", str(sizes.pop("source"))]
    notes: list[str] = []
    with _rank_parallel_state(view, sizes):
        model_config = config_module.ModelConfig.from_server_args(server_args)
        mambaish, found_by = _mambaish(model_config)
        sources.append(found_by)
        mamba = None
        if mambaish is not None:
            mamba = _mamba_state(mambaish, notes)
            if mamba is not None:
                sources.append(f"{type(mambaish).__name__}.mamba2_cache_params")
        kv = _kv_cell(torch, config_module, model_config, server_args, mambaish, sizes, notes)
        if kv["kv_cell_source"] != "formula":
            sources.append(str(kv["kv_cell_source"]))
        architectures = getattr(model_config.hf_config, "architectures", None) or [None]
        if int(sizes["pp_size"]) > 1:
            notes.append("pp_size > 1: layers are counted for the whole model, not per stage")
        if getattr(model_config, "is_hybrid_swa", False):
            notes.append("a hybrid SWA model: SGLang sizes separate full and SWA pools")
        shapes = {
            "architecture": architectures[0],
            "context_len": int(model_config.context_len),
            "model_dtype": _dtype_name(model_config.dtype),
            "nextn_predict_layers": getattr(model_config, "num_nextn_predict_layers", None),
            "multimodal": bool(getattr(model_config, "is_multimodal", False)),
            **{k: v for k, v in sizes.items() if isinstance(v, (int, bool))},
            **kv,
            "hybrid": mamba is not None,
            "mamba": mamba,
            "sources": sources,
            "notes": notes,
        }
        # last: SGLang's draft-mode rewrite changes the cached config the target's shares
        shapes["draft"] = (
            _draft_config(config_module, server_args, view, shapes["nextn_predict_layers"])
            if _speculative(view)
            else None
        )
    return shapes


def _speculative(view: Any) -> bool:
    algorithm = getattr(view, "speculative_algorithm", None)
    return algorithm is not None and str(jsonable(algorithm)).upper() not in ("", "NONE")


def _draft_config(
    config_module: Any, server_args: Any, view: Any, target_nextn: int | None
) -> dict[str, Any]:
    """The draft's layers as SGLang reads its checkpoint in draft mode (``ModelConfig(...,
    is_draft_model=True)``: an MTP head of the target checkpoint is rewritten to its MTP form,
    ``num_nextn_predict_layers``); the path is the draft's, or the target's when it has none.
    ``eagle_draft_layers``: the draft layers 0.5.23 adds to the target's KV cell under EAGLE
    (``spec_aux_hidden_state._resolve_eagle_aux_hidden_state``: with a draft path the draft-mode
    config's MTP layers, else its layers; without one the TARGET config's MTP layers, often
    none)."""
    path = getattr(view, "speculative_draft_model_path", None)
    out: dict[str, Any] = {"path": path}
    try:
        config = config_module.ModelConfig.from_server_args(
            server_args, model_path=path or None, is_draft_model=True
        )
    except Exception as exc:  # noqa: BLE001 - a draft elsewhere, a Hub id offline
        out["error"] = describe(exc)
        return out
    architectures = getattr(config.hf_config, "architectures", None) or [None]
    nextn = getattr(config, "num_nextn_predict_layers", None)
    layers = max(
        int(config.num_hidden_layers), int(getattr(config, "num_attention_layers", 0) or 0)
    )
    eagle = (nextn if nextn is not None else layers) if path else target_nextn
    out.update(
        architecture=architectures[0],
        nextn_predict_layers=nextn,
        layers=layers,
        eagle_draft_layers=eagle,
    )
    return out


def _mambaish(model_config: Any) -> tuple[Any, str]:
    """The config SGLang sizes the mamba pool from, found as SGLang finds it."""
    try:
        hybrid_arch: Any = importlib.import_module("sglang.srt.configs.hybrid_arch")
    except ImportError:
        pass
    else:
        return hybrid_arch.mambaish_config(model_config), "hybrid_arch.mambaish_config"
    try:
        runner_module: Any = importlib.import_module("sglang.srt.model_executor.model_runner")
    except ImportError as exc:
        # ModelRunner needs a serving install (einops, kernels); its properties pick the config
        # that has SGLang's mamba state: the same classes, asked directly
        found = _mambaish_by_class(model_config)
        return found[0], f"{found[1]} (ModelRunner not importable: {describe(exc)})"
    runner = object.__new__(runner_module.ModelRunner)  # its properties read only these
    runner.model_config = model_config
    runner.is_draft_worker = False
    return runner.mambaish_config, "ModelRunner.mambaish_config"


def _mambaish_by_class(model_config: Any) -> tuple[Any, str]:
    hf_config = model_config.hf_config
    text = getattr(hf_config, "get_text_config", None)
    candidates = [
        hf_config,
        getattr(hf_config, "llm_config", None),
        text() if callable(text) else None,
    ]
    for config in candidates:
        if config is not None and isinstance(
            getattr(type(config), "mamba2_cache_params", None), property
        ):
            return config, f"{type(config).__name__} (the config class with mamba2_cache_params)"
    try:
        registry: Any = importlib.import_module("sglang.srt.configs.linear_attn_model_registry")
    except ImportError:
        return None, "no config class with mamba2_cache_params"
    found = registry.get_linear_attn_config(hf_config)
    return (found[1] if found else None), "linear_attn_model_registry.get_linear_attn_config"


def _mamba_state(mambaish: Any, notes: list[str]) -> dict[str, Any] | None:
    params = mambaish.mamba2_cache_params
    if params is None:
        return None
    shape, dtype, layers = params.shape, params.dtype, len(params.layers)
    conv_shapes = [[int(n) for n in conv] for conv in shape.conv]
    temporal = [int(n) for n in shape.temporal]
    conv_bytes = sum(_product(conv) for conv in conv_shapes) * dtype.conv.itemsize * layers
    ssm_bytes = _product(temporal) * dtype.temporal.itemsize * layers
    slot_bytes = int(params.mamba_cache_per_req)
    if conv_bytes + ssm_bytes != slot_bytes:
        notes.append(
            f"mamba_cache_per_req {slot_bytes} != conv {conv_bytes} + SSM {ssm_bytes}: "
            f"{type(params).__name__} counts its state its own way"
        )
    return {
        "params": type(params).__name__,
        "layers": layers,
        "conv_shapes": conv_shapes,
        "temporal_shape": temporal,
        "conv_dtype": _dtype_name(dtype.conv),
        "ssm_dtype": _dtype_name(dtype.temporal),
        "conv_bytes": conv_bytes,
        "ssm_bytes": ssm_bytes,
        "slot_bytes": slot_bytes,
    }


def _product(numbers: list[int]) -> int:
    out = 1
    for number in numbers:
        out *= number
    return out


def _dtype_name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


# --kv-cache-dtype -> torch dtype, as ModelRunner.configure_kv_cache_dtype (0.5.11) and
# mem_cache/kv_cache_dtype.py (0.5.23) map them on CUDA; "auto" is the model's dtype
KV_DTYPES = {
    "fp8_e5m2": "float8_e5m2",
    "fp8_e4m3": "float8_e4m3fn",
    "mxfp8": "float8_e4m3fn",
    "bf16": "bfloat16",
    "bfloat16": "bfloat16",
    "fp4_e2m1": "float4_e2m1fn_x2",
    "nvfp4": "float4_e2m1fn_x2",
    "fp4_mx_block16": "float4_e2m1fn_x2",
}


def _kv_cell(
    torch: Any,
    config_module: Any,
    model_config: Any,
    server_args: Any,
    mambaish: Any,
    sizes: Mapping[str, Any],
    notes: list[str],
) -> dict[str, Any]:
    """Bytes per KV token on one rank: SGLang's ``DefaultPoolConfigurator._compute_cell_size``
    called on what it reads of a model runner, else (a model whose cell needs more of the
    runtime than the probe provides) its MHA / MLA formula, said so in the notes."""
    view = resolved_view(server_args)
    requested = str(getattr(view, "kv_cache_dtype", "auto") or "auto")
    if requested == "auto":
        kv_dtype = model_config.dtype
        algo = _kv_cache_quant_algo(model_config.hf_config)
        if algo is not None and algo.upper() == "FP8":
            kv_dtype = torch.float8_e4m3fn  # the checkpoint's kv_cache_quant_algo
            notes.append("kv_cache_dtype auto: FP8, the checkpoint's kv_cache_quant_algo")
    elif requested in KV_DTYPES:
        kv_dtype = getattr(torch, KV_DTYPES[requested])
    else:
        raise ValueError(f"Unsupported kv_cache_dtype: {requested}")
    dtype_bytes = int(torch._utils._element_size(kv_dtype))
    if mambaish is not None:
        layers = len(mambaish.full_attention_layer_ids)
    else:
        layers = max(
            int(model_config.num_hidden_layers),
            int(getattr(model_config, "num_attention_layers", 0) or 0),
        )
    arch = getattr(config_module, "AttentionArch", None)
    mla = arch is not None and model_config.attention_arch == arch.MLA
    out: dict[str, Any] = {
        "kv_cache_dtype": requested,
        "kv_dtype": _dtype_name(kv_dtype),
        "kv_dtype_bytes": dtype_bytes,
        "attention": "MLA" if mla else "MHA",
        "full_attention_layers": layers,
    }
    if mla:
        width = int(model_config.kv_lora_rank) + int(model_config.qk_rope_head_dim)
        formula = width * layers * dtype_bytes
        out["kv_lora_rank"] = int(model_config.kv_lora_rank)
        out["qk_rope_head_dim"] = int(model_config.qk_rope_head_dim)
    else:
        dcp = int(sizes.get("attn_dcp_size", 1) or 1)
        attn_tp = int(sizes["attn_tp_size"])
        heads = int(
            model_config.get_num_kv_heads(attn_tp, dcp)
            if dcp > 1
            else model_config.get_num_kv_heads(attn_tp)
        )
        head_dim, v_head_dim = int(model_config.head_dim), int(model_config.v_head_dim)
        formula = heads * (head_dim + v_head_dim) * layers * dtype_bytes
        out.update(kv_heads_per_rank=heads, head_dim=head_dim, v_head_dim=v_head_dim)
    runner = types.SimpleNamespace(
        model_config=model_config,
        kv_cache_dtype=kv_dtype,
        kv_cache_dtype_str=requested,
        use_mla_backend=mla,
        server_args=server_args,
        is_draft_worker=False,
        model_dtype=model_config.dtype,
    )
    try:
        pools: Any = importlib.import_module("sglang.srt.model_executor.pool_configurator")
        configurator = object.__new__(pools.DefaultPoolConfigurator)
        configurator.kv_cache_dtype_str = requested  # 0.5.23 reads it off itself
        out["kv_cell_bytes"] = int(configurator._compute_cell_size(runner, layers))
        out["kv_cell_source"] = "DefaultPoolConfigurator._compute_cell_size"
    except Exception as exc:  # noqa: BLE001 - it wanted more of a runner: the formula
        out["kv_cell_bytes"] = formula
        out["kv_cell_source"] = "formula"
        notes.append(f"KV cell by its MHA/MLA formula: _compute_cell_size: {describe(exc)}")
        if "float4" in str(kv_dtype):
            notes.append("an FP4 KV cache: SGLang adds scale buffers the formula leaves out")
    else:
        if out["kv_cell_bytes"] != formula:
            notes.append(f"KV cell {out['kv_cell_bytes']} != the MHA/MLA formula's {formula}")
    return out


def _kv_cache_quant_algo(hf_config: Any) -> str | None:
    quantization = getattr(hf_config, "quantization_config", None)
    if not isinstance(quantization, dict):
        return None
    for holder in (quantization, quantization.get("quantization")):
        if isinstance(holder, dict) and isinstance(holder.get("kv_cache_quant_algo"), str):
            return str(holder["kv_cache_quant_algo"])
    return None
