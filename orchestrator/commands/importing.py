"""``orch import``: read launch scripts, write the profiles they amount to (never over a file
that exists), and validate what was written; ``--check``: the findings only.

The scripts are read here (a path, or ``-`` for standard input); ``script_import`` and
``script_check`` do the work without I/O. Every secret value a script holds (``credentials``:
by name, place, shape or inside a URL or JSON) is handed to the caller for redaction before
anything is shown, and never reaches a written profile: those hold ``{from_env: NAME}``, and the
text written goes through the same Redactor as the output.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from orchestrator.errors import ImportScriptError, InvalidProfile, OrchError, UsageError
from orchestrator.importing import credentials
from orchestrator.importing.profile_notes import Note
from orchestrator.importing.profiles import ImportedProfile, import_scripts
from orchestrator.importing.scripts import ImportRequest, ScriptFile
from orchestrator.profile.store import ProfileStore, valid_name
from orchestrator.profile.yamldoc import dump_yaml
from orchestrator.render import Redactor

STDIN = "-"
MAX_SCRIPT_BYTES = 4 << 20


@dataclass(frozen=True)
class Written:
    profile: ImportedProfile
    path: Path | None  # None: written to standard output
    text: str
    problems: tuple[OrchError, ...]  # what validation says of the written profile


def read_scripts(paths: Sequence[str], stdin_text: str | None) -> list[ScriptFile]:
    files = []
    for path in paths:
        if path == STDIN:
            if stdin_text is None:
                raise UsageError("- (standard input) can be read once", "name the other scripts")
            files.append(ScriptFile("<stdin>", stdin_text))
            stdin_text = None
            continue
        files.append(ScriptFile(path, _read_file(path)))
    return files


def _read_file(path: str) -> str:
    """A regular file, at most MAX_SCRIPT_BYTES. Anything else (a FIFO, which would block
    until a writer comes, a device, a socket, a directory) is refused before it is opened."""
    try:
        # O_NONBLOCK: opening a FIFO with no writer returns at once (and is then refused)
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ImportScriptError(
            f"{path}: cannot read: {exc.strerror or exc}", "name a launch script (a file)"
        ) from exc
    with os.fdopen(descriptor, "rb") as handle:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            raise ImportScriptError(
                f"{path}: not a regular file: orch import reads launch scripts from files",
                "save the script to a file, or pipe it in: orch import - < SCRIPT",
            )
        try:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise ImportScriptError(
                f"{path}: cannot read: {exc.strerror or exc}", "name a launch script (a file)"
            ) from exc
    return _decoded(path, data)


def read_stdin(stream: IO[Any]) -> str:
    """Standard input with the same limit as a file: at most MAX_SCRIPT_BYTES + 1 are read,
    whatever the other side sends."""
    data = stream.read(MAX_SCRIPT_BYTES + 1)
    raw = data.encode("utf-8", "surrogateescape") if isinstance(data, str) else bytes(data)
    return _decoded("- (standard input)", raw)


def _decoded(name: str, data: bytes) -> str:
    if len(data) > MAX_SCRIPT_BYTES:
        raise ImportScriptError(
            f"{name}: larger than {MAX_SCRIPT_BYTES >> 20} MiB: not a launch script",
            "name the script that starts the server",
        )
    return data.decode("utf-8", "surrogateescape")


def parse_settings(settings: Sequence[str]) -> dict[str, str]:
    given: dict[str, str] = {}
    for setting in settings:
        name, equals, value = setting.partition("=")
        if not equals or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*|[1-9][0-9]*", name):
            # quoted as given, but for a secret in it (--set 'HF_TOKEN:hf_...')
            shown = setting
            for hit in credentials.secrets_in(setting):
                shown = shown.replace(hit.value, "<a secret, not shown>")
            raise UsageError(
                f"--set {shown!r}: expected NAME=VALUE", "e.g. --set MODEL=/models/Qwen3.6-27B"
            )
        given[name] = value
    return given


def default_name(files: Sequence[ScriptFile]) -> str:
    stem = Path(files[0].display).stem if files[0].display != "<stdin>" else "imported"
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", stem).strip("-._") or "imported"
    return name[:64]


def run_import(
    files: Sequence[ScriptFile],
    store: ProfileStore,
    *,
    name: str | None,
    host: str | None,
    sglang: str | None,
    given: Mapping[str, str],
    extends: str | None,
    launch: int | None,
    output: str | None,
    redactor: Redactor,
) -> list[Written]:
    name = name or default_name(files)
    if not valid_name(name):
        raise UsageError(
            f"--name {name!r} is not a profile name",
            "letters, digits, '.', '_' and '-', starting with a letter or digit",
        )
    inventory = dict(store.inventory())
    hosts = tuple(host.split(",")) if host is not None else ()
    for each in hosts:
        if each not in inventory:
            raise UsageError(
                f"--host {each!r} is not in {store.root / 'hosts.yaml'}",
                f"hosts: {', '.join(sorted(inventory))}",
            )
    base = store.merged(extends) if extends is not None else None
    request = ImportRequest(
        name=name,
        host=hosts[0] if hosts else None,
        rank_hosts=hosts,
        sglang=sglang,
        given=dict(given),
        launch=launch,
        extends=extends,
        base=base,
        inventory=inventory,
    )
    imported = import_scripts(files, request)
    if output is not None and output != STDIN and len(imported) > 1:
        raise UsageError(
            f"the scripts start {len(imported)} servers: one profile each, -o names one file",
            "leave -o out (each goes to the profiles directory), or pick one with --launch N",
        )
    targets: list[Path | None] = []
    for profile in imported:
        if output == STDIN:
            targets.append(None)
        elif output is not None:
            targets.append(Path(output))
        else:
            targets.append(store.path_of(profile.name))
    existing = [str(t) for t in targets if t is not None and t.exists()]
    if existing:
        raise ImportScriptError(
            f"{', '.join(existing)} already exist{'s' if len(existing) == 1 else ''}: orch "
            "import never overwrites a profile",
            "choose another --name (or -o FILE), or move the old profile away first",
        )
    written = []
    for imported_profile, target in zip(imported, targets, strict=True):
        redactor.add_found(imported_profile.secrets)  # whoever calls: nothing secret is written
        profile = _redacted(imported_profile, redactor)
        text = profile_text(profile)
        if target is not None:
            _create(target, text)
        problems: tuple[OrchError, ...] = ()
        if target is not None and target.parent.resolve() == store.root.resolve():
            problems = _validate(store, profile.name)
        written.append(Written(profile, target, text, problems))
    return written


def _redacted(profile: ImportedProfile, redact: Redactor) -> ImportedProfile:
    """``profile`` with every secret masked in its values and notes, value by value: a mask
    (``<redacted: NAME>``) in a value is then quoted by the YAML writer, where masking the text
    written would leave a plain scalar YAML cannot read."""

    def masked(value: Any) -> Any:
        if isinstance(value, str):
            return redact(value)
        if isinstance(value, dict):
            return {masked(key): masked(item) for key, item in value.items()}
        if isinstance(value, list):
            return [masked(item) for item in value]
        return value

    notes = tuple(
        dataclasses.replace(
            note,
            message=redact(note.message),
            file=None if note.file is None else redact(note.file),
        )
        for note in profile.notes
    )
    return dataclasses.replace(profile, document=masked(profile.document), notes=notes)


def profile_text(profile: ImportedProfile) -> str:
    """The profile's YAML, its notes as comments at the top: what was dropped and why, what
    is still a placeholder."""
    lines = [f"# Written by `orch import`. {_first(profile.notes, 'version')}"]
    for title, kinds in (
        ("LOST (bash never passes these: fix the script):", ("lost",)),
        ("Dropped (orch does this itself):", ("dropped",)),
        ("Unresolved (placeholders `orch validate` refuses until given):", ("unresolved",)),
        ("Read as:", ("canonical", "renamed", "replaced", "default", "secret")),
        ("Check:", ("warning", "host", "skipped")),
    ):
        chosen = [n for n in profile.notes if n.kind in kinds]
        if chosen:
            lines.append(f"# {title}")
            lines.extend(f"#   {_one_line(n.located())}" for n in chosen)
    return "\n".join(lines) + "\n" + dump_yaml(profile.document)


def _first(notes: Sequence[Note], kind: str) -> str:
    return next((n.message for n in notes if n.kind == kind), "")


def _one_line(text: str) -> str:
    return text.replace("\n", "\\n")


def _create(path: Path, text: str) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError as exc:
        raise ImportScriptError(
            f"{path} already exists: orch import never overwrites a profile",
            "choose another --name (or -o FILE)",
        ) from exc
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}", "another -o FILE") from exc
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)


def _validate(store: ProfileStore, name: str) -> tuple[OrchError, ...]:
    try:
        store.load(name)
    except InvalidProfile as exc:
        return tuple(exc.errors)
    except OrchError as exc:
        return (exc,)
    return ()
