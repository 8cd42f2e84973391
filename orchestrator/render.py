"""Profile -> ServerCommand: one argv tuple and one env map, never a shell string.

The only shell text built here is for people: ``format_command`` (a copy-pasteable command,
every token quoted) and ``launcher_script`` (a bash script from ``templates/`` for reproducing
a launch by hand). Both are checked by tests to give back exactly the command's argv when a real
shell reads them.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import posixpath
import re
import shlex
import urllib.parse
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from orchestrator.errors import RenderError
from orchestrator.model import (
    ArgvToken,
    EnvValue,
    Launcher,
    Profile,
    SecretRef,
    ServerCommand,
)
from orchestrator.profile.fields import RequestedField, requested_fields
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable, BadValue

MODULE = "sglang.launch_server"
LAUNCHER_TEMPLATE = "launch.sh.j2"


def gated(profile: Profile, table: ArgTable) -> Profile:
    """``profile`` with its group's gated launch port made active where ``table``'s SGLang has
    ``--gated-launch-port`` (0.5.19+): every rank renders it, rank 0's supervisor activates the
    gate once every rank has arrived (remote/agent/group/gate.py)."""
    group = profile.group
    if group is None:
        return profile
    port = group.wanted_gate_port if argtable.spell(table, "gated_launch_port") else None
    if port == group.active_gate_port:
        return profile
    return dataclasses.replace(profile, group=dataclasses.replace(group, active_gate_port=port))


def render_members(profile: Profile, table: ArgTable) -> tuple[ServerCommand, ...]:
    """One server command per rank: a profile without a group has one; a group's ranks run the
    same command but for the node's own host, port and env, and ``--node-rank``
    (``requested_fields`` adds ``--dist-init-addr``, ``--nnodes`` and ``--node-rank``)."""
    profile = gated(profile, table)
    return tuple(render(profile.for_rank(rank), table) for rank in range(profile.nnodes))


def render_replicas(profile: Profile, table: ArgTable) -> tuple[ServerCommand, ...]:
    """One server command per replica (``replicas:``): each is the profile as that replica runs
    it (its host, port, env, GPUs), a server of its own."""
    return tuple(
        render(profile.for_replica(index), table) for index in range(len(profile.replicas))
    )


def render(
    profile: Profile, table: ArgTable, fields: Sequence[RequestedField] | None = None
) -> ServerCommand:
    """The server command for ``profile``, with flags spelled for ``table``'s SGLang version.
    ``fields``: the SGLang fields the profile sets, when the caller has read them already (a
    launch reads them once per member, and compares the server with the same ones)."""
    if profile.abstract:
        raise RenderError(
            f"profile {profile.name!r} is abstract (a base for others) and cannot be launched",
            "render a profile that extends it",
        )
    argv: list[ArgvToken] = [*_program(profile)]
    for field in requested_fields(profile) if fields is None else fields:
        spelling = argtable.spell(table, field.name)
        if spelling is None:  # validation rejects these; a stale table is the only way here
            raise RenderError(
                f"{field.key_path}: SGLang {table.version} has no argument {field.name}",
                "run `orch validate`",
            )
        try:
            tokens = argtable.arg_tokens(spelling.option, field.value, spelling.flag)
        except BadValue as exc:
            raise RenderError(f"{field.key_path}: {exc.expected}", exc.hint) from exc
        argv.extend(token if isinstance(token, SecretRef) else str(token) for token in tokens)
    return ServerCommand(
        profile=profile.name,
        sglang_version=profile.sglang_version,
        argtable_version=table.version,
        argv=tuple(argv),
        env=profile.env,
        cwd=posixpath.join(profile.host.workdir, profile.deployment),
        port=profile.port,
    )


def _program(profile: Profile) -> tuple[str, ...]:
    python = profile.host.python or "python3"
    if profile.launcher is Launcher.SERVE:
        # the console script sits beside the venv's interpreter
        sglang = posixpath.join(posixpath.dirname(python), "sglang") if "/" in python else "sglang"
        return (sglang, "serve")
    return (python, "-m", MODULE)


# -- display ------------------------------------------------------------------------------------


def shell_token(token: ArgvToken) -> str:
    """One token for a POSIX shell: literal text quoted, a secret as an expansion of the local
    variable that holds it (so a displayed command never contains the secret itself)."""
    if isinstance(token, SecretRef):
        return f'"${{{token.env_var}:?{token.env_var} is not set}}"'
    if _CONTROL.search(token):
        return _ansi_c_quoted(token)
    return shlex.quote(token)


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _ansi_c_quoted(text: str) -> str:
    """``$'...'`` (bash): control characters as ``\\xHH`` escapes of their UTF-8 bytes, so that
    a script or a pasted command holds no raw control character (a terminal would act on it)
    and still gives the program the exact value."""
    out = []
    for char in text:
        if char in "\\'":
            out.append("\\" + char)
        elif _CONTROL.match(char):
            out += [f"\\x{byte:02x}" for byte in char.encode("utf-8")]
        else:
            out.append(char)
    return "$'" + "".join(out) + "'"


def shell_path(path: str) -> str:
    """A path orch itself expands (``~`` is the login user's home: docs/profiles.md) as a shell
    word: ``"$HOME"/'rest'``, so that the shell expands it the same way; else quoted."""
    if path == "~":
        return '"$HOME"'
    if path.startswith("~/"):
        return '"$HOME"/' + shlex.quote(path[2:])
    return shlex.quote(path)


def format_command(command: ServerCommand, *, multiline: bool = True) -> str:
    """A command to paste into bash: ``NAME=value ... program args``, every token quoted.

    Multi-line output continues lines with `` \\`` and starts each ``--flag`` on its own line.
    """
    words = [f"{name}={shell_token(value)}" for name, value in command.env.items()]
    words += [shell_token(token) for token in command.argv]
    if not multiline:
        return " ".join(words)
    lines: list[list[str]] = [[]]
    for word, token in zip(words, [*command.env, *command.argv], strict=True):
        if isinstance(token, str) and token.startswith("--") and lines[-1]:
            lines.append([])
        lines[-1].append(word)
    return " \\\n    ".join(" ".join(line) for line in lines)


def redacted(value: EnvValue | ArgvToken) -> str:
    return value.display() if isinstance(value, SecretRef) else value


def command_json(command: ServerCommand) -> str:
    """``{"argv": [...], "env": {...}}`` with secrets redacted: a stable format for scripts."""
    document = {
        "argv": [redacted(token) for token in command.argv],
        "env": {name: redacted(value) for name, value in command.env.items()},
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def group_json(profile: Profile, table: ArgTable) -> str:
    """A launch group: its rendezvous and one ``{"rank", "host", "argv", "env"}`` per rank."""
    profile = gated(profile, table)
    commands = render_members(profile, table)
    group = profile.group
    if group is None:
        raise RenderError(f"{profile.name} is not a group", "use command_json")
    document = {
        "group": {
            "nnodes": group.nnodes,
            "rendezvous": group.rendezvous,
            "control_port": group.control_port,
            "gated_launch_port": group.active_gate_port,
        },
        "ranks": [
            {
                "rank": rank,
                "host": node.host.name,
                "argv": [redacted(token) for token in command.argv],
                "env": {name: redacted(value) for name, value in command.env.items()},
            }
            for rank, (node, command) in enumerate(zip(group.nodes, commands, strict=True))
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False)


def rank_differences(commands: tuple[ServerCommand, ...], what: str = "rank") -> list[str]:
    """How each rank's command differs from rank 0's, flag by flag and variable by variable:
    what a reader checks to see that the ranks agree apart from what must differ. ``what``:
    ``replica`` for a profile's replicas."""
    first = commands[0]
    base_flags = _flags(first.argv)
    out: list[str] = []
    for rank, command in enumerate(commands[1:], start=1):
        flags = _flags(command.argv)
        for flag in dict.fromkeys([*base_flags, *flags]):
            if base_flags.get(flag) != flags.get(flag):
                out.append(
                    f"{what} {rank}: {flag} {flags.get(flag, '(absent)')} "
                    f"({what} 0: {base_flags.get(flag, '(absent)')})"
                )
        for name in dict.fromkeys([*first.env, *command.env]):
            mine, theirs = command.env.get(name), first.env.get(name)
            if mine != theirs:
                out.append(
                    f"{what} {rank}: {name}={redacted(mine) if mine is not None else '(unset)'} "
                    f"({what} 0: {redacted(theirs) if theirs is not None else '(unset)'})"
                )
    return out


def _flags(argv: tuple[ArgvToken, ...]) -> dict[str, str]:
    """``--flag`` -> its value tokens joined (the program's own tokens under ``argv[0]``)."""
    flags: dict[str, list[str]] = {}
    current = "(program)"
    flags[current] = []
    for token in argv:
        text = redacted(token)
        if text.startswith("--"):
            current = text
            flags[current] = []
        else:
            flags[current].append(text)
    return {flag: " ".join(values) for flag, values in flags.items()}


def launcher_script(command: ServerCommand) -> str:
    """A bash script that starts exactly ``command`` (jinja2, StrictUndefined, every token
    quoted), from the template shipped as package data (orchestrator/templates/).

    jinja2 is imported here, not at module level: ``orch render`` without ``--script`` and
    ``orch validate`` do not pay for it.
    """
    import importlib.resources

    import jinja2

    quote: Callable[[ArgvToken], str] = shell_token
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # noqa: S701 - shell text, not HTML; every token goes through shq
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    environment.filters["shq"] = quote
    environment.filters["shpath"] = shell_path
    source = importlib.resources.files("orchestrator") / "templates" / LAUNCHER_TEMPLATE
    try:
        template = environment.from_string(source.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise RenderError(
            f"launcher template {LAUNCHER_TEMPLATE} is missing from orch's package data",
            "reinstall orch: the wheel ships orchestrator/templates/",
        ) from exc
    return template.render(
        profile=command.profile,
        sglang_version=command.sglang_version
        or f"unpinned (flags spelled for {command.argtable_version})",
        cwd=command.cwd,
        env=list(command.env.items()),
        argv=list(command.argv),
    )


# -- secrets ------------------------------------------------------------------------------------


def resolve_secrets(
    command: ServerCommand, environ: Mapping[str, str], *, unset: str | None = None
) -> tuple[tuple[str, ...], dict[str, str], dict[str, str]]:
    """The concrete argv and env for a launch, with each ``{from_env: NAME}`` read from
    ``environ`` (the local environment), and the secrets read (name -> value) for redaction.
    A variable that is not set is an error, or, given ``unset``, that placeholder (for commands
    that compare a secret they cannot read as unverifiable)."""
    missing = [name for name in command.secret_names() if not environ.get(name)]
    if missing and unset is None:
        raise RenderError(
            f"profile {command.profile!r} takes {', '.join(missing)} from your environment, "
            "but it is not set",
            f"export {missing[0]}=... in the shell that runs orch (it is never stored)",
        )

    def concrete(token: ArgvToken) -> str:
        if isinstance(token, SecretRef):
            return environ.get(token.env_var) or unset or ""
        return token

    argv = tuple(concrete(token) for token in command.argv)
    env = {name: concrete(value) for name, value in command.env.items()}
    secrets = {name: environ[name] for name in command.secret_names() if name not in missing}
    return argv, env, secrets


class Redactor:
    """Replaces secret values in any text orch shows (server logs echo arguments, for one).

    A command adds the secrets it reads (``add``); the CLI writes every byte of its output,
    errors included, through one Redactor: one place, so that no command can forget it. Each
    secret is also looked for as JSON, Python repr, shell quoting and URL encoding would write
    it, nested up to three deep (SGLang logs its config as a repr, orch's ``--json`` writes that
    line as JSON), and a secret of several lines line by line; ``RedactingStream`` (cli/output.py)
    holds back a tail that could be the start of one, so that a secret split across two writes
    is still replaced whole.

    ``add_found`` takes the secrets a classifier found in a launch script (orch import): every
    value, however many share a name (``--api-key`` given twice). Those are guesses from text,
    not values orch was given, so a short one is masked only where it stands alone (not inside
    a word or a path: ``--api-key abc123`` is masked, ``/data/abc1234`` is not) and one too
    short to be any credential (``MIN_FOUND_SECRET``) not at all: masking ``eva`` would mangle
    every word that holds it. Import never writes or quotes such a value itself (it writes
    ``{from_env: NAME}``), so nothing is left for the mask to catch."""

    def __init__(self, secrets: Mapping[str, str] | None = None) -> None:
        self._secrets: dict[str, str] = {}
        self._found: dict[str, str] = {}  # a found secret value -> the name it is masked as
        self._groups: list[_SecretForms] = []
        self._alone: list[tuple[str, re.Pattern[str], str]] = []
        self._starts: dict[str, _Starts] = {}
        self.add(secrets or {})

    def add(self, secrets: Mapping[str, str]) -> None:
        fresh = {name: value for name, value in secrets.items() if value}
        if fresh.items() <= self._secrets.items():
            return
        self._secrets.update(fresh)
        self._rebuild()

    def add_found(self, secrets: Iterable[tuple[str, str]]) -> None:
        """(name, value) pairs found in a script; each value is masked as ``<redacted: name>``."""
        fresh = [
            (name, value)
            for name, value in secrets
            if len(value) >= MIN_FOUND_SECRET and value not in self._found
        ]
        if not fresh:
            return
        for name, value in fresh:
            self._found.setdefault(value, name)
        self._rebuild()

    def _rebuild(self) -> None:
        groups: list[_SecretForms] = []
        for name, value in self._secrets.items():
            mask = f"<redacted: from_env {name}>"
            groups.append(_SecretForms.of(value, mask))
            if "\n" in value:
                groups += [
                    _SecretForms.of(line, mask)
                    for line in value.splitlines()
                    if len(line.strip()) >= MIN_LINE_OF_SECRET
                ]
        given = set(self._secrets.values())
        alone: dict[str, str] = {}
        for value, name in self._found.items():
            if value in given:
                continue  # masked as the value orch was given
            if len(value) >= FOUND_SECRET_ANYWHERE:
                groups.append(_SecretForms.of(value, f"<redacted: {name}>"))
            else:
                alone.setdefault(value, f"<redacted: {name}>")
        # a secret that contains another is replaced whole: the longest secret's forms first
        self._groups = sorted(groups, key=lambda group: -group.size)
        self._alone = [
            (value, re.compile(rf"(?<![\w/-]){re.escape(value)}(?![\w/-])"), mask)
            for value, mask in sorted(alone.items(), key=lambda pair: -len(pair[0]))
        ]
        by_first: dict[str, list[str]] = {}
        for group in self._groups:
            for form, _ in group.forms:
                by_first.setdefault(form[0], []).append(form)
        for value in alone:
            by_first.setdefault(value[0], []).append(value)
        self._starts = {first: _Starts.of(forms) for first, forms in by_first.items()}

    def __call__(self, text: str) -> str:
        for group in self._groups:
            if group.anchor is not None and group.anchor not in text:
                continue  # every form holds the anchor: none of them is in the text
            for value, mask in group.forms:
                if value in text:
                    text = text.replace(value, mask)
        for value, pattern, mask in self._alone:
            if value in text:
                text = pattern.sub(mask.replace("\\", "\\\\"), text)
        return text

    def unsafe_tail(self, text: str) -> int:
        """How many characters at the end of ``text`` (already redacted) could be the start of
        a secret that the next write completes: hold them back until then."""
        longest = 0
        for first, starts in self._starts.items():
            # the earliest place in the last (longest form - 1) characters where a form begins
            at = text.find(first, max(0, len(text) - starts.longest + 1))
            while at != -1 and len(text) - at > longest:
                if starts.could_begin(text[at:]):
                    longest = len(text) - at
                    break
                at = text.find(first, at + 1)
        return longest


# A found secret (Redactor.add_found) shorter than this is no credential, and too common a text
# to mask; one shorter than FOUND_SECRET_ANYWHERE is masked only where it stands alone.
MIN_FOUND_SECRET = 4
FOUND_SECRET_ANYWHERE = 8
MIN_LINE_OF_SECRET = 6  # a line of a multi-line secret shorter than this is too common to mask
MAX_NESTING = 3  # encodings applied one inside another: a repr, logged as JSON, inside JSON
MIN_ANCHOR = 4  # a shorter run of plain characters is too common to skip a secret's forms by


@dataclass(frozen=True)
class _SecretForms:
    """One secret's written forms (longest first), each with its mask, and the longest run of
    characters that no encoding changes (letters, digits, ``_``, ``-``): every form holds it,
    so a text without it holds none of them."""

    size: int
    anchor: str | None
    forms: tuple[tuple[str, str], ...]

    @classmethod
    def of(cls, value: str, mask: str) -> _SecretForms:
        forms = sorted(_written_forms(value), key=len, reverse=True)
        anchor = max(_PLAIN_RUN.findall(value), key=len, default="")
        return cls(
            size=len(value),
            anchor=anchor if len(anchor) >= MIN_ANCHOR else None,
            forms=tuple((form, mask) for form in forms),
        )


@dataclass(frozen=True)
class _Starts:
    """The forms that begin with one character, for finding a tail that could begin one: their
    proper prefixes up to SHORT_PREFIX characters in a set (one look-up rules out most tails),
    the forms themselves for a longer tail."""

    longest: int
    short: frozenset[str]
    forms: tuple[str, ...]

    @classmethod
    def of(cls, forms: list[str]) -> _Starts:
        short = {
            form[:size] for form in forms for size in range(1, min(len(form), SHORT_PREFIX + 1))
        }
        return cls(max(len(form) for form in forms), frozenset(short), tuple(forms))

    def could_begin(self, tail: str) -> bool:
        """``tail`` is a proper prefix of one of the forms."""
        if tail[:SHORT_PREFIX] not in self.short:
            return False
        if len(tail) <= SHORT_PREFIX:
            return True
        return any(len(form) > len(tail) and form.startswith(tail) for form in self.forms)


SHORT_PREFIX = 32
_PLAIN_RUN = re.compile(r"[A-Za-z0-9_-]+")

# How a value may be written where orch shows it, each applied to the others' results.
_ENCODINGS: tuple[Callable[[str], str], ...] = (
    lambda text: json.dumps(text)[1:-1],
    lambda text: json.dumps(text, ensure_ascii=False)[1:-1],
    lambda text: repr(text)[1:-1],
    lambda text: text.encode("unicode_escape").decode("ascii"),
    lambda text: text.replace("\\", "\\\\").replace('"', '\\"'),  # in "..." for a shell
    lambda text: text.replace("\\", "\\\\").replace("'", "\\'"),
    lambda text: urllib.parse.quote(text, safe=""),
    lambda text: urllib.parse.quote_plus(text, safe=""),
)


def _written_forms(value: str) -> set[str]:
    """``value`` as it may appear in a log: itself and every nesting of up to MAX_NESTING
    encodings (JSON, repr, unicode escapes, shell quoting, URL encoding)."""
    forms = {value}
    frontier = {value}
    for _ in range(MAX_NESTING):
        frontier = {encode(form) for form in frontier for encode in _ENCODINGS} - forms
        forms |= frontier
    forms.discard("")
    return forms


def launch_digest(*commands: ServerCommand) -> str:
    """A short digest of what the servers receive (secrets as references, not values): of a
    group, every rank's command, so that every node carries the group's one digest."""
    text = "\n".join(command_json(command) for command in commands)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def replicas_json(profile: Profile, commands: Sequence[ServerCommand]) -> str:
    """Replicas: one ``{"replica", "deployment", "host", "port", "argv", "env"}`` each."""
    document = {
        "replicas": [
            {
                "replica": index,
                "deployment": replica.deployment,
                "host": replica.host.name,
                "port": replica.port,
                "argv": [redacted(token) for token in command.argv],
                "env": {name: redacted(value) for name, value in command.env.items()},
            }
            for index, command in enumerate(commands)
            for replica in (profile.for_replica(index),)
        ],
    }
    return json.dumps(document, indent=2, ensure_ascii=False)
