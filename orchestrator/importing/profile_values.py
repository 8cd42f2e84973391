"""A launch's flags and environment as a profile's values.

Each flag goes under its field name (``--tp`` -> ``tp_size``; the last occurrence wins, as
argparse keeps it; problems become notes), typed as the argument table says; ``env`` holds the
variables the server's environment really gets; ``gpu.devices`` comes from
``CUDA_VISIBLE_DEVICES`` (or ``docker --gpus device=...``). A secret (``credentials``: by name,
place, shape, or inside a URL or JSON) becomes ``{from_env: NAME}``: its value is never written,
nor quoted in a note. A value the script does not determine is a visible ``<unset: NAME>``
placeholder, which validation refuses, until ``--set NAME=VALUE``.

Pure: no I/O.
"""

from __future__ import annotations

import re
from typing import Any

from orchestrator.importing import credentials
from orchestrator.importing.credentials import SECRET_ARGS
from orchestrator.importing.launches import Launch
from orchestrator.importing.profile_notes import ImportContext
from orchestrator.importing.server_arguments import Occurrence, ParsedArguments
from orchestrator.importing.shell_words import Position, Unresolved, Word
from orchestrator.importing.wrappers import EnvEntry
from orchestrator.profile.fields import STRUCTURED_FIELDS
from orchestrator.profile.store import placeholder
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgOption, ArgTable

_VARIABLE_SOURCE_RE = re.compile(r'^"?\$\{?([A-Za-z_][A-Za-z0-9_]*)\}?"?$')


def field_name(option: ArgOption, table: ArgTable) -> str:
    """The ServerArgs field an option sets: ``--tp-size`` -> ``tp_size`` even where the parser's
    dest is ``tensor_parallel_size`` (0.5.11)."""
    for flag in option.flags:
        if flag.startswith("--"):
            name = flag[2:].replace("-", "_")
            if name in table.fields:
                return name
    return option.dest


def profile_fields(
    parsed: ParsedArguments, table: ArgTable, context: ImportContext
) -> dict[str, tuple[Any, ArgOption]]:
    """dest -> (profile value, option), in the script's order; problems become notes."""
    out: dict[str, tuple[Any, ArgOption]] = {}
    for problem in parsed.problems:
        if problem.code == "removed-flag":
            context.note(
                "renamed", f"{problem.message}: imported as its new name", problem.position
            )
        elif problem.code == "replaced-flag":
            context.note(
                "replaced",
                f"{problem.message}: imported as the value it became",
                problem.position,
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
                f"{field_name(option, table)}",
                occurrence.position,
            )
        elif occurrence.written not in option.flags:
            pass  # a removed name read as its new one: said with the problem above
        elif field_name(option, table) != occurrence.written.lstrip("-").replace("-", "_"):
            kind = "a deprecated alias" if option.deprecated else "an alias"
            context.note(
                "canonical",
                f"{occurrence.written} is {kind} in SGLang {table.version}: imported as "
                f"{field_name(option, table)}",
                occurrence.position,
            )
        out.pop(option.dest, None)  # the last occurrence wins, at its own place
        if kept[option.dest] is not occurrence and option.action not in ("append", "count"):
            continue  # (its value is never read: a secret in it gets no name of its own)
        structured = STRUCTURED_FIELDS.get(field_name(option, table))
        secret = next(filter(None, map(_secret_in, occurrence.values)), None)
        if structured is not None and secret is not None:
            out[option.dest] = (_secret_placeholder(option, structured, secret, context), option)
            continue
        value = _value(parsed, occurrence, context)
        if value is not _SKIPPED:
            out[option.dest] = (value, option)
    return out


def _value(parsed: ParsedArguments, occurrence: Occurrence, context: ImportContext) -> Any:
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


def _listed(
    option: ArgOption, words: list[Word], occurrence: Occurrence, context: ImportContext
) -> Any:
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


def _scalar(option: ArgOption, word: Word, context: ImportContext) -> Any:
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
    option: ArgOption, path: tuple[str | int, ...], why: str, context: ImportContext
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


def _placeholder(word: Word, context: ImportContext) -> str:
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
    word: Word, fallback: str, why: str, context: ImportContext, position: Position | None = None
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


def launch_environment(launch: Launch, context: ImportContext) -> tuple[dict[str, Any], list[Any]]:
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


def _at(word: Word) -> Position:
    parts = word.unresolved
    return parts[0].position if parts else word.position
