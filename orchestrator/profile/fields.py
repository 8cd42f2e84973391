"""The SGLang fields a profile sets (``requested_fields``: its structured keys, then ``args``,
then a group's own), each checked against the argument table of the profile's SGLang version:
its name, its spelling in that release, its value, and the pins that name it."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from orchestrator.model import ArgValue, Profile, SecretRef, Severity
from orchestrator.profile.doccheck import DocChecker
from orchestrator.profile.yamldoc import KeyPath, format_path
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable, BadValue
from orchestrator.sglang.pitfalls import REPLACEMENT_REMOVED_IN, replacement_for

# SGLang fields a profile sets through its own structured keys, in render order.
STRUCTURED_FIELDS: dict[str, KeyPath] = {
    "model_path": ("model", "path"),
    "served_model_name": ("model", "served_model_name"),
    "host": ("bind",),
    "port": ("port",),
    "speculative_algorithm": ("spec_decode", "algorithm"),
    "speculative_num_steps": ("spec_decode", "num_steps"),
    "speculative_eagle_topk": ("spec_decode", "eagle_topk"),
    "speculative_num_draft_tokens": ("spec_decode", "num_draft_tokens"),
    "speculative_draft_model_path": ("spec_decode", "draft_model_path"),
}

# What ``metrics: true`` renders: SGLang's /metrics, and for a launch group every scheduler's
# series (without it, the schedulers of ranks >= 1 report nothing: 0.5.23 metrics_collector.py
# ``current_scheduler_metrics_enabled``), served by each rank's dummy health server.
METRICS_FIELDS = ("enable_metrics", "enable_metrics_for_all_schedulers")


@dataclass(frozen=True)
class RequestedField:
    """One SGLang field a profile sets, with where in the profile it came from."""

    name: str  # as the profile wrote it (underscores); may be another version's spelling
    value: ArgValue
    key_path: str


def requested_fields(profile: Profile) -> tuple[RequestedField, ...]:
    """Every SGLang field the profile sets, structured keys first, then ``args`` in order."""
    structured: dict[str, ArgValue | None] = {
        "model_path": profile.model.path,
        "served_model_name": profile.model.served_model_name,
        "host": profile.bind,
        "port": profile.port,
    }
    if profile.spec_decode is not None:
        spec = profile.spec_decode
        structured.update(
            speculative_algorithm=spec.algorithm,
            speculative_num_steps=spec.num_steps,
            speculative_eagle_topk=spec.eagle_topk,
            speculative_num_draft_tokens=spec.num_draft_tokens,
            speculative_draft_model_path=spec.draft_model_path,
        )
    out = [
        RequestedField(name, value, format_path(STRUCTURED_FIELDS[name]))
        for name, value in structured.items()
        if value is not None
    ]
    if profile.metrics:
        out.append(RequestedField("enable_metrics", True, "metrics"))
        if profile.group is not None:
            out.append(RequestedField("enable_metrics_for_all_schedulers", True, "metrics"))
    out += [RequestedField(name, value, f"args.{name}") for name, value in profile.args.items()]
    group = profile.group
    if group is not None:  # orch's own, after the profile's: the same on every rank but the rank
        out += [
            RequestedField("dist_init_addr", group.rendezvous, "group.rendezvous_port"),
            RequestedField("nnodes", group.nnodes, "group.nodes"),
            RequestedField("node_rank", profile.rank, f"group.nodes.{profile.rank}"),
        ]
        if group.active_gate_port is not None:
            out.append(
                RequestedField("gated_launch_port", group.active_gate_port, "group.gate_port")
            )
    return tuple(out)


def check_fields(checker: DocChecker, profile: Profile, table: ArgTable) -> None:
    """Every SGLang field against the version's argument table: name, spelling, value."""
    version = table.version
    for field in requested_fields(profile):
        path = tuple(field.key_path.split("."))
        spelling = argtable.spell(table, field.name)
        replaced = replacement_for(field.name) is not None
        if spelling is None and replaced and table.parsed_version >= REPLACEMENT_REMOVED_IN:
            continue  # a switch that became a value: the pitfall check says what to write
        if spelling is None:
            names = argtable.known_names(table)
            close = difflib.get_close_matches(field.name, names, n=1, cutoff=0.7)
            elsewhere = [
                v
                for v in argtable.available_versions()
                if v != version and argtable.spell(argtable.load_table(v), field.name)
            ]
            hint = f"did you mean {close[0]}?" if close else None
            prefixed = [name for name in names if name.startswith(field.name + "_")]
            if prefixed:  # argparse reads --pp as an abbreviation: ambiguous, or a guess
                hint = (
                    f"write the whole name: did you mean {prefixed[0]}?"
                    if len(prefixed) == 1
                    else f"SGLang's own parser refuses --{field.name.replace('_', '-')} as "
                    f"ambiguous ({', '.join(prefixed[:4])}); write the whole name, e.g. "
                    f"{min(prefixed, key=len)}"
                )
            if elsewhere:
                hint = (hint + " " if hint else "") + (
                    f"it exists in SGLang {', '.join(elsewhere)}"
                )
            if field.name in METRICS_FIELDS and path == ("metrics",):  # not the user's spelling
                flag = "--" + field.name.replace("_", "-")
                hint = (
                    f"`metrics: true` renders {flag}, which SGLang {version} does not have "
                    f"(first in {elsewhere[0] if elsewhere else 'no release orch knows'}): "
                    "pin a newer `sglang:`, or leave `metrics` out and set args yourself"
                )
            checker.error(
                path, f"unknown SGLang {version} argument", hint or "see `sglang serve --help`"
            )
            continue
        if spelling.rename is not None and field.name == spelling.rename.old:
            checker.note(
                Severity.WARNING,
                path,
                f"SGLang {version} calls this {spelling.rename.new} "
                f"({spelling.rename.describe()}); rendered as {spelling.flag}",
                f"write {spelling.rename.new}",
            )
        elif spelling.rename is not None:
            checker.note(
                Severity.NOTICE,
                path,
                f"SGLang {version} spells this {spelling.flag} ({spelling.rename.describe()})",
                None,
            )
        elif spelling.option.deprecated and not replaced:
            checker.note(
                Severity.WARNING,
                path,
                f"{spelling.flag} is deprecated in SGLang {version}",
                spelling.option.help or None,
            )
        try:
            argtable.arg_tokens(spelling.option, field.value, spelling.flag)
        except BadValue as exc:
            checker.error(path, exc.expected, exc.hint)
            continue
        if spelling.option.type == "float" and not _finite(field.value):
            checker.error(
                path,
                f"expected a finite number, got {field.value!r}",
                "NaN and infinities are not accepted",
            )
        if isinstance(field.value, SecretRef):
            checker.note(
                Severity.WARNING,
                path,
                f"{{from_env: {field.value.env_var}}} goes on the server's command line as "
                f"{spelling.flag}: every user on {profile.host.name} can read it in the "
                "process list (ps, /proc/PID/cmdline)",
                _secret_hint(spelling.flag, version),
            )
    _check_pins(checker, profile, table)


