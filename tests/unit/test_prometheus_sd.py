"""``orch export prometheus-sd``'s document (export/prometheus.py: pure) and ``metrics: true`` in
profiles: the file_sd shape, orch's labels, the rank >= 1 rule, the order, the notes; the CLI's
atomic write; the flags ``metrics: true`` renders and what it refuses."""

from __future__ import annotations

import dataclasses
import io
import json
import stat
from pathlib import Path

import pytest

from orchestrator import render
from orchestrator.cli import main as cli
from orchestrator.commands import prometheus_sd
from orchestrator.errors import ExitCode, InvalidProfile
from orchestrator.export.prometheus import (
    GatewayTarget,
    RunningServer,
    ServiceDiscovery,
    service_discovery,
)
from tests.conftest import ProfileDir

SGLANG_LABELS = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "dp_rank"}

SERVER = RunningServer(
    profile="qwen",
    deployment="qwen",
    rank=None,
    replica=None,
    host="gpu-1",
    address="10.0.0.7",
    bind="0.0.0.0",
    port=30000,
    commit="c0ffee0",
    sglang_version="0.5.23",
    metrics=True,
    all_schedulers=False,
)


def _rank(rank: int, *, all_schedulers: bool, address: str) -> RunningServer:
    return dataclasses.replace(
        SERVER,
        profile="big",
        deployment="big",
        rank=rank,
        host=f"node-{rank}",
        address=address,
        all_schedulers=all_schedulers,
    )


def test_one_server_is_one_target_group_with_orch_labels_only() -> None:
    found = service_discovery([SERVER])
    assert json.loads(found.text) == [
        {
            "targets": ["10.0.0.7:30000"],
            "labels": {
                "orch_role": "server",
                "orch_profile": "qwen",
                "orch_deployment": "qwen",
                "orch_host": "gpu-1",
                "orch_rank": "0",
                "orch_commit": "c0ffee0",
                "orch_sglang_version": "0.5.23",
            },
        }
    ]
    (group,) = found.groups
    assert all(key.startswith("orch_") for key in group["labels"])
    assert not SGLANG_LABELS & set(group["labels"])
    assert "__metrics_path__" not in group["labels"]  # SGLang serves /metrics, the default
    assert found.notes == ()


def test_a_groups_rank_1_is_a_target_only_with_every_schedulers_metrics() -> None:
    without = [_rank(r, all_schedulers=False, address=f"10.0.1.{r}") for r in (1, 0)]
    assert [g["targets"] for g in service_discovery(without).groups] == [["10.0.1.0:30000"]]
    every = [_rank(r, all_schedulers=True, address=f"10.0.1.{r}") for r in (1, 0)]
    groups = service_discovery(every).groups
    assert [g["targets"] for g in groups] == [["10.0.1.0:30000"], ["10.0.1.1:30000"]]
    assert [g["labels"]["orch_rank"] for g in groups] == ["0", "1"]
    assert [g["labels"]["orch_host"] for g in groups] == ["node-0", "node-1"]
    # without --enable-metrics at all a rank >= 1 serves nothing: not a target
    bare = dataclasses.replace(every[0], metrics=False)
    assert service_discovery([bare]).groups == ()


def test_order_is_by_profile_replica_rank_whatever_the_input_order() -> None:
    replicas = [
        dataclasses.replace(SERVER, deployment=f"qwen@{i}", replica=i, port=30000 + i)
        for i in (2, 0, 1)
    ]
    servers = [*replicas, dataclasses.replace(SERVER, profile="alpha", deployment="alpha")]
    first = service_discovery(servers)
    assert first.text == service_discovery(list(reversed(servers))).text
    assert [g["labels"]["orch_deployment"] for g in first.groups] == [
        "alpha",
        "qwen@0",
        "qwen@1",
        "qwen@2",
    ]
    assert [g["labels"].get("orch_replica") for g in first.groups] == [None, "0", "1", "2"]


