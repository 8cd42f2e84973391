"""Any value a profile holds reaches the exported server unchanged: through Kubernetes' variable
expansion (orch's port of it, checked against Kubernetes' own cases in tests/unit/test_export.py)
and through a real shell running the SkyPilot and dstack scripts, on every rank of a group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.export import export
from orchestrator.export.common import Provenance
from orchestrator.export.k8s import kubernetes_expand
from orchestrator.model import SecretRef, ServerCommand
from orchestrator.profile.store import ProfileStore

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"), max_size=30
)
HOSTILE = st.sampled_from(
    [
        "$",
        "$$",
        "$(X)",
        "$$(LWS_GROUP_SIZE)",
        "$(LWS_WORKER_INDEX)",
        "${HOME}",
        "$HF_TOKEN",
        "`id`",
        "'",
        '"',
        "a'b\"c",
        "\\",
        "\n",
        "x\ny",
        "ünï ⚡",
        "a\x85b\u2028c\u2029",
        "--flag",
        "-1",
        "*",
        "~",
        "!!",
        ";ls",
        "%%",
    ]
)
VALUE = st.one_of(HOSTILE, TEXT)
SECRETS = {"HF_TOKEN": "hf_$(LWS_GROUP_SIZE)'\"$x", "API_KEY": "sk $$ `x`"}
PROVENANCE = Provenance("profiles/p.yaml", None)

# A stand-in for the server's program: prints the argv and environment it was exec'd with.
STUB = """\
import json, os, sys
names = json.loads(os.environ["ROUNDTRIP_NAMES"])
with open(os.environ["ROUNDTRIP_OUT"], "w", encoding="utf-8", errors="surrogateescape") as out:
    json.dump({"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in names}}, out)
"""


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("export")
    profiles = root / "profiles"
    profiles.mkdir()
    hosts = {
        "a": {"address": "10.0.0.1", "python": "/venv/bin/python", "workdir": "/w"},
        "b": {"address": "10.0.0.2", "python": "/venv/bin/python", "workdir": "/w"},
    }
    (profiles / "hosts.yaml").write_text(yaml.safe_dump({"hosts": hosts}))
    bin_dir = root / "bin"
    bin_dir.mkdir()
    for program in ("python3", "sglang"):  # the module launcher's and `sglang serve`'s
        stub = bin_dir / program
        stub.write_text(f"#!{sys.executable}\n{STUB}")
        stub.chmod(0o755)
    return root


def _load(workspace: Path, arg: str, env: str, node_env: str, launcher: str) -> Any:
    document = {
        "sglang": "0.5.23",
        "launcher": launcher,
        "model": {"path": "/models/m"},
        "gpu": {"type": "H200"},
        "env": {"ODD_VALUE": env, "HF_TOKEN": {"from_env": "HF_TOKEN"}},
        "args": {"tokenizer_path": arg, "tp_size": 2, "api_key": {"from_env": "API_KEY"}},
        "group": {
            "nodes": [{"host": "a", "env": {"NODE_VALUE": node_env}}, {"host": "b"}],
            "rendezvous_port": 20000,
        },
    }
    text = yaml.safe_dump(document, allow_unicode=False)  # see test_argv_roundtrip.py
    (workspace / "profiles" / "p.yaml").write_text(text, encoding="utf-8")
    return ProfileStore(workspace / "profiles").load("p")


def _expected(command: ServerCommand) -> tuple[list[str], dict[str, str]]:
    argv = [SECRETS[t.env_var] if isinstance(t, SecretRef) else t for t in command.argv]
    env = {k: SECRETS[v.env_var] if isinstance(v, SecretRef) else v for k, v in command.env.items()}
    return argv, env


def _run_script(
    workspace: Path, shell: str, script: str, rank_env: dict[str, str], names: list[str]
) -> Any:
    out = workspace / "received.json"
    out.unlink(missing_ok=True)
    environ = {
        "PATH": f"{workspace / 'bin'}:/usr/bin:/bin",
        "ROUNDTRIP_OUT": str(out),
        "ROUNDTRIP_NAMES": json.dumps(names),
        **SECRETS,
        **rank_env,
    }
    subprocess.run([shell, "-c", script], check=True, env=environ, timeout=30)
    return json.loads(out.read_text(encoding="utf-8"))


def _skypilot_rank(rank: int) -> dict[str, str]:
    ips = "10.0.0.1\n10.0.0.2\n"  # newline-separated, head first
    return {"SKYPILOT_NODE_RANK": str(rank), "SKYPILOT_NUM_NODES": "2", "SKYPILOT_NODE_IPS": ips}


def _dstack_rank(rank: int) -> dict[str, str]:
    return {
        "DSTACK_NODE_RANK": str(rank),
        "DSTACK_NODES_NUM": "2",
        "DSTACK_MASTER_NODE_IP": "10.0.0.1",
        "DSTACK_NODES_IPS": "10.0.0.1\n10.0.0.2",
    }


ENGINE_RANKS: dict[str, Callable[[int], dict[str, str]]] = {
    "skypilot": _skypilot_rank,
    "dstack": _dstack_rank,
}
SHELLS = ["bash"] + (
    ["dash"] if any(os.access(f"{d}/dash", os.X_OK) for d in ("/bin", "/usr/bin")) else []
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arg=VALUE, env=VALUE, node_env=VALUE, launcher=st.sampled_from(["module", "serve"]))
def test_shell_engines_give_every_rank_the_exact_argv_and_env(
    workspace: Path, arg: str, env: str, node_env: str, launcher: str
) -> None:
    loaded = _load(workspace, arg, env, node_env, launcher)
    for engine, rank_env in ENGINE_RANKS.items():
        result = export(loaded.profile, loaded.table, engine, PROVENANCE)
        document = yaml.safe_load(result.text)  # what the engine reads
        script = document["run"] if engine == "skypilot" else "\n".join(document["commands"])
        shells = ["bash"] if engine == "skypilot" else SHELLS  # SkyPilot's run is bash; dstack's sh
        for rank, command in enumerate(result.commands):
            argv, environment = _expected(command)
            for shell in shells:
                received = _run_script(workspace, shell, script, rank_env(rank), list(environment))
                assert received["argv"] == argv[1:], (engine, shell, rank)
                assert received["env"] == environment, (engine, shell, rank)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(arg=VALUE, env=VALUE, node_env=VALUE)
def test_kubernetes_gives_every_rank_the_exact_argv_and_env(
    workspace: Path, arg: str, env: str, node_env: str
) -> None:
    loaded = _load(workspace, arg, env, node_env, "module")
    result = export(loaded.profile, loaded.table, "k8s-lws", PROVENANCE)
    lws = next(yaml.safe_load_all(result.text))
    template = lws["spec"]["leaderWorkerTemplate"]
    for rank, command in enumerate(result.commands):
        pod = template["leaderTemplate"] if rank == 0 else template["workerTemplate"]
        container = pod["spec"]["containers"][0]
        variables = {
            "LWS_LEADER_ADDRESS": "10.0.0.1",
            "LWS_GROUP_SIZE": "2",
            "LWS_WORKER_INDEX": str(rank),
        }
        environment: dict[str, str] = {}
        for entry in container["env"]:  # as the kubelet builds it: in order, secrets unexpanded
            if "valueFrom" in entry:
                environment[entry["name"]] = SECRETS[entry["valueFrom"]["secretKeyRef"]["key"]]
            else:
                environment[entry["name"]] = kubernetes_expand(
                    entry["value"], {**variables, **environment}
                )
        received = [
            kubernetes_expand(t, {**variables, **environment})
            for t in [*container["command"], *container["args"]]
        ]
        argv, expected_env = _expected(command)
        assert received == argv
        carriers = {"API_KEY": SECRETS["API_KEY"]}  # the variable $(API_KEY) in args needs
        assert environment == {**expected_env, **carriers}
