"""A real ``argparse`` parser built from an argument table: the oracle that orch's own reading
of SGLang arguments (orchestrator.importing.server_arguments.parse_arguments) is checked against.

SGLang's server parser is a plain ``argparse.ArgumentParser`` (allow_abbrev on); the table holds
each action's flags, nargs, type and action class as read from the real package. Python's own
argparse then decides what a command line means, so a test compares orch with argparse itself,
not with a second copy of orch's rules. A renamed flag's old spelling is added as an alias of the
new field (a profile names the field; orch spells it per version), so a script written for an
older SGLang reads as the same field.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from typing import Any

from orchestrator.sglang.argtable import RENAMES, ArgOption, ArgTable, const_of

# Custom actions whose arity the table does not say; tests keep them out of generated input.
UNCERTAIN_ACTIONS = frozenset({"custom:DeprecatedStoreConstAction", "custom:DeprecatedAction"})


class OracleError(Exception):
    """argparse refused the command line (it would exit 2)."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse exits; the oracle raises
        raise OracleError(message)


def _converter(option: ArgOption) -> Callable[[str], Any]:
    if option.type == "int":
        return int
    if option.type == "float":
        return float
    if option.type in ("callable:loads", "callable:json_list_type"):
        return json.loads
    return str


def _kwargs(option: ArgOption, flags: list[str]) -> tuple[list[str], dict[str, Any]]:
    """The flags and ``add_argument`` keywords of one option, as SGLang's parser declares it."""
    kwargs: dict[str, Any] = {"dest": option.dest, "default": argparse.SUPPRESS}
    if option.action in ("store_true", "custom:DeprecatedStoreTrueAction"):
        kwargs["action"] = "store_true"
    elif option.action == "store_false":
        kwargs["action"] = "store_false"
    elif option.action == "custom:BooleanOptionalAction":
        flags = [f for f in flags if not f.startswith("--no-")]
        kwargs["action"] = argparse.BooleanOptionalAction
    elif option.action in ("store_const", "custom:DeprecatedStoreConstAction"):
        kwargs.update(action="store_const", const=const_of(option))
    elif option.action == "count":
        kwargs["action"] = "count"
    elif option.action == "append":
        kwargs.update(action="append", type=_converter(option))
    elif option.nargs == 0:
        kwargs.update(action="store_const", const=True)
    else:
        kwargs["type"] = _converter(option)
        if option.nargs is not None:
            kwargs["nargs"] = option.nargs
    return flags, kwargs


def build_parser(table: ArgTable, *, with_renames: bool = True) -> argparse.ArgumentParser:
    parser = _Parser(prog="sglang", add_help=False, allow_abbrev=True)
    seen: set[str] = set()
    for option in table.options:
        flags = [f for f in option.flags if f not in seen]
        if not flags:
            continue
        seen.update(flags)
        flags, kwargs = _kwargs(option, flags)
        parser.add_argument(*flags, **kwargs)
    if with_renames:
        for rename in RENAMES:
            old = "--" + rename.old.replace("_", "-")
            new = table.by_dest.get(rename.new)
            if old in seen or new is None:
                continue
            seen.add(old)
            # the old spelling takes what the new option takes (its arity, its action)
            (alias,), kwargs = _kwargs(new, [old])
            parser.add_argument(alias, **kwargs)
    return parser


def parse(table: ArgTable, argv: Sequence[str]) -> dict[str, Any]:
    """dest -> value, as SGLang's argparse would set it; values equal to the table's default
    left out, so that an explicit default and an absent flag compare equal."""
    namespace = build_parser(table).parse_args(list(argv))
    defaults = {o.dest: o.default for o in table.options}
    return {
        dest: value
        for dest, value in vars(namespace).items()
        if dest not in defaults or value != defaults[dest]
    }
