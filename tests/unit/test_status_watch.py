"""``orch status --watch``'s loop (cli/status_watch.py) on a fake clock: redrawn in place on a
terminal, one refresh after another elsewhere, JSON Lines with --json, Ctrl-C ends it with 0."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from orchestrator.cli.main import main
from orchestrator.cli.output import Output
from orchestrator.cli.status_watch import HOME_AND_CLEAR, watch
from orchestrator.errors import ExitCode
from orchestrator.render import Redactor

pytestmark = pytest.mark.unit


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _run(out: io.StringIO, *, json_lines: bool = False) -> tuple[int, list[float]]:
    looks = iter(["table 1", "table 2", "table 3"])
    now = [100.0]
    slept: list[float] = []

    def look() -> str:
        now[0] += 0.25  # each look takes a quarter of a second
        return next(looks)

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 2:
            raise KeyboardInterrupt  # Ctrl-C during the second wait
        now[0] += seconds

    output = Output(out, io.StringIO(), Redactor())
    code = watch(
        look,
        output,
        2.0,
        json_lines=json_lines,
        clock=lambda: now[0],
        sleep=sleep,
        wall=lambda: 0.0,
    )
    return code, slept


def test_on_a_terminal_each_refresh_redraws_from_the_top() -> None:
    out = Terminal()
    code, slept = _run(out)
    assert code == ExitCode.OK
    assert slept == [1.75, 1.75]  # the interval runs from one refresh's start to the next
    text = out.getvalue()
    assert text.count(HOME_AND_CLEAR) == 2
    first, second = text.split(HOME_AND_CLEAR)[1:]
    assert first.startswith("Every 2s: orch status --load")
    assert first.endswith("table 1\n")
    assert second.rstrip("\n").endswith("table 2")


def test_off_a_terminal_refreshes_follow_each_other_without_escapes() -> None:
    out = io.StringIO()
    code, _ = _run(out)
    assert code == ExitCode.OK
    text = out.getvalue()
    assert "\x1b" not in text
    assert text.count("Every 2s: orch status --load") == 2
    assert text.index("table 1") < text.index("table 2")


def test_json_lines_one_document_a_refresh_even_on_a_terminal() -> None:
    out = Terminal()
    _run(out, json_lines=True)
    assert out.getvalue() == "table 1\ntable 2\n"


def test_watch_needs_a_positive_interval(tmp_path: Path) -> None:
    (tmp_path / "hosts.yaml").write_text("hosts: {}\n")
    err = io.StringIO()
    code = main(["--profiles", str(tmp_path), "status", "--watch", "0"], out=io.StringIO(), err=err)
    assert code == ExitCode.USAGE
    assert "SECONDS must be more than 0" in err.getvalue()
