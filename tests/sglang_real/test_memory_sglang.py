"""orch's memory budget (orchestrator/sglang/memory/) against SGLang's own pool sizing, 0.5.11 and
0.5.23: for each case, SGLang's functions run on CPU in its venv (sglang_budget_reference.py says
which, and what is supplied to them) and orch's ``plan_budget`` runs on the same inputs.

A case starts from ``rest``: what ``_profile_available_bytes`` has left after the weights and
the slack. orch gets a GPU and a checkpoint whose sizes give that rest (``P`` = 100 GiB,
``mem_fraction_static`` 0.9: weights = 90 - rest), and SGLang's resolved values through
``inputs_from``. The model's shapes are the Qwen3.6-27B copy's (orch's mirror, at
attention TP 1), handed to both sides alike: the shapes themselves are not what this checks.

Each venv runs the reference once for all its cases (~10 s to import SGLang), both at once.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from orchestrator.sglang.memory.budget import CUDA_CONTEXT_GIB, FAILS, Budget, plan_budget
from orchestrator.sglang.memory.rules import inputs_from
from orchestrator.sglang.memory.shapes import GIB, GpuMemory, ModelMemory, mirrored_model
from tests.conftest import REPO

VERSIONS = ("0.5.11", "0.5.23")
FIXTURE = {"0.5.11": "sglang_0511", "0.5.23": "sglang_0523"}
VERSION_TUPLE = {"0.5.11": (0, 5, 11), "0.5.23": (0, 5, 23)}
# 0.5.14 renamed SGLang's flag: each version's resolved values carry their own name
STRATEGY_FIELD = {"0.5.11": "mamba_scheduler_strategy", "0.5.23": "mamba_radix_cache_strategy"}
REFERENCE = Path(__file__).with_name("sglang_budget_reference.py")
MODEL_CONFIG = REPO / "standin" / "models" / "Qwen3.6-27B" / "config.json"  # the real one's copy
PRE_LOAD_GIB = 100.0  # P: free when SGLang measures
FRACTION = 0.9  # mem_fraction_static: slack = 10 GiB


def _model() -> ModelMemory:
    model = mirrored_model(json.loads(MODEL_CONFIG.read_text()), attention_tp=1)
    assert model is not None
    assert model.hybrid
    # A case's rest is what _profile_available_bytes leaves, multimodal reservation included
    # (0.5.23 takes it there): sized as a text-only model, orch's rest is the case's.
    return replace(model, multimodal=False)


MODEL = _model()


@dataclass(frozen=True)
class Case:
    """SGLang's resolved values for one launch, and the rest it is sized from."""

    name: str
    rest_gib: float
    max_running_requests: int | None = None
    max_mamba_cache_size: int | None = None
    mamba_full_memory_ratio: float = 0.9
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    strategy: str = "no_buffer"
    disable_overlap_schedule: bool = False
    disable_radix_cache: bool = False
    dp_size: int = 1
    enable_dp_attention: bool = False
    page_size: int = 1
    max_total_tokens: int | None = None
    context_len: int = 8192
    skip_decode_lock: bool = False  # SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK=1 (0.5.23 reads it)
    versions: tuple[str, ...] = VERSIONS

    @property
    def tp_size(self) -> int:  # DP attention over the TP ranks: attention TP 1 per rank
        return self.dp_size if self.enable_dp_attention else 1

    def request(self) -> dict[str, Any]:
        """The reference script's case: these values and the model's shapes."""
        values = {k: v for k, v in dataclasses.asdict(self).items() if k != "versions"}
        return values | {
            "slot_bytes": MODEL.mamba_slot_bytes,
            "cell_bytes": MODEL.kv_cell_bytes,
            "full_attention_layers": MODEL.full_attention_layers,
            "mamba_layers": MODEL.mamba_layers,
            "draft_kv_layers": MODEL.draft_kv_layers,
        }

    def effective(self, version: str) -> dict[str, Any]:
        """SGLang's resolved values as orch's plan reads them (plan.effective)."""
        return {
            "mem_fraction_static": FRACTION,
            "tp_size": self.tp_size,
            "pp_size": 1,
            "dp_size": self.dp_size,
            "enable_dp_attention": self.enable_dp_attention,
            "max_running_requests": self.max_running_requests,
            "max_mamba_cache_size": self.max_mamba_cache_size,
            "mamba_full_memory_ratio": self.mamba_full_memory_ratio,
            "disable_radix_cache": self.disable_radix_cache,
            STRATEGY_FIELD[version]: self.strategy,
            "disable_overlap_schedule": self.disable_overlap_schedule,
            "speculative_algorithm": self.speculative_algorithm,
            "speculative_num_draft_tokens": self.speculative_num_draft_tokens,
            "page_size": self.page_size,
            "max_total_tokens": self.max_total_tokens,
            "context_length": self.context_len,
        }


