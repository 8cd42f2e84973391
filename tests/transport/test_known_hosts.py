"""known_hosts parsing, matching and pinning: pure, stdlib, no sshd."""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import stat
import threading
from pathlib import Path

import pytest

from orchestrator.errors import HostKeyError
from orchestrator.transport.known_hosts import (
    KeyMatch,
    KnownHosts,
    fingerprint,
    known_hosts_name,
    parse_line,
    pin,
)


def blob(key_type: str, body: bytes) -> bytes:
    name = key_type.encode()
    return len(name).to_bytes(4, "big") + name + len(body).to_bytes(4, "big") + body


KEY_A = blob("ssh-ed25519", b"A" * 32)
KEY_B = blob("ssh-ed25519", b"B" * 32)
KEY_RSA = blob("ssh-rsa", b"R" * 64)


def b64(key: bytes) -> str:
    return base64.b64encode(key).decode()


def known(tmp_path: Path, text: str) -> KnownHosts:
    path = tmp_path / "known_hosts"
    path.write_text(text)
    return KnownHosts.load([path])


def hashed(name: str, salt: bytes = b"0123456789abcdefghij") -> str:
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{b64(salt)}|{b64(digest)}"


def test_known_hosts_name_brackets_other_ports() -> None:
    assert known_hosts_name("gpu", 22) == "gpu"
    assert known_hosts_name("10.0.0.7", 2222) == "[10.0.0.7]:2222"


def test_fingerprint_is_openssh_sha256() -> None:
    expected = base64.b64encode(hashlib.sha256(KEY_A).digest()).decode().rstrip("=")
    assert fingerprint(KEY_A) == f"SHA256:{expected}"


def test_trusted_unknown_changed(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"gpu,10.0.0.7 ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.check("gpu", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED
    assert hosts.check("10.0.0.7", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED
    assert hosts.check("other", "ssh-ed25519", KEY_A).match is KeyMatch.UNKNOWN
    changed = hosts.check("gpu", "ssh-ed25519", KEY_B)
    assert changed.match is KeyMatch.CHANGED
    assert changed.known[0].where == f"{tmp_path / 'known_hosts'}:1"


def test_names_compare_case_insensitively(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"GPU.Example.org ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.check("gpu.example.ORG", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED


def test_any_matching_line_trusts_as_in_openssh(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"gpu ssh-ed25519 {b64(KEY_B)}\ngpu ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.check("gpu", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED


def test_bracketed_port_names_are_literal(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"[gpu]:2222 ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.check("[gpu]:2222", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED
    assert hosts.check("g", "ssh-ed25519", KEY_A).match is KeyMatch.UNKNOWN  # not a [class]
    assert hosts.check("gpu", "ssh-ed25519", KEY_A).match is KeyMatch.UNKNOWN


def test_wildcards_and_negation(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"*.lab,!bad.lab,gpu-? ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.check("a.lab", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED
    assert hosts.check("gpu-1", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED
    assert hosts.check("gpu-10", "ssh-ed25519", KEY_A).match is KeyMatch.UNKNOWN
    assert hosts.check("bad.lab", "ssh-ed25519", KEY_A).match is KeyMatch.UNKNOWN


def test_hashed_names(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"{hashed('[gpu]:2222')} ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.check("[gpu]:2222", "ssh-ed25519", KEY_A).match is KeyMatch.TRUSTED
    assert hosts.check("gpu", "ssh-ed25519", KEY_A).match is KeyMatch.UNKNOWN


def test_revoked_key_is_refused_even_if_also_listed(tmp_path: Path) -> None:
    hosts = known(
        tmp_path, f"@revoked gpu ssh-ed25519 {b64(KEY_A)}\ngpu ssh-ed25519 {b64(KEY_A)}\n"
    )
    assert hosts.check("gpu", "ssh-ed25519", KEY_A).match is KeyMatch.REVOKED


def test_unusable_lines_are_skipped(tmp_path: Path) -> None:
    hosts = known(
        tmp_path,
        "# comment\n\n"
        "gpu ssh-ed25519\n"  # too few fields
        "gpu ssh-ed25519 !!!notbase64\n"
        f"gpu ssh-rsa {b64(KEY_A)}\n"  # type field disagrees with the key
        f"@cert-authority *.lab ssh-ed25519 {b64(KEY_B)}\n"
        f"gpu ssh-ed25519 {b64(KEY_A)} comment words\n",
    )
    assert [entry.lineno for entry in hosts.entries] == [7]
    assert parse_line("   ", "f", 1) is None


def test_key_types_on_file_come_first(tmp_path: Path) -> None:
    hosts = known(tmp_path, f"gpu ssh-rsa {b64(KEY_RSA)}\ngpu ssh-ed25519 {b64(KEY_A)}\n")
    assert hosts.key_types_for("gpu") == ("ssh-rsa", "ssh-ed25519")
    changed = hosts.check("gpu", "ssh-ed25519", KEY_B)
    assert changed.match is KeyMatch.CHANGED


def test_missing_and_repeated_files_are_fine(tmp_path: Path) -> None:
    path = tmp_path / "kh"
    path.write_text(f"gpu ssh-ed25519 {b64(KEY_A)}\n")
    hosts = KnownHosts.load([tmp_path / "absent", path, path])
    assert len(hosts.entries) == 1
    assert hosts.files == (str(tmp_path / "absent"), str(path))


def test_pin_creates_file_and_parents(tmp_path: Path) -> None:
    path = tmp_path / "dir" / "known_hosts"
    assert pin(path, "[gpu]:2222", "ssh-ed25519", b64(KEY_A)) is True
    assert path.read_text() == f"[gpu]:2222 ssh-ed25519 {b64(KEY_A)}\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o644
    assert pin(path, "[gpu]:2222", "ssh-ed25519", b64(KEY_A)) is False


def test_pin_appends_after_a_last_line_without_newline(tmp_path: Path) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"other ssh-ed25519 {b64(KEY_B)}")
    assert pin(path, "gpu", "ssh-ed25519", b64(KEY_A)) is True
    assert path.read_text().splitlines() == [
        f"other ssh-ed25519 {b64(KEY_B)}",
        f"gpu ssh-ed25519 {b64(KEY_A)}",
    ]


def test_pin_adds_another_type_but_refuses_a_different_key_of_the_same_type(
    tmp_path: Path,
) -> None:
    path = tmp_path / "known_hosts"
    path.write_text(f"gpu ssh-rsa {b64(KEY_RSA)}\n")
    assert pin(path, "gpu", "ssh-ed25519", b64(KEY_A)) is True
    with pytest.raises(HostKeyError, match="different ssh-ed25519 key"):
        pin(path, "gpu", "ssh-ed25519", b64(KEY_B))
    assert len(path.read_text().splitlines()) == 2


def test_a_fifo_planted_as_known_hosts_is_not_read(tmp_path: Path) -> None:
    # a FIFO with no writer would block the reader for ever (every SSH connect reads this file)
    planted = tmp_path / "known_hosts"
    os.mkfifo(planted)
    done: list[KnownHosts] = []
    reader = threading.Thread(target=lambda: done.append(KnownHosts.load([planted])), daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert done, "KnownHosts.load blocked on a FIFO"
    assert done[0].entries == ()
