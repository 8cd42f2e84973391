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
- ``log-truncated`` (``> log``), ``nohup-without-redirect`` over SSH, nohup without ``&`` or
  piped to ``tee`` over SSH, ``sleep-readiness`` (``sleep N`` then grep/curl);
- ``script_pitfalls``: the lines bash never passes (first: the incident's own class),
  placeholders, the wrong server, abbreviations read with every release's table, kills by a name.
- ``pkill-broad`` (``pkill -f sglang`` kills every server on the box);
- ``plaintext-secret``: a secret written in the script itself (``credentials`` says what is one),
  located where its value is written, never quoted.

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.importing import pitfalls
from orchestrator.importing.breaks import file_breaks
from orchestrator.importing.credentials import placeholder_value
from orchestrator.importing.launches import Launch, find_launches
from orchestrator.importing.pitfalls import ScriptProblem
from orchestrator.importing.scripts import ScriptFile, read_scripts
from orchestrator.importing.server_arguments import ParsedArguments, parse_arguments
from orchestrator.importing.shell_script import parse_nested
from orchestrator.importing.shell_words import (
    Command,
    Heredoc,
    Position,
    Script,
    Unresolved,
    Word,
)
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import RENAMES, ArgTable, format_version

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
    "replaced-flag": "orch import writes the value it became",
}
_READINESS_PROGRAMS = frozenset({"grep", "curl", "wget", "tail", "cat"})


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
            problems.append(
                ScriptProblem(
                    file,
                    position,
                    "syntax-error",
                    "bash cannot parse the script here",
                    "fix the syntax: what follows was read as well as it could be",
                )
            )
        for script, _ in item.found.scripts:
            for index, command in enumerate(script.commands):
                problems.extend(_command_problems(file, command, table))
                problems.extend(pitfalls.kill(file, command, script.commands[:index]))
        placeholders = pitfalls.placeholders(file, item.file.text, item.found.launches)
        problems.extend(placeholders)
        spans = [p.span for p in placeholders if p.span is not None]
        lost = file_breaks(item.found)
        problems.extend(pitfalls.broken_lines(file, item.file.text, item.found.launches, lost))
        strays = {(file, b.command.words[-1].position) for b in lost if b.command.words}
        for launch in item.found.launches:
            problems.extend(
                p
                for p in _launch_problems(file, launch, table)
                # the stray argument of a broken line is said once, as the break; the
                # redirections of a placeholder (<host>:<port>), as the placeholder
                if not (p.code == "unexpected-value" and (file, p.position) in strays)
                and not (p.code == "log-truncated" and pitfalls.inside(p.position, spans))
            )
        problems.extend(_plaintext_secrets(item))
    problems.extend(_rendezvous(launches))
    for item in scanned:
        problems.extend(pitfalls.vllm_given_sglang_flags(item.file.display, item.found.others))
        if not item.found.launches:
            others = sorted({o.what for o in item.found.others})
            where = min(
                (o.position for o in item.found.others),
                default=Position(1, 1),
                key=lambda p: (p.line, p.column),
            )
            problems.append(
                ScriptProblem(
                    item.file.display,
                    where,
                    "no-launch",
                    "no SGLang server launch found"
                    + (f"; it starts {', '.join(others)}" if others else ""),
                    "nothing was checked: a launch in a file this script runs, sources or evals "
                    "is not followed; check that file",
                )
            )
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
            problems.append(
                ScriptProblem(
                    file,
                    address.position,
                    "rendezvous-mismatch",
                    f"--dist-init-addr {value} differs from {seen[key][0]} ({seen[key][1]}), "
                    "given to another rank of the same server: the ranks never meet and SGLang "
                    "waits until its timeout",
                    "every rank names rank 0's address; in a profile, group: renders it from "
                    "hosts.yaml for each rank",
                )
            )
    return problems


_VERSION_CODES = frozenset(
    {"unknown-flag", "ambiguous-abbreviation", "removed-flag", "replaced-flag"}
)


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
        parsed = parse_arguments(table, launch.arguments, suggest=False)
        rejected += sum(p.code in _VERSION_CODES for p in parsed.problems)
        rejected += len(_renamed("", parsed, table))
        abbreviated += sum(o.abbreviated for o in parsed.occurrences)
    return rejected, abbreviated


# -- launches -----------------------------------------------------------------------------------


