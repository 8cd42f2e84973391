"""SGLang's configuration read back as text: what a server was given and what it resolved.

Pure, like :mod:`orchestrator.effective.verify` (which sets these readings against the profile):

- a command line (``/proc/PID/cmdline``, ``/server_info``'s ``launch_command``) parsed back into
  ServerArgs fields by an argparse parser built from the version's argument table, so
  abbreviations, ``--flag=value``, ``nargs`` and aliases read exactly as SGLang read them;
- the ``server_args=`` startup line in either format (``ServerArgs(...)`` up to 0.5.18, a dict
  from 0.5.19), parsed with :mod:`ast`, never evaluated;
- ``/server_info``, where ``internal_states[0]`` wins for scheduler-side values.
"""

from __future__ import annotations

import argparse
import ast
import json
import posixpath
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.remote.agent.sglang_log import config_line_payload
from orchestrator.sglang.argtable import RENAMES, ArgOption, ArgTable, const_of

# -- the server_args= line and /server_info ---------------------------------------------------


class UnreadableConfig(ValueError):
    """A ``server_args=`` line that is not a literal ServerArgs repr or dict."""


def parse_server_args_line(line: str) -> dict[str, Any] | None:
    """The fields of SGLang's ``server_args=`` startup line, or None when ``line`` is not one
    (a log record of the server whose message starts with ``server_args=``).

    ``ServerArgs(a=1, ...)`` (<= 0.5.18) and ``{'a': 1, ...}`` (>= 0.5.19) both parse with
    ``ast``; values are literals only (``ast.literal_eval``), so nothing in a log is executed.
    """
    body = config_line_payload(line)  # the agent's log vocabulary (agent/sglang_log.py)
    if body is None:
        return None
    try:
        tree = ast.parse(body, mode="eval").body
        if isinstance(tree, ast.Call):
            fields: dict[str, Any] = {}
            for keyword in tree.keywords:
                if keyword.arg is None:
                    raise UnreadableConfig("**kwargs in a ServerArgs repr")
                fields[keyword.arg] = _literal(keyword.value)
            return fields
        value = ast.literal_eval(tree)
    except (SyntaxError, ValueError) as exc:
        raise UnreadableConfig(f"server_args= line is not a literal: {exc}") from exc
    if not isinstance(value, dict):
        raise UnreadableConfig("server_args= line is neither ServerArgs(...) nor a dict")
    return {str(key): item for key, item in value.items()}


def _literal(node: ast.expr) -> Any:
    """A keyword's value; nested reprs of dataclasses (``CudaGraphConfig(...)``) become dicts."""
    if isinstance(node, ast.Call) and not node.args:
        return {str(k.arg): _literal(k.value) for k in node.keywords}
    return ast.literal_eval(node)


def resolved_from_server_info(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``/server_info``'s ServerArgs fields; ``internal_states[0]`` (the scheduler's copy, which
    can differ from the top level after launch) wins where it has the field."""
    merged = dict(payload)
    states = payload.get("internal_states")
    if isinstance(states, list) and states and isinstance(states[0], dict):
        merged.update(states[0])
    return merged


# -- reading a command line back --------------------------------------------------------------


class ArgvUnreadable(ValueError):
    """A command line SGLang's parser would reject (so the server cannot have started with it)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and exit
        raise ArgvUnreadable(message)


def _nullable_str(text: str) -> str | None:
    return None if text.lower() in ("none", "null") else text


def _human_int(text: str) -> int:
    units = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    units.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40})
    for suffix in sorted(units, key=len, reverse=True):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * units[suffix])
    return int(text)


