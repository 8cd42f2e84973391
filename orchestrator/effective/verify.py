"""What the server received and what SGLang resolved, compared with the profile field by field.

Pure: the agent gathers the facts on the host (``agent inspect``) and
:mod:`orchestrator.sglang.config` reads SGLang's text back; this module sets the readings against
the rendered plan. Three layers:

- **received**: the server's ``/proc/PID/cmdline``, parsed back into SGLang fields as this
  version's parser reads it, and the environment variables the profile sets, from
  ``/proc/PID/environ``;
- **resolved**: ``/server_info`` (``internal_states[0]`` wins for scheduler-side values) while the
  server answers, else the ``server_args=`` startup line in either format;
- **launch_command** (``/server_info``, SGLang 0.5.20+): the arguments SGLang says it got.

Verdicts per field: ``ok``; ``not-received`` (the profile asked, the process never got it);
``received-other`` (the process got another value: a hand edit or a wrapper); ``overridden``
(received as asked, resolved to another value, with the SGLang log line that explains it when
there is one); ``extra`` (the process got a field the profile does not set); ``env-missing`` and
``env-other`` for environment variables; ``defaulted`` (``--all``: fields left to SGLang that it
filled in); ``lock-drift`` (a field of ``profiles/<name>.lock.json`` the server resolved to
another value). Every verdict but ``ok`` and ``defaulted`` is drift.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.model import Profile, SecretRef
from orchestrator.profile.fields import RequestedField
from orchestrator.remote.agent.sglang_log import log_record
from orchestrator.sglang.argtable import ArgTable, arg_tokens, spell
from orchestrator.sglang.config import (
    ArgvUnreadable,
    ParsedArgs,
    field_name,
    json_or_text,
    parse_arguments,
    sglang_arguments,
)
from orchestrator.sglang.memory.measured import Comparison, MeasuredMemory

OK = "ok"
NOT_RECEIVED = "not-received"
RECEIVED_OTHER = "received-other"
OVERRIDDEN = "overridden"
EXTRA = "extra"
ENV_MISSING = "env-missing"
ENV_OTHER = "env-other"
DEFAULTED = "defaulted"
LOCK_DRIFT = "lock-drift"
UNVERIFIABLE = "unverifiable"  # a secret SGLang shows masked, or not set here: not drift
NOT_SET_HERE = "its from_env variable is not set where orch runs: not compared"
DRIFT = frozenset(
    {NOT_RECEIVED, RECEIVED_OTHER, OVERRIDDEN, EXTRA, ENV_MISSING, ENV_OTHER, LOCK_DRIFT}
)

SECRET_SHOWN = "<secret>"  # noqa: S105 - the mask, not a secret
# How SGLang writes a value it hides in /server_info, its launch_command and its config line
# (sglang/srt/sampling/watermarking/core.py: redact_watermark_command_line, 0.5.23).
SGLANG_MASK = "<redacted>"
# Fields that carry credentials (SGLang shows them as given): never shown, whatever the profile
# says.
SECRET_FIELDS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password"})


class _Absent:
    """A layer that has no value for a field (not the same as a value of None)."""

    _instance: _Absent | None = None

    def __new__(cls) -> _Absent:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "ABSENT"


ABSENT: Any = _Absent()


# -- comparing --------------------------------------------------------------------------------

# 0.5.19+: the flat cuda-graph fields keep the raw input in server_args; the effective values
# live in the nested cuda_graph_config (docs/sglang-facts.md §2).
_CUDA_GRAPH_NESTED: dict[str, tuple[str, str]] = {
    "cuda_graph_max_bs_decode": ("decode", "max_bs"),
    "cuda_graph_bs_decode": ("decode", "bs"),
    "cuda_graph_backend_decode": ("decode", "backend"),
    "cuda_graph_max_bs_prefill": ("prefill", "max_bs"),
    "cuda_graph_bs_prefill": ("prefill", "bs"),
    "cuda_graph_backend_prefill": ("prefill", "backend"),
    "cuda_graph_prefill_max_context": ("prefill", "max_context_size"),
}


def resolved_value(resolved: Mapping[str, Any], name: str) -> Any:
    if name in _CUDA_GRAPH_NESTED and isinstance(resolved.get("cuda_graph_config"), dict):
        phase, key = _CUDA_GRAPH_NESTED[name]
        section = resolved["cuda_graph_config"].get(phase)
        if isinstance(section, dict) and key in section:
            return section[key]
    return resolved.get(name, ABSENT)


def same(want: Any, got: Any) -> bool:
    """Equal after normalisation: numbers given as strings, JSON given as text, lists and
    tuples, paths with redundant slashes; booleans only equal booleans."""
    if want is ABSENT or got is ABSENT:
        return want is got
    if isinstance(want, bool) or isinstance(got, bool):
        return want is got or (isinstance(want, bool) and isinstance(got, bool) and want == got)
    if want is None or got is None:
        return want is got
    if isinstance(want, int | float) or isinstance(got, int | float):
        try:
            return math.isclose(float(want), float(got), rel_tol=1e-9, abs_tol=0.0)
        except (TypeError, ValueError):
            return False
    if isinstance(want, str) and isinstance(got, dict | list):
        return same(json_or_text(want), got) if want.strip()[:1] in "{[" else False
    if isinstance(got, str) and isinstance(want, dict | list):
        return same(got, want)
    if isinstance(want, list | tuple) and isinstance(got, list | tuple):
        return len(want) == len(got) and all(same(a, b) for a, b in zip(want, got, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        return want.keys() == got.keys() and all(same(want[k], got[k]) for k in want)
    if isinstance(want, str) and isinstance(got, str):
        return want == got or (
            _path_like(want) and posixpath.normpath(want) == posixpath.normpath(got)
        )
    return bool(want == got)


def _path_like(text: str) -> bool:
    return text.startswith(("/", "./", "../", "~/"))


@dataclass(frozen=True)
class Observation:
    """What the agent found on the host (see ``agent inspect``)."""

    pid: int | None
    # "orch" (its supervisor), "port" (the listener), "pid" (given), "url" (--url), "" (none)
    found_by: str
    alive: bool
    argv: tuple[str, ...] | None  # /proc/PID/cmdline; None when no process could be read
    env: Mapping[str, str] | None  # only the names asked for; None when not readable
    resolved: Mapping[str, Any] | None
    resolved_source: str  # "/server_info", "/get_server_info", "server_args line", ""
    launch_command: str | None
    log_lines: tuple[str, ...] = ()  # what SGLang logged up to its config line
    log: str | None = None
    notes: tuple[str, ...] = ()
    server_version: str | None = None  # what /server_info says
    memory_lines: tuple[str, ...] = ()  # SGLang's startup memory lines (weights, pools, graphs)
    memory_plan: Mapping[str, Any] | None = None  # what the plan predicted at ``up``


@dataclass(frozen=True)
class FieldRow:
    field: str  # the ServerArgs field, as the running version names it
    requested_as: str | None  # the profile's name when it differs (another version's spelling)
    key_path: str | None  # where the profile sets it
    profile: Any
    received: Any
    resolved: Any
    launch_command: Any
    verdict: str
    why: str | None = None
    secret: bool = False
    locked: Any = ABSENT  # what profiles/<name>.lock.json predicted, when it has the field

    @property
    def drift(self) -> bool:
        return self.verdict in DRIFT


@dataclass(frozen=True)
class EnvRow:
    name: str
    profile: str
    received: str | None
    verdict: str
    secret: bool = False

    @property
    def drift(self) -> bool:
        return self.verdict in DRIFT


@dataclass(frozen=True)
class Report:
    profile: str
    sglang_version: str
    pid: int | None
    found_by: str
    resolved_source: str
    fields: tuple[FieldRow, ...]
    env: tuple[EnvRow, ...]
    notes: tuple[str, ...] = ()
    unknown_received: tuple[str, ...] = field(default_factory=tuple)
    # SGLang's startup memory figures per rank, and the first rank's beside the plan's
    # prediction at launch: information, never drift
    memory_measured: tuple[MeasuredMemory, ...] = ()
    memory_rows: tuple[Comparison, ...] = ()
    memory_predicted: bool = False
    resolved: Mapping[str, Any] | None = None  # all SGLang resolved, when it said (a group's ranks)

    @property
    def drift(self) -> tuple[FieldRow | EnvRow, ...]:
        rows: tuple[FieldRow | EnvRow, ...] = (*self.fields, *self.env)
        return tuple(row for row in rows if row.drift)

    def pinned_drift(self, pins: Iterable[str], table: ArgTable) -> tuple[FieldRow, ...]:
        wanted = set()
        for name in pins:
            spelled = spell(table, name)
            wanted.add(field_name(table, spelled.dest) if spelled else name)
            wanted.add(name)
        return tuple(
            row
            for row in self.fields
            if row.drift and (row.field in wanted or (row.requested_as or "") in wanted)
        )


@dataclass(frozen=True)
class _Expected:
    field: str
    requested_as: str | None
    key_path: str
    value: Any
    given: bool  # whether the value reaches the command line (False: it is the default)
    secret: bool
    unknown: bool = False  # a from_env secret not set where orch runs: cannot be compared
    tokens: tuple[str, ...] = ()  # its argv tokens as rendered (none for a secret)


def expected_fields(
    fields: Sequence[RequestedField], table: ArgTable, secrets: Mapping[str, str]
) -> tuple[_Expected, ...]:
    """The fields the profile sets (``fields``: as the launch read them), typed as SGLang's
    parser types them: each one's tokens, as render writes them, read back by the same parser
    that reads the process's command line."""
    out = []
    for requested in fields:
        spelling = spell(table, requested.name)
        if spelling is None:  # validation refuses these; nothing to compare
            continue
        name = field_name(table, spelling.dest)
        value = requested.value
        secret = isinstance(value, SecretRef)
        unknown = isinstance(value, SecretRef) and value.env_var not in secrets
        typed: Any = ABSENT
        given = unknown  # an unset secret does reach the command line; its value is unknown
        if isinstance(value, SecretRef) and not unknown:
            value = secrets[value.env_var]
        tokens: list[str] = []
        if not unknown:
            tokens = [str(t) for t in arg_tokens(spelling.option, value, spelling.flag)]
            typed = parse_arguments(table, tokens).values.get(name, value) if tokens else value
            given = bool(tokens)
        out.append(
            _Expected(
                field=name,
                requested_as=requested.name if requested.name != name else None,
                key_path=requested.key_path,
                value=typed,
                given=given,
                secret=secret or name in SECRET_FIELDS,
                unknown=unknown,
                tokens=() if secret else tuple(tokens),
            )
        )
    return tuple(out)


