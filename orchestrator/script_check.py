"""``orch import --check``: what is wrong in a launch script a team still runs.

Each finding is located (file:line:column) and says the fix in orch's terms:

- ``heredoc-expands-locally``: ``ssh HOST bash <<EOF`` with an unquoted delimiter expands ``$VAR``,
  ``$(...)`` and backticks on this machine before ssh sends the text (the incident: a variable
  set inside the heredoc, for the host, expanded here to nothing and took a flag with it). The
  body is read both ways, as meant (on the host) and as sent, and the flags that change or
  disappear are named, with the value this machine gives when it is known.
- the arguments, read with the target version's table: unknown, renamed or removed flags,
  ambiguous abbreviations, values outside the choices, flags given twice, JSON that the shell's
  quoting left invalid, a flag missing its value;
- ``log-truncated`` (``> log``), ``nohup-without-redirect`` over SSH, ``sleep-readiness``
  (``sleep N`` then grep/curl), ``pkill-broad`` (``pkill -f sglang`` kills every server on the box).

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator import argtable
from orchestrator.argtable import RENAMES, ArgOption, ArgTable, format_version
from orchestrator.launches import (
    Launch,
    Occurrence,
    OtherLaunch,
    ParsedArguments,
    find_launches,
    match_flag,
    parse_arguments,
)
from orchestrator.script_breaks import LostLines, file_breaks, launch_breaks
from orchestrator.script_import import ScriptFile, is_secret, read_scripts
from orchestrator.shellscript import (
    Command,
    Heredoc,
    Position,
    Script,
    Unresolved,
    Word,
    parse_nested,
)

_LOUDEST = frozenset({"broken-continuation", "crlf-line-endings"})
_ARGUMENT_FIXES = {
    "unknown-flag": "remove it, or fix its spelling; a profile is checked against the version's "
    "table before anything runs (`orch validate`)",
    "ambiguous-abbreviation": "in a profile fields are named in full",
    "bad-choice": "pick one of the choices; `orch validate` checks them per version",
    "bad-value": "give a value of the flag's type; `orch validate` checks it per version",
    "duplicate-flag": "give it once; a profile has one key per field",
    "missing-value": "give the value; in a profile each field has its value",
    "unexpected-value": "a value without its flag, or a switch given a value",
    "unresolved-arguments": "or give it in the script",
    "removed-flag": "a profile states the field once and orch spells it for each version",
}
_KILLERS = frozenset({"pkill", "killall"})
_READINESS_PROGRAMS = frozenset({"grep", "curl", "wget", "tail", "cat"})
_ERRORS = frozenset({
    "broken-continuation", "crlf-line-endings", "placeholder", "heredoc-expands-locally",
    "rendezvous-mismatch", "wrong-entry-module",
    "unknown-flag", "removed-flag", "prefix-reads-another-flag",
    "ambiguous-abbreviation", "bad-choice", "bad-value", "invalid-json", "missing-value",
    "unexpected-value",
})  # fmt: skip


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


@dataclass(frozen=True)
class CheckReport:
    problems: tuple[ScriptProblem, ...]
    targets: tuple[tuple[str, str, str], ...]  # per file: (file, table version, why that one)
    launches: int

    @property
    def version_said(self) -> str:
        """Which SGLang the flags were checked against: one line for all files when they agree."""
        said = {s for _, _, s in self.targets}
        if len(said) == 1:
            return said.pop()
        files: dict[str, int] = {}
        for _, version, _ in self.targets:
            files[version] = files.get(version, 0) + 1
        return (
            ", ".join(
                f"SGLang {v} for {n} file{'s' if n != 1 else ''}" for v, n in sorted(files.items())
            )
            + ": each file's own (--json says why each)"
        )


def check_scripts(
    files: Sequence[ScriptFile], *, sglang: str | None, given: Mapping[str, str]
) -> CheckReport:
    scanned = read_scripts(files, given)
    launches = [(item, launch) for item in scanned for launch in item.found.launches]
    problems: list[ScriptProblem] = []
    targets: list[tuple[str, str, str]] = []
    for item in scanned:
        file = item.file.display
        # each file against its own version: scripts checked together may run different ones
        table, said = _target([(item, launch) for launch in item.found.launches], sglang)
        targets.append((file, table.version, said))
        for position in item.script.errors[:1]:
            problems.append(ScriptProblem(
                file, position, "syntax-error", "bash cannot parse the script here",
                "fix the syntax: what follows was read as well as it could be",
            ))  # fmt: skip
        for script, _ in item.found.scripts:
            for index, command in enumerate(script.commands):
                problems.extend(_command_problems(file, command, table))
                problems.extend(_kill(file, command, script.commands[:index]))
        placeholders = _placeholders(file, item.file.text, item.found.launches)
        problems.extend(placeholders)
        spans = [p.span for p in placeholders if p.span is not None]
        lost = file_breaks(item.found)
        problems.extend(_breaks(file, item.file.text, item.found.launches, lost))
        strays = {(file, b.command.words[-1].position) for b in lost if b.command.words}
        for launch in item.found.launches:
            problems.extend(
                p
                for p in _launch_problems(file, launch, table)
                # the stray argument of a broken line is said once, as the break; the
                # redirections of a placeholder (<host>:<port>), as the placeholder
                if not (p.code == "unexpected-value" and (file, p.position) in strays)
                and not (p.code == "log-truncated" and _inside(p.position, spans))
            )
    problems.extend(_rendezvous(launches))
    for item in scanned:
        problems.extend(_vllm_given_sglang_flags(item.file.display, item.found.others))
        if not item.found.launches:
            others = sorted({o.what for o in item.found.others})
            where = min((o.position for o in item.found.others), default=Position(1, 1),
                        key=lambda p: (p.line, p.column))  # fmt: skip
            problems.append(ScriptProblem(
                item.file.display, where, "no-launch",
                "no SGLang server launch found"
                + (f"; it starts {', '.join(others)}" if others else ""),
                "nothing was checked: a launch in a file this script runs, sources or evals "
                "is not followed; check that file",
            ))  # fmt: skip
    # an argument hidden in a variable that the heredoc expands here is said once, as that
    expanded_here = {(p.file, p.position) for p in problems if p.code == "heredoc-expands-locally"}
    problems = [
        p
        for p in problems
        if not (p.code == "unresolved-arguments" and (p.file, p.position) in expanded_here)
    ]
    unique = {(p.file, p.position, p.code, p.message): p for p in problems}
    return CheckReport(
        tuple(sorted(unique.values(), key=ScriptProblem.sort_key)),
        tuple(targets),
        len(launches),
    )


def _rendezvous(launches: Sequence[tuple[Any, Launch]]) -> list[ScriptProblem]:
    """Ranks of one server (the same arguments but --node-rank, as `orch import` groups them)
    that name different rendezvous addresses never meet: SGLang waits until its timeout."""
    table = argtable.load_table(argtable.available_versions()[-1])
    seen: dict[tuple[Any, ...], tuple[str, str, str]] = {}
    problems: list[ScriptProblem] = []
    for item, launch in launches:
        last = parse_arguments(table, launch.arguments).last()
        address, rank = last.get("dist_init_addr"), last.get("node_rank")
        if "nnodes" not in last or address is None or not address.values:
            continue
        key = tuple(
            (dest, tuple(_shown(v) for v in o.values))
            for dest, o in sorted(last.items())
            if dest not in ("node_rank", "dist_init_addr")
        )
        value = _shown(address.values[0])
        rank_text = _shown(rank.values[0]) if rank is not None and rank.values else "0"
        file = item.file.display
        if key not in seen:
            seen[key] = (value, f"{file}:{address.position.line}", rank_text)
        elif seen[key][0] != value and seen[key][2] != rank_text:
            problems.append(ScriptProblem(
                file, address.position, "rendezvous-mismatch",
                f"--dist-init-addr {value} differs from {seen[key][0]} ({seen[key][1]}), "
                "given to another rank of the same server: the ranks never meet and SGLang "
                "waits until its timeout",
                "every rank names rank 0's address; in a profile, group: renders it from "
                "hosts.yaml for each rank",
            ))  # fmt: skip
    return problems


_VERSION_CODES = frozenset({"unknown-flag", "ambiguous-abbreviation", "removed-flag"})


def _target(launches: Sequence[tuple[object, Launch]], sglang: str | None) -> tuple[ArgTable, str]:
    if sglang is not None:
        choice = argtable.table_for(sglang)
        exact = "" if choice.exact else f" (with the {choice.table.version} table, the nearest)"
        return choice.table, f"SGLang {sglang}{exact}"
    for _, launch in launches:
        if (version := launch.sglang_from_image) is not None:
            choice = argtable.table_for(version)
            return choice.table, f"SGLang {version}, from the image {launch.container.image}"  # type: ignore[union-attr]
    # the newest release that takes every flag as written: one that takes a flag only as an
    # abbreviation of another (--nsa-decode on 0.5.4+) does not, while an older release that
    # has the flag itself does (a flag no release has, --tp, counts the same in each)
    versions = argtable.available_versions()
    best: tuple[tuple[int, int], str] | None = None
    for version in reversed(versions):
        table = argtable.load_table(version)
        score = _fit(table, [launch for _, launch in launches])
        if best is None or score < best[0]:
            best = (score, version)
        if score == (0, 0):
            break
    newest = versions[-1]
    if best is None or best[1] == newest or best[0][0]:
        return argtable.load_table(newest), (
            f"SGLang {newest}, the newest orch knows (--sglang to choose)"
        )
    (_, abbreviations), version = best
    accepted = (
        "every flag as written"
        if not abbreviations
        else f"every flag ({abbreviations} only as an abbreviation)"
    )
    return argtable.load_table(version), (
        f"SGLang {version}, the newest orch knows that accepts {accepted} (--sglang to choose)"
    )


def _fit(table: ArgTable, launches: Sequence[Launch]) -> tuple[int, int]:
    """How well a release takes the launches' flags: (flags it rejects or deprecates, flags it
    takes only as an abbreviation)."""
    rejected = abbreviated = 0
    for launch in launches:
        parsed = parse_arguments(table, launch.arguments)
        rejected += sum(p.code in _VERSION_CODES for p in parsed.problems)
        rejected += len(_renamed("", parsed, table))
        abbreviated += sum(o.abbreviated for o in parsed.occurrences)
    return rejected, abbreviated


# -- lines bash never passes ----------------------------------------------------------------------


def _breaks(
    file: str, text: str, launches: Sequence[Launch], lost: Sequence[LostLines]
) -> list[ScriptProblem]:
    problems = []
    for item in lost:
        ends_a_launch = any(launch_breaks(launch, [item]) for launch in launches)
        what = "the server" if ends_a_launch else f"`{item.command.name or 'the command'}`"
        problems.append(ScriptProblem(
            file, item.position, "broken-continuation", item.said(what),
            f"{item.fix()}; a profile holds the argument list itself: no continuation lines",
        ))  # fmt: skip
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
        problems.append(ScriptProblem(
            file, Position(line, column), "crlf-line-endings",
            "the file has CRLF line endings: bash reads the carriage return at the end of "
            f"each line as part of the line's last word{example}",
            "convert the file to LF line endings (`dos2unix FILE`, or save it with LF)",
        ))  # fmt: skip
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
_SGLANG_FLAGS = frozenset({
    "--model-path", "--tp-size", "--dp-size", "--ep-size", "--mem-fraction-static",
    "--context-length", "--chunked-prefill-size", "--max-running-requests", "--max-total-tokens",
    "--disable-radix-cache", "--cuda-graph-max-bs", "--schedule-policy", "--random-seed",
    "--speculative-algorithm", "--enable-dp-attention", "--dist-init-addr", "--tokenizer-path",
    "--enable-torch-compile", "--disable-cuda-graph", "--disable-overlap-schedule",
    "--grammar-backend", "--log-level-http", "--enable-mixed-chunk",
})  # fmt: skip


def _sglang_given_vllm_flags(
    file: str, launch: Launch, parsed: ParsedArguments
) -> list[ScriptProblem]:
    vllm = [p.flag for p in parsed.problems if p.code == "unknown-flag" and p.flag in _VLLM_FLAGS]
    if not vllm:
        return []
    spelled = [f"{flag} -> {_VLLM_FLAGS[flag]}" for flag in vllm if _VLLM_FLAGS[flag]]
    return [ScriptProblem(
        file, launch.position, "wrong-entry-module",
        f"SGLang's server is given vLLM's flags ({', '.join(f for f in vllm if f)}): the "
        "script was written for vLLM, and SGLang refuses them",
        "run vLLM (`vllm serve`), or give SGLang its own flags"
        + (f": {', '.join(spelled)}" if spelled else ""),
    )]  # fmt: skip


def _vllm_given_sglang_flags(file: str, others: Sequence[OtherLaunch]) -> list[ScriptProblem]:
    problems = []
    for other in others:
        if "vllm" not in other.what:
            continue
        flags = list(dict.fromkeys(
            (w.text or "").split("=", 1)[0]
            for w in other.arguments
            if (w.text or "").split("=", 1)[0] in _SGLANG_FLAGS
        ))  # fmt: skip
        if flags:
            problems.append(ScriptProblem(
                file, other.position, "wrong-entry-module",
                f"{other.what} is vLLM's server, given SGLang's flags ({', '.join(flags)}): "
                "vLLM refuses them",
                "start SGLang's server: `python -m sglang.launch_server` with these flags "
                "(or give vLLM its own)",
            ))  # fmt: skip
    return problems


# -- placeholders -------------------------------------------------------------------------------

# What a template or a README leaves for the reader to fill in: `<path>`, `<host>:<port>`,
# `YOUR_MODEL_PATH`, `API_KEY_HERE`, `/path/to/model`.
_PLACEHOLDER_RE = re.compile(
    r"<[A-Za-z_][^\s<>|&;()'\"`$]*>|\bYOUR_[A-Z0-9_]+\b|\b[A-Z][A-Z0-9_]*_HERE\b|/path/to/"
)
# `<word>` outside quotes: bash reads `<` and `>` as redirections
_ANGLE_WORD_RE = re.compile(r"(?<![<\w$])<[A-Za-z_][^\s<>|&;()'\"`$]*>[^\s|&;()]*")


def _placeholders(file: str, text: str, launches: Sequence[Launch]) -> list[ScriptProblem]:
    problems: list[ScriptProblem] = []
    for number, line in enumerate(text.splitlines(), start=1):
        for match in _ANGLE_WORD_RE.finditer(line):
            before = line[: match.start()]
            if before.lstrip().startswith("#") or _quoted_at(before):
                continue
            problems.append(ScriptProblem(
                file, Position(number, match.start() + 1), "placeholder",
                f"{match.group()} is a placeholder left in: bash reads its < and > as "
                "redirections (from a file, into a file), not as an argument, and the command "
                "fails or writes a file named after the next word",
                "put the real value in its place; a profile keeps an unknown value as a "
                "placeholder that `orch validate` refuses until `orch import --set` gives it",
                (Position(number, match.start() + 1), len(match.group())),
            ))  # fmt: skip
    spans = [p.span for p in problems if p.span is not None]
    seen: set[tuple[Position, str]] = set()
    for launch in launches:
        for label, word in _launch_values(launch):
            shown = _shown(word)
            for match in _PLACEHOLDER_RE.finditer(shown):
                position, where = _written_at(word, match.group(), launch)
                if _inside(position, spans) or (position, match.group()) in seen:
                    continue
                seen.add((position, match.group()))
                problems.append(ScriptProblem(
                    file, position, "placeholder",
                    f"{label} gets {shown!r}: {match.group()} is a placeholder left in{where}",
                    "put the real value in its place; a profile keeps an unknown value as a "
                    "placeholder that `orch validate` refuses until `orch import --set` gives it",
                ))  # fmt: skip
    return problems


def _launch_values(launch: Launch) -> list[tuple[str, Word]]:
    """Every value the launch passes: its arguments (labelled by their flag), its
    environment, and where its output goes."""
    out: list[tuple[str, Word]] = []
    flag = "the server"
    for word in launch.arguments:
        text = word.text or word.shown()
        if text.startswith("-"):
            flag = text.split("=", 1)[0]
            if "=" in text:
                out.append((flag, word))
        else:
            out.append((flag, word))
    for name, entry in launch.environment.items():
        if entry.value is not None and not is_secret(name, entry.value.text):
            out.append((name, entry.value))
    for command in (launch.command, *launch.outer):
        for redirect in command.redirects:
            if redirect.target is not None and redirect.heredoc is None:
                out.append((f"the output ({redirect.operator})", redirect.target))
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


def _inside(position: Position, spans: Sequence[tuple[Position, int]]) -> bool:
    return any(
        position.line == start.line and start.column <= position.column < start.column + length
        for start, length in spans
    )


# -- launches -----------------------------------------------------------------------------------


def _launch_problems(file: str, launch: Launch, table: ArgTable) -> list[ScriptProblem]:
    parsed = parse_arguments(table, launch.arguments)
    problems = [
        ScriptProblem(file, p.position, p.code, p.message, _fix(p.code, p.fix))
        for p in parsed.problems
    ]
    problems.extend(_renamed(file, parsed, table))
    problems.extend(_sglang_given_vllm_flags(file, launch, parsed))
    problems.extend(
        _abbreviation(file, occurrence, table)
        for occurrence in parsed.occurrences
        if occurrence.abbreviated
    )
    for command in (*launch.outer, launch.command):
        for redirect in command.redirects:
            target = redirect.target.shown() if redirect.target is not None else ""
            truncates = redirect.operator in (">", "&>", ">|") or (
                redirect.operator == ">&" and not target.isdigit() and target != "-"
            )
            if truncates and target not in ("/dev/null",) and redirect.heredoc is None:
                problems.append(ScriptProblem(
                    file, redirect.position, "log-truncated",
                    f"{redirect.operator} {target} truncates the previous run's log: the crash "
                    "you are debugging is gone when the next try starts",
                    f"`>> {target}` keeps it; orch keeps a log per run and never overwrites one "
                    "(`orch logs PROFILE`, `orch logs PROFILE --run N`)",
                ))  # fmt: skip
    nohup = next((at for w, at in launch.wrappers if w == "nohup"), None)
    wrappers = {w for w, _ in launch.wrappers}
    if nohup is not None and not launch.command.background and "exec" not in wrappers:
        where = f"over SSH on {launch.remote.host}" if launch.remote is not None else "here"
        problems.append(ScriptProblem(
            file, nohup, "nohup-without-background",
            f"nohup without a trailing &: the server runs in the foreground {where}, and the "
            "script (or the SSH session) waits on it until it exits; nohup only ignores the "
            "hangup",
            "end the line with `&` if the script is to go on; `orch up PROFILE` starts the "
            "server under orch's agent and returns when it is ready",
        ))  # fmt: skip
    teed = [c for c in (launch.command, *launch.outer) if "tee" in c.piped_to]
    if nohup is not None and launch.remote is not None and teed:
        problems.append(ScriptProblem(
            file, teed[0].position, "nohup-tee-over-ssh",
            f"nohup ... | tee over SSH to {launch.remote.host}: nohup keeps the server alive "
            "when the session ends, not the tee it writes to; tee dies with the session and "
            "the server's output (the log) goes into a closed pipe from then on",
            "redirect to a file on the host instead (`> server.log 2>&1 &`); orch's agent "
            "keeps the log per run (`orch logs PROFILE -f`)",
        ))  # fmt: skip
    if launch.remote is not None and nohup is not None:
        redirected = any(
            r.operator in (">", ">>", "&>", "&>>") and (r.descriptor in (None, "1"))
            for command in (launch.command, *launch.outer[1:])
            for r in command.redirects
        )
        if not redirected:
            problems.append(ScriptProblem(
                file, launch.position, "nohup-without-redirect",
                f"nohup over SSH without redirecting the output: the SSH session to "
                f"{launch.remote.host} stays open (or writes nohup.out in the login directory) "
                "and the server's output is not where you look for it",
                "`orch up PROFILE`: orch's agent outlives the session and keeps the log per run",
            ))  # fmt: skip
    return problems


def _renamed(file: str, parsed: ParsedArguments, table: ArgTable) -> list[ScriptProblem]:
    out = []
    version = table.parsed_version
    for occurrence in parsed.occurrences:
        name = occurrence.written.lstrip("-").replace("-", "_")
        for rename in RENAMES:
            if (
                name == rename.old
                and version >= rename.renamed_in
                and (rename.removed_in is None or version < rename.removed_in)
            ):
                gone = (
                    f"; SGLang {format_version(rename.removed_in)} removes it"
                    if rename.removed_in
                    else ""
                )
                out.append(ScriptProblem(
                    file, occurrence.position, "renamed-flag",
                    f"{occurrence.written} is a deprecated alias in SGLang {table.version}: "
                    f"{rename.describe()}{gone}",
                    f"write --{rename.new.replace('_', '-')}; in a profile, args.{rename.old} "
                    "is spelled for each version by orch",
                ))  # fmt: skip
    return out


def _abbreviation(file: str, occurrence: Occurrence, table: ArgTable) -> ScriptProblem:
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
            file, occurrence.position, "prefix-reads-another-flag",
            f"{written} is read by SGLang {table.version} as {full} (argparse takes a unique "
            f"prefix), a different option from the one it names in SGLang {version} ({was})",
            f"write the flag you mean in full ({full}, if that is it); a profile names each "
            f"field in full (args.{option.dest}) and orch spells it for the release",
        )  # fmt: skip
    also = f" (it already is in SGLang {_releases(ambiguous)})" if ambiguous else ""
    return ScriptProblem(
        file, occurrence.position, "abbreviation",
        f"{written} is argparse's abbreviation of {full}: a release that adds another flag "
        f"starting with {written} makes it ambiguous, an error{also}",
        f"write {full}; a profile names the field in full (args.{option.dest})",
    )  # fmt: skip


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


def _fix(code: str, fix: str | None) -> str:
    general = _ARGUMENT_FIXES.get(code, "")
    if fix and general:
        return f"{fix}; {general}"
    return fix or general


# -- commands -----------------------------------------------------------------------------------


def _command_problems(file: str, command: Command, table: ArgTable) -> list[ScriptProblem]:
    problems: list[ScriptProblem] = []
    name = posixpath.basename(command.name or "")
    if name == "ssh":
        for redirect in command.redirects:
            if redirect.heredoc is not None and not redirect.heredoc.quoted:
                problems.extend(_heredoc(file, command, redirect.heredoc, table))
    if name == "sleep" and command.words[1:2]:
        seconds = command.words[1].text or ""
        number = re.match(r"\d+", seconds)
        if (
            number
            and int(number.group()) >= 10
            and set(command.next_commands) & _READINESS_PROGRAMS
        ):
            problems.append(ScriptProblem(
                file, command.position, "sleep-readiness",
                f"sleep {seconds} then"
                f" {', '.join(sorted(set(command.next_commands) & _READINESS_PROGRAMS))}: "
                "readiness guessed by a fixed wait (too short while weights load, too long "
                "when the server died in a second)",
                "`orch up PROFILE` returns when the server is ready and names the crash class "
                "the moment it dies",
            ))  # fmt: skip
    return problems


def _kill(file: str, command: Command, before: Sequence[Command]) -> list[ScriptProblem]:
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
    return [ScriptProblem(
        file, command.position, "pkill-broad",
        f"{shown} kills every matching process on the box: other users' servers, and the "
        "other ranks of a group, too",
        "`orch down PROFILE` stops only this profile's server, checked by pid and start time",
    )]  # fmt: skip


def _picks_by_name(text: str) -> bool:
    """Text that lists processes by a name (``pgrep -f sglang``, ``ps aux | grep
    launch_server``: every user's), or every process on the GPUs (``nvidia-smi``)."""
    return bool(set(re.findall(r"[\w.-]+", text)) & {"pgrep", "pidof", "grep", "nvidia-smi"})


# -- the incident -------------------------------------------------------------------------------


def _heredoc(file: str, command: Command, heredoc: Heredoc, table: ArgTable) -> list[ScriptProblem]:
    """An unquoted heredoc to ssh: what expands here, and what that does to the launch."""
    if not heredoc.expansions:
        return []
    host = next(
        (w.text for w in command.words[1:] if w.text and not w.text.startswith("-")), "the host"
    )
    meant = parse_nested(heredoc.body, heredoc.position, {}, 1)  # as if quoted: on the host
    remote_variables = meant.variables
    problems: list[ScriptProblem] = []
    for expansion in heredoc.expansions:
        if isinstance(expansion, Unresolved):
            name, position = expansion.name, expansion.position
            if expansion.kind == "variable":
                assigned = remote_variables.get(name)
                if assigned is not None and assigned.position is not None:
                    where = (
                        f"{name} is set inside the heredoc (line {assigned.position.line}), for "
                        f"{host}, but ${name} expands on this machine before ssh sends the "
                        f"text: to '' unless {name} is set here"
                    )
                else:
                    where = (
                        f"${name} expands on this machine, not on {host}: to its value here "
                        "('' if it is not set here)"
                    )
            else:
                where = f"{name} runs on this machine, not on {host}"
        else:
            text, position, value = expansion
            where = f"{text} expands on this machine, not on {host}: to {value!r}"
        problems.append(ScriptProblem(
            file, position, "heredoc-expands-locally", where,
            "quote the delimiter (<<'EOF') so that the host expands it; or `orch import` the "
            "script: a profile sends an argv, never shell text",
        ))  # fmt: skip
    effects = _effects(heredoc, meant, table)
    if effects:
        problems.append(ScriptProblem(
            file, command.position, "heredoc-expands-locally",
            f"ssh {host} <<{heredoc.delimiter} is unquoted: as sent, " + "; ".join(effects),
            f"<<'{heredoc.delimiter}' sends the text as written",
        ))  # fmt: skip
    return problems


def _effects(heredoc: Heredoc, meant_script: Script, table: ArgTable) -> list[str]:
    """The flags of the launches in the body, as meant (expanded on the host) and as sent
    (expanded here first, an unset variable giving '')."""
    meant = find_launches(meant_script).launches
    sent_text = "".join(
        part if isinstance(part, str) else (part.name if part.kind != "variable" else "")
        for part in heredoc.expanded.parts
    )
    sent = find_launches(parse_nested(sent_text, heredoc.position, {}, 1)).launches
    effects: list[str] = []
    for before, after in zip(meant, sent, strict=False):
        intended = _flags(parse_arguments(table, before.arguments))
        received = _flags(parse_arguments(table, after.arguments))
        for option, (flag, value, known) in intended.items():
            if option not in received:
                effects.append(f"{flag} {value} disappears".replace("  ", " ").strip())
            elif received[option][1] != value:
                sent_value = received[option][1] or repr("")
                effects.append(
                    f"{flag} becomes {sent_value} instead of {value}"
                    if known
                    else f"{flag} takes this machine's {value} ({sent_value}), not the host's"
                )
        for option, (flag, value, _) in received.items():
            if option not in intended:
                effects.append(f"{flag} {value} appears".strip())
    if len(meant) != len(sent):
        effects.append(f"{len(meant)} launch(es) meant, {len(sent)} sent")
    return effects


def _flags(parsed: ParsedArguments) -> dict[str, tuple[str, str, bool]]:
    """option -> (the flag as written, its value as shown, whether the value is known)."""
    out: dict[str, tuple[str, str, bool]] = {}
    for occurrence in parsed.occurrences:
        out[occurrence.option.flag] = (
            occurrence.written,
            " ".join(_shown(v) for v in occurrence.values),
            all(v.text is not None for v in occurrence.values),
        )
    return out


def _shown(word: Word) -> str:
    return word.text if word.text is not None else word.shown()
