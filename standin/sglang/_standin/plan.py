"""The stand-in's answer to orch's planning probe (NOT SGLang's resolution, an imitation of it).

orch's ``sglang_probe.py`` runs SGLang's own parsing and resolution. On a host whose ``sglang`` is
this stand-in there is no ``sglang.srt`` to run, so the probe asks here instead: the same parser
and the same few resolution rules the stand-in's server applies, reported in the probe's format
with ``"standin": true``. Provenance names the stand-in's own rule (``eagle_family``,
``mamba`` ...), not an SGLang function.
"""

from __future__ import annotations

import contextlib
import io
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from sglang._standin import argtable
from sglang._standin import knobs as knobs_module
from sglang._standin.model import model_facts, resolvable
from sglang._standin.resolve import ResolutionFailure, _Resolver
from sglang._standin.tracebacks import Traces

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>\S+)')


class _TracingResolver(_Resolver):
    """Records which rule changed which field."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.provenance: dict[str, list[dict[str, Any]]] = {}

    def _record(self, name: str, value: Any) -> None:
        rule = sys._getframe(2).f_code.co_name  # the rule that called set()/fill()
        self.provenance.setdefault(name, []).append(
            {"source": f"standin:{rule}", "value": value}
        )

    def set(self, name: str, value: Any) -> None:
        if name in self.values and self.values[name] != value:
            self._record(name, value)
        super().set(name, value)

    def fill(self, name: str, when: Any, value: Any) -> None:
        if self.has(name) and name not in self.given and self.get(name) == when and when != value:
            self._record(name, value)
        super().fill(name, when, value)


def probe(args: Sequence[str]) -> dict[str, Any]:
    """Parse and resolve ``args`` as the stand-in server would, without starting it."""
    knobs = knobs_module.read_knobs()
    table = argtable.load_table(knobs.version_text)
    result: dict[str, Any] = {"standin": True, "sglang_version": knobs.version_text, "ok": False}
    result["mode"] = "orch stand-in (NOT SGLang)"
    result["defaults"] = table.field_defaults()
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            parsed = argtable.parse(table, list(args))
    except SystemExit as exc:
        lines = [line for line in stderr.getvalue().splitlines() if ": error: " in line]
        result["error"] = {
            "stage": "parse", "type": "SystemExit", "exit_code": exc.code,
            "message": lines[-1] if lines else "argparse error",
        }  # fmt: skip
        return result
    result["raw"] = dict(parsed.values)
    model_path = str(parsed.values["model_path"])
    started = time.monotonic()
    traces = Traces("launch_server", knobs.resolves_in_run_server)
    resolver: _TracingResolver | None = None
    try:
        if not resolvable(model_path):
            raise ResolutionFailure("model_not_found")
        model = model_facts(model_path)
        resolver = _TracingResolver(knobs, parsed.values, parsed.given, model)
        resolution = resolver.run()
    except ResolutionFailure as failure:
        arch = "Qwen3_5ForConditionalGeneration"
        with contextlib.suppress(OSError):
            arch = model_facts(model_path).architecture
        text = {
            "incident": lambda: traces.incident(arch),
            "extra_buffer_without_radix": traces.extra_buffer_without_radix,
            "no_buffer_overlap": traces.no_buffer_overlap,
        }.get(failure.kind, lambda: traces.model_not_found(model_path))()
        result["error"] = _error_from_traceback(text)
        result["logs"] = _logged(resolver.notes if resolver else failure.notes)
        if resolver is not None:
            result["provenance"] = resolver.provenance  # what was changed before the raise
        return result
    result["resolve_s"] = round(time.monotonic() - started, 3)
    result["ok"] = True
    result["effective"] = resolution.values
    result["logs"] = _logged(resolution.notes)
    result["provenance"] = resolver.provenance
    return result


def _logged(notes: Sequence[str]) -> list[str]:
    """As SGLang's logger writes them (the probe captures SGLang's with the same format)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    return [f"[{stamp}] {note}" for note in notes]


def _error_from_traceback(text: str) -> dict[str, Any]:
    lines = text.rstrip("\n").splitlines()
    kind, _, message = lines[-1].partition(": ")
    raised_in = None
    for line in lines:
        match = _FRAME.match(line)
        if match and "/sglang/" in match["file"]:
            raised_in = {
                "function": match["function"],
                "file": "sglang/" + match["file"].split("/sglang/", 1)[1],
                "line": int(match["line"]),
            }
    return {"stage": "resolve", "type": kind, "message": message, "raised_in": raised_in}
