"""``orch diff`` of profiles with ``replicas:``: every replica is a deployment of its own
(``NAME@I``); one added or taken out is new or removed, the others read as they changed."""

from __future__ import annotations

from orchestrator.errors import ExitCode
from tests.unit.review.repo import ProfilesRepo, by_name

FLEET = """\
extends: base
port: 30010
replicas:
  - {host: gpu-a, gpu: {devices: [0]}}
  - {host: gpu-b, gpu: {devices: [0]}}
"""


def test_each_replica_is_a_deployment_and_one_added_is_new(repo: ProfilesRepo) -> None:
    repo.write("fleet.yaml", FLEET)
    repo.commit("two replicas")
    repo.write("fleet.yaml", FLEET + "  - {host: gpu-c, port: 30011}\n")
    repo.commit("a third replica")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert set(deployments) == {"fleet@2"}  # the other two launch as before
    added = deployments["fleet@2"]
    assert (added["profile"], added["replica"], added["action"]) == ("fleet", 2, "new")
    assert "--port" in added["rendered"]["after"]["argv"]
    assert "30011" in added["rendered"]["after"]["argv"]
    assert report["unchanged"] >= 2
    _, text, _ = repo.orch("diff", "HEAD~1..HEAD")
    assert "fleet@2" in text


def test_a_replica_taken_out_is_removed_and_a_moved_one_replaced(repo: ProfilesRepo) -> None:
    repo.write("fleet.yaml", FLEET + "  - {host: gpu-c}\n")
    repo.commit("three replicas")
    repo.write("fleet.yaml", FLEET.replace("host: gpu-b", "host: gpu-c"))
    repo.commit("two, the second moved")
    _, report = repo.diff_json("HEAD~1..HEAD")
    deployments = by_name(report)
    assert set(deployments) == {"fleet@1", "fleet@2"}
    assert deployments["fleet@2"]["action"] == "removed"
    assert deployments["fleet@1"]["action"] == "replace"
    assert deployments["fleet@1"]["forced_by"] == ["host"]
    # the report names the profile, so `orch diff RANGE fleet` selects its replicas
    code, only = repo.diff_json("HEAD~1..HEAD", "fleet")
    assert code == ExitCode.CHANGES
    assert {item["deployment"] for item in only["deployments"]} == {"fleet@1", "fleet@2"}


def test_a_single_server_that_becomes_replicas(repo: ProfilesRepo) -> None:
    repo.write("fleet.yaml", "extends: base\nport: 30010\n")
    repo.commit("one server")
    repo.write("fleet.yaml", FLEET)
    repo.commit("replicas")
    _, report = repo.diff_json("HEAD~1..HEAD")
    deployments = by_name(report)
    assert deployments["fleet"]["action"] == "removed"
    assert deployments["fleet@0"]["action"] == "new"
    assert deployments["fleet@1"]["action"] == "new"
    assert "replica" not in deployments["fleet"]  # a profile without replicas: as before


def test_replicas_that_do_not_load_block_every_replica(repo: ProfilesRepo) -> None:
    repo.write("fleet.yaml", FLEET)
    repo.commit("two replicas")
    repo.write("fleet.yaml", FLEET.replace("host: gpu-b, gpu: {devices: [0]}", "host: gpu-x"))
    repo.commit("a host that does not exist")
    code, report = repo.diff_json("HEAD~1..HEAD")
    assert code == ExitCode.CHANGES
    deployments = by_name(report)
    assert set(deployments) == {"fleet@0", "fleet@1"}
    assert all(item["action"] == "blocked" for item in deployments.values())
    assert any("unknown host 'gpu-x'" in reason for reason in deployments["fleet@1"]["reasons"])
