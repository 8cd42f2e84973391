"""SGLang's arguments as its argparse would read them, with the target version's table.

SGLang's server parses its command line with Python's argparse (``allow_abbrev`` on), so a
launch script's flags are read by the same rules: exact flags and aliases, ``--flag=value``,
unique prefixes (``--tp`` -> ``--tp-size``) and ambiguous ones, values that look like options,
``nargs``, switches, repeated flags (the last wins). Every occurrence keeps its position, and
what argparse (or SGLang) would refuse is an ``ArgProblem``: unknown, removed or ambiguous
flags, values outside the choices, JSON the shell's quoting broke, a flag missing its value.
``first_version_accepting`` picks the table a script's flags were written for.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.importing.shell_words import Position, Word, literal
from orchestrator.sglang import argtable, pitfalls
from orchestrator.sglang.argtable import ArgOption, ArgTable, format_version, natural_flag


@dataclass(frozen=True)
class Occurrence:
    """One option as written, with the values argparse gave it."""

    option: ArgOption
    written: str  # the flag as written (``--tp``)
    values: tuple[Word, ...]
    position: Position
    explicit: bool  # --flag=value
    abbreviated: bool = False  # a unique prefix of the option's flag (argparse allow_abbrev)


@dataclass(frozen=True)
class ArgProblem:
    code: str  # unknown-flag, ambiguous-abbreviation, missing-value, bad-choice, bad-value,
    # invalid-json, duplicate-flag, unexpected-value, unresolved-arguments, replaced-flag
    message: str
    position: Position
    fix: str | None = None
    flag: str | None = None
    unresolved: tuple[str, ...] = ()  # what hides the arguments (unresolved-arguments)
    fix_value: object = None  # replaced-flag: the value of the field the switch became


@dataclass(frozen=True)
class ParsedArguments:
    occurrences: tuple[Occurrence, ...]
    problems: tuple[ArgProblem, ...]
    table: ArgTable

    def last(self) -> dict[str, Occurrence]:
        """dest -> the occurrence argparse keeps (the last; ``append`` options: every one)."""
        out: dict[str, Occurrence] = {}
        for occurrence in self.occurrences:
            out[occurrence.option.dest] = occurrence
        return out

    def appended(self, dest: str) -> tuple[Occurrence, ...]:
        return tuple(o for o in self.occurrences if o.option.dest == dest)


_SECRET_DEST_RE = re.compile(r"key|token|secret|password|credential", re.I)
_NEGATIVE_NUMBER_RE = re.compile(r"^-\d+$|^-\d*\.\d+$")
_JSON_TYPES = ("callable:loads", "callable:json_list_type")


def _looks_like_option(text: str, longs: Sequence[str]) -> bool:
    """argparse's ``_parse_optional``: does this argument start an option?"""
    if not text or text[0] != "-" or text == "-":
        return False
    if _NEGATIVE_NUMBER_RE.match(text):
        return False
    return not (" " in text and not any(text.split("=", 1)[0] == flag for flag in longs))


def match_flag(table: ArgTable, written: str) -> tuple[list[ArgOption], bool]:
    """The options ``written`` names (one, or several for an ambiguous prefix), and whether
    it was an abbreviation."""
    if written in table.by_flag:
        return [table.by_flag[written]], False
    if not written.startswith("--"):
        return [], False
    candidates = sorted({f for f in table.by_flag if f.startswith(written)})
    options: list[ArgOption] = []
    for flag in candidates:
        option = table.by_flag[flag]
        if option not in options:
            options.append(option)
    # argparse reports ambiguity per option string, even when two strings are one option
    if len(candidates) > 1 and len(options) == 1:
        return [options[0]] * len(candidates), True
    return options, True


