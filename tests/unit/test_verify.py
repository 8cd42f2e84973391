"""verify: SGLang's outputs read back (on the real captures) and the verdicts of the comparison."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from orchestrator import render
from orchestrator.cli.show import reports as show_reports
from orchestrator.effective import verify
from orchestrator.fleet.protocol.inspect import decode_inspect
from orchestrator.model import Profile
from orchestrator.profile.fields import requested_fields
from orchestrator.profile.store import ProfileStore
from orchestrator.remote.agent.cmd_inspect import config_from_log
from orchestrator.sglang import config as sglang_config
from orchestrator.sglang.argtable import load_table
from tests.conftest import CAPTURES, SHIPPED_PROFILES, capture_lines

T0511 = load_table("0.5.11")
T0523 = load_table("0.5.23")


def observe_answer(document: dict[str, object]) -> verify.Observation:
    """An ``inspect`` answer as orch decodes it."""
    return decode_inspect(document)[0]


def config_line(name: str) -> str:
    (line,) = [x for x in capture_lines(name) if "server_args=" in x]
    return line


def payload(name: str) -> dict[str, Any]:
    path = CAPTURES / name
    document: dict[str, Any] = json.loads(path.read_text())
    return document


def shipped(name: str) -> Profile:
    return ProfileStore(SHIPPED_PROFILES).load(name).profile


def argv_of(profile: Profile, table: Any) -> tuple[str, ...]:
    return tuple(str(token) for token in render.render(profile, table).argv)


def observe(
    argv: tuple[str, ...] | None, resolved: dict[str, Any] | None, **extra: Any
) -> verify.Observation:
    return verify.Observation(
        pid=4242,
        found_by="orch",
        alive=argv is not None,
        argv=argv,
        env=extra.pop("env", {}),
        resolved=resolved,
        resolved_source="test" if resolved is not None else "",
        launch_command=extra.pop("launch_command", None),
        log_lines=tuple(extra.pop("log_lines", ())),
    )


def rows(report: verify.Report) -> dict[str, verify.FieldRow]:
    return {row.field: row for row in report.fields}


def compare(
    profile: Profile, table: Any, observation: verify.Observation, **kw: Any
) -> verify.Report:
    return verify.compare(
        profile,
        table,
        observation,
        requested=requested_fields(profile),
        env=kw.pop("env", {}),
        secret_env=kw.pop("secret_env", frozenset()),
        secrets=kw.pop("secrets", {}),
        **kw,
    )


# -- the config line, both formats ------------------------------------------------------------


def test_config_line_up_to_0_5_18_is_a_serverargs_repr() -> None:
    fields = sglang_config.parse_server_args_line(
        config_line("server_args-logline-0511-simcuda.txt")
    )
    assert fields is not None
    assert len(fields) == 368  # every ServerArgs field of 0.5.11 (docs/sglang-facts.md §2)
    assert fields["mamba_scheduler_strategy"] == "extra_buffer"
    assert fields["speculative_num_draft_tokens"] == 4
    assert fields["page_size"] == 1
    assert set(fields) == set(T0511.fields)  # the same names as the argument table


def test_config_line_from_0_5_19_is_a_dict_with_nested_cuda_graph_config() -> None:
    fields = sglang_config.parse_server_args_line(
        config_line("server_args-logline-0523-simcuda.txt")
    )
    assert fields is not None
    assert len(fields) == 546
    assert fields["mamba_radix_cache_strategy"] == "extra_buffer"
    assert fields["cuda_graph_max_bs_decode"] is None  # the flat field keeps the raw input
    assert verify.resolved_value(fields, "cuda_graph_max_bs_decode") == 256  # effective
    assert verify.resolved_value(fields, "cuda_graph_backend_prefill") == "disabled"


@pytest.mark.parametrize(
    "capture",
    [
        "launch_server-0511-seed-without-mamba-flag-cpu.stderr",
        "launch_server-0523-seed-renamed-flag-cpu.stderr",
        "sglang-serve-0511-seed-without-mamba-flag-cpu.stderr",
        "sglang-serve-0523-seed-renamed-flag-cpu.stderr",
    ],
)
def test_tracebacks_hold_no_config_line(capture: str, tmp_path: Path) -> None:
    lines = capture_lines(capture)
    assert all(sglang_config.parse_server_args_line(line) is None for line in lines)
    log = tmp_path / "server.log"
    log.write_text("\n".join(lines) + "\n")
    found = config_from_log(str(log))  # what the agent finds in such a log
    assert found["server_args_line"] is None
    assert found["log_lines"][-1] == lines[-1]


def test_config_line_is_read_never_evaluated(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    line = f"[2026-11-29 07:42:47] server_args=ServerArgs(port=__import__('os').system('touch {marker}'))"
    with pytest.raises(sglang_config.UnreadableConfig):
        sglang_config.parse_server_args_line(line)
    assert not marker.exists()
    assert sglang_config.parse_server_args_line("[2026-11-29 07:42:47] Load weight begin.") is None


def test_a_config_line_in_a_real_log_is_found_with_what_was_logged_before(tmp_path: Path) -> None:
    lines = capture_lines("resolve-0511-G_spec_draft8_topk1.txt")
    logged = [line for line in lines if line.startswith("[")]
    config = config_line("server_args-logline-0511-simcuda.txt")
    log = tmp_path / "server.log"
    log.write_text("\n".join([*logged, config, "[2026-11-29 07:42:48] Load weight begin."]) + "\n")
    found = config_from_log(str(log))
    assert found["server_args_line"] == config
    assert found["log_lines"] == logged


# -- /server_info -----------------------------------------------------------------------------


def test_server_info_0_5_11_has_every_field_at_top_level() -> None:
    info = payload("server_info-payload-0511-offline.json")
    observed = observe_answer({"pid": 1, "alive": True, "server_info": info})
    assert observed.resolved is not None
    assert set(T0511.fields) <= set(observed.resolved)
    assert observed.server_version == "0.5.11"
    assert observed.launch_command is None  # 0.5.20+ only


def test_server_info_internal_states_win_for_scheduler_side_values() -> None:
    info = payload("server_info-payload-0523-offline.json")
    info = {**info, "internal_states": [{"max_running_requests": 31}]}
    observed = observe_answer({"pid": 1, "alive": True, "server_info": info})
    assert observed.resolved is not None
    assert observed.resolved["max_running_requests"] == 31
    assert observed.resolved["mamba_radix_cache_strategy"] == "extra_buffer"


def test_launch_command_0_5_23_reads_back_into_fields() -> None:
    info = payload("server_info-payload-0523-offline.json")
    parsed = sglang_config.parse_arguments(T0523, info["launch_command"].split())
    assert parsed.unknown == ()
    assert parsed.values["mamba_radix_cache_strategy"] == "extra_buffer"
    assert parsed.values["speculative_num_draft_tokens"] == 4
    assert parsed.values["trust_remote_code"] is True
    assert parsed.values["mem_fraction_static"] == 0.92


def test_shipped_incident_profile_matches_the_0_5_11_server_info_capture() -> None:
    profile = shipped("qwen36-mtp-b200")
    info = payload("server_info-payload-0511-offline.json")
    observed = observe_answer(
        {"pid": 1, "alive": True, "argv": list(argv_of(profile, T0511)), "server_info": info}
    )
    report = compare(profile, T0511, observed)
    assert report.drift == ()
    assert rows(report)["mamba_scheduler_strategy"].resolved == "extra_buffer"


def test_shipped_profile_on_0_5_23_against_its_capture_and_launch_command() -> None:
    profile = shipped("qwen36-mtp-b200")
    info = payload("server_info-payload-0523-offline.json")
    observed = observe_answer(
        {"pid": 1, "alive": True, "argv": list(argv_of(profile, T0523)), "server_info": info}
    )
    report = compare(profile, T0523, observed)
    assert report.drift == ()
    row = rows(report)["mamba_radix_cache_strategy"]
    assert row.requested_as == "mamba_scheduler_strategy"  # the profile's spelling, renamed
    assert row.launch_command == "extra_buffer"


# -- reading a command line back ----------------------------------------------------------------


def test_argv_reads_like_sglangs_parser_aliases_abbreviations_equals() -> None:
    parsed = sglang_config.parse_arguments(
        T0511,
        [
            "--tp-size",
            "4",
            "--mamba-sched",
            "extra_buffer",
            "--context-length=8192",
            "--trust-remote-code",
            "--mem-fraction-static",
            "0.9",
        ],
    )
    assert parsed.values == {
        "tp_size": 4,  # --tp-size is an alias of --tensor-parallel-size in 0.5.11
        "mamba_scheduler_strategy": "extra_buffer",  # argparse's prefix matching
        "context_length": 8192,
        "trust_remote_code": True,
        "mem_fraction_static": 0.9,
    }


def test_argv_with_a_removed_flag_leaves_it_unknown() -> None:
    parsed = sglang_config.parse_arguments(T0523, ["--mamba-scheduler-strategy", "extra_buffer"])
    assert "mamba_radix_cache_strategy" not in parsed.values
    assert parsed.unknown == ("--mamba-scheduler-strategy", "extra_buffer")


def test_argv_reads_a_deprecated_const_alias_as_the_value_its_help_names() -> None:
    # SGLang 0.5.14's --disable-piecewise-cuda-graph stores 'disabled' in
    # cuda_graph_backend_prefill ("Deprecated alias for --cuda-graph-backend-prefill=disabled")
    parsed = sglang_config.parse_arguments(load_table("0.5.14"), ["--disable-piecewise-cuda-graph"])
    assert parsed.values == {"cuda_graph_backend_prefill": "disabled"}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["python", "-m", "sglang.launch_server", "--port", "1"], ("--port", "1")),
        (["/venv/bin/sglang", "serve", "--port", "1"], ("--port", "1")),
        (["/usr/bin/python3", "/venv/bin/sglang", "serve"], ()),
        (["python", "server.py", "--port", "1"], None),
    ],
)
def test_sglang_arguments_after_the_program(argv: list[str], expected: Any) -> None:
    assert sglang_config.sglang_arguments(argv) == expected


@pytest.mark.parametrize(
    ("want", "got", "equal"),
    [
        (8192, "8192", True),
        (0.92, 0.921, False),
        (0.92, 0.92 + 1e-15, True),
        (0.9, 0.9, True),
        ("{}", {}, True),
        ('{"a": [1, 2]}', {"a": [1, 2]}, True),
        ("/models//Qwen/", "/models/Qwen", True),
        ("qwen", "Qwen", False),
        (True, 1, False),
        (None, None, True),
        (None, "None", False),
        ([1, 2], (1, 2), True),
        ([1, 2], [2, 1], False),
    ],
)
def test_same_normalises_without_confusing(want: Any, got: Any, equal: bool) -> None:
    assert verify.same(want, got) is equal


# -- verdicts -----------------------------------------------------------------------------------


def test_dropped_flag_is_not_received_and_the_rest_ok() -> None:
    profile = shipped("qwen36-mtp-b200")
    argv = argv_of(profile, T0511)
    index = argv.index("--mamba-scheduler-strategy")
    dropped = argv[:index] + argv[index + 2 :]
    resolved = sglang_config.parse_server_args_line(
        config_line("server_args-logline-0511-simcuda.txt")
    )
    assert resolved is not None
    resolved = {**resolved, "mamba_scheduler_strategy": "no_buffer"}
    report = compare(profile, T0511, observe(dropped, resolved))
    drift = {row.field: row.verdict for row in report.fields if row.drift}
    assert drift == {"mamba_scheduler_strategy": verify.NOT_RECEIVED}
    row = rows(report)["mamba_scheduler_strategy"]
    assert (row.received, row.resolved) == (verify.ABSENT, "no_buffer")


def test_override_carries_the_line_that_explains_it() -> None:
    base = shipped("qwen36-mtp-b200")
    assert base.spec_decode is not None
    profile = dataclasses.replace(
        base, spec_decode=dataclasses.replace(base.spec_decode, num_draft_tokens=8)
    )
    resolved = sglang_config.parse_server_args_line(
        config_line("server_args-logline-0511-simcuda.txt")
    )
    explaining = capture_lines("resolve-0511-G_spec_draft8_topk1.txt")
    report = compare(
        profile, T0511, observe(argv_of(profile, T0511), resolved, log_lines=explaining)
    )
    row = rows(report)["speculative_num_draft_tokens"]
    assert (row.profile, row.received, row.resolved) == (8, 8, 4)
    assert row.verdict == verify.OVERRIDDEN
    assert row.why == (
        "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 when "
        "speculative_eagle_topk == 1"
    )
    assert row.key_path == "spec_decode.num_draft_tokens"


def test_a_hand_edited_value_is_received_other() -> None:
    profile = shipped("qwen36-mtp-b200")
    argv = argv_of(profile, T0511)
    index = argv.index("--speculative-num-draft-tokens")
    eight = (*argv[: index + 1], "8", *argv[index + 2 :])
    report = compare(profile, T0511, observe(eight, None))
    row = rows(report)["speculative_num_draft_tokens"]
    assert (row.verdict, row.received) == (verify.RECEIVED_OTHER, 8)


@pytest.mark.parametrize(
    ("field", "line"),
    [
        (
            "speculative_num_draft_tokens",
            "speculative_num_draft_tokens is adjusted to "
            "speculative_num_steps + 1 when speculative_eagle_topk == 1",
        ),
        (
            "max_running_requests",
            "Max running requests is reset to 48 for speculative "
            "decoding. You can override this by explicitly setting --max-running-requests.",
        ),
        ("attention_backend", "Attention backend not specified. Use fa3 backend by default."),
    ],
)
def test_explain_finds_sglangs_own_line(field: str, line: str) -> None:
    lines = capture_lines("resolve-0511-G_spec_draft8_topk1.txt")
    assert verify.explain(field, lines) == line


def test_overridden_extra_env_and_secrets() -> None:
    profile = shipped("qwen36-mtp-b200")
    argv = (*argv_of(profile, T0511), "--page-size", "16")
    resolved = sglang_config.parse_server_args_line(
        config_line("server_args-logline-0511-simcuda.txt")
    )
    assert resolved is not None
    resolved = {**resolved, "context_length": 4096}
    report = compare(
        profile,
        T0511,
        observe(argv, resolved, env={"SGLANG_ENABLE_SPEC_V2": "0", "HF_TOKEN": "leaked?"}),
        env={"SGLANG_ENABLE_SPEC_V2": "1", "HF_TOKEN": "hf_real", "CUDA_HOME": "/usr/local/cuda"},
        secret_env=frozenset({"HF_TOKEN"}),
    )
    by = rows(report)
    assert by["context_length"].verdict == verify.OVERRIDDEN
    assert by["page_size"].verdict == verify.EXTRA
    env = {row.name: row for row in report.env}
    assert env["SGLANG_ENABLE_SPEC_V2"].verdict == verify.ENV_OTHER
    assert env["CUDA_HOME"].verdict == verify.ENV_MISSING
    assert env["HF_TOKEN"].verdict == verify.ENV_OTHER
    assert (env["HF_TOKEN"].profile, env["HF_TOKEN"].received) == ("<secret>", "<secret>")
    shown = json.dumps(show_reports.diff_json(report))
    assert "hf_real" not in shown
    assert "leaked?" not in shown
    assert {r.field for r in report.pinned_drift(["context_length"], T0511)} == {"context_length"}
    assert report.pinned_drift(["port"], T0511) == ()


def test_defaulted_lists_what_sglang_filled_in() -> None:
    profile = shipped("qwen36-mtp-b200")
    resolved = sglang_config.parse_server_args_line(
        config_line("server_args-logline-0511-simcuda.txt")
    )
    report = compare(
        profile, T0511, observe(argv_of(profile, T0511), resolved), include_defaulted=True
    )
    defaulted = {row.field: row.resolved for row in report.fields if row.verdict == "defaulted"}
    assert defaulted["max_running_requests"] == 48
    assert defaulted["attention_backend"] == "fa3"
    assert "mem_fraction_static" not in defaulted  # the profile sets it
    assert report.drift == ()


def test_a_value_with_spaces_in_launch_command_is_not_drift() -> None:
    """SGLang joins launch_command with spaces, unquoted: ``--served-model-name qwen chat`` read
    back by splitting gave "qwen" and a stray "chat", and a false drift (issue 26)."""
    base = shipped("qwen36-mtp-b200")
    profile = dataclasses.replace(
        base, model=dataclasses.replace(base.model, served_model_name="qwen chat")
    )
    argv = argv_of(profile, T0523)
    arguments = sglang_config.sglang_arguments(argv)
    assert arguments is not None
    info = {
        **payload("server_info-payload-0523-offline.json"),
        "served_model_name": "qwen chat",
        "launch_command": " ".join(arguments),  # as SGLang writes it
    }
    observed = observe_answer({"pid": 1, "alive": True, "argv": list(argv), "server_info": info})
    report = compare(profile, T0523, observed)
    row = rows(report)["served_model_name"]
    assert (row.verdict, row.launch_command) == ("ok", "qwen chat")
    assert report.drift == ()
    assert not any("launch_command does not parse" in note for note in report.notes)

    elsewhere = {**info, "launch_command": info["launch_command"].replace("qwen chat", "qwen")}
    observed = observe_answer(
        {"pid": 1, "alive": True, "argv": list(argv), "server_info": elsewhere}
    )
    row = rows(compare(profile, T0523, observed))["served_model_name"]
    assert row.verdict == "received-other"  # a real difference still shows


def test_lock_values_are_the_locks_not_the_profiles() -> None:
    """diff-effective's PROFILE column showed the lock's values for fields the profile never
    set (issue 26): they belong to a LOCK column, the profile's cell empty."""
    profile = shipped("qwen36-mtp-b200")
    info = payload("server_info-payload-0523-offline.json")
    observed = observe_answer(
        {"pid": 1, "alive": True, "argv": list(argv_of(profile, T0523)), "server_info": info}
    )
    report = compare(profile, T0523, observed)
    locked = {"attention_backend": "triton", "page_size": info["page_size"]}
    report = verify.compare_lock(report, locked, info)
    fields = rows(report)
    attention = fields["attention_backend"]
    assert attention.profile is verify.ABSENT  # the profile does not set it
    assert (attention.locked, attention.verdict) == ("triton", "lock-drift")
    assert fields["page_size"].profile is verify.ABSENT
    text = show_reports.diff_text(report)
    header, *table = text.splitlines()[1:]
    assert header.split()[:3] == ["FIELD", "PROFILE", "LOCK"]
    (line,) = [row for row in table if row.startswith("attention_backend ")]
    assert line.split()[1:4] == ["-", "triton", "-"]  # profile, lock, received
    document = show_reports.diff_json(report)
    (row,) = [row for row in document["fields"] if row["field"] == "attention_backend"]
    assert (row["profile"], row["lock"], row["verdict"]) == (None, "triton", "lock-drift")

    unlocked = show_reports.diff_text(compare(profile, T0523, observed))
    assert "LOCK" not in unlocked.splitlines()[1]  # no lock, no column
