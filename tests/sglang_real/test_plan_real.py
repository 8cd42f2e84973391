"""orch plan / lock with SGLang's real parsing and resolution (0.5.11 and 0.5.23, CPU venvs, the
GPU simulated from gpu.type). Each plan imports SGLang (~5 s): the tier plans a few cases only."""

from __future__ import annotations

import io
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode
from tests.conftest import CAPTURES, REPO
from tests.e2e.conftest import Outcome

FIXTURE = {"0.5.11": "sglang_0511", "0.5.23": "sglang_0523"}
MODEL_CONFIG = REPO / "standin" / "models" / "Qwen3.6-27B" / "config.json"  # the real one's copy


def incident_profile(
    root: Path,
    name: str,
    *,
    version: str = "0.5.11",
    gpu: str = "H200",
    draft: int = 4,
    mamba: str | None = "extra_buffer",
    pin: str = "",
) -> str:
    """The incident's deployment (docs/sglang-facts.md §5 seed), with its knobs."""
    args = f"  mamba_scheduler_strategy: {mamba}\n" if mamba else ""
    (root / f"{name}.yaml").write_text(
        textwrap.dedent(f"""\
            sglang: "{version}"
            host: local
            model: {{path: /models/Qwen3.6-27B}}
            gpu: {{type: {gpu}, devices: [0]}}
            port: 30000
            spec_decode: {{algorithm: EAGLE, num_steps: 3, eagle_topk: 1, num_draft_tokens: {draft}}}
            env: {{SGLANG_ENABLE_SPEC_V2: "1"}}
        """)
        + "args:\n"
        + args
        + "  context_length: 8192\n  trust_remote_code: true\n  max_mamba_cache_size: 24\n"
        + "  mamba_full_memory_ratio: 0.4\n  mem_fraction_static: 0.92\n"
        + pin
    )
    return name


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    root = tmp_path / "profiles"
    root.mkdir()
    (root / "hosts.yaml").write_text("hosts: {}\n")
    return root


def orch(profiles: Path, *argv: str) -> Outcome:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(profiles), *argv], out=out, err=err)
    return Outcome(code, out.getvalue(), err.getvalue())


def plan(profiles: Path, name: str, python: Path, *extra: str) -> Outcome:
    return orch(
        profiles,
        "plan",
        name,
        "--local-sglang",
        str(python),
        "--model-config",
        str(MODEL_CONFIG),
        *extra,
    )


def fields(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["field"]: row for row in report["fields"]}


def test_incident_without_the_flag_predicts_the_incident_valueerror_on_0_5_11(
    profiles: Path, sglang_0511: Path
) -> None:
    name = incident_profile(profiles, "noflag", mamba=None)
    outcome = plan(profiles, name, sglang_0511, "--json")
    assert outcome.code == ExitCode.PLAN_REFUSED
    report = outcome.json()
    assert report["sglang_version"] == "0.5.11"
    error = report["error"]
    assert error["stage"] == "resolve"
    assert error["type"] == "ValueError"
    assert "when using --mamba-scheduler-strategy no_buffer.To use radix cache" in error["message"]
    assert error["raised_in"].startswith("_handle_mamba_radix_cache (sglang/srt/server_args.py:")
    # the value nobody asked for, and where SGLang chose it
    assert error["hint"].startswith(
        "SGLang set mamba_scheduler_strategy = 'no_buffer' itself (from 'auto', in "
        "_handle_missing_default_values"
    )
    text = plan(profiles, name, sglang_0511)
    assert "orch: error: SGLang 0.5.11 rejects the plan at resolve: ValueError:" in text.err


def test_incident_with_the_flag_on_an_h200_plans_cleanly_on_0_5_11(
    profiles: Path, sglang_0511: Path
) -> None:
    name = incident_profile(profiles, "seed")
    outcome = plan(profiles, name, sglang_0511, "--json")
    assert outcome.code == ExitCode.OK, outcome.err
    report = outcome.json()
    assert report["ok"] is True
    assert report["simulated_gpu"] == "NVIDIA H200"
    assert fields(report)["mamba_scheduler_strategy"]["predicted"] == "extra_buffer"
    assert not any(row["changed"] for row in report["fields"])


