"""Issue 25: what happened (the class) and whether a restart can help (the restart verdict, with
its reason) travel from the agent's state to every place orch shows a run's end: ``orch status``,
``orch runs`` and ``orch up``'s failure, in text and --json; and each class has its exit code."""

from __future__ import annotations

import json
from typing import Any

from orchestrator.cli.show import core as show
from orchestrator.cli.show import status as show_status
from orchestrator.commands.events import RunEnded
from orchestrator.commands.follow import exit_code_of, failure_outcome
from orchestrator.commands.logs import RunsView
from orchestrator.commands.ops import StatusRow
from orchestrator.errors import ExitCode
from orchestrator.fleet.protocol.runs import RunInfo
from orchestrator.fleet.protocol.status import decode_state
from orchestrator.remote.agent.states import EXITED, FATAL
from orchestrator.remote.agent.verdict import (
    CONFIG_ERROR,
    CRASHED,
    CUDA_OOM,
    IMPORT_ERROR,
    KERNEL_ERROR,
    KILLED,
    MODEL_NOT_FOUND,
    NCCL,
    PORT_IN_USE,
    STOPPED,
    restart_for,
)

RUN = "0002-20261201T005318Z"


def _state(cls: str, message: str, helps: bool | None, state: str = FATAL) -> dict[str, Any]:
    last_exit: dict[str, Any] = {
        "run_id": RUN,
        "returncode": -9,
        "signal": "SIGKILL",
        "class": cls,
        "message": message,
        "at": 1796086399.5,
        "was_ready": False,
        "swept_pids": [],
    }
    if helps is not None:  # an agent before issue 25 wrote neither field
        last_exit["restart_helps"] = helps
        last_exit["restart_why"] = restart_for(cls, was_ready=helps).why
    return {
        "deployed": True,
        "state": state,
        "run_id": RUN,
        "message": f"{cls}: not restarting",
        "starts": 1,
        "restarts": 0,
        "last_exit": last_exit,
        "agent_alive": True,
    }


ASSERTED = _state(CONFIG_ERROR, "AssertionError: 16 is not divisible by 6", False)


def test_the_restart_verdict_decodes_from_the_agents_last_exit() -> None:
    ended = decode_state(ASSERTED).last_exit
    assert ended is not None
    assert (ended.cls, ended.restart_helps) == (CONFIG_ERROR, False)
    assert ended.restart_why == restart_for(CONFIG_ERROR).why


def test_an_older_agents_last_exit_reads_its_classs_restart_verdict() -> None:
    ended = decode_state(_state(IMPORT_ERROR, "ImportError: x", None)).last_exit
    assert ended is not None
    assert ended.restart_helps is False
    assert ended.restart_why == restart_for(IMPORT_ERROR).why
    crashed = decode_state(_state(CRASHED, "RuntimeError: x", None)).last_exit
    assert crashed is not None
    assert crashed.restart_helps is True


def test_status_shows_the_class_and_whether_a_restart_helps_in_text_and_json() -> None:
    row = StatusRow("demo", "gpu1", decode_state(ASSERTED))
    text = show_status.status_table([row], wide=True)
    assert "config-error: AssertionError: 16 is not divisible by 6" in text
    assert f"restart will not help: {restart_for(CONFIG_ERROR).why}" in text
    document = json.loads(json.dumps(show_status.status_json(row)))
    assert document["last_exit"]["cls"] == "config-error"
    assert document["last_exit"]["restart_helps"] is False
    assert document["last_exit"]["restart_why"] == restart_for(CONFIG_ERROR).why


def test_runs_shows_each_runs_restart_verdict_in_text_and_json() -> None:
    ended = decode_state(_state(KERNEL_ERROR, "RuntimeError: CUDA error: x", True)).last_exit
    view = RunsView("demo", "gpu1", (RunInfo(RUN, "/l", 10, 1.0, None, 7, ended),), None, 2.0)
    text = show.runs_table(view)
    assert "kernel-error (SIGKILL)" in text
    assert "RESTART" in text.splitlines()[0]
    assert "may help: a GPU kernel failed while serving" in text
    (run,) = show.runs_json(view)["runs"]
    assert run["exit"]["restart_helps"] is True
    assert run["exit"]["restart_why"].startswith("a GPU kernel failed while serving")


def _marker(event: RunEnded) -> str:
    return "".join(text.text for text in show.run_ended(event))


def test_logs_follows_end_of_run_line_says_the_restart_verdict_and_why() -> None:
    fatal = decode_state(ASSERTED)
    ended = fatal.last_exit
    last = _marker(RunEnded(RUN, ended, None, fatal.state, fatal.message, ExitCode.CONFIG_ERROR))
    why = restart_for(CONFIG_ERROR).why
    assert last == (
        f"-- run {RUN} ended: config-error (SIGKILL); restart will not help: {why}; "
        "FATAL: config-error: not restarting; no new run --\n"
    )
    served = decode_state(_state(KERNEL_ERROR, "RuntimeError: CUDA error", True)).last_exit
    between = _marker(RunEnded(RUN, served, "0003-20261201T005400Z"))
    assert "; restart may help: a GPU kernel failed while serving" in between
    assert between.endswith("; following run 0003-20261201T005400Z --\n")


def test_a_run_stopped_on_request_ends_without_a_restart_verdict() -> None:
    stopped = decode_state(_state(STOPPED, "stopped on request", None)).last_exit
    line = _marker(RunEnded(RUN, stopped, None, EXITED, "", ExitCode.OK))
    assert "restart" not in line
    assert line.startswith(f"-- run {RUN} ended: stopped; EXITED")  # a clean stop: no signal shown


def test_ups_failure_says_the_restart_verdict_and_why() -> None:
    state = decode_state(ASSERTED)
    outcome = failure_outcome(state, CONFIG_ERROR, "AssertionError: 16 ...", ())
    assert outcome.exit_code == ExitCode.CONFIG_ERROR
    assert outcome.hint is not None
    assert "not restarted" in outcome.hint
    assert restart_for(CONFIG_ERROR).why in outcome.hint
    serving = decode_state(_state(KERNEL_ERROR, "RuntimeError: CUDA error", True, "BACKOFF"))
    restarted = failure_outcome(serving, KERNEL_ERROR, "RuntimeError: CUDA error", ())
    assert restarted.hint is not None
    assert "the agent restarts it" in restarted.hint
    assert "may not repeat" in restarted.hint


def test_a_kernel_error_has_its_own_exit_code() -> None:
    assert exit_code_of(KERNEL_ERROR) == ExitCode.KERNEL_ERROR
    assert int(ExitCode.KERNEL_ERROR) == 31  # 20-29 were taken; docs/exit-codes.md
    assert (
        len(
            {
                exit_code_of(cls)
                for cls in (
                    CONFIG_ERROR,
                    CUDA_OOM,
                    KILLED,
                    PORT_IN_USE,
                    IMPORT_ERROR,
                    MODEL_NOT_FOUND,
                    NCCL,
                    KERNEL_ERROR,
                    CRASHED,
                )
            }
        )
        == 9
    )
