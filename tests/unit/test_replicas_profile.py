"""``replicas:`` in profiles: N independent servers of one launch, validated for what would make
two of them collide on a machine (a port, a GPU), each rendered as the server it is."""

from __future__ import annotations

import io
import json

import pytest

from orchestrator.cli.main import main
from orchestrator.errors import ExitCode, InvalidProfile, ProfileError
from orchestrator.model import Severity, deployment_name, split_deployment
from orchestrator.profile.store import LoadedProfile
from tests.conftest import ProfileDir

HOSTS = """\
hosts:
  gpu-a:
    address: 10.0.0.1
    python: /opt/venv/bin/python
    workdir: /data/orch
  gpu-b:
    address: 10.0.0.2
    python: /opt/venv/bin/python
    workdir: /data/orch
  gpu-a-too:
    address: 10.0.0.1
    python: /opt/venv/bin/python
    workdir: /data/other
"""

HEAD = 'sglang: "0.5.23"\nmodel: {path: /models/m}\nport: 30000\n'


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


def test_each_replica_runs_as_its_own_server(profile_dir: ProfileDir) -> None:
    loaded = _load(
        profile_dir,
        "env: {SHARED: base, MINE: base}\n"
        "gpu: {devices: [0, 1]}\n"
        "replicas:\n"
        "  - gpu-a\n"
        "  - {host: gpu-b, port: 30001, env: {MINE: b}, gpu: {devices: [2, 3]}}\n",
    )
    profile = loaded.profile
    assert [r.host.name for r in profile.replicas] == ["gpu-a", "gpu-b"]
    assert profile.host.name == "gpu-a"  # replica 0's, as a group's is rank 0's
    assert profile.replica is None
    assert profile.deployment == "p"
    first, second = profile.for_replica(0), profile.for_replica(1)
    assert (first.host.name, first.port, first.gpu.devices) == ("gpu-a", 30000, ("0", "1"))
    assert first.env == {"CUDA_VISIBLE_DEVICES": "0,1", "SHARED": "base", "MINE": "base"}
    assert (second.host.name, second.port, second.gpu.devices) == ("gpu-b", 30001, ("2", "3"))
    assert second.env == {"CUDA_VISIBLE_DEVICES": "2,3", "SHARED": "base", "MINE": "b"}
    assert (first.replica, second.replica) == (0, 1)
    assert (first.deployment, second.deployment) == ("p@0", "p@1")
    assert second.replicas == ()  # one server, launched as a profile without replicas is
    with pytest.raises(IndexError):
        profile.for_replica(2)
    with pytest.raises(ValueError, match="has no replicas"):
        second.for_replica(0)


def test_a_replica_deployment_name_is_no_profile_name_and_reads_back() -> None:
    assert deployment_name("qwen-27b.v2", None) == "qwen-27b.v2"
    assert deployment_name("qwen-27b.v2", 3) == "qwen-27b.v2@3"
    assert split_deployment("qwen-27b.v2@3") == ("qwen-27b.v2", 3)
    assert split_deployment("qwen-27b.v2") == ("qwen-27b.v2", None)
    from orchestrator.profile.inventory import NAME_RE

    assert NAME_RE.match("qwen-27b.v2@3") is None  # never another profile's deployment


def test_host_is_the_host_of_replicas_that_name_none(profile_dir: ProfileDir) -> None:
    loaded = _load(
        profile_dir,
        "host: gpu-a\nreplicas:\n"
        "  - {port: 30001, gpu: {devices: [0]}}\n"
        "  - {port: 30002, gpu: {devices: [1]}}\n"
        "  - gpu-b\n",
    )
    assert [r.host.name for r in loaded.profile.replicas] == ["gpu-a", "gpu-a", "gpu-b"]
    assert loaded.findings == ()


def test_a_replica_without_a_host_and_no_default(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "replicas:\n  - gpu-a\n  - {port: 30001}\n")
    assert error.key_path == "replicas[1]"
    assert error.message.endswith("replicas[1]: missing `host`")
    assert "`host:` beside `replicas:`" in (error.hint or "")


