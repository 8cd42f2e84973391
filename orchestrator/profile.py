"""Profiles: YAML files in git -> validated ``Profile`` values, before anything runs.

A profile directory holds ``<name>.yaml`` profiles and the host inventory ``hosts.yaml``.
``extends`` chains deep-merge mappings (``args`` key by key, ``null`` removes an inherited key);
every SGLang argument is checked against the argument table of the profile's SGLang version.
All problems of one profile are collected, each with file:line:column, key path and a hint.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from orchestrator import argtable, gpus
from orchestrator.argtable import ArgTable, BadValue
from orchestrator.errors import ProfileError, ProfileErrors, ProfileNotFound
from orchestrator.model import (
    ArgValue,
    EnvValue,
    Finding,
    GpuSpec,
    HealthPolicy,
    Host,
    Launcher,
    ModelSpec,
    Profile,
    RestartMode,
    RestartPolicy,
    SecretRef,
    Severity,
    SpecDecode,
    frozen_map,
)
from orchestrator.yamldoc import KeyPath, Position, YamlDoc, format_path, parse_yaml

PROFILE_SUFFIX = ".yaml"
INVENTORY_FILE = "hosts.yaml"
LOCAL_HOST = "local"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_DEVICE_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")

_TOP_KEYS = (
    "extends", "abstract", "description", "sglang", "host", "launcher", "model", "gpu",
    "spec_decode", "port", "bind", "env", "args", "restart", "health", "stop_timeout_s", "pin",
)  # fmt: skip
_NOT_INHERITED = ("extends", "abstract")
_SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "model": ("path", "served_model_name"),
    "gpu": ("type", "devices"),
    "spec_decode": ("algorithm", "num_steps", "eagle_topk", "num_draft_tokens", "draft_model_path"),
    "restart": (
        "mode",
        "delay_s",
        "multiplier",
        "max_delay_s",
        "start_limit",
        "start_limit_interval_s",
    ),
    "health": ("startup_timeout_s", "interval_s", "endpoint"),
}
_HOST_KEYS = ("address", "port", "user", "identity_file", "known_hosts", "python", "workdir")

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

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(
            path.name.removesuffix(PROFILE_SUFFIX)
            for path in self.root.glob(f"*{PROFILE_SUFFIX}")
            if path.name != INVENTORY_FILE and _NAME_RE.match(path.stem)
        )

    def display(self, path: Path) -> str:
        base = self._display_root
        if base is not None and path.is_relative_to(base):
            return str(path.relative_to(base))
        return str(path)

    def path_of(self, name: str) -> Path:
        return self.root / f"{name}{PROFILE_SUFFIX}"

    def load(self, name: str) -> LoadedProfile:
        """Load, inherit and validate one profile; ``ProfileErrors`` lists every problem."""
        chain, merged = self._inherit(name)
        checker = _Checker(merged, self.display(self.path_of(name)))
        profile, table = checker.profile(name, chain, self.inventory())
        if checker.errors or profile is None or table is None:
            raise ProfileErrors(checker.errors)
        return LoadedProfile(profile, table, tuple(checker.findings))

    def inventory(self) -> dict[str, Host]:
        """The host inventory: ``hosts.yaml`` entries plus the built-in ``local``."""
        if self._inventory is None:
            path = self.root / INVENTORY_FILE
            source = self.display(path)
            doc = parse_yaml(path.read_text(encoding="utf-8"), source) if path.exists() else None
            self._inventory = _read_inventory(doc, self._local_python)
        return self._inventory

    # -- inheritance -------------------------------------------------------------------------

    def _doc(self, name: str, wanted_by: tuple[str, Position | None] | None = None) -> YamlDoc:
        if name in self._docs:
            return self._docs[name]
        path = self.path_of(name)
        if not _NAME_RE.match(name) or not path.is_file():
            raise self._not_found(name, wanted_by)
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
        if wanted_by is None:
            return ProfileNotFound(f"no profile named {name!r} in {self.root}", hint)
        source, position = wanted_by
        return ProfileNotFound(
            f"extends {name!r}, which is not a profile in {self.root}",
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
    checker = _Checker(doc, doc.source)
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
            workdir=checker.text((*path, "workdir")) or Host.workdir,
        )
    if checker.errors:
        raise ProfileErrors(checker.errors)
    return hosts


# -- validation ---------------------------------------------------------------------------------

_MISSING: Any = object()


class _Checker:
    """Reads a merged document with typed accessors that record located errors, not raise."""

    def __init__(self, doc: YamlDoc, source: str) -> None:
        self.doc = doc
        self.source = source
        self.errors: list[ProfileError] = []
        self.findings: list[Finding] = []

    # -- locating and reporting --

    def _position(self, path: KeyPath) -> Position | None:
        for end in range(len(path), 0, -1):
            if (found := self.doc.positions.get(path[:end])) is not None:
                return found
        return None

    def error(self, path: KeyPath, message: str, hint: str | None = None) -> None:
        pos = self._position(path)
        self.errors.append(
            ProfileError(
                message,
                hint,
                source=pos.source if pos else self.source,
                key_path=format_path(path) or None,
                line=pos.line if pos else None,
                column=pos.column if pos else None,
            )
        )

    def note(self, severity: Severity, path: KeyPath, message: str, hint: str | None) -> None:
        located = ProfileError(message, None, key_path=format_path(path) or None)
        pos = self._position(path)
        if pos is not None:
            located = ProfileError(
                message, None, source=pos.source, key_path=located.key_path,
                line=pos.line, column=pos.column,
            )  # fmt: skip
        self.findings.append(Finding(severity, located.message, hint))

    # -- typed access --

    def get(self, path: KeyPath) -> Any:
        node: Any = self.doc.value
        for part in path:
            if not isinstance(node, dict) or part not in node:
                return _MISSING
            node = node[part]
        return node

    def keys(self, path: KeyPath, allowed: Iterable[str]) -> None:
        node = self.get(path)
        if not isinstance(node, dict):
            return
        allowed = tuple(allowed)
        for key in node:
            if key not in allowed:
                close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
                hint = f"did you mean {close[0]}?" if close else f"known keys: {', '.join(allowed)}"
                self.error((*path, key), "unknown key", hint)

    def mapping(self, path: KeyPath) -> dict[str, Any] | None:
        value = self.get(path)
        if value is _MISSING:
            return None
        if not isinstance(value, dict):
            self.error(path, f"expected a mapping, got {_kind(value)}")
            return None
        return value

    def text(self, path: KeyPath, *, one_line: bool = True) -> str | None:
        value = self.get(path)
        if value is _MISSING:
            return None
        if not isinstance(value, str):
            self.error(path, f"expected a string, got {_kind(value)}", "quote the value")
            return None
        if "\0" in value or (one_line and ("\n" in value or "\r" in value)):
            self.error(path, "NUL bytes and line breaks are not allowed here")
            return None
        return value

    def integer(self, path: KeyPath, low: int, high: int | None = None) -> int | None:
        value = self.get(path)
        if value is _MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, int):
            self.error(path, f"expected an integer, got {_kind(value)}")
            return None
        if value < low or (high is not None and value > high):
            bound = f"in {low}..{high}" if high is not None else f">= {low}"
            self.error(path, f"expected an integer {bound}, got {value}")
            return None
        return value

    def number(self, path: KeyPath, low: float) -> float | None:
        value = self.get(path)
        if value is _MISSING:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            self.error(path, f"expected a number, got {_kind(value)}")
            return None
        if value < low:
            self.error(path, f"expected a number >= {low:g}, got {value}")
            return None
        return float(value)

    # -- the profile --

    def profile(
        self, name: str, chain: tuple[str, ...], inventory: Mapping[str, Host]
    ) -> tuple[Profile | None, ArgTable | None]:
        self.keys((), _TOP_KEYS)
        for section, allowed in _SECTION_KEYS.items():
            if self.mapping((section,)) is not None:
                self.keys((section,), allowed)
        abstract = self.get(("abstract",))
        if abstract is not _MISSING and not isinstance(abstract, bool):
            self.error(("abstract",), "expected true or false")
        is_abstract = abstract is True

        version = self._sglang_version()
        choice = argtable.table_for(version)
        table = choice.table
        if version is None and not is_abstract:
            self.note(
                Severity.NOTICE, (),
                f"no `sglang:` version; arguments checked against SGLang {table.version}",
                "the host's version is detected at launch; pin one for reproducible renders",
            )  # fmt: skip
        elif version is not None and not choice.exact:
            self.note(
                Severity.WARNING, ("sglang",),
                f"no argument table for SGLang {version}; checked against {table.version}",
                f"tables ship for {', '.join(argtable.available_versions())}; "
                "add one with `make argtables`",
            )  # fmt: skip

        host = self._host(inventory, required=not is_abstract)
        model_path = self.text(("model", "path"))
        if model_path is None and not is_abstract and self.get(("model", "path")) is _MISSING:
            self.error(("model",), "missing `model.path`", "the model directory on the host")
        model = ModelSpec(
            path=model_path or "", served_model_name=self.text(("model", "served_model_name"))
        )
        launcher = self._launcher()
        gpu = self._gpu()
        spec = self._spec_decode()
        port = self.integer(("port",), 1, 65535)
        bind = self.text(("bind",))
        if bind is not None and (not bind or any(c.isspace() for c in bind)):
            self.error(("bind",), f"expected an address such as 0.0.0.0, got {bind!r}")
        env = self._env(gpu)
        args = self._args()
        restart = self._restart()
        health = self._health()
        stop_timeout = self.number(("stop_timeout_s",), 0.0)
        pin = self._pin()
        description = self.text(("description",), one_line=False) or ""

        if self.errors:
            return None, table
        if host is None:  # only an abstract profile gets here without one
            host = Host(name=LOCAL_HOST)
        profile = Profile(
            name=name,
            abstract=is_abstract,
            source=self.source,
            chain=chain,
            host=host,
            model=model,
            sglang_version=version,
            description=description,
            launcher=launcher,
            gpu=gpu,
            spec_decode=spec,
            port=port if port is not None else Profile.port,
            bind=bind if bind is not None else Profile.bind,
            env=frozen_map(env),
            args=frozen_map(args),
            restart=restart,
            health=health,
            stop_timeout_s=stop_timeout if stop_timeout is not None else Profile.stop_timeout_s,
            pin=pin,
        )
        self._check_fields(profile, table)
        self._check_parallelism(profile)
        return (None if self.errors else profile), table

    def _sglang_version(self) -> str | None:
        value = self.get(("sglang",))
        if value is _MISSING:
            return None
        if isinstance(value, int | float) and not isinstance(value, bool):
            self.error(
                ("sglang",), f"expected a version string, got the number {value!r}",
                'quote it: sglang: "0.5.11"',
            )  # fmt: skip
            return None
        text = self.text(("sglang",))
        if text is not None and argtable.parse_version(text) is None:
            self.error(
                ("sglang",), f"expected a version like 0.5.11, got {text!r}",
                "the `sglang.__version__` of the target venv",
            )  # fmt: skip
            return None
        return text

    def _host(self, inventory: Mapping[str, Host], *, required: bool) -> Host | None:
        name = self.text(("host",))
        if name is None:
            if required and self.get(("host",)) is _MISSING:
                self.error(
                    (), "missing `host`",
                    f"name a host from {INVENTORY_FILE}, or `local` for this machine",
                )  # fmt: skip
            return None
        if name not in inventory:
            close = difflib.get_close_matches(name, list(inventory), n=1)
            known = ", ".join(sorted(inventory))
            self.error(
                ("host",), f"unknown host {name!r}",
                (f"did you mean {close[0]}? " if close else "")
                + f"hosts in {INVENTORY_FILE}: {known}",
            )  # fmt: skip
            return None
        return inventory[name]

    def _launcher(self) -> Launcher:
        text = self.text(("launcher",))
        if text is None:
            return Launcher.MODULE
        try:
            return Launcher(text)
        except ValueError:
            self.error(
                ("launcher",), f"expected module or serve, got {text!r}",
                "module: python -m sglang.launch_server; serve: sglang serve",
            )  # fmt: skip
            return Launcher.MODULE

    def _gpu(self) -> GpuSpec:
        if self.mapping(("gpu",)) is None:
            return GpuSpec()
        gpu_type = None
        type_name = self.text(("gpu", "type"))
        if type_name is not None:
            gpu_type = gpus.gpu_type(type_name)
            if gpu_type is None:
                close = difflib.get_close_matches(type_name, gpus.known_gpu_names(), n=1)
                self.error(
                    ("gpu", "type"), f"unknown GPU type {type_name!r}",
                    (f"did you mean {close[0]}? " if close else "")
                    + f"known: {', '.join(gpus.known_gpu_names())}",
                )  # fmt: skip
        devices: list[str] = []
        raw = self.get(("gpu", "devices"))
        if raw is not _MISSING:
            if not isinstance(raw, list):
                self.error(("gpu", "devices"), f"expected a list such as [0, 1], got {_kind(raw)}")
                raw = []
            for index, item in enumerate(raw):
                path: KeyPath = ("gpu", "devices", index)
                if isinstance(item, int) and not isinstance(item, bool) and item >= 0:
                    device = str(item)
                elif isinstance(item, str) and _DEVICE_UUID_RE.match(item):
                    device = item
                else:
                    self.error(path, f"expected a GPU index or GPU-/MIG- UUID, got {item!r}")
                    continue
                if device in devices:
                    self.error(path, f"GPU {device} is listed twice")
                devices.append(device)
        return GpuSpec(type=gpu_type, devices=tuple(devices))

    def _spec_decode(self) -> SpecDecode | None:
        if self.mapping(("spec_decode",)) is None:
            return None
        algorithm = self.text(("spec_decode", "algorithm"))
        if algorithm is None:
            if self.get(("spec_decode", "algorithm")) is _MISSING:
                self.error(
                    ("spec_decode",), "missing `algorithm`",
                    "e.g. EAGLE (MTP heads of Qwen3.6 load through EAGLE), EAGLE3, NGRAM",
                )  # fmt: skip
            return None
        return SpecDecode(
            algorithm=algorithm,
            num_steps=self.integer(("spec_decode", "num_steps"), 1),
            eagle_topk=self.integer(("spec_decode", "eagle_topk"), 1),
            num_draft_tokens=self.integer(("spec_decode", "num_draft_tokens"), 1),
            draft_model_path=self.text(("spec_decode", "draft_model_path")),
        )

    def _env(self, gpu: GpuSpec) -> dict[str, EnvValue]:
        raw = self.mapping(("env",)) or {}
        env: dict[str, EnvValue] = {}
        if gpu.devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu.devices)
        for name, value in raw.items():
            path: KeyPath = ("env", name)
            if not _ENV_NAME_RE.match(name):
                self.error(
                    path, f"bad environment variable name {name!r}", "use [A-Za-z_][A-Za-z0-9_]*"
                )
                continue
            if name == "CUDA_VISIBLE_DEVICES" and gpu.devices:
                self.error(path, "set twice: also derived from gpu.devices", "keep gpu.devices")
                continue
            secret = self._secret(path, value)
            if secret is not None:
                env[name] = secret
            elif isinstance(value, bool):
                self.error(
                    path, f"expected a string, got {str(value).lower()}",
                    'quote it: "1", "0", "true" — the server reads text',
                )  # fmt: skip
            elif isinstance(value, str | int | float):
                text = str(value)
                if "\0" in text:
                    self.error(path, "NUL bytes cannot be in an environment variable")
                else:
                    env[name] = text
            elif not isinstance(value, dict):
                self.error(path, f"expected a string or {{from_env: NAME}}, got {_kind(value)}")
        return env

    def _secret(self, path: KeyPath, value: Any) -> SecretRef | None:
        """``{from_env: NAME}``: a value read from the local environment at launch."""
        if not isinstance(value, dict):
            return None
        if set(value) != {"from_env"} or not isinstance(value["from_env"], str):
            self.error(
                path, "expected {from_env: NAME}",
                "secrets come from your local environment and are never written in a profile",
            )  # fmt: skip
            return None
        source_name = value["from_env"]
        if not _ENV_NAME_RE.match(source_name):
            self.error((*path, "from_env"), f"bad environment variable name {source_name!r}")
            return None
        return SecretRef(source_name)

    def _args(self) -> dict[str, ArgValue]:
        raw = self.mapping(("args",)) or {}
        args: dict[str, ArgValue] = {}
        for key, value in raw.items():
            path: KeyPath = ("args", key)
            name = key.replace("-", "_")
            if not _FIELD_NAME_RE.match(name):
                self.error(
                    path, f"bad SGLang argument name {key!r}",
                    "write the ServerArgs field name, e.g. mem_fraction_static",
                )  # fmt: skip
                continue
            if name in STRUCTURED_FIELDS:
                self.error(
                    path, f"{name} is set by `{format_path(STRUCTURED_FIELDS[name])}`",
                    f"move it to `{format_path(STRUCTURED_FIELDS[name])}`",
                )  # fmt: skip
                continue
            if name in args:
                self.error(path, f"{name} is given twice (as {key!r} and its other spelling)")
                continue
            secret = self._secret(path, value) if _looks_secret(value) else None
            if secret is not None:
                args[name] = secret
            elif _looks_secret(value):
                continue  # _secret reported it
            elif isinstance(value, list):
                if any(isinstance(item, dict | list) for item in value):
                    self.error(path, "expected a list of plain values")
                    continue
                args[name] = tuple(value)
            elif isinstance(value, dict):
                # SGLang's JSON-valued options (json_model_override_args ...) take a JSON string
                args[name] = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
            else:
                args[name] = value
        return args

    def _check_fields(self, profile: Profile, table: ArgTable) -> None:
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
                if elsewhere:
                    hint = (hint + " " if hint else "") + (
                        f"it exists in SGLang {', '.join(elsewhere)}"
                    )
                self.error(
                    path, f"unknown SGLang {version} argument", hint or "see `sglang serve --help`"
                )
                continue
            if spelling.rename is not None and field.name == spelling.rename.old:
                self.note(
                    Severity.WARNING, path,
                    f"SGLang {version} calls this {spelling.rename.new} "
                    f"({spelling.rename.describe()}); rendered as {spelling.flag}",
                    f"write {spelling.rename.new}",
                )  # fmt: skip
            elif spelling.rename is not None:
                self.note(
                    Severity.NOTICE, path,
                    f"SGLang {version} spells this {spelling.flag} "
                    f"({spelling.rename.describe()})",
                    None,
                )  # fmt: skip
            elif spelling.option.deprecated:
                self.note(
                    Severity.WARNING, path,
                    f"{spelling.flag} is deprecated in SGLang {version}",
                    spelling.option.help or None,
                )  # fmt: skip
            try:
                argtable.arg_tokens(spelling.option, field.value, spelling.flag)
            except BadValue as exc:
                self.error(path, exc.expected, exc.hint)
        self._check_pins(profile, table)

    def _pin(self) -> tuple[str, ...]:
        raw = self.get(("pin",))
        if raw is _MISSING:
            return ()
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            self.error(("pin",), "expected a list of SGLang field names")
            return ()
        return tuple(item.replace("-", "_") for item in raw)

    def _check_pins(self, profile: Profile, table: ArgTable) -> None:
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
            self.error(
                ("pin", index), f"pins {name}, which this profile does not set",
                "a pin asserts the profile's own value survives; set the field or drop the pin",
            )  # fmt: skip

    def _check_parallelism(self, profile: Profile) -> None:
        """A tp x pp layout needs that many visible GPUs; SGLang finds out only at init."""
        if not profile.gpu.devices:
            return
        needed = 1
        for name, alias in (
            ("tp_size", "tensor_parallel_size"),
            ("pp_size", "pipeline_parallel_size"),
        ):
            value = profile.args.get(name, profile.args.get(alias))
            if isinstance(value, int) and not isinstance(value, bool):
                needed *= value
        if needed > len(profile.gpu.devices):
            self.error(
                ("args", "tp_size"),
                f"tp_size x pp_size = {needed} GPUs, but gpu.devices lists "
                f"{len(profile.gpu.devices)}",
                "list more devices or lower tp_size",
            )

    def _restart(self) -> RestartPolicy:
        if self.mapping(("restart",)) is None:
            return RestartPolicy()
        defaults = RestartPolicy()
        mode = defaults.mode
        raw_mode = self.get(("restart", "mode"))
        if raw_mode is False:  # YAML 1.1 reads a bare `no` as false
            mode = RestartMode.NO
        elif raw_mode is not _MISSING:
            try:
                mode = RestartMode(raw_mode)
            except ValueError:
                self.error(
                    ("restart", "mode"), f"expected no, on-failure or always, got {raw_mode!r}"
                )
        multiplier = self.number(("restart", "multiplier"), 1.0)
        delay = self.number(("restart", "delay_s"), 0.0)
        max_delay = self.number(("restart", "max_delay_s"), 0.0)
        limit = self.integer(("restart", "start_limit"), 1)
        interval = self.number(("restart", "start_limit_interval_s"), 0.0)
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
            self.error(("restart", "max_delay_s"), "must be >= restart.delay_s")
        return policy

    def _health(self) -> HealthPolicy:
        if self.mapping(("health",)) is None:
            return HealthPolicy()
        defaults = HealthPolicy()
        timeout = self.number(("health", "startup_timeout_s"), 1.0)
        interval = self.number(("health", "interval_s"), 0.1)
        endpoint = self.text(("health", "endpoint"))
        if endpoint is not None and not endpoint.startswith("/"):
            self.error(("health", "endpoint"), f"expected a path such as /health, got {endpoint!r}")
            endpoint = None
        return HealthPolicy(
            startup_timeout_s=timeout if timeout is not None else defaults.startup_timeout_s,
            interval_s=interval if interval is not None else defaults.interval_s,
            endpoint=endpoint or defaults.endpoint,
        )


def _looks_secret(value: object) -> bool:
    """In ``args`` a mapping is JSON for SGLang unless it is written as a secret reference."""
    return isinstance(value, dict) and "from_env" in value


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return str(value).lower()
    return {
        dict: "a mapping",
        list: "a list",
        str: "a string",
        int: "an integer",
        float: "a number",
    }.get(type(value), type(value).__name__)
