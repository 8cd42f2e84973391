"""The action each change forces, and the fields that force it: values compared, never text."""

from __future__ import annotations

from orchestrator.errors import ExitCode
from tests.unit.review.repo import ProfilesRepo, by_name

PAIR = """\
sglang: "0.5.23"
model:
  path: /models/big
gpu:
  type: H200
args:
  tp_size: 2
group:
  nodes:
    - host: gpu-a
      env: {NCCL_SOCKET_IFNAME: ens1}
    - host: gpu-b
      env: {NCCL_SOCKET_IFNAME: ens2}
  rendezvous_port: 20000
  control_port: 20100
"""


def test_restart_and_health_settings_only_are_agent_only(repo: ProfilesRepo) -> None:
    repo.edit("leaf.yaml", "port: 30001", "port: 30001\nrestart:\n  delay_s: 10\n")
    repo.edit("mid.yaml", "extends: base", "extends: base\nhealth:\n  interval_s: 2")
    repo.commit("supervision")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert deployments["leaf"]["action"] == "agent-only"
    assert set(deployments["leaf"]["forced_by"]) == {"restart.delay_s", "health.interval_s"}
    assert deployments["mid"]["action"] == "agent-only"
    assert deployments["mid"]["forced_by"] == ["health.interval_s"]
    # the server's launch is the same on both sides
    leaf = deployments["leaf"]["rendered"]
    assert leaf["before"]["argv"] == leaf["after"]["argv"]


def test_a_field_written_at_its_default_is_no_change_but_the_rendering_shows(
    repo: ProfilesRepo,
) -> None:
    # 16384 is SGLang 0.5.23's default max_prefill_tokens; info its default log level
    repo.edit("leaf.yaml", "port: 30001", "port: 30001\nargs:\n  max_prefill_tokens: 16384")
    repo.commit("explicit default")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES  # the launch differs: a reviewer sees it
    leaf = by_name(report)["leaf"]
    assert leaf["action"] == "none"
    assert leaf["changes"] == []
    assert "--max-prefill-tokens" in leaf["rendered"]["after"]["argv"]
    assert "--max-prefill-tokens" not in leaf["rendered"]["before"]["argv"]
    _, text, _ = repo.orch("diff", "HEAD~1..HEAD")
    assert "+ --max-prefill-tokens 16384" in text
    assert "the effective configuration did not" in text


def test_logging_is_live_where_the_release_changes_it_in_place(repo: ProfilesRepo) -> None:
    repo.edit("leaf.yaml", "port: 30001", "port: 30001\nargs:\n  log_requests: true")
    repo.commit("log requests")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    leaf = by_name(report)["leaf"]
    assert leaf["action"] == "live"
    assert leaf["forced_by"] == ["log_requests"]
    assert leaf["live"] == {"log_requests": "/configure_logging"}


def test_log_level_is_live_on_0_5_23_and_a_restart_on_0_5_11(repo: ProfilesRepo) -> None:
    repo.write("old.yaml", 'extends: base\nsglang: "0.5.11"\nport: 30009\n')
    repo.commit("a 0.5.11 profile")
    for name in ("leaf.yaml", "old.yaml"):
        repo.edit(name, "port: 300", "args:\n  log_level: debug\nport: 300")
    repo.commit("debug logs")
    _, report = repo.diff_json("HEAD~1..HEAD")
    deployments = by_name(report)
    assert deployments["leaf"]["action"] == "live"  # 0.5.23's ConfigureLoggingReq has it
    assert deployments["old"]["action"] == "restart"  # 0.5.11's has not
    assert deployments["old"]["forced_by"] == ["log_level"]


def test_a_change_of_a_live_field_and_a_restart_field_is_a_restart_forced_by_the_latter(
    repo: ProfilesRepo,
) -> None:
    repo.edit("leaf.yaml", "port: 30001", "port: 30001\nargs:\n  log_requests: true\n")
    repo.edit("leaf.yaml", "args:\n", "env:\n  SGLANG_ENABLE_SPEC_V2: '1'\nargs:\n")
    repo.commit("two changes")
    _, report = repo.diff_json("HEAD~1..HEAD")
    leaf = by_name(report)["leaf"]
    assert leaf["action"] == "restart"
    assert leaf["forced_by"] == ["env.SGLANG_ENABLE_SPEC_V2"]


