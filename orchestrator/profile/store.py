"""Profiles: YAML files in git -> validated ``Profile`` values, before anything runs.

A profile directory holds ``<name>.yaml`` profiles and the host inventory ``hosts.yaml``.
``extends`` chains deep-merge mappings (``args`` key by key, ``null`` removes an inherited key);
:class:`~orchestrator.profile.checks.ProfileChecker` reads each section of the merged document,
then every SGLang field the profile sets (:func:`requested_fields`) is checked here against the
argument table of the profile's SGLang version. All problems of one profile are collected, each
with file:line:column, key path and a hint.
"""

from __future__ import annotations

import difflib
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator.errors import InvalidProfile, ProfileError, ProfileNotFound
from orchestrator.model import ArgValue, Finding, Group, Host, Profile, SecretRef, Severity
from orchestrator.profile.checks import (
    GROUP_FIELDS,
    INVENTORY_FILE,
    LOCAL_HOST,
    STRUCTURED_FIELDS,
    ProfileChecker,
)
from orchestrator.profile.doccheck import DocChecker
from orchestrator.profile.yamldoc import KeyPath, Position, YamlDoc, format_path, parse_yaml
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable, BadValue

PROFILE_SUFFIX = ".yaml"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# A profile's file and its lock (<name>.lock.json) must fit a file name (255 bytes on Linux).
MAX_NAME = 200


def valid_name(name: str) -> bool:
    return len(name) <= MAX_NAME and _NAME_RE.match(name) is not None


_NOT_INHERITED = ("extends", "abstract")
_HOST_KEYS = (
    "address", "port", "user", "identity_file", "known_hosts", "python", "workdir", "persist_s",
)  # fmt: skip


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


@dataclass(frozen=True)
class LoadedProfile:
    profile: Profile
    table: ArgTable  # the argument table the profile was checked against
    findings: tuple[Finding, ...]


