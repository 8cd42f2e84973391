"""Dump SGLang's server CLI argument table as JSON, from the installed sglang.

``scripts/argtables.py build VERSION...`` (``make argtables``) runs it for each release under
the python of a venv where ``import sglang`` is that release, and stores its output in orch's
pack (``orchestrator/sglang/argtables/``, ``orchestrator/sglang/argtable_pack.py``). By hand::

    scripts/build-sglang-venv.sh 0.5.11
    ~/.cache/orch/sglang-venvs/0.5.11/bin/python scripts/gen_sglang_argtable.py --out /tmp/t

It writes ``<out>/sglang-<version>.json``.  The parser is built the way
SGLang's own ``prepare_server_args()`` builds it -- ``argparse.ArgumentParser(
prog="sglang serve")`` then ``ServerArgs.add_cli_args(parser)`` -- in every
release from 0.5.11 to 0.5.23 (in 0.5.12+ ``add_cli_args`` delegates most
options to ``srt/arg_groups/``; the walk over ``parser._actions`` sees them all
the same).  The script checks that ``prepare_server_args`` still wires the
parser that way and warns (``--strict``: fails) when it does not.

Only the standard library and sglang are imported: this runs inside the SGLang
venv, never inside orch.  The output is deterministic: sorted keys, no paths,
no timestamps, memory addresses stripped from reprs, and ``SGLANG_*`` /
``SGL_*`` environment variables (some of which change choices or defaults)
removed before sglang is imported unless ``--keep-env`` is given.

Schema (``"schema": 1``)::

    {"schema": 1, "sglang_version": "...", "python": "3.11.7",
     "generated_by": "scripts/gen_sglang_argtable.py",
     "options": [  # one per argparse action, parser order, help action skipped
       {"dest", "flags", "action", "type", "choices", "nargs", "const",
        "default", "required", "help_suppressed", "deprecated", "help"}],
     "fields": {"<ServerArgs field>": <default>}}

Value encoding: JSON values as they are; anything else ``{"repr": "..."}``;
``argparse.SUPPRESS`` ``{"suppress": true}``; a field default made by a
factory ``{"factory": true}``; a field with no default ``{"required": true}``.

Notes: "action" names argparse's own classes by their keyword (store,
store_true, ...) and everything else ``custom:<ClassName>``, argparse's
``BooleanOptionalAction`` included; "nargs" is argparse's value, so flags that
take no value (store_true, Deprecated*Action) show 0; choices held in a set
are sorted; "deprecated" is argparse's own flag (3.13+), a ``Deprecated*``
action class (SGLang's DeprecatedAction / DeprecatedStoreTrueAction /
DeprecatedStoreConstAction / DeprecatedAliasStoreAction), or help that calls
the option itself deprecated ("Deprecated. ...", "[Deprecated] ...",
"Note: --flag is deprecated now.") -- not help that merely mentions another
deprecated flag.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import inspect
import json
import math
import os
import re
import sys
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
GENERATED_BY = "scripts/gen_sglang_argtable.py"
HELP_LIMIT = 300

# argparse's own Action classes, by exact class (subclasses are "custom:").
_BUILTIN_ACTIONS = {
    "_StoreAction": "store",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_CountAction": "count",
    "_ExtendAction": "extend",
    "_HelpAction": "help",
    "_VersionAction": "version",
}
_BASIC_TYPES = {int: "int", float: "float", str: "str"}
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
_DEPRECATED_WORD = re.compile(r"deprecat", re.IGNORECASE)
_DEPRECATED_LEAD = re.compile(r"^\W*(?:note:\s*)?deprecated\b", re.IGNORECASE)
_DEPRECATED_SELF = re.compile(
    r"\b(?:this|the)\s+(?:flag|option|argument|parameter)\s+(?:is|has\s+been)\s+(?:now\s+)?deprecated",
    re.IGNORECASE,
)
_DEPRECATED_AFTER_FLAG = (
    r"(?![\w-])(?:\s+(?:flag|option|argument))?\s+(?:is|are|has\s+been|was)\s+(?:now\s+)?deprecated"
)


def _scrub_environment() -> list[str]:
    """Drop SGLANG_*/SGL_* variables: they can change choices and defaults."""
    removed = sorted(k for k in os.environ if k.startswith(("SGLANG_", "SGL_")))
    for key in removed:
        del os.environ[key]
    return removed


def _is_suppress(value: object) -> bool:
    return isinstance(value, str) and value == argparse.SUPPRESS


def _stable_repr(value: object) -> str:
    """repr() without memory addresses, and with set members in sorted order."""
    if isinstance(value, (set, frozenset)):
        members = sorted(_stable_repr(member) for member in value)
        text = "{" + ", ".join(members) + "}" if members else "set()"
        return text if type(value) is set else f"{type(value).__name__}({text})"
    return _ADDRESS.sub("", repr(value))


def _choices(choices: Any) -> list[object] | None:
    """Choices as a JSON list; unordered containers (sets) are sorted."""
    if choices is None:
        return None
    values = [_choice_value(choice) for choice in choices]
    if isinstance(choices, (set, frozenset)):
        values.sort(key=lambda value: (type(value).__name__, str(value)))
    return values


def _json_value(value: object) -> object:
    """``value`` if it is plain JSON (recursively), else a tagged stand-in."""
    if _is_suppress(value):
        return {"suppress": True}
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int) and type(value) is int:
        return value
    if isinstance(value, float) and type(value) is float and math.isfinite(value):
        return value
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        items = [_json_value(item) for item in value]
        if all(not _is_tagged(item) for item in items):
            return items
    if isinstance(value, dict) and type(value) is dict and all(isinstance(k, str) for k in value):
        converted = {k: _json_value(v) for k, v in value.items()}
        if all(not _is_tagged(v) for v in converted.values()):
            return converted
    return {"repr": _stable_repr(value)}


def _is_tagged(value: object) -> bool:
    return isinstance(value, dict) and set(value) in ({"repr"}, {"suppress"})


def _choice_value(value: object) -> object:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    return str(value)


def _action_name(action: argparse.Action) -> str:
    cls = type(action)
    if cls.__module__ == "argparse" and cls.__name__ in _BUILTIN_ACTIONS:
        return _BUILTIN_ACTIONS[cls.__name__]
    return f"custom:{cls.__name__}"


def _type_name(type_func: object) -> str | None:
    if type_func is None:
        return None
    if type_func in _BASIC_TYPES:
        return _BASIC_TYPES[type_func]
    name = getattr(type_func, "__name__", None) or type(type_func).__name__
    return f"callable:{name}"


def _nargs(nargs: object) -> object:
    if nargs is None or isinstance(nargs, int):
        return nargs
    return str(nargs)  # "?", "*", "+", argparse.REMAINDER ("...") etc.


def _help_text(help_value: object) -> str:
    if help_value is None or _is_suppress(help_value):
        return ""
    return " ".join(str(help_value).split())[:HELP_LIMIT]


def _help_says_deprecated(help_text: str, flags: list[str]) -> bool:
    """Whether the help text calls *this* option deprecated.

    Matches "Deprecated. ...", "[Deprecated] ...", "(Deprecated, use ...)",
    "Note: --this-flag is deprecated now.", "This option is deprecated";
    not help that only mentions some *other* deprecated flag or behaviour
    ("Replaces the deprecated --grpc-mode.", "The fallback ... is deprecated").
    """
    text = " ".join(help_text.split())
    if _DEPRECATED_LEAD.match(text) or _DEPRECATED_SELF.search(text):
        return True
    return any(
        re.search(re.escape(flag) + _DEPRECATED_AFTER_FLAG, text, re.IGNORECASE) for flag in flags
    )


def _is_deprecated(action: argparse.Action) -> bool:
    """argparse's own ``deprecated`` (3.13+), a Deprecated* action class, or the help."""
    if getattr(action, "deprecated", False):
        return True
    if _DEPRECATED_WORD.search(type(action).__name__):
        return True
    help_value = action.help
    if isinstance(help_value, str) and not _is_suppress(help_value):
        return _help_says_deprecated(help_value, list(action.option_strings))
    return False


