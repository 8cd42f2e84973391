"""The agent under faults and attack, with real processes: a supervisor killed with -9, a pid
reused by an unrelated process, a hung server (kill -STOP), servers that cannot be spawned, a
wrapper that execs the server, and a deployment directory others can write or plant symlinks in.

Each test that measures how fast the agent notices prints it (``-s`` shows the numbers that
docs/faults.md quotes)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from orchestrator.fleet.protocol.status import decode_state
from orchestrator.remote.agent.files import Paths
from orchestrator.remote.agent.trust import UnsafePath, secure_deployment
from tests.agent.test_supervisor import (
    AGENT,
    CONFIG_LINE,
    PRELUDE,
    READY,
    Deployment,
    _agent,
    _spec,
    deployment,
)

__all__ = ["deployment"]  # the fixture, shared with test_supervisor.py

SERVES = CONFIG_LINE + READY + "time.sleep(120)\n"


def _wait(predicate: Any, timeout: float, what: str) -> float:
    """Seconds until ``predicate()`` is true."""
    began = time.monotonic()
    while not predicate():
        assert time.monotonic() - began < timeout, f"not {what} after {timeout} s"
        time.sleep(0.02)
    return time.monotonic() - began


def _kill_agent(status: dict[str, Any]) -> None:
    os.kill(status["agent_pid"], signal.SIGKILL)
    _wait(lambda: not psutil.pid_exists(status["agent_pid"]), 5, "the agent gone")


def _unrelated() -> subprocess.Popen[bytes]:
    """A process that is nobody's server: it must survive every orch command."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _end(process: subprocess.Popen[bytes]) -> None:
    process.kill()
    process.wait()


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _events(deployment: Deployment) -> list[dict[str, Any]]:
    lines = (deployment.dir / "events.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


# -- 1. never signal a process that is not verifiably ours ----------------------------------------


def test_a_reused_pid_is_gone_never_ours_for_status_and_stop(deployment: Deployment) -> None:
    deployment.start(SERVES)
    ready = deployment.wait_for("READY")
    _kill_agent(ready)
    os.killpg(ready["pid"], signal.SIGKILL)
    _wait(lambda: not psutil.pid_exists(ready["pid"]), 5, "the server gone")
    stranger, other = _unrelated(), _unrelated()
    try:
        # The kernel gave both pids to unrelated processes: the state now names them.
        state = json.loads((deployment.dir / "state.json").read_text())
        state.update(pid=stranger.pid, pgid=stranger.pid, agent_pid=other.pid)
        state["server"]["pid"] = stranger.pid
        state["agent"]["pid"] = other.pid
        (deployment.dir / "state.json").write_text(json.dumps(state))

        status = deployment.status()
        assert status["agent_alive"] is False
        assert status["server_alive"] is False
        assert status["pid"] is None  # never shown as the server
        assert status["state"] == "READY"
        assert status["stale"] is True
        assert decode_state(status).alive is False

        stopped = deployment.stop()
        assert stopped["state"] == "EXITED"
        assert stranger.poll() is None
        assert other.poll() is None
        again = deployment.stop()
        assert again["state"] == "EXITED"
        assert again["leftovers_killed"] == []
        assert stranger.poll() is None
        assert other.poll() is None
    finally:
        _end(stranger)
        _end(other)


def test_a_state_of_the_previous_agent_naming_a_stranger_is_not_trusted(
    deployment: Deployment,
) -> None:
    """The previous agent recorded bare pids: they count only when the process shows it is ours
    (the supervisor's argv names the deployment, the server carries the run's markers)."""
    stranger = _unrelated()
    try:
        legacy = {
            "protocol": 1,
            "deployment": "t",
            "agent_pid": stranger.pid,
            "state": "READY",
            "pid": stranger.pid,
            "pgid": stranger.pid,
            "run_id": "0001-x",
            "log": None,
            "port": 1,
            "starts": 1,
            "restarts": 0,
            "ready": True,
            "message": "",
            "last_exit": None,
            "meta": {},
        }
        (deployment.dir / "state.json").write_text(json.dumps(legacy))
        status = deployment.status()
        assert (status["agent_alive"], status["server_alive"]) == (False, False)
        stopped = deployment.stop()
        assert stopped["state"] == "EXITED"
        assert stranger.poll() is None
    finally:
        _end(stranger)


def test_agent_dead_server_alive_is_unsupervised_and_stop_ends_it_once(
    deployment: Deployment,
) -> None:
    deployment.start(SERVES)
    ready = deployment.wait_for("READY")
    server = psutil.Process(ready["pid"])
    _kill_agent(ready)

    began = time.monotonic()
    status = deployment.status()
    noticed = time.monotonic() - began
    print(f"\nagent killed, server alive: status says UNSUPERVISED in {noticed:.2f} s")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert status["state"] == "UNSUPERVISED"
    assert status["recorded_state"] == "READY"
    assert status["server_alive"] is True
    assert status["pid"] == server.pid
    assert status["output_lost"] is True
    assert decode_state(status).unsupervised

    stopped = deployment.stop()
    assert stopped["state"] == "EXITED"
    assert stopped["last_exit"]["class"] == "stopped"
    assert "supervisor" in stopped["message"]
    assert not server.is_running() or server.status() == psutil.STATUS_ZOMBIE
    changes = [(e["from"], e["to"]) for e in _events(deployment) if e["event"] == "state"]
    assert changes[-2:] == [("READY", "STOPPING"), ("STOPPING", "EXITED")]

    stranger = _unrelated()  # a second stop kills nothing, whoever has the pid now
    try:
        again = deployment.stop()
        assert again["state"] == "EXITED"
        assert again["leftovers_killed"] == []
        assert stranger.poll() is None
    finally:
        _end(stranger)


CORRUPT_STATES = {"null": "null", "[]": "a list", "{not json": "something that is not JSON"}


@pytest.mark.parametrize("content", list(CORRUPT_STATES))
def test_a_corrupt_state_is_said_and_its_live_supervisor_and_server_still_found_and_stopped(
    deployment: Deployment, content: str
) -> None:
    """issue 26: state.json holding null or [] made a running deployment look undeployed (and
    anything else not JSON broke status). It is corrupt, said so; the supervisor is found by the
    deployment's lock it holds, the server by the markers in its environment, each verified."""
    deployment.start(SERVES)
    ready = deployment.wait_for("READY")
    (deployment.dir / "state.json").write_text(content)
    status = deployment.status()
    assert status["deployed"] is True
    path = deployment.dir / "state.json"
    assert status["corrupt_state"] == f"{path} holds {CORRUPT_STATES[content]}, not a state"
    assert (status["agent_alive"], status["server_alive"]) == (True, True)
    assert (status["agent_pid"], status["pid"]) == (ready["agent_pid"], ready["pid"])
    assert status["run_id"] == ready["run_id"]
    decoded = decode_state(status)
    assert decoded.alive
    assert decoded.corrupt_state == status["corrupt_state"]
    stopped = deployment.stop()
    assert stopped["state"] == "EXITED"  # the supervisor stopped it and wrote its state anew
    assert "corrupt_state" not in stopped
    assert _gone(ready["pid"])
    assert _gone(ready["agent_pid"])


@pytest.mark.parametrize("content", ["null", "[]"])
def test_a_corrupt_state_without_a_supervisor_still_finds_and_stops_the_server(
    deployment: Deployment, content: str
) -> None:
    deployment.start(SERVES)
    ready = deployment.wait_for("READY")
    _kill_agent(ready)
    (deployment.dir / "state.json").write_text(content)
    status = deployment.status()
    assert status["state"] == "UNSUPERVISED"
    assert (status["agent_alive"], status["server_alive"]) == (False, True)
    assert status["pid"] == ready["pid"]
    assert status["corrupt_state"].endswith("not a state")
    stopped = deployment.stop()
    assert stopped["state"] == "EXITED"
    assert stopped["last_exit"]["class"] == "stopped"
    assert _gone(ready["pid"])
    assert deployment.status()["state"] == "EXITED"  # recorded: a second stop has nothing to do


def test_adopt_takes_over_the_running_server_without_restarting_it(
    deployment: Deployment,
) -> None:
    deployment.start(
        SERVES,
        health={"endpoint": "/health", "interval_s": 0.3, "failures": 3, "startup_timeout_s": 30},
    )
    ready = deployment.wait_for("READY")
    _kill_agent(ready)
    assert deployment.status()["state"] == "UNSUPERVISED"

    adopted = _agent("adopt", "--dir", str(deployment.dir))
    assert adopted["ok"] is True, adopted
    status = deployment.status()
    assert status["state"] == "READY"
    assert status["agent_alive"] is True
    assert status["agent_pid"] != ready["agent_pid"]
    assert status["pid"] == ready["pid"]  # the same server: no restart
    assert (status["starts"], status["adopted"], status["output_lost"]) == (1, True, True)
    assert "adopted" in Path(status["log"]).read_text()

    # it supervises: liveness (kill -STOP) is noticed by the new supervisor too. The states in
    # between pass in a moment: read them from its events, not by polling for them
    os.kill(ready["pid"], signal.SIGSTOP)
    deadline = time.monotonic() + 25
    while (restarted := deployment.status())["run_id"] == ready["run_id"] or (
        restarted["state"] != "READY"
    ):
        assert time.monotonic() < deadline, restarted
        time.sleep(0.05)
    events = [
        json.loads(line) for line in (deployment.dir / "events.jsonl").read_text().splitlines()
    ]
    assert "UNHEALTHY" in [event.get("to") for event in events if event["event"] == "state"]
    assert restarted["last_exit"]["class"] == "hung"
    assert not psutil.pid_exists(ready["pid"]) or (
        psutil.Process(ready["pid"]).status() == psutil.STATUS_ZOMBIE
    )


def test_adopt_refuses_while_the_supervisor_lives(deployment: Deployment) -> None:
    deployment.start(SERVES)
    deployment.wait_for("READY")
    refused = _agent("adopt", "--dir", str(deployment.dir))
    assert refused["ok"] is False
    assert "its supervisor runs" in refused["reason"]


# -- 2. liveness, timeouts, spawn failures --------------------------------------------------------


def test_a_stopped_server_is_unhealthy_within_interval_times_failures(
    deployment: Deployment,
) -> None:
    interval, failures = 0.5, 3
    deployment.start(
        SERVES,
        health={
            "endpoint": "/health",
            "interval_s": interval,
            "failures": failures,
            "startup_timeout_s": 30,
        },
        restart={"mode": "no"},
    )
    ready = deployment.wait_for("READY")
    os.kill(ready["pid"], signal.SIGSTOP)
    began = time.monotonic()
    status = deployment.wait_for("UNHEALTHY", "EXITED", timeout=10)
    noticed = time.monotonic() - began
    print(f"\nkill -STOP: UNHEALTHY after {noticed:.2f} s (interval {interval} x {failures})")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert noticed <= interval * failures + interval + 1.0
    final = deployment.wait_for("EXITED", timeout=10)
    assert final["last_exit"]["class"] == "hung"
    assert final["message"] == "exited (hung); restart=no"
    assert not psutil.pid_exists(ready["pid"]) or (
        psutil.Process(ready["pid"]).status() == psutil.STATUS_ZOMBIE
    )
    assert status["state"] in ("UNHEALTHY", "EXITED")


def test_the_agent_ends_a_startup_that_outlasts_its_timeout(deployment: Deployment) -> None:
    deployment.start(
        CONFIG_LINE + "time.sleep(120)\n",
        health={"endpoint": "/health", "interval_s": 0.2, "startup_timeout_s": 1.0},
        restart={"mode": "no"},
    )
    began = time.monotonic()
    final = deployment.wait_for("EXITED", timeout=10)
    print(f"\nstartup timeout 1 s: ended by the agent after {time.monotonic() - began:.2f} s")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert final["last_exit"]["class"] == "startup-timeout"
    assert final["last_exit"]["message"] == "not READY after 1 s (health.startup_timeout_s)"


def _spawn_failure(deployment: Deployment, argv: list[str]) -> tuple[dict[str, Any], float]:
    deployment._specs += 1
    spec_path = deployment.dir / f".spec-{deployment._specs}.json"
    spec_path.write_text(json.dumps(_spec(argv)))
    began = time.monotonic()
    reply = _agent("start", "--dir", str(deployment.dir), "--spec", str(spec_path))
    return reply, time.monotonic() - began


@pytest.mark.parametrize("case", ["argv-over-MAX_ARG_STRLEN", "exec-format", "no-interpreter"])
def test_a_server_that_cannot_be_spawned_is_spawn_failed_at_once(
    deployment: Deployment, tmp_path: Path, case: str
) -> None:
    if case == "argv-over-MAX_ARG_STRLEN":
        argv = [sys.executable, "-c", "pass", "x" * (128 * 1024 + 1)]
        expected = "MAX_ARG_STRLEN"
    elif case == "exec-format":
        program = tmp_path / "not-a-program"
        program.write_bytes(b"\x7fELF\x00garbage")
        program.chmod(0o755)
        argv, expected = [str(program)], "Exec format error"
    else:
        program = tmp_path / "launcher"
        program.write_text("#!/nonexistent/python3\nprint('never')\n")
        program.chmod(0o755)
        argv, expected = [str(program)], "the interpreter on its #! line does not"
    reply, took = _spawn_failure(deployment, argv)
    print(f"\nspawn-failed ({case}): start answered in {took:.2f} s")  # noqa: T201 - measured, for docs/faults.md (-s)
    assert took < 2.0
    state = decode_state(reply["state"], agent_alive=True)
    assert state.pid is None
    assert state.last_exit is not None
    assert state.last_exit.cls == "spawn-failed"
    assert state.last_exit.run_id == state.run_id  # up finds the verdict by its run id
    assert expected in state.last_exit.message
    final = deployment.wait_for("FATAL", timeout=5)
    assert final["restarts"] == 0


# -- 7. what the server received --------------------------------------------------------------------


def test_the_received_snapshot_follows_a_wrapper_that_execs(
    deployment: Deployment, tmp_path: Path
) -> None:
    wrapper = tmp_path / "wrapper.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        "# drops --drop-me VALUE, then execs the real program\n"
        'prog="$1"; shift; out=""\n'
        'for a in "$@"; do shift; if [ "$a" = --drop-me ]; then skip=1; continue; fi\n'
        '  if [ -n "$skip" ]; then skip=; continue; fi; set -- "$@" "$a"; done\n'
        'exec "$prog" "$@"\n'
    )
    wrapper.chmod(0o755)
    program = (
        PRELUDE
        + "time.sleep(0.5)\nprint('Traceback (most recent call last):')\n"
        + ("print('ValueError: bad')\nsys.exit(1)\n")
    )
    deployment._specs += 1
    spec_path = deployment.dir / f".spec-{deployment._specs}.json"
    argv = [str(wrapper), sys.executable, "-c", program, "--keep", "1", "--drop-me", "x"]
    spec_path.write_text(json.dumps(_spec(argv)))
    _agent("start", "--dir", str(deployment.dir), "--spec", str(spec_path))
    final = deployment.wait_for("FATAL")
    received_file = Path(final["run_dir"]) / "received.json"
    received = json.loads(received_file.read_text())
    assert received["argv"] == [sys.executable, "-c", program, "--keep", "1"]
    assert received["exe"] == os.path.realpath(sys.executable)
    assert received["env"] == {"FROM_SPEC": "yes", "TEST_PORT": final_port(final)}
    assert oct(received_file.stat().st_mode & 0o777) == "0o600"
    takes = [e for e in _events(deployment) if e["event"] == "received"]
    assert takes[-1]["exe"] == received["exe"]  # the last take: what the wrapper exec'd

    inspected = _agent("inspect", "--dir", str(deployment.dir), "--env", "FROM_SPEC")
    assert inspected["alive"] is False
    assert inspected["found_by"] == "orch"
    assert inspected["argv"] == received["argv"]
    assert inspected["env"] == {"FROM_SPEC": "yes"}  # only the names asked for
    assert inspected["last_run"]["exit"]["class"] == "config-error"


