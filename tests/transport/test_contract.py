"""What every Transport does, checked against LocalTransport and SSHTransport alike.

The sshd runs on this machine as this user, so files the SSH transport writes are checked on the
local disk, and ``home()`` must agree between both.
"""

from __future__ import annotations

import json
import secrets
import shutil
import stat
import sys
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.errors import ExitCode, ProgramNotFound, RemoteCommandError
from orchestrator.transport import CommandResult
from tests.transport.conftest import TransportCase

PY = sys.executable
MB = 1 << 20


def py(code: str, *args: str) -> list[str]:
    return [PY, "-c", code, *args]


# ---------------------------------------------------------------------------- run


def test_run_returns_stdout_and_zero(transport_case: TransportCase) -> None:
    result = transport_case.transport.run(py("print('hello')"))
    assert result == CommandResult((PY, "-c", "print('hello')"), 0, b"hello\n", b"")


def test_run_reports_exit_code_and_stderr(transport_case: TransportCase) -> None:
    result = transport_case.transport.run(
        py("import sys; sys.stderr.write('bad thing\\n'); sys.exit(3)")
    )
    assert (result.returncode, result.stdout, result.stderr) == (3, b"", b"bad thing\n")
    with pytest.raises(RemoteCommandError) as raised:
        result.check()
    assert raised.value.returncode == 3
    assert "bad thing" in raised.value.message


def test_run_passes_stdin(transport_case: TransportCase) -> None:
    result = transport_case.transport.run(
        py("import sys; sys.stdout.write(sys.stdin.read().upper())"), stdin=b"abc\ndef"
    )
    assert result.stdout == b"ABC\nDEF"


def test_run_without_stdin_gives_eof(transport_case: TransportCase) -> None:
    result = transport_case.transport.run(py("import sys; print(repr(sys.stdin.read()))"))
    assert result.stdout == b"''\n"


def test_run_large_output_on_both_streams(transport_case: TransportCase) -> None:
    """1 MB on stdout and 1 MB on stderr, interleaved, after reading 1 MB of stdin: a reader
    that drains one stream at a time, or writes stdin before reading, would deadlock."""
    code = (
        "import sys\n"
        "data = sys.stdin.buffer.read()\n"
        "for i in range(16):\n"
        "    sys.stdout.buffer.write(b'o' * 65536); sys.stdout.flush()\n"
        "    sys.stderr.buffer.write(b'e' * 65536); sys.stderr.flush()\n"
        "sys.stdout.buffer.write(str(len(data)).encode())\n"
    )
    result = transport_case.transport.run(py(code), stdin=b"i" * MB, timeout=30)
    assert result.returncode == 0
    assert result.stdout == b"o" * MB + str(MB).encode()
    assert result.stderr == b"e" * MB


def test_run_child_writing_before_reading_stdin(transport_case: TransportCase) -> None:
    code = (
        "import sys\n"
        "sys.stdout.buffer.write(b'x' * (4 << 20)); sys.stdout.flush()\n"
        "print(len(sys.stdin.buffer.read()))\n"
    )
    result = transport_case.transport.run(py(code), stdin=b"y" * (4 << 20), timeout=30)
    assert result.stdout == b"x" * (4 << 20) + f"{4 << 20}\n".encode()


def test_run_child_that_ignores_stdin(transport_case: TransportCase) -> None:
    result = transport_case.transport.run(py("print('ok')"), stdin=b"z" * (4 << 20), timeout=30)
    assert (result.returncode, result.stdout) == (0, b"ok\n")


def test_run_timeout_is_remote_command_error_124(transport_case: TransportCase) -> None:
    started = time.monotonic()
    with pytest.raises(RemoteCommandError) as raised:
        transport_case.transport.run(py("import time; time.sleep(5)"), timeout=0.5)
    assert raised.value.returncode == 124
    assert "timed out" in raised.value.message
    assert time.monotonic() - started < 4


def test_run_missing_program_is_program_not_found(transport_case: TransportCase) -> None:
    """The same error, word for word, whether exec failed here or the remote shell said so."""
    transport = transport_case.transport
    with pytest.raises(ProgramNotFound) as raised:
        transport.run(["/nonexistent/python3", "-c", "pass"])
    error = raised.value
    assert error.message == f"/nonexistent/python3: not found on {transport.host.name}"
    assert (error.program, error.host, error.reason) == (
        "/nonexistent/python3",
        transport.host.name,
        "not found",
    )
    assert error.exit_code == ExitCode.PREFLIGHT
    assert error.hint is None  # the caller knows which setting names the program


def test_run_program_not_on_path_is_program_not_found(transport_case: TransportCase) -> None:
    with pytest.raises(ProgramNotFound) as raised:
        transport_case.transport.run(["orch-no-such-command-4f1d"])
    assert raised.value.message == (
        f"orch-no-such-command-4f1d: not found on {transport_case.transport.host.name}"
    )


def test_run_program_under_a_file_is_program_not_found(
    transport_case: TransportCase, tmp_path: Path
) -> None:
    """A path through a plain file: ENOTDIR here, bash says "Not a directory" (exit 126)."""
    (tmp_path / "plain-file").write_text("")
    program = str(tmp_path / "plain-file" / "python3")
    with pytest.raises(ProgramNotFound) as raised:
        transport_case.transport.run([program])
    assert raised.value.reason == "not found"