def describe_action(action: argparse.Action) -> dict[str, object]:
    return {
        "dest": action.dest,
        "flags": list(action.option_strings),
        "action": _action_name(action),
        "type": _type_name(action.type),
        "choices": _choices(action.choices),
        "nargs": _nargs(action.nargs),
        "const": _json_value(action.const),
        "default": _json_value(action.default),
        "required": bool(action.required),
        "help_suppressed": _is_suppress(action.help),
        "deprecated": _is_deprecated(action),
        "help": _help_text(action.help),
    }


def _msgspec_fields(cls: type) -> dict[str, object] | None:
    """Struct fields via msgspec (already imported by sglang when used)."""
    msgspec: Any = sys.modules.get("msgspec")
    if msgspec is None or not hasattr(cls, "__struct_fields__"):
        return None
    out: dict[str, object] = {}
    for info in msgspec.structs.fields(cls):
        if info.default_factory is not msgspec.NODEFAULT:
            out[info.name] = {"factory": True}
        elif info.default is not msgspec.NODEFAULT:
            out[info.name] = _json_value(info.default)
        else:
            out[info.name] = {"required": True}
    return out


def describe_fields(cls: type) -> dict[str, object]:
    """Every ServerArgs field name -> its default, in declaration order."""
    if dataclasses.is_dataclass(cls):
        out: dict[str, object] = {}
        for field in dataclasses.fields(cls):
            if field.default_factory is not dataclasses.MISSING:
                out[field.name] = {"factory": True}
            elif field.default is not dataclasses.MISSING:
                out[field.name] = _json_value(field.default)
            else:
                out[field.name] = {"required": True}
        return out
    fields = _msgspec_fields(cls)
    if fields is None:
        raise SystemExit(f"ServerArgs is neither a dataclass nor a msgspec Struct: {cls!r}")
    return fields


