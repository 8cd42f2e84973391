"""Launch groups in profiles: declared once, validated for what SGLang does not check, rendered
as one command per rank that differs only where it must."""

from __future__ import annotations

import json

import pytest

from orchestrator import render
from orchestrator.errors import ExitCode, InvalidProfile, ProfileError
from orchestrator.fleet import groups
from orchestrator.fleet.protocol.probe import GpuFacts, HostFacts, PortFacts
from orchestrator.profile.store import LoadedProfile
from tests.conftest import ProfileDir

HOSTS = """\
hosts:
  node-a:
    address: 10.0.0.1
    python: /opt/venv/bin/python
    workdir: /data/orch
  node-b:
    address: 10.0.0.2
    python: /opt/venv/bin/python
    workdir: /data/orch
  node-c:
    address: 10.0.0.3
    python: /opt/venv/bin/python
    workdir: /data/orch
  node-a2:
    address: 10.0.0.1
    python: /opt/venv/bin/python
    workdir: /data/orch
"""

HEAD = 'sglang: "0.5.23"\nmodel: {path: /models/m}\n'
GROUP = """\
args: {tp_size: 16}
group:
  nodes:
    - host: node-a
      env: {NCCL_SOCKET_IFNAME: eth0}
    - host: node-b
      env: {NCCL_SOCKET_IFNAME: eth1}
  rendezvous_port: 20000
"""


def _load(profile_dir: ProfileDir, body: str) -> LoadedProfile:
    profile_dir.write("hosts.yaml", HOSTS)
    profile_dir.write("p", HEAD + body)
    return profile_dir.store().load("p")


def _errors(profile_dir: ProfileDir, body: str) -> list[ProfileError]:
    with pytest.raises(InvalidProfile) as caught:
        _load(profile_dir, body)
    assert caught.value.exit_code == ExitCode.CONFIG
    return caught.value.errors


def _one(profile_dir: ProfileDir, body: str) -> ProfileError:
    errors = _errors(profile_dir, body)
    assert len(errors) == 1, [e.message for e in errors]
    return errors[0]


def test_group_renders_one_command_per_rank_differing_in_rank_and_node_env(
    profile_dir: ProfileDir,
) -> None:
    loaded = _load(profile_dir, GROUP)
    profile = loaded.profile
    assert profile.group is not None
    assert profile.nnodes == 2
    assert profile.host.name == "node-a"  # rank 0's host is the profile's
    commands = render.render_members(profile, loaded.table)
    tails = [list(command.argv[-8:]) for command in commands]
    gate = ["--gated-launch-port", "20050"]  # SGLang 0.5.23 has the gate: rendezvous + 50
    assert tails == [
        ["--dist-init-addr", "10.0.0.1:20000", "--nnodes", "2", "--node-rank", "0", *gate],
        ["--dist-init-addr", "10.0.0.1:20000", "--nnodes", "2", "--node-rank", "1", *gate],
    ]
    assert [c.env["NCCL_SOCKET_IFNAME"] for c in commands] == ["eth0", "eth1"]
    assert render.rank_differences(commands) == [
        "rank 1: --node-rank 1 (rank 0: 0)",
        "rank 1: NCCL_SOCKET_IFNAME=eth1 (rank 0: eth0)",
    ]
    # every rank carries the group's one digest, which changes with any rank's command
    assert render.launch_digest(*commands) != render.launch_digest(commands[0])
    document = json.loads(render.group_json(profile, loaded.table))
    assert document["group"] == {
        "nnodes": 2,
        "rendezvous": "10.0.0.1:20000",
        "control_port": 20100,
        "gated_launch_port": 20050,
    }
    assert [rank["host"] for rank in document["ranks"]] == ["node-a", "node-b"]


def test_group_rank0_address_and_ipv6_rendezvous(profile_dir: ProfileDir) -> None:
    body = GROUP.replace("    - host: node-a\n", "    - host: node-a\n      address: 'fd00::1'\n")
    loaded = _load(profile_dir, body)
    commands = render.render_members(loaded.profile, loaded.table)
    assert "[fd00::1]:20000" in commands[1].argv


