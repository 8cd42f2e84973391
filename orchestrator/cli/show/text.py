"""The pieces every shape is made of: a ``Text`` (a piece of output and the stream it goes
to), a line, an error with its hint, a finding, a grid of columns."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.model import Finding


@dataclass(frozen=True)
class Text:
    text: str
    err: bool = False  # stderr
    flush: bool = False
    # orch's own terminal control (a colour, a carriage return), written as is; any other
    # text has its control characters escaped by the CLI's stream. Built from constants only.
    control: bool = False


def line(text: str = "") -> Text:
    return Text(text + "\n")


def error(message: str, hint: str | None = None) -> list[Text]:
    texts = [Text(f"orch: error: {message}\n", err=True)]
    if hint:
        texts.append(Text(f"orch: hint: {hint}\n", err=True))
    return texts


def finding(found: Finding) -> list[Text]:
    texts = [Text(f"orch: {found.severity}: {found.message}\n", err=True)]
    if found.hint:
        texts.append(Text(f"orch: hint: {found.hint}\n", err=True))
    return texts


def grid(table: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in table) for i in range(len(table[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(r, widths, strict=True)).rstrip()
        for r in table
    )
