"""The sections that tune how a server is run and carried elsewhere: ``restart:`` (systemd's
vocabulary), ``health:`` and ``export:``."""

from __future__ import annotations

import re

from orchestrator.model import ExportSettings, HealthPolicy, RestartMode, RestartPolicy, frozen_map
from orchestrator.profile.doccheck import MISSING, DocChecker
from orchestrator.profile.values import ENV_NAME_RE, MAX_SECONDS
from orchestrator.profile.yamldoc import KeyPath

_K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")


def restart_section(checker: DocChecker) -> RestartPolicy:
    if checker.mapping(("restart",)) is None:
        return RestartPolicy()
    defaults = RestartPolicy()
    mode = defaults.mode
    raw_mode = checker.get(("restart", "mode"))
    if raw_mode is False:  # YAML 1.1 reads a bare `no` as false
        mode = RestartMode.NO
    elif raw_mode is not MISSING:
        try:
            mode = RestartMode(raw_mode)
        except ValueError:
            checker.error(
                ("restart", "mode"), f"expected no, on-failure or always, got {raw_mode!r}"
            )
    multiplier = checker.number(("restart", "multiplier"), 1.0)
    delay = checker.number(("restart", "delay_s"), 0.0, MAX_SECONDS)
    max_delay = checker.number(("restart", "max_delay_s"), 0.0, MAX_SECONDS)
    limit = checker.integer(("restart", "start_limit"), 1)
    interval = checker.number(("restart", "start_limit_interval_s"), 0.0, MAX_SECONDS)
    policy = RestartPolicy(
        mode=mode,
        delay_s=delay if delay is not None else defaults.delay_s,
        multiplier=multiplier if multiplier is not None else defaults.multiplier,
        max_delay_s=max_delay if max_delay is not None else defaults.max_delay_s,
        start_limit=limit if limit is not None else defaults.start_limit,
        start_limit_interval_s=interval
        if interval is not None
        else defaults.start_limit_interval_s,
    )
    if policy.max_delay_s < policy.delay_s:
        checker.error(("restart", "max_delay_s"), "must be >= restart.delay_s")
    return policy


def health_section(checker: DocChecker) -> HealthPolicy:
    if checker.mapping(("health",)) is None:
        return HealthPolicy()
    defaults = HealthPolicy()
    timeout = checker.number(("health", "startup_timeout_s"), 1.0, MAX_SECONDS)
    interval = checker.number(("health", "interval_s"), 0.1, MAX_SECONDS)
    endpoint = checker.text(("health", "endpoint"))
    failures = checker.integer(("health", "failures"), 1)
    if endpoint is not None and not endpoint.startswith("/"):
        checker.error(("health", "endpoint"), f"expected a path such as /health, got {endpoint!r}")
        endpoint = None
    return HealthPolicy(
        startup_timeout_s=timeout if timeout is not None else defaults.startup_timeout_s,
        interval_s=interval if interval is not None else defaults.interval_s,
        endpoint=endpoint or defaults.endpoint,
        failures=failures if failures is not None else defaults.failures,
    )


def export_section(checker: DocChecker) -> ExportSettings:
    """``export:``: the image, its interpreter and the Kubernetes Secret (docs/export.md)."""
    if checker.mapping(("export",)) is None:
        return ExportSettings()
    defaults = ExportSettings()
    image = checker.text(("export", "image"))
    if image is not None and (not image or any(c.isspace() for c in image)):
        checker.error(("export", "image"), f"expected an image reference, got {image!r}")
    python = checker.text(("export", "python"))
    if python is not None and (not python or any(c.isspace() for c in python)):
        checker.error(("export", "python"), f"expected a program, got {python!r}", "python3")
    secret = checker.text(("export", "secret"))
    if secret is not None and not _K8S_NAME_RE.match(secret):
        checker.error(
            ("export", "secret"),
            f"expected a Kubernetes Secret name, got {secret!r}",
            "lower-case letters, digits, '-' and '.' (DNS-1123)",
        )
    keys: dict[str, str] = {}
    for name, key in (checker.mapping(("export", "secret_keys")) or {}).items():
        path: KeyPath = ("export", "secret_keys", name)
        if not ENV_NAME_RE.match(name):
            checker.error(path, f"expected a from_env variable name, got {name!r}")
        elif not isinstance(key, str) or not _SECRET_KEY_RE.match(key):
            checker.error(path, "expected a key of the Secret", "letters, digits, '-', '_', '.'")
        else:
            keys[name] = key
    replicas = checker.integer(("export", "replicas"), 1)
    return ExportSettings(
        image=image,
        python=python or defaults.python,
        secret=secret,
        secret_keys=frozen_map(keys),
        replicas=replicas if replicas is not None else defaults.replicas,
    )
