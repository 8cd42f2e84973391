"""orch up / status / logs / down over a real OpenSSH sshd on 127.0.0.1, against the SGLang
stand-in (standin/sglang, NOT SGLang). The host `box` is this machine reached through SSH, so
the tests can look at the server's processes with psutil and at the remote files directly."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import psutil
import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace

T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


def status_row(space: Workspace, name: str) -> dict[str, Any]:
    outcome = space.orch("status", name, "--json")
    assert outcome.code == ExitCode.OK, outcome.err
    (row,) = outcome.json()
    assert isinstance(row, dict)
    return row


def processes_of_run(run_id: str) -> list[psutil.Process]:
    found = []
    for process in psutil.process_iter(["environ"]):
        if (process.info["environ"] or {}).get("ORCH_RUN_ID") == run_id:
            found.append(process)
    return found


def test_up_ready_status_logs_down_over_ssh(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile("svc")
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    assert "ssh 127.0.0.1" in up.out
    assert "shards" in up.out  # weight-loading progress, parsed from the \r-updated tqdm line
    assert "READY" in up.out

    row = status_row(ssh_workspace, name)
    assert (row["host"], row["state"], row["ready"], row["restarts"]) == ("box", "READY", True, 0)
    assert row["launch_digest"]
    assert row["run_id"]
    server = psutil.Process(row["pid"])
    children = {child.name() for child in server.children(recursive=True)}
    assert {"sglang::scheduler", "sglang::detokenizer"} <= children  # the stand-in's, as SGLang's

    logs = ssh_workspace.orch("logs", name, "-n", "25")
    assert logs.code == ExitCode.OK
    assert "The server is fired up and ready to roll!" in logs.out

    down = ssh_workspace.orch("down", name)
    assert down.code == ExitCode.OK, down.err
    wait_for("every process of the run to be gone", lambda: not processes_of_run(row["run_id"]))
    assert status_row(ssh_workspace, name)["state"] == "EXITED"


def test_sigkill_of_the_server_is_restarted_with_backoff(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile(
        "killed", restart={"mode": "on-failure", "delay_s": 2, "max_delay_s": 4, "start_limit": 5}
    )
    assert ssh_workspace.orch("up", name).code == ExitCode.OK
    first = status_row(ssh_workspace, name)
    os.kill(first["pid"], signal.SIGKILL)

    backoff = wait_for(
        "BACKOFF in status",
        lambda: (row := status_row(ssh_workspace, name))["state"] == "BACKOFF" and row,
        timeout=10,
    )
    assert backoff["last_exit"]["cls"] == "killed"
    assert backoff["last_exit"]["signal"] == "SIGKILL"
    assert backoff["next_start_at"] is not None
    table = ssh_workspace.orch("status", name).out
    assert "BACKOFF" in table
    assert "killed" in table

    again = wait_for(
        "the restarted server to be READY",
        lambda: (row := status_row(ssh_workspace, name))["state"] == "READY" and row,
    )
    assert again["restarts"] == 1
    assert again["run_id"] != first["run_id"]
    assert again["pid"] != first["pid"]

    # Every run keeps its own log: the killed run's is intact after the restart.
    old = ssh_workspace.orch("logs", name, "--run", first["run_id"], "-n", "1000")
    assert old.code == ExitCode.OK
    assert "The server is fired up and ready to roll!" in old.out
    old_file = Path(first["log"])
    assert old_file.parent.name == first["run_id"]
    assert old_file.stat().st_size > 0
    assert Path(again["log"]) != old_file


def test_config_error_is_fatal_without_restart_and_up_prints_the_exception(
    ssh_workspace: Workspace,
) -> None:
    name = ssh_workspace.profile("bad", env={"ORCH_STANDIN_FAIL": "config-error"})
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.CONFIG_ERROR
    assert "config-error: ValueError: Speculative decoding" in up.err
    assert "not restarted" in up.err
    time.sleep(0.5)  # a restart, were there one, would come after delay_s 0.2
    row = status_row(ssh_workspace, name)
    assert (row["state"], row["restarts"], row["starts"]) == ("FATAL", 0, 1)
    assert row["last_exit"]["cls"] == "config-error"


def test_ssh_dropped_during_up_leaves_the_server_running_and_up_reattaches(
    ssh_workspace: Workspace,
) -> None:
    name = ssh_workspace.profile("dropped", env={"ORCH_STANDIN_LOAD_S": "4"})
    first_up = ssh_workspace.spawn("up", name)
    try:
        starting = wait_for(
            "the server to start",
            lambda: (row := status_row(ssh_workspace, name)).get("pid") and row,
        )
    finally:
        first_up.kill()  # the client dies: its SSH connection drops mid-startup
        first_up.communicate()
    assert first_up.returncode == -signal.SIGKILL
    assert starting["state"] in ("STARTING", "RUNNING")
    assert psutil.Process(starting["pid"]).is_running()

    second_up = ssh_workspace.orch("up", name)
    assert second_up.code == ExitCode.OK, second_up.err
    assert "the same launch already runs" in second_up.out
    assert "READY" in second_up.out
    row = status_row(ssh_workspace, name)
    assert (row["pid"], row["starts"], row["restarts"]) == (starting["pid"], 1, 0)


def test_two_concurrent_ups_start_exactly_one_server(ssh_workspace: Workspace) -> None:
    name = ssh_workspace.profile("raced")
    racers = [ssh_workspace.spawn("up", name) for _ in range(2)]
    results = [racer.communicate(timeout=90) for racer in racers]
    codes = sorted(racer.returncode for racer in racers)
    assert codes == [ExitCode.OK, ExitCode.OK], results  # the loser attaches to the winner
    row = status_row(ssh_workspace, name)
    assert (row["state"], row["starts"]) == ("READY", 1)
    runs = list((ssh_workspace.deployment_dir(name) / "runs").iterdir())
    assert [run.name for run in runs] == [row["run_id"]]
    servers = [
        p
        for p in processes_of_run(row["run_id"])
        if p.name() not in ("sglang::scheduler", "sglang::detokenizer")
    ]
    assert [p.pid for p in servers] == [row["pid"]]


def test_unknown_host_key_is_refused_and_nothing_remote_changes(
    ssh_workspace: Workspace,
) -> None:
    name = ssh_workspace.profile("untrusted", host="stranger")
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.HOST_KEY
    assert "orch hosts trust stranger" in up.err
    assert not ssh_workspace.workdir.exists()  # refused before anything was sent


def test_hosts_trust_pins_the_key_in_the_team_known_hosts(
    ssh_workspace: Workspace, sshd: Any
) -> None:
    trust = ssh_workspace.orch("hosts", "trust", "stranger", "--yes")
    assert trust.code == ExitCode.OK, trust.err
    assert sshd.host_key_fingerprint in trust.out
    pinned = (ssh_workspace.profiles / "known_hosts").read_text()
    assert pinned == f"[127.0.0.1]:{sshd.port} ssh-ed25519 {sshd.host_key_b64}\n"
    name = ssh_workspace.profile("trusted", host="stranger")
    assert ssh_workspace.orch("up", name).code == ExitCode.OK


NASTY = 'it\'s "quoted" $HOME `id` $(touch /tmp/orch-pwned)\nsecond line\\n; rm -rf / #'
NASTY_ONE_LINE = NASTY.replace("\n", " ")  # names refuse line breaks; free-form args do not


def test_a_nasty_value_reaches_the_server_cmdline_and_environ_unchanged(
    ssh_workspace: Workspace,
) -> None:
    name = ssh_workspace.profile(
        "nasty",
        env={"ORCH_NASTY": NASTY},
        served_model_name=NASTY_ONE_LINE,
        args={"chat_template": NASTY},
    )
    up = ssh_workspace.orch("up", name)
    assert up.code == ExitCode.OK, up.err
    row = status_row(ssh_workspace, name)
    server = psutil.Process(row["pid"])
    cmdline = server.cmdline()  # /proc/PID/cmdline, split at NULs
    assert cmdline[cmdline.index("--served-model-name") + 1] == NASTY_ONE_LINE
    assert cmdline[cmdline.index("--chat-template") + 1] == NASTY
    assert server.environ()["ORCH_NASTY"] == NASTY
    assert not Path("/tmp/orch-pwned").exists()


@pytest.fixture(autouse=True)
def _no_pwned_marker() -> None:
    Path("/tmp/orch-pwned").unlink(missing_ok=True)


def _counted_at_close(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int]]:
    """(commands, SFTP operations) of each SSH connection a command made, at its close."""
    from orchestrator.transport.ssh import SSHTransport

    counted: list[tuple[int, int]] = []
    real_close = SSHTransport.close

    def close(transport: SSHTransport) -> None:
        counted.append((transport.commands_run, transport.file_operations))
        real_close(transport)

    monkeypatch.setattr(SSHTransport, "close", close)
    return counted


def test_up_and_logs_over_ssh_ask_the_host_in_as_few_commands_as_they_can(
    ssh_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Round trips decide how orch feels on a host 20-150 ms away: ``up`` is three commands on
    one connection, two of them at once (the operation lock's hold, and the status with the
    probe, the agent carried on its stdin), then the start with the follow and the inspection;
    ``logs -n`` one; no file transfer, even on a host that has never seen this orch's agent."""
    name = ssh_workspace.profile("trips")
    counted = _counted_at_close(monkeypatch)
    assert not (ssh_workspace.workdir / ".orch").exists()  # a host without the agent
    up = ssh_workspace.orch("up", name, "--no-plan")
    assert up.code == ExitCode.OK, up.err
    assert ", 0 drift" in up.out  # compared with the inspection the stream brought
    # (commands, SFTP operations): the hold runs beside the status; on a host without the
    # agent it may start before the status's carried agent is written there, and ask again
    # carrying it too: 4 then
    [(commands, files)] = counted
    assert (commands in (3, 4), files) == (True, 0), counted
    counted.clear()
    assert ssh_workspace.orch("down", name).code == ExitCode.OK
    counted.clear()
    again = ssh_workspace.orch("up", name, "--no-plan")
    assert again.code == ExitCode.OK, again.err
    assert counted == [(3, 0)]  # the agent there now: hold + status, then the start
    counted.clear()
    logs = ssh_workspace.orch("logs", name, "-n", "1000")
    assert logs.code == ExitCode.OK, logs.err
    assert "The server is fired up and ready to roll!" in logs.out
    assert "server_args=" in logs.out  # from its start: the whole log holds under 1000 lines
    assert counted == [(1, 0)]
    (pushed,) = (ssh_workspace.workdir / ".orch").glob("agent-*.pyz")
    assert oct(pushed.stat().st_mode & 0o777) == "0o600"
    assert oct((ssh_workspace.workdir / ".orch").stat().st_mode & 0o777) == "0o700"


def test_a_command_on_a_host_without_the_agent_carries_it_on_a_second_try(
    ssh_workspace: Workspace, monkeypatch: pytest.MonkeyPatch
) -> None:
    counted = _counted_at_close(monkeypatch)
    name = ssh_workspace.profile("fresh")
    status = ssh_workspace.orch("status", name)
    assert status.code == ExitCode.OK, status.err
    assert counted == [(2, 0)]  # refused as missing, then the same command carrying it