def json_or_text(text: str) -> Any:
    """JSON read from text (SGLang's ``json.loads`` arguments), else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


Converter = Callable[[str], Any]

# How orch reads each type the table names: leniently, since the server already started with it
# (a JSON option's text that is not JSON is kept as text; SGLang itself refused it at startup).
READING_TYPES: Mapping[str | None, Converter] = {
    None: str,
    "str": str,
    "int": int,
    "float": float,
    "callable:human_readable_int": _human_int,
    "callable:nullable_str": _nullable_str,
    "callable:loads": json_or_text,
    "callable:json_list_type": json_or_text,
}


def add_option(
    parser: argparse.ArgumentParser,
    option: ArgOption,
    flags: Sequence[str] | None = None,
    *,
    types: Mapping[str | None, Converter] = READING_TYPES,
) -> None:
    """Declare ``option`` on ``parser`` as SGLang's parser declares it (its arity, action and
    type; its default suppressed), under ``flags`` (default: its own). ``types``: how each of
    the table's types converts a value (a type it does not name is read as text)."""
    common: dict[str, Any] = {"dest": option.dest, "default": argparse.SUPPRESS}
    flags = list(option.flags if flags is None else flags)
    if option.action == "custom:BooleanOptionalAction":
        positive = [f for f in flags if not f.startswith("--no-")]
        parser.add_argument(*positive, action=argparse.BooleanOptionalAction, **common)
    elif option.action in ("store_true", "store_false"):
        parser.add_argument(*flags, action=option.action, **common)
    elif option.action == "store_const" or option.nargs == 0:
        # a deprecated const alias (--disable-piecewise-cuda-graph) stores what its help names
        const = const_of(option)
        const = True if const is None else const
        parser.add_argument(*flags, action="store_const", const=const, **common)
    elif option.action == "count":
        parser.add_argument(*flags, action="count", **common)
    else:
        action = "append" if option.action == "append" else "store"
        extra: dict[str, Any] = {"type": types.get(option.type, str)}
        if option.nargs is not None:
            extra["nargs"] = option.nargs
        if option.nargs == "?":
            extra["const"] = option.const
        parser.add_argument(*flags, action=action, **common, **extra)


def build_parser(
    table: ArgTable, *, types: Mapping[str | None, Converter] = READING_TYPES
) -> argparse.ArgumentParser:
    """An argparse parser that reads SGLang's command line as this version's parser does, with
    every default suppressed: the namespace holds what the command line gave and nothing else.
    Its errors raise ArgvUnreadable (argparse would print and exit)."""
    parser = _Parser(prog="sglang", add_help=False, allow_abbrev=True)
    for option in table.options:
        add_option(parser, option, types=types)
    return parser


# One parser per table, built on first use (~10 ms each; diff-effective reads every field back
# through it): a parser is not changed by parsing, so it is shared. The table is held with it,
# so that its id names it as long as the entry lives.
_PARSERS: dict[int, tuple[ArgTable, argparse.ArgumentParser]] = {}


def _reading_parser(table: ArgTable) -> argparse.ArgumentParser:
    held = _PARSERS.get(id(table))
    if held is None or held[0] is not table:
        held = _PARSERS[id(table)] = (table, build_parser(table))
    return held[1]


def sglang_arguments(argv: Sequence[str]) -> tuple[str, ...] | None:
    """The arguments after ``-m sglang.launch_server`` or ``sglang serve``; None when ``argv``
    is not an SGLang server's command line."""
    for index, word in enumerate(argv):
        token = str(word)
        if token in ("sglang.launch_server", "-msglang.launch_server") and (
            token.startswith("-m") or (index > 0 and argv[index - 1] == "-m")
        ):
            return tuple(argv[index + 1 :])
        if token != "serve" or index == 0:  # noqa: S105 - a subcommand
            continue
        if posixpath.basename(argv[index - 1]) == "sglang" or argv[index - 1] == "sglang.cli.main":
            return tuple(argv[index + 1 :])
    return None


@dataclass(frozen=True)
class ParsedArgs:
    values: dict[str, Any]  # ServerArgs field -> value, only what the command line gave
    unknown: tuple[str, ...]  # tokens SGLang's parser would not recognise


def parse_arguments(table: ArgTable, arguments: Sequence[str]) -> ParsedArgs:
    try:
        namespace, unknown = _reading_parser(table).parse_known_args(list(arguments))
    except argparse.ArgumentError as exc:
        raise ArgvUnreadable(str(exc)) from exc
    values = {field_name(table, dest): value for dest, value in vars(namespace).items()}
    return ParsedArgs(values, tuple(unknown))


def field_name(table: ArgTable, dest: str) -> str:
    """The ServerArgs field an argparse dest sets (``tensor_parallel_size`` -> ``tp_size`` in
    0.5.11; an old alias's dest -> the renamed field)."""
    if dest in table.fields:
        return dest
    for rename in RENAMES:
        if dest == rename.old and rename.new in table.fields:
            return rename.new
    option = table.by_dest.get(dest)
    for flag in option.flags if option else ():
        name = flag.lstrip("-").replace("-", "_")
        if name in table.fields:
            return name
    return dest
