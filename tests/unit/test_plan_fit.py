"""``orch plan --fit``'s search (effective/fit.py): which edits it tries (the release's own
fields and spellings, never a pinned one, tensor parallelism with its devices in sizes the
heads divide, up to the GPUs the host has) and how it ranks them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator.effective import fit
from orchestrator.model import frozen_map
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang.memory.budget import FAILS, FITS, TIGHT
from orchestrator.sglang.memory.shapes import GIB, GpuMemory, MemoryAnswer, mirrored_model
from tests.conftest import REPO, copy_examples

pytestmark = pytest.mark.unit

CONFIG = json.loads((REPO / "standin/models/Qwen3.6-27B/config.json").read_text())
ADA = GpuMemory("NVIDIA RTX 6000 Ada", 48 * GIB, 48 * GIB, "simulated", 0)
EFFECTIVE = {
    "tp_size": 1,
    "mem_fraction_static": 0.92,
    "max_mamba_cache_size": 24,
    "mamba_full_memory_ratio": 0.4,
    "speculative_algorithm": "EAGLE",
    "speculative_num_draft_tokens": 4,
    "context_length": 8192,
    "chunked_prefill_size": 8192,
    "cuda_graph_max_bs": 32,
    "kv_cache_dtype": "auto",
    "mamba_ssm_dtype": None,
}


def _base(
    tmp_path: Path,
    extra: str = "",
    *,
    version: str = "0.5.11",
    config: dict[str, Any] | None = None,
    gpus: tuple[GpuMemory, ...] = (ADA,),
    effective: dict[str, Any] | None = None,
) -> fit.Base:
    root = copy_examples(tmp_path / "profiles")
    (root / "ada.yaml").write_text(
        f'extends: qwen36-mtp-b200\nsglang: "{version}"\nhost: local\n'
        f"gpu:\n  type: RTX 6000 Ada\n  devices: [0]\n{extra}"
    )
    loaded = ProfileStore(root).load("ada")
    config = config or CONFIG
    strategy = "mamba_scheduler_strategy" if version == "0.5.11" else "mamba_radix_cache_strategy"
    model = mirrored_model(config, attention_tp=1)
    assert model is not None
    memory = MemoryAnswer(
        model=model,
        text_config=frozen_map(config),
        weights_bytes=int(51.1 * GIB),
        weights_basis="index",
        gpus=gpus,
        default_mem_fraction_static=0.72,
    )
    return fit.Base(
        profile=loaded.profile,
        table=loaded.table,
        effective={**EFFECTIVE, strategy: "extra_buffer", **(effective or {})},
        env={},
        memory=memory,
        version=loaded.table.parsed_version,
        nominal=None,
    )


def test_fit_never_edits_a_pinned_field(tmp_path: Path) -> None:
    base = _base(tmp_path)  # qwen36-mtp-b200 pins the strategy and the draft tokens
    assert base.profile.pin == ("mamba_scheduler_strategy", "speculative_num_draft_tokens")
    fields = {name for c in fit.candidates(base) for name in c.fields}
    assert "mamba_scheduler_strategy" not in fields
    assert "mem_fraction_static" in fields
    assert "tp_size" in fields

    pinned = _base(tmp_path / "b", "args:\n  tp_size: 1\npin: [tp_size, mem_fraction_static]\n")
    fields = {name for c in fit.candidates(pinned) for name in c.fields}
    assert "tp_size" not in fields
    assert "mem_fraction_static" not in fields
    assert not any(fit.DEVICES_KEY in c.changes for c in fit.candidates(pinned))


def test_fit_spells_each_field_as_the_release_and_the_profile_do(tmp_path: Path) -> None:
    unpinned = "pin: []\n"
    old = {k.key for k in fit.knobs(_base(tmp_path / "a", unpinned))}
    assert "args.mamba_scheduler_strategy" in old  # the profile's own key, 0.5.11's name
    assert "args.cuda_graph_max_bs" in old
    new = {k.field: k.key for k in fit.knobs(_base(tmp_path / "b", unpinned, version="0.5.23"))}
    # the field is 0.5.23's, the key the one the profile already writes (render spells it)
    assert new["mamba_radix_cache_strategy"] == "args.mamba_scheduler_strategy"
    assert "cuda_graph_max_bs" not in new  # 0.5.23's table has no such flag
    fresh = _base(
        tmp_path / "c", "args:\n  mamba_scheduler_strategy: null\npin: []\n", version="0.5.23"
    )
    keys = {k.field: k.key for k in fit.knobs(fresh)}
    assert keys["mamba_radix_cache_strategy"] == "args.mamba_radix_cache_strategy"


def test_more_tensor_parallelism_comes_with_as_many_devices(tmp_path: Path) -> None:
    base = _base(tmp_path)
    assert fit.tp_sizes(base) == (2, 4, 8)  # no NVML: up to 8, the heads divide each
    with_tp = [c for c in fit.candidates(base) if "tp_size" in c.fields]
    for candidate in with_tp:
        size = candidate.fields["tp_size"]
        assert candidate.changes["args.tp_size"] == size
        assert candidate.changes[fit.DEVICES_KEY] == list(range(size))
        assert candidate.devices == tuple(str(i) for i in range(size))

    twelve = {**CONFIG, "text_config": {**CONFIG["text_config"], "num_attention_heads": 12}}
    assert fit.tp_sizes(_base(tmp_path / "h", config=twelve)) == (2, 4)

    host = tuple(
        GpuMemory("NVIDIA RTX 6000 Ada", 48 * GIB, 48 * GIB, "NVML on box", i) for i in (0, 1)
    )
    assert fit.tp_sizes(_base(tmp_path / "n", gpus=host)) == (2,)  # the GPUs the host has


def test_a_larger_tp_is_sized_with_the_weights_sharded(tmp_path: Path) -> None:
    base = _base(tmp_path)
    alone = fit.predict(base, fit.Candidate(frozen_map({"mem_fraction_static": 0.8}), {}))
    assert alone is not None
    assert alone.verdict == FAILS
    sharded = fit.Candidate(frozen_map({"tp_size": 2}), {}, ("0", "1"))
    two = fit.predict(base, sharded)
    assert two is not None
    assert two.verdict != FAILS
    assert two.kv_tokens > 0


def _ranked(
    fields: dict[str, Any], verdict: str, requests: int, headroom: float = 1.0
) -> fit.Ranked:
    changes = {f"args.{k}": v for k, v in fields.items()}
    return fit.Ranked(
        fit.Candidate(frozen_map(fields), frozen_map(changes)),
        fit.Prediction(verdict, requests, requests * 1000, headroom),
    )


def test_ranking_drops_will_fail_and_edits_a_smaller_one_matches() -> None:
    baseline = fit.Prediction(TIGHT, 4, 4000, -1.0)
    small = _ranked({"max_mamba_cache_size": 96}, FITS, 19)
    larger = _ranked({"max_mamba_cache_size": 96, "chunked_prefill_size": 4096}, FITS, 19)
    better = _ranked({"max_mamba_cache_size": 96, "mem_fraction_static": 0.88}, FITS, 20)
    failing = _ranked({"mem_fraction_static": 0.95}, FAILS, 40)
    worse = _ranked({"context_length": 4096}, TIGHT, 3, headroom=-1.0)
    short = _ranked({"tp_size": 2}, TIGHT, 30, headroom=-2.0)
    chosen = fit.select([larger, failing, small, worse, better, short], baseline, 5)
    # fits before tight, room for the estimate before none, then concurrency; an edit that
    # adds a field and gains nothing is left out; will fail and worse than as-is never shown
    assert chosen == (better, small, short)


def test_the_shortlist_keeps_edits_on_fewer_gpus_in_view() -> None:
    many = [_ranked({"tp_size": 8, "mem_fraction_static": f}, FITS, 100) for f in (0.8, 0.85, 0.9)]
    one = _ranked({"mem_fraction_static": 0.8}, FITS, 5)
    chosen = fit.select(
        [*many, one], None, 3, ranks=lambda r: int(r.candidate.fields.get("tp_size", 1))
    )
    assert one in chosen
    assert len(chosen) == 3


def test_an_edit_written_into_the_profile(tmp_path: Path) -> None:
    base = _base(tmp_path)
    changes = {"args.tp_size": 2, "gpu.devices": [0, 1], "args.max_mamba_cache_size": None}
    edited = fit.edited_profile(base.profile, changes)
    assert edited.args["tp_size"] == 2
    assert "max_mamba_cache_size" not in edited.args
    assert edited.gpu.devices == ("0", "1")
    assert edited.gpu.type == base.profile.gpu.type
    assert fit.yaml_snippet(changes) == (
        "args:\n  tp_size: 2\n  max_mamba_cache_size: null\ngpu:\n  devices: [0, 1]"
    )
    with pytest.raises(ValueError, match="does not edit host"):
        fit.edited_profile(base.profile, {"host": "elsewhere"})


def test_the_search_finds_an_edit_for_weights_larger_than_the_gpu(tmp_path: Path) -> None:
    base = _base(tmp_path)
    baseline = fit.predict(base, fit.Candidate(frozen_map({}), frozen_map({})))
    assert baseline is not None
    assert baseline.verdict == FAILS
    chosen, sized = fit.shortlist(base, baseline)
    assert sized > len(chosen) > 0
    assert all(r.predicted.verdict != FAILS for r in chosen)
    assert all(r.candidate.fields.get("tp_size", 1) > 1 for r in chosen)  # 51 GiB needs 2 GPUs