def final_port(status: dict[str, Any]) -> str:
    return str(status["port"])


# -- 4/5. files and directories ---------------------------------------------------------------------


def test_files_and_directories_are_private(deployment: Deployment) -> None:
    deployment.start(SERVES)
    ready = deployment.wait_for("READY")
    run_dir = Path(ready["run_dir"])
    for path in (deployment.dir, deployment.dir / "runs", run_dir):
        assert oct(path.stat().st_mode & 0o777) == "0o700", path
    for path in (
        deployment.dir / "state.json",
        deployment.dir / "events.jsonl",
        deployment.dir / "agent.log",
        deployment.dir / "spec.json",
        run_dir / "server.log",
        run_dir / "spec.json",
        run_dir / "received.json",
        run_dir / "server_args.json",
    ):
        assert oct(path.stat().st_mode & 0o777) == "0o600", path


def test_a_planted_events_symlink_is_refused_and_the_victim_untouched(
    deployment: Deployment, tmp_path: Path
) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    (deployment.dir / "events.jsonl").symlink_to(victim)
    reply = deployment.start(SERVES)
    assert reply["ok"] is False
    assert reply["refused"] == "unsafe-path"
    assert "events.jsonl" in reply["reason"]
    assert "symlink" in reply["reason"]
    assert victim.read_text() == "precious\n"
    assert not (deployment.dir / "state.json").exists()
    assert list(deployment.dir.glob(".spec-*")) == []  # the spec (secrets) is not left behind


