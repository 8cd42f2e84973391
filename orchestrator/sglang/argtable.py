"""SGLang's server argument table per version, generated from the real package.

The pack in ``orchestrator/sglang/argtables/`` is written by ``scripts/argtables.py``
running SGLang's own ``ServerArgs.add_cli_args`` on an ``argparse.ArgumentParser`` (``make
argtables``). This module answers, for one SGLang version: is this a field, which flag spells
it, what values does it take; and across versions: what was renamed when (docs/sglang-facts.md §1).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeAlias

from orchestrator.errors import ArgTableError
from orchestrator.sglang import argtable_pack

Version: TypeAlias = tuple[int, ...]

_VERSION_RE = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")


def parse_version(text: str) -> Version | None:
    """``0.5.11`` -> ``(0, 5, 11)``; ``0.5.10.post1`` -> ``(0, 5, 10, 1)``; else None."""
    match = _VERSION_RE.match(text)
    if match is None:
        return None
    return tuple(int(part) for part in match.groups() if part is not None)


def format_version(version: Version) -> str:
    head = ".".join(str(part) for part in version[:3])
    return head + (f".post{version[3]}" if len(version) > 3 else "")


@dataclass(frozen=True)
class Rename:
    """A ServerArgs field SGLang renamed; the old flag lived on as an alias until ``removed_in``."""

    old: str
    new: str
    renamed_in: Version
    removed_in: Version | None

    def describe(self) -> str:
        text = f"renamed {self.old} -> {self.new} in SGLang {format_version(self.renamed_in)}"
        if self.removed_in is not None:
            text += f"; the old name was removed in {format_version(self.removed_in)}"
        return text


# Every rename the argument tables show, from 0.4.9.post1 on (docs/sglang-versions.md): a flag
# that came to store into another field, or a field removed in the release that another appears
# with the same help text and type. `make sglang-release-check` and tests/unit/test_argtable.py
# fail when one is missing or a release is stated wrongly. (Switches that became one value of
# another field, --disable-piecewise-cuda-graph = --cuda-graph-backend-prefill=disabled, are not
# renames: the report lists them as replaced.)
RENAMES: tuple[Rename, ...] = (
    Rename("impl", "model_impl", (0, 4, 9, 3), (0, 4, 9, 3)),
    Rename("enable_flashinfer_moe", "enable_flashinfer_cutlass_moe", (0, 4, 9, 5), (0, 4, 9, 5)),
    Rename("max_micro_batch_size", "pp_max_micro_batch_size", (0, 5, 3, 1), (0, 5, 3, 1)),
    Rename("oltp_traces_endpoint", "otlp_traces_endpoint", (0, 5, 4, 2), (0, 5, 4, 2)),
    Rename("kt_amx_method", "kt_method", (0, 5, 5, 1), (0, 5, 5, 1)),
    Rename("kt_amx_weight_path", "kt_weight_path", (0, 5, 5, 1), (0, 5, 5, 1)),
    Rename("stream_output", "incremental_streaming_output", (0, 5, 10), (0, 5, 20)),
    Rename(
        "speculative_dflash_draft_window_size",
        "speculative_draft_window_size",
        (0, 5, 12),
        (0, 5, 20),
    ),
    Rename(
        "enable_nsa_prefill_context_parallel",
        "enable_dsa_prefill_context_parallel",
        (0, 5, 13),
        (0, 5, 20),
    ),
    Rename("nsa_decode_backend", "dsa_decode_backend", (0, 5, 13), (0, 5, 20)),
    Rename("nsa_prefill_backend", "dsa_prefill_backend", (0, 5, 13), (0, 5, 20)),
    Rename("nsa_prefill_cp_mode", "dsa_prefill_cp_mode", (0, 5, 13), (0, 5, 20)),
    Rename("mamba_scheduler_strategy", "mamba_radix_cache_strategy", (0, 5, 14), (0, 5, 20)),
    Rename("cuda_graph_max_bs", "cuda_graph_max_bs_decode", (0, 5, 14), (0, 5, 20)),
    Rename("cuda_graph_bs", "cuda_graph_bs_decode", (0, 5, 14), (0, 5, 20)),
    Rename("piecewise_cuda_graph_compiler", "cuda_graph_tc_compiler", (0, 5, 14), (0, 5, 20)),
    Rename("piecewise_cuda_graph_max_tokens", "cuda_graph_max_bs_prefill", (0, 5, 14), (0, 5, 20)),
    Rename("piecewise_cuda_graph_tokens", "cuda_graph_bs_prefill", (0, 5, 14), (0, 5, 20)),
    Rename("grpc_http_sidecar_port", "smg_http_sidecar_port", (0, 5, 16), None),
    Rename("enable_gdn_replayssm_spec", "enable_linear_replayssm_spec", (0, 5, 17), (0, 5, 20)),
)


@dataclass(frozen=True)
class ArgOption:
    """One argparse action of SGLang's server parser."""

    dest: str
    flags: tuple[str, ...]
    action: str  # store, store_true, store_false, store_const, append, count, custom:<Class>
    type: str | None  # int, float, str, None (argparse's str), callable:<name>
    choices: tuple[Any, ...] | None
    nargs: str | int | None
    const: Any
    default: Any
    deprecated: bool
    help: str

    @property
    def flag(self) -> str:
        """The spelling orch renders: ``--`` + dest with dashes when SGLang has it, else the
        first long option."""
        natural = "--" + self.dest.replace("_", "-")
        if natural in self.flags:
            return natural
        longs = [f for f in self.flags if f.startswith("--")]
        return longs[0] if longs else self.flags[0]


