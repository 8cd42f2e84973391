"""The model's and the GPUs' memory as the plan uses them.  [pure]

Where SGLang's own classes cannot be imported (the stand-in), orch mirrors their shape code over
the model's ``config.json`` (``mirrored_model``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GIB = 1 << 30


@dataclass(frozen=True)
class ModelMemory:
    """The model's memory shapes for one rank, as the probe found them on the host.

    ``basis`` names where the shapes came from: SGLang's own classes (``ModelConfig``,
    ``mamba2_cache_params``) or orch's mirror of them over ``config.json`` when SGLang's could
    not be imported (the stand-in)."""

    basis: str
    architecture: str | None
    context_len: int | None
    attention_tp: int  # the TP size the per-rank shapes were computed for
    full_attention_layers: int
    kv_cell_bytes: int  # bytes per KV token on one rank, all full-attention layers, K and V
    kv_dtype: str  # torch dtype name, e.g. "bfloat16"
    hybrid: bool  # a mamba / linear-attention hybrid
    mamba_layers: int = 0
    mamba_slot_bytes: int = 0  # mamba_cache_per_req: conv + SSM state of one slot, one rank
    mamba_conv_bytes: int = 0  # of which conv state
    mamba_ssm_bytes: int = 0  # of which SSM (temporal) state
    mamba_conv_dtype: str | None = None
    mamba_ssm_dtype: str | None = None
    weights_bytes: int | None = None  # the whole checkpoint, every rank's share together
    weights_basis: str | None = None  # "model.safetensors.index.json", "safetensors headers" ...
    draft_weights_bytes: int | None = None
    # KV layers SGLang 0.5.14+ adds to every target KV token for an EAGLE/MTP draft (with a draft
    # path its layers; without one the TARGET config's num_nextn_predict_layers, often none)
    draft_kv_layers: int | None = None
    draft_worker_layers: int | None = None  # the draft worker's own KV layers (draft-mode config)
    multimodal: bool = False  # SGLang's model_config.is_multimodal: 0.5.23 reserves its cache
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class GpuMemory:
    """One GPU's memory as the plan uses it: measured by NVML on the host, or nominal."""

    name: str
    total_bytes: int
    free_bytes: int
    basis: str  # "NVML on <host>" or "nominal for gpu.type H200"
    index: int | None = None


@dataclass(frozen=True)
class MemoryAnswer:
    """The probe's ``memory`` section, decoded (``protocol.decode_plan_answer``): what the host
    knows about the model and its GPUs. ``model`` is None when SGLang's classes could not
    compute the shapes (``shapes_error`` says why); ``text_config`` then lets orch mirror them."""

    model: ModelMemory | None
    shapes_error: str | None = None
    text_config: Mapping[str, Any] | None = None
    weights_bytes: int | None = None
    weights_basis: str | None = None
    weights_error: str | None = None
    gpus: tuple[GpuMemory, ...] = ()
    gpu_error: str | None = None
    default_mem_fraction_static: float | None = None
    default_error: str | None = None
    draft_weights_bytes: int | None = None  # --speculative-draft-model-path's checkpoint
    draft_weights_basis: str | None = None
    draft_weights_error: str | None = None
    # SGLANG_MAMBA_SSM_DTYPE / SGLANG_MAMBA_CONV_DTYPE as SGLang read them after resolving
    # (--mamba-ssm-dtype is written there); only those with a value
    env: Mapping[str, str] = field(default_factory=dict)
    error: str | None = None  # the probe could not build the section at all


# -- orch's mirror of SGLang's shapes, for when its classes cannot be imported -------------------
# configs/qwen3_next.py (mamba2_cache_params), configs/mamba_utils.py (Mamba2StateShape.create,
# mamba2_state_dtype, mamba_cache_per_req) and pool_configurator._compute_cell_size, for the
# Qwen3-Next / Qwen3.5 family of hybrids (linear_* keys, full_attention_interval) and for plain
# MHA models. Tests check it against SGLang's own classes in the real-SGLang tier.

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8_e4m3fn": 1, "float8_e5m2": 1}


