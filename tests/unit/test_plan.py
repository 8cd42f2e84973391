"""plan: reading the probe's answer against a profile, the lock, without running SGLang (the
real-SGLang tier is tests/sglang_real; these answers have the probe's format)."""

from __future__ import annotations

import dataclasses
from typing import Any

from orchestrator.effective import plan, verify
from orchestrator.fleet.protocol.plan import decode_plan_answer
from orchestrator.profile.fields import requested_fields
from orchestrator.profile.gpus import gpu_type
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang.argtable import ArgTable, load_table
from tests.conftest import SHIPPED_PROFILES

T0511 = load_table("0.5.11")
T0523 = load_table("0.5.23")
PROFILE = ProfileStore(SHIPPED_PROFILES).load("qwen36-mtp-b200").profile


def report_of(table: ArgTable, document: dict[str, Any], where: str = "local") -> plan.PlanReport:
    """The probe's answer ``document`` read against PROFILE."""
    requested = requested_fields(PROFILE)
    return plan.report(
        PROFILE, table, decode_plan_answer(document), requested=requested, where=where, secrets={}
    )


def answer(**changes: Any) -> dict[str, Any]:
    raw = {
        "speculative_num_draft_tokens": 4,
        "max_running_requests": None,
        "random_seed": None,
        "mamba_scheduler_strategy": "extra_buffer",
        "mem_fraction_static": 0.92,
        "attention_backend": None,
    }
    effective = {**raw, "max_running_requests": 48, "random_seed": 1234, "attention_backend": "fa3"}
    document = {
        "ok": True,
        "sglang_version": "0.5.11",
        "mode": "__post_init__",
        "raw": raw,
        "effective": effective,
        "defaults": {
            "max_running_requests": None,
            "attention_backend": None,
            "mem_fraction_static": None,
            "random_seed": None,
        },
        "provenance": {
            "max_running_requests": [
                {
                    "source": "_handle_speculative_decoding",
                    "file": "sglang/srt/server_args.py",
                    "line": 3455,
                    "value": 48,
                }
            ]
        },
        "logs": [
            "[2026-11-29 07:36:26] Max running requests is reset to 48 for speculative "
            "decoding. You can override this by explicitly setting --max-running-requests."
        ],
    }
    document.update(changes)
    return document


def test_request_simulates_the_profiles_gpu() -> None:
    h200 = gpu_type("H200")
    assert h200 is not None
    request = plan.probe_request(
        ["--port", "1"], {"A": "1"}, simulate=h200, model_config=("/m", {"architectures": ["X"]})
    )
    assert request["simulate_gpu"] == {
        "name": "NVIDIA H200",
        "capability": [9, 0],
        "memory_mib": 141 * 1024,
    }
    assert request["model_config"] == {"path": "/m", "config": {"architectures": ["X"]}}
    assert request["remove_request"] is True  # the request carries the server's env


def test_report_marks_changes_and_defaults_with_their_step() -> None:
    report = report_of(T0511, answer(), "local x")
    assert report.ok
    assert report.changed == ()  # every field the profile sets survives
    defaulted = {f.field: f for f in report.defaulted}
    assert set(defaulted) == {"max_running_requests", "attention_backend", "random_seed"}
    filled = defaulted["max_running_requests"]
    assert filled.provenance[0].describe() == (
        "_handle_speculative_decoding (sglang/srt/server_args.py:3455)"
    )
    assert filled.why is not None
    assert filled.why.startswith("Max running requests is reset to 48")


def test_pinned_change_is_found_under_either_spelling() -> None:
    changed = answer()
    changed["effective"] = {**changed["effective"], "speculative_num_draft_tokens": 3}
    report = report_of(T0511, changed, "host b200")
    assert [f.field for f in report.changed] == ["speculative_num_draft_tokens"]
    assert report.pinned_changes(["speculative_num_draft_tokens"], T0511)
    assert report.pinned_changes(["mem_fraction_static"], T0511) == ()