def _launch_problems(file: str, launch: Launch, table: ArgTable) -> list[ScriptProblem]:
    parsed = parse_arguments(table, launch.arguments)
    problems = [
        ScriptProblem(file, p.position, p.code, p.message, _fix(p.code, p.fix))
        for p in parsed.problems
    ]
    problems.extend(_renamed(file, parsed, table))
    problems.extend(pitfalls.sglang_given_vllm_flags(file, launch, parsed))
    problems.extend(
        pitfalls.abbreviation(file, occurrence, table)
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
                problems.append(
                    ScriptProblem(
                        file,
                        redirect.position,
                        "log-truncated",
                        f"{redirect.operator} {target} truncates the previous run's log: the crash "
                        "you are debugging is gone when the next try starts",
                        f"`>> {target}` keeps it; orch keeps a log per run and never overwrites "
                        "one (`orch logs PROFILE`, `orch logs PROFILE --run N`)",
                    )
                )
    nohup = next((at for w, at in launch.wrappers if w == "nohup"), None)
    wrappers = {w for w, _ in launch.wrappers}
    if nohup is not None and not launch.command.background and "exec" not in wrappers:
        where = f"over SSH on {launch.remote.host}" if launch.remote is not None else "here"
        problems.append(
            ScriptProblem(
                file,
                nohup,
                "nohup-without-background",
                f"nohup without a trailing &: the server runs in the foreground {where}, and the "
                "script (or the SSH session) waits on it until it exits; nohup only ignores the "
                "hangup",
                "end the line with `&` if the script is to go on; `orch up PROFILE` starts the "
                "server under orch's agent and returns when it is ready",
            )
        )
    teed = [c for c in (launch.command, *launch.outer) if "tee" in c.piped_to]
    if nohup is not None and launch.remote is not None and teed:
        problems.append(
            ScriptProblem(
                file,
                teed[0].position,
                "nohup-tee-over-ssh",
                f"nohup ... | tee over SSH to {launch.remote.host}: nohup keeps the server alive "
                "when the session ends, not the tee it writes to; tee dies with the session and "
                "the server's output (the log) goes into a closed pipe from then on",
                "redirect to a file on the host instead (`> server.log 2>&1 &`); orch's agent "
                "keeps the log per run (`orch logs PROFILE -f`)",
            )
        )
    if launch.remote is not None and nohup is not None:
        redirected = any(
            r.operator in (">", ">>", "&>", "&>>") and (r.descriptor in (None, "1"))
            for command in (launch.command, *launch.outer[1:])
            for r in command.redirects
        )
        if not redirected:
            problems.append(
                ScriptProblem(
                    file,
                    launch.position,
                    "nohup-without-redirect",
                    f"nohup over SSH without redirecting the output: the SSH session to "
                    f"{launch.remote.host} stays open (or writes nohup.out in the login directory) "
                    "and the server's output is not where you look for it",
                    "`orch up PROFILE`: orch's agent outlives the session and keeps the log "
                    "per run",
                )
            )
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
                out.append(
                    ScriptProblem(
                        file,
                        occurrence.position,
                        "renamed-flag",
                        f"{occurrence.written} is a deprecated alias in SGLang {table.version}: "
                        f"{rename.describe()}{gone}",
                        f"write --{rename.new.replace('_', '-')}; in a profile, args.{rename.old} "
                        "is spelled for each version by orch",
                    )
                )
    return out


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
            problems.append(
                ScriptProblem(
                    file,
                    command.position,
                    "sleep-readiness",
                    f"sleep {seconds} then"
                    f" {', '.join(sorted(set(command.next_commands) & _READINESS_PROGRAMS))}: "
                    "readiness guessed by a fixed wait (too short while weights load, too long "
                    "when the server died in a second)",
                    "`orch up PROFILE` returns when the server is ready and names the crash class "
                    "the moment it dies",
                )
            )
    return problems


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
        problems.append(
            ScriptProblem(
                file,
                position,
                "heredoc-expands-locally",
                where,
                "quote the delimiter (<<'EOF') so that the host expands it; or `orch import` the "
                "script: a profile sends an argv, never shell text",
            )
        )
    effects = _effects(heredoc, meant, table)
    if effects:
        problems.append(
            ScriptProblem(
                file,
                command.position,
                "heredoc-expands-locally",
                f"ssh {host} <<{heredoc.delimiter} is unquoted: as sent, " + "; ".join(effects),
                f"<<'{heredoc.delimiter}' sends the text as written",
            )
        )
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


def _plaintext_secrets(item: Any) -> list[ScriptProblem]:
    """Each secret written in the script as it is (the script sits in someone's repository):
    where its value is, what it is, and how to keep it out; never the value."""
    problems = []
    for secret in item.secrets:
        if secret.position is None:
            continue  # given with --set, or put together by the shell: not written in the file
        name = secret.name if secret.name.isidentifier() and secret.name.isupper() else "SECRET"
        what = (
            f"{secret.why}: a placeholder, for the real secret to be written here"
            if placeholder_value(secret.value)
            else f"{secret.why}, written in the script in plain text"
        )
        problems.append(
            ScriptProblem(
                item.file.display,
                secret.position,
                "plaintext-secret",
                f"{what}: whoever can read the script has it",
                f"keep it out of the script: `export {name}` from a secret manager or your shell "
                f"before running it, and read ${name} here; in an orch profile it is "
                f"{{from_env: {name}}}",
            )
        )
    return problems