class ProfileStore:
    """The profiles of one directory (usually ``profiles/`` in a team's git repository)."""

    def __init__(
        self, root: Path, display_root: Path | None = None, local_python: str | None = None
    ) -> None:
        """``local_python``: the interpreter for ``host: local`` when hosts.yaml names none
        (the CLI passes its own, which has psutil for the agent)."""
        self.root = root
        self._display_root = display_root
        self._local_python = local_python
        self._docs: dict[str, YamlDoc] = {}
        self._inventory: dict[str, Host] | None = None
        self._inventory_error: ProfileError | InvalidProfile | None = None

    @property
    def local_python(self) -> str | None:
        return self._local_python

    def names(self) -> list[str]:
        """The profiles: ``<name>.yaml`` files whose name is a profile name (see :meth:`strays`)."""
        if not self.root.is_dir():
            return []
        return sorted(
            path.name.removesuffix(PROFILE_SUFFIX)
            for path in self.root.glob(f"*{PROFILE_SUFFIX}")
            if path.name != INVENTORY_FILE and _NAME_RE.match(path.stem)
        )

    def strays(self) -> list[ProfileError]:
        """YAML files in the directory that no profile name reaches: ``x.yml``, ``My Profile.yaml``.
        Hidden files (``.yamllint.yaml``) are not profiles and are left alone."""
        if not self.root.is_dir():
            return []
        errors = []
        for path in sorted(self.root.iterdir()):
            if path.name.startswith(".") or path.suffix.lower() not in (".yaml", ".yml"):
                continue
            readable = path.suffix == PROFILE_SUFFIX and _NAME_RE.match(path.stem)
            if path.name == INVENTORY_FILE or readable:
                continue
            stem = re.sub(r"[^A-Za-z0-9._-]+", "-", path.stem).strip("-._") or "name"
            if path.stem.lower() == INVENTORY_FILE.removesuffix(PROFILE_SUFFIX):
                problem = f"orch reads the host inventory from {INVENTORY_FILE} only"
                fix = f"rename it to {INVENTORY_FILE}"
            elif path.suffix != PROFILE_SUFFIX:
                problem = f"not a profile: orch reads <name>{PROFILE_SUFFIX} files only"
                fix = f"rename it to {stem}{PROFILE_SUFFIX}"
            else:
                problem = f"not a profile name: {path.stem!r}"
                fix = (
                    f"rename it, e.g. to {stem}{PROFILE_SUFFIX}: a name is letters, digits, "
                    "'.', '_' and '-', starting with a letter or digit"
                )
            errors.append(ProfileError(problem, fix, source=self.display(path)))
        return errors

    def display(self, path: Path) -> str:
        base = self._display_root
        if base is not None and path.is_relative_to(base):
            return str(path.relative_to(base))
        return str(path)

    def path_of(self, name: str) -> Path:
        return self.root / f"{name}{PROFILE_SUFFIX}"

    def load(self, name: str) -> LoadedProfile:
        """Load, inherit and validate one profile; ``InvalidProfile`` lists every problem."""
        chain, merged = self._inherit(name)
        checker = ProfileChecker(merged, self.display(self.path_of(name)))
        for path, placeholder in _placeholders(merged.value, ()):
            checker.error(
                path, f"{placeholder} is a placeholder `orch import` left: the script did not "
                "determine this value",
                "write the host's name (hosts.yaml) here, or import again with --host H0,H1,..."
                if "host of rank" in placeholder
                else "write the value here, or import again with --set NAME=VALUE",
            )  # fmt: skip
        profile, table = checker.profile(name, chain, self.inventory())
        if profile is not None:
            _check_fields(checker, profile, table)
            _check_parallelism(checker, profile)
        if checker.errors or profile is None:
            raise InvalidProfile(checker.errors)
        return LoadedProfile(profile, table, tuple(checker.findings))

    def merged(self, name: str) -> dict[str, Any]:
        """The profile's document with its ``extends`` chain merged in (not validated)."""
        _, merged = self._inherit(name)
        return dict(merged.value)

    def written(self, name: str) -> dict[KeyPath, Position]:
        """Where each key of the merged profile is written (file as displayed, line, column),
        across its ``extends`` chain: for edits in place."""
        _, merged = self._inherit(name)
        return dict(merged.positions)

    def inventory(self) -> dict[str, Host]:
        """The host inventory: ``hosts.yaml`` entries plus the built-in ``local``."""
        if self._inventory is None:
            if self._inventory_error is not None:  # reported once per command, not per profile
                raise self._inventory_error
            try:
                self._inventory = _read_inventory(self._inventory_doc(), self._local_python)
            except (ProfileError, InvalidProfile) as exc:
                self._inventory_error = exc
                raise
        return self._inventory

    def _inventory_doc(self) -> YamlDoc | None:
        path = self.root / INVENTORY_FILE
        source = self.display(path)
        if not path.exists():
            return None
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(
                f"cannot read the host inventory: {exc}", f"{INVENTORY_FILE} is a UTF-8 YAML file",
                source=source,
            ) from exc  # fmt: skip
        return parse_yaml(text, source)

    # -- inheritance -------------------------------------------------------------------------

    def _doc(self, name: str, wanted_by: tuple[str, Position | None] | None = None) -> YamlDoc:
        if name in self._docs:
            return self._docs[name]
        if not valid_name(name) or not self.path_of(name).is_file():
            raise self._not_found(name, wanted_by)
        path = self.path_of(name)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProfileError(
                f"cannot read profile: {exc}", "profiles are UTF-8 YAML files",
                source=self.display(path),
            ) from exc  # fmt: skip
        doc = parse_yaml(text, self.display(path))
        if not isinstance(doc.value, dict):
            raise ProfileError(
                f"a profile is a mapping of keys, got {type(doc.value).__name__}",
                "start the file with keys such as `extends:`, `host:`, `model:`",
                source=doc.source,
                line=1,
            )
        self._docs[name] = doc
        return doc

    def _not_found(self, name: str, wanted_by: tuple[str, Position | None] | None) -> ProfileError:
        available = self.names()
        close = difflib.get_close_matches(name, available, n=1)
        hint = (f"did you mean {close[0]}? " if close else "") + (
            f"available: {', '.join(available)}" if available else f"no profiles in {self.root}"
        )
        shown = repr(name) if len(name) <= 60 else f"{name[:40]!r}... ({len(name)} characters)"
        if wanted_by is None:
            return ProfileNotFound(f"no profile named {shown} in {self.root}", hint)
        source, position = wanted_by
        return ProfileNotFound(
            f"extends {shown}, which is not a profile in {self.root}",
            hint,
            source=source,
            key_path="extends",
            line=position.line if position else None,
            column=position.column if position else None,
        )

    def _inherit(self, name: str) -> tuple[tuple[str, ...], YamlDoc]:
        """Follow ``extends`` to the root, merge root first; the chain comes back nearest first."""
        chain: list[str] = []
        docs: list[YamlDoc] = []
        current: str | None = name
        wanted_by: tuple[str, Position | None] | None = None
        while current is not None:
            if current in chain:
                loop = " -> ".join([*chain[chain.index(current) :], current])
                raise ProfileError(
                    f"extends cycle: {loop}",
                    "a profile cannot inherit from itself",
                    source=docs[-1].source,
                    key_path="extends",
                )
            doc = self._doc(current, wanted_by)
            chain.append(current)
            docs.append(doc)
            parent = doc.value.get("extends")
            if parent is not None and not isinstance(parent, str):
                position = doc.positions.get(("extends",))
                raise ProfileError(
                    f"expected a profile name, got {parent!r}",
                    "extends names one profile, e.g. `extends: qwen36-27b`",
                    source=doc.source,
                    key_path="extends",
                    line=position.line if position else None,
                )
            wanted_by = (doc.source, doc.positions.get(("extends",)))
            current = parent
        merged = YamlDoc({}, {}, docs[0].source)
        for index, doc in enumerate(reversed(docs)):
            own = doc if index == len(docs) - 1 else _strip_not_inherited(doc)
            merged = _merge(merged, own)
        return tuple(chain), merged