@dataclass(frozen=True)
class ArgTable:
    """Everything SGLang's parser accepts in one version."""

    version: str
    options: tuple[ArgOption, ...]
    fields: Mapping[str, Any]  # ServerArgs field -> default

    @functools.cached_property
    def by_dest(self) -> dict[str, ArgOption]:
        """dest -> the option to render it with; a non-deprecated option wins over an alias."""
        chosen: dict[str, ArgOption] = {}
        for option in self.options:
            current = chosen.get(option.dest)
            if current is None or (current.deprecated and not option.deprecated):
                chosen[option.dest] = option
        return chosen

    @functools.cached_property
    def by_flag(self) -> dict[str, ArgOption]:
        return {flag: option for option in self.options for flag in option.flags}

    @property
    def parsed_version(self) -> Version:
        parsed = parse_version(self.version)
        if parsed is None:  # pragma: no cover - checked when the table is loaded
            raise ArgTableError(f"argument table has a bad version {self.version!r}")
        return parsed

    def option_for_name(self, name: str) -> ArgOption | None:
        """The option that sets field ``name``: by argparse dest, else by a flag spelling it.

        The two differ: in 0.5.11 ``--tp-size`` is an alias of ``--tensor-parallel-size``
        whose dest is ``tensor_parallel_size``, while the ServerArgs field is ``tp_size``.
        """
        option = self.by_dest.get(name)
        if option is None:
            option = self.by_flag.get("--" + name.replace("_", "-"))
        return option


@dataclass(frozen=True)
class Spelling:
    """How a field the profile names is written for one SGLang version."""

    requested: str
    option: ArgOption
    rename: Rename | None  # set when the requested name is another version's spelling
    flag: str  # the option string to render

    @property
    def dest(self) -> str:
        return self.option.dest


def spell(table: ArgTable, name: str) -> Spelling | None:
    """The option for ``name`` in ``table``'s version, following renames both ways.

    ``mamba_scheduler_strategy`` on 0.5.23 spells ``--mamba-radix-cache-strategy``, and
    ``mamba_radix_cache_strategy`` on 0.5.11 spells ``--mamba-scheduler-strategy``: a profile
    states intent, render writes what that version's parser knows.
    """
    version = table.parsed_version
    for rename in RENAMES:
        if name == rename.old and version >= rename.renamed_in:
            target = table.option_for_name(rename.new)
            if target is not None:
                return Spelling(name, target, rename, target.flag)
        if name == rename.new and version < rename.renamed_in:
            target = table.option_for_name(rename.old)
            if target is not None:
                return Spelling(name, target, rename, target.flag)
    option = table.option_for_name(name)
    if option is None:
        return None
    natural = natural_flag(name)
    return Spelling(name, option, None, natural if natural in option.flags else option.flag)


_ALIAS_FOR_RE = re.compile(r"[Aa]lias for (--[\w-]+)=([\w+-]+(?:\.\w+)*)")


def const_of(option: ArgOption) -> Any:
    """What a flag that takes no value stores: its const, or, for SGLang's deprecated const
    aliases (``--disable-piecewise-cuda-graph``), whose const the table does not hold, the
    value their help names (``Deprecated alias for --cuda-graph-backend-prefill=disabled``)."""
    if option.const is not None:
        return option.const
    match = _ALIAS_FOR_RE.search(option.help or "")
    if match is not None and option.action.startswith("custom:Deprecated"):
        return match.group(2)
    return None


def natural_flag(name: str) -> str:
    """``tp_size`` -> ``--tp-size``: how SGLang spells a field as an option."""
    return "--" + name.replace("_", "-")


