"""How an inventory host and an ssh_config become a route: no network, no sshd."""

from __future__ import annotations

import getpass
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.errors import ConnectError
from orchestrator.model import Host
from orchestrator.transport.ssh_route import Endpoint, resolve
from tests.conftest import REPO


def config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ssh_config"
    path.write_text(text)
    return path


def test_without_config_the_address_is_used_as_is(tmp_path: Path) -> None:
    route = resolve(Host(name="h", address="10.0.0.7"), None)
    assert route.target == Endpoint("10.0.0.7", "10.0.0.7", 22, getpass.getuser(), ())
    assert (route.jumps, route.proxy_command) == ((), None)
    assert route.target.known_hosts_name == "10.0.0.7"


def test_missing_config_file_is_empty(tmp_path: Path) -> None:
    route = resolve(Host(name="h", address="gpu", port=2222), tmp_path / "absent")
    assert route.target.hostname == "gpu"
    assert route.target.known_hosts_name == "[gpu]:2222"


def test_config_fills_in_what_the_inventory_leaves_out(tmp_path: Path) -> None:
    key = tmp_path / "id_gpu"
    key.write_text("")
    path = config(
        tmp_path,
        f"Host gpu\n  HostName 10.0.0.7\n  Port 2200\n  User ubuntu\n  IdentityFile {key}\n"
        f"  IdentityFile {tmp_path}/missing_key\n  UserKnownHostsFile {tmp_path}/kh ~/kh2\n",
    )
    route = resolve(Host(name="h", address="gpu"), path)
    assert route.target == Endpoint("gpu", "10.0.0.7", 2200, "ubuntu", (str(key),))
    assert route.target.label == "gpu (10.0.0.7:2200)"
    assert route.known_hosts_files == (tmp_path / "kh", Path.home() / "kh2")


def test_inventory_fields_override_the_config(tmp_path: Path) -> None:
    path = config(tmp_path, "Host gpu\n  HostName 10.0.0.7\n  Port 2200\n  User ubuntu\n")
    host = Host(name="h", address="gpu", port=22, user="root", identity_file="~/.ssh/orch")
    target = resolve(host, path).target
    assert (target.hostname, target.port, target.user) == ("10.0.0.7", 22, "root")
    assert target.identity_files == (str(Path.home() / ".ssh" / "orch"),)


def test_proxy_jump_hops_are_looked_up_too(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        "Host gpu\n  HostName 10.0.0.7\n  ProxyJump admin@bastion:2022,[fd00::1]:23,plain\n"
        "Host bastion\n  HostName bastion.example.org\n  User nobody\n  Port 99\n",
    )
    route = resolve(Host(name="h", address="gpu"), path)
    assert [(j.hostname, j.port, j.user) for j in route.jumps] == [
        ("bastion.example.org", 2022, "admin"),
        ("fd00::1", 23, getpass.getuser()),
        ("plain", 22, getpass.getuser()),
    ]
    assert route.proxy_command is None


def test_first_of_proxy_jump_and_proxy_command_wins(tmp_path: Path) -> None:
    path = config(
        tmp_path,
        "Host a\n  ProxyCommand nc %h %p\n  ProxyJump j\nHost b\n  ProxyJump j\n  ProxyCommand nc\n"
        "Host c\n  ProxyJump none\n",
    )
    a = resolve(Host(name="a", address="a"), path)
    assert (a.proxy_command, a.jumps) == ("nc a 22", ())
    b = resolve(Host(name="b", address="b"), path)
    assert (b.proxy_command, [j.hostname for j in b.jumps]) == (None, ["j"])
    c = resolve(Host(name="c", address="c"), path)
    assert (c.proxy_command, c.jumps) == (None, ())


def test_bad_proxy_jump_port_is_connect_error(tmp_path: Path) -> None:
    path = config(tmp_path, "Host a\n  ProxyJump j:http\n")
    with pytest.raises(ConnectError, match="bad port in ProxyJump"):
        resolve(Host(name="a", address="a"), path)


def test_unparsable_config_is_connect_error(tmp_path: Path) -> None:
    path = config(tmp_path, "Host a\n  =broken\n")
    with pytest.raises(ConnectError, match="cannot read ssh config"):
        resolve(Host(name="a", address="a"), path)


def test_local_host_is_not_for_ssh() -> None:
    with pytest.raises(ValueError, match="local"):
        resolve(Host(name="here"), None)


def test_importing_the_route_module_does_not_import_paramiko() -> None:
    """Only working a route out needs paramiko's ssh_config parser; importing it must not."""
    probe = (
        "import sys, orchestrator.transport.ssh_route\n"
        "assert 'paramiko' not in sys.modules, 'imported paramiko'\n"
        "from orchestrator.model import Host\n"
        "orchestrator.transport.ssh_route.resolve(Host(name='h', address='gpu'), None)\n"
        "assert 'paramiko' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", probe], check=True, cwd=REPO, capture_output=True)