def compare(
    profile: Profile,
    table: ArgTable,
    observation: Observation,
    *,
    requested: Sequence[RequestedField],
    env: Mapping[str, str],
    secret_env: frozenset[str],
    secrets: Mapping[str, str],
    include_defaulted: bool = False,
) -> Report:
    """Set the observation against the profile. ``requested``: the SGLang fields it sets (as
    the launch read them); ``env``: the server environment the profile asks for (secrets
    resolved); ``secret_env``: names whose values are never shown."""
    expected = expected_fields(requested, table, secrets)
    received: ParsedArgs | None = None
    notes = list(observation.notes)
    if observation.argv is not None:
        arguments = sglang_arguments(observation.argv)
        if arguments is None:
            notes.append(
                f"pid {observation.pid} is not an SGLang server's command line "
                f"({' '.join(observation.argv[:3])} ...): received not compared"
            )
        else:
            try:
                received = parse_arguments(table, arguments)
            except ArgvUnreadable as exc:
                notes.append(f"the process's command line does not parse: {exc}")
    launched: ParsedArgs | None = None
    if observation.launch_command is not None:
        try:
            launched = parse_arguments(
                table, launch_command_tokens(observation.launch_command, expected)
            )
        except ArgvUnreadable as exc:
            notes.append(f"launch_command does not parse: {exc}")
    resolved = observation.resolved

    rows: list[FieldRow] = []
    for want in expected:
        got = received.values.get(want.field, ABSENT) if received is not None else ABSENT
        effective = resolved_value(resolved, want.field) if resolved is not None else ABSENT
        said = launched.values.get(want.field, ABSENT) if launched is not None else ABSENT
        verdict, why = _field_verdict(want, got, effective, received is not None, observation)
        if (
            verdict in (OK, UNVERIFIABLE)
            and launched is not None
            and want.given
            and not want.unknown
            and not (want.secret and said == SGLANG_MASK)
            and not same(want.value, said)
        ):
            verdict, why = (
                NOT_RECEIVED if said is ABSENT else RECEIVED_OTHER,
                ("SGLang's launch_command " + ("lacks it" if said is ABSENT else f"says {said!r}")),
            )
        rows.append(
            FieldRow(
                field=want.field,
                requested_as=want.requested_as,
                key_path=want.key_path,
                profile=want.value,
                received=got,
                resolved=effective,
                launch_command=said,
                verdict=verdict,
                why=why,
                secret=want.secret,
            )
        )
    asked = {want.field for want in expected}
    if received is not None:
        for name, value in received.values.items():
            if name in asked:
                continue
            rows.append(
                FieldRow(
                    field=name,
                    requested_as=None,
                    key_path=None,
                    profile=ABSENT,
                    received=value,
                    resolved=resolved_value(resolved, name) if resolved is not None else ABSENT,
                    launch_command=ABSENT,
                    verdict=EXTRA,
                    why="on the process's command line, not in the profile",
                    secret=name in SECRET_FIELDS,
                )
            )
    if include_defaulted and resolved is not None:
        given = asked | (set(received.values) if received is not None else set())
        rows.extend(_defaulted(table, resolved, given))

    return Report(
        profile=profile.name,
        sglang_version=table.version,
        pid=observation.pid,
        found_by=observation.found_by,
        resolved_source=observation.resolved_source,
        fields=tuple(rows),
        env=_env_rows(env, observation.env, secret_env, _unset_env(profile, secrets)),
        notes=tuple(notes),
        unknown_received=received.unknown if received is not None else (),
    )