def parse_arguments(
    table: ArgTable, words: Sequence[Word], *, suggest: bool = True
) -> ParsedArguments:
    """``words`` as SGLang's argparse reads them with ``table``. ``suggest=False`` leaves the
    close match out of an unknown flag's fix: finding it costs most of a reading, and a caller
    that only scores releases by their problems (to choose one) never shows the fix."""
    longs = tuple(table.by_flag)
    occurrences: list[Occurrence] = []
    problems: list[ArgProblem] = []
    index = 0
    while index < len(words):
        word = words[index]
        head = word.parts[0] if word.parts else ""
        text = word.text
        if text is None:
            if isinstance(head, str) and head.startswith("-"):
                text = word.shown()  # --port=$PORT: the option is known, its value is not
            else:
                problems.append(
                    ArgProblem(
                        "unresolved-arguments",
                        f"{word.shown()} is not known here and may hold any arguments",
                        word.position,
                        "give its value with --set NAME=VALUE",
                        unresolved=tuple(part.name for part in word.unresolved),
                    )
                )
                index += 1
                continue
        if text == "--":
            problems.append(
                ArgProblem(
                    "unexpected-value",
                    "'--' ends the options: SGLang takes no positional arguments",
                    word.position,
                )
            )
            break
        if not _looks_like_option(text, longs):
            problems.append(
                ArgProblem(
                    "unexpected-value",
                    f"{text!r} is not an option and follows no option that takes it",
                    word.position,
                    "a value missing its flag, or a flag that takes no value before it",
                )
            )
            index += 1
            continue
        written, has_equals, _ = text.partition("=")
        options, abbreviated = match_flag(table, written)
        if not options and has_equals and text in table.by_flag:
            options, abbreviated, written = [table.by_flag[text]], False, text
        renamed = (
            argtable.spell(table, written.lstrip("-").replace("-", "_"))
            if abbreviated or not options
            else None
        )
        if renamed is not None and renamed.rename is not None and written.startswith("--"):
            # a removed name (that may also prefix newer flags): its intent is known
            problem = _unknown(table, written, word.position, suggest)
            if len(options) > 1:
                problem = dataclasses.replace(
                    problem,
                    message=f"{problem.message} (argparse reads it as an ambiguous abbreviation)",
                )
            problems.append(problem)
            options, abbreviated = [renamed.option], False
        implied: Word | None = None
        if (not options or abbreviated) and not has_equals:
            replaced = _replaced(table, written, word.position)
            if replaced is not None:
                problem, option_found = replaced
                problems.append(problem)
                if option_found is None:
                    index += 1
                    continue
                # the intent is known: read it as the value it became
                options, abbreviated = [option_found], False
                implied = literal(str(problem.fix_value), word.position)
        if not options:
            problem = _unknown(table, written, word.position, suggest)
            problems.append(problem)
            if problem.code != "removed-flag" or renamed is None:
                index += 1
                while index < len(words) and not _looks_like_option(
                    words[index].text or words[index].shown(), longs
                ):
                    index += 1  # its values
                continue
            options = [renamed.option]  # the intent is known: read it as the new name
        if len(options) > 1:
            flags = sorted({f for f in table.by_flag if f.startswith(written)})
            problems.append(
                ArgProblem(
                    "ambiguous-abbreviation",
                    f"{written} is ambiguous for SGLang {table.version}:"
                    f" it could be {', '.join(flags[:6])}" + (" ..." if len(flags) > 6 else ""),
                    word.position,
                    "write the whole flag",
                    written,
                )
            )
            index += 1
            continue
        option = options[0]
        explicit: Word | None = word.without_first(len(written) + 1) if has_equals else implied
        values: list[Word] = []
        index += 1
        arity = _arity(option)
        if explicit is not None:
            if arity == (0, 0) and implied is None:
                problems.append(
                    ArgProblem(
                        "unexpected-value",
                        f"{written} takes no value, got {explicit.shown()!r}",
                        word.position,
                        f"write {written} alone",
                        option.flags[0],
                    )
                )
            values = [explicit]
        else:
            low, high = arity
            while index < len(words) and (high is None or len(values) < high):
                following = words[index].text
                shown = following if following is not None else words[index].shown()
                if following is not None and _looks_like_option(shown, longs):
                    break
                if following is None and shown.startswith("-"):
                    break
                values.append(words[index])
                index += 1
            if len(values) < low:
                problems.append(
                    ArgProblem(
                        "missing-value",
                        f"{written} expects a value and got none",
                        word.position,
                        "argparse would stop here: give the value",
                        option.flags[0],
                    )
                )
                continue
        occurrence = Occurrence(
            option, written, tuple(values), word.position, explicit is not None, abbreviated
        )
        problems.extend(_check_values(table, occurrence))
        earlier = [o for o in occurrences if o.option.dest == option.dest]
        if earlier and option.action not in ("append", "count"):
            before = earlier[-1]
            same = [v.shown() for v in before.values] == [v.shown() for v in values]
            if _SECRET_DEST_RE.search(option.dest):  # a credential's values are never shown
                said = (
                    f"argparse keeps the last (line {occurrence.position.line}), not the one "
                    f"at line {before.position.line}; their values are not shown"
                )
            elif same:
                said = f"{_shown_values(occurrence)} here and at line {before.position.line}"
            else:
                said = (
                    f"argparse keeps the last, so SGLang gets {_shown_values(occurrence)}, "
                    f"not {_shown_values(before)} (line {before.position.line})"
                )
            problems.append(
                ArgProblem(
                    "duplicate-flag",
                    f"{option.flag} is given twice: {said}",
                    word.position,
                    "remove one of them",
                    option.flags[0],
                )
            )
        occurrences.append(occurrence)
    return ParsedArguments(tuple(occurrences), tuple(problems), table)