def test_an_unknown_replica_host_is_located_with_a_suggestion(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "replicas:\n  - gpu-a\n  - {host: gpu-b2}\n")
    assert error.key_path == "replicas[1].host"
    assert (error.line, error.column) == (6, 6)  # the key `host`
    assert "unknown host 'gpu-b2'" in error.message
    assert "did you mean gpu-b? " in (error.hint or "")


def test_one_replica_is_refused_for_host(profile_dir: ProfileDir) -> None:
    error = _one(profile_dir, "replicas:\n  - gpu-a\n")
    assert error.key_path == "replicas"
    assert "expected a list of at least 2 replicas, got 1 replica" in error.message
    assert error.hint == "a single server needs no replicas: use `host:` (and `port:`)"


def test_replicas_on_one_machine_with_one_port_are_refused(profile_dir: ProfileDir) -> None:
    # gpu-a-too is another inventory entry of gpu-a's machine
    error = _one(
        profile_dir,
        "replicas:\n"
        "  - {host: gpu-a, gpu: {devices: [0]}}\n"
        "  - {host: gpu-a-too, gpu: {devices: [1]}}\n",
    )
    assert error.key_path == "replicas[1]"
    assert error.message.endswith(
        "replicas 0 and 1 both use --port 30000 on gpu-a-too (the machine of gpu-a)"
    )
    assert error.hint == "give each replica on one machine its own port: replicas[1].port"
    error = _one(
        profile_dir,
        "host: gpu-a\nreplicas:\n"
        "  - {port: 30001, gpu: {devices: [0]}}\n"
        "  - {port: 30001, gpu: {devices: [1]}}\n",
    )
    assert error.key_path == "replicas[1].port"


def test_replicas_on_one_machine_with_shared_gpus_are_refused(profile_dir: ProfileDir) -> None:
    error = _one(
        profile_dir,
        "host: gpu-a\nreplicas:\n"
        "  - {port: 30001, gpu: {devices: [0, 1]}}\n"
        "  - {port: 30002, gpu: {devices: [1, 2]}}\n",
    )
    assert error.key_path == "replicas[1].gpu.devices"
    assert error.message.endswith("replicas 0 and 1 both use GPU 1 on gpu-a")
    # the profile's devices, inherited by both, are shared too
    error = _one(
        profile_dir,
        "host: gpu-a\ngpu: {devices: [0]}\nreplicas:\n  - {port: 30001}\n  - {port: 30002}\n",
    )
    assert error.key_path == "replicas[1]"
    assert "both use GPU 0 on gpu-a" in error.message


def test_replicas_on_one_machine_without_devices_is_a_warning(profile_dir: ProfileDir) -> None:
    loaded = _load(profile_dir, "host: gpu-a\nreplicas:\n  - {port: 30001}\n  - {port: 30002}\n")
    (found,) = loaded.findings
    assert found.severity is Severity.WARNING
    assert "replicas[1]: replicas 0 and 1 share gpu-a and neither names gpu.devices" in (
        found.message
    )
    # on machines of their own, nothing is said
    assert _load(profile_dir, "replicas: [gpu-a, gpu-b]\n").findings == ()


def test_replica_keys_and_values_are_checked(profile_dir: ProfileDir) -> None:
    errors = _errors(
        profile_dir,
        "replicas:\n"
        "  - {host: gpu-a, ports: 1}\n"
        "  - {host: gpu-b, port: 70000, gpu: {devices: [-1], type: H200}}\n"
        "  - {host: gpu-b, env: {CUDA_VISIBLE_DEVICES: '1'}, gpu: {devices: [1]}}\n"
        "  - 7\n",
    )
    shown = {(e.key_path, e.message.split(": ", 2)[-1]) for e in errors}
    assert ("replicas[0].ports", "unknown key") in shown
    assert ("replicas[1].gpu.type", "unknown key") in shown
    assert ("replicas[1].port", "expected an integer in 1..65535, got 70000") in shown
    assert ("replicas[1].gpu.devices[0]", "expected a GPU index or GPU-/MIG- UUID, got -1") in shown
    assert (
        "replicas[2].env.CUDA_VISIBLE_DEVICES",
        "set twice: also derived from gpu.devices",
    ) in shown
    assert ("replicas[3]", "expected a host name or a mapping, got an integer") in shown