def launch_command_tokens(command: str, expected: Sequence[_Expected]) -> list[str]:
    """``launch_command`` back into tokens. SGLang joins its arguments with spaces, unquoted,
    so a value with a space in it (``--served-model-name qwen chat``) cannot be split back
    alone: where the command holds a value of the profile's exactly as rendered, after the
    token rendered before it, that value is kept whole; the rest splits on whitespace."""
    whole: dict[str, str] = {}
    for want in expected:
        for before, token in itertools.pairwise(want.tokens):
            if token.split() == [token]:
                continue  # no whitespace: splitting finds it as it is
            marker = f"\x00{len(whole)}\x00"
            pattern = re.compile(rf"(?<!\S){re.escape(before)}\s+{re.escape(token)}(?!\S)")
            found = pattern.search(command)
            if found is not None:
                command = f"{command[: found.start()]}{before} {marker}{command[found.end() :]}"
                whole[marker] = token
    return [whole.get(token, token) for token in command.split()]


def compare_lock(report: Report, locked: Mapping[str, Any], resolved: Mapping[str, Any]) -> Report:
    """Add the lock's fields the profile does not set, checked against the resolved values;
    the lock's value is its own (``locked``), never the profile's. A field the profile sets
    shows the lock's prediction beside it."""
    compared = {row.field for row in report.fields if row.verdict != DEFAULTED}
    rows = []
    for name in sorted(locked):
        if name in compared:
            continue
        effective = resolved_value(resolved, name)
        if effective is ABSENT:
            continue  # a field this server does not report: nothing to say
        matches = same(locked[name], effective)
        rows.append(
            FieldRow(
                field=name,
                requested_as=None,
                key_path="lock",
                profile=ABSENT,
                received=ABSENT,
                resolved=effective,
                launch_command=ABSENT,
                verdict=OK if matches else LOCK_DRIFT,
                why=None if matches else "the lock predicted another value",
                secret=name in SECRET_FIELDS,
                locked=locked[name],
            )
        )
    kept = [
        dataclasses.replace(row, locked=locked.get(row.field, ABSENT))
        for row in report.fields
        if not (row.verdict == DEFAULTED and row.field in locked)
    ]
    return dataclasses.replace(report, fields=(*kept, *rows))


