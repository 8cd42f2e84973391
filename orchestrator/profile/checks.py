"""The sections of a merged profile document, each checked and read into its model value.

:class:`ProfileChecker` reads the keys a profile may have (``sglang``, ``host``, ``model``,
``gpu``, ``spec_decode``, ``env``, ``args``, ``restart``, ``health``, ``pin`` ...) into a
``Profile``, recording every problem with its position rather than stopping at the first.
Checking the built profile's SGLang fields against the argument table of its version is
:mod:`orchestrator.profile.store`'s last step.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from orchestrator.model import (
    DEFAULT_CONTROL_OFFSET,
    ArgValue,
    EnvValue,
    ExportSettings,
    GpuSpec,
    Group,
    GroupNode,
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
from orchestrator.profile import gpus
from orchestrator.profile.bundled import BUNDLED, bundled_path
from orchestrator.profile.doccheck import MISSING, DocChecker, kind
from orchestrator.profile.yamldoc import KeyPath, format_path
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable

INVENTORY_FILE = "hosts.yaml"
LOCAL_HOST = "local"

_ENV_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_K8S_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_SECRET_KEY_RE = re.compile(r"^[-._a-zA-Z0-9]+$")
_DEVICE_UUID_RE = re.compile(r"^(GPU|MIG)-[0-9A-Za-z-]+$")
# Durations are slept and waited on by the agent: a finite bound keeps every one of them within
# what the host's clock and timers take (time.sleep(1e308) raises; .inf is refused by yamldoc).
MAX_SECONDS = 366 * 86400.0

_TOP_KEYS = (
    "extends", "abstract", "description", "sglang", "host", "launcher", "model", "gpu",
    "spec_decode", "port", "bind", "env", "args", "restart", "health", "stop_timeout_s", "pin",
    "group", "export",
)  # fmt: skip
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
    "health": ("startup_timeout_s", "interval_s", "endpoint", "failures"),
    "group": (
        "nodes",
        "rendezvous_port",
        "control_port",
        "join_timeout_s",
        "gated_launch",
        "gate_port",
    ),
    "export": ("image", "python", "secret", "secret_keys", "replicas"),
}
_NODE_KEYS = ("host", "address", "port", "env")
# What orch sets on every rank of a group from ``group:``; a profile never writes them.
GROUP_FIELDS = ("dist_init_addr", "nccl_init_addr", "nnodes", "node_rank", "gated_launch_port")
DEFAULT_RENDEZVOUS_PORT = 20000  # SGLang's docs and LWS examples use it

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


class ProfileChecker(DocChecker):
    """Reads a merged profile document, section by section, into a ``Profile``."""

    def profile(
        self, name: str, chain: tuple[str, ...], inventory: Mapping[str, Host]
    ) -> tuple[Profile | None, ArgTable]:
        """The profile (None when a section has errors) and the argument table of its version;
        the caller checks the profile's SGLang fields against that table."""
        self.keys((), _TOP_KEYS)
        for section, allowed in _SECTION_KEYS.items():
            if self.mapping((section,)) is not None:
                self.keys((section,), allowed)
        abstract = self.get(("abstract",))
        if abstract is not MISSING and not isinstance(abstract, bool):
            self.error(("abstract",), "expected true or false")
        is_abstract = abstract is True

        version = self._sglang_version()
        choice = argtable.table_for(version)
        table = choice.table
        if version is not None and not choice.exact:
            # a neighbour's table would check (and render) flags this release may not have
            self.error(
                ("sglang",),
                f"orch has no argument table for SGLang {version} (it knows "
                f"{argtable.available_versions()[0]} ... {argtable.available_versions()[-1]})",
                argtable.adding_hint(version),
            )
        elif version is None and not is_abstract:
            self.note(
                Severity.NOTICE, (),
                f"no `sglang:` version; arguments checked against SGLang {table.version}",
                "the host's version is detected at launch; pin one for reproducible renders",
            )  # fmt: skip

        has_group = self.get(("group",)) is not MISSING
        host = self._host(inventory, required=not is_abstract and not has_group)
        if has_group and self.get(("host",)) is not MISSING:
            self.error(
                ("host",), "a group names its hosts in `group.nodes` (rank 0 first)",
                "remove `host:`; rank 0's host is group.nodes[0].host",
            )  # fmt: skip
        if isinstance(self.get(("model", "path")), dict):
            model_path = self._from_orch(("model", "path"), host)
        else:
            model_path = self._word(
                ("model", "path"),
                "the model directory on the host, or a Hub id; a directory whose name starts "
                "with '-' can be written ./-name",
            )
        if model_path is None and not is_abstract and self.get(("model", "path")) is MISSING:
            self.error(("model",), "missing `model.path`", "the model directory on the host")
        model = ModelSpec(
            path=model_path or "",
            served_model_name=self._word(
                ("model", "served_model_name"), "the name clients ask for, without a leading '-'"
            ),
        )
        launcher = self._launcher()
        gpu = self._gpu()
        spec = self._spec_decode()
        port = self.integer(("port",), 1, 65535)
        bind = self._word(("bind",), "an address such as 0.0.0.0 or 127.0.0.1")
        if bind is not None and (not bind or any(c.isspace() for c in bind)):
            self.error(("bind",), f"expected an address such as 0.0.0.0, got {bind!r}")
        env = self._env(("env",), gpu, host)
        args = self._args()
        group = self._group(inventory, port if port is not None else Profile.port)
        restart = self._restart()
        health = self._health()
        stop_timeout = self.number(("stop_timeout_s",), 0.0, MAX_SECONDS)
        pin = self._pin()
        export = self._export()
        description = self.text(("description",), one_line=False) or ""

        if self.errors:
            return None, table
        if group is not None:
            host = group.leader.host
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
            group=group,
            export=export,
        )
        return profile, table

    def _word(self, path: KeyPath, hint: str) -> str | None:
        """A text that orch passes as a word of a command line (to SGLang, the agent, its
        probe): one starting with '-' would be read as an option there (``model.path:
        --help`` made the probe print its help), so it is refused here."""
        value = self.text(path)
        if value is not None and value.startswith("-"):
            self.error(
                path,
                f"{value!r} starts with '-': a command line would read it as an option",
                hint,
            )
            return None
        return value

    def _sglang_version(self) -> str | None:
        value = self.get(("sglang",))
        if value is MISSING:
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
            if required and self.get(("host",)) is MISSING:
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
        if raw is not MISSING:
            if not isinstance(raw, list):
                self.error(("gpu", "devices"), f"expected a list such as [0, 1], got {kind(raw)}")
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
            if self.get(("spec_decode", "algorithm")) is MISSING:
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

    def _env(self, at: KeyPath, gpu: GpuSpec, host: Host | None = None) -> dict[str, EnvValue]:
        raw = self.mapping(at) or {}
        env: dict[str, EnvValue] = {}
        if gpu.devices and at == ("env",):
            env["CUDA_VISIBLE_DEVICES"] = ",".join(gpu.devices)
        for name, value in raw.items():
            path: KeyPath = (*at, name)
            if not _ENV_NAME_RE.match(name):
                self.error(
                    path, f"bad environment variable name {name!r}", "use [A-Za-z_][A-Za-z0-9_]*"
                )
                continue
            if name == "CUDA_VISIBLE_DEVICES" and gpu.devices:
                self.error(path, "set twice: also derived from gpu.devices", "keep gpu.devices")
                continue
            if isinstance(value, dict) and "from_orch" in value:
                bundled = self._from_orch(path, host)
                if bundled is not None:
                    env[name] = bundled
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
                self.error(path, f"expected a string or {{from_env: NAME}}, got {kind(value)}")
        return env

    def _group(self, inventory: Mapping[str, Host], port: int) -> Group | None:
        """``group:``: the nodes in rank order, each a host of the inventory, with what may
        differ per node (the address others reach it at, its --port, its NIC variables)."""
        if self.mapping(("group",)) is None:
            return None
        raw = self.get(("group", "nodes"))
        if raw is MISSING:
            self.error(("group",), "missing `nodes`", "the hosts of the group, rank 0 first")
            return None
        if not isinstance(raw, list) or len(raw) < 2:
            got = f"{len(raw)} node" if isinstance(raw, list) else kind(raw)
            self.error(
                ("group", "nodes"), f"expected a list of at least 2 nodes, got {got}",
                "a single node needs no group: use `host:`",
            )  # fmt: skip
            return None
        nodes: list[GroupNode] = []
        where: dict[tuple[str | None, int | None, str], int] = {}
        for rank, item in enumerate(raw):
            path: KeyPath = ("group", "nodes", rank)
            if isinstance(item, str):  # `- gpu-a`: a host name alone
                item = {"host": item}
            elif not isinstance(item, dict):
                self.error(path, f"expected a host name or a mapping, got {kind(item)}")
                continue
            else:
                self.keys(path, _NODE_KEYS)
            name = item.get("host")
            host = self._node_host(path, name, inventory)
            node_port = self.integer((*path, "port"), 1, 65535)
            address = self.text((*path, "address"))
            if address is not None and (not address or any(c.isspace() for c in address)):
                self.error((*path, "address"), f"expected a hostname or IP, got {address!r}")
            env = self._env((*path, "env"), GpuSpec())
            if host is None:
                continue
            if any(node.host.name == host.name for node in nodes):
                self.error(
                    (*path, "host"), f"host {host.name} is in the group twice",
                    "each node is its own host entry in hosts.yaml (two entries may share a "
                    "machine with different workdirs and ports)",
                )  # fmt: skip
                continue
            machine = (host.address, host.port, host.workdir)
            if machine in where:
                self.error(
                    (*path, "host"),
                    f"host {host.name} has the address and workdir of rank {where[machine]}'s "
                    "host: both nodes would share one deployment directory",
                    "give one of them another `workdir:` in hosts.yaml",
                )
                continue
            where[machine] = rank
            nodes.append(GroupNode(host, address, node_port, frozen_map(env)))
        rendezvous = self.integer(("group", "rendezvous_port"), 1, 65535)
        rendezvous = rendezvous if rendezvous is not None else DEFAULT_RENDEZVOUS_PORT
        control = self.integer(("group", "control_port"), 1, 65535)
        if control is None:
            control = rendezvous + DEFAULT_CONTROL_OFFSET
        join = self.number(("group", "join_timeout_s"), 1.0, MAX_SECONDS)
        gated = self.get(("group", "gated_launch"))
        if gated is not MISSING and not isinstance(gated, bool):
            self.error(("group", "gated_launch"), "expected true or false")
        gate_port = self.integer(("group", "gate_port"), 1, 65535)
        if len(nodes) != len(raw):
            return None
        group = Group(
            tuple(nodes), rendezvous, control, join if join is not None else Group.join_timeout_s,
            gated_launch=gated is not False, gate_port=gate_port,
        )  # fmt: skip
        self._group_ports(group, port)
        return group

    def _node_host(self, path: KeyPath, name: object, inventory: Mapping[str, Host]) -> Host | None:
        if name is None:
            self.error(path, "missing `host`", f"a host from {INVENTORY_FILE}")
            return None
        if not isinstance(name, str):
            self.error((*path, "host"), f"expected a host name, got {kind(name)}")
            return None
        if name not in inventory:
            close = difflib.get_close_matches(name, list(inventory), n=1)
            self.error(
                (*path, "host"), f"unknown host {name!r}",
                (f"did you mean {close[0]}? " if close else "")
                + f"hosts in {INVENTORY_FILE}: {', '.join(sorted(inventory))}",
            )  # fmt: skip
            return None
        return inventory[name]

    def _group_ports(self, group: Group, port: int) -> None:
        """Ports SGLang does not check: the rendezvous port is not a server's --port, orch's
        control port is neither, and nodes that share a machine do not share a port."""
        taken: dict[tuple[str | None, int], str] = {}
        leader = group.leader.host.address
        for rank, node in enumerate(group.nodes):
            path: KeyPath = ("group", "nodes", rank, "port") if node.port else ("port",)
            node_port = node.port or port
            if node.host.address == leader and node_port in (
                group.rendezvous_port,
                group.control_port,
            ):
                which = "rendezvous" if node_port == group.rendezvous_port else "control"
                self.error(
                    path, f"rank {rank}'s --port {node_port} is the group's {which} port "
                    f"on {group.leader.host.name}",
                    "SGLang needs --port and the --dist-init-addr port to differ; pick "
                    "another port or group.rendezvous_port",
                )  # fmt: skip
            key = (node.host.address, node_port)
            if key in taken:
                self.error(
                    path, f"rank {rank} on {node.host.name} and {taken[key]} share a machine "
                    f"and --port {node_port}",
                    f"give this node its own port: group.nodes[{rank}].port",
                )  # fmt: skip
            taken.setdefault(key, f"rank {rank}")
        gate = group.wanted_gate_port
        if gate is not None and gate in (group.rendezvous_port, group.control_port):
            self.error(
                ("group", "gate_port"),
                f"the gated launch port {gate} is the group's "
                + ("rendezvous" if gate == group.rendezvous_port else "control")
                + " port",
                "give group.gate_port a port of its own (or gated_launch: false)",
            )
        if gate is not None and (leader, gate) in taken:
            self.error(
                ("group", "gate_port"),
                f"the gated launch port {gate} is {taken[(leader, gate)]}'s --port on "
                f"{group.leader.host.name}",
                "give group.gate_port a port of its own (or gated_launch: false)",
            )
        if group.control_port == group.rendezvous_port:
            self.error(
                ("group", "control_port"),
                f"the control port {group.control_port} is the rendezvous port",
                "orch's supervisors and torch's TCPStore need a port each",
            )

    def _from_orch(self, path: KeyPath, host: Host | None) -> str | None:
        """``{from_orch: NAME}``: a path in this installation of orch (profile/bundled.py), for a
        server on this machine only."""
        value = self.get(path)
        if not isinstance(value, dict):
            return None
        name = value.get("from_orch")
        if set(value) != {"from_orch"} or name not in BUNDLED:
            self.error(
                path, f"expected {{from_orch: NAME}} with NAME one of {', '.join(BUNDLED)}",
                "standin: the directory of orch's SGLang stand-in (for PYTHONPATH); "
                "standin-model: its model directory",
            )  # fmt: skip
            return None
        if host is None or host.name != LOCAL_HOST:
            self.error(
                path, f"{{from_orch: {name}}} is a path on this machine: only for host: local",
                "give the path on the host instead",
            )  # fmt: skip
            return None
        return bundled_path(str(name))

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

    def _pin(self) -> tuple[str, ...]:
        raw = self.get(("pin",))
        if raw is MISSING:
            return ()
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            self.error(("pin",), "expected a list of SGLang field names")
            return ()
        return tuple(item.replace("-", "_") for item in raw)

    def _export(self) -> ExportSettings:
        """``export:``: the image, its interpreter and the Kubernetes Secret (docs/export.md)."""
        if self.mapping(("export",)) is None:
            return ExportSettings()
        defaults = ExportSettings()
        image = self.text(("export", "image"))
        if image is not None and (not image or any(c.isspace() for c in image)):
            self.error(("export", "image"), f"expected an image reference, got {image!r}")
        python = self.text(("export", "python"))
        if python is not None and (not python or any(c.isspace() for c in python)):
            self.error(("export", "python"), f"expected a program, got {python!r}", "python3")
        secret = self.text(("export", "secret"))
        if secret is not None and not _K8S_NAME_RE.match(secret):
            self.error(
                ("export", "secret"), f"expected a Kubernetes Secret name, got {secret!r}",
                "lower-case letters, digits, '-' and '.' (DNS-1123)",
            )  # fmt: skip
        keys: dict[str, str] = {}
        for name, key in (self.mapping(("export", "secret_keys")) or {}).items():
            path: KeyPath = ("export", "secret_keys", name)
            if not _ENV_NAME_RE.match(name):
                self.error(path, f"expected a from_env variable name, got {name!r}")
            elif not isinstance(key, str) or not _SECRET_KEY_RE.match(key):
                self.error(path, "expected a key of the Secret", "letters, digits, '-', '_', '.'")
            else:
                keys[name] = key
        replicas = self.integer(("export", "replicas"), 1)
        return ExportSettings(
            image=image,
            python=python or defaults.python,
            secret=secret,
            secret_keys=frozen_map(keys),
            replicas=replicas if replicas is not None else defaults.replicas,
        )

    def _restart(self) -> RestartPolicy:
        if self.mapping(("restart",)) is None:
            return RestartPolicy()
        defaults = RestartPolicy()
        mode = defaults.mode
        raw_mode = self.get(("restart", "mode"))
        if raw_mode is False:  # YAML 1.1 reads a bare `no` as false
            mode = RestartMode.NO
        elif raw_mode is not MISSING:
            try:
                mode = RestartMode(raw_mode)
            except ValueError:
                self.error(
                    ("restart", "mode"), f"expected no, on-failure or always, got {raw_mode!r}"
                )
        multiplier = self.number(("restart", "multiplier"), 1.0)
        delay = self.number(("restart", "delay_s"), 0.0, MAX_SECONDS)
        max_delay = self.number(("restart", "max_delay_s"), 0.0, MAX_SECONDS)
        limit = self.integer(("restart", "start_limit"), 1)
        interval = self.number(("restart", "start_limit_interval_s"), 0.0, MAX_SECONDS)
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
        timeout = self.number(("health", "startup_timeout_s"), 1.0, MAX_SECONDS)
        interval = self.number(("health", "interval_s"), 0.1, MAX_SECONDS)
        endpoint = self.text(("health", "endpoint"))
        failures = self.integer(("health", "failures"), 1)
        if endpoint is not None and not endpoint.startswith("/"):
            self.error(("health", "endpoint"), f"expected a path such as /health, got {endpoint!r}")
            endpoint = None
        return HealthPolicy(
            startup_timeout_s=timeout if timeout is not None else defaults.startup_timeout_s,
            interval_s=interval if interval is not None else defaults.interval_s,
            endpoint=endpoint or defaults.endpoint,
            failures=failures if failures is not None else defaults.failures,
        )


def _looks_secret(value: object) -> bool:
    """In ``args`` a mapping is JSON for SGLang unless it is written as a secret reference."""
    return isinstance(value, dict) and "from_env" in value