@pytest.mark.parametrize("kind", ["file", "directory"])
def test_run_non_executable_program_is_program_not_found(
    transport_case: TransportCase, tmp_path: Path, kind: str
) -> None:
    program = tmp_path / "python3"
    if kind == "file":
        program.write_text("#!/bin/sh\n")
        program.chmod(0o644)
    else:
        program.mkdir()
    with pytest.raises(ProgramNotFound) as raised:
        transport_case.transport.run([str(program)])
    assert raised.value.message == (
        f"{program}: not executable on {transport_case.transport.host.name}"
    )


def test_run_wrapper_whose_command_is_missing_is_a_result(transport_case: TransportCase) -> None:
    """``env`` started, then did not find *its* command: exit 127, but env is not missing."""
    result = transport_case.transport.run(["env", "orch-no-such-command-4f1d"])
    assert result.returncode == 127
    assert b"orch-no-such-command-4f1d" in result.stderr


def test_run_program_exiting_127_itself_is_a_result(transport_case: TransportCase) -> None:
    code = "import sys; sys.stderr.write('libfoo.so: No such file or directory\\n'); sys.exit(127)"
    result = transport_case.transport.run(py(code))
    assert (result.returncode, result.stderr) == (127, b"libfoo.so: No such file or directory\n")


def test_run_argv_metacharacters_arrive_unchanged(transport_case: TransportCase) -> None:
    argv = ["a b", "'", '"', "$HOME", "`id`", "$(id)", "\\", "x\ny", "ünï ⚡", "", "*", "~", ";ls"]
    result = transport_case.transport.run(
        py("import json, sys; print(json.dumps(sys.argv[1:]))", *argv)
    )
    assert json.loads(result.stdout) == argv


ARG = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    max_size=30,
)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(args=st.lists(ARG, max_size=5))
def test_run_any_argv_roundtrips(transport_case: TransportCase, args: list[str]) -> None:
    result = transport_case.transport.run(
        py("import json, sys; print(json.dumps(sys.argv[1:]))", *args)
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == args


def test_run_concurrent_calls_share_the_transport(transport_case: TransportCase) -> None:
    results: list[bytes] = []
    lock = threading.Lock()

    def one(i: int) -> None:
        out = transport_case.transport.run(py(f"print({i})")).stdout
        with lock:
            results.append(out)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert sorted(results) == sorted(f"{i}\n".encode() for i in range(8))


# ---------------------------------------------------------------------------- files


def test_put_writes_content_with_mode_and_no_temp_left(
    transport_case: TransportCase, tmp_path: Path
) -> None:
    target = tmp_path / "secret.env"
    transport_case.transport.put(b"TOKEN=x\n", str(target), 0o600)
    assert target.read_bytes() == b"TOKEN=x\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["secret.env"]


def test_put_replaces_existing_file_and_its_mode(
    transport_case: TransportCase, tmp_path: Path
) -> None:
    target = tmp_path / "state.json"
    target.write_bytes(b"old content that is longer than the new one")
    target.chmod(0o644)
    transport_case.transport.put(b"new", str(target), 0o640)
    assert target.read_bytes() == b"new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_put_creates_parent_directories(transport_case: TransportCase, tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "c" / "agent.py"
    transport_case.transport.put(b"print()\n", str(target), 0o755)
    assert target.read_bytes() == b"print()\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o755
    assert stat.S_IMODE(target.parent.stat().st_mode) == 0o700


def test_put_large_file(transport_case: TransportCase, tmp_path: Path) -> None:
    data = secrets.token_bytes(3 * MB + 17)
    transport_case.transport.put(data, str(tmp_path / "big"), 0o600)
    assert (tmp_path / "big").read_bytes() == data


def test_read_whole_offset_and_limit(transport_case: TransportCase, tmp_path: Path) -> None:
    target = tmp_path / "log"
    target.write_bytes(b"0123456789")
    read = transport_case.transport.read
    assert read(str(target)) == b"0123456789"
    assert read(str(target), offset=3) == b"3456789"
    assert read(str(target), offset=3, limit=4) == b"3456"
    assert read(str(target), offset=10) == b""
    assert read(str(target), offset=50) == b""


def test_read_large_range(transport_case: TransportCase, tmp_path: Path) -> None:
    data = secrets.token_bytes(3 * MB)
    (tmp_path / "big").write_bytes(data)
    assert (
        transport_case.transport.read(str(tmp_path / "big"), MB + 5, 2 * MB)
        == data[MB + 5 : 3 * MB + 5]
    )


def test_read_missing_file_raises_file_not_found(
    transport_case: TransportCase, tmp_path: Path
) -> None:
    with pytest.raises(FileNotFoundError):
        transport_case.transport.read(str(tmp_path / "nope"))


def test_size(transport_case: TransportCase, tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"12345")
    assert transport_case.transport.size(str(tmp_path / "f")) == 5
    assert transport_case.transport.size(str(tmp_path / "missing")) is None


def test_home_is_the_login_users_home(transport_case: TransportCase) -> None:
    assert transport_case.transport.home() == str(Path.home())


def test_tilde_paths_are_expanded(transport_case: TransportCase) -> None:
    name = f".orch-test-{secrets.token_hex(4)}"
    try:
        transport_case.transport.put(b"tilde", f"~/{name}/f", 0o600)
        assert (Path.home() / name / "f").read_bytes() == b"tilde"
        assert transport_case.transport.read(f"~/{name}/f", 1) == b"ilde"
        assert transport_case.transport.size(f"~/{name}/f") == 5
    finally:
        shutil.rmtree(Path.home() / name, ignore_errors=True)
