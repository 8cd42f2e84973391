"""A few of SGLang's real resolution rules, applied to a ServerArgs record.

Seen running SGLang's own resolution on a simulated H200 (the real-SGLang tier,
``tests/sglang_real``, runs the same cases): defaults filled in, speculative-decoding adjustments,
and the mamba radix-cache strategy -- including the incident's ValueError on 0.5.11
(sglang/srt/server_args.py, ``ServerArgs._handle_mamba_radix_cache``). The stand-in imitates a
CUDA host with sm90 GPUs; anything SGLang would work out from the GPU is fixed here.

Each rule writes the record's attributes itself (``args.page_size = 1``), as SGLang's handlers do,
so whoever watches the writes sees which rule changed what: orch's probe traces them up to 0.5.18,
and from 0.5.19 the stand-in's record declares them (``_resolved_overrides``, see
``sglang/srt/server_args.py``). Where SGLang raises, the rule raises SGLang's exception (its type
and message); ``refusal_of`` tells the stand-in's server which traceback to print for it.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any

from sglang._standin.knobs import Knobs
from sglang._standin.model import DEFAULT_ARCHITECTURE, ModelFacts, model_facts, resolvable
from sglang._standin.tracebacks import (
    EXTRA_BUFFER_NO_RADIX,
    INCIDENT,
    NO_BUFFER_OVERLAP,
    NOT_A_MODEL,
)

EAGLE_FAMILY = frozenset({"EAGLE", "EAGLE3", "NEXTN", "STANDALONE"})

# What SGLang raises, by the name of the traceback the stand-in's server prints for it.
_REFUSALS: dict[str, tuple[type[Exception], str]] = {
    "incident": (ValueError, INCIDENT),
    "extra_buffer_without_radix": (ValueError, EXTRA_BUFFER_NO_RADIX),
    "no_buffer_overlap": (AssertionError, NO_BUFFER_OVERLAP),
    "model_not_found": (OSError, NOT_A_MODEL),
}
_REFUSAL = "orch_standin_refusal"  # the exception's attribute naming its kind and model path


def refusal(kind: str, path: str, arch: str = DEFAULT_ARCHITECTURE) -> Exception:
    """The exception SGLang raises for ``kind``: a plain ValueError, AssertionError or OSError
    with SGLang's message, as the probe must see it."""
    error_type, template = _REFUSALS[kind]
    error = error_type(template.format(arch=arch, path=path))
    vars(error)[_REFUSAL] = (kind, path)
    return error


def refusal_of(error: BaseException) -> tuple[str, str] | None:
    """``(kind, model path)`` of an exception ``refusal`` made, else None."""
    found = vars(error).get(_REFUSAL)
    return found if isinstance(found, tuple) else None


# Defaults SGLang fills in on an sm90 CUDA host, as its resolution shows them (field, from, to).
# Applied only where the release has the field and it still holds the first value.
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
    # 0.5.19+ family (sglang/srt/arg_groups/ handlers)
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
    """SGLang's CUDA-graph batch sizes on a large GPU (0.5.11: sglang/srt/server_args.py,
    ``ServerArgs._generate_cuda_graph_batch_sizes``)."""
    if spec:
        sizes = [*range(1, 9), *range(10, 33, 2), *range(40, 65, 4), *range(72, 257, 8)]
    else:
        sizes = [1, 2, 4, 8, 12, 16, 24, 32, *range(40, 257, 8)]
    sizes += list(range(272, max_bs + 1, 16))
    return [size for size in sizes if size <= max_bs]


def prefill_token_sizes(max_tokens: int) -> list[int]:
    """SGLang's piecewise (prefill) CUDA-graph token counts, up to ``max_tokens`` (0.5.11:
    ``ServerArgs._generate_piecewise_cuda_graph_tokens``)."""
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