PLACEHOLDER_RE = re.compile(r"<unset: [^>]*>")


def placeholder(what: str) -> str:
    """The visible stand-in ``orch import`` writes for a value a script does not determine;
    validation refuses a profile that still holds one."""
    return f"<unset: {what}>"


def _placeholders(value: Any, path: KeyPath) -> list[tuple[KeyPath, str]]:
    """``<unset: NAME>`` texts (``orch import``'s placeholders) anywhere in a document."""
    if isinstance(value, str):
        return [(path, found) for found in PLACEHOLDER_RE.findall(value)]
    if isinstance(value, dict):
        return [f for key, item in value.items() for f in _placeholders(item, (*path, key))]
    if isinstance(value, list):
        return [f for index, item in enumerate(value) for f in _placeholders(item, (*path, index))]
    return []


def _strip_not_inherited(doc: YamlDoc) -> YamlDoc:
    value = {k: v for k, v in doc.value.items() if k not in _NOT_INHERITED}
    positions = {p: pos for p, pos in doc.positions.items() if p[0] not in _NOT_INHERITED}
    return YamlDoc(value, positions, doc.source)


def _merge(base: YamlDoc, child: YamlDoc) -> YamlDoc:
    """Deep-merge ``child`` over ``base``: mappings merge key by key, anything else replaces,
    ``null`` removes; each key keeps the position of the file that set it."""
    replaced: list[KeyPath] = []

    def merge(into: dict[str, Any], over: dict[str, Any], path: KeyPath) -> dict[str, Any]:
        out = dict(into)
        for key, value in over.items():
            here = (*path, key)
            if value is None:
                out.pop(key, None)
                replaced.append(here)
            elif isinstance(value, dict):
                # merge even over nothing, so that nulls inside a new mapping are dropped too
                base = out.get(key)
                out[key] = merge(base if isinstance(base, dict) else {}, value, here)
                if not isinstance(base, dict):
                    replaced.append(here)
            else:
                out[key] = value
                replaced.append(here)
        return out

    value = merge(base.value, child.value, ())
    positions = {
        path: pos
        for path, pos in base.positions.items()
        if not any(path[: len(prefix)] == prefix and len(path) > len(prefix) for prefix in replaced)
    }
    positions.update(child.positions)
    return YamlDoc(value, positions, child.source)


# -- inventory ----------------------------------------------------------------------------------


