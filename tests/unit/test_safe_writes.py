"""Files orch writes where a user says (``export -o``, locks, ``upgrade --write``, ``init``, a
pinned host key) cannot be turned against another file: a planted temporary link, a device, a
FIFO, a link to someone else's file, a directory every user may write (issue 26). Real files,
real links and FIFOs in a temporary directory; the refusals through the real entry point."""

from __future__ import annotations

import io
import os
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator import files
from orchestrator.cli import main as cli
from orchestrator.commands import lockfile
from orchestrator.errors import ExitCode, WriteRefused
from orchestrator.transport.known_hosts import pin
from tests.conftest import copy_examples

pytestmark = pytest.mark.unit

STRANGER = 54321  # a uid that is not the test's
KEY = "AAAAC3NzaC1lZDI1NTE5AAAAIGX3Gk4vV1n1h7Yq2y9rRr0bqZp2m8yqk1o1bq3p5X1a"
AS_ROOT = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a file to another uid")


@pytest.fixture
def profiles(tmp_path: Path) -> Path:
    return copy_examples(tmp_path / "profiles")


def export(profiles: Path, target: Path | str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = cli.main(
        ["--profiles", str(profiles), "export", "dstack", "demo", "-o", str(target)],
        out=out,
        err=err,
    )
    return code, out.getvalue(), err.getvalue()


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[Path]:
    """A private file that must come out of every test as it went in."""
    path = tmp_path / "victim"
    path.write_text("precious\n")
    path.chmod(0o600)
    yield path
    assert path.read_text() == "precious\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_export_never_writes_through_a_link_planted_at_a_temporary_name(
    profiles: Path, tmp_path: Path, victim: Path
) -> None:
    out = tmp_path / "out"
    out.mkdir()
    planted = out / ".task.yaml.orch-tmp"  # the fixed temporary name orch used to write
    planted.symlink_to(victim)
    code, _, err = export(profiles, out / "task.yaml")
    assert code == ExitCode.OK, err
    assert "type: service" in (out / "task.yaml").read_text()
    assert planted.is_symlink()
    assert sorted(p.name for p in out.iterdir()) == [".task.yaml.orch-tmp", "task.yaml"]


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory"])
def test_export_refuses_to_replace_what_is_not_a_regular_file(
    profiles: Path, tmp_path: Path, kind: str
) -> None:
    target = tmp_path / "node"
    if kind == "fifo":
        os.mkfifo(target)
    elif kind == "socket":
        with socket.socket(socket.AF_UNIX) as listener:
            listener.bind(str(target))
    else:
        target.mkdir()
    before = os.lstat(target)
    code, _, err = export(profiles, target)
    assert code == ExitCode.WRITE, err
    words = {"fifo": "a FIFO", "socket": "a socket", "directory": "a directory"}[kind]
    assert f"{target}: it is {words}, not a regular file; nothing written" in err
    assert "orch: hint: leave out -o" in err
    after = os.lstat(target)
    assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
    assert [p.name for p in tmp_path.iterdir() if files.is_temporary(p.name)] == []