def _field_verdict(
    want: _Expected, got: Any, effective: Any, have_received: bool, observation: Observation
) -> tuple[str, str | None]:
    if want.unknown:
        return UNVERIFIABLE, NOT_SET_HERE
    if have_received:
        if got is ABSENT and want.given:
            return NOT_RECEIVED, "absent from the process's command line"
        if got is not ABSENT and not same(want.value, got):
            return RECEIVED_OTHER, "the process's command line has another value"
    if effective is ABSENT:
        if observation.resolved is not None:
            return OK, "not in SGLang's resolved configuration"
        return OK, None if have_received else "nothing to compare"
    if want.secret and effective == SGLANG_MASK:
        return UNVERIFIABLE, "SGLang shows this secret masked: its value cannot be compared"
    if not same(want.value, effective):
        return OVERRIDDEN, explain(want.field, observation.log_lines)
    return OK, None


def _defaulted(table: ArgTable, resolved: Mapping[str, Any], given: set[str]) -> list[FieldRow]:
    rows = []
    for name, default in table.fields.items():
        if name in given or name.startswith("_"):
            continue
        effective = resolved_value(resolved, name)
        if default == {"factory": True}:  # a default_factory: the table cannot show its value
            default = type(effective)() if isinstance(effective, list | dict) else None
        if effective is ABSENT or same(default, effective):
            continue
        rows.append(
            FieldRow(
                field=name,
                requested_as=None,
                key_path=None,
                profile=ABSENT,
                received=ABSENT,
                resolved=effective,
                launch_command=ABSENT,
                verdict=DEFAULTED,
                why=f"parser default {default!r}",
                secret=name in SECRET_FIELDS,
            )
        )
    return rows


