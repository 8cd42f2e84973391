"""What the stand-in knows of the model: whether its path resolves, and a few config facts.

SGLang reads ``config.json`` through transformers. The stand-in accepts a Hub id without any network
(as if it were cached), reads ``config.json`` from a local directory when there is one, and treats
a local directory without it as the incident's model (Qwen3.6-27B, a hybrid Mamba architecture).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ARCHITECTURE = "Qwen3_5ForConditionalGeneration"
DEFAULT_CONTEXT = 262144

# Architectures SGLang serves with a Mamba (linear-attention) state cache: the mamba-strategy
# rules (docs/sglang-facts.md §5) apply to these only.
HYBRID_ARCHITECTURES = frozenset(
    {
        "Qwen3_5ForConditionalGeneration",
        "Qwen3_5MoeForConditionalGeneration",
        "Qwen3NextForCausalLM",
        "NemotronHForCausalLM",
        "FalconH1ForCausalLM",
        "GraniteMoeHybridForCausalLM",
        "KimiLinearForCausalLM",
    }
)

_HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(/[\w.-]+)?")


@dataclass(frozen=True)
class ModelFacts:
    architecture: str
    model_type: str | None
    context_len: int  # the model's own, before --context-length
    has_generation_config: bool
    local: bool

    @property
    def hybrid(self) -> bool:
        return self.architecture in HYBRID_ARCHITECTURES


def looks_like_hub_id(path: str) -> bool:
    return not path.startswith((".", "/", "~")) and _HUB_ID.fullmatch(path) is not None


def resolvable(path: str) -> bool:
    """False where transformers would raise ``Incorrect path_or_model_id``."""
    return Path(path).exists() or looks_like_hub_id(path)


def _context_from(config: dict[str, Any]) -> int:
    for section in (config.get("text_config") or {}, config):
        value = section.get("max_position_embeddings")
        if isinstance(value, int) and value > 0:
            return value
    return DEFAULT_CONTEXT


def model_facts(path: str) -> ModelFacts:
    directory = Path(path)
    config: dict[str, Any] = {}
    config_file = directory / "config.json"
    if config_file.is_file():
        try:
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            loaded = {}
        if isinstance(loaded, dict):
            config = loaded
    architectures = config.get("architectures")
    architecture = (
        str(architectures[0])
        if isinstance(architectures, list) and architectures
        else DEFAULT_ARCHITECTURE
    )
    model_type = config.get("model_type") if config else "qwen3_5"
    return ModelFacts(
        architecture=architecture,
        model_type=str(model_type) if model_type is not None else None,
        context_len=_context_from(config),
        has_generation_config=(directory / "generation_config.json").is_file(),
        local=directory.is_dir(),
    )
