"""A real ``argparse`` parser built from an argument table: the oracle that orch's own reading
of SGLang arguments (orchestrator.importing.server_arguments.parse_arguments) is checked against.

SGLang's server parser is a plain ``argparse.ArgumentParser`` (allow_abbrev on); the table holds
each action's flags, nargs, type and action class as read from the real package. Python's own
argparse then decides what a command line means, so a test compares orch with argparse itself,
not with a second copy of orch's rules.

The parser is the product's (``orchestrator.sglang.config.build_parser``: one table->argparse
builder), with two things of the oracle's own on top:

- values typed as SGLang's parser types them where it matters here: ``json.loads`` refuses text
  that is not JSON (the product reads it leniently: the server it looks at already started);
- a renamed flag's old spelling added as an alias of the new field, with the new option's arity
  and action (a profile names the field; orch spells it per version), so a script written for
  an older SGLang reads as the same field. The product reads one release's command line with
  that release's table and has no use for it.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from orchestrator.sglang.argtable import RENAMES, ArgTable
from orchestrator.sglang.config import ArgvUnreadable, Converter, add_option, build_parser

# Custom actions whose arity the table does not say; tests keep them out of generated input.
UNCERTAIN_ACTIONS = frozenset({"custom:DeprecatedStoreConstAction", "custom:DeprecatedAction"})

# SGLang's own conversions for the types whose refusal a command line can show (any other type
# is read as text, as orch's import reads it).
STRICT_TYPES: dict[str | None, Converter] = {
    "int": int,
    "float": float,
    "callable:loads": json.loads,
    "callable:json_list_type": json.loads,
}


class OracleError(Exception):
    """argparse refused the command line (it would exit 2)."""


def oracle_parser(table: ArgTable) -> argparse.ArgumentParser:
    parser = build_parser(table, types=STRICT_TYPES)
    flags = {flag for option in table.options for flag in option.flags}
    for rename in RENAMES:
        old = "--" + rename.old.replace("_", "-")
        new = table.by_dest.get(rename.new)
        if old in flags or new is None:
            continue
        flags.add(old)
        add_option(parser, new, [old], types=STRICT_TYPES)
    return parser


# Built once per table (a parser is not changed by parsing; ~10 ms each).
_PARSERS: dict[int, tuple[ArgTable, argparse.ArgumentParser]] = {}


def _parser(table: ArgTable) -> argparse.ArgumentParser:
    held = _PARSERS.get(id(table))
    if held is None or held[0] is not table:
        held = _PARSERS[id(table)] = (table, oracle_parser(table))
    return held[1]


def parse(table: ArgTable, argv: Sequence[str]) -> dict[str, Any]:
    """dest -> value, as SGLang's argparse would set it; values equal to the table's default
    left out, so that an explicit default and an absent flag compare equal."""
    try:
        namespace = _parser(table).parse_args(list(argv))
    except ArgvUnreadable as exc:
        raise OracleError(str(exc)) from exc
    defaults = {o.dest: o.default for o in table.options}
    return {
        dest: value
        for dest, value in vars(namespace).items()
        if dest not in defaults or value != defaults[dest]
    }
