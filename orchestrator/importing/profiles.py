"""A launch script -> a profile: the same server, and a note for everything orch does itself.

Each SGLang launch found in the script (``launches``) becomes a profile document: the model,
speculative decoding, port and bind, ``gpu.devices`` from ``CUDA_VISIBLE_DEVICES`` (or
``docker --gpus device=...``), ``env`` from the variables the server's environment really gets
(exports and prefix assignments on this side, ``-e`` for a container, the remote script's own
for ``ssh``), ``args`` for the rest under their field names. Ranks of one multi-node server
(``--nnodes``/``--node-rank``/``--dist-init-addr``) become a group. A secret (``credentials``: by
name, place, shape, or inside a URL or JSON) becomes ``{from_env: NAME}``: its value is never
written, nor quoted in a note. What orch does itself (``nohup``, ``&``, ``> log``, readiness
polling, ``pkill``) is dropped and said. A value the script does not determine is never guessed:
it is a visible ``<unset: NAME>`` placeholder, which validation refuses, until ``--set NAME=VALUE``.

Here: the SGLang version, the document put together, and ``--extends``. The pieces: ``scripts``
(what is read), ``server_arguments`` (the flags as argparse reads them), ``profile_values``
(flags and environment -> values), ``profile_hosts`` (the host and its hosts.yaml entry),
``profile_groups`` (ranks -> ``group:``), ``profile_notes`` (what is said).

Pure: no I/O; the caller reads the scripts and writes the profile.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.errors import ImportBoundError, ImportScriptError
from orchestrator.importing.budget import BOUNDS
from orchestrator.importing.launches import Launch
from orchestrator.importing.profile_groups import Member, group_ranks, group_section, rank_of
from orchestrator.importing.profile_hosts import host_first, profile_host
from orchestrator.importing.profile_notes import (
    ImportContext,
    Note,
    note_defaults,
    note_dropped,
    note_lost_lines,
)
from orchestrator.importing.profile_values import field_name, launch_environment, profile_fields
from orchestrator.importing.scripts import ImportRequest, ScannedScript, ScriptFile, read_scripts
from orchestrator.importing.server_arguments import first_version_accepting, parse_arguments
from orchestrator.model import Launcher
from orchestrator.profile.fields import STRUCTURED_FIELDS
from orchestrator.profile.store import placeholder
from orchestrator.render import Redactor
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable

# A group's own flags: orch renders them for each rank (gated_launch_port: from group.gate_port).
_GROUP_FIELDS = frozenset({"nnodes", "node_rank", "dist_init_addr", "gated_launch_port"})


@dataclass(frozen=True)
class ImportedProfile:
    """One profile made from the scripts, with what import says about it."""

    name: str
    document: dict[str, Any]
    notes: tuple[Note, ...]
    unresolved: tuple[str, ...]  # names to give with --set
    host_entry: dict[str, Any] | None  # a hosts.yaml entry to add, when the host is not known
    table_version: str
    # every secret the scripts hold, (name, value): for the caller to mask in what it shows
    secrets: tuple[tuple[str, str], ...] = field(default=(), repr=False)


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
    parsed = [
        Member(item, launch, parse_arguments(table, launch.arguments)) for item, launch in launches
    ]
    if request.launch is not None:
        if not 1 <= request.launch <= len(parsed):
            raise ImportScriptError(
                f"--launch {request.launch}: the scripts start {len(parsed)} server(s)",
                "number them from 1, in the order of the scripts",
            )
        parsed = [parsed[request.launch - 1]]
    groups = group_ranks(parsed)
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


def _choose_version(
    launches: Sequence[tuple[ScannedScript, Launch]], request: ImportRequest
) -> _Version:
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
            version,
            None,
            f"not pinned: the script names no SGLang version; its flags are valid for {version} "
            "(the newest orch knows), and the host's version is detected at launch",
        )
    return _Version(
        version,
        version,
        f"pinned to {version}: the newest SGLang whose flags accept this script; set the "
        "host's real version with --sglang",
    )


# -- the profile --------------------------------------------------------------------------------


def _profile(
    name: str,
    members: list[Member],
    table: ArgTable,
    version: _Version,
    request: ImportRequest,
    secrets: Sequence[tuple[str, str]],
) -> ImportedProfile:
    members = sorted(members, key=rank_of)
    item, launch, parsed = members[0]
    redact = Redactor()
    redact.add_found(secrets)
    context = ImportContext(item.file.display, redact=redact)
    note_defaults(item, context)
    context.note("version", version.said)
    note_lost_lines(item, launch, context)
    document: dict[str, Any] = {
        "description": f"imported from {item.file.display}:{launch.position.line} by orch import"
    }
    if version.pin is not None:
        document["sglang"] = version.pin
    host_name, host_entry = profile_host(launch, request, context)
    if launch.launcher is Launcher.SERVE:
        document["launcher"] = "serve"
    fields = profile_fields(parsed, table, context)
    model: dict[str, Any] = {}
    spec: dict[str, Any] = {}
    args: dict[str, Any] = {}
    nnodes = fields.get("nnodes", (1, None))[0]
    grouped = len(members) > 1 or nnodes != 1
    for dest, (value, option) in fields.items():
        path = STRUCTURED_FIELDS.get(field_name(option, table))
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
            args[field_name(option, table)] = value
    if "algorithm" not in spec:  # the section needs its algorithm; else these stay plain args
        args.update({f"speculative_{k}": v for k, v in spec.items()})
        spec = {}
    if not model.get("path"):
        context.note(
            "warning", "the launch gives no --model-path: SGLang requires one", launch.position
        )
        model["path"] = placeholder("model path")
        context.unresolved.setdefault("model path", None)
    env, devices = launch_environment(launch, context)
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
        document["group"] = group_section(members, fields, host_name, request, context)
    else:
        document = {"description": document.pop("description"), **host_first(document, host_name)}
    note_dropped(item, launch, context)
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
