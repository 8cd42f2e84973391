"""The probe: SGLang's own parsing and resolution of a command line on the host, and its
``memory`` section (the model's shapes, the checkpoint's bytes, the GPUs)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestrator.effective.plan import CachedAnswer, PlanAnswer, Provenance
from orchestrator.fleet.protocol.common import Reader, Request
from orchestrator.model import frozen_map
from orchestrator.sglang.memory.shapes import GpuMemory, MemoryAnswer, ModelMemory


def plan_request(request: Mapping[str, Any], timeout: float) -> Request:
    """The probe reads its request (which carries the server's environment) on stdin (``-``):
    no file, no transfer of its own."""
    return Request(("-",), json.dumps(dict(request)).encode(), timeout)


def decode_plan_answer(document: Any) -> PlanAnswer:
    """The probe: SGLang's own parsing and resolution of a command line."""
    reader = Reader(document, "sglang_probe answer")
    provenance: dict[str, tuple[Provenance, ...]] = {}
    for name, entries in reader.mapping("provenance").items():
        if not isinstance(entries, list):
            continue
        provenance[str(name)] = tuple(
            Provenance(
                source=str(entry.get("source", "?")),
                value=entry.get("value"),
                file=entry.get("file") if isinstance(entry.get("file"), str) else None,
                line=entry.get("line") if isinstance(entry.get("line"), int) else None,
            )
            for entry in entries
            if isinstance(entry, dict)
        )
    error = reader.child("error")
    raised_in = None
    if error is not None and (raised := error.child("raised_in")) is not None:
        function = raised.document
        raised_in = f"{function.get('function')} ({function.get('file')}:{function.get('line')})"
    simulated = reader.child("simulated_gpu")
    return PlanAnswer(
        ok=reader.flag("ok", False),
        sglang_version=reader.opt_text("sglang_version"),
        standin=reader.flag("standin", False),
        mode=reader.text("mode", ""),
        simulated_gpu=simulated.text("name") if simulated is not None else None,
        error_stage=error.text("stage", "?") if error is not None else None,
        error_type=error.text("type", "?") if error is not None else None,
        error_message=error.text("message", "") if error is not None else None,
        error_raised_in=raised_in,
        raw=frozen_map(reader.mapping("raw")),
        effective=frozen_map(reader.mapping("effective")),
        defaults=frozen_map(reader.mapping("defaults")),
        provenance=frozen_map(provenance),
        logs=reader.texts("logs"),
        plugins=reader.texts("plugins"),
        memory=decode_memory(reader.child("memory")),
        cache=decode_cache(reader.child("cache")),
        candidates=tuple(decode_plan_answer(candidate) for candidate in reader.items("candidates")),
    )


def decode_cache(reader: Reader | None) -> CachedAnswer | None:
    """The probe's ``cache`` section (remote/probe/cache.py); None when it has none."""
    if reader is None:
        return None
    return CachedAnswer(
        hit=reader.flag("hit", False),
        stored=reader.flag("stored", False),
        key=reader.opt_text("key"),
        age_s=reader.opt_number("age_s"),
        note=reader.opt_text("note"),
        lookup_s=reader.opt_number("lookup_s"),
    )


def decode_memory(reader: Reader | None) -> MemoryAnswer | None:
    """The probe's ``memory`` section (docs/agent.md): None when it has none (a refusal, a
    probe older than it)."""
    if reader is None:
        return None
    if reader.has("error"):
        return MemoryAnswer(model=None, error=reader.text("error"))
    weights = _checkpoint(reader.child("weights"))
    draft = _checkpoint(reader.child("draft_weights"))
    shapes = reader.child("shapes")
    text_config = reader.child("text_config")
    env = {str(k): v for k, v in reader.mapping("env").items() if v is not None}
    if not all(isinstance(v, str) for v in env.values()):
        raise reader.bad("env", "an object of strings")
    gpus = tuple(
        _gpu_memory(Reader(raw, f"{reader.what}.gpus[{index}]"))
        for index, raw in enumerate(reader.items("gpus"))
    )
    return MemoryAnswer(
        model=None if shapes is None else _model_memory(shapes, weights, draft),
        shapes_error=reader.opt_text("shapes_error"),
        text_config=None if text_config is None else frozen_map(text_config.document),
        weights_bytes=weights[0],
        weights_basis=weights[1],
        weights_error=weights[2],
        gpus=gpus,
        gpu_error=reader.opt_text("gpu_error"),
        default_mem_fraction_static=reader.opt_number("default_mem_fraction_static"),
        default_error=reader.opt_text("default_mem_fraction_static_error"),
        draft_weights_bytes=draft[0],
        draft_weights_basis=draft[1],
        draft_weights_error=draft[2],
        env=frozen_map(env),
    )


def _checkpoint(reader: Reader | None) -> tuple[int | None, str | None, str | None]:
    """A checkpoint's bytes, where they were read from, and why not."""
    if reader is None:
        return None, None, None
    return reader.opt_integer("bytes"), reader.opt_text("basis"), reader.opt_text("error")


def _draft_worker_layers(draft: Reader | None) -> int | None:
    """The draft worker's own KV layers: its MTP layers in draft mode, else all its layers."""
    if draft is None:
        return None
    nextn = draft.opt_integer("nextn_predict_layers")
    return nextn if nextn is not None else draft.opt_integer("layers")


def _model_memory(
    shapes: Reader,
    weights: tuple[int | None, str | None, str | None],
    draft: tuple[int | None, str | None, str | None],
) -> ModelMemory:
    mamba = shapes.child("mamba")
    draft_model = shapes.child("draft")
    return ModelMemory(
        basis="SGLang's classes: " + ", ".join(shapes.texts("sources")),
        architecture=shapes.opt_text("architecture"),
        context_len=shapes.opt_integer("context_len"),
        attention_tp=shapes.integer("attn_tp_size"),
        full_attention_layers=shapes.integer("full_attention_layers"),
        kv_cell_bytes=shapes.integer("kv_cell_bytes"),
        kv_dtype=shapes.text("kv_dtype"),
        hybrid=mamba is not None,
        mamba_layers=mamba.integer("layers") if mamba is not None else 0,
        mamba_slot_bytes=mamba.integer("slot_bytes") if mamba is not None else 0,
        mamba_conv_bytes=mamba.integer("conv_bytes") if mamba is not None else 0,
        mamba_ssm_bytes=mamba.integer("ssm_bytes") if mamba is not None else 0,
        mamba_conv_dtype=mamba.text("conv_dtype") if mamba is not None else None,
        mamba_ssm_dtype=mamba.text("ssm_dtype") if mamba is not None else None,
        weights_bytes=weights[0],
        weights_basis=weights[1],
        draft_weights_bytes=draft[0],
        # the draft layers 0.5.23's EAGLE KV cell holds besides the target's (docs/agent.md)
        draft_kv_layers=draft_model.opt_integer("eagle_draft_layers") if draft_model else None,
        draft_worker_layers=_draft_worker_layers(draft_model),
        multimodal=shapes.flag("multimodal"),
        notes=shapes.texts("notes"),
    )


def _gpu_memory(gpu: Reader) -> GpuMemory:
    total = gpu.integer("total_bytes")
    free = gpu.opt_integer("free_bytes")
    name = gpu.text("name")
    basis = gpu.text("basis")
    if free is None:  # a simulated GPU: its nominal size, all free
        free = total
        basis = f"{basis} {name}: the plan's gpu.type, free memory not measured (taken as all free)"
    return GpuMemory(
        name=name, total_bytes=total, free_bytes=free, basis=basis, index=gpu.opt_integer("index")
    )