def test_a_release_bump_is_a_replace_and_shows_renames_as_renames(repo: ProfilesRepo) -> None:
    repo.write(
        "hybrid.yaml",
        """\
        extends: base
        sglang: "0.5.11"
        port: 30007
        args:
          mamba_scheduler_strategy: extra_buffer
          cuda_graph_max_bs: 32
        """,
    )
    repo.commit("hybrid on 0.5.11")
    repo.edit("hybrid.yaml", '"0.5.11"', '"0.5.23"')
    repo.commit("to 0.5.23")
    code, report = repo.diff_json("HEAD~1..HEAD", "hybrid")
    assert code == ExitCode.CHANGES
    item = by_name(report)["hybrid"]
    assert item["action"] == "replace"
    assert item["forced_by"] == ["sglang"]
    changes = {c["field"]: c for c in item["changes"]}
    renamed = changes["mamba_radix_cache_strategy"]
    assert renamed["basis"] == "rename"
    assert renamed["renamed_from"] == "mamba_scheduler_strategy"
    assert renamed["before"] == renamed["after"] == "extra_buffer"
    assert changes["cuda_graph_max_bs_decode"]["renamed_from"] == "cuda_graph_max_bs"
    assert "mamba_scheduler_strategy" not in changes  # not a removal
    before = item["rendered"]["before"]["argv"]
    after = item["rendered"]["after"]["argv"]
    assert "--mamba-scheduler-strategy" in before
    assert "--mamba-radix-cache-strategy" in after
    _, text, _ = repo.orch("diff", "HEAD~1..HEAD", "hybrid")
    assert "mamba_scheduler_strategy -> mamba_radix_cache_strategy  (renamed" in text


def test_a_half_set_speculative_triple_is_blocked_with_orchs_message(repo: ProfilesRepo) -> None:
    repo.edit(
        "leaf.yaml",
        "port: 30001",
        "port: 30001\nspec_decode:\n  algorithm: EAGLE\n  num_steps: 3\n",
    )
    repo.commit("half a triple")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    leaf = by_name(report)["leaf"]
    assert leaf["action"] == "blocked"
    [reason] = leaf["reasons"]
    assert "profiles/leaf.yaml" in reason
    assert "speculative" in reason
    assert leaf["rendered"]["after"] is None  # it cannot be rendered
    _, text, _ = repo.orch("diff", "HEAD~1..HEAD")
    assert f"blocked: {reason}" in text


def test_a_group_lists_each_rank_and_a_nodes_own_change_only_that_rank(
    repo: ProfilesRepo,
) -> None:
    repo.write("pair.yaml", PAIR)
    repo.commit("a pair")
    repo.edit("pair.yaml", "tp_size: 2", "tp_size: 2\n  context_length: 4096")
    repo.commit("both ranks")
    _, report = repo.diff_json("HEAD~1..HEAD", "pair")
    assert sorted(by_name(report)) == ["pair[0]", "pair[1]"]
    assert {d["action"] for d in report["deployments"]} == {"restart"}
    repo.edit("pair.yaml", "NCCL_SOCKET_IFNAME: ens2", "NCCL_SOCKET_IFNAME: ens3")
    repo.commit("rank 1's NIC")
    _, report = repo.diff_json("HEAD~1..HEAD", "pair")
    assert list(by_name(report)) == ["pair[1]"]
    assert report["deployments"][0]["forced_by"] == ["env.NCCL_SOCKET_IFNAME"]
    repo.edit("pair.yaml", "tp_size: 2", "tp_size: 3")
    repo.edit(
        "pair.yaml",
        "{NCCL_SOCKET_IFNAME: ens3}\n",
        "{NCCL_SOCKET_IFNAME: ens3}\n    - host: gpu-c\n",
    )
    repo.commit("a third node")
    _, report = repo.diff_json("HEAD~1..HEAD", "pair")
    deployments = by_name(report)
    assert sorted(deployments) == ["pair[0]", "pair[1]", "pair[2]"]
    assert {d["action"] for d in deployments.values()} == {"replace"}
    assert {tuple(d["forced_by"]) for d in deployments.values()} == {("group.nodes",)}


def test_a_group_that_stops_validating_is_blocked_on_every_rank(repo: ProfilesRepo) -> None:
    repo.write("pair.yaml", PAIR)
    repo.commit("a pair")
    repo.edit("pair.yaml", "tp_size: 2", "tp_size: 2\n  no_such_flag: 1")
    repo.commit("a typo")
    _, report = repo.diff_json("HEAD~1..HEAD", "pair")
    deployments = by_name(report)
    assert sorted(deployments) == ["pair[0]", "pair[1]"]
    for item in deployments.values():
        assert item["action"] == "blocked"
        assert any("no_such_flag" in reason for reason in item["reasons"])


def test_labels_change_nothing_a_review_shows(repo: ProfilesRepo) -> None:
    repo.edit("leaf.yaml", "port: 30001\n", "port: 30001\nlabels: [team-a]\n")
    repo.commit("label leaf")
    code, document = repo.diff_json("HEAD~1..HEAD")
    assert code == 0
    assert document["deployments"] == []


def test_metrics_on_is_a_restart_forced_by_sglangs_metrics_fields(repo: ProfilesRepo) -> None:
    repo.write("pair.yaml", PAIR)
    repo.commit("a pair")
    repo.edit("pair.yaml", "tp_size: 2\n", "tp_size: 2\nmetrics: true\n")
    repo.commit("metrics on")
    code, report = repo.diff_json("HEAD~1..HEAD", "pair")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert sorted(deployments) == ["pair[0]", "pair[1]"]
    for item in deployments.values():
        assert item["action"] == "restart"
        assert set(item["forced_by"]) == {
            "enable_metrics",
            "enable_metrics_for_all_schedulers",
        }
        after = item["rendered"]["after"]["argv"]
        assert "--enable-metrics" in after
        assert "--enable-metrics-for-all-schedulers" in after
