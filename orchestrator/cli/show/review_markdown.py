"""``orch diff --format markdown``: the review as pull-request comment bodies, each within a limit.

A forge refuses a comment over its size (GitHub 65,536 characters, Bitbucket 32,768 bytes), so a
long review is several bodies, each self-contained markdown: it starts with the line ``MARKER``
(a CI workflow finds orch's earlier comments by it and updates them), says which part it is and
which range, and closes every fence and table it opens. The limit is in bytes of UTF-8, the safe
side of both counts.

The splitting rule:

- the first body holds the headline and the summary table (deployment, action, forced by, memory);
  the deployments' sections follow in the report's order, as many as fit;
- a section that does not fit the rest of a body goes whole to the next one; only a section larger
  than a body on its own is cut, between lines (rows, list items, lines of the rendered diff), each
  piece under the heading "(continued)" with its label, table header and code fence repeated;
- a blocked reason or an error line is one piece of text never cut between bodies: a section's
  rendered and effective parts move to the next piece, around it, instead. Only a single line
  longer than a whole body (which the forge could not take at all) is cut, between characters,
  with a note where it goes on: nothing is dropped;
- a summary table longer than a body is cut the same way, its header repeated.

Every value comes masked from ``effective/review`` (secrets by reference, by name); a change of a
secret field shows no value here even if one reached it. Nothing prints.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from orchestrator.cli.output import terminal_safe
from orchestrator.cli.show import review as show_review
from orchestrator.effective import review, verify

MARKER = "<!-- orch diff -->"
SEPARATOR = "<!-- orch diff: next comment -->"
# an action a reviewer must see at a glance: the server stops, or cannot start
DISRUPTIVE = frozenset({review.BLOCKED, review.REPLACE, review.RESTART})
CUT_NOTE = "*(cut at the comment limit: this line goes on in the next comment)*"
GOES_ON = "... "  # before the rest of a cut line (no fence or list marker can start with it)
# Bounds on what one line of a heading or a table row can hold, so that a row, a heading and a
# body's header always fit a body of the CLI's smallest limit together (the section shows each
# value whole where it matters: the rendered diff, the reasons).
NAME_BYTES = 96
VALUE_BYTES = 120
HOW_BYTES = 120
SENTENCE_BYTES = 240
FORCED_SHOWN = 4


def document(report: review.Review, limit: int) -> str:
    """Every body, separated by ``SEPARATOR`` lines (none ends with a newline)."""
    return f"\n{SEPARATOR}\n".join(bodies(report, limit))


def bodies(report: review.Review, limit: int) -> list[str]:
    """The review as comment bodies, each at most ``limit`` bytes of UTF-8."""
    all_sections = sections(report)
    reserved = 1
    while True:
        # a body's header says "part i of n": reserve the room of the widest one, then check
        # that the number of bodies did not outgrow it
        room = limit - _size(_header(report, reserved, reserved))
        packed = _pack(all_sections, room)
        count = len(packed)
        if count == 1 or (reserved > 1 and len(str(count)) <= len(str(reserved))):
            break
        reserved = count
    return [
        "\n\n".join([_header(report, number, count), *parts])
        for number, parts in enumerate(packed, start=1)
    ]


# -- markdown text -------------------------------------------------------------------------------

# what markdown (and GitHub's extensions: mentions, references, math) reads inside a line
_INLINE = re.compile(r"([\\`*_\[\]<>|&~@#$])")
# what it reads at the start of one: a list item, a heading's underline
_LEADING = re.compile(r"^(\s*)([-+=]|\d+[.)])")
_BACKTICKS = re.compile(r"`+")
_CLOSING_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})[ \t]*$")


def _size(text: str) -> int:
    return len(text.encode("utf-8"))


def _lines(text: str) -> list[str]:
    """``text``'s lines as markdown sees them (a carriage return ends one too), each safe for a
    terminal (the output stream would otherwise widen a control character after the split)."""
    return terminal_safe(text.replace("\r\n", "\n").replace("\r", "\n")).split("\n")


def _one_line(text: str) -> str:
    return "\\n".join(_lines(text))


def _clip(text: str, limit: int) -> str:
    """At most ``limit`` bytes, cut between characters, marked with an ellipsis."""
    if _size(text) <= limit:
        return text
    cut = text.encode("utf-8")[: limit - 3].decode("utf-8", errors="ignore")
    return cut + "..."


def plain(text: str, limit: int | None = None) -> str:
    """``text`` on one line as literal markdown: no emphasis, link, HTML tag, table cell, list
    item, math, @mention or #reference comes out of a value (GitHub reads all of these)."""
    line = _one_line(text)
    escaped = _INLINE.sub(r"\\\1", _clip(line, limit) if limit else line)
    return _LEADING.sub(lambda found: found[1] + found[2][:-1] + "\\" + found[2][-1], escaped)


