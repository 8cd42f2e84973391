"""What the probe's answer is made of: SGLang's values as JSON, its output captured, the
protocol's version."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import logging
from collections.abc import Iterator
from typing import Any

MIB = 1 << 20

PROTOCOL = 1
UNSET = "<unset>"


def jsonable(value: Any, depth: int = 0) -> Any:
    """A JSON form of a ServerArgs value: dataclasses and msgspec structs become dicts, enums
    their value, anything else unknown its repr."""
    if depth > 8:
        return repr(value)
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return (
            value if value == value and value not in (float("inf"), float("-inf")) else repr(value)
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return [jsonable(item, depth + 1) for item in items]
    if isinstance(value, dict):
        return {str(key): jsonable(item, depth + 1) for key, item in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: jsonable(getattr(value, f.name), depth + 1) for f in dataclasses.fields(value)
        }
    struct_fields = getattr(type(value), "__struct_fields__", None)
    if struct_fields is not None:
        return {name: jsonable(getattr(value, name, None), depth + 1) for name in struct_fields}
    enum_value = getattr(value, "value", None)
    if enum_value is not None and type(value).__module__ != "builtins":
        return jsonable(enum_value, depth + 1)
    return repr(value)


def field_names(server_args_cls: Any) -> list[str]:
    if dataclasses.is_dataclass(server_args_cls):
        return [f.name for f in dataclasses.fields(server_args_cls)]
    return list(getattr(server_args_cls, "__struct_fields__", ()))


def snapshot(server_args: Any, names: list[str]) -> dict[str, Any]:
    out = {}
    for name in names:
        try:
            out[name] = jsonable(getattr(server_args, name))
        except Exception:  # noqa: BLE001 - a property that cannot answer before resolution
            out[name] = UNSET
    return out


@contextlib.contextmanager
def captured(logs: io.StringIO) -> Iterator[None]:
    """What SGLang and its plugins print or log goes to ``logs``: stdout carries the answer."""
    handler = logging.StreamHandler(logs)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", "%Y-%m-%d %H:%M:%S"))
    with contextlib.redirect_stderr(logs), contextlib.redirect_stdout(logs):
        logging.getLogger().addHandler(handler)
        try:
            yield
        finally:
            logging.getLogger().removeHandler(handler)


def log_lines(text: str) -> list[str]:
    return [line for line in text.replace("\r", "\n").splitlines() if line.strip()][-400:]


def describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"
