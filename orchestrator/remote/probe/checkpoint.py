"""The model's files on this host: its ``config.json`` (what orch mirrors SGLang's arithmetic
over when SGLang's classes cannot run) and the checkpoint's bytes, no tensor data read."""

from __future__ import annotations

import json
import os
from typing import Any

from orchestrator.remote.probe.values import MIB, describe

SAFETENSORS_INDEX = "model.safetensors.index.json"
MAX_SAFETENSORS_HEADER = 100 * MIB  # the format's own limit is 100 MB


def read_text_config(model_path: str) -> dict[str, Any]:
    """``config.json`` of the model directory on this machine (the one the request supplied
    when the path is not here): its ``text_config`` (``llm_config``) for VL models, else the
    whole; what orch mirrors SGLang's arithmetic over when SGLang's classes were not run."""
    path = os.path.join(model_path, "config.json")
    try:
        with open(path, encoding="utf-8") as handle:
            config = json.load(handle)
    except (OSError, ValueError) as exc:
        return {"text_config": None, "text_config_error": f"{path}: {describe(exc)}"}
    if not isinstance(config, dict):
        return {"text_config": None, "text_config_error": f"{path}: not a JSON object"}
    text = config.get("text_config") or config.get("llm_config")
    architectures = config.get("architectures") or [None]
    return {
        "text_config": text if isinstance(text, dict) else config,
        "text_config_key": "text_config"
        if isinstance(config.get("text_config"), dict)
        else ("llm_config" if isinstance(text, dict) else None),
        "config_architecture": architectures[0] if isinstance(architectures, list) else None,
    }


def checkpoint_size(path: str) -> dict[str, Any] | None:
    """The checkpoint's bytes on this host, no tensor data read: ``model.safetensors.index.
    json``'s ``metadata.total_size``, else the sum of the tensors' byte ranges in each
    safetensors header (those the index names, as SGLang's loader keeps them)."""
    if not path:
        return None
    out: dict[str, Any] = {"path": path, "bytes": None, "basis": None}
    if not os.path.isdir(path):
        hub_id = not path.startswith(("/", ".", "~")) and path.count("/") <= 1
        out["error"] = (
            "a Hub id: the checkpoint is not a directory on this host"
            if hub_id and not os.path.exists(path)
            else "not a directory on this host"
        )
        return out
    names = None
    index_path = os.path.join(path, SAFETENSORS_INDEX)
    if os.path.isfile(index_path):
        try:
            with open(index_path, encoding="utf-8") as handle:
                index = json.load(handle)
            total = (index.get("metadata") or {}).get("total_size")
            if isinstance(total, (int, float)) and not isinstance(total, bool) and total > 0:
                return {**out, "bytes": int(total), "basis": f"{SAFETENSORS_INDEX} total_size"}
            weight_map = index.get("weight_map")
            if isinstance(weight_map, dict):
                names = sorted({str(name) for name in weight_map.values()})
        except (OSError, ValueError, AttributeError) as exc:
            out["note"] = f"{SAFETENSORS_INDEX} unreadable: {describe(exc)}"
    if names is None:
        names = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    if not names:
        return {**out, "error": "no *.safetensors files in the directory"}
    try:
        total = sum(safetensors_bytes(os.path.join(path, name)) for name in names)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as exc:
        return {**out, "error": describe(exc)}
    return {**out, "bytes": total, "basis": f"safetensors headers of {len(names)} file(s)"}


def safetensors_bytes(path: str) -> int:
    """The bytes of a safetensors file's tensors, from its header alone: an 8-byte
    little-endian length, then that much JSON, ``{name: {"data_offsets": [begin, end]}}``."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
        if not 0 < length <= MAX_SAFETENSORS_HEADER:
            raise ValueError(f"{path}: not a safetensors file (header length {length})")
        header = json.loads(handle.read(length))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: the header is not a JSON object")
    total = 0
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        total += int(end) - int(begin)
    return total
