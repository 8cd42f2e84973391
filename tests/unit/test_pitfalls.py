"""Launch pitfalls: orch's message (kind, severity, what to write instead) for each, in
``validate`` where the profile alone shows it and in the plan's report where SGLang's resolution
or the model's config.json is needed. SGLang's own failure for the same inputs is shown in
tests/sglang_real/test_pitfalls_real.py."""

from __future__ import annotations

import io
import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.show import reports
from orchestrator.effective.launch_pitfalls import model_config, plan_pitfalls
from orchestrator.effective.plan import PlanReport
from orchestrator.errors import ExitCode
from orchestrator.profile.store import ProfileStore
from orchestrator.sglang import pitfalls
from orchestrator.sglang.argtable import parse_version
from orchestrator.sglang.memory.shapes import MemoryAnswer
from orchestrator.sglang.pitfalls import LaunchFacts
from tests.conftest import REPO

QWEN36 = json.loads((REPO / "standin" / "models" / "Qwen3.6-27B" / "config.json").read_text())


def facts(version: str, **args: Any) -> LaunchFacts:
    env = args.pop("env", {})
    config = args.pop("config", None)
    resolved = args.pop("resolved", False)
    return LaunchFacts(
        version=parse_version(version),
        args=args,
        env=env,
        config=config,
        model_path=args.pop("model_path", "/models/m"),
        resolved=resolved,
        startup_timeout_s=args.pop("startup_timeout_s", None),
    )


def kinds(found: tuple[pitfalls.Pitfall, ...] | list[pitfalls.Pitfall]) -> list[str]:
    return [p.kind for p in found]


def run(root: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "hosts.yaml").write_text("hosts: {}\n")
    return tmp_path


def profile(root: Path, name: str, body: str, version: str = "0.5.23") -> str:
    head = f'sglang: "{version}"\nhost: local\nmodel: {{path: /models/Qwen3.6-27B}}\n'
    (root / f"{name}.yaml").write_text(head + textwrap.dedent(body))
    return name


# -- 1. the speculative triple ------------------------------------------------------------------------


def test_a_lone_num_steps_is_an_error_naming_the_typeerror() -> None:
    found = pitfalls.speculative_triple(
        facts("0.5.23", speculative_algorithm="NEXTN", speculative_num_steps=3)
    )
    assert kinds(found) == ["speculative-triple"]
    assert found[0].severity == pitfalls.ERROR
    assert "bare TypeError" in found[0].message
    assert "set all three" in found[0].hint


def test_a_lone_topk_is_an_error_naming_the_assertion() -> None:
    found = pitfalls.speculative_triple(
        facts("0.5.23", speculative_algorithm="EAGLE", speculative_eagle_topk=1)
    )
    assert kinds(found) == ["speculative-triple"]
    assert "AssertionError" in found[0].message


def test_all_three_or_none_pass_and_topk_1_warns_of_the_rewrite() -> None:
    assert pitfalls.speculative_triple(facts("0.5.23", speculative_algorithm="EAGLE")) == []
    full = {"speculative_num_steps": 3, "speculative_eagle_topk": 1}
    assert (
        pitfalls.speculative_triple(
            facts("0.5.23", speculative_algorithm="EAGLE", **full, speculative_num_draft_tokens=4)
        )
        == []
    )
    # steps + topk 1 without draft tokens: SGLang fills steps + 1 itself
    assert pitfalls.speculative_triple(facts("0.5.23", speculative_algorithm="EAGLE", **full)) == []
    rewritten = pitfalls.speculative_triple(
        facts("0.5.11", speculative_algorithm="EAGLE", **full, speculative_num_draft_tokens=8)
    )
    assert kinds(rewritten) == ["speculative-topk-1"]
    assert rewritten[0].severity == pitfalls.WARNING
    assert "num_draft_tokens: 4" in rewritten[0].hint


def test_validate_refuses_a_half_set_triple_with_its_key(root: Path) -> None:
    name = profile(root, "half", "spec_decode: {algorithm: NEXTN, num_steps: 3}\n")
    code, _, err = run(root, "validate", name)
    assert code == ExitCode.CONFIG
    assert "half.yaml:4:" in err
    assert "spec_decode.num_steps: NEXTN speculative decoding with speculative_num_steps" in err
    assert "[speculative-triple]" in err
    assert "orch: hint: set all three of spec_decode.num_steps" in err


# -- 2. Qwen3.5-family speculative decoding -----------------------------------------------------------


