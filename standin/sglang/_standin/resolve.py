"""A few of SGLang's real resolution rules: given ServerArgs in, effective ServerArgs out.

Seen running SGLang's own resolution on a simulated H200 (FACTS.md section 5 and the
``captures/resolve-*`` files): defaults filled in, speculative-decoding adjustments, and the mamba
radix-cache strategy -- including the incident's ValueError on 0.5.11. The stand-in imitates a CUDA
host with sm90 GPUs; anything SGLang would work out from the GPU is fixed here.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from sglang._standin.knobs import Knobs
from sglang._standin.model import ModelFacts

EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})


class ResolutionFailure(Exception):
    """SGLang raised during resolution; ``kind`` names the traceback (see tracebacks.Traces)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind
        self.notes: list[str] = []  # the lines SGLang logged before it raised


# Defaults SGLang fills in on an sm90 CUDA host, as the captures show them (field, from, to).
# Applied only where the release has the field and the user did not set it.
_FILLED: tuple[tuple[str, Any, Any], ...] = (
    ("device", None, "cuda"),
    ("mem_fraction_static", None, 0.88),  # SGLang sizes it from the GPU; the value is illustrative
    ("chunked_prefill_size", None, 8192),
    ("page_size", None, 1),
    ("sampling_backend", None, "flashinfer"),
    ("grammar_backend", None, "xgrammar"),
    ("load_balance_method", "auto", "round_robin"),
    ("custom_weight_loader", None, []),
    ("mm_process_config", None, {}),
    ("expert_distribution_recorder_buffer_size", None, 1000),
    ("speculative_moe_runner_backend", None, "auto"),
    # 0.5.11 family
    ("disable_piecewise_cuda_graph", False, True),
    # 0.5.19+ family (resolve-0523-*)
    ("_speculative_draft_quantization_explicitly_set", None, False),
    ("_swa_full_tokens_ratio_explicitly_set", None, False),
    ("boundary_reduction", "auto", "rs+rsv"),
    ("dcp_comm_backend", None, "ag_rs"),
    ("enable_tf32_matmul", None, False),
    ("enable_tp_lm_head_all_to_all", None, False),
    ("encoder_transfer_backend", "auto", "zmq_to_scheduler"),
    ("grpc_worker_threads", None, 4),
    ("hicache_ratio", None, 2.0),
    ("mm_enable_dp_encoder", None, False),
    ("mm_feature_transport", None, "cpu"),
    ("prefill_decode_interval", None, 0),
    ("swa_full_tokens_ratio", None, 0.8),
)


def decode_batch_sizes(spec: bool, max_bs: int) -> list[int]:
    """SGLang's CUDA-graph batch sizes on a large GPU (captures resolve-0511-B/F/J)."""
    if spec:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
    else:
        sizes = [1, 2, 4, 8, 12, 16, 24, 32, *range(40, 257, 8)]
    sizes += list(range(272, max_bs + 1, 16))
    return [size for size in sizes if size <= max_bs]


