"""SGLang's command line, rebuilt from orch's argument table of the imitated release.

The tables (the pack in ``<repo>/orchestrator/sglang/argtables/``, or the directory named by
``ORCH_STANDIN_ARGTABLES``) list every argparse action of SGLang's ``sglang serve`` parser and every
ServerArgs field with its default. Building an ``argparse.ArgumentParser(prog="sglang serve")``
from them gives SGLang's own usage text, errors and exit code 2 for free.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

FALLBACK_TABLE_VERSION = "0.5.23"
PROG = "sglang serve"  # even under python -m sglang.launch_server (sglang/srt/server_args.py,
#                       prepare_server_args: ArgumentParser(prog="sglang serve"))


@dataclass(frozen=True)
class Table:
    sglang_version: str
    options: tuple[dict[str, Any], ...]
    fields: dict[str, Any]
    path: Path

    def field_order(self) -> list[str]:
        """ServerArgs fields in declaration order, as near as the table tells it: the order the
        parser adds their options (which follows the dataclass), then fields without an option."""
        order: dict[str, None] = {}
        for option in self.options:
            name = field_for(option, self.fields)
            if name is not None:
                order.setdefault(name, None)
        for name in self.fields:
            order.setdefault(name, None)
        return list(order)

    def field_defaults(self) -> dict[str, Any]:
        """Field defaults in field order, required fields (``model_path``) left out; a factory
        default takes its option's default ([] for the lists)."""
        option_defaults = {o["dest"]: o["default"] for o in reversed(self.options)}
        defaults: dict[str, Any] = {}
        for name in self.field_order():
            value = self.fields[name]
            if isinstance(value, dict) and value.get("required"):
                continue
            if isinstance(value, dict) and value.get("factory"):
                value = option_defaults.get(name)
            defaults[name] = value
        return defaults


def tables_dir() -> Path:
    override = os.environ.get("ORCH_STANDIN_ARGTABLES")
    if override:
        return Path(override)
    # <repo>/standin/sglang/_standin/argtable.py -> <repo>/orchestrator/sglang/argtables; in an
    # installed orch (package data) <site>/orchestrator/standin/sglang/_standin/argtable.py ->
    # <site>/orchestrator/sglang/argtables
    here = Path(__file__).parents[3]
    for candidate in (
        here / "sglang" / "argtables",
        Path(__file__).resolve().parents[3] / "orchestrator" / "sglang" / "argtables",
    ):
        if (candidate / "releases.json").is_file():
            return candidate
    return candidate


def load_table(version: str) -> Table:
    """The release's table from orch's pack (``orchestrator/sglang/argtable_pack.py``: every
    distinct record once, per release the lines it is made of); an unknown release gets the
    fallback's."""
    directory = tables_dir()
    index = json.loads((directory / "releases.json").read_text(encoding="utf-8"))["releases"]
    if version not in index:
        version = FALLBACK_TABLE_VERSION
    entry = index[version]
    option_lines = (directory / "options.jsonl").read_text(encoding="utf-8").splitlines()
    field_lines = (directory / "fields.jsonl").read_text(encoding="utf-8").splitlines()
    options = tuple(json.loads(option_lines[i]) for i in _lines(entry["options"]))
    fields = dict(json.loads(field_lines[i]) for i in _lines(entry["fields"]))
    return Table(
        sglang_version=version, options=options, fields=fields, path=directory / "releases.json"
    )


def _lines(runs: str) -> list[int]:
    """``"0-2,7"`` -> [0, 1, 2, 7]"""
    out: list[int] = []
    for part in filter(None, runs.split(",")):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return out


def field_for(option: dict[str, Any], fields: dict[str, Any]) -> str | None:
    """The ServerArgs field an option sets: its dest, or (0.5.11 ``tensor_parallel_size`` ->
    ``tp_size``) the field one of its flags spells."""
    if option["dest"] in fields:
        return str(option["dest"])
    for flag in option["flags"]:
        name = str(flag).lstrip("-").replace("-", "_")
        if name in fields:
            return name
    return None


# --- SGLang's type callables, under their own names (argparse quotes them in errors) ---