class Resolver:
    """Resolves ``args`` (a ServerArgs record, or the view of one that declares each write) in
    place; ``fields`` are the release's ServerArgs fields, ``log`` is SGLang's logger."""

    def __init__(
        self, knobs: Knobs, args: Any, fields: frozenset[str], log: Callable[[str], None]
    ) -> None:
        self.knobs = knobs
        self.args = args
        self.fields = fields
        self.log = log
        self.model: ModelFacts | None = None

    def has(self, name: str) -> bool:
        return name in self.fields

    def get(self, name: str) -> Any:
        return getattr(self.args, name) if name in self.fields else None

    def holds(self, name: str, value: Any) -> bool:
        """The release has ``name`` and it still holds ``value`` (SGLang's ``if x is None``)."""
        return self.has(name) and self.get(name) == value

    @property
    def spec(self) -> str | None:
        algorithm = self.get("speculative_algorithm")
        return None if algorithm is None else str(algorithm)

    @property
    def architecture(self) -> str:
        return self.model.architecture if self.model is not None else DEFAULT_ARCHITECTURE

    def run(self) -> None:
        self.model = self.model_config()
        self.missing_default_values()
        if self.model.hybrid:
            self.mamba()
        self.attention_backend()
        self.cuda_host_defaults()
        if self.spec in EAGLE_FAMILY:
            self.eagle_family()
        self.cuda_graphs()

    def model_config(self) -> ModelFacts:
        """transformers reads the model's config.json (or raises for a path it cannot use)."""
        path = str(self.args.model_path)
        if not resolvable(path):
            raise refusal("model_not_found", path)
        model = model_facts(path)
        parsing_resolves = not self.knobs.resolves_in_run_server
        if parsing_resolves and model.local and not model.has_generation_config:
            self.log(
                f"Failed to load generation config for {path}: {path} does not appear to have a "
                "file named generation_config.json. Checkout "
                f"'https://huggingface.co/{path}/tree/main' for available files.. "
                "Proceeding without generation config."
            )
        return model

    def missing_default_values(self) -> None:
        args = self.args
        if self.holds("tokenizer_path", None):
            args.tokenizer_path = args.model_path
        if self.holds("served_model_name", None):
            args.served_model_name = args.model_path
        if self.holds("random_seed", None):
            args.random_seed = random.randint(0, 1 << 30)  # noqa: S311 - not crypto

    def cuda_host_defaults(self) -> None:
        for name, when, value in _FILLED:
            if self.holds(name, when):
                setattr(self.args, name, copy.deepcopy(value))

    def mamba(self) -> None:
        args = self.args
        no_radix = bool(self.get("disable_radix_cache"))
        if self.has("mamba_scheduler_strategy"):  # 0.5.11 .. 0.5.13
            strategy = args.mamba_scheduler_strategy
            if strategy == "auto":
                strategy = "no_buffer"  # _handle_missing_default_values, no log line
                args.mamba_scheduler_strategy = strategy
            if strategy == "extra_buffer" and no_radix:
                raise refusal("extra_buffer_without_radix", str(args.model_path))
            if no_radix or strategy != "no_buffer":
                return
            if self.spec is not None:
                raise refusal("incident", str(args.model_path), self.architecture)
            self.no_buffer_adjustments()
            return
        if self.has("mamba_radix_cache_strategy"):  # 0.5.14+
            strategy = args.mamba_radix_cache_strategy
            if strategy == "auto":
                args.mamba_radix_cache_strategy = "no_buffer" if no_radix else "extra_buffer"
            elif strategy == "no_buffer" and not no_radix and self.spec is not None:
                if not self.get("disable_overlap_schedule"):
                    raise refusal("no_buffer_overlap", str(args.model_path))
            elif strategy == "no_buffer" and not no_radix:
                self.no_buffer_adjustments()
            if not no_radix and self.has("uses_mamba_radix_cache"):
                args.uses_mamba_radix_cache = True

    def no_buffer_adjustments(self) -> None:
        args = self.args
        page_size = self.get("page_size")
        if page_size not in (None, 1):
            self.log(
                f"{self.architecture} with radix cache requires page_size=1 in the current "
                f"Mamba scheduling mode (no_buffer), but got {page_size}. Automatically setting "
                "page_size=1."
            )
            args.page_size = 1
        if not self.get("disable_overlap_schedule"):
            self.log(
                "Disabling overlap schedule since mamba no_buffer is not compatible with overlap "
                "schedule, try to use --disable-radix-cache if overlap schedule is necessary"
            )
            args.disable_overlap_schedule = True

    def attention_backend(self) -> None:
        if not self.holds("attention_backend", None):
            return
        # is_no_spec_infer_or_topk_one(): FA3 unless topk > 1 or (topk 1 and pages > 1)
        topk = self.get("speculative_eagle_topk")
        page_size = self.get("page_size")
        fa3 = topk is None or (topk == 1 and page_size in (None, 1))
        backend = "fa3" if fa3 else "flashinfer"
        self.log(f"Attention backend not specified. Use {backend} backend by default.")
        self.args.attention_backend = backend

    def eagle_family(self) -> None:
        # SGLang's auto choice for models without a tuned entry.
        args = self.args
        steps = args.speculative_num_steps
        topk = args.speculative_eagle_topk
        if steps is None:
            steps = 3
            args.speculative_num_steps = steps
        if topk is None:
            topk = 1
            args.speculative_eagle_topk = topk
        if args.speculative_num_draft_tokens is None:
            args.speculative_num_draft_tokens = steps + 1

        if self.holds("max_running_requests", None):
            self.log(
                "Max running requests is reset to 48 for speculative decoding. You can override "
                "this by explicitly setting --max-running-requests."
            )
            args.max_running_requests = 48

        if self.knobs.version < (0, 5, 14):  # SGLANG_ENABLE_SPEC_V2 era
            if topk == 1:
                self.log(
                    "Spec v2 is enabled by default for eagle/eagle3/standalone speculative "
                    "decoding."
                )
            else:
                self.log(
                    "Spec v1 is used for eagle/eagle3/standalone speculative decoding because spec "
                    "v2 currently only supports topk = 1."
                )
                args.disable_overlap_schedule = True
        elif topk == 1 and self.get("disable_overlap_schedule"):
            self.log(
                "Non-overlap (synchronous) spec v2 is used for eagle/eagle3/standalone speculative "
                "decoding."
            )

        if topk == 1 and args.speculative_num_draft_tokens != steps + 1:
            self.log(
                "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
                "speculative_eagle_topk == 1"
            )
            args.speculative_num_draft_tokens = steps + 1

    def cuda_graphs(self) -> None:
        args = self.args
        spec = self.spec is not None
        chunked = self.get("chunked_prefill_size") or 8192
        if self.has("cuda_graph_config"):  # 0.5.14+: one nested config
            if args.cuda_graph_config is not None:
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
            args.cuda_graph_config = {
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
        if self.holds("cuda_graph_max_bs", None):
            args.cuda_graph_max_bs = 256
        if self.holds("cuda_graph_bs", None):
            args.cuda_graph_bs = decode_batch_sizes(spec, self.get("cuda_graph_max_bs") or 256)
        if self.holds("piecewise_cuda_graph_max_tokens", None):
            args.piecewise_cuda_graph_max_tokens = chunked
        if self.holds("piecewise_cuda_graph_tokens", None):
            args.piecewise_cuda_graph_tokens = prefill_token_sizes(
                self.get("piecewise_cuda_graph_max_tokens") or chunked
            )
