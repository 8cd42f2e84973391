"""``sglang.srt.server_args`` of orch's SGLang stand-in (NOT SGLang), shaped as the imitated
release's module, so that orch's planning probe and the stand-in's own server run it the way
they run SGLang's:

- ``ServerArgs``: one field per ServerArgs field of the release's argument table (a dataclass
  built here, as 0.5.20+ builds its record with ``msgspec.defstruct``), with
  ``ServerArgs.add_cli_args(parser)`` and ``ServerArgs.from_cli_args(namespace)``;
- ``prepare_server_args(argv)``: ``ArgumentParser(prog="sglang serve")``, the release's options,
  ``parse_args``, ``from_cli_args``;
- up to 0.5.18 ``ServerArgs.__post_init__`` resolves, writing the fields themselves
  (sglang/srt/server_args.py, ``ServerArgs.__post_init__``);
- from 0.5.19 construction leaves the raw input and ``resolve_once()`` resolves: every decision is
  declared as ``(source, {field: value})`` on ``_resolved_overrides`` (sglang/srt/arg_groups/
  overrides.py, ``declare_resolution``), ``resolved_dict()`` reads the result back, and a
  resolved record is read-only (``ServerArgs.__setattr__``); from 0.5.20 ``launch_command``.

The resolution itself is the stand-in's few rules (``sglang/_standin/resolve.py``); a source is
``standin:<rule>``, a traced write names the rule's function.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import functools
import sys
from collections.abc import Sequence
from typing import Any

from sglang._standin import argtable, render
from sglang._standin import knobs as knobs_module
from sglang._standin.logs import Log
from sglang._standin.resolve import Resolver

KNOBS = knobs_module.read_knobs()
TABLE = argtable.load_table(KNOBS.version_text)
FIELDS = tuple(TABLE.field_order())
_FIELD_SET = frozenset(FIELDS)
_MISSING = object()


class _Declaring:
    """The record as 0.5.19+ resolution sees it (SGLang's ``resolving_view``): reads give the
    latest decision, each change is declared on ``declarations`` with the rule that made it."""

    def __init__(self, values: dict[str, Any], declarations: list[tuple[str, dict[str, Any]]]):
        object.__setattr__(self, "_values", values)
        object.__setattr__(self, "_declarations", declarations)

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None

    def __setattr__(self, name: str, value: Any) -> None:
        if self._values.get(name, _MISSING) != value:
            rule = sys._getframe(1).f_code.co_name  # the rule that wrote
            self._declarations.append((f"standin:{rule}", {name: copy.deepcopy(value)}))
        self._values[name] = value


class _Methods:
    """ServerArgs' methods; its fields are added per release by ``make_dataclass`` below."""

    def __post_init__(self) -> None:
        if not KNOBS.resolves_in_run_server:
            Resolver(KNOBS, self, _FIELD_SET, Log(KNOBS.log_ms)).run()

    def __setattr__(self, name: str, value: Any) -> None:
        if not name.startswith("_") and self.__dict__.get("_resolution_finished"):
            raise AttributeError(
                f"server_args.{name} assigned after resolution; server_args is read-only"
            )
        object.__setattr__(self, name, value)

    @staticmethod
    def add_cli_args(parser: argparse.ArgumentParser) -> None:
        argtable.add_options(parser, TABLE)

    @classmethod
    def from_cli_args(cls, args: argparse.Namespace) -> Any:
        return cls(**argtable.field_values(TABLE, args))

    if KNOBS.resolves_in_run_server:
        _resolved_overrides: list[tuple[str, dict[str, Any]]] | None = None  # before resolution

        def resolve_once(self) -> None:
            """Resolve once; the fields keep the raw input, the decisions are declared."""
            if self.__dict__.get("_resolution_finished"):
                return
            if self.__dict__.get("_resolution_failed"):
                raise RuntimeError("resolution already failed on this ServerArgs")
            values = {name: copy.deepcopy(getattr(self, name)) for name in FIELDS}
            declarations = list(self._resolved_overrides or ())
            self._resolved_overrides = declarations
            view = _Declaring(values, declarations)
            try:
                Resolver(KNOBS, view, _FIELD_SET, Log(KNOBS.log_ms)).run()
            except BaseException:
                self._resolution_failed = True
                raise
            self._resolution_finished = True

        def resolved_dict(self) -> dict[str, Any]:
            """Every field's resolved value: its last declaration, else the raw input."""
            resolved = {name: getattr(self, name) for name in FIELDS}
            for _source, declared in self._resolved_overrides or ():
                resolved.update(declared)
            return copy.deepcopy(resolved)

    if KNOBS.has_launch_command:

        @property
        def launch_command(self) -> str | None:
            """The command line's arguments, secrets masked."""
            launch_command = self.__dict__.get("_launch_command")
            return launch_command if isinstance(launch_command, str) else None


def _field(name: str, defaults: dict[str, Any]) -> tuple[str, Any, Any]:
    if name not in defaults:
        return name, Any, dataclasses.field()  # required (model_path)
    default = defaults[name]
    if isinstance(default, list | dict | set):
        factory = functools.partial(copy.deepcopy, default)
        return name, Any, dataclasses.field(default_factory=factory)
    return name, Any, dataclasses.field(default=default)


_DEFAULTS = TABLE.field_defaults()
ServerArgs: Any = dataclasses.make_dataclass(
    "ServerArgs", [_field(name, _DEFAULTS) for name in FIELDS], bases=(_Methods,), kw_only=True
)
ServerArgs.__module__ = __name__


def prepare_server_args(argv: Sequence[str]) -> Any:
    """Parse ``argv`` as ``sglang serve`` does (argparse errors: usage, exit 2)."""
    parser = argparse.ArgumentParser(prog=argtable.PROG)
    ServerArgs.add_cli_args(parser)
    raw_args = parser.parse_args(list(argv))
    server_args = ServerArgs.from_cli_args(raw_args)
    if KNOBS.has_launch_command:
        server_args._launch_command = render.launch_command(argv)
    return server_args