def test_an_unrecognised_renamed_flag_gets_what_to_write() -> None:
    error = {
        "stage": "parse",
        "type": "SystemExit",
        "exit_code": 2,
        "message": "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer",
    }
    report = report_of(T0523, answer(ok=False, error=error, sglang_version="0.5.23"), "host")
    assert report.error is not None
    assert report.error.hint is not None
    assert "write --mamba-radix-cache-strategy" in report.error.hint
    assert report.fields == ()


def test_lock_keeps_non_default_values_sorted_without_random_or_host_facts() -> None:
    report = report_of(T0511, answer())
    document = plan.lock_document(PROFILE, report, "abc123", gpu_type("B200"))
    assert document["format"] == "orch.lock/1"
    assert document["gpu_type"] == "B200"
    effective = document["effective"]
    assert "random_seed" not in effective
    assert effective["max_running_requests"] == 48
    assert list(effective) == sorted(effective)
    assert plan.lock_text(document) == plan.lock_text(dict(reversed(list(document.items()))))


def test_lock_records_what_the_scheduler_runs_beside_the_resolved_argument() -> None:
    # the argument resolves to 48; the mamba pool (24 slots, 5 per request) lets 4 run
    from dataclasses import replace

    from orchestrator.sglang.memory.budget import plan_budget
    from orchestrator.sglang.memory.rules import BudgetInputs
    from orchestrator.sglang.memory.shapes import GIB, GpuMemory, ModelMemory

    report = report_of(T0511, answer())
    model = ModelMemory(
        basis="test",
        architecture="T",
        context_len=8192,
        attention_tp=1,
        full_attention_layers=16,
        kv_cell_bytes=65536,
        kv_dtype="bfloat16",
        hybrid=True,
        mamba_layers=48,
        mamba_slot_bytes=GIB // 8,
        weights_bytes=40 * GIB,
    )
    gpu = GpuMemory("NVIDIA B200", 180 * GIB, 180 * GIB, "test")
    inputs = BudgetInputs(
        mem_fraction_static=0.9, max_running_requests=48, max_mamba_cache_size=24, extra_buffer=True
    )
    budget = plan_budget(model, (gpu,), inputs, version=(0, 5, 11))
    document = plan.lock_document(
        PROFILE, replace(report, budget=budget), "abc123", gpu_type("B200")
    )
    assert document["effective"]["max_running_requests"] == budget.max_running_requests_argument
    assert document["scheduler"]["max_running_requests"] == budget.max_running_requests == 4
    assert document["scheduler"]["limited_by"].startswith("mamba slots")
    assert "scheduler" not in plan.lock_document(PROFILE, report, "abc123", gpu_type("B200"))


def test_lock_problems_name_what_changed() -> None:
    report = report_of(T0511, answer())
    document = plan.lock_document(PROFILE, report, "abc123", PROFILE.gpu.type)
    assert plan.lock_problems(PROFILE, "abc123", document, "0.5.11") == []
    problems = plan.lock_problems(PROFILE, "def456", document, "0.5.23")
    assert len(problems) == 2
    assert "rendered command changed" in problems[0]
    other_gpu = dataclasses.replace(
        PROFILE, gpu=dataclasses.replace(PROFILE.gpu, type=gpu_type("H200"))
    )
    assert plan.lock_problems(other_gpu, "abc123", document, "0.5.11") == [
        "locked for gpu B200, the profile has H200"
    ]
    assert plan.lock_problems(PROFILE, "abc123", {"format": "x"}, None) == [
        "not an orch.lock/1 document"
    ]


def test_secret_fields_are_never_in_a_lock() -> None:
    leaky = answer()
    leaky["effective"] = {**leaky["effective"], "api_key": "sk-live"}
    report = report_of(T0511, leaky)
    document = plan.lock_document(PROFILE, report, "abc123", None)
    assert "api_key" not in document["effective"]
    assert {"api_key"} <= verify.SECRET_FIELDS