def _secret_hint(flag: str, version: str) -> str:
    """SGLang 0.5.11-0.5.23 read their secret options (api_key, admin_api_key,
    ssl_keyfile_password) from the command line only: server_args has no environment fallback."""
    return (
        f"SGLang {version} reads {flag} from its command line only: launch it where no untrusted "
        "user has a login. A secret SGLang reads from its environment (HF_TOKEN for the Hub) "
        "belongs under env:, which other users cannot read"
    )


def _finite(value: object) -> bool:
    """False for a float option's NaN or infinity, written as text ("nan", "-inf", "1e999")."""
    items = value if isinstance(value, tuple) else (value,)
    for item in items:
        if isinstance(item, str | float) and not isinstance(item, bool):
            try:
                if not math.isfinite(float(item)):
                    return False
            except ValueError:
                continue
    return True


def _check_pins(checker: DocChecker, profile: Profile, table: ArgTable) -> None:
    dests = {}
    for field in requested_fields(profile):
        spelling = argtable.spell(table, field.name)
        if spelling is not None:
            dests[spelling.dest] = field.name
            dests[field.name] = field.name
    for index, name in enumerate(profile.pin):
        spelling = argtable.spell(table, name)
        if name in dests or (spelling is not None and spelling.dest in dests):
            continue
        checker.error(
            ("pin", index),
            f"pins {name}, which this profile does not set",
            "a pin asserts the profile's own value survives; set the field or drop the pin",
        )