def prefill_token_sizes(max_tokens: int) -> list[int]:
    """SGLang's piecewise (prefill) CUDA-graph token counts, up to ``max_tokens``."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, 8193, 512),
        *range(9216, max(max_tokens, 9216) + 1, 1024),
    ]
    return [size for size in sizes if size <= max_tokens]


@dataclass
class Resolution:
    values: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # SGLang's log lines, in order


class _Resolver:
    def __init__(
        self, knobs: Knobs, values: dict[str, Any], given: frozenset[str], model: ModelFacts
    ) -> None:
        self.knobs = knobs
        self.values = dict(values)
        self.given = given
        self.model = model
        self.notes: list[str] = []

    def has(self, name: str) -> bool:
        return name in self.values

    def get(self, name: str) -> Any:
        return self.values.get(name)

    def set(self, name: str, value: Any) -> None:
        if name in self.values:
            self.values[name] = value

    def fill(self, name: str, when: Any, value: Any) -> None:
        if self.has(name) and name not in self.given and self.get(name) == when:
            self.values[name] = value

    @property
    def spec(self) -> str | None:
        algorithm = self.get("speculative_algorithm")
        return None if algorithm is None else str(algorithm)

    def run(self) -> Resolution:
        path = self.get("model_path")
        self.fill("tokenizer_path", None, path)
        self.fill("served_model_name", None, path)
        self.fill("random_seed", None, random.randint(0, 1 << 30))  # noqa: S311 - not crypto
        if (
            not self.knobs.resolves_in_run_server
            and self.model.local
            and not self.model.has_generation_config
        ):
            self.notes.append(
                f"Failed to load generation config for {path}: {path} does not appear to have a "
                "file named generation_config.json. Checkout "
                f"'https://huggingface.co/{path}/tree/main' for available files.. "
                "Proceeding without generation config."
            )
        if self.model.hybrid:
            self.mamba()
        self.attention_backend()
        for name, when, value in _FILLED:
            self.fill(name, when, value)
        if self.spec in EAGLE_FAMILY:
            self.eagle_family()
        self.cuda_graphs()
        return Resolution(values=self.values, notes=self.notes)

    def mamba(self) -> None:
        no_radix = bool(self.get("disable_radix_cache"))
        if self.has("mamba_scheduler_strategy"):  # 0.5.11 .. 0.5.13
            strategy = self.get("mamba_scheduler_strategy")
            if strategy == "auto":
                strategy = "no_buffer"  # server_args.py l.1079-1082, no log line
                self.set("mamba_scheduler_strategy", strategy)
            if strategy == "extra_buffer" and no_radix:
                raise ResolutionFailure("extra_buffer_without_radix")
            if no_radix or strategy != "no_buffer":
                return
            if self.spec is not None:
                raise ResolutionFailure("incident")
            self.no_buffer_adjustments()
            return
        if self.has("mamba_radix_cache_strategy"):  # 0.5.14+
            strategy = self.get("mamba_radix_cache_strategy")
            if strategy == "auto":
                self.set("mamba_radix_cache_strategy", "no_buffer" if no_radix else "extra_buffer")
            elif strategy == "no_buffer" and not no_radix and self.spec is not None:
                if not self.get("disable_overlap_schedule"):
                    raise ResolutionFailure("no_buffer_overlap")
            elif strategy == "no_buffer" and not no_radix:
                self.no_buffer_adjustments()
            if not no_radix:
                self.set("uses_mamba_radix_cache", True)

    def no_buffer_adjustments(self) -> None:
        page_size = self.get("page_size")
        if page_size not in (None, 1):
            self.notes.append(
                f"{self.model.architecture} with radix cache requires page_size=1 in the current "
                f"Mamba scheduling mode (no_buffer), but got {page_size}. Automatically setting "
                "page_size=1."
            )
            self.set("page_size", 1)
        if not self.get("disable_overlap_schedule"):
            self.notes.append(
                "Disabling overlap schedule since mamba no_buffer is not compatible with overlap "
                "schedule, try to use --disable-radix-cache if overlap schedule is necessary"
            )
            self.set("disable_overlap_schedule", True)

    def attention_backend(self) -> None:
        if not self.has("attention_backend") or self.get("attention_backend") is not None:
            return
        # is_no_spec_infer_or_topk_one(): FA3 unless topk > 1 or (topk 1 and pages > 1)
        topk = self.get("speculative_eagle_topk")
        page_size = self.get("page_size")
        fa3 = topk is None or (topk == 1 and page_size in (None, 1))
        backend = "fa3" if fa3 else "flashinfer"
        self.notes.append(f"Attention backend not specified. Use {backend} backend by default.")
        self.set("attention_backend", backend)

    def eagle_family(self) -> None:
        # SGLang's auto choice for models without a tuned entry.
        steps = self.get("speculative_num_steps")
        topk = self.get("speculative_eagle_topk")
        if steps is None:
            steps = 3
            self.set("speculative_num_steps", steps)
        if topk is None:
            topk = 1
            self.set("speculative_eagle_topk", topk)
        if self.get("speculative_num_draft_tokens") is None:
            self.set("speculative_num_draft_tokens", steps + 1)

        if self.has("max_running_requests") and self.get("max_running_requests") is None:
            self.notes.append(
                "Max running requests is reset to 48 for speculative decoding. You can override "
                "this by explicitly setting --max-running-requests."
            )
            self.set("max_running_requests", 48)

        if self.knobs.version < (0, 5, 14):  # SGLANG_ENABLE_SPEC_V2 era
            if topk == 1:
                self.notes.append(
                    "Spec v2 is enabled by default for eagle/eagle3/standalone speculative "
                    "decoding."
                )
            else:
                self.notes.append(
                    "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec "
                    "v2 currently only supports topk = 1."
                )
                self.set("disable_overlap_schedule", True)
        elif topk == 1 and self.get("disable_overlap_schedule"):
            self.notes.append(
                "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative "
                "decoding."
            )

        if topk == 1 and self.get("speculative_num_draft_tokens") != steps + 1:
            self.notes.append(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1"
            )
            self.set("speculative_num_draft_tokens", steps + 1)

    def cuda_graphs(self) -> None:
        spec = self.spec is not None
        chunked = self.get("chunked_prefill_size") or 8192
        if self.has("cuda_graph_config"):  # 0.5.14+: one nested config
            if self.get("cuda_graph_config") is not None:
                return
            max_bs = self.get("cuda_graph_max_bs_decode") or self.get("cuda_graph_max_bs") or 256
            disabled = bool(self.get("disable_cuda_graph"))
            phase_tail = {
                "tc_compiler": "eager",
                "max_context_size": None,
                "full_prefill_max_req": None,
                "full_prefill_prefix_chunk_tokens": None,
                "max_seq_len": None,
            }
            self.values["cuda_graph_config"] = {
                "decode": {
                    "backend": "disabled" if disabled else "full",
                    "max_bs": max_bs,
                    "bs": decode_batch_sizes(spec, max_bs),
                    **phase_tail,
                },
                "prefill": {
                    "backend": "disabled",
                    "max_bs": chunked,
                    "bs": prefill_token_sizes(chunked),
                    **phase_tail,
                },
            }
            return
        if self.get("disable_cuda_graph"):
            return
        self.fill("cuda_graph_max_bs", None, 256)
        self.fill(
            "cuda_graph_bs", None, decode_batch_sizes(spec, self.get("cuda_graph_max_bs") or 256)
        )
        self.fill("piecewise_cuda_graph_max_tokens", None, chunked)
        self.fill(
            "piecewise_cuda_graph_tokens",
            None,
            prefill_token_sizes(self.get("piecewise_cuda_graph_max_tokens") or chunked),
        )


def resolve(
    knobs: Knobs, values: dict[str, Any], given: frozenset[str], model: ModelFacts
) -> Resolution:
    """Raises ResolutionFailure where SGLang raises."""
    resolver = _Resolver(knobs, values, given, model)
    try:
        return resolver.run()
    except ResolutionFailure as failure:
        failure.notes = resolver.notes
        raise