def test_a_deployment_dir_others_can_write_is_refused_with_a_hint(
    deployment: Deployment,
) -> None:
    deployment.dir.chmod(0o777)
    reply = deployment.start(SERVES)
    assert reply["refused"] == "unsafe-path"
    assert "writable by group or others (mode 0777)" in reply["reason"]
    assert reply["hint"].startswith(f"chmod go-w {deployment.dir}")
    status = _agent("status", "--dir", str(deployment.dir))
    assert status["refused"] == "unsafe-path"


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to give a directory to another user")
def test_a_workdir_of_another_user_is_refused(deployment: Deployment) -> None:
    os.chown(deployment.dir.parent, 65534, 65534)
    reply = deployment.start(SERVES)
    assert reply["refused"] == "unsafe-path"
    assert "belongs to uid 65534" in reply["reason"]


def _linked_workdir(tmp_path: Path) -> tuple[Path, Path]:
    """``/data -> a mount`` in small: ``tmp_path/data`` a symlink to ``tmp_path/mnt/orch``, a
    private directory of this user; (the link, its target)."""
    target = tmp_path / "mnt" / "orch"
    target.mkdir(parents=True, mode=0o700)
    target.chmod(0o700)
    (tmp_path / "mnt").chmod(0o755)
    link = tmp_path / "data"
    link.symlink_to(target)
    return link, target