def _unset_env(profile: Profile, secrets: Mapping[str, str]) -> frozenset[str]:
    """The profile's env entries whose from_env variable is not set where orch runs."""
    return frozenset(
        name
        for name, value in profile.env.items()
        if isinstance(value, SecretRef) and value.env_var not in secrets
    )


def _env_rows(
    wanted: Mapping[str, str],
    got: Mapping[str, str] | None,
    secret: frozenset[str],
    unset: frozenset[str] = frozenset(),
) -> tuple[EnvRow, ...]:
    if got is None:
        return ()
    rows = []
    for name, value in wanted.items():
        hidden = name in secret or name in unset
        shown = SECRET_SHOWN if hidden else value
        if name in unset:
            received = None if name not in got else SECRET_SHOWN
            rows.append(EnvRow(name, shown, received, UNVERIFIABLE, hidden))
        elif name not in got:
            rows.append(EnvRow(name, shown, None, ENV_MISSING, hidden))
        elif got[name] != value:
            rows.append(
                EnvRow(name, shown, SECRET_SHOWN if hidden else got[name], ENV_OTHER, hidden)
            )
        else:
            rows.append(EnvRow(name, shown, shown, OK, hidden))
    return tuple(rows)


def explain(name: str, log_lines: Sequence[str]) -> str | None:
    """The last line SGLang logged before its config line that speaks of ``name``: by the field
    name (``page_size=1``), its flag (``--max-running-requests``) or its words ("Attention
    backend not specified")."""
    words = name
    for prefix in ("disable_", "enable_"):
        if words.startswith(prefix):
            words = words[len(prefix) :]
    needles = (name, "--" + name.replace("_", "-"), words.replace("_", " "))
    for line in reversed(log_lines):
        logged = log_record(line)
        if logged is None:  # SGLang explains through its logger, nothing else
            continue
        text = logged.message
        lowered = text.lower()
        if any(needle.lower() in lowered for needle in needles):
            return text
    return None


# -- showing ----------------------------------------------------------------------------------


def display(value: Any, secret: bool = False, limit: int = 48) -> str:
    """A value in one line of text, masked when secret, cut at ``limit``."""
    if value is ABSENT:
        return "-"
    if secret:
        return SECRET_SHOWN
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 3] + "..."