def _arity(option: ArgOption) -> tuple[int, int | None]:
    if option.action in ("store_true", "store_false", "store_const", "count", "help", "version"):
        return 0, 0
    if option.action == "custom:BooleanOptionalAction":
        return 0, 0
    if option.nargs == 0:
        return 0, 0
    if option.nargs in (None, "store"):
        return 1, 1
    if option.nargs == "?":
        return 0, 1
    if option.nargs == "*":
        return 0, None
    if option.nargs == "+":
        return 1, None
    if isinstance(option.nargs, int):
        return option.nargs, option.nargs
    return 1, 1


def _shown_values(occurrence: Occurrence) -> str:
    if not occurrence.values:
        return occurrence.written
    return occurrence.written + " " + " ".join(v.shown() for v in occurrence.values)


def _unknown(table: ArgTable, written: str, position: Position, suggest: bool) -> ArgProblem:
    name = written.lstrip("-").replace("-", "_")
    spelling = argtable.spell(table, name)
    if spelling is not None and spelling.rename is not None:
        rename = spelling.rename
        return ArgProblem(
            "removed-flag",
            f"{written} was {rename.describe()}: SGLang {table.version} rejects it",
            position,
            f"write {spelling.flag} (in a profile: args.{rename.new})",
            written,
        )
    import difflib

    close = (
        difflib.get_close_matches(written, list(table.by_flag), n=1, cutoff=0.75) if suggest else []
    )
    return ArgProblem(
        "unknown-flag",
        f"{written} is not an option of SGLang {table.version}",
        position,
        f"did you mean {close[0]}?"
        if close
        else "check `python -m sglang.launch_server --help` for that version",
        written,
    )


def _replaced(
    table: ArgTable, written: str, position: Position
) -> tuple[ArgProblem, ArgOption | None] | None:
    """A switch this release no longer has that became one value of another field
    (``--disable-piecewise-cuda-graph`` -> ``--cuda-graph-backend-prefill disabled``): the
    problem, and the field's option when the release takes that value (else None: unknown)."""
    if not written.startswith("--"):
        return None
    name = written[2:].replace("-", "_")
    replacement = pitfalls.replaced_in(table, name)
    if replacement is None or written in table.by_flag:
        return None  # 0.5.14-0.5.19 still read it, as a deprecated shorthand
    option = table.option_for_name(replacement.new)
    became = (
        f"{written} became {natural_flag(replacement.new)} {replacement.value} in SGLang "
        f"{format_version(pitfalls.REPLACED_IN)}, removed in "
        f"{format_version(pitfalls.REPLACEMENT_REMOVED_IN)}"
    )
    if option is None or not pitfalls.replacement_accepted(table, replacement):
        choices = ", ".join(str(c) for c in (option.choices or ())) if option else ""
        return ArgProblem(
            "unknown-flag",
            f"{became}, and SGLang {table.version} has no {replacement.value}"
            + (f" (choices: {choices})" if choices else ""),
            position,
            f"remove it, or choose one of {natural_flag(replacement.new)}'s values",
            written,
        ), None
    return ArgProblem(
        "replaced-flag",
        f"{became}: SGLang {table.version} rejects it",
        position,
        f"write {option.flag} {replacement.value} (in a profile: args.{replacement.write()})",
        written,
        fix_value=replacement.value,
    ), option


