"""The pitfalls ``orch import --check`` names beyond the arguments themselves: the lines bash
never passes (a broken continuation, a CRLF file), placeholders left in, the wrong server
(vLLM's with SGLang's flags, or back), abbreviations read across every release's table, and kills
by a name. Each is a located :class:`ScriptProblem` with the fix in orch's terms.

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.importing.breaks import LostLines, launch_breaks
from orchestrator.importing.credentials import secret_name
from orchestrator.importing.launches import Launch, OtherLaunch
from orchestrator.importing.server_arguments import Occurrence, ParsedArguments, match_flag
from orchestrator.importing.shell_words import Command, Position, Unresolved, Word
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import RENAMES, ArgOption, ArgTable

# flags bash never passes come first: the incident's own class, the loudest
_LOUDEST = frozenset({"broken-continuation", "crlf-line-endings"})
_ERRORS = frozenset(
    {
        "broken-continuation",
        "crlf-line-endings",
        "placeholder",
        "heredoc-expands-locally",
        "rendezvous-mismatch",
        "wrong-entry-module",
        "unknown-flag",
        "removed-flag",
        "replaced-flag",
        "prefix-reads-another-flag",
        "ambiguous-abbreviation",
        "bad-choice",
        "bad-value",
        "invalid-json",
        "missing-value",
        "unexpected-value",
    }
)


@dataclass(frozen=True)
class ScriptProblem:
    file: str
    position: Position
    code: str
    message: str
    fix: str
    span: tuple[Position, int] | None = None  # where the finding's text is, and its length

    @property
    def severity(self) -> str:
        return "error" if self.code in _ERRORS else "warning"

    def sort_key(self) -> tuple[int, str, int, int, str]:
        # flags bash never passes come first: the incident's own class, the loudest
        loud = 0 if self.code in _LOUDEST else 1
        return (loud, self.file, self.position.line, self.position.column, self.code)


_KILLERS = frozenset({"pkill", "killall"})


# -- lines bash never passes ----------------------------------------------------------------------


def broken_lines(
    file: str, text: str, launches: Sequence[Launch], lost: Sequence[LostLines]
) -> list[ScriptProblem]:
    problems = []
    for item in lost:
        ends_a_launch = any(launch_breaks(launch, [item]) for launch in launches)
        what = "the server" if ends_a_launch else f"`{item.command.name or 'the command'}`"
        problems.append(
            ScriptProblem(
                file,
                item.position,
                "broken-continuation",
                item.said(what),
                f"{item.fix()}; a profile holds the argument list itself: no continuation lines",
            )
        )
    crlf = text.find("\r\n")
    if crlf >= 0 and not any(item.crlf for item in lost):
        line = text.count("\n", 0, crlf) + 1
        column = crlf - (text.rfind("\n", 0, crlf) + 1) + 1
        example = next(
            (
                f": {word.text!r} is what the server gets at line {word.position.line}"
                for launch in launches
                for word in launch.arguments
                if (word.text or "").endswith("\r")
            ),
            "",
        )
        problems.append(
            ScriptProblem(
                file,
                Position(line, column),
                "crlf-line-endings",
                "the file has CRLF line endings: bash reads the carriage return at the end of "
                f"each line as part of the line's last word{example}",
                "convert the file to LF line endings (`dos2unix FILE`, or save it with LF)",
            )
        )
    return problems


# -- the wrong server ---------------------------------------------------------------------------

# vLLM's server flags that SGLang has no option for, with SGLang's nearest spelling (vLLM's
# engine arguments: https://docs.vllm.ai/en/latest/models/engine_args.html). A launch of
# sglang.launch_server given these was written for vLLM.
_VLLM_FLAGS: dict[str, str | None] = {
    "--gpu-memory-utilization": "--mem-fraction-static",
    "--max-model-len": "--context-length",
    "--max-num-seqs": "--max-running-requests",
    "--max-num-batched-tokens": "--max-prefill-tokens",
    "--enforce-eager": "--disable-cuda-graph",
    "--seed": "--random-seed",
    "--block-size": "--page-size",
    "--enable-prefix-caching": None,  # SGLang's radix cache is on unless disabled
    "--swap-space": None,
    "--disable-log-requests": None,
    "--distributed-executor-backend": None,
    "--max-seq-len-to-capture": None,
    "--guided-decoding-backend": "--grammar-backend",
    "--enable-auto-tool-choice": None,
    "--limit-mm-per-prompt": None,
    "--uvicorn-log-level": None,
    "--num-scheduler-steps": None,
    "--enable-chunked-prefill": "--chunked-prefill-size",
    "--enable-expert-parallel": "--ep-size",
}
# SGLang's server flags that vLLM has no option for: a vLLM server given these was written for
# SGLang.
_SGLANG_FLAGS = frozenset(
    {
        "--model-path",
        "--tp-size",
        "--dp-size",
        "--ep-size",
        "--mem-fraction-static",
        "--context-length",
        "--chunked-prefill-size",
        "--max-running-requests",
        "--max-total-tokens",
        "--disable-radix-cache",
        "--cuda-graph-max-bs",
        "--schedule-policy",
        "--random-seed",
        "--speculative-algorithm",
        "--enable-dp-attention",
        "--dist-init-addr",
        "--tokenizer-path",
        "--enable-torch-compile",
        "--disable-cuda-graph",
        "--disable-overlap-schedule",
        "--grammar-backend",
        "--log-level-http",
        "--enable-mixed-chunk",
    }
)


def sglang_given_vllm_flags(
    file: str, launch: Launch, parsed: ParsedArguments
) -> list[ScriptProblem]:
    vllm = [p.flag for p in parsed.problems if p.code == "unknown-flag" and p.flag in _VLLM_FLAGS]
    if not vllm:
        return []
    spelled = [f"{flag} -> {_VLLM_FLAGS[flag]}" for flag in vllm if _VLLM_FLAGS[flag]]
    return [
        ScriptProblem(
            file,
            launch.position,
            "wrong-entry-module",
            f"SGLang's server is given vLLM's flags ({', '.join(f for f in vllm if f)}): the "
            "script was written for vLLM, and SGLang refuses them",
            "run vLLM (`vllm serve`), or give SGLang its own flags"
            + (f": {', '.join(spelled)}" if spelled else ""),
        )
    ]


def vllm_given_sglang_flags(file: str, others: Sequence[OtherLaunch]) -> list[ScriptProblem]:
    problems = []
    for other in others:
        if "vllm" not in other.what:
            continue
        flags = list(
            dict.fromkeys(
                (w.text or "").split("=", 1)[0]
                for w in other.arguments
                if (w.text or "").split("=", 1)[0] in _SGLANG_FLAGS
            )
        )
        if flags:
            problems.append(
                ScriptProblem(
                    file,
                    other.position,
                    "wrong-entry-module",
                    f"{other.what} is vLLM's server, given SGLang's flags ({', '.join(flags)}): "
                    "vLLM refuses them",
                    "start SGLang's server: `python -m sglang.launch_server` with these flags "
                    "(or give vLLM its own)",
                )
            )
    return problems


# -- placeholders -------------------------------------------------------------------------------

# What a template or a README leaves for the reader to fill in: `<path>`, `<host>:<port>`,
# `YOUR_MODEL_PATH`, `API_KEY_HERE`, `/path/to/model`.
_PLACEHOLDER_RE = re.compile(
    r"<[A-Za-z_][^\s<>|&;()'\"`$]*>|\bYOUR_[A-Z0-9_]+\b|\b[A-Z][A-Z0-9_]*_HERE\b|/path/to/"
)
# `<word>` outside quotes: bash reads `<` and `>` as redirections
_ANGLE_WORD_RE = re.compile(r"(?<![<\w$])<[A-Za-z_][^\s<>|&;()'\"`$]*>[^\s|&;()]*")


def placeholders(file: str, text: str, launches: Sequence[Launch]) -> list[ScriptProblem]:
    problems: list[ScriptProblem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if "<" not in line:
            continue
        for match in _ANGLE_WORD_RE.finditer(line):
            before = line[: match.start()]
            if before.lstrip().startswith("#") or _quoted_at(before):
                continue
            problems.append(
                ScriptProblem(
                    file,
                    Position(number, match.start() + 1),
                    "placeholder",
                    f"{match.group()} is a placeholder left in: bash reads its < and > as "
                    "redirections (from a file, into a file), not as an argument, and the command "
                    "fails or writes a file named after the next word",
                    "put the real value in its place; a profile keeps an unknown value as a "
                    "placeholder that `orch validate` refuses until `orch import --set` gives it",
                    (Position(number, match.start() + 1), len(match.group())),
                )
            )
    spans = [p.span for p in problems if p.span is not None]
    seen: set[tuple[Position, str]] = set()
    for launch in launches:
        for label, word, secret in _launch_values(launch):
            shown = _shown(word)
            for match in _PLACEHOLDER_RE.finditer(shown):
                position, where = _written_at(word, match.group(), launch)
                if inside(position, spans) or (position, match.group()) in seen:
                    continue
                seen.add((position, match.group()))
                gets = f"{label} gets a value" if secret else f"{label} gets {shown!r}"
                problems.append(
                    ScriptProblem(
                        file,
                        position,
                        "placeholder",
                        f"{gets}: {match.group()} is a placeholder left in{where}",
                        "put the real value in its place; a profile keeps an unknown value as "
                        "a placeholder that `orch validate` refuses until `orch import --set` "
                        "gives it",
                    )
                )
    return problems


def _launch_values(launch: Launch) -> list[tuple[str, Word, bool]]:
    """Every value the launch passes: its arguments (labelled by their flag), its
    environment, and where its output goes; and whether it is a credential (its value is
    never shown, only the placeholder in it)."""
    out: list[tuple[str, Word, bool]] = []
    flag = "the server"
    for word in launch.arguments:
        text = word.text or word.shown()
        if text.startswith("-"):
            flag = text.split("=", 1)[0]
            if "=" in text:
                out.append((flag, word, secret_name(flag.lstrip("-").replace("-", "_"))))
        else:
            out.append((flag, word, secret_name(flag.lstrip("-").replace("-", "_"))))
    for name, entry in launch.environment.items():
        if entry.value is not None:
            out.append((name, entry.value, secret_name(name)))
    for command in (launch.command, *launch.outer):
        for redirect in command.redirects:
            if redirect.target is not None and redirect.heredoc is None:
                out.append((f"the output ({redirect.operator})", redirect.target, False))
    return out


def _written_at(word: Word, placeholder: str, launch: Launch) -> tuple[Position, str]:
    """Where the placeholder is written: in the word itself, or in the variable it came from."""
    if placeholder in word.source:
        return word.position, ""
    for name, variable in launch.command.variables.items():
        value = variable.value
        if value is not None and variable.position is not None and placeholder in _shown(value):
            return variable.position, f" (set in {name} at line {variable.position.line})"
    return word.position, ""


def _quoted_at(before: str) -> bool:
    """Is the text after ``before`` inside quotes on its line? (Quotes opened on an earlier
    line are not followed.)"""
    single = double = False
    index = 0
    while index < len(before):
        char = before[index]
        if char == "\\" and not single:
            index += 2
            continue
        if char == "'" and not double:
            single = not single
        elif char == '"' and not single:
            double = not double
        index += 1
    return single or double


def inside(position: Position, spans: Sequence[tuple[Position, int]]) -> bool:
    return any(
        position.line == start.line and start.column <= position.column < start.column + length
        for start, length in spans
    )


# -- abbreviations, read with every release's table ------------------------------------------------


def abbreviation(file: str, occurrence: Occurrence, table: ArgTable) -> ScriptProblem:
    """A unique prefix argparse takes for a flag: a warning naming the flag (the next release
    that adds a flag with that prefix makes it ambiguous, an error), or an error when another
    release reads the same word as a different option (an old flag a newer one swallows)."""
    written, option = occurrence.written, occurrence.option
    full = next((f for f in option.flags if f.startswith(written)), option.flag)
    other: tuple[str, str, bool] | None = None  # (release, its flag, exactly that flag)
    ambiguous: list[str] = []
    for version in reversed(argtable.available_versions()):
        if version == table.version:
            continue
        options, abbreviated = match_flag(argtable.load_table(version), written)
        if len(options) > 1:
            ambiguous.append(version)
        elif options and other is None and not _same_setting(options[0], option):
            other = (version, options[0].flags[0], not abbreviated)
    if other is not None:
        version, flag, exact = other
        was = f"its own flag {flag}" if exact else f"read as {flag}"
        return ScriptProblem(
            file,
            occurrence.position,
            "prefix-reads-another-flag",
            f"{written} is read by SGLang {table.version} as {full} (argparse takes a unique "
            f"prefix), a different option from the one it names in SGLang {version} ({was})",
            f"write the flag you mean in full ({full}, if that is it); a profile names each "
            f"field in full (args.{option.dest}) and orch spells it for the release",
        )
    also = f" (it already is in SGLang {_releases(ambiguous)})" if ambiguous else ""
    return ScriptProblem(
        file,
        occurrence.position,
        "abbreviation",
        f"{written} is argparse's abbreviation of {full}: a release that adds another flag "
        f"starting with {written} makes it ambiguous, an error{also}",
        f"write {full}; a profile names the field in full (args.{option.dest})",
    )


def _field(dest: str) -> str:
    """A field by its newest name (renames followed)."""
    for rename in RENAMES:
        if rename.old == dest:
            return _field(rename.new)
    return dest


def _same_setting(a: ArgOption, b: ArgOption) -> bool:
    """Two releases' options for one setting: they share a flag (``--tp-size`` stored into
    ``tensor_parallel_size``, later ``tp_size``), RENAMES says so, or one field's name extends
    the other's (0.5.4's ``nsa_decode`` -> ``nsa_decode_backend``, which the tables show only
    as one field giving way to the other)."""
    if set(a.flags) & set(b.flags):
        return True
    for x, y in ((a.dest, b.dest), (_field(a.dest), _field(b.dest))):
        if x == y or x.startswith(y + "_") or y.startswith(x + "_"):
            return True
    return False


def _releases(versions: Sequence[str]) -> str:
    ordered = sorted(versions, key=lambda v: argtable.parse_version(v) or ())
    if len(ordered) <= 2:
        return " and ".join(ordered)
    return f"{ordered[0]} to {ordered[-1]}, {len(ordered)} releases"


# -- kills by a name ----------------------------------------------------------------------------


def kill(file: str, command: Command, before: Sequence[Command]) -> list[ScriptProblem]:
    """A kill that picks its processes by a name: ``pkill -f sglang``, ``killall python``,
    ``kill $(pgrep ...)``, ``kill $(ps aux | grep ... | awk ...)``, ``ps | grep ... | xargs
    kill``, ``kill $(nvidia-smi ...)`` (every process on the GPUs)."""
    name = posixpath.basename(command.name or "")
    shown = " ".join(w.shown() for w in command.words)
    broad = False
    if name in _KILLERS:
        broad = True
    elif name == "kill":
        broad = any(
            isinstance(part, Unresolved) and part.kind == "command" and _picks_by_name(part.name)
            for word in command.words
            for part in word.parts
        )
    elif name == "xargs" and any(posixpath.basename(w.text or "") == "kill" for w in command.words):
        # the pipeline that feeds it: the commands before it on its line
        feeding = [c for c in before if c.position.line == command.position.line]
        picked = [c for c in feeding if _picks_by_name(" ".join(w.shown() for w in c.words))]
        if picked:
            broad = True
            shown = " | ".join([" ".join(w.shown() for w in c.words) for c in feeding] + [shown])
    if not broad:
        return []
    return [
        ScriptProblem(
            file,
            command.position,
            "pkill-broad",
            f"{shown} kills every matching process on the box: other users' servers, and the "
            "other ranks of a group, too",
            "`orch down PROFILE` stops only this profile's server, checked by pid and start time",
        )
    ]


def _picks_by_name(text: str) -> bool:
    """Text that lists processes by a name (``pgrep -f sglang``, ``ps aux | grep
    launch_server``: every user's), or every process on the GPUs (``nvidia-smi``)."""
    return bool(set(re.findall(r"[\w.-]+", text)) & {"pgrep", "pidof", "grep", "nvidia-smi"})


def _shown(word: Word) -> str:
    return word.text if word.text is not None else word.shown()
