"""``router:``: the gateway in front of a profile's servers (docs/gateway.md).

```yaml
router:
  url: http://10.0.0.5:30000          # the SGLang Model Gateway (smg) the team runs
  api_key: {from_env: SMG_ADMIN_KEY}  # its control plane's key; never written here
  labels: {team: serving}             # beside orch's own (profile, replica, commit)
  drain_timeout_s: 300                # out of the gateway, how long to wait for idle
```

A team shares one gateway between profiles the way it shares anything: a base profile holds
``router:`` and the others ``extends`` it.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from orchestrator.model import Router, frozen_map
from orchestrator.profile.doccheck import MISSING, DocChecker
from orchestrator.profile.values import MAX_SECONDS, looks_secret, secret_ref

_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,62}$")


def router_section(checker: DocChecker) -> Router | None:
    if checker.mapping(("router",)) is None:  # absent, or not a mapping (said by mapping())
        return None
    url = checker.text(("router", "url"))
    if url is None:
        checker.error(
            ("router",), "missing `url`", "the gateway's address, e.g. http://10.0.0.5:30000"
        )
    elif not _gateway_url(url):
        checker.error(
            ("router", "url"),
            f"expected http://HOST:PORT or https://HOST:PORT, got {url!r}",
            "the address the gateway serves its HTTP API on (smg launch --host/--port)",
        )
        url = None
    key = checker.get(("router", "api_key"))
    api_key = None
    if key is not MISSING and key is not None:
        if looks_secret(key):
            api_key = secret_ref(checker, ("router", "api_key"), key)
        else:
            checker.error(
                ("router", "api_key"),
                "the gateway's key is a secret: expected {from_env: NAME}",
                "secrets come from your local environment and are never written in a profile",
            )
    labels: dict[str, str] = {}
    for name, value in (checker.mapping(("router", "labels")) or {}).items():
        path = ("router", "labels", name)
        if not isinstance(name, str) or not _LABEL_RE.match(name):
            checker.error(path, f"expected a label name, got {name!r}", "letters, digits, . _ / -")
        elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
            checker.error(path, "expected a text value")
        else:
            labels[name] = str(value)
    metrics_url = checker.text(("router", "metrics_url"))
    if metrics_url is not None and not _gateway_url(metrics_url):
        checker.error(
            ("router", "metrics_url"),
            f"expected http://HOST:PORT[/PATH] or https://..., got {metrics_url!r}",
            "where smg serves its metrics: --prometheus-host/--prometheus-port (default "
            "0.0.0.0:29000), e.g. http://10.0.0.5:29000",
        )
        metrics_url = None
    drain = checker.number(("router", "drain_timeout_s"), 0.0, MAX_SECONDS)
    ready = checker.number(("router", "ready_timeout_s"), 1.0, MAX_SECONDS)
    if url is None:
        return None
    defaults = Router(url)
    return Router(
        url=url.rstrip("/"),
        api_key=api_key,
        labels=frozen_map(labels),
        drain_timeout_s=drain if drain is not None else defaults.drain_timeout_s,
        ready_timeout_s=ready if ready is not None else defaults.ready_timeout_s,
        metrics_url=metrics_url.rstrip("/") if metrics_url else None,
    )


def _gateway_url(url: str) -> bool:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return False
    try:
        port = parts.port
    except ValueError:
        return False
    return port is not None and not parts.query and not parts.fragment and not parts.username