def test_qwen35_spec_without_extra_buffer_on_0511_is_an_error_from_config() -> None:
    found = pitfalls.qwen35_speculative(
        facts("0.5.11", speculative_algorithm="EAGLE", config=QWEN36)
    )
    assert kinds(found) == ["qwen35-spec-strategy"]
    assert found[0].severity == pitfalls.ERROR
    assert "Qwen3_5ForConditionalGeneration" in found[0].message
    assert "mamba_scheduler_strategy: extra_buffer" in found[0].hint
    assert 'SGLANG_ENABLE_SPEC_V2: "1"' in found[0].hint


def test_qwen35_spec_with_extra_buffer_passes_and_spec_v2_off_warns() -> None:
    ok = facts(
        "0.5.11",
        speculative_algorithm="EAGLE",
        mamba_scheduler_strategy="extra_buffer",
        config=QWEN36,
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    assert pitfalls.qwen35_speculative(ok) == []
    off = facts(
        "0.5.13",
        speculative_algorithm="EAGLE",
        mamba_scheduler_strategy="extra_buffer",
        config=QWEN36,
        env={"SGLANG_ENABLE_SPEC_V2": "0"},
    )
    assert kinds(pitfalls.qwen35_speculative(off)) == ["spec-v2-off"]


def test_qwen35_spec_v2_is_inert_from_0514_and_other_models_are_left_alone() -> None:
    later = facts(
        "0.5.23",
        speculative_algorithm="EAGLE",
        config=QWEN36,
        env={"SGLANG_ENABLE_SPEC_V2": "1"},
    )
    found = pitfalls.qwen35_speculative(later)
    assert kinds(found) == ["spec-v2-inert"]
    assert found[0].severity == pitfalls.NOTICE
    llama = {"architectures": ["LlamaForCausalLM"]}
    assert (
        pitfalls.qwen35_speculative(facts("0.5.11", speculative_algorithm="EAGLE", config=llama))
        == []
    )


def test_validate_warns_for_a_qwen35_name_without_extra_buffer_on_0511(root: Path) -> None:
    body = (
        "spec_decode: {algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: 4}\n"
        "args: {trust_remote_code: true}\n"
    )
    name = profile(root, "q", body, version="0.5.11")
    code, out, err = run(root, "validate", name)
    assert code == ExitCode.OK
    assert "(a Qwen3.5-family name)" in out + err
    assert "[qwen35-spec-strategy]" in out + err


# -- 3. switches that became a value -----------------------------------------------------------------


def test_a_removed_switch_says_which_value_to_write_instead(root: Path) -> None:
    name = profile(root, "pcg", "args: {disable_piecewise_cuda_graph: true}\n")
    code, _, err = run(root, "validate", name)
    assert code == ExitCode.CONFIG
    assert "unknown SGLang 0.5.23 argument" not in err  # one error, the one that says what to do
    assert "[replaced-switch]" in err
    assert "orch: hint: write args.cuda_graph_backend_prefill: disabled" in err


def test_a_replaced_switch_is_a_warning_while_sglang_still_aliases_it() -> None:
    found = pitfalls.replaced_switches(facts("0.5.16", enforce_piecewise_cuda_graph=True))
    assert kinds(found) == ["replaced-switch"]
    assert found[0].severity == pitfalls.WARNING
    assert "cuda_graph_backend_prefill: tc_piecewise" in found[0].hint
    assert pitfalls.replaced_switches(facts("0.5.11", disable_piecewise_cuda_graph=True)) == []
    gone_false = pitfalls.replaced_switches(facts("0.5.23", disable_piecewise_cuda_graph=False))
    assert "remove args.disable_piecewise_cuda_graph" in gone_false[0].hint


def test_stream_output_is_a_rename_orch_spells_for_the_release(root: Path) -> None:
    """--stream-output is in argtable.RENAMES (same switch, new name), not a replacement: a
    0.5.23 profile may keep the old key and is rendered --incremental-streaming-output."""
    name = profile(root, "so", "args: {stream_output: true}\n")
    code, out, err = run(root, "validate", name)
    assert code == ExitCode.OK
    assert "calls this incremental_streaming_output" in out + err
    code, out, _ = run(root, "render", name, "--json")
    assert "--incremental-streaming-output" in json.loads(out)["argv"]


# -- 4. piecewise CUDA graphs and the context ----------------------------------------------------------


def test_piecewise_max_above_the_context_warns_with_the_per_release_fix() -> None:
    old = facts(
        "0.5.11",
        resolved=True,
        context_length=4096,
        disable_piecewise_cuda_graph=False,
        piecewise_cuda_graph_max_tokens=8192,
    )
    found = pitfalls.piecewise_context(old)
    assert kinds(found) == ["piecewise-context"]
    assert "piecewise_cuda_graph_max_tokens 8192 above context_length 4096" in found[0].message
    assert "disable_piecewise_cuda_graph: true" in found[0].hint
    new = facts(
        "0.5.23",
        resolved=True,
        context_length=4096,
        cuda_graph_config={"prefill": {"backend": "tc_piecewise", "max_bs": 8192}},
    )
    assert "cuda_graph_backend_prefill: disabled" in pitfalls.piecewise_context(new)[0].hint
    off = facts(
        "0.5.23",
        resolved=True,
        context_length=4096,
        cuda_graph_config={"prefill": {"backend": "disabled", "max_bs": 8192}},
    )
    assert pitfalls.piecewise_context(off) == []
    assert pitfalls.piecewise_context(old.__class__(**{**old.__dict__, "resolved": False})) == []


# -- 5. heads and experts against TP and EP ----------------------------------------------------------


def test_heads_and_kv_heads_against_tp_from_config() -> None:
    assert pitfalls.divisibility(facts("0.5.23", tp_size=4, config=QWEN36)) == []
    assert pitfalls.divisibility(facts("0.5.23", tp_size=8, config=QWEN36)) == []  # KV replicated
    three = pitfalls.divisibility(facts("0.5.23", tp_size=3, config=QWEN36))
    assert set(kinds(three)) == {"heads-tp", "kv-heads-tp"}
    assert all(p.severity == pitfalls.ERROR for p in three)
    messages = " ".join(p.message for p in three)
    assert "linear_num_key_heads 16 is not divisible by tp_size 3" in messages
    assert "num_key_value_heads 4 and tp_size 3" in messages


def test_experts_against_ep() -> None:
    moe = {"num_attention_heads": 32, "num_key_value_heads": 4, "num_experts": 60}
    assert pitfalls.divisibility(facts("0.5.23", tp_size=4, ep_size=4, config=moe)) == []
    found = pitfalls.divisibility(facts("0.5.23", tp_size=4, ep_size=8, config=moe))
    assert kinds(found) == ["experts-ep"]
    assert "num_experts 60 is not divisible by ep_size 8" in found[0].message


# -- 6. capped by mamba ------------------------------------------------------------------------------


def test_capped_by_mamba_names_requested_cap_and_how_to_raise() -> None:
    found = pitfalls.mamba_cap(64, 8, 24, 3, "0.5.11")
    assert found is not None
    assert found.kind == "capped-by-mamba"
    assert "capped by mamba: max_running_requests 64 requested" in found.message
    assert "at most 8 (24 mamba state slots // 3 slots per request)" in found.message
    assert "max_mamba_cache_size" in found.hint
    assert pitfalls.mamba_cap(8, 8, 24, 3, "0.5.11") is None


# -- 7. DeepGEMM ---------------------------------------------------------------------------------------


def test_deepgemm_cache_on_tmp_and_a_short_timeout_for_fp8() -> None:
    fp8 = {"quantization_config": {"quant_method": "fp8"}}
    found = pitfalls.deepgemm_cache(
        facts("0.5.23", env={"SGLANG_DG_CACHE_DIR": "/tmp/dg"}, config=fp8, startup_timeout_s=600)
    )
    assert kinds(found) == ["deepgemm-cache-ephemeral", "deepgemm-cold-timeout"]
    assert (
        pitfalls.deepgemm_cache(
            facts("0.5.23", env={"SGLANG_DG_CACHE_DIR": "/data/dg"}, startup_timeout_s=600)
        )
        == []
    )
    assert pitfalls.deepgemm_cache(facts("0.5.23", config=fp8, startup_timeout_s=1800)) == []


# -- the plan's report ------------------------------------------------------------------------------


def test_plan_report_shows_pitfalls_under_the_heading_and_in_json(root: Path) -> None:
    name = profile(root, "p", "args: {tp_size: 3}\ngpu: {devices: [0, 1, 2]}\n")
    loaded = ProfileStore(root).load(name)
    found = plan_pitfalls(
        loaded.profile,
        loaded.table,
        {"tp_size": 3, "context_length": 262144},
        {},
        config=model_config(None, MemoryAnswer(model=None, text_config=QWEN36["text_config"])),
        budget=None,
    )
    assert {"heads-tp", "kv-heads-tp"} <= set(kinds(found))
    report = PlanReport(
        profile=name,
        sglang_version="0.5.23",
        where="local python",
        simulated_gpu=None,
        standin=False,
        mode="resolve",
        error=None,
        fields=(),
        defaulted=(),
        logs=(),
        effective={},
        defaults={},
        pitfalls=found,
    )
    text = [t.text for t in reports.plan_text(report, False)]
    assert text[1].startswith("pitfall (error) ")
    assert text[2].startswith("  hint: use a tp_size that divides")
    shown = reports.plan_json(report, False)["pitfalls"]
    assert isinstance(shown, list)
    assert {"kind", "severity", "message", "hint", "fields"} <= set(shown[0])
    assert report.blocking_pitfalls