def code(text: str, limit: int = VALUE_BYTES, *, cell: bool = True) -> str:
    """``text`` as an inline code span, delimited by more backticks than it holds; a pipe
    escaped in a table's cell (GFM splits cells before it reads code spans)."""
    line = _clip(_one_line(text), limit)
    if line == "":
        return "*(empty)*"
    ticks = "`" * (max((len(run) for run in _BACKTICKS.findall(line)), default=0) + 1)
    if line.startswith("`") or line.endswith("`"):
        line = f" {line} "
    if cell:
        line = line.replace("|", "\\|")
    return f"{ticks}{line}{ticks}"


def fence(lines: Sequence[str]) -> str:
    """A backtick fence longer than any line of ``lines`` that could close it."""
    longest = 0
    for line in lines:
        found = _CLOSING_FENCE.match(line)
        if found and found[1].startswith("`"):
            longest = max(longest, len(found[1]))
    return "`" * max(3, longest + 1)


def _paragraph(text: str) -> str:
    """Text over several lines kept as its lines (markdown hard breaks), each escaped."""
    return "\\\n  ".join(plain(line) for line in _lines(text))


# -- blocks and sections -------------------------------------------------------------------------


@dataclass(frozen=True)
class Block:
    """One part of a section: its units (lines, table rows, a reason whole) are what a cut may
    fall between; ``lead`` (a label, a table's header) and the code fence repeat in each piece."""

    lead: tuple[str, ...]
    units: tuple[str, ...]
    fence: str = ""  # a fenced code block: its fence
    info: str = ""  # the fence's info string (the language)

    def fixed(self, cut: bool) -> list[str]:
        lines = list(self.lead)
        if self.fence:
            lines += [self.fence + self.info, self.fence]
        return lines + ([CUT_NOTE] if cut else [])

    def base(self, cut: bool) -> int:
        """The bytes of a piece of this block without its units (each adds its size + 1)."""
        return _size("\n".join(self.fixed(cut)))

    def text(self, units: Sequence[str], cut: bool = False) -> str:
        lines = list(self.lead)
        if self.fence:
            lines += [self.fence + self.info, *units, self.fence]
        else:
            lines += units
        return "\n".join(lines + ([CUT_NOTE] if cut else []))


@dataclass(frozen=True)
class Section:
    heading: str
    continued: str  # the heading of each piece after the first
    blocks: tuple[Block, ...]

    def text(self) -> str:
        return "\n\n".join([self.heading, *(block.text(block.units) for block in self.blocks)])


def sections(report: review.Review) -> list[Section]:
    """The summary, then one section per deployment in the report's order."""
    return [summary(report), *(deployment(change) for change in report.deployments)]


