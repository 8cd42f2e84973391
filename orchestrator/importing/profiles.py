"""A launch script -> a profile: the same server, and a note for everything orch does itself.

Each SGLang launch found in the script (``launches.py``) becomes a profile document: the model,
speculative decoding, port and bind, ``gpu.devices`` from ``CUDA_VISIBLE_DEVICES`` (or
``docker --gpus device=...``), ``env`` from the variables the server's environment really gets
(exports and prefix assignments on this side, ``-e`` for a container, the remote script's own
for ``ssh``), ``args`` for the rest under their field names. Ranks of one multi-node server
(``--nnodes``/``--node-rank``/``--dist-init-addr``) become a group. A secret (``credentials``: by
name, place, shape, or inside a URL or JSON) becomes ``{from_env: NAME}``: its value is never
written, nor quoted in a note. What orch does itself (``nohup``, ``&``, ``> log``, readiness
polling, ``pkill``) is dropped and said. A value the script does not determine is never guessed:
it is a visible ``<unset: NAME>`` placeholder, which validation refuses, until ``--set NAME=VALUE``.

Pure: no I/O; the caller reads the scripts and writes the profile.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ImportBoundError, ImportScriptError
from orchestrator.importing import credentials
from orchestrator.importing.breaks import file_breaks, launch_breaks
from orchestrator.importing.budget import BOUNDS, WorkBudget
from orchestrator.importing.credentials import SECRET_ARGS
from orchestrator.importing.launches import Found, Launch, find_launches
from orchestrator.importing.script_secrets import ScriptSecret, secrets_of
from orchestrator.importing.server_arguments import (
    Occurrence,
    ParsedArguments,
    first_version_accepting,
    parse_arguments,
)
from orchestrator.importing.shell_script import parse_script
from orchestrator.importing.shell_words import Command, Position, Script, Unresolved, Word
from orchestrator.importing.wrappers import EnvEntry, Remote
from orchestrator.model import Launcher
from orchestrator.profile.checks import STRUCTURED_FIELDS
from orchestrator.profile.store import placeholder
from orchestrator.render import Redactor
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgOption, ArgTable

# A group's own flags: orch renders them for each rank (gated_launch_port: from group.gate_port).
_GROUP_FIELDS = frozenset({"nnodes", "node_rank", "dist_init_addr", "gated_launch_port"})
_VARIABLE_SOURCE_RE = re.compile(r'^"?\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?"?$')

# What orch does itself: the commands a launch script runs around the server, and why they go.
_DROPPED_PROGRAMS: dict[str, str] = {
    "sleep": "orch waits for readiness itself: `orch up` follows the log and /health",
    "curl": "orch checks readiness itself (/health, then /server_info)",
    "wget": "orch checks readiness itself (/health, then /server_info)",
    "grep": "orch parses the log as it is written: readiness, weight loading, crash class",
    "tail": "`orch logs -f` follows the log; every run keeps its own",
    "pkill": "orch stops only its own server (`orch down`), verified by pid and start time",
    "kill": "orch stops only its own server (`orch down`), verified by pid and start time",
    "killall": "orch stops only its own server (`orch down`), verified by pid and start time",
    "wait": "orch's supervisor outlives the SSH session and restarts with backoff",
    "disown": "orch's supervisor outlives the SSH session",
    "nvidia-smi": "`orch plan` reads the GPUs; the agent reports them",
    "mkdir": "orch creates <workdir>/<profile>/ on the host",
    "cd": "orch runs the server in <workdir>/<profile>/ on the host",
    "echo": "orch prints what it does",
}
_WRAPPER_REASONS = {
    "nohup": "orch's supervisor outlives the SSH session (no nohup needed)",
    "exec": "the agent starts the server directly, without a shell",
    "setsid": "the agent starts the server in its own session",
    "sudo": "orch starts the server as the SSH user",
    "kubectl exec": "the server ran in a pod; the profile runs it on a host of hosts.yaml "
    "(`orch export kubernetes` writes a pod for it)",
}


@dataclass(frozen=True)
class Note:
    # lost (flags bash never passes: a broken continuation), dropped, default, unresolved,
    # canonical, renamed, version, host, secret, skipped, warning
    kind: str
    message: str
    file: str | None = None
    position: Position | None = None

    def located(self) -> str:
        if self.file is None or self.position is None:
            return self.message
        return f"{self.file}:{self.position.line}:{self.position.column}: {self.message}"


@dataclass(frozen=True)
class ImportRequest:
    name: str
    host: str | None = None  # --host (its first name)
    rank_hosts: tuple[str, ...] = ()  # --host H0,H1,...: a group's ranks, in order
    sglang: str | None = None  # --sglang
    given: Mapping[str, str] = field(default_factory=dict)  # --set
    launch: int | None = None  # --launch N (1-based), when a script starts several servers
    extends: str | None = None
    base: Mapping[str, Any] | None = None  # the merged document of ``extends``
    inventory: Mapping[str, Any] = field(default_factory=dict)  # host name -> Host


@dataclass(frozen=True)
class ImportedProfile:
    name: str
    document: dict[str, Any]
    notes: tuple[Note, ...]
    unresolved: tuple[str, ...]  # names to give with --set
    host_entry: dict[str, Any] | None  # a hosts.yaml entry to add, when the host is not known
    table_version: str
    # every secret the scripts hold, (name, value): for the caller to mask in what it shows
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)


@dataclass(frozen=True)
class ScriptFile:
    display: str
    text: str


@dataclass
class _Context:
    request: ImportRequest
    file: str
    notes: list[Note] = field(default_factory=list)
    unresolved: dict[str, None] = field(default_factory=dict)
    redact: Redactor = field(default_factory=Redactor)  # masks the scripts' secrets
    references: dict[str, str] = field(default_factory=dict)  # from_env NAME -> what it holds

    def note(self, kind: str, message: str, position: Position | None = None) -> None:
        # a message may quote the script (a duplicate flag's value, a docker option): masked
        # here, as the caller masks what it shows, so that no note ever holds a secret
        entry = Note(kind, self.redact(message), self.file, position)
        if entry not in self.notes:
            self.notes.append(entry)


@dataclass(frozen=True)
class _Found:
    file: ScriptFile
    script: Script
    found: Found
    secrets: tuple[ScriptSecret, ...]


def read_scripts(files: Sequence[ScriptFile], given: Mapping[str, str]) -> list[_Found]:
    """Each script walked and its launches found, all within one budget of work."""
    budget = WorkBudget()
    out = []
    for file in files:
        budget.file = file.display
        script = parse_script(file.text, given=given, budget=budget)
        found = find_launches(script)
        out.append(_Found(file, script, found, secrets_of(file.text, script, found)))
    return out


def script_secrets(files: Sequence[ScriptFile], given: Mapping[str, str]) -> list[ScriptSecret]:
    """Every secret the scripts hold (``script_secrets.secrets_of``), for the caller to mask in
    everything it shows before it shows anything."""
    return [secret for item in read_scripts(files, given) for secret in item.secrets]


def import_scripts(files: Sequence[ScriptFile], request: ImportRequest) -> list[ImportedProfile]:
    """One profile per server the scripts start (a multi-node server's ranks: one group)."""
    scanned = read_scripts(files, request.given)
    launches = [(item, launch) for item in scanned for launch in item.found.launches]
    if not launches:
        others = [o for item in scanned for o in item.found.others]
        seen = "; it starts " + ", ".join(sorted({o.what for o in others})) if others else ""
        names = ", ".join(f.display for f in files)
        raise ImportScriptError(
            f"{names}: no SGLang server launch found{seen}",
            "orch import reads `python -m sglang.launch_server ...` and `sglang serve ...`, "
            "also behind nohup/env/sudo, inside `ssh HOST ...`, `docker run IMAGE ...` and "
            "`bash -c`",
        )
    version = _choose_version(launches, request)
    table = argtable.load_table(version.table)
    parsed = [(item, launch, parse_arguments(table, launch.arguments)) for item, launch in launches]
    if request.launch is not None:
        if not 1 <= request.launch <= len(parsed):
            raise ImportScriptError(
                f"--launch {request.launch}: the scripts start {len(parsed)} server(s)",
                "number them from 1, in the order of the scripts",
            )
        parsed = [parsed[request.launch - 1]]
    groups = _group_ranks(parsed)
    if len(groups) > BOUNDS["profiles"].limit:
        bound = BOUNDS["profiles"]
        raise ImportBoundError(
            f"{', '.join(f.display for f in files)}: the scripts start {len(groups)} servers:"
            f" more than {bound.limit} {bound.what} (bound: profiles)",
            f"pick one with --launch N (1 to {len(parsed)}), or split the script",
            bound="profiles",
        )
    secrets = tuple((s.name, s.value) for item in scanned for s in item.secrets)
    out: list[ImportedProfile] = []
    for number, members in enumerate(groups, start=1):
        name = request.name if len(groups) == 1 else f"{request.name}-{number}"
        profile = _profile(name, members, table, version, request, secrets)
        out.append(dataclasses.replace(profile, secrets=secrets))
    return out


# -- version ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Version:
    table: str  # the table the arguments are read with
    pin: str | None  # the profile's `sglang:`
    said: str


def _choose_version(launches: Sequence[tuple[_Found, Launch]], request: ImportRequest) -> _Version:
    available = argtable.available_versions()
    if request.sglang is not None:
        choice = argtable.table_for(request.sglang)
        said = f"SGLang {request.sglang} (--sglang)"
        if not choice.exact:
            said += (
                f"; its flags checked with the {choice.table.version} table, the nearest orch has"
            )
        return _Version(choice.table.version, request.sglang, said)
    for _, launch in launches:
        image_version = launch.sglang_from_image
        if image_version is not None:
            choice = argtable.table_for(image_version)
            said = f"SGLang {image_version}, from the image {launch.container.image}"  # type: ignore[union-attr]
            if not choice.exact:
                said += f"; its flags checked with the {choice.table.version} table"
            return _Version(choice.table.version, image_version, said)
    words = [w for _, launch in launches for w in launch.arguments]
    version, _ = first_version_accepting(words, available)
    if version == available[-1]:
        return _Version(
            version, None,
            f"not pinned: the script names no SGLang version; its flags are valid for {version} "
            "(the newest orch knows), and the host's version is detected at launch",
        )  # fmt: skip
    return _Version(
        version, version,
        f"pinned to {version}: the newest SGLang whose flags accept this script; set the "
        "host's real version with --sglang",
    )  # fmt: skip


# -- groups -------------------------------------------------------------------------------------

_Member = tuple[_Found, Launch, ParsedArguments]


def _group_ranks(parsed: list[_Member]) -> list[list[_Member]]:
    """Launches that are ranks of one server (same arguments but --node-rank, --nnodes > 1)
    form one group; every other launch is a profile of its own."""
    groups: list[list[_Member]] = []
    keyed: dict[tuple[Any, ...], list[_Member]] = {}
    for member in parsed:
        last = member[2].last()
        nnodes = _int(last.get("nnodes"))
        if nnodes is not None and nnodes > 1:
            key = tuple(
                (dest, tuple(v.shown() for v in o.values))
                for dest, o in sorted(last.items())
                # a rendezvous the ranks disagree on is still one server, said (_group)
                if dest not in ("node_rank", "dist_init_addr")
            )
            if key in keyed and not any(_rank(m) == _rank(member) for m in keyed[key]):
                keyed[key].append(member)
                continue
            keyed[key] = [member]
            groups.append(keyed[key])
        else:
            groups.append([member])
    return groups


def _int(occurrence: Occurrence | None) -> int | None:
    if occurrence is None or not occurrence.values:
        return None
    text = occurrence.values[-1].text
    return int(text) if text is not None and text.strip().isdigit() else None


def _rank(member: _Member) -> int:
    return _int(member[2].last().get("node_rank")) or 0


# -- the profile --------------------------------------------------------------------------------


def _profile(
    name: str,
    members: list[_Member],
    table: ArgTable,
    version: _Version,
    request: ImportRequest,
    secrets: Sequence[tuple[str, str]],
) -> ImportedProfile:
    members = sorted(members, key=_rank)
    item, launch, parsed = members[0]
    redact = Redactor()
    redact.add_found(secrets)
    context = _Context(request, item.file.display, redact=redact)
    for default in item.script.defaults:
        context.note(
            "default",
            f"${{{default.name}}} is not set by the script: its default "
            f"{_shown(default.name, default.value)} was taken (--set {default.name}=VALUE for "
            "another)",
            default.position,
        )
    for script, _ in item.found.scripts:
        for choice in script.choices:
            if choice.taken is not None:
                context.note(
                    "default",
                    f"{choice.name} is set only when a condition holds: its value "
                    f"{_shown(choice.name, choice.taken)} was taken (--set {choice.name}=VALUE "
                    "for another)",
                    choice.position,
                )
            else:
                arms = " or ".join(
                    v if v == "unset" else _shown(choice.name, v, quote=False)
                    for v in choice.values
                )
                context.note(
                    "unresolved",
                    f"{choice.name} depends on a condition orch does not evaluate "
                    f"({arms}): not guessed (--set {choice.name}=VALUE)",
                    choice.position,
                )
    context.note("version", version.said)
    for lost in launch_breaks(launch, file_breaks(item.found)):
        context.note(
            "lost",
            f"{lost.said('the server')}; not imported: {lost.fix()}",
            lost.position,
        )
    document: dict[str, Any] = {
        "description": f"imported from {item.file.display}:{launch.position.line} by orch import"
    }
    if version.pin is not None:
        document["sglang"] = version.pin
    host_name, host_entry = _host(launch, request, context)
    if launch.launcher is Launcher.SERVE:
        document["launcher"] = "serve"
    fields = _fields(parsed, table, context)
    model: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    args: dict[str, Any] = {}
    nnodes = fields.get("nnodes", (1, None))[0]
    grouped = len(members) > 1 or nnodes != 1
    for dest, (value, option) in fields.items():
        path = STRUCTURED_FIELDS.get(_field_name(option, table))
        if dest in _GROUP_FIELDS and grouped:
            continue  # the group says them (orch renders each rank's)
        if dest in _GROUP_FIELDS:
            context.note(
                "skipped",
                f"not imported: {option.flag} {value} on a single node: orch renders it only "
                "for a group of nodes (group:), where SGLang's ranks rendezvous",
                launch.position,
            )
            continue
        if path is not None and path[0] == "model":
            model[str(path[1])] = value
        elif path is not None and path[0] == "spec_decode":
            spec[str(path[1])] = value
        elif path == ("port",):
            document["port"] = value
        elif path == ("bind",):
            document["bind"] = value
        else:
            args[_field_name(option, table)] = value
    if "algorithm" not in spec:  # the section needs its algorithm; else these stay plain args
        args.update({f"speculative_{k}": v for k, v in spec.items()})
        spec = {}
    if not model.get("path"):
        context.note(
            "warning", "the launch gives no --model-path: SGLang requires one", launch.position
        )
        model["path"] = placeholder("model path")
        context.unresolved.setdefault("model path", None)
    env, devices = _environment(launch, context)
    if devices:
        document["gpu"] = {"devices": devices}
    document["model"] = model
    if spec:
        document["spec_decode"] = spec
    for key in ("port", "bind"):
        if key in document:
            document[key] = document.pop(key)
    if env:
        document["env"] = env
    if args:
        document["args"] = args
    if grouped:
        document["group"] = _group(members, fields, host_name, request, context)
    else:
        document = {"description": document.pop("description"), **_host_first(document, host_name)}
    _dropped(item, launch, context)
    if request.extends is not None and request.base is not None:
        document = _difference(
            document,
            request.base,
            request.extends,
            host_given=host_name is not None
            and (request.host is not None or launch.remote is not None),
        )
    return ImportedProfile(
        name=name,
        document=document,
        notes=tuple(context.notes),
        unresolved=tuple(context.unresolved),
        host_entry=host_entry,
        table_version=table.version,
    )


def _shown(name: str, value: str, *, quote: bool = True) -> str:
    """A value for a note: quoted, or said to be a secret (never quoted)."""
    if credentials.why_secret(name, value) is not None:
        return "(a secret, not shown)"
    return repr(value) if quote else value


def _host_first(document: dict[str, Any], host: str | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if "sglang" in document:
        out["sglang"] = document.pop("sglang")
    out["host"] = host or "local"
    out.update(document)
    return out


def _host(
    launch: Launch, request: ImportRequest, context: _Context
) -> tuple[str | None, dict[str, Any] | None]:
    program = launch.program.text or launch.program.shown()
    if request.host is not None:
        known = request.inventory.get(request.host)
        python = getattr(known, "python", None)
        if (
            python
            and posixpath.isabs(program)
            and python != program
            and launch.launcher is Launcher.MODULE
        ):
            context.note(
                "host",
                f"the script runs {program}; host {request.host} runs {python} (hosts.yaml)",
                launch.program.position,
            )
        return request.host, None
    remote = launch.remote
    if remote is None:
        if posixpath.isabs(program):
            context.note(
                "host",
                f"the script runs {program}: set it as the `local` host's python in hosts.yaml "
                "if this machine's default python is another",
                launch.program.position,
            )
        return None, None
    if not remote.known:
        return _unknown_host(remote, context), None
    if remote.host in request.inventory:
        return remote.host, None
    entry: dict[str, Any] = {"address": remote.host}
    if remote.user:
        entry["user"] = remote.user
    if remote.port:
        entry["port"] = int(remote.port) if remote.port.isdigit() else remote.port
    if remote.identity_file:
        entry["identity_file"] = remote.identity_file
    if posixpath.isabs(program):
        entry["python"] = (
            program
            if launch.launcher is Launcher.MODULE
            else posixpath.join(posixpath.dirname(program), "python")
        )
    context.note(
        "host",
        f"host {remote.host} is not in hosts.yaml: add the entry shown (and its host key to "
        "known_hosts) before `orch up`",
        remote.command.position,
    )
    return remote.host, entry


def _field_name(option: ArgOption, table: ArgTable) -> str:
    """The ServerArgs field an option sets: ``--tp-size`` -> ``tp_size`` even where the parser's
    dest is ``tensor_parallel_size`` (0.5.11)."""
    for flag in option.flags:
        if flag.startswith("--"):
            name = flag[2:].replace("-", "_")
            if name in table.fields:
                return name
    return option.dest


def _fields(
    parsed: ParsedArguments, table: ArgTable, context: _Context
) -> dict[str, tuple[Any, ArgOption]]:
    """dest -> (profile value, option), in the script's order; problems become notes."""
    out: dict[str, tuple[Any, ArgOption]] = {}
    for problem in parsed.problems:
        if problem.code == "removed-flag":
            context.note(
                "renamed", f"{problem.message}: imported as its new name", problem.position
            )
        elif problem.code == "duplicate-flag":
            context.note("warning", problem.message, problem.position)
        elif problem.code == "unresolved-arguments":
            context.note(
                "unresolved",
                f"not imported: {problem.message}; give it with --set"
                " (e.g. --set NAME='--flag value')",
                problem.position,
            )
            for part in problem.unresolved:
                context.unresolved.setdefault(part, None)
        else:
            context.note(
                "warning",
                f"{problem.message}" + (f" ({problem.fix})" if problem.fix else ""),
                problem.position,
            )
    kept = parsed.last()
    for occurrence in parsed.occurrences:
        option = occurrence.option
        if occurrence.abbreviated:
            context.note(
                "canonical",
                f"{occurrence.written} is argparse's abbreviation of {option.flag}: imported as "
                f"{_field_name(option, table)}",
                occurrence.position,
            )
        elif occurrence.written not in option.flags:
            pass  # a removed name read as its new one: said with the problem above
        elif _field_name(option, table) != occurrence.written.lstrip("-").replace("-", "_"):
            kind = "a deprecated alias" if option.deprecated else "an alias"
            context.note(
                "canonical",
                f"{occurrence.written} is {kind} in SGLang {table.version}: imported as "
                f"{_field_name(option, table)}",
                occurrence.position,
            )
        out.pop(option.dest, None)  # the last occurrence wins, at its own place
        if kept[option.dest] is not occurrence and option.action not in ("append", "count"):
            continue  # (its value is never read: a secret in it gets no name of its own)
        structured = STRUCTURED_FIELDS.get(_field_name(option, table))
        secret = next(filter(None, map(_secret_in, occurrence.values)), None)
        if structured is not None and secret is not None:
            out[option.dest] = (_secret_placeholder(option, structured, secret, context), option)
            continue
        value = _value(parsed, occurrence, context)
        if value is not _SKIPPED:
            out[option.dest] = (value, option)
    return out


def _value(parsed: ParsedArguments, occurrence: Occurrence, context: _Context) -> Any:
    option = occurrence.option
    action = option.action
    if action == "count":
        return len(parsed.appended(option.dest))
    if action == "append":
        words = [v for o in parsed.appended(option.dest) for v in o.values]
        return _listed(option, words, occurrence, context)
    if not occurrence.values:
        if action == "store_false":
            return False
        if action == "custom:BooleanOptionalAction":
            return not occurrence.written.startswith("--no-")
        if action in ("store_const", "custom:DeprecatedStoreConstAction"):
            const = argtable.const_of(option)
            if const is not None:
                return const
        return True
    many = option.nargs in ("+", "*") or isinstance(option.nargs, int)
    if many:
        return _listed(option, list(occurrence.values), occurrence, context)
    if option.dest in SECRET_ARGS:
        why = f"{option.flags[0]}'s value"
        return _secret_ref(occurrence.values[0], option.dest.upper(), why, context)
    return _scalar(option, occurrence.values[0], context)


_SKIPPED = object()  # a flag's value that is not imported (said in a note)


def _listed(option: ArgOption, words: list[Word], occurrence: Occurrence, context: _Context) -> Any:
    """A list of values; none, when one of them holds a secret: a profile takes a secret as a
    whole value (``{from_env: NAME}``), never inside a list."""
    if any(_secret_in(word) for word in words):
        context.note(
            "skipped",
            f"not imported: {occurrence.written} holds a secret in one of its values, and a "
            "profile takes a secret only as a whole value ({from_env: NAME}), not inside a "
            "list: add it to the profile yourself, without the secret in the text",
            occurrence.position,
        )
        return _SKIPPED
    return [_scalar(option, word, context) for word in words]


def _secret_in(word: Word) -> str | None:
    """Why ``word`` holds a secret by its shape or inside it (a URL's password), or None: looked
    at in what the script gives when the whole value is not known (``https://u:pw@$HOST``)."""
    return credentials.why_secret(None, word.text if word.text is not None else word.shown())


def _scalar(option: ArgOption, word: Word, context: _Context) -> Any:
    why = _secret_in(word)
    if why is not None:
        return _secret_ref(word, option.dest.upper(), why, context)
    text = word.text
    if text is None:
        return _placeholder(word, context)
    if option.type == "int" and re.fullmatch(r"[-+]?\d+", text.strip()):
        return int(text)
    if option.type == "float":
        try:
            number = float(text)
        except ValueError:
            return text
        if re.fullmatch(r"[-+]?\d+", text.strip()):
            return int(text)  # 1 stays 1: rendered back as written
        return number if repr(number) == text.strip() else text
    if option.type == "callable:human_readable_int" and text.isdigit():
        return int(text)
    return text


def _secret_placeholder(
    option: ArgOption, path: tuple[str | int, ...], why: str, context: _Context
) -> str:
    """A secret in a field a profile takes as plain text (``model.path``): not written, a
    placeholder instead, said."""
    label = f"{option.flag} without its secret"
    context.unresolved.setdefault(label, None)
    context.note(
        "unresolved",
        f"{option.flag} holds a secret ({why}) and `{'.'.join(map(str, path))}` cannot take it "
        "from the environment: left as a placeholder (edit the profile: the value without its "
        "credential, which the server can read from its environment)",
    )
    return placeholder(label)


def _placeholder(word: Word, context: _Context) -> str:
    for part in word.unresolved:
        label = part.name
        context.unresolved.setdefault(label, None)
        context.note(
            "unresolved",
            f"{part.shown()} is not set by the script: left as a placeholder "
            + (f"(--set {part.name}=VALUE)" if part.kind == "variable" else "(edit the profile)"),
            part.position,
        )
    return "".join(
        part if isinstance(part, str) else placeholder(part.shown()) for part in word.parts
    )


def _secret_ref(
    word: Word, fallback: str, why: str, context: _Context, position: Position | None = None
) -> dict[str, str]:
    """``{from_env: NAME}`` for a secret: NAME is the script's variable when the value came
    from one, else ``fallback`` (the variable or the field), made unique in the profile: two
    different secrets never share a name."""
    match = _VARIABLE_SOURCE_RE.match(word.source)
    name = match.group(1) if match else fallback
    holds = word.text if word.text is not None else word.source
    base, number = name, 1
    while context.references.setdefault(name, holds) != holds:
        number += 1
        name = f"{base}_{number}"
    context.note(
        "secret",
        f"a secret ({why}): written as {{from_env: {name}}}; its value is never written: set "
        f"{name} in your environment when you run orch",
        position or word.position,
    )
    return {"from_env": name}


def _environment(launch: Launch, context: _Context) -> tuple[dict[str, Any], list[Any]]:
    env: dict[str, Any] = {}
    devices: list[Any] = []
    for name, entry in launch.environment.items():
        if name == "CUDA_VISIBLE_DEVICES" and entry.value is not None:
            text = entry.value.text
            if text is not None and re.fullmatch(r"[0-9A-Za-z-]+(,[0-9A-Za-z-]+)*", text):
                devices = [int(d) if d.isdigit() else d for d in text.split(",")]
                continue
        if entry.value is not None and entry.value.parts == (
            Unresolved("variable", name, _at(entry.value)),
        ):
            entry = EnvEntry(None, entry.position, entry.how)  # NAME=$NAME: passed through
        elif entry.value is not None and any(
            p.kind == "variable" and p.name == name for p in entry.value.unresolved
        ):
            context.note(
                "skipped",
                f"not imported: {name}={entry.value.shown()} extends the host's own {name}; a "
                "profile sets values: put the full value in env, or set it in the host's venv",
                entry.position,
            )
            continue
        position = entry.position or launch.position
        if entry.value is None:
            passed = Word((), position, f"${name}")
            env[name] = _secret_ref(passed, name, "passed on from where the script runs", context)
            continue
        value = entry.value
        secret = credentials.why_secret(
            name, value.text if value.text is not None else value.shown()
        )
        if secret is not None:
            env[name] = _secret_ref(value, name, secret, context, position)
            continue
        env[name] = value.text if value.text is not None else _placeholder(value, context)
    if launch.container is not None and launch.container.gpus:
        match = re.search(r"device=([0-9A-Za-z,-]+)", launch.container.gpus)
        if match:
            devices = [int(d) if d.isdigit() else d for d in match.group(1).split(",")]
    if launch.env_cleared and launch.container is None:
        context.note(
            "warning",
            "the script clears the environment (env -i, or sudo without -E): only the variables "
            "it sets itself were imported",
            launch.position,
        )
    return env, devices


def _group(
    members: list[_Member],
    fields: Mapping[str, tuple[Any, ArgOption]],
    host_name: str | None,
    request: ImportRequest,
    context: _Context,
) -> dict[str, Any]:
    nnodes_field = fields.get("nnodes")
    nnodes = nnodes_field[0] if nnodes_field and isinstance(nnodes_field[0], int) else len(members)
    address = fields.get("dist_init_addr")
    said = {
        _rank(m): " ".join(v.shown() for v in m[2].last()["dist_init_addr"].values)
        for m in members
        if "dist_init_addr" in m[2].last()
    }
    if len(set(said.values())) > 1:
        context.note(
            "warning",
            "the ranks name different --dist-init-addr ("
            + ", ".join(f"rank {r}: {a}" for r, a in sorted(said.items()))
            + "): as written they would never meet; orch renders rank 0's host address for "
            "every rank",
        )
    group: dict[str, Any] = {"nodes": []}
    by_rank = {_rank(m): m for m in members}
    common_env: dict[str, Any] | None = None
    per_node: list[dict[str, Any]] = []
    for rank in range(max(nnodes, len(members))):
        member = by_rank.get(rank)
        given = request.rank_hosts[rank] if rank < len(request.rank_hosts) else None
        if member is None:
            why = "the imported script(s) do not start it on a host orch can name"
            group["nodes"].append({"host": given or _rank_host(rank, why, context)})
            per_node.append({})
            continue
        _, launch, _ = member
        if given is not None:
            host = given
        elif launch.remote is not None:
            host = (
                launch.remote.host if launch.remote.known else _unknown_host(launch.remote, context)
            )
        elif rank == 0 and host_name is not None:
            host = host_name
        else:
            host = _rank_host(rank, "the script runs it where it is started", context)
        group["nodes"].append({"host": host})
        env, _ = _environment(launch, context)
        per_node.append(env)
    present = [env for rank, env in enumerate(per_node) if rank in by_rank]
    if present:
        common_env = {k: v for k, v in present[0].items() if all(e.get(k) == v for e in present)}
    for node, env in zip(group["nodes"], per_node, strict=True):
        own = {k: v for k, v in env.items() if (common_env or {}).get(k) != v}
        if own:
            node["env"] = own
    if address is not None and isinstance(address[0], str) and ":" in address[0]:
        head, _, port = address[0].rpartition(":")
        if port.isdigit():
            group["rendezvous_port"] = int(port)
        context.note(
            "canonical",
            f"--dist-init-addr {address[0]}: orch renders it from rank 0's address in hosts.yaml "
            f"({head} here) and group.rendezvous_port",
        )
    return group


def _unknown_host(remote: Remote, context: _Context) -> str:
    """``ssh "$host" ...`` where the script does not say which host (a loop over a file, an
    argument): a placeholder, said."""
    label = remote.host
    context.unresolved.setdefault(label, None)
    context.note(
        "unresolved",
        f"ssh {remote.host}: the script does not say which host; left as a placeholder "
        "(--host NAME names it)",
        remote.command.position,
    )
    return placeholder(label)


def _rank_host(rank: int, why: str, context: _Context) -> str:
    """A placeholder for a rank's host, said."""
    label = f"host of rank {rank}"
    context.unresolved.setdefault(label, None)
    context.note(
        "unresolved",
        f"rank {rank}'s host is a placeholder: {why} (--host H0,H1,... names the ranks' hosts)",
    )
    return placeholder(label)


def _dropped(item: _Found, launch: Launch, context: _Context) -> None:
    for wrapper, position in launch.wrappers:
        reason = _WRAPPER_REASONS.get(wrapper)
        if reason is not None:
            context.note("dropped", f"{wrapper}: {reason}", position)
    for command in (*launch.outer, launch.command):
        if command.background:
            context.note(
                "dropped",
                "&: orch's agent runs the server in the background and supervises it",
                command.position,
            )
        for redirect in command.redirects:
            if redirect.heredoc is not None:
                continue
            target = redirect.target.shown() if redirect.target is not None else ""
            if redirect.operator in (">", ">>", "&>", ">|", "&>>") or (
                redirect.operator == ">&" and not target.isdigit()
            ):
                context.note(
                    "dropped",
                    f"{redirect.descriptor or ''}{redirect.operator} {target}:"
                    " orch keeps a log per "
                    "run under the run's directory and never overwrites an earlier one",
                    redirect.position,
                )
    container = launch.container
    if container is not None:
        kept = [f"--gpus {container.gpus}"] if container.gpus else []
        left = [
            *(f"-p {p}" for p in container.ports),
            *(f"-v {v}" for v in container.volumes),
            *([f"--shm-size {container.shm_size}"] if container.shm_size else []),
            *container.options,
        ]
        context.note(
            "dropped",
            f"docker run {container.image}: the profile runs the server on the host with "
            "hosts.yaml's python"
            + (f" ({', '.join(kept)} read as gpu.devices)" if kept else "")
            + (f"; not carried over: {' '.join(left)}" if left else "")
            + " (a container elsewhere: orch export)",
            container.command.position,
        )
    seen: set[str] = set()
    for script, _ in item.found.scripts:
        for command in script.commands:
            name = posixpath.basename(command.name or "")
            if (
                name in _DROPPED_PROGRAMS
                and name not in seen
                and not _is_launch_command(command, item)
            ):
                seen.add(name)
                context.note("dropped", f"{name}: {_DROPPED_PROGRAMS[name]}", command.position)


def _is_launch_command(command: Command, item: _Found) -> bool:
    return any(command is launch.command for launch in item.found.launches)


# -- --extends ----------------------------------------------------------------------------------

_ARGV_SECTIONS = ("model", "spec_decode", "env", "args")
_DEFAULTS = {"port": 30000, "bind": "127.0.0.1", "launcher": "module"}


def _difference(
    document: dict[str, Any], base: Mapping[str, Any], extends: str, *, host_given: bool
) -> dict[str, Any]:
    """Only what differs from ``base``; a base value the script does not have is removed with
    ``null``, so that the profile renders exactly the script's command."""
    out: dict[str, Any] = {"extends": extends}
    for key, value in document.items():
        if key in _ARGV_SECTIONS or key == "gpu":
            continue
        if key == "host" and not host_given:
            continue
        if base.get(key, _DEFAULTS.get(key)) != value:
            out[key] = value
    for key, default in _DEFAULTS.items():
        if key not in document and base.get(key, default) != default:
            out[key] = default
    gpu = document.get("gpu", {})
    base_gpu = base.get("gpu") or {}
    if gpu.get("devices") != base_gpu.get("devices") and (
        gpu.get("devices") or base_gpu.get("devices")
    ):
        out["gpu"] = {"devices": gpu.get("devices")}
    for section in _ARGV_SECTIONS:
        mine = document.get(section) or {}
        theirs = base.get(section) or {}
        if not isinstance(theirs, Mapping):
            theirs = {}
        changed: dict[str, Any] = {k: v for k, v in mine.items() if theirs.get(k) != v}
        for key in theirs:
            if key not in mine and theirs[key] is not None:
                changed[key] = None
        if section in ("spec_decode",) and not mine and theirs:
            out[section] = None
            continue
        if changed:
            out[section] = changed
    return out


def _at(word: Word) -> Position:
    parts = word.unresolved
    return parts[0].position if parts else word.position
