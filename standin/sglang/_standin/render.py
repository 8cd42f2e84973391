"""How resolved ServerArgs are shown: the ``server_args=`` log line and ``launch_command``.

<= 0.5.18: ``server_args=ServerArgs(model_path='...', ...)`` (the dataclass repr, every field);
>= 0.5.19: ``server_args={'model_path': '...', ...}`` (the resolved dict). Both parse with
``ast.literal_eval``. Secrets never appear: SGLang 0.5.23 prints the watermark keys as
``'<redacted>'`` and the stand-in does the same for API keys and the SSL key password.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

REDACTED = "<redacted>"
ALWAYS_REDACTED = frozenset({"watermark_config", "watermark_key", "watermark_key_b"})
SECRET_FIELDS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password"})
SECRET_FLAGS = frozenset({"--api-key", "--admin-api-key", "--ssl-keyfile-password"})


def redacted(values: dict[str, Any], dict_style: bool) -> dict[str, Any]:
    shown = dict(values)
    for name in SECRET_FIELDS:
        if shown.get(name) is not None:
            shown[name] = REDACTED
    if dict_style:
        for name in ALWAYS_REDACTED & shown.keys():
            shown[name] = REDACTED
    return shown


def server_args_line(values: dict[str, Any], dict_style: bool) -> str:
    shown = redacted(values, dict_style)
    if dict_style:
        return f"server_args={shown!r}"
    body = ", ".join(f"{name}={value!r}" for name, value in shown.items())
    return f"server_args=ServerArgs({body})"


def launch_command(argv: Sequence[str]) -> str:
    """The arguments only, joined by spaces, unquoted (docs/sglang-facts.md §3), secrets masked."""
    shown: list[str] = []
    hide_next = False
    for token in argv:
        if hide_next:
            shown.append(REDACTED)
            hide_next = False
            continue
        flag, equals, _ = token.partition("=")
        if flag in SECRET_FLAGS:
            if equals:
                shown.append(f"{flag}={REDACTED}")
            else:
                shown.append(token)
                hide_next = True
            continue
        shown.append(token)
    return " ".join(shown)
