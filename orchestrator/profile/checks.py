"""The sections of a merged profile document, each checked and read into its model value.

:class:`ProfileChecker` reads the keys a profile may have (``sglang``, ``host``, ``model``,
``gpu``, ``spec_decode``, ``env``, ``args``, ``restart``, ``health``, ``pin`` ...) into a
``Profile``, recording every problem with its position rather than stopping at the first. The
sections of their own are read by ``values`` (env, secrets, bundled paths), ``layout``
(``group:``) and ``policies`` (``restart:``, ``health:``, ``export:``). Checking the built
profile's SGLang fields against the argument table of its version is
:mod:`orchestrator.profile.store`'s last step (``fields.check_fields``).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping

from orchestrator.model import (
    ArgValue,
    GpuSpec,
    Host,
    Launcher,
    ModelSpec,
    Profile,
    Severity,
    SpecDecode,
    frozen_map,
)
from orchestrator.profile import gpus
from orchestrator.profile.doccheck import MISSING, DocChecker
from orchestrator.profile.fields import METRICS_FIELDS, STRUCTURED_FIELDS
from orchestrator.profile.inventory import INVENTORY_FILE, LOCAL_HOST
from orchestrator.profile.layout import group_section
from orchestrator.profile.policies import export_section, health_section, restart_section
from orchestrator.profile.replicas import replicas_section
from orchestrator.profile.routing import router_section
from orchestrator.profile.values import (
    MAX_SECONDS,
    device_list,
    env_section,
    from_orch,
    looks_secret,
    secret_ref,
)
from orchestrator.profile.yamldoc import KeyPath, format_path
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgTable

_FIELD_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")
_LABEL_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$")

_TOP_KEYS = (
    "extends",
    "abstract",
    "description",
    "sglang",
    "host",
    "launcher",
    "model",
    "gpu",
    "spec_decode",
    "port",
    "bind",
    "env",
    "args",
    "restart",
    "health",
    "stop_timeout_s",
    "pin",
    "group",
    "replicas",
    "export",
    "router",
    "labels",
    "metrics",
)
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
    "router": ("url", "api_key", "labels", "drain_timeout_s", "ready_timeout_s", "metrics_url"),
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
                Severity.NOTICE,
                (),
                f"no `sglang:` version; arguments checked against SGLang {table.version}",
                "the host's version is detected at launch; pin one for reproducible renders",
            )

        has_group = self.get(("group",)) is not MISSING
        # with `replicas:`, `host:` is the host of the replicas that name none
        has_replicas = self.get(("replicas",)) is not MISSING
        host = self._host(inventory, required=not (is_abstract or has_group or has_replicas))
        if has_group and self.get(("host",)) is not MISSING:
            self.error(
                ("host",),
                "a group names its hosts in `group.nodes` (rank 0 first)",
                "remove `host:`; rank 0's host is group.nodes[0].host",
            )
        if isinstance(self.get(("model", "path")), dict):
            model_path = from_orch(self, ("model", "path"), host)
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
        env = env_section(self, ("env",), gpu, host)
        args = self._args()
        group = group_section(self, inventory, port if port is not None else Profile.port)
        replicas = replicas_section(
            self,
            inventory,
            host,
            port if port is not None else Profile.port,
            gpu,
            has_group=has_group,
        )
        restart = restart_section(self)
        health = health_section(self)
        stop_timeout = self.number(("stop_timeout_s",), 0.0, MAX_SECONDS)
        pin = self._pin()
        export = export_section(self)
        router = router_section(self)
        description = self.text(("description",), one_line=False) or ""
        labels = self._labels()
        metrics = self._metrics(args)

        if self.errors:
            return None, table
        if group is not None:
            host = group.leader.host
        if replicas:
            host = replicas[0].host
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
            router=router,
            replicas=replicas,
            labels=labels,
            metrics=metrics,
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
                ("sglang",),
                f"expected a version string, got the number {value!r}",
                'quote it: sglang: "0.5.11"',
            )
            return None
        text = self.text(("sglang",))
        if text is not None and argtable.parse_version(text) is None:
            self.error(
                ("sglang",),
                f"expected a version like 0.5.11, got {text!r}",
                "the `sglang.__version__` of the target venv",
            )
            return None
        return text

    def _host(self, inventory: Mapping[str, Host], *, required: bool) -> Host | None:
        name = self.text(("host",))
        if name is None:
            if required and self.get(("host",)) is MISSING:
                self.error(
                    (),
                    "missing `host`",
                    f"name a host from {INVENTORY_FILE}, or `local` for this machine",
                )
            return None
        if name not in inventory:
            close = difflib.get_close_matches(name, list(inventory), n=1)
            known = ", ".join(sorted(inventory))
            self.error(
                ("host",),
                f"unknown host {name!r}",
                (f"did you mean {close[0]}? " if close else "")
                + f"hosts in {INVENTORY_FILE}: {known}",
            )
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
                ("launcher",),
                f"expected module or serve, got {text!r}",
                "module: python -m sglang.launch_server; serve: sglang serve",
            )
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
                    ("gpu", "type"),
                    f"unknown GPU type {type_name!r}",
                    (f"did you mean {close[0]}? " if close else "")
                    + f"known: {', '.join(gpus.known_gpu_names())}",
                )
        devices = device_list(self, ("gpu", "devices")) or ()
        return GpuSpec(type=gpu_type, devices=devices)

    def _spec_decode(self) -> SpecDecode | None:
        if self.mapping(("spec_decode",)) is None:
            return None
        algorithm = self.text(("spec_decode", "algorithm"))
        if algorithm is None:
            if self.get(("spec_decode", "algorithm")) is MISSING:
                self.error(
                    ("spec_decode",),
                    "missing `algorithm`",
                    "e.g. EAGLE (MTP heads of Qwen3.6 load through EAGLE), EAGLE3, NGRAM",
                )
            return None
        return SpecDecode(
            algorithm=algorithm,
            num_steps=self.integer(("spec_decode", "num_steps"), 1),
            eagle_topk=self.integer(("spec_decode", "eagle_topk"), 1),
            num_draft_tokens=self.integer(("spec_decode", "num_draft_tokens"), 1),
            draft_model_path=self.text(("spec_decode", "draft_model_path")),
        )

    def _args(self) -> dict[str, ArgValue]:
        raw = self.mapping(("args",)) or {}
        args: dict[str, ArgValue] = {}
        for key, value in raw.items():
            path: KeyPath = ("args", key)
            name = key.replace("-", "_")
            if not _FIELD_NAME_RE.match(name):
                self.error(
                    path,
                    f"bad SGLang argument name {key!r}",
                    "write the ServerArgs field name, e.g. mem_fraction_static",
                )
                continue
            if name in STRUCTURED_FIELDS:
                self.error(
                    path,
                    f"{name} is set by `{format_path(STRUCTURED_FIELDS[name])}`",
                    f"move it to `{format_path(STRUCTURED_FIELDS[name])}`",
                )
                continue
            if name in args:
                self.error(path, f"{name} is given twice (as {key!r} and its other spelling)")
                continue
            secret = secret_ref(self, path, value) if looks_secret(value) else None
            if secret is not None:
                args[name] = secret
            elif looks_secret(value):
                continue  # secret_ref reported it
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

    def _metrics(self, args: Mapping[str, ArgValue]) -> bool:
        """``metrics: true``: orch renders SGLang's metrics flags (``fields.metrics_fields``);
        the same flags under ``args:`` too would be given twice."""
        raw = self.get(("metrics",))
        if raw is MISSING or raw is None:
            return False
        if not isinstance(raw, bool):
            self.error(("metrics",), f"expected true or false, got {raw!r}", "metrics: true")
            return False
        for name in METRICS_FIELDS if raw else ():
            if name in args:
                self.error(
                    ("args", name),
                    f"{name} is set by `metrics: true`",
                    f"remove args.{name}: `metrics: true` renders it",
                )
        return raw

    def _labels(self) -> tuple[str, ...]:
        """``labels:``: words naming the profile for ``orch sync --on LABEL`` (a team, a
        region, a tier); a list, each a word a command line can carry."""
        raw = self.get(("labels",))
        if raw is MISSING:
            return ()
        if not isinstance(raw, list):
            self.error(("labels",), "expected a list of words", "labels: [team-a, canary]")
            return ()
        labels: list[str] = []
        for index, item in enumerate(raw):
            if not isinstance(item, str) or not _LABEL_RE.match(item):
                self.error(
                    ("labels", index),
                    f"expected a word of letters, digits, '.', '_' or '-', got {item!r}",
                    "a label such as team-a, eu-west or canary",
                )
                continue
            if item not in labels:
                labels.append(item)
        return tuple(labels)

    def _pin(self) -> tuple[str, ...]:
        raw = self.get(("pin",))
        if raw is MISSING:
            return ()
        if not isinstance(raw, list) or not all(isinstance(item, str) for item in raw):
            self.error(("pin",), "expected a list of SGLang field names")
            return ()
        return tuple(item.replace("-", "_") for item in raw)
