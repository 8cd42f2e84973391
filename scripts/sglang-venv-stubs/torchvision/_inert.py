"""Placeholders that let ``from torchvision.x import Name`` succeed and fail on use."""

from __future__ import annotations

from collections.abc import Callable

_MESSAGE = (
    "torchvision is an inert stub in this orch SGLang venv "
    "(scripts/build-sglang-venv.sh): {name} is unavailable"
)
_CACHE: dict[str, Placeholder] = {}


class Placeholder:
    """Any attribute is another placeholder; calling one raises RuntimeError."""

    __slots__ = ("_orch_name",)

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_orch_name", name)

    def __getattr__(self, attr: str) -> Placeholder:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)
        return placeholder(f"{self._orch_name}.{attr}")

    def __call__(self, *_args: object, **_kwargs: object) -> None:
        raise RuntimeError(_MESSAGE.format(name=self._orch_name))

    def __repr__(self) -> str:
        return f"<inert torchvision placeholder {self._orch_name}>"


def placeholder(name: str) -> Placeholder:
    """One placeholder per dotted name, so identity and hashing stay stable."""
    if name not in _CACHE:
        _CACHE[name] = Placeholder(name)
    return _CACHE[name]


def module_getattr(module_name: str) -> Callable[[str], Placeholder]:
    """A PEP 562 module ``__getattr__`` serving placeholders for public names."""

    def getattr_hook(attr: str) -> Placeholder:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(f"module {module_name!r} has no attribute {attr!r}")
        return placeholder(f"{module_name}.{attr}")

    return getattr_hook