def test_group_nodes_on_one_machine_need_their_own_workdirs(profile_dir: ProfileDir) -> None:
    """Two host entries for one machine (as the tests do on 127.0.0.1) may share it only with
    different workdirs and ports."""
    body = GROUP.replace("node-b", "node-a2")
    error = _one(profile_dir, body)
    assert "share one deployment directory" in error.message
    assert error.key_path == "group.nodes[1].host"


def test_group_same_machine_same_port_refused(profile_dir: ProfileDir) -> None:
    hosts = HOSTS.replace(
        "  node-a2:\n    address: 10.0.0.1\n    python: /opt/venv/bin/python\n"
        "    workdir: /data/orch\n",
        "  node-a2:\n    address: 10.0.0.1\n    python: /opt/venv/bin/python\n"
        "    workdir: /data/orch2\n",
    )
    profile_dir.write("hosts.yaml", hosts)
    profile_dir.write("p", HEAD + GROUP.replace("node-b", "node-a2"))
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("p")
    (error,) = caught.value.errors
    assert "share a machine and --port 30000" in error.message
    assert error.hint == "give this node its own port: group.nodes[1].port"


def test_group_refuses_what_sglang_accepts_and_hangs_on(profile_dir: ProfileDir) -> None:
    """Real resolution accepts --tp 16 --nnodes 3: 5 ranks per node, rank 15 never starts."""
    body = GROUP.replace("  rendezvous_port", "    - host: node-c\n  rendezvous_port")
    error = _one(profile_dir, body)
    assert error.message.endswith(
        "group.nodes: tp_size x pp_size = 16 GPUs cannot be split evenly over 3 nodes"
    )
    assert "hang at init" in (error.hint or "")


def test_group_per_node_gpus_checked_against_devices(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, GROUP + "gpu: {devices: [0, 1, 2, 3]}\n")
    assert "tp_size x pp_size = 8 GPUs per node (16 over 2 nodes), but gpu.devices lists 4" in (
        error.message
    )


def test_group_fields_are_orchs_to_set(profile_dir: ProfileDir) -> None:
    errors = _errors(
        profile_dir, GROUP.replace("args: {tp_size: 16}", "args: {tp_size: 16, node_rank: 1}")
    )
    assert [e.key_path for e in errors] == ["args.node_rank"]
    assert "orch sets node_rank from `group:`" in errors[0].message


def test_nnodes_without_group_is_refused(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "host: node-a\nargs: {tp_size: 16, nnodes: 2}\n")
    assert error.key_path == "args.nnodes"
    assert "group.nodes" in (error.hint or "")


def test_group_port_clashes_with_rendezvous_and_dp_attention_ports(
    profile_dir: ProfileDir,
) -> None:
    error = _one(profile_dir, GROUP + "port: 20000\n")
    assert "rank 0's --port 20000 is the group's rendezvous port on node-a" in error.message
    dp = GROUP.replace("{tp_size: 16}", "{tp_size: 16, dp_size: 2, enable_dp_attention: true}")
    error = _one(profile_dir, dp + "port: 20003\n")
    assert "with DP attention SGLang takes ports 20001-20006" in error.message
    assert "rank 0's --port port 20003" in error.message


def test_group_host_and_node_errors_are_located(profile_dir: ProfileDir) -> None:
    errors = _errors(
        profile_dir,
        "host: node-a\n"
        "group:\n"
        "  nodes:\n"
        "    - host: node-a\n"
        "    - host: nod-b\n"
        "      colour: red\n",
    )
    messages = {e.key_path: e for e in errors}
    assert "rank 0's host is group.nodes[0].host" in (messages["host"].hint or "")
    assert messages["group.nodes[1].host"].hint is not None
    assert "did you mean node-b?" in messages["group.nodes[1].host"].hint
    assert "group.nodes[1].colour" in messages


def test_group_of_one_node_is_refused(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "group:\n  nodes: [node-a]\n")
    assert "expected a list of at least 2 nodes, got 1 node" in error.message


def test_group_host_twice_refused(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "args: {tp_size: 2}\ngroup:\n  nodes: [node-a, node-a]\n")
    assert "host node-a is in the group twice" in error.message


def test_pp_is_spelled_pp_size(profile_dir: ProfileDir) -> None:
    """`--pp 2` is an ambiguous-option error in SGLang 0.5.11 and 0.5.23."""
    error = _one(profile_dir, GROUP.replace("{tp_size: 16}", "{tp_size: 8, pp: 2}"))
    assert error.key_path == "args.pp"
    assert "pp_size" in (error.hint or "")