def _table(columns: Sequence[str], rows: Sequence[Sequence[str]], label: str = "") -> Block:
    lead = (label, "") if label else ()
    header = "| " + " | ".join(columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    return Block((*lead, header, rule), tuple("| " + " | ".join(row) + " |" for row in rows))


def _list(label: str, items: Sequence[str]) -> Block:
    return Block((label, ""), tuple(f"- {item}" for item in items))


def summary(report: review.Review) -> Section:
    blocks = []
    if report.deployments:
        rows = [
            [code(change.name, NAME_BYTES), _action_cell(change), _forced(change), _memory(change)]
            for change in report.deployments
        ]
        blocks.append(_table(("Deployment", "Action", "Forced by", "Memory"), rows))
    if report.notes:
        blocks.append(_list("**Notes**:", [_paragraph(note) for note in report.notes]))
    return Section(
        f"### Summary\n\n{plain(show_review.headline(report))}",
        "### Summary (continued)",
        tuple(blocks),
    )


def _action_cell(change: review.DeploymentChange) -> str:
    return f"**{change.action}**" if change.action in DISRUPTIVE else change.action


def _capped(fields: Sequence[str]) -> tuple[str, ...]:
    if len(fields) <= FORCED_SHOWN:
        return tuple(fields)
    return (*fields[:FORCED_SHOWN], f"{len(fields) - FORCED_SHOWN} more")


def _forced(change: review.DeploymentChange) -> str:
    if change.action == review.BLOCKED:
        return "see below"
    if not change.forced_by:
        return "-"
    shown = [code(name, NAME_BYTES) for name in change.forced_by[:FORCED_SHOWN]]
    more = len(change.forced_by) - FORCED_SHOWN
    return ", ".join(shown) + (f" and {more} more" if more > 0 else "")


def _memory(change: review.DeploymentChange) -> str:
    return plain(show_review.memory_cell(change), VALUE_BYTES)


def deployment(change: review.DeploymentChange) -> Section:
    """A deployment's section: what merging does to it, why it cannot, the launch before and
    after, the effective changes, the memory plans, what runs now, notes."""
    name = code(change.name, NAME_BYTES, cell=False)
    sentence = show_review.action_sentence(
        dataclasses.replace(change, forced_by=_capped(change.forced_by))
    )
    blocks = []
    if change.reasons:
        blocks.append(
            _list(
                "**Blocked**: orch or SGLang refuses the new side:",
                [_paragraph(reason) for reason in change.reasons],
            )
        )
    rendered = [_one_line(line) for line in show_review.rendered_lines(change)]
    if rendered:
        blocks.append(
            Block(("**Rendered** (before -> after):",), tuple(rendered), fence(rendered), "diff")
        )
    effective = [item for item in change.changes if item.basis != review.PLACEMENT]
    if effective:
        rows = [_change_row(item) for item in effective]
        blocks.append(_table(("Field", "Before", "After", "How"), rows, "**Effective changes**:"))
    if change.memory is not None:
        lines = show_review.memory_lines(change.memory)
        blocks.append(_list("**Memory plan**:", [plain(line.strip()) for line in lines]))
    if change.running is not None:
        running = show_review.running_line(change.running)
        blocks.append(_list("**Runs now**:", [_paragraph(running)]))
    if change.notes:
        blocks.append(_list("**Notes**:", [_paragraph(note) for note in change.notes]))
    return Section(
        f"### {name}: {plain(sentence, SENTENCE_BYTES)}", f"### {name} (continued)", tuple(blocks)
    )


def _change_row(item: review.FieldChange) -> list[str]:
    field = code(item.field, NAME_BYTES)
    if item.renamed_from:
        field = f"{code(item.renamed_from, NAME_BYTES)} -> {field} (renamed)"
    how = item.basis + (f": {item.how}" if item.how else "")
    return [field, _value(item, item.before), _value(item, item.after), plain(how, HOW_BYTES)]


def _value(item: review.FieldChange, shown: object) -> str:
    if shown is verify.ABSENT:
        return "*(unset)*"
    if item.secret:  # masked upstream; never a value here, whatever reached this far
        return code(verify.SECRET_SHOWN)
    return code(show_review.value(shown, width=10 * VALUE_BYTES))


# -- packing -------------------------------------------------------------------------------------


def _header(report: review.Review, number: int, count: int) -> str:
    part = f", part {number} of {count}" if count > 1 else ""
    base = f"{code(report.base, NAME_BYTES, cell=False)} ({code(report.base_commit[:12])})"
    head = plain(report.head, NAME_BYTES)
    if report.head_commit is not None:
        head = f"{code(report.head, NAME_BYTES, cell=False)} ({code(report.head_commit[:12])})"
    return f"{MARKER}\n## orch diff{part}\n\n{base} -> {head}"


def _pack(all_sections: Sequence[Section], room: int) -> list[list[str]]:
    """Sections into bodies of ``room`` bytes (after the header; each part costs 2 more, the
    blank line before it): whole where a section fits, cut only where it cannot fit a body."""
    packed: list[list[str]] = [[]]
    used = 0
    for section in all_sections:
        whole = section.text()
        cost = 2 + _size(whole)
        if used + cost <= room:
            packed[-1].append(whole)
            used += cost
            continue
        if packed[-1]:
            packed.append([])
        pieces = [whole] if cost <= room else _pieces(section, room - 2)
        for number, piece in enumerate(pieces):
            if number:
                packed.append([])
            packed[-1].append(piece)
        used = 2 + _size(pieces[-1])
    return packed


def _pieces(section: Section, room: int) -> list[str]:
    """A section too large for one body, cut between its units into pieces of ``room`` bytes."""
    top = max(_size(section.heading), _size(section.continued))
    if top > room:
        raise ValueError(f"a comment limit too small for this review ({room} bytes left)")
    pieces: list[str] = []
    parts = [section.heading]
    used = _size(section.heading)
    for block in section.blocks:
        taken: list[str] = []
        largest = room - top - 2 - block.base(cut=True) - 1
        for unit, ends in _chunks(block.units, largest):
            cost = _size(unit) + 1 + (0 if taken else 2 + block.base(cut=False))
            note = 0 if ends else _size(CUT_NOTE) + 1
            if used + cost + note > room:
                if taken:
                    parts.append(block.text(taken))
                pieces.append("\n\n".join(parts))
                parts, taken = [section.continued], []
                used = _size(section.continued)
                cost = _size(unit) + 1 + 2 + block.base(cut=False)
            taken.append(unit)
            used += cost
            if not ends:  # the unit goes on in the next piece: this one ends here
                parts.append(block.text(taken, cut=True))
                pieces.append("\n\n".join(parts))
                parts, taken = [section.continued], []
                used = _size(section.continued)
        if taken:
            parts.append(block.text(taken))
    pieces.append("\n\n".join(parts))
    return pieces


def _chunks(units: Sequence[str], largest: int) -> Iterator[tuple[str, bool]]:
    """Each unit whole when it fits ``largest`` bytes; a larger one (a single line longer than a
    body) in pieces, each after the first marked as going on. With each piece: whether the unit
    ends with it."""
    if largest < len(GOES_ON) + 4:
        raise ValueError(f"a comment limit too small for this review ({largest} bytes left)")
    for unit in units:
        if _size(unit) <= largest:
            yield unit, True
            continue
        pieces = list(_split(unit, largest - len(GOES_ON)))
        for number, piece in enumerate(pieces):
            yield (GOES_ON + piece if number else piece), number == len(pieces) - 1


def _split(text: str, largest: int) -> Iterator[str]:
    """Pieces of at most ``largest`` bytes: between lines where one fits, else after a space,
    else between characters, never after a backslash that would escape the next piece's
    first character."""
    rest = text
    while _size(rest) > largest:
        head = rest.encode("utf-8")[:largest].decode("utf-8", errors="ignore")
        newline, space = head.rfind("\n"), head.rfind(" ")
        if newline > len(head) // 2:
            yield head[:newline]
            rest = rest[newline + 1 :]
            continue
        piece = head[: space + 1] if space > len(head) // 2 else head
        escaping = len(piece) - len(piece.rstrip("\\"))
        if escaping % 2 and len(piece) > 1:
            piece = piece[:-1]
        yield piece
        rest = rest[len(piece) :]
    yield rest
