"""How resolved ServerArgs are shown: the ``server_args=`` log line and ``launch_command``.

<= 0.5.18: ``server_args=ServerArgs(model_path='...', ...)`` (the dataclass repr, every field);
>= 0.5.19: ``server_args={'model_path': '...', ...}`` (the resolved dict). Both parse with
``ast.literal_eval``. As in SGLang, only the watermark configuration is masked (0.5.23:
``redact_watermark_secrets`` and ``redact_watermark_command_line`` in
sglang/srt/sampling/watermarking/core.py, as ``'<redacted>'``); an API key or the SSL key
password is shown as given, in the config line, ``/server_info`` and ``launch_command``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

REDACTED = "<redacted>"
ALWAYS_REDACTED = frozenset({"watermark_config", "watermark_key", "watermark_key_b"})
WATERMARK_FLAG = "--watermark-config"


def redacted(values: dict[str, Any], dict_style: bool) -> dict[str, Any]:
    shown = dict(values)
    if dict_style:
        for name in ALWAYS_REDACTED & shown.keys():
            if shown[name] is not None:
                shown[name] = REDACTED
    return shown


def server_args_line(values: dict[str, Any], dict_style: bool) -> str:
    shown = redacted(values, dict_style)
    if dict_style:
        return f"server_args={shown!r}"
    body = ", ".join(f"{name}={value!r}" for name, value in shown.items())
    return f"server_args=ServerArgs({body})"


def launch_command(argv: Sequence[str]) -> str:
    """The arguments only, joined by spaces, unquoted (docs/sglang-facts.md §3), the watermark
    configuration masked as SGLang 0.5.23's ``redact_watermark_command_line`` does."""
    shown: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next:
            shown.append(REDACTED)
            hide_next = False
        elif token == WATERMARK_FLAG:
            shown.append(token)
            hide_next = True
        elif token.startswith(WATERMARK_FLAG + "="):
            shown.append(f"{WATERMARK_FLAG}={REDACTED}")
        else:
            shown.append(token)
    return " ".join(shown)
