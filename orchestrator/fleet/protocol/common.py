"""What every command of the protocol shares: the request as orch sends it, typed reading of an
answer (``Reader``), the agent's refusal, a run's end (``exit_info``), and the last JSON line of
a program's output."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from orchestrator.errors import PreflightError, SupervisorError
from orchestrator.model import ExitInfo
from orchestrator.remote.agent.verdict import restart_for


@dataclass(frozen=True)
class Request:
    """One agent command as orch sends it: its arguments after the bootstrap (``status --dir
    D``), its stdin (a spec, an environment: never in an argv), how long orch waits for it."""

    args: tuple[str, ...]
    stdin: bytes | None = None
    timeout: float = 60.0


class Reader:
    """Typed access to one JSON object of an answer; a wrong shape is a SupervisorError naming
    the answer and the key (a newer or older agent, or a broken one)."""

    def __init__(self, document: Any, what: str) -> None:
        if not isinstance(document, dict):
            raise SupervisorError(
                f"{what}: expected a JSON object, got {type(document).__name__}",
                "the host runs an agent this orch cannot read; orch down with the orch that "
                "started it",
            )
        self.document: dict[str, Any] = document
        self.what = what

    def bad(self, key: str, expected: str) -> SupervisorError:
        got = type(self.document.get(key)).__name__
        return SupervisorError(
            f"{self.what}: {key}: expected {expected}, got {got}",
            "the host runs an agent this orch cannot read; orch down with the orch that started it",
        )

    def has(self, key: str) -> bool:
        return self.document.get(key) is not None

    def text(self, key: str, default: str | None = None) -> str:
        value = self.document.get(key, default)
        if not isinstance(value, str):
            raise self.bad(key, "a string")
        return value

    def opt_text(self, key: str) -> str | None:
        value = self.document.get(key)
        if value is None:
            return None
        if not isinstance(value, str):
            raise self.bad(key, "a string or null")
        return value

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.document.get(key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.bad(key, "an integer")
        return value

    def opt_integer(self, key: str) -> int | None:
        return None if self.document.get(key) is None else self.integer(key)

    def opt_number(self, key: str) -> float | None:
        value = self.document.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.bad(key, "a number or null")
        return float(value)

    def number(self, key: str) -> float:
        value = self.opt_number(key)
        if value is None:
            raise self.bad(key, "a number")
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.document.get(key, default)
        if not isinstance(value, bool):
            raise self.bad(key, "true or false")
        return value

    def items(self, key: str) -> list[Any]:
        value = self.document.get(key)
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.bad(key, "a list")
        return value

    def texts(self, key: str) -> tuple[str, ...]:
        return tuple(str(item) for item in self.items(key))

    def mapping(self, key: str) -> dict[str, Any]:
        value = self.document.get(key)
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.bad(key, "an object")
        return value

    def child(self, key: str) -> Reader | None:
        value = self.document.get(key)
        return None if value is None else Reader(value, f"{self.what}.{key}")


def refused(document: Any) -> None:
    """The agent refused to act in an unsafe place (StrictModes: a workdir or deployment
    directory another user owns or may write, a planted symlink): PreflightError."""
    if isinstance(document, dict) and document.get("refused"):
        reason = document.get("reason")
        hint = document.get("hint")
        raise PreflightError(
            f"the agent refused: {reason if isinstance(reason, str) else document['refused']}",
            hint if isinstance(hint, str) else None,
        )


def exit_info(reader: Reader) -> ExitInfo:
    ended = ExitInfo(
        run_id=reader.text("run_id"),
        returncode=reader.integer("returncode"),
        cls=reader.text("class"),
        message=reader.text("message"),
        at=reader.number("at"),
        was_ready=reader.flag("was_ready"),
        signal=reader.opt_text("signal"),
        swept_pids=tuple(int(pid) for pid in reader.items("swept_pids")),
    )
    # Agents before the restart verdict (issue 25) recorded the class alone: its verdict is the
    # class's, as those agents applied it.
    by_class = restart_for(ended.cls, was_ready=ended.was_ready)
    return replace(
        ended,
        restart_helps=reader.flag("restart_helps", by_class.helps),
        restart_why=reader.text("restart_why", by_class.why),
    )


def last_json_line(stdout: bytes, stderr: bytes, returncode: int, what: str) -> Any:
    """The JSON document on the last line of stdout, or a SupervisorError saying why not."""
    lines = stdout.decode("utf-8", "replace").strip().splitlines()
    try:
        return json.loads(lines[-1]) if lines else None
    except ValueError:
        pass
    last = (stderr.decode("utf-8", "replace").strip().splitlines() or ["no output"])[-1]
    raise SupervisorError(
        f"{what} exited with {returncode} without an answer: {last}",
        "is the python the one of the venv that holds sglang?",
    )