@pytest.mark.parametrize(
    ("version", "step"),
    [("0.5.11", "_handle_speculative_decoding"), ("0.5.23", "_handle_eagle_family")],
)
def test_eight_draft_tokens_with_topk_1_are_predicted_4_with_provenance(
    profiles: Path, version: str, step: str, request: pytest.FixtureRequest
) -> None:
    python: Path = request.getfixturevalue(FIXTURE[version])
    name = incident_profile(profiles, "draft8", version=version, draft=8)
    outcome = plan(profiles, name, python, "--json")
    assert outcome.code == ExitCode.OK, outcome.err
    row = fields(outcome.json())["speculative_num_draft_tokens"]
    assert (row["profile"], row["predicted"], row["changed"]) == (8, 4, True)
    assert row["provenance"][-1]["source"] == step
    assert row["provenance"][-1]["value"] == 4
    assert row["why"] == (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1"
    )
    text = plan(profiles, name, python)
    assert re.search(rf"speculative_num_draft_tokens\s+8\s+4\s+{step}", text.out)

    pinned = incident_profile(
        profiles,
        "draft8pinned",
        version=version,
        draft=8,
        pin="pin: [speculative_num_draft_tokens]\n",
    )
    assert plan(profiles, pinned, python).code == ExitCode.DRIFT


def test_the_old_mamba_flag_on_0_5_23_is_reported_as_renamed(
    profiles: Path, sglang_0523: Path
) -> None:
    # spelled for 0.5.11 (--mamba-scheduler-strategy), planned with 0.5.23
    name = incident_profile(profiles, "old-flag", version="0.5.11")
    outcome = plan(profiles, name, sglang_0523, "--json")
    assert outcome.code == ExitCode.PLAN_REFUSED
    report = outcome.json()
    assert report["sglang_version"] == "0.5.23"
    assert report["error"]["stage"] == "parse"
    assert report["error"]["message"] == (
        "sglang serve: error: unrecognized arguments: --mamba-scheduler-strategy extra_buffer"
    )
    hint = report["error"]["hint"]
    assert "--mamba-scheduler-strategy is not an argument of SGLang 0.5.23" in hint
    assert "write --mamba-radix-cache-strategy" in hint
    assert "renamed mamba_scheduler_strategy -> mamba_radix_cache_strategy in SGLang 0.5.14" in hint
    assert any("planned with SGLang 0.5.23" in note for note in report["notes"])


def _capture_changes(name: str) -> set[str]:
    path = CAPTURES / name
    return set(re.findall(r"^  \[(?:USER-GIVEN|default)\] (\w+):", path.read_text(), re.M))


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_predicted_changes_are_exactly_those_sglang_made_in_the_capture(
    profiles: Path, version: str, request: pytest.FixtureRequest
) -> None:
    """Scenario G of the captures (docs/sglang-facts.md §5): the same command line, H200 simulated."""
    python: Path = request.getfixturevalue(FIXTURE[version])
    expected = _capture_changes(f"resolve-0{version.replace('.', '')[1:]}-G_spec_draft8_topk1.txt")
    name = incident_profile(profiles, "capture-g", version=version, draft=8)
    report = plan(profiles, name, python, "--json", "--all").json()
    changed = {row["field"] for row in [*report["fields"], *report["defaulted"]] if row["changed"]}
    changed |= {row["field"] for row in report["defaulted"]}
    # orch leaves out SGLang's private bookkeeping fields (_..._explicitly_set)
    assert changed == {field for field in expected if not field.startswith("_")}
    assert len(changed) >= 20


def test_lock_is_stable_and_validate_reports_a_stale_one(profiles: Path, sglang_0511: Path) -> None:
    name = incident_profile(profiles, "locked")
    lock = ["lock", name, "--local-sglang", str(sglang_0511), "--model-config", str(MODEL_CONFIG)]
    first = orch(profiles, *lock)
    assert first.code == ExitCode.OK, first.err
    written = (profiles / f"{name}.lock.json").read_text()
    assert orch(profiles, *lock).code == ExitCode.OK
    assert (profiles / f"{name}.lock.json").read_text() == written  # byte for byte
    document = json.loads(written)
    assert (document["sglang"], document["gpu_type"]) == ("0.5.11", "H200")
    effective = document["effective"]
    assert effective["mamba_scheduler_strategy"] == "extra_buffer"
    assert effective["max_running_requests"] == 48  # a default SGLang fills in
    assert effective["attention_backend"] == "fa3"  # sm90
    assert "random_seed" not in effective
    assert list(effective) == sorted(effective)
    assert orch(profiles, "validate", name).code == ExitCode.OK

    text = (profiles / f"{name}.yaml").read_text().replace("0.92", "0.9")
    (profiles / f"{name}.yaml").write_text(text)
    stale = orch(profiles, "validate", name)
    assert stale.code == ExitCode.CONFIG
    assert "the lock no longer matches profile locked" in stale.err
    assert f"orch lock {name}" in stale.err
