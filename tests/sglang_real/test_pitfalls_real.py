"""SGLang's OWN failure for the inputs orch's pitfall checks refuse first (tests/unit/
test_pitfalls.py shows orch's messages): its real parsing and resolution in the 0.5.11 / 0.5.23
CPU venvs, the GPU simulated, run directly with the probe (orch's checks bypassed)."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

from orchestrator.cli.main import main
from orchestrator.commands.planning import _run_local_probe
from orchestrator.effective.plan import PlanAnswer, probe_request
from orchestrator.errors import ExitCode
from orchestrator.profile.gpus import gpu_type
from tests.sglang_real.test_plan_real import MODEL_CONFIG, incident_profile, plan

MODEL = "/models/Qwen3.6-27B"


def sglang(python: Path, *args: str) -> PlanAnswer:
    gpu = gpu_type("H200")
    assert gpu is not None
    config = json.loads(MODEL_CONFIG.read_text())
    request = probe_request(
        ["--model-path", MODEL, "--trust-remote-code", *args],
        {},
        simulate=gpu,
        model_config=(MODEL, config),
    )
    return _run_local_probe(str(python), request)


def validate(root: Path, name: str, body: str) -> tuple[int, str]:
    (root / "hosts.yaml").write_text("hosts: {}\n")
    (root / f"{name}.yaml").write_text(
        f'sglang: "0.5.23"\nhost: local\nmodel: {{path: {MODEL}}}\n' + body
    )
    err = io.StringIO()
    code = main(["--profiles", str(root), "validate", name], out=io.StringIO(), err=err)
    return code, err.getvalue()


def test_a_lone_num_steps_is_sglangs_bare_typeerror_and_orchs_refusal(
    tmp_path: Path, sglang_0523: Path
) -> None:
    answer = sglang(sglang_0523, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3")
    assert (answer.error_stage, answer.error_type) == ("resolve", "TypeError")
    assert "'>' not supported between instances of 'NoneType' and 'int'" in (
        answer.error_message or ""
    )
    code, err = validate(tmp_path, "t", "spec_decode: {algorithm: NEXTN, num_steps: 3}\n")
    assert code == ExitCode.CONFIG
    assert "[speculative-triple]" in err
    assert "bare TypeError" in err


def test_a_lone_topk_is_sglangs_bare_assertionerror_and_orchs_refusal(
    tmp_path: Path, sglang_0523: Path
) -> None:
    answer = sglang(
        sglang_0523, "--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "1"
    )
    assert (answer.error_stage, answer.error_type) == ("resolve", "AssertionError")
    code, err = validate(tmp_path, "k", "spec_decode: {algorithm: NEXTN, eagle_topk: 1}\n")
    assert code == ExitCode.CONFIG
    assert "[speculative-triple]" in err
    assert "AssertionError" in err


def test_the_replaced_switch_is_unrecognized_by_0523_and_accepted_by_0511(
    tmp_path: Path, sglang_0511: Path, sglang_0523: Path
) -> None:
    refused = sglang(sglang_0523, "--disable-piecewise-cuda-graph")
    assert refused.error_stage == "parse"
    assert "unrecognized arguments: --disable-piecewise-cuda-graph" in (refused.error_message or "")
    assert sglang(sglang_0511, "--disable-piecewise-cuda-graph").error_stage is None
    # what orch says to write instead is what 0.5.23 accepts
    assert sglang(sglang_0523, "--cuda-graph-backend-prefill", "disabled").error_stage is None
    code, err = validate(tmp_path, "s", "args: {disable_piecewise_cuda_graph: true}\n")
    assert code == ExitCode.CONFIG
    assert "write args.cuda_graph_backend_prefill: disabled" in err


def test_qwen35_spec_on_0511_is_orchs_pitfall_first_then_sglangs_valueerror(
    tmp_path: Path, sglang_0511: Path
) -> None:
    root = tmp_path / "profiles"
    root.mkdir()
    (root / "hosts.yaml").write_text("hosts: {}\n")
    name = incident_profile(root, "noflag", mamba=None)
    outcome = plan(root, name, sglang_0511, "--json")
    assert outcome.code == ExitCode.PLAN_REFUSED
    report = outcome.json()
    assert report["pitfalls"][0]["kind"] == "qwen35-spec-strategy"
    assert report["pitfalls"][0]["severity"] == "error"
    assert "Qwen3_5ForConditionalGeneration" in report["pitfalls"][0]["message"]
    assert report["error"]["type"] == "ValueError"  # SGLang's own, for the same input
    text = plan(root, name, sglang_0511)
    ours = text.err.index("[qwen35-spec-strategy]")
    theirs = text.err.index("rejects the plan at resolve: ValueError")
    assert ours < theirs


def test_sglangs_divide_is_the_assert_a_tp_that_splits_no_heads_meets(sglang_0523: Path) -> None:
    """Model init shards with sglang.srt.distributed.utils.divide: Qwen3.6's 16 linear key heads
    over TP 3 (orch's heads-tp pitfall), and its 4 KV heads over TP 3 (kv-heads-tp)."""
    script = (
        "from sglang.srt.distributed.utils import divide\n"
        "for n, d in ((16, 3), (4, 3)):\n"
        "    try:\n"
        "        divide(n, d)\n"
        "    except AssertionError as e:\n"
        "        print('AssertionError', n, d)\n"
        "print(divide(8, 4))\n"
    )
    done = subprocess.run(
        [str(sglang_0523), "-c", script], capture_output=True, text=True, timeout=300, check=True
    )
    assert done.stdout.split("\n")[:3] == ["AssertionError 16 3", "AssertionError 4 3", "2"]
    # and the resolution itself accepts TP 3: the failure comes only at model init, on GPUs
    assert sglang(sglang_0523, "--tp-size", "3").error_stage is None


def test_deepgemm_cache_defaults_per_release_are_under_the_home_cache(
    sglang_0511: Path, sglang_0523: Path
) -> None:
    script = "from sglang.srt.environ import envs; print(envs.SGLANG_DG_CACHE_DIR.get())"
    for python in (sglang_0511, sglang_0523):
        done = subprocess.run(
            [str(python), "-c", script],
            capture_output=True,
            text=True,
            timeout=300,
            check=True,
            env={"HOME": "/home/someone", "PATH": "/usr/bin:/bin"},
        )
        assert done.stdout.strip().splitlines()[-1].startswith("/home/someone/.cache/")