def _check_values(table: ArgTable, occurrence: Occurrence) -> list[ArgProblem]:
    option = occurrence.option
    problems: list[ArgProblem] = []
    for value in occurrence.values:
        text = value.text
        if text is None:
            continue
        if option.type == "int" and not re.fullmatch(r"\s*[-+]?\d+\s*", text):
            problems.append(
                ArgProblem(
                    "bad-value",
                    f"{occurrence.written} expects an integer, got {text!r}",
                    value.position,
                    flag=option.flags[0],
                )
            )
        elif option.type == "float":
            try:
                float(text)
            except ValueError:
                problems.append(
                    ArgProblem(
                        "bad-value",
                        f"{occurrence.written} expects a number, got {text!r}",
                        value.position,
                        flag=option.flags[0],
                    )
                )
        if option.choices is not None and text not in {str(c) for c in option.choices}:
            choices = ", ".join(str(c) for c in option.choices)
            problems.append(
                ArgProblem(
                    "bad-choice",
                    f"{occurrence.written} {text!r} is not one of SGLang {table.version}'s"
                    f" choices: {choices}",
                    value.position,
                    None,
                    option.flags[0],
                )
            )
        if is_json_option(option):
            try:
                json.loads(text)
            except ValueError as exc:
                problems.append(
                    ArgProblem(
                        "invalid-json",
                        f"{occurrence.written} receives {text!r}, which is not valid JSON after"
                        f" the shell's quoting ({getattr(exc, 'msg', exc)})",
                        value.position,
                        "quote the whole JSON in single quotes: '--flag' '{\"key\": 1}'",
                        option.flags[0],
                    )
                )
    return problems


def is_json_option(option: ArgOption) -> bool:
    if option.type in _JSON_TYPES:
        return True
    return "json" in option.dest or (
        isinstance(option.default, str) and option.default.strip() in ("{}", "[]")
    )


def first_version_accepting(
    words: Sequence[Word], versions: Sequence[str]
) -> tuple[str, ParsedArguments]:
    """The newest table under which the arguments have no unknown or removed flag (else the
    one with the fewest problems); of those, one that has each flag as written rather than
    as the abbreviation of another (``--nsa-decode`` is 0.5.3's flag, 0.5.4+ abbreviate
    ``--nsa-decode-backend`` with it)."""
    best: tuple[tuple[int, int], str] | None = None
    for version in reversed(versions):
        parsed = parse_arguments(argtable.load_table(version), words, suggest=False)
        # a renamed flag is not a reason to go back: a profile names the field, and orch
        # spells it for each version
        # a replaced switch is: its value is the release's own (0.5.14-0.5.19 still read it)
        bad = sum(
            p.code in ("unknown-flag", "ambiguous-abbreviation", "replaced-flag")
            for p in parsed.problems
        )
        score = (bad, sum(o.abbreviated for o in parsed.occurrences))
        if score == (0, 0):
            return version, parsed  # (no unknown flag: nothing to suggest)
        if best is None or score < best[0]:
            best = (score, version)
    if best is None:  # no versions: the caller passes at least one
        raise ValueError("no SGLang version to try")
    return best[1], parse_arguments(argtable.load_table(best[1]), words)