CASES = (
    # the incident's deployment: explicit slots, MTP, extra_buffer with overlap (5 per request)
    Case(
        "explicit-slots-eagle-extra-buffer",
        39.0,
        max_running_requests=48,
        max_mamba_cache_size=24,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=4,
        strategy="extra_buffer",
    ),
    Case(
        "explicit-slots-eagle-extra-buffer-no-overlap",
        39.0,
        max_running_requests=48,
        max_mamba_cache_size=24,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=4,
        strategy="extra_buffer",
        disable_overlap_schedule=True,
    ),
    Case("ratio-sized", 39.0),
    Case(
        "ratio-sized-eagle-extra-buffer-capped-by-mamba",
        39.0,
        max_running_requests=16,
        mamba_full_memory_ratio=0.4,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=4,
        strategy="extra_buffer",
    ),
    Case("ratio-sized-paged-with-a-token-cap", 39.0, page_size=64, max_total_tokens=100_000),
    Case(
        "radix-cache-off-slots-from-requests",
        39.0,
        max_running_requests=32,
        disable_radix_cache=True,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=3,
    ),
    Case(
        "dp-attention",
        39.0,
        max_running_requests=64,
        max_mamba_cache_size=48,
        speculative_algorithm="EAGLE",
        speculative_num_draft_tokens=4,
        strategy="extra_buffer",
        dp_size=2,
        enable_dp_attention=True,
    ),
    Case(
        "ngram-no-draft-model",
        39.0,
        max_running_requests=32,
        max_mamba_cache_size=48,
        speculative_algorithm="NGRAM",
        speculative_num_draft_tokens=8,
    ),
    Case("few-slots-cap-the-requests", 60.0, max_mamba_cache_size=12),
    Case(
        "skip-decode-lock-extra-buffer",
        39.0,
        max_mamba_cache_size=40,
        strategy="extra_buffer",
        skip_decode_lock=True,
    ),
    Case(
        "extra-buffer-lazy",
        39.0,
        max_running_requests=48,
        max_mamba_cache_size=40,
        strategy="extra_buffer_lazy",
        versions=("0.5.23",),
    ),  # 0.5.11 has no such strategy
    # failures: explicit slots larger than the rest; a rest too small for one slot by the ratio
    Case("slots-larger-than-the-rest", 2.0, max_running_requests=8, max_mamba_cache_size=24),
    Case("rest-too-small-for-the-ratio", 0.2),
)


@dataclass(frozen=True)
class Reference:
    """SGLang's answers for one version's cases, by name; or why there are none."""

    version: str
    answers: Mapping[str, Mapping[str, Any]]
    reported_version: str | None = None
    unavailable: str | None = None