def known_names(table: ArgTable) -> list[str]:
    """Every field name ``spell`` accepts for this table: for did-you-mean suggestions."""
    names = set(table.by_dest) | {
        flag[2:].replace("-", "_") for flag in table.by_flag if flag.startswith("--")
    }
    for rename in RENAMES:
        if rename.new in names or rename.old in names:
            names.update((rename.old, rename.new))
    return sorted(names)


def adding_hint(version: str) -> str:
    """How a table for ``version`` comes to exist (said wherever one is missing)."""
    return (
        f'add it with `make argtables VERSIONS="{version}"` in an orch checkout (it builds the '
        "table from that release's package), or use an orch that ships it"
    )


@functools.cache
def available_versions() -> tuple[str, ...]:
    """Versions with a shipped table, oldest first."""
    versions = tuple(v for v in _pack().versions() if parse_version(v) is not None)
    if not versions:
        raise ArgTableError(
            "no SGLang argument tables found in orchestrator/sglang/argtables/",
            "reinstall orch, or regenerate them with `make argtables`",
        )
    return tuple(sorted(versions, key=lambda v: parse_version(v) or ()))


def _pack() -> argtable_pack.Pack:
    try:
        return argtable_pack.shipped()
    except argtable_pack.PackError as exc:
        raise ArgTableError(
            f"{exc} (orchestrator/sglang/argtables/)",
            "reinstall orch, or regenerate them with `make argtables`",
        ) from exc


@functools.cache
def load_table(version: str) -> ArgTable:
    """The table of one release (only its own records are parsed)."""
    if version not in available_versions():
        raise ArgTableError(
            f"orch has no argument table for SGLang {version}", adding_hint(version)
        )
    try:
        data = _pack().document(version)
    except argtable_pack.PackError as exc:
        raise ArgTableError(str(exc), "regenerate it with `make argtables`") from exc
    return table_from_document(data)


def table_from_document(data: Mapping[str, Any]) -> ArgTable:
    """An ArgTable from one release's schema-1 document."""
    options = tuple(
        ArgOption(
            dest=raw["dest"],
            flags=tuple(raw["flags"]),
            action=raw["action"],
            type=raw["type"],
            choices=tuple(raw["choices"]) if raw["choices"] is not None else None,
            nargs=raw["nargs"],
            const=raw["const"],
            default=raw["default"],
            deprecated=bool(raw["deprecated"]),
            help=raw["help"],
        )
        for raw in data["options"]
        if raw["flags"]  # positional arguments: SGLang's server parser has none
    )
    return ArgTable(version=str(data["sglang_version"]), options=options, fields=data["fields"])


@dataclass(frozen=True)
class TableChoice:
    table: ArgTable
    exact: bool  # False: no table for the requested version, a neighbour stands in


def table_for(version: str | None) -> TableChoice:
    """The table to check a profile against: the version's own, else the nearest older one
    (the newest when no version is pinned), else the oldest."""
    versions = available_versions()
    if version is None:
        return TableChoice(load_table(versions[-1]), exact=False)
    if version in versions:
        return TableChoice(load_table(version), exact=True)
    wanted = parse_version(version)
    older = [v for v in versions if wanted is not None and parse_version(v) <= wanted]  # type: ignore[operator]
    return TableChoice(load_table(older[-1] if older else versions[0]), exact=False)


class BadValue(Exception):
    """A value SGLang's parser would reject or misread; ``expected`` reads after the key path."""

    def __init__(self, expected: str, hint: str | None = None) -> None:
        super().__init__(expected)
        self.expected = expected
        self.hint = hint