def _count(config: Mapping[str, Any], name: str) -> int | None:
    value = config.get(name)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mirrored_model(
    config: Mapping[str, Any],
    *,
    attention_tp: int,
    kv_dtype: str | None = None,
    env: Mapping[str, str] | None = None,
    basis: str = "orch's mirror of SGLang's shape code over config.json",
) -> ModelMemory | None:
    """The shapes SGLang would compute for ``config`` (a config.json, or its text_config),
    or None for a family orch does not mirror."""
    text = config.get("text_config")
    top = config
    if isinstance(text, Mapping):
        config = text
    env = env or {}
    layers = _count(config, "num_hidden_layers")
    heads = _count(config, "num_attention_heads")
    if layers is None or heads is None:
        return None
    kv_heads = _count(config, "num_key_value_heads") or heads
    hidden = _count(config, "hidden_size") or 0
    head_dim = _count(config, "head_dim") or (hidden // heads if heads else 0)
    model_dtype = str(
        config.get("dtype") or config.get("torch_dtype") or top.get("torch_dtype") or "bfloat16"
    )
    kv = model_dtype if kv_dtype in (None, "auto") else str(kv_dtype)
    kv_bytes = DTYPE_BYTES.get(kv.removeprefix("torch."), 2)
    kv_per_rank = max(1, kv_heads // attention_tp) if kv_heads >= attention_tp else 1
    interval = _count(config, "full_attention_interval")
    architectures = top.get("architectures")
    architecture = (
        str(architectures[0]) if isinstance(architectures, list) and architectures else None
    )
    context = _count(config, "max_position_embeddings")
    # SGLang 0.5.23 adds the TARGET config's num_nextn_predict_layers to a path-less MTP draft's
    # KV cell (none for Qwen3.5, whose MTP layers are mtp_num_hidden_layers); the draft worker
    # itself runs the MTP layers (spec_aux_hidden_state.py, ModelConfig(is_draft_model=True))
    draft = _count(config, "num_nextn_predict_layers")
    worker = _count(config, "mtp_num_hidden_layers") or draft
    multimodal = isinstance(top.get("vision_config"), Mapping)
    if interval is None or _count(config, "linear_num_value_heads") is None:
        return ModelMemory(
            basis=basis,
            architecture=architecture,
            context_len=context,
            attention_tp=attention_tp,
            full_attention_layers=layers,
            kv_cell_bytes=kv_per_rank * head_dim * 2 * layers * kv_bytes,
            kv_dtype=kv,
            hybrid=False,
            draft_kv_layers=draft,
            draft_worker_layers=worker,
            multimodal=multimodal,
        )
    full = [i for i in range(layers) if (i + 1) % interval == 0]
    linear = layers - len(full)
    key_heads = _count(config, "linear_num_key_heads") or 0
    value_heads = _count(config, "linear_num_value_heads") or 0
    key_dim = _count(config, "linear_key_head_dim") or 0
    value_dim = _count(config, "linear_value_head_dim") or 0
    kernel = _count(config, "linear_conv_kernel_dim") or 1
    conv_dim = value_dim * value_heads + 2 * key_heads * key_dim
    conv_dtype = env.get("SGLANG_MAMBA_CONV_DTYPE") or "bfloat16"
    ssm_dtype = str(config.get("mamba_ssm_dtype") or "float32")
    ssm_dtype = env.get("SGLANG_MAMBA_SSM_DTYPE") or ssm_dtype
    conv = conv_dim // attention_tp * (kernel - 1) * DTYPE_BYTES.get(conv_dtype, 2)
    ssm = value_heads // attention_tp * value_dim * key_dim * DTYPE_BYTES.get(ssm_dtype, 4)
    return ModelMemory(
        basis=basis,
        architecture=architecture,
        context_len=context,
        attention_tp=attention_tp,
        full_attention_layers=len(full),
        kv_cell_bytes=kv_per_rank * head_dim * 2 * len(full) * kv_bytes,
        kv_dtype=kv,
        hybrid=True,
        mamba_layers=linear,
        mamba_slot_bytes=(conv + ssm) * linear,
        mamba_conv_bytes=conv * linear,
        mamba_ssm_bytes=ssm * linear,
        mamba_conv_dtype=conv_dtype,
        mamba_ssm_dtype=ssm_dtype,
        draft_kv_layers=draft,
        draft_worker_layers=worker,
        multimodal=multimodal,
    )


def nominal_gpu(name: str, memory_gb: int) -> GpuMemory:
    """A GPU known only by its type: the size the plan's simulated GPU tells SGLang, all free."""
    total = memory_gb * GIB
    return GpuMemory(
        name=f"NVIDIA {name}",
        total_bytes=total,
        free_bytes=total,
        basis=f"nominal size of gpu.type {name}, all free: no NVML here",
    )