def test_replicas_of_a_group_are_refused_for_now(profile_dir: ProfileDir) -> None:
    error = _one(
        profile_dir,
        "group:\n  nodes: [gpu-a, gpu-b]\nreplicas:\n  - gpu-a\n  - gpu-b\n",
    )
    assert error.key_path == "replicas"
    assert "`replicas:` of a launch group (a whole group per replica) is not supported yet" in (
        error.message
    )


def _orch(profile_dir: ProfileDir, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(["--profiles", str(profile_dir.root), *argv], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


BODY = (
    "replicas:\n"
    "  - {host: gpu-a, gpu: {devices: [0]}}\n"
    "  - {host: gpu-b, port: 30001, env: {ROLE: second}, gpu: {devices: [1]}}\n"
)


def test_render_shows_every_replica_and_how_they_differ(profile_dir: ProfileDir) -> None:
    _load(profile_dir, BODY)
    code, out, _ = _orch(profile_dir, "render", "p")
    assert code == ExitCode.OK
    assert "# replica 0 (p@0) on gpu-a (10.0.0.1)" in out
    assert "# replica 1 (p@1) on gpu-b (10.0.0.2)" in out
    assert "#   replica 1: --port 30001 (replica 0: 30000)" in out
    assert "#   replica 1: ROLE=second (replica 0: (unset))" in out
    code, out, _ = _orch(profile_dir, "render", "p", "--json")
    document = json.loads(out)
    assert [
        (r["replica"], r["deployment"], r["host"], r["port"]) for r in document["replicas"]
    ] == [
        (0, "p@0", "gpu-a", 30000),
        (1, "p@1", "gpu-b", 30001),
    ]
    assert document["replicas"][1]["env"] == {"CUDA_VISIBLE_DEVICES": "1", "ROLE": "second"}
    code, out, _ = _orch(profile_dir, "render", "p", "--replica", "1", "--json")
    assert json.loads(out)["argv"][-2:] == ["--port", "30001"]
    code, out, _ = _orch(profile_dir, "render", "p", "--replica", "1", "--script")
    assert code == ExitCode.OK
    assert "--port 30001" in out


def test_render_refuses_a_replica_that_is_not_there(profile_dir: ProfileDir) -> None:
    _load(profile_dir, BODY)
    code, _, err = _orch(profile_dir, "render", "p", "--replica", "2")
    assert code == ExitCode.USAGE
    assert "--replica 2: p has replicas 0-1" in err
    code, _, err = _orch(profile_dir, "render", "p", "--script")
    assert code == ExitCode.USAGE
    assert "orch render p --script --replica 0" in err
    profile_dir.write("single", HEAD + "host: gpu-a\n")
    code, _, err = _orch(profile_dir, "render", "single", "--replica", "0")
    assert code == ExitCode.USAGE
    assert "single has no replicas" in err


def test_validate_reports_replica_errors_with_their_place(profile_dir: ProfileDir) -> None:
    _load(profile_dir, BODY)
    profile_dir.write("bad", HEAD + "replicas:\n  - gpu-a\n  - {host: gpu-a}\n")
    code, out, err = _orch(profile_dir, "validate")
    assert code == ExitCode.CONFIG
    assert "ok  p  (SGLang 0.5.23, host gpu-a)" in out
    assert "bad.yaml:6:5: replicas[1]: replicas 0 and 1 both use --port 30000 on gpu-a" in err