def _secure(workdir: Path) -> None:
    secure_deployment(Paths(str(workdir / "svc")), create=True)


def test_a_workdir_linked_to_the_users_own_private_directory_is_accepted(tmp_path: Path) -> None:
    """issue 26: ``workdir: /data`` with /data a symlink to a mount was refused outright."""
    link, target = _linked_workdir(tmp_path)
    _secure(link)
    assert (target / "svc").is_dir()
    status = _agent("status", "--dir", str(link / "svc"))
    assert status == {
        "deployed": False,
        "deployment_dir": str(link / "svc"),
        "protocol": 1,
        "lock": {"generation": 0, "held": False},
    }


@pytest.mark.parametrize(
    ("attack", "says"),
    [
        ("target writable by others", "writable by group or others"),
        ("link in a directory others can write", "writable by group or others"),
        ("target of another user", "belongs to uid 65534"),
        ("link of another user", "belongs to uid 65534"),
    ],
)
def test_a_workdir_link_is_refused_when_anyone_else_could_have_planted_or_change_it(
    tmp_path: Path, attack: str, says: str
) -> None:
    link, target = _linked_workdir(tmp_path)
    if attack == "target writable by others":
        target.chmod(0o777)
    elif attack == "link in a directory others can write":
        tmp_path.chmod(0o777)
    elif os.getuid() != 0:
        pytest.skip("needs root to give a file to another user")
    elif attack == "target of another user":
        os.chown(target, 65534, 65534)
    else:
        os.lchown(link, 65534, 65534)
    with pytest.raises(UnsafePath) as refused:
        _secure(link)
    assert says in refused.value.message
    assert not (target / "svc").exists()


def test_the_probe_env_file_never_outlives_a_failed_parse(deployment: Deployment) -> None:
    env_file = deployment.dir / ".probe-env-0123456789ab.json"
    env_file.write_text(json.dumps({"HF_TOKEN": "hf_secret"}))
    env_file.chmod(0o600)
    done = subprocess.run(
        [*AGENT, "probe", "--port", "1", "--env-file", str(env_file), "--model", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2  # argparse: --model expected one argument
    assert not env_file.exists()