def _facts(version: str, python: str, env: dict[str, str]) -> HostFacts:
    return HostFacts(
        python=python,
        executable="/venv/bin/python",
        hostname="h",
        sglang_version=version,
        sglang_error="",
        psutil="6",
        port=PortFacts(30000, True, None, ()),
        model=None,
        gpus=GpuFacts(False, "no driver", None, ()),
        inherited_env=env,
    )


def test_nodes_compared_apart_from_what_the_profile_sets(profile_dir: ProfileDir) -> None:
    profile = _load(profile_dir, GROUP + "env: {NCCL_DEBUG: WARN}\n").profile
    declared = groups.declared_env(profile)
    assert declared == {"NCCL_DEBUG", "NCCL_SOCKET_IFNAME"}
    same = {"NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "x", "HF_HOME": "/data/hf"}
    other = {**same, "NCCL_DEBUG": "TRACE", "NCCL_SOCKET_IFNAME": "y"}
    nodes = ("node-a", "node-b")
    # the profile sets NCCL_DEBUG and the NIC: the hosts' own values never reach the server
    assert groups.compare_nodes(nodes, [_facts("0.5.23", "3.11", same)] * 2, declared) == []
    assert (
        groups.compare_nodes(
            nodes, [_facts("0.5.23", "3.11", same), _facts("0.5.23", "3.11", other)], declared
        )
        == []
    )
    drifted = {**same, "HF_HOME": "/other"}
    found = groups.compare_nodes(
        nodes, [_facts("0.5.23", "3.11", same), _facts("0.5.22", "3.12", drifted)], declared
    )
    assert [difference.text for difference in found] == [
        "sglang: node-a 0.5.23, node-b 0.5.22",
        "python: node-a 3.11, node-b 3.12",
        "env HF_HOME: node-a HF_HOME=/data/hf, node-b HF_HOME=/other",
    ]


def test_ranks_resolved_configurations_compared_field_by_field() -> None:
    rank0 = {"tp_size": 16, "node_rank": 0, "port": 30000, "random_seed": 1, "dtype": "bf16"}
    rank1 = {"tp_size": 16, "node_rank": 1, "port": 30001, "random_seed": 2, "dtype": "fp16"}
    fields = {"tp_size", "node_rank", "port", "random_seed", "dtype"}
    found = groups.compare_resolved([rank0, rank1], fields)
    assert [(row.field, row.values, row.drift) for row in found] == [
        ("dtype", ("bf16", "fp16"), True),
        ("random_seed", (1, 2), False),  # SGLang draws it per process
    ]
    # a rank that reported nothing, or a field only one rank reported: not compared
    assert groups.compare_resolved([rank0, None], fields) == []
    assert groups.compare_resolved([{**rank0, "extra": 1}, rank0], {*fields, "extra"}) == []


def test_gated_launch_only_where_the_version_has_it(profile_dir: ProfileDir) -> None:
    """--gated-launch-port exists from SGLang 0.5.19: a 0.5.11 group renders without it."""
    loaded = _load(
        profile_dir,
        GROUP.replace(
            "  rendezvous_port: 20000\n", "  rendezvous_port: 20000\n  gate_port: 21000\n"
        ),
    )
    assert "--gated-launch-port" in render.render_members(loaded.profile, loaded.table)[0].argv
    profile_dir.write("old", 'sglang: "0.5.11"\nmodel: {path: /m}\n' + GROUP)
    old = profile_dir.store().load("old")
    assert "--gated-launch-port" not in render.render_members(old.profile, old.table)[0].argv
    off = _load(profile_dir, GROUP + "  gated_launch: false\n")
    assert "--gated-launch-port" not in render.render_members(off.profile, off.table)[0].argv


def test_gate_port_clashes_are_refused(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, GROUP + "  gate_port: 20100\n")
    assert "the gated launch port 20100 is the group's control port" in error.message


def test_node_ranks_follow_sglangs_layout() -> None:
    assert groups.node_ranks(16, 1, 2) == [list(range(8)), list(range(8, 16))]
    # pp 2 over 4 nodes: two nodes per pipeline stage, each half of its TP ranks
    assert groups.node_ranks(8, 2, 4) == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]
