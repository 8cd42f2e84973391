"""Up to 0.5.18 SGLang resolves in ``ServerArgs.__post_init__`` and records nothing of it: every
attribute write during post-init is recorded here, with the SGLang function and line that made
it (the answer's ``provenance``)."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from orchestrator.remote.probe.values import UNSET, field_names, jsonable, snapshot


class WriteTrace:
    """Records every attribute write on ServerArgs during ``__post_init__``."""

    def __init__(self, server_args_cls: Any, sglang_root: str) -> None:
        self.cls = server_args_cls
        self.root = sglang_root
        self.writes: dict[str, list[dict[str, Any]]] = {}
        self.raw: dict[str, Any] | None = None
        self._active = False
        self._names = field_names(server_args_cls)

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        cls = self.cls
        original_setattr = cls.__setattr__
        original_post_init = cls.__post_init__
        trace = self

        def traced_setattr(obj: Any, name: str, value: Any) -> None:
            if trace._active and name in trace._names:
                old = obj.__dict__.get(name, UNSET)
                if jsonable(old) != jsonable(value):
                    frame = sys._getframe(1)
                    trace.writes.setdefault(name, []).append(
                        {
                            "source": frame.f_code.co_name,
                            "file": os.path.relpath(frame.f_code.co_filename, trace.root),
                            "line": frame.f_lineno,
                            "value": jsonable(value),
                        }
                    )
            original_setattr(obj, name, value)

        def traced_post_init(obj: Any) -> None:
            trace.raw = snapshot(obj, trace._names)
            trace._active = True
            try:
                original_post_init(obj)
            finally:
                trace._active = False

        cls.__setattr__ = traced_setattr
        cls.__post_init__ = traced_post_init
        try:
            yield
        finally:
            cls.__setattr__ = original_setattr
            cls.__post_init__ = original_post_init