def test_export_refuses_a_link_to_a_device_a_fifo_or_nothing(
    profiles: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for name, points_to, said in (
        ("to-null", Path("/dev/null"), "which is a character device, not a regular file"),
        ("to-fifo", fifo, "which is a FIFO, not a regular file"),
        ("dangling", tmp_path / "nothing", "which does not exist"),
    ):
        link = tmp_path / name
        link.symlink_to(points_to)
        code, _, err = export(profiles, link)
        assert code == ExitCode.WRITE, err
        assert f"{link} is a symlink to {points_to}, {said}; nothing written" in err
        assert link.is_symlink()
    assert stat.S_ISCHR(Path("/dev/null").stat().st_mode)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_export_through_a_link_of_yours_to_a_file_of_yours_writes_the_file(
    profiles: Path, tmp_path: Path
) -> None:
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    real.chmod(0o640)
    link = tmp_path / "task.yaml"
    link.symlink_to("real.yaml")
    code, _, err = export(profiles, link)
    assert code == ExitCode.OK, err
    assert link.is_symlink()
    assert "type: service" in real.read_text()
    assert stat.S_IMODE(real.stat().st_mode) == 0o640  # a replaced file keeps its mode


def test_export_refuses_a_link_through_another_link(profiles: Path, tmp_path: Path) -> None:
    (tmp_path / "real.yaml").write_text("old\n")
    (tmp_path / "hop").symlink_to("real.yaml")
    link = tmp_path / "task.yaml"
    link.symlink_to("hop")
    code, _, err = export(profiles, link)
    assert code == ExitCode.WRITE, err
    assert "itself reached through another symlink" in err
    assert (tmp_path / "real.yaml").read_text() == "old\n"


@AS_ROOT
def test_a_root_orch_never_follows_a_link_another_user_planted(
    profiles: Path, tmp_path: Path, victim: Path
) -> None:
    link = tmp_path / "task.yaml"
    link.symlink_to(victim)
    os.lchown(link, STRANGER, STRANGER)
    code, _, err = export(profiles, link)
    assert code == ExitCode.WRITE, err
    assert f"owned by uid {STRANGER}, not by you: not followed" in err


@AS_ROOT
def test_a_root_orch_never_replaces_another_users_file(profiles: Path, tmp_path: Path) -> None:
    theirs = tmp_path / "task.yaml"
    theirs.write_text("theirs\n")
    os.chown(theirs, STRANGER, STRANGER)
    code, _, err = export(profiles, theirs)
    assert code == ExitCode.WRITE, err
    assert f"owned by uid {STRANGER}, not by you" in err
    assert theirs.read_text() == "theirs\n"


def test_a_directory_every_user_may_write_is_refused_unless_sticky(
    profiles: Path, tmp_path: Path
) -> None:
    open_dir = tmp_path / "open-to-all"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    code, _, err = export(profiles, open_dir / "task.yaml")
    assert code == ExitCode.WRITE, err
    assert "may be written by every user (mode 777, no sticky bit)" in err
    assert "chmod o-w" in err
    assert list(open_dir.iterdir()) == []
    open_dir.chmod(0o1777)  # like /tmp: others cannot rename or remove what is yours
    code, _, err = export(profiles, open_dir / "task.yaml")
    assert code == ExitCode.OK, err
    assert stat.S_IMODE((open_dir / "task.yaml").stat().st_mode) == 0o644 & ~_umask()


def test_a_missing_directory_is_one_line_with_the_path(profiles: Path, tmp_path: Path) -> None:
    code, _, err = export(profiles, tmp_path / "nowhere" / "task.yaml")
    assert code == ExitCode.WRITE
    assert f"cannot write {tmp_path}/nowhere/task.yaml: no directory {tmp_path}/nowhere" in err


def test_a_lock_file_planted_as_a_link_is_never_written_through(
    profiles: Path, tmp_path: Path
) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    lockfile.lock_path(profiles, "demo").symlink_to(fifo)
    with pytest.raises(WriteRefused) as refused:
        lockfile.write_lock(profiles, "demo", {"sglang": "0.5.23", "effective": {}})
    assert "is a symlink to" in refused.value.message
    assert refused.value.exit_code == ExitCode.WRITE
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_lock_file_is_replaced_whole_and_keeps_its_mode(profiles: Path) -> None:
    target = lockfile.lock_path(profiles, "demo")
    target.write_text("{}\n")
    target.chmod(0o600)
    written = lockfile.write_lock(profiles, "demo", {"sglang": "0.5.23", "effective": {}})
    assert written == target
    assert '"sglang": "0.5.23"' in target.read_text()
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in profiles.iterdir() if files.is_temporary(p.name)] == []


def test_init_refuses_a_directory_every_user_may_write(tmp_path: Path) -> None:
    root = tmp_path / "team"
    (root / "profiles").mkdir(parents=True)
    (root / "profiles").chmod(0o777)
    out = io.StringIO()
    code = cli.main(["init", str(root)], out=out, err=out)
    assert code == ExitCode.WRITE, out.getvalue()
    assert "may be written by every user" in out.getvalue()
    assert list((root / "profiles").iterdir()) == []


def test_a_pinned_host_key_is_never_appended_through_a_planted_link(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    known_hosts = tmp_path / "known_hosts"
    known_hosts.symlink_to(elsewhere / "authorized_keys")  # O_CREAT would create it there
    with pytest.raises(WriteRefused) as refused:
        pin(known_hosts, "gpu-1", "ssh-ed25519", KEY)
    assert "which does not exist; nothing written" in refused.value.message
    assert list(elsewhere.iterdir()) == []
    known_hosts.unlink()
    assert pin(known_hosts, "gpu-1", "ssh-ed25519", KEY)
    assert known_hosts.read_text() == f"gpu-1 ssh-ed25519 {KEY}\n"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
