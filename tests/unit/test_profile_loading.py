"""Loading profiles: YAML positions, inheritance, removal by null, cycles, missing names."""

from __future__ import annotations

import pytest

from orchestrator.errors import ExitCode, InvalidProfile, ProfileError, ProfileNotFound
from orchestrator.model import SecretRef
from tests.conftest import ProfileDir

BASE = """\
abstract: true
model:
  path: /models/m
port: 30000
args:
  context_length: 8192
  trust_remote_code: true
  mem_fraction_static: 0.8
env:
  KEEP: "1"
  DROP: "2"
"""


def test_profile_inherits_and_deep_merges_args_key_by_key(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", BASE)
    profile_dir.write(
        "child",
        """\
        extends: base
        sglang: "0.5.11"
        host: gpu-1
        args:
          mem_fraction_static: 0.92
          max_running_requests: 8
        """,
    )
    profile = profile_dir.store().load("child").profile
    assert dict(profile.args) == {
        "context_length": 8192,
        "trust_remote_code": True,
        "mem_fraction_static": 0.92,
        "max_running_requests": 8,
    }
    assert profile.chain == ("child", "base")
    assert profile.model.path == "/models/m"
    assert profile.host.python == "/opt/venv/bin/python"


def test_profile_null_removes_inherited_keys(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", BASE)
    profile_dir.write(
        "child",
        """\
        extends: base
        host: gpu-1
        args: {trust_remote_code: null}
        env: {DROP: null}
        """,
    )
    profile = profile_dir.store().load("child").profile
    assert "trust_remote_code" not in profile.args
    assert dict(profile.env) == {"KEEP": "1"}


def test_profile_abstract_is_not_inherited(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", BASE)
    profile_dir.write("child", "extends: base\n")
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("child")
    assert [e.problem for e in caught.value.errors] == ["missing `host`"]


def test_profile_extends_cycle_is_reported_with_the_loop(profile_dir: ProfileDir) -> None:
    profile_dir.write("a", "extends: b\n")
    profile_dir.write("b", "extends: c\n")
    profile_dir.write("c", "extends: a\n")
    with pytest.raises(ProfileError, match=r"extends cycle: a -> b -> c -> a"):
        profile_dir.store().load("a")


def test_profile_extends_unknown_names_file_line_and_suggests(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", BASE)
    profile_dir.write("child", "host: gpu-1\nextends: bsae\n")
    with pytest.raises(ProfileNotFound) as caught:
        profile_dir.store().load("child")
    assert caught.value.message.startswith("profiles/child.yaml:2:1: extends: extends 'bsae'")
    assert caught.value.hint is not None
    assert "did you mean base?" in caught.value.hint


def test_profile_missing_lists_the_available_ones(profile_dir: ProfileDir) -> None:
    profile_dir.write("alpha", BASE)
    profile_dir.write("beta", BASE)
    with pytest.raises(ProfileNotFound) as caught:
        profile_dir.store().load("gamma")
    assert caught.value.hint == "available: alpha, beta"
    assert caught.value.exit_code == ExitCode.CONFIG


def test_profile_yaml_syntax_error_has_file_line_column(profile_dir: ProfileDir) -> None:
    profile_dir.write("bad", "host: gpu-1\nargs:\n  context_length: [1, 2\n")
    with pytest.raises(ProfileError) as caught:
        profile_dir.store().load("bad")
    assert caught.value.message.startswith("profiles/bad.yaml:4:1: YAML syntax error")


def test_profile_duplicate_key_is_an_error_not_last_wins(profile_dir: ProfileDir) -> None:
    profile_dir.write("dup", "host: gpu-1\nport: 1\nport: 2\n")
    with pytest.raises(
        ProfileError, match=r"dup.yaml:3:1: port: duplicate key 'port' \(first at line 2\)"
    ):
        profile_dir.store().load("dup")


def test_profile_secret_from_env_is_a_reference_not_a_value(profile_dir: ProfileDir) -> None:
    profile_dir.write(
        "s",
        """\
        host: gpu-1
        model: {path: /m}
        env:
          HF_TOKEN: {from_env: MY_HF_TOKEN}
        """,
    )
    profile = profile_dir.store().load("s").profile
    assert profile.env["HF_TOKEN"] == SecretRef("MY_HF_TOKEN")


def test_profile_positions_come_from_the_file_that_set_the_key(profile_dir: ProfileDir) -> None:
    profile_dir.write("base", BASE + "bind: [oops]\n")
    profile_dir.write("child", "extends: base\nhost: gpu-1\n")
    with pytest.raises(InvalidProfile) as caught:
        profile_dir.store().load("child")
    assert caught.value.errors[0].message.startswith(
        "profiles/base.yaml:12:1: bind: expected a string"
    )


def test_profile_gpu_devices_become_cuda_visible_devices(profile_dir: ProfileDir) -> None:
    profile_dir.write(
        "g",
        """\
        host: gpu-1
        model: {path: /m}
        gpu: {type: h200, devices: [2, 3]}
        args: {tp_size: 2}
        """,
    )
    profile = profile_dir.store().load("g").profile
    assert profile.env["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert profile.gpu.type is not None
    assert profile.gpu.type.name == "H200"
    assert profile.gpu.type.compute_capability == (9, 0)


def test_store_names_skip_the_inventory(profile_dir: ProfileDir) -> None:
    profile_dir.write("one", BASE)
    assert profile_dir.store().names() == ["one"]


def test_store_strays_are_yaml_files_no_profile_name_reaches(profile_dir: ProfileDir) -> None:
    profile_dir.write("one", BASE)
    profile_dir.write("My Profile.yaml", BASE)
    (profile_dir.root / "two.yml").write_text(BASE)
    (profile_dir.root / "hosts.yml").write_text("hosts: {}\n")
    (profile_dir.root / ".yamllint.yaml").write_text("rules: {}\n")  # hidden: not a profile
    (profile_dir.root / "one.lock.json").write_text("{}\n")
    store = profile_dir.store()
    assert store.names() == ["one"]
    strays = store.strays()
    assert [(e.source, e.problem, e.hint) for e in strays] == [
        (
            "profiles/My Profile.yaml",
            "not a profile name: 'My Profile'",
            "rename it, e.g. to My-Profile.yaml: a name is letters, digits, '.', '_' and '-', "
            "starting with a letter or digit",
        ),
        (
            "profiles/hosts.yml",
            "orch reads the host inventory from hosts.yaml only",
            "rename it to hosts.yaml",
        ),
        (
            "profiles/two.yml",
            "not a profile: orch reads <name>.yaml files only",
            "rename it to two.yaml",
        ),
    ]
    assert all(e.exit_code == ExitCode.CONFIG for e in strays)


def test_store_unreadable_inventory_is_a_located_error_reported_once(
    profile_dir: ProfileDir,
) -> None:
    (profile_dir.root / "hosts.yaml").write_bytes(b"hosts:\n  box: {address: \xff}\n")
    profile_dir.write("p", "host: box\nmodel: {path: /m}\n")
    store = profile_dir.store()
    with pytest.raises(ProfileError) as first:
        store.load("p")
    assert first.value.message.startswith("profiles/hosts.yaml: cannot read the host inventory")
    with pytest.raises(ProfileError) as second:
        store.inventory()
    assert second.value is first.value  # read once per store, not once per profile


def test_a_name_too_long_for_a_file_is_a_clean_error(profile_dir: ProfileDir) -> None:
    from orchestrator.errors import ProfileNotFound

    with pytest.raises(ProfileNotFound, match=r"\(5000 characters\)"):
        profile_dir.store().load("a" * 5000)
