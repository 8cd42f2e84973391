"""A launch script -> a profile: the same server, and a note for everything orch does itself.

Each SGLang launch found in the script (``launches.py``) becomes a profile document: the model,
speculative decoding, port and bind, ``gpu.devices`` from ``CUDA_VISIBLE_DEVICES`` (or
``docker --gpus device=...``), ``env`` from the variables the server's environment really gets
(exports and prefix assignments on this side, ``-e`` for a container, the remote script's own
for ``ssh``), ``args`` for the rest under their field names. Ranks of one multi-node server
(``--nnodes``/``--node-rank``/``--dist-init-addr``) become a group. Tokens become ``{from_env:
NAME}``: a value is never written. What orch does itself (``nohup``, ``&``, ``> log``, readiness
polling, ``pkill``) is dropped and said. A value the script does not determine is never guessed:
it is a visible ``<unset: NAME>`` placeholder, which validation refuses, until ``--set NAME=VALUE``.

Pure: no I/O; the caller reads the scripts and writes the profile.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator import argtable
from orchestrator.argtable import ArgOption, ArgTable
from orchestrator.errors import ImportBoundError, ImportScriptError
from orchestrator.import_budget import BOUNDS, WorkBudget
from orchestrator.launches import (
    EnvEntry,
    Found,
    Launch,
    Occurrence,
    ParsedArguments,
    Remote,
    find_launches,
    first_version_accepting,
    parse_arguments,
)
from orchestrator.model import Launcher
from orchestrator.profile import placeholder
from orchestrator.profile_checks import STRUCTURED_FIELDS
from orchestrator.script_breaks import file_breaks, launch_breaks
from orchestrator.shellscript import Command, Position, Script, Unresolved, Word, parse_script

SECRET_NAME_RE = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D|API_?KEY|ACCESS_KEY|CREDENTIAL|_KEY$)", re.I
)
SECRET_VALUE_RE = re.compile(
    r"^(hf_[A-Za-z0-9]{8,}|sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{8,})"
)
# What a setting holds, never a credential: FP8_PER_TOKEN=1, MAX_TOKENS=4096 are settings.
_SETTING_VALUE_RE = re.compile(r"^(-?\d+(\.\d+)?|true|false|yes|no|on|off|none|auto)$", re.I)


def is_secret(name: str, text: str | None) -> bool:
    """A credential by its value (hf_..., sk-...), or by its name (HF_TOKEN, API_KEY) when the
    value could be one: unknown here, or 8+ characters that are not a number or a switch."""
    if text is not None and SECRET_VALUE_RE.match(text):
        return True
    if not SECRET_NAME_RE.search(name):
        return False
    return text is None or (len(text) >= 8 and not _SETTING_VALUE_RE.match(text))


SECRET_ARGS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password"})
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

    def note(self, kind: str, message: str, position: Position | None = None) -> None:
        entry = Note(kind, message, self.file, position)
        if entry not in self.notes:
            self.notes.append(entry)


@dataclass(frozen=True)
class _Found:
    file: ScriptFile
    script: Script
    found: Found


def read_scripts(files: Sequence[ScriptFile], given: Mapping[str, str]) -> list[_Found]:
    """Each script walked and its launches found, all within one budget of work."""
    budget = WorkBudget()
    out = []
    for file in files:
        budget.file = file.display
        script = parse_script(file.text, given=given, budget=budget)
        out.append(_Found(file, script, find_launches(script)))
    return out


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
    out: list[ImportedProfile] = []
    for number, members in enumerate(groups, start=1):
        name = request.name if len(groups) == 1 else f"{request.name}-{number}"
        out.append(_profile(name, members, table, version, request))
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
    name: str, members: list[_Member], table: ArgTable, version: _Version, request: ImportRequest
) -> ImportedProfile:
    members = sorted(members, key=_rank)
    item, launch, parsed = members[0]
    context = _Context(request, item.file.display)
    for default in item.script.defaults:
        context.note(
            "default",
            f"${{{default.name}}} is not set by the script: its default {default.value!r} was "
            f"taken (--set {default.name}=VALUE for another)",
            default.position,
        )
    for script, _ in item.found.scripts:
        for choice in script.choices:
            if choice.taken is not None:
                context.note(
                    "default",
                    f"{choice.name} is set only when a condition holds: its value "
                    f"{choice.taken!r} was taken (--set {choice.name}=VALUE for another)",
                    choice.position,
                )
            else:
                context.note(
                    "unresolved",
                    f"{choice.name} depends on a condition orch does not evaluate "
                    f"({' or '.join(choice.values)}): not guessed "
                    f"(--set {choice.name}=VALUE)",
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
        value = _value(parsed, occurrence, context)
        out.pop(option.dest, None)  # the last occurrence wins, at its own place
        out[option.dest] = (value, option)
    return out


def _value(parsed: ParsedArguments, occurrence: Occurrence, context: _Context) -> Any:
    option = occurrence.option
    action = option.action
    if action == "count":
        return len(parsed.appended(option.dest))
    if action == "append":
        return [_scalar(option, v, context) for o in parsed.appended(option.dest) for v in o.values]
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
        return [_scalar(option, v, context) for v in occurrence.values]
    if option.dest in SECRET_ARGS:
        return _secret_ref(occurrence.values[0], option.dest.upper(), context)
    return _scalar(option, occurrence.values[0], context)


def _scalar(option: ArgOption, word: Word, context: _Context) -> Any:
    text = word.text
    if text is None:
        return _placeholder(word, context)
    if SECRET_VALUE_RE.match(text):
        return _secret_ref(word, option.dest.upper(), context)
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


def _secret_ref(word: Word, fallback: str, context: _Context) -> dict[str, str]:
    match = _VARIABLE_SOURCE_RE.match(word.source)
    name = match.group(1) if match else fallback
    context.note(
        "secret",
        f"a secret: written as {{from_env: {name}}}; its value is never written: set {name} in "
        "your environment when you run orch",
        word.position,
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
        if entry.value is None or is_secret(name, entry.value.text):
            if (
                entry.value is not None
                and not SECRET_NAME_RE.search(name)
                and entry.value.text is None
            ):
                env[name] = _placeholder(entry.value, context)
                continue
            source = entry.value.source if entry.value is not None else f"${name}"
            env[name] = _secret_ref(
                Word((), entry.position or launch.position, source), name, context
            )
            continue
        text = entry.value.text
        env[name] = text if text is not None else _placeholder(entry.value, context)
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


_SECRET_FLAGS = ("--api-key", "--admin-api-key", "--ssl-keyfile-password")


def script_secrets(files: Sequence[ScriptFile], given: Mapping[str, str]) -> dict[str, str]:
    """Every secret value the scripts hold (a token assigned or passed, an ``--api-key``), by a
    name for redaction: the caller masks them in everything it shows."""
    found: dict[str, str] = {}

    def take(name: str, text: str | None) -> None:
        if text and is_secret(name, text):
            found.setdefault(name, text)

    for item in read_scripts(files, given):
        for script, _ in item.found.scripts:
            for name, variable in script.variables.items():
                take(name, variable.value.text if variable.value is not None else None)
            for command in script.commands:
                for name, word in command.prefix:
                    take(name, word.text)
                words = [w.text or "" for w in command.words]
                for index, text in enumerate(words):
                    name, equals, value = text.partition("=")
                    if equals and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                        take(name, value)  # docker -e NAME=value, env NAME=value
                    elif SECRET_VALUE_RE.match(text):
                        take(f"token in {item.file.display}", text)
                    if text in _SECRET_FLAGS and index + 1 < len(words):
                        found.setdefault(text[2:].upper().replace("-", "_"), words[index + 1])
                    elif equals and name in _SECRET_FLAGS and value:
                        found.setdefault(name[2:].upper().replace("-", "_"), value)
    return {name: value for name, value in found.items() if value}