def test_targets_on_this_machine_and_the_notes_for_what_cannot_be_scraped() -> None:
    local = dataclasses.replace(SERVER, address=None, bind="0.0.0.0")
    assert service_discovery([local]).groups[0]["targets"] == ["127.0.0.1:30000"]
    v6 = dataclasses.replace(SERVER, address="fd00::7")
    assert service_discovery([v6]).groups[0]["targets"] == ["[fd00::7]:30000"]
    loopback = dataclasses.replace(SERVER, bind="127.0.0.1", metrics=False)
    found = service_discovery(
        [loopback], [GatewayTarget("qwen", "http://10.0.0.5:30000", metrics_url=None)]
    )
    assert len(found.groups) == 1  # listed: Prometheus shows it down, where one looks
    assert found.notes == (
        "qwen runs without --enable-metrics: its /metrics answers 404 (set `metrics: true` in "
        "its profile)",
        "qwen is bound to 127.0.0.1 on gpu-1: only gpu-1 itself can scrape 10.0.0.7:30000 (set "
        "`bind: 0.0.0.0` or an address of the host)",
        "qwen's gateway (router:) is not listed: smg serves its metrics on its own "
        "--prometheus-port (default 29000); set router.metrics_url to list it",
    )


def test_a_gateway_with_its_metrics_url_is_one_group_of_its_own_for_all_behind_it() -> None:
    gateways = [
        GatewayTarget("qwen", "http://10.0.0.5:30000", "http://10.0.0.5:29000"),
        GatewayTarget("llama", "http://10.0.0.5:30000", "http://10.0.0.5:29000"),
        GatewayTarget("other", "https://gw.example:443", "https://gw.example:9100/stats"),
    ]
    found = service_discovery([SERVER], gateways)
    assert found.notes == ()
    assert found.groups[1:] == (
        {
            "targets": ["10.0.0.5:29000"],
            "labels": {
                "orch_role": "gateway",
                "orch_gateway": "http://10.0.0.5:30000",
                "orch_profiles": "llama,qwen",
            },
        },
        {
            "targets": ["gw.example:9100"],
            "labels": {
                "orch_role": "gateway",
                "orch_gateway": "https://gw.example:443",
                "orch_profiles": "other",
                "__metrics_path__": "/stats",
                "__scheme__": "https",
            },
        },
    )


def test_no_running_server_is_an_empty_list() -> None:
    assert service_discovery([]).text == "[]\n"


