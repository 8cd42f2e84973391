"""orch upgrade 0.5.11 -> 0.5.23 on the shipped profiles, with SGLang's real parsing and
resolution of both releases (the CPU venvs of this tier, the GPU simulated from gpu.type)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.conftest import REPO, copy_examples
from tests.e2e.conftest import Outcome

MODEL_CONFIG = REPO / "standin" / "models" / "Qwen3.6-27B" / "config.json"  # the real one's copy


def orch(profiles: Path, *argv: str) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(profiles), *argv], out=out, err=err)
    return Outcome(code, out.getvalue(), err.getvalue())


def _upgrade(profiles: Path, name: str, old: Path, new: Path, *extra: str) -> Outcome:
    return orch(
        profiles,
        "upgrade",
        name,
        "--to",
        "0.5.23",
        "--from-sglang",
        str(old),
        "--to-sglang",
        str(new),
        "--model-config",
        str(MODEL_CONFIG),
        *extra,
    )


def _moves(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {move["field"]: move for move in document["effective"]["moves"]}


def test_the_incident_profile_moves_to_0523_renamed_with_its_lock(
    tmp_path: Path, sglang_0511: Path, sglang_0523: Path
) -> None:
    profiles = copy_examples(tmp_path / "profiles")
    locked = orch(
        profiles,
        "lock",
        "qwen36-mtp-b200",
        "--local-sglang",
        str(sglang_0511),
        "--model-config",
        str(MODEL_CONFIG),
    )
    assert locked.code == ExitCode.OK, locked.err
    path = profiles / "qwen36-mtp-b200.yaml"
    before = path.read_text()

    result = _upgrade(profiles, "qwen36-mtp-b200", sglang_0511, sglang_0523, "--write", "--json")
    assert result.code == ExitCode.OK, result.err + result.out
    document = json.loads(result.out)
    assert [(r["old"], r["new"]) for r in document["respellings"]] == [
        ("mamba_scheduler_strategy", "mamba_radix_cache_strategy"),
        ("mamba_scheduler_strategy", "mamba_radix_cache_strategy"),  # its pin
    ]
    assert document["findings"] == []
    moves = _moves(document)
    # a default the two releases resolve differently, with SGLang's own step on each side
    backend = moves["speculative_moe_runner_backend"]
    assert (backend["from"]["value"], backend["to"]["value"]) == ("auto", "flashinfer_trtllm")
    assert backend["from"]["how"].startswith("_handle_speculative_decoding")
    assert backend["to"]["how"] == "_speculative_moe_runner_default"
    assert "random_seed" not in moves  # drawn at random by both: no change
    assert "mamba_radix_cache_strategy" not in moves  # renamed, and the same value on both sides
    assert "mamba_scheduler_strategy" not in document["effective"]["gone_fields"]  # compared
    memory = {row["label"]: row for row in document["memory"]}
    # both releases allocate the speculative states for the 4 requests the mamba cap admits;
    # 0.5.11 subtracts them for all 48 resolved ones first, so its KV pool is smaller
    assert memory["speculative states"]["from"] == memory["speculative states"]["to"]
    assert memory["KV cache"]["from"] != memory["KV cache"]["to"]
    assert memory["weights"]["from"] == memory["weights"]["to"]

    # --write: the three lines, the lock refreshed from 0.5.23's plan
    changed = [
        (a, b)
        for a, b in zip(before.splitlines(), path.read_text().splitlines(), strict=True)
        if a != b
    ]
    assert [b for _, b in changed] == [
        'sglang: "0.5.23"',
        "  mamba_radix_cache_strategy: extra_buffer",
        "  - mamba_radix_cache_strategy",
    ]
    lock = json.loads((profiles / "qwen36-mtp-b200.lock.json").read_text())
    assert lock["sglang"] == "0.5.23"
    assert lock["effective"]["mamba_radix_cache_strategy"] == "extra_buffer"
    assert document["lock"].endswith("refreshed with SGLang 0.5.23's plan")

    # the rewritten profile validates (its lock included) and plans cleanly on 0.5.23
    assert orch(profiles, "validate").code == ExitCode.OK
    planned = orch(
        profiles,
        "plan",
        "qwen36-mtp-b200",
        "--local-sglang",
        str(sglang_0523),
        "--model-config",
        str(MODEL_CONFIG),
    )
    assert planned.code == ExitCode.OK, planned.err + planned.out


def test_the_draft_token_adjustment_is_shown_on_both_sides_and_a_moved_pin_blocks(
    tmp_path: Path, sglang_0511: Path, sglang_0523: Path
) -> None:
    """EAGLE with topk 1 and 3 steps takes 4 draft tokens: asked for 8, both releases adjust,
    each by its own step (docs/sglang-facts.md §5); the profile pins the field: blocked."""
    profiles = copy_examples(tmp_path / "profiles")
    (profiles / "mtp8.yaml").write_text(
        "extends: qwen36-mtp-b200\n"
        "spec_decode: {algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: 8}\n"
    )
    before = (profiles / "mtp8.yaml").read_text()
    result = _upgrade(profiles, "mtp8", sglang_0511, sglang_0523, "--json", "--write")
    assert result.code == ExitCode.UPGRADE, result.err + result.out
    document = json.loads(result.out)
    draft = _moves(document)["speculative_num_draft_tokens"]
    assert draft["requested"] == 8
    assert draft["adjusted"]
    assert draft["pinned"]
    assert (draft["from"]["value"], draft["to"]["value"]) == (4, 4)
    assert draft["from"]["how"] not in ("", "SGLang's default")
    assert draft["to"]["how"].startswith("_handle_")  # 0.5.23: _handle_eagle_family ...
    assert any(
        "SGLang 0.5.23 changes pinned field speculative_num_draft_tokens: 8 -> 4" in f["message"]
        for f in document["findings"]
    )
    assert document["written"] == []
    assert (profiles / "mtp8.yaml").read_text() == before
    assert (profiles / "qwen36-mtp-b200.yaml").read_text() == (
        REPO / "profiles" / "qwen36-mtp-b200.yaml"
    ).read_text()


def test_a_replaced_switch_upgraded_to_0523_plans_with_the_prefill_graphs_still_disabled(
    tmp_path: Path, sglang_0511: Path, sglang_0523: Path
) -> None:
    """0.5.11's disable_piecewise_cuda_graph: true is cuda_graph_backend_prefill: disabled from
    0.5.14, and 0.5.20 removed the switch: the upgrade writes the value, SGLang 0.5.23 plans the
    written profile and resolves its prefill CUDA graph backend to disabled, as 0.5.11 did."""
    profiles = copy_examples(tmp_path / "profiles")
    path = profiles / "piecewise.yaml"
    path.write_text(
        "extends: qwen36-mtp-b200\n"
        "args:\n"
        "  disable_piecewise_cuda_graph: true  # prefill graphs off\n"
    )
    result = _upgrade(profiles, "piecewise", sglang_0511, sglang_0523, "--write", "--json")
    assert result.code == ExitCode.OK, result.err + result.out
    document = json.loads(result.out)
    assert [(r["old"], r["new"], r["value"]) for r in document["replacements"]] == [
        ("disable_piecewise_cuda_graph", "cuda_graph_backend_prefill", "disabled")
    ]
    moves = _moves(document)
    # the same behaviour on both sides: the switch on 0.5.11 is the value on 0.5.23
    assert "cuda_graph_backend_prefill" not in moves
    assert "disable_piecewise_cuda_graph" not in moves
    assert "disable_piecewise_cuda_graph" not in document["effective"]["gone_fields"]
    assert "  cuda_graph_backend_prefill: disabled  # prefill graphs off\n" in path.read_text()

    planned = orch(
        profiles,
        "plan",
        "piecewise",
        "--local-sglang",
        str(sglang_0523),
        "--model-config",
        str(MODEL_CONFIG),
        "--all",
        "--json",
    )
    assert planned.code == ExitCode.OK, planned.err + planned.out
    plan = json.loads(planned.out)
    assert plan["error"] is None
    rows = {row["field"]: row for row in (*plan["fields"], *plan["defaulted"])}
    assert rows["cuda_graph_backend_prefill"]["predicted"] == "disabled"
    assert rows["cuda_graph_config"]["predicted"]["prefill"]["backend"] == "disabled"
