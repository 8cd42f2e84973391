"""One bounded HTTP exchange from orch's machine, for the gateway's worker API and a worker's
``/v1/loads`` (gateway.py, drain.py): the exchange itself is the agent's
(``orchestrator/remote/agent/http_json.py``, which the agent uses for its own gateway calls);
what is orch's alone is here: a base URL checked as ``diff-effective --url`` checks one
(commands/by_url.py): ``http``/``https`` without credentials, query or fragment.
"""

from __future__ import annotations

import urllib.parse

from orchestrator.errors import UsageError
from orchestrator.remote.agent.http_json import MAX_BODY_BYTES, Reply, Unreachable, exchange

__all__ = ["MAX_BODY_BYTES", "Reply", "Unreachable", "base_url", "exchange"]


def base_url(text: str, what: str) -> str:
    """``text`` checked as a base URL (http or https, a host, maybe a path prefix), without a
    trailing slash; ``what`` names it in messages (``router.url``)."""
    parts = urllib.parse.urlsplit(text)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{what} {text!r}: expected http://HOST:PORT or https://HOST:PORT")
    if parts.username is not None or parts.password is not None:
        raise UsageError(
            f"{what}: credentials in a URL are not sent",
            "give the key as api_key: {from_env: NAME}; it is sent as a Bearer token",
        )
    if parts.query or parts.fragment:
        raise UsageError(f"{what} {text!r}: expected a base URL, without ?query or #fragment")
    try:
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as exc:
        raise UsageError(f"{what} {text!r}: {exc}") from exc
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/"), "", ""))