def check_wiring(server_args_module: Any) -> list[str]:
    """Warnings when prepare_server_args builds its parser differently."""
    prepare = getattr(server_args_module, "prepare_server_args", None)
    if prepare is None:
        return ["sglang.srt.server_args.prepare_server_args not found"]
    try:
        source = inspect.getsource(prepare)
    except (OSError, TypeError) as exc:
        return [f"cannot read prepare_server_args source: {exc}"]
    warnings = []
    if 'argparse.ArgumentParser(prog="sglang serve")' not in source:
        warnings.append(
            'prepare_server_args no longer builds argparse.ArgumentParser(prog="sglang serve")'
        )
    if "ServerArgs.add_cli_args(parser)" not in source:
        warnings.append("prepare_server_args no longer calls ServerArgs.add_cli_args(parser)")
    if re.search(r"parser\.add_argument\(", source):
        warnings.append("prepare_server_args adds arguments of its own")
    return warnings


def build_table() -> tuple[dict[str, Any], list[str]]:
    """Import sglang (only now: the environment is scrubbed first) and walk its parser."""
    sglang: Any = importlib.import_module("sglang")
    server_args_module: Any = importlib.import_module("sglang.srt.server_args")

    server_args_cls = server_args_module.ServerArgs
    parser = argparse.ArgumentParser(prog="sglang serve")
    server_args_cls.add_cli_args(parser)
    options = [
        describe_action(action)
        for action in parser._actions
        if not isinstance(action, argparse._HelpAction)
    ]
    table = {
        "schema": SCHEMA_VERSION,
        "sglang_version": sglang.__version__,
        "python": sys.version.split()[0],
        "generated_by": GENERATED_BY,
        "options": options,
        "fields": describe_fields(server_args_cls),
    }
    return table, check_wiring(server_args_module)


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, sort_keys=True, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--out", required=True, help="output directory (created if missing)")
    parser.add_argument(
        "--keep-env", action="store_true", help="do not drop SGLANG_*/SGL_* environment variables"
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="fail when prepare_server_args wires its parser differently",
    )
    args = parser.parse_args(argv)

    if not args.keep_env:
        removed = _scrub_environment()
        if removed:
            print(f"note: ignoring environment {', '.join(removed)}", file=sys.stderr)

    table, warnings = build_table()
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if warnings and args.strict:
        return 1

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"sglang-{table['sglang_version']}.json"
    tmp = target.with_name(target.name + ".tmp")
    tmp.write_text(render(table), encoding="utf-8")
    tmp.replace(target)
    n_fields = len(table["fields"])
    print(f"wrote {target}: {len(table['options'])} options, {n_fields} fields", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