def human_readable_int(value: str) -> int:
    """SGLang's parser: SI suffixes (8k -> 8000, 1M), IEC ones (32Ki -> 32768); case-sensitive."""
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(
                    f"Decimals are not allowed with IEC suffixes like '{suffix}'. "
                    f"Use an integer IEC value such as '{int(Decimal(number))}{suffix}', "
                    f"or an SI value such as '{number}{suffix[0]}'."
                )
            return int(number) * iec[suffix]
        return int(Decimal(number) * si[suffix])
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"Invalid integer value: '{value}'. "
            "Use a plain integer, SI suffixes (1k, 1M), or IEC suffixes (1Ki, 1Mi). "
            "Suffixes are case-sensitive."
        ) from None


def nullable_str(val: str) -> str | None:
    if not val or val == "None":
        return None
    return val


def loads(text: str) -> Any:
    return json.loads(text)


def json_list_type(text: str) -> Any:
    return json.loads(text)


_TYPES: dict[str | None, Callable[[str], Any]] = {
    None: str,
    "str": str,
    "int": int,
    "float": float,
    "callable:human_readable_int": human_readable_int,
    "callable:nullable_str": nullable_str,
    "callable:loads": loads,
    "callable:json_list_type": json_list_type,
}


class _DeprecatedStoreTrue(argparse.Action):
    """SGLang's DeprecatedStoreTrueAction: stores True and prints a yellow notice (stdout)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        kwargs["nargs"] = 0
        super().__init__(option_strings, dest, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, True)
        flag = option_string or self.option_strings[0]
        advice = re.sub(r"^(\[Deprecated\]|Deprecated\.)\s*", "", self.help or "")
        advice = re.sub(r"^Use (\S+) instead\.$", r"Use '\1' instead.", advice)
        notice = f"'{flag}' is deprecated and will be removed in a future release. {advice}"
        sys.stdout.write(f"\033[1;33m{notice.strip()}\033[0m\n")
        sys.stdout.flush()


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and value.get("suppress"):
        return argparse.SUPPRESS
    return value


def _add_option(parser: argparse.ArgumentParser, option: dict[str, Any]) -> None:
    action = str(option["action"])
    flags = list(option["flags"])
    kwargs: dict[str, Any] = {"dest": option["dest"]}
    help_text = str(option.get("help") or "").replace("%", "%%")
    kwargs["help"] = argparse.SUPPRESS if option.get("help_suppressed") else help_text
    default = _decode(option["default"])
    kwargs["default"] = default
    if option.get("required"):
        kwargs["required"] = True
    nargs = option.get("nargs")
    value_type = _TYPES.get(option.get("type"), str)
    choices = option.get("choices")

    if action in {"store_true", "store_false"}:
        kwargs["action"] = action
    elif action in {"store_const", "append_const"} or (
        action.startswith("custom:Deprecated") and nargs == 0 and "StoreTrue" not in action
    ):
        # SGLang's DeprecatedAction / DeprecatedStoreConstAction take no value.
        kwargs["action"] = "append_const" if action == "append_const" else "store_const"
        const = option.get("const")
        kwargs["const"] = True if const is None else const
    elif action == "custom:DeprecatedStoreTrueAction":
        kwargs["action"] = _DeprecatedStoreTrue
    elif action == "custom:BooleanOptionalAction":
        kwargs["action"] = argparse.BooleanOptionalAction
        flags = [flag for flag in flags if not flag.startswith("--no-")]
    elif action == "count":
        kwargs["action"] = "count"
    else:  # store, append, and SGLang's value-taking custom actions (aliases, LoRA paths)
        kwargs["action"] = "append" if action == "append" else "store"
        kwargs["type"] = value_type
        if nargs not in (None, 0):
            kwargs["nargs"] = nargs
        if nargs == "?":
            kwargs["const"] = option.get("const")
        if choices is not None:
            kwargs["choices"] = choices
    parser.add_argument(*flags, **kwargs)


def add_options(parser: argparse.ArgumentParser, table: Table) -> None:
    """Every option of the release's ``sglang serve`` parser (``ServerArgs.add_cli_args``)."""
    for option in table.options:
        _add_option(parser, option)


def field_values(table: Table, namespace: argparse.Namespace) -> dict[str, Any]:
    """The ServerArgs fields argparse set, by field name (``ServerArgs.from_cli_args``; 0.5.11's
    ``--tensor-parallel-size`` lands in ``tp_size``)."""
    values: dict[str, Any] = {}
    for option in table.options:
        name = field_for(option, table.fields)
        if name is not None and hasattr(namespace, option["dest"]):
            values[name] = getattr(namespace, option["dest"])
    return values