# sglang.srt.utils.common.human_readable_int (same in 0.5.11 and 0.5.23)
_HUMAN_INT_RE = re.compile(r"\d+|\d+(\.\d+)?[kMGT]|\d+(Ki|Mi|Gi|Ti)")
_JSON_TYPES = ("callable:loads", "callable:json_list_type")
_NUMBER_RE = re.compile(r"^-?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


def arg_tokens(option: ArgOption, value: object, flag: str | None = None) -> tuple[object, ...]:
    """The argv tokens that give ``option`` the profile's ``value``: the one grammar that both
    validation and rendering use, so a profile that validates renders exactly as checked.

    ``True`` on a switch is the bare flag, ``False``/default nothing; lists become argparse's
    ``nargs`` values (or repeated flags for ``append``); mappings become compact JSON for SGLang's
    JSON-string options. A single value starting with ``-`` is written ``--flag=value`` so that
    argparse cannot take it for an option. Secret placeholders pass through untouched.
    """
    flag = flag or option.flag
    if option.action == "custom:BooleanOptionalAction":
        if not isinstance(value, bool):
            raise BadValue(f"expected true or false ({flag} is a switch), got {_show(value)}")
        negative = [f for f in option.flags if f.startswith("--no-")]
        if value == option.default:
            return ()
        if value:
            return (flag,)
        return (negative[0],) if negative else ()
    if option.nargs == 0 and option.action.startswith("custom:"):
        # SGLang's Deprecated*StoreTrue/StoreConst actions: switches that take no value
        if not isinstance(value, bool):
            raise BadValue(f"expected true or false ({flag} is a switch), got {_show(value)}")
        return (flag,) if value else ()
    if option.action in ("store_true", "store_false", "store_const"):
        if not isinstance(value, bool):
            raise BadValue(f"expected true or false ({flag} is a switch), got {_show(value)}")
        sets = {"store_true": True, "store_false": False}.get(option.action, option.const)
        if option.action == "store_const":
            return (flag,) if value else ()
        if value == sets:
            return (flag,)
        if option.default in (value, None):
            return ()
        raise BadValue(
            f"{flag} can only set {sets}; SGLang has no command-line way to set {value}",
            "remove the key to keep SGLang's default",
        )
    if option.action == "count":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise BadValue(f"expected a count (0 or more) for {flag}, got {_show(value)}")
        return (flag,) * value
    if option.nargs == "?" and value is True:
        return (flag,)
    many = option.action == "append" or option.nargs in ("+", "*") or isinstance(option.nargs, int)
    if isinstance(value, list | tuple) and not many and option.type in _JSON_TYPES:
        value = json.dumps(list(value), separators=(",", ":"), ensure_ascii=False)
    if isinstance(value, list | tuple):
        if not many:
            raise BadValue(f"expected a single value for {flag}, got a list")
        values = list(value)
        if option.nargs == "+" and not values:
            raise BadValue(f"expected at least one value for {flag}, got an empty list")
        if isinstance(option.nargs, int) and len(values) != option.nargs:
            raise BadValue(f"expected exactly {option.nargs} values for {flag}, got {len(values)}")
    else:
        values = [value]
    tokens = [_scalar_token(option, item) for item in values]
    if option.action == "append":
        return tuple(part for token in tokens for part in (flag, token))
    if many:
        for token in tokens:
            if isinstance(token, str) and token.startswith("-") and not _NUMBER_RE.match(token):
                raise BadValue(
                    f"list item {token!r} of {flag} starts with '-'; argparse would read it "
                    "as an option"
                )
        return (flag, *tokens)
    token = tokens[0]
    if isinstance(token, str) and token.startswith("-") and not _NUMBER_RE.match(token):
        return (f"{flag}={token}",)
    return (flag, token)


def _scalar_token(option: ArgOption, value: object) -> object:
    if not isinstance(value, str | int | float | bool | dict | list | tuple):
        return value  # a SecretRef: its value is checked by nothing but the server
    kind = option.type
    if isinstance(value, bool):
        raise BadValue(
            f"expected {_describe(option)}, got {str(value).lower()}",
            "quote it if you mean the text" if kind in (None, "str") else None,
        )
    if isinstance(value, dict | list | tuple):
        if kind in (None, "str") or (kind or "").startswith("callable:"):
            return json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        raise BadValue(f"expected {_describe(option)}, got a {type(value).__name__}")
    if kind == "callable:human_readable_int":
        token = str(value)
        if isinstance(value, float) or not _HUMAN_INT_RE.fullmatch(token.strip()):
            raise BadValue(
                "expected an integer, optionally with a suffix (8192, 8k, 32Ki), "
                f"got {_show(value)}",
                "SI suffixes k, M, G, T may have decimals; IEC suffixes Ki, Mi, Gi, Ti may not",
            )
    elif kind == "int":
        if isinstance(value, float):
            raise BadValue(f"expected an integer, got {value!r}")
        try:
            token = str(int(value))
        except ValueError:
            raise BadValue(f"expected an integer, got {_show(value)}") from None
    elif kind == "float":
        try:
            float(value)
        except ValueError:
            raise BadValue(f"expected a number, got {_show(value)}") from None
        token = repr(value) if isinstance(value, float) else str(value)
    else:
        token = repr(value) if isinstance(value, float) else str(value)
    if "\0" in token:
        raise BadValue("a NUL byte cannot be passed in a command line")
    if option.choices is not None and token not in {str(choice) for choice in option.choices}:
        choices = ", ".join(str(choice) for choice in option.choices)
        raise BadValue(f"expected one of {choices}, got {_show(value)}", _closest(token, option))
    return token


def _closest(token: str, option: ArgOption) -> str | None:
    import difflib

    names = [str(choice) for choice in option.choices or ()]
    close = difflib.get_close_matches(token, names, n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else None


def _describe(option: ArgOption) -> str:
    return {"int": "an integer", "float": "a number"}.get(option.type or "str", "a string")


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