def _read_inventory(doc: YamlDoc | None, local_python: str | None) -> dict[str, Host]:
    hosts: dict[str, Host] = {LOCAL_HOST: Host(name=LOCAL_HOST, python=local_python)}
    if doc is None:
        return hosts
    checker = DocChecker(doc, doc.source)
    checker.keys((), ("hosts",))
    entries = checker.mapping(("hosts",)) or {}
    for name in entries:
        path: KeyPath = ("hosts", name)
        if not _NAME_RE.match(name):
            checker.error(path, f"bad host name {name!r}", "use letters, digits, '.', '_', '-'")
            continue
        if checker.mapping(path) is None:
            checker.error(path, "expected a mapping of address, user, python, workdir ...")
            continue
        checker.keys(path, _HOST_KEYS)
        address = checker.text((*path, "address"))
        if name == LOCAL_HOST and address is not None:
            checker.error(
                (*path, "address"),
                "`local` is this machine and takes no address",
                "name the remote host something else",
            )
        elif name != LOCAL_HOST and address is None:
            checker.error(path, "missing `address` (a hostname, IP or ~/.ssh/config alias)")
        python = checker.text((*path, "python"))
        if python is not None and "/" in python and not python.startswith("/"):
            checker.error(
                (*path, "python"),
                f"expected an absolute path or a command name, got {python!r} "
                "(argv[0] is not run through a shell, so no shell expands it)",
                "write the full path, e.g. /home/ubuntu/venvs/sglang/bin/python",
            )
            python = None
        elif name != LOCAL_HOST and python is None:
            checker.error(
                path,
                "missing `python`: the interpreter of the venv that holds sglang",
                "e.g. python: /opt/venvs/sglang/bin/python",
            )
        hosts[name] = Host(
            name=name,
            address=address if name != LOCAL_HOST else None,
            port=checker.integer((*path, "port"), 1, 65535),
            user=checker.text((*path, "user")),
            identity_file=checker.text((*path, "identity_file")),
            known_hosts=checker.text((*path, "known_hosts")),
            python=python or (local_python if name == LOCAL_HOST else None),
            workdir=_workdir(checker, (*path, "workdir")),
            persist_s=checker.number((*path, "persist_s"), 0, 24 * 3600) or 0.0,
        )
    if checker.errors:
        raise InvalidProfile(checker.errors)
    return hosts


def _workdir(checker: DocChecker, path: KeyPath) -> str:
    """An absolute path, or one under the SSH user's home: ``~`` and ``~/x`` (expanded by
    ``transport.expand_home`` where the agent is located). Anything else would be resolved against
    whatever directory the agent runs in (it runs in ``/``), splitting a deployment's state."""
    if checker.get(path) is None:  # YAML reads a bare ~ as null
        checker.error(
            path, "expected a path, got null (YAML reads a bare ~ as null)",
            "quote it for the SSH user's home: workdir: \"~\"; or leave the key out",
        )  # fmt: skip
        return Host.workdir
    workdir = checker.text(path)
    if workdir is None:
        return Host.workdir
    if workdir.startswith(("/", "~/")) or workdir == "~":
        return workdir
    if workdir.startswith("~"):
        checker.error(
            path, f"expected an absolute path or ~/..., got {workdir!r}: ~user is not expanded",
            f"~ is the SSH user's home: write ~/{workdir.partition('/')[2] or 'orch'}, "
            "or the absolute path",
        )  # fmt: skip
    else:
        checker.error(
            path, f"expected an absolute path or ~/..., got {workdir!r}",
            f"a relative workdir would depend on where the agent runs; write ~/{workdir} "
            "(under the SSH user's home) or an absolute path such as /data/orch"
            if workdir else "write an absolute path such as /data/orch, or leave the key out",
        )  # fmt: skip
    return Host.workdir


# -- the built profile, checked as a whole ---------------------------------------------------------