def _cli(profile_dir: ProfileDir, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(["--profiles", str(profile_dir.root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_the_cli_writes_the_file_atomically_and_stdout_stays_json(
    profile_dir: ProfileDir, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked: list[prometheus_sd.Request] = []

    def fake_export(ctx: object, request: prometheus_sd.Request) -> ServiceDiscovery:
        asked.append(request)
        found = service_discovery([dataclasses.replace(SERVER, metrics=False)])
        return dataclasses.replace(found, notes=(*found.notes, "gpu-9 not surveyed: no route"))

    monkeypatch.setattr(prometheus_sd, "export", fake_export)
    target = tmp_path / "targets.json"
    target.write_text("[] old\n")
    target.chmod(0o640)
    before = target.stat().st_ino
    code, out, err = _cli(profile_dir, "export", "prometheus-sd", "a", "b", "-o", str(target))
    assert code == ExitCode.OK, err
    assert json.loads(target.read_text())[0]["targets"] == ["10.0.0.7:30000"]
    assert target.stat().st_ino != before  # a new file renamed over the old one
    assert stat.S_IMODE(target.stat().st_mode) == 0o640  # a replaced file keeps its mode
    assert sorted(p.name for p in tmp_path.iterdir()) == ["profiles", "targets.json"]
    assert f"wrote {target}: 1 Prometheus target(s)" in out
    assert "  note: gpu-9 not surveyed: no route" in out

    code, out, err = _cli(profile_dir, "export", "prometheus-sd", "--all")
    assert code == ExitCode.OK
    assert [request.names for request in asked] == [("a", "b"), ()]
    assert json.loads(out)[0]["labels"]["orch_profile"] == "qwen"  # notes went to stderr
    assert "orch: note: gpu-9 not surveyed: no route" in err

    code, _, err = _cli(profile_dir, "export", "prometheus-sd", "qwen", "--all")
    assert code == ExitCode.USAGE
    assert "--all or PROFILE names, not both" in err


def test_other_engines_still_take_exactly_one_profile(profile_dir: ProfileDir) -> None:
    code, _, err = _cli(profile_dir, "export", "skypilot", "a", "b")
    assert code == ExitCode.USAGE
    assert "orch export skypilot takes one PROFILE" in err
    code, _, err = _cli(profile_dir, "export", "k8s")
    assert code == ExitCode.USAGE


GROUP_HOSTS = """\
hosts:
  node-a: {address: 10.0.0.1, python: /opt/venv/bin/python, workdir: /data/orch}
  node-b: {address: 10.0.0.2, python: /opt/venv/bin/python, workdir: /data/orch}
"""
GROUP = "group:\n  nodes: [node-a, node-b]\n  rendezvous_port: 20000\nargs: {tp_size: 2}\n"


def _argvs(profile_dir: ProfileDir, body: str, version: str = "0.5.23") -> list[list[str]]:
    profile_dir.write("hosts.yaml", GROUP_HOSTS)
    profile_dir.write("p", f'sglang: "{version}"\nmodel: {{path: /models/m}}\n' + body)
    loaded = profile_dir.store().load("p")
    return [
        [str(word) for word in command.argv]
        for command in render.render_members(loaded.profile, loaded.table)
    ]


def _errors(profile_dir: ProfileDir, body: str, version: str = "0.5.23") -> dict[str, str]:
    with pytest.raises(InvalidProfile) as caught:
        _argvs(profile_dir, body, version)
    return {str(error.key_path): error.message for error in caught.value.errors}


def test_metrics_true_renders_enable_metrics_and_for_a_group_every_scheduler(
    profile_dir: ProfileDir,
) -> None:
    (single,) = _argvs(profile_dir, "host: node-a\nmetrics: true\n")
    assert "--enable-metrics" in single
    assert "--enable-metrics-for-all-schedulers" not in single
    ranks = _argvs(profile_dir, GROUP + "metrics: true\n")
    assert len(ranks) == 2
    for argv in ranks:
        assert "--enable-metrics" in argv
        assert "--enable-metrics-for-all-schedulers" in argv
    (off,) = _argvs(profile_dir, "host: node-a\nmetrics: false\n")
    assert not any(word.startswith("--enable-metrics") for word in off)


def test_metrics_is_inherited_and_overridable(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", "abstract: true\nmetrics: true\n")
    (inherited,) = _argvs(profile_dir, "extends: base\nhost: node-a\n")
    assert "--enable-metrics" in inherited
    (overridden,) = _argvs(profile_dir, "extends: base\nhost: node-a\nmetrics: false\n")
    assert "--enable-metrics" not in overridden


def test_metrics_refusals_name_the_file_and_key(profile_dir: ProfileDir) -> None:
    assert _errors(profile_dir, "host: node-a\nmetrics: yes please\n") == {
        "metrics": "profiles/p.yaml:4:1: metrics: expected true or false, got 'yes please'"
    }
    twice = _errors(profile_dir, "host: node-a\nmetrics: true\nargs: {enable_metrics: true}\n")
    assert twice == {
        "args.enable_metrics": "profiles/p.yaml:5:8: args.enable_metrics: enable_metrics is set "
        "by `metrics: true`"
    }
    # 0.4.9.post2 has --enable-metrics but not --enable-metrics-for-all-schedulers
    old = _errors(profile_dir, GROUP + "metrics: true\n", version="0.4.9.post2")
    assert old == {"metrics": "profiles/p.yaml:7:1: metrics: unknown SGLang 0.4.9.post2 argument"}
    with pytest.raises(InvalidProfile) as caught:
        _argvs(profile_dir, GROUP + "metrics: true\n", version="0.4.9.post2")
    assert caught.value.errors[0].hint == (
        "`metrics: true` renders --enable-metrics-for-all-schedulers, which SGLang 0.4.9.post2 "
        "does not have (first in 0.4.9.post3): pin a newer `sglang:`, or leave `metrics` out "
        "and set args yourself"
    )
    (fine,) = _argvs(profile_dir, "host: node-a\nmetrics: true\n", version="0.4.9.post2")
    assert "--enable-metrics" in fine