@pytest.fixture(scope="module")
def references(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Mapping[str, Reference]:
    """Each available venv's answers; the two reference runs go at once (each imports SGLang)."""
    directory = tmp_path_factory.mktemp("memory-reference")
    started: dict[str, subprocess.Popen[str]] = {}
    unavailable: dict[str, str] = {}
    for version in VERSIONS:
        try:
            python: Path = request.getfixturevalue(FIXTURE[version])
        except pytest.skip.Exception as skipped:  # CI=true fails in sglang_python instead
            unavailable[version] = str(skipped)
            continue
        cases = directory / f"cases-{version}.json"
        cases.write_text(json.dumps([c.request() for c in CASES if version in c.versions]))
        with cases.open() as stdin:
            started[version] = subprocess.Popen(
                [str(python), str(REFERENCE)],
                stdin=stdin,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
    found: dict[str, Reference] = {
        version: Reference(version, {}, unavailable=reason)
        for version, reason in unavailable.items()
    }
    finished = {version: process.communicate(timeout=600) for version, process in started.items()}
    for version, (out, err) in finished.items():
        code = started[version].returncode
        assert code == 0, f"{REFERENCE.name} under {version}: exit {code}\n{err[-4000:]}"
        document = json.loads(out)
        answers = {answer["name"]: answer for answer in document["results"]}
        found[version] = Reference(version, answers, reported_version=document["sglang_version"])
    return found


def _reference(references: Mapping[str, Reference], version: str) -> Reference:
    reference = references[version]
    if reference.unavailable is not None:
        pytest.skip(reference.unavailable)
    return reference


def orch_budget(case: Case, version: str) -> Budget:
    """orch's plan_budget for the case: a GPU and weights that leave ``case.rest_gib``."""
    ranks = case.tp_size
    gpu = GpuMemory(
        name="NVIDIA H200",
        total_bytes=round(144 * GIB),
        free_bytes=round((PRE_LOAD_GIB + CUDA_CONTEXT_GIB) * GIB),
        basis="test",
    )
    weights_per_rank = PRE_LOAD_GIB * FRACTION - case.rest_gib
    model = replace(
        MODEL,
        weights_bytes=round(weights_per_rank * GIB) * ranks,
        weights_basis="derived from the case's rest",
    )
    env = {"SGLANG_OPT_MAMBA_SKIP_DECODE_LOCK": "1"} if case.skip_decode_lock else {}
    inputs = inputs_from(case.effective(version), env)
    return plan_budget(model, (gpu,) * ranks, inputs, version=VERSION_TUPLE[version])


def _sglang_stops_with(version: str, answer: Mapping[str, Any]) -> str | None:
    """The exception SGLang stops with, by type; None when it sizes its pools and serves."""
    rest = answer["rest_after_mamba_gib"]
    if version == "0.5.23" and rest is not None and rest <= 0:
        # _profile_available_bytes refuses it before the KV pool ("Loaded weights leave no GPU
        # memory ..."); the reference, which starts after that method's GPU read, does not run it
        return "ValueError"
    if answer["error"] is not None:
        return str(answer["error"]).split(":", 1)[0]
    if answer["max_running_requests"] <= 0:
        # 0.5.11 sizes 0 requests without a word; managers/tp_worker.py then stops it:
        # ``assert self.max_running_requests > 0, "max_running_request is zero"``
        return "AssertionError"
    return None


@pytest.mark.parametrize("version", VERSIONS)
def test_reference_runs_the_versions_own_sglang(
    version: str, references: Mapping[str, Reference]
) -> None:
    reference = _reference(references, version)
    assert reference.reported_version == version
    assert set(reference.answers) == {c.name for c in CASES if version in c.versions}


@pytest.mark.parametrize(
    ("version", "case"),
    [
        pytest.param(version, case, id=f"{version}-{case.name}")
        for version in VERSIONS
        for case in CASES
        if version in case.versions
    ],
)
def test_budget_matches_sglangs_pool_sizing(
    version: str, case: Case, references: Mapping[str, Reference]
) -> None:
    answer = _reference(references, version).answers[case.name]
    budget = orch_budget(case, version)
    # the derived GPU and weights leave orch the case's rest
    rest = budget.after_weights_gib - budget.slack_gib - budget.multimodal_reserve_gib
    assert rest == pytest.approx(case.rest_gib, abs=1e-6)
    assert budget.mamba is not None
    assert budget.mamba.slots_per_request == answer["mamba_ratio"]

    stops_with = _sglang_stops_with(version, answer)
    assert (budget.verdict == FAILS) == (stops_with is not None), (budget.failure, answer)
    if stops_with is not None:
        assert budget.failure is not None
        assert budget.failure.split(":", 1)[0] == stops_with, (budget.failure, answer["error"])
        return
    assert budget.failure is None
    assert budget.mamba.slots == answer["max_mamba_cache_size"]
    taken = budget.mamba.spec_reserve_gib + budget.mamba.pool_gib
    assert case.rest_gib - taken == pytest.approx(answer["rest_after_mamba_gib"], abs=1e-6)
    assert budget.kv_cell_bytes == answer["cell_bytes"]
    # orch's rest went through float GiB from whole bytes: one token (page) either way
    assert abs(budget.kv_tokens - answer["kv_tokens"]) <= case.page_size
    assert budget.kv_tokens % case.page_size == 0
    assert budget.max_running_requests == answer["max_running_requests"]


def test_the_grid_covers_both_failures_and_the_mamba_cap(
    references: Mapping[str, Reference],
) -> None:
    """The cases reach what the test is for, in SGLang's own answers."""
    reference = _reference(references, "0.5.23")
    answers = reference.answers
    assert answers["slots-larger-than-the-rest"]["error"] is not None
    assert answers["rest-too-small-for-the-ratio"]["error"] is not None
    for name in ("few-slots-cap-the-requests", "ratio-sized-eagle-extra-buffer-capped-by-mamba"):
        answer = answers[name]
        assert answer["error"] is None
        assert answer["max_running_requests"] == (
            answer["max_mamba_cache_size"] // answer["mamba_ratio"]
        )