def _check_fields(checker: DocChecker, profile: Profile, table: ArgTable) -> None:
    """Every SGLang field against the version's argument table: name, spelling, value."""
    version = table.version
    for field in requested_fields(profile):
        path = tuple(field.key_path.split("."))
        spelling = argtable.spell(table, field.name)
        if spelling is None:
            names = argtable.known_names(table)
            close = difflib.get_close_matches(field.name, names, n=1, cutoff=0.7)
            elsewhere = [
                v for v in argtable.available_versions()
                if v != version and argtable.spell(argtable.load_table(v), field.name)
            ]  # fmt: skip
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
            checker.error(
                path, f"unknown SGLang {version} argument", hint or "see `sglang serve --help`"
            )
            continue
        if spelling.rename is not None and field.name == spelling.rename.old:
            checker.note(
                Severity.WARNING, path,
                f"SGLang {version} calls this {spelling.rename.new} "
                f"({spelling.rename.describe()}); rendered as {spelling.flag}",
                f"write {spelling.rename.new}",
            )  # fmt: skip
        elif spelling.rename is not None:
            checker.note(
                Severity.NOTICE, path,
                f"SGLang {version} spells this {spelling.flag} "
                f"({spelling.rename.describe()})",
                None,
            )  # fmt: skip
        elif spelling.option.deprecated:
            checker.note(
                Severity.WARNING, path,
                f"{spelling.flag} is deprecated in SGLang {version}",
                spelling.option.help or None,
            )  # fmt: skip
        try:
            argtable.arg_tokens(spelling.option, field.value, spelling.flag)
        except BadValue as exc:
            checker.error(path, exc.expected, exc.hint)
            continue
        if spelling.option.type == "float" and not _finite(field.value):
            checker.error(
                path, f"expected a finite number, got {field.value!r}",
                "NaN and infinities are not accepted",
            )  # fmt: skip
        if isinstance(field.value, SecretRef):
            checker.note(
                Severity.WARNING, path,
                f"{{from_env: {field.value.env_var}}} goes on the server's command line as "
                f"{spelling.flag}: every user on {profile.host.name} can read it in the "
                "process list (ps, /proc/PID/cmdline)",
                _secret_hint(spelling.flag, version),
            )  # fmt: skip
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
            ("pin", index), f"pins {name}, which this profile does not set",
            "a pin asserts the profile's own value survives; set the field or drop the pin",
        )  # fmt: skip


def _check_parallelism(checker: DocChecker, profile: Profile) -> None:
    """A tp x pp layout needs that many GPUs, spread evenly over a group's nodes; SGLang finds
    out only at init (a world that never completes hangs at ``Init torch distributed begin``).
    The group's own fields are orch's to set."""
    for name in GROUP_FIELDS:
        if name in profile.args:
            checker.error(
                ("args", name), f"orch sets {name} from `group:`",
                "declare the nodes under group.nodes (rank 0 first); orch renders "
                "--dist-init-addr, --nnodes and --node-rank for each",
            )  # fmt: skip
    tp, pp = profile.parallel_sizes
    needed = tp * pp
    group = profile.group
    nnodes = group.nnodes if group is not None else 1
    if needed % nnodes:
        checker.error(
            ("group", "nodes"),
            f"tp_size x pp_size = {needed} GPUs cannot be split evenly over {nnodes} nodes",
            f"SGLang would start {needed // nnodes or 1} rank(s) per node and hang at init: "
            f"use a multiple of {nnodes}, or {nnodes} nodes that divide {needed}",
        )
        return
    if group is not None:
        _check_dp_attention_ports(checker, profile, group)
    if not profile.gpu.devices:
        return
    per_node = needed // nnodes
    if per_node > len(profile.gpu.devices):
        on = f" per node ({needed} over {nnodes} nodes)" if nnodes > 1 else ""
        checker.error(
            ("args", "tp_size"),
            f"tp_size x pp_size = {per_node} GPUs{on}, but gpu.devices lists "
            f"{len(profile.gpu.devices)}",
            "list more devices or lower tp_size",
        )


# With DP attention SGLang takes the rendezvous port + 1 .. + 6 on rank 0's host for its own
# sockets (0.5.23 server_args.py: tokenizer, detokenizer, rpc, metrics, scheduler input, load).
DP_ATTENTION_PORTS = 6


def _check_dp_attention_ports(checker: DocChecker, profile: Profile, group: Group) -> None:
    if profile.args.get("enable_dp_attention") is not True:
        return
    first = group.rendezvous_port + 1
    last = group.rendezvous_port + DP_ATTENTION_PORTS
    for rank, node in enumerate(group.nodes):
        if node.host.address != group.leader.host.address:
            continue
        ports = [("--port", node.port or profile.port)]
        if rank == 0:
            ports.append(("control", group.control_port))
            if group.wanted_gate_port is not None:
                ports.append(("gated launch", group.wanted_gate_port))
        clash = [(what, port) for what, port in ports if first <= port <= last]
        for what, port in clash:
            checker.error(
                ("group", "rendezvous_port"),
                f"with DP attention SGLang takes ports {first}-{last} after the rendezvous "
                f"port on {group.leader.host.name}; rank {rank}'s {what} port {port} is one",
                "move group.rendezvous_port or the other port at least 7 apart",
            )
