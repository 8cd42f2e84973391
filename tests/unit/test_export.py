"""orch export: Kubernetes' variable expansion (ported, checked against Kubernetes' own cases),
each shipped profile exported to each engine and read back, and what an engine cannot run."""

from __future__ import annotations

import io
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator import render
from orchestrator.cli import main as cli
from orchestrator.errors import ExitCode, RenderError
from orchestrator.export import export
from orchestrator.export.common import ANY_ADDRESS, LOOPBACK_BINDS, Provenance
from orchestrator.export.k8s import kubernetes_escape, kubernetes_expand
from orchestrator.export.slurm import sbatch_directives, srun_argv
from orchestrator.model import EXPORT_ENGINES, SecretRef, ServerCommand
from orchestrator.profile.store import LoadedProfile, ProfileStore
from tests.conftest import EXAMPLES, SHIPPED_PROFILES, copy_examples

PROVENANCE = Provenance("profiles/p.yaml", "0123456789abcdef")

# Kubernetes' third_party/forked/golang/expansion/expand_test.go (TestMapReference and
# TestMapping's cases): the variables, then (input, what the kubelet makes of it).
K8S_VARIABLES = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}
K8S_CASES = [
    ("$(VAR_A)", "A"),
    ("___$(VAR_B)___", "___B___"),
    ("$(VAR_A)-$(VAR_A)", "A-A"),
    ("$(VAR_A)-1", "A-1"),
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),
    ("$$(VAR_B)_$$(VAR_A)", "$(VAR_B)_$(VAR_A)"),
    ("f000-$$VAR_A", "f000-$VAR_A"),
    ("foo\\$(VAR_C)bar", "foo\\Cbar"),
    ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
    ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),
    ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),
    ("$(VAR_REF)", "$(VAR_A)"),
    ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),
    ("foo$(VAR_EMPTY)bar", "foobar"),
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),
    ("f00__(VAR_A)__", "f00__(VAR_A)__"),
    ("$?_boo_$!", "$?_boo_$!"),
    ("$VAR_A", "$VAR_A"),
    ("$(VAR_DNE)", "$(VAR_DNE)"),
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),
    ("$$$$$$(VAR_A)", "$$$(VAR_A)"),
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),
    ("$$$$$$$(VAR_A)", "$$$A"),
    ("$VAR_A)", "$VAR_A)"),
    ("${VAR_A}", "${VAR_A}"),
    ("$(VAR_B)_______$(A", "B_______$(A"),
    ("$(VAR_C)_______$(", "C_______$("),
    ("$(VAR_A)foobarzab$", "Afoobarzab$"),
    ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),
    ("--$($($($($--", "--$($($($($--"),
    ("$($($($($--foo$(", "$($($($($--foo$("),
    ("foo0--$($($($(", "foo0--$($($($("),
    ("$(foo$$var)", "$(foo$$var)"),
    ("$", "$"),
    ("$$", "$"),
    ("$$$", "$$"),
    ("", ""),
]


@pytest.mark.parametrize(("text", "expanded"), K8S_CASES)
def test_kubernetes_expand_matches_kubernetes_own_cases(text: str, expanded: str) -> None:
    assert kubernetes_expand(text, K8S_VARIABLES) == expanded


HOSTILE = st.one_of(
    st.sampled_from(["$", "$$", "$(X)", "$$(X)", "$(", "$)", "${X}", "a$", "$(VAR_A)", "é$(ü)"]),
    st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=30),
)


@settings(max_examples=300, deadline=None)
@given(text=HOSTILE)
def test_an_escaped_literal_comes_back_whole_whatever_the_variables(text: str) -> None:
    assert kubernetes_expand(kubernetes_escape(text), K8S_VARIABLES) == text
    assert kubernetes_expand(kubernetes_escape(text), {"X": "x", "": "e"}) == text


# -- the shipped profiles ------------------------------------------------------------------------

SHIPPED = ProfileStore(SHIPPED_PROFILES)
LAUNCHABLE = [name for name in EXAMPLES if not SHIPPED.load(name).profile.abstract]
K8S = ("k8s-lws", "k8s")


def _cases() -> list[tuple[str, str]]:
    cases = []
    for name in LAUNCHABLE:
        for engine in EXPORT_ENGINES:
            if engine == "k8s" and SHIPPED.load(name).profile.group is not None:
                continue  # a Deployment is single-node: refused (test below)
            cases.append((name, engine))
    return cases


CASES = _cases()


def _original(loaded: LoadedProfile) -> tuple[ServerCommand, ...]:
    """What `orch render` gives (what `orch up` launches)."""
    return render.render_members(render.gated(loaded.profile, loaded.table), loaded.table)


def _translated(argv: tuple[object, ...], program: int) -> list[object]:
    """``orch render``'s argv with the translations an export says it makes: the program is the
    image's, --host is routable, no --gated-launch-port (no orch supervisor opens the gate)."""
    out: list[object] = []
    tokens = list(argv[program:])
    index = 0
    while index < len(tokens):
        word = tokens[index]
        if word == "--gated-launch-port":
            index += 2
            continue
        if word == "--host" and tokens[index + 1] in LOOPBACK_BINDS:
            out += ["--host", ANY_ADDRESS]
            index += 2
            continue
        out.append(word)
        index += 1
    return out


def _program_length(argv: tuple[object, ...]) -> int:
    return next(i for i, t in enumerate(argv) if isinstance(t, str) and t.startswith("--"))


@pytest.mark.parametrize(("name", "engine"), CASES, ids=[f"{n}-{e}" for n, e in CASES])
def test_export_runs_what_orch_render_gives_but_for_the_translations_it_names(
    name: str, engine: str
) -> None:
    loaded = SHIPPED.load(name)
    result = export(loaded.profile, loaded.table, engine, PROVENANCE)
    original = _original(loaded)
    assert len(result.commands) == len(original)
    for rank, (exported, launched) in enumerate(zip(result.commands, original, strict=True)):
        cut = _program_length(exported.argv)
        assert list(exported.argv[cut:]) == _translated(
            launched.argv, _program_length(launched.argv)
        )
        assert exported.argv[:cut] in (
            ("python3", "-m", "sglang.launch_server"),
            ("sglang", "serve"),
        )
        # the environment: the profile's, but the device list (the engine picks the GPUs)
        devices = {"CUDA_VISIBLE_DEVICES"} if loaded.profile.gpu.devices else set()
        assert dict(exported.env) == {k: v for k, v in launched.env.items() if k not in devices}, (
            rank
        )
    assert result.notes, "every export says what it translated"
    if engine == "slurm":  # a batch script: its #SBATCH lines and payload read back instead
        assert sbatch_directives(result.text) == result.documents[0]["sbatch"]
        assert srun_argv(result.text)[-1] == result.documents[0]["task"]
        return
    parsed = list(yaml.safe_load_all(result.text))
    assert parsed == [dict(document) for document in result.documents]


@pytest.mark.parametrize(("name", "engine"), [c for c in CASES if c[1] in K8S])
def test_kubernetes_containers_expand_to_each_ranks_exact_command(name: str, engine: str) -> None:
    loaded = SHIPPED.load(name)
    result = export(loaded.profile, loaded.table, engine, PROVENANCE)
    documents = list(yaml.safe_load_all(result.text))  # what kubectl reads
    group = loaded.profile.group
    for rank, command in enumerate(result.commands):
        container = _container(documents[0], rank)
        variables = {}
        if group is not None:  # LeaderWorkerSet's, on the profile's own nodes
            variables = {
                "LWS_LEADER_ADDRESS": group.rendezvous_host,
                "LWS_GROUP_SIZE": str(group.nnodes),
                "LWS_WORKER_INDEX": str(rank),
            }
        env = _kubelet_env(container, variables)
        argv = [
            kubernetes_expand(t, {**variables, **env})
            for t in container["command"] + container["args"]
        ]
        secrets = {name: SECRET_DATA[name] for name in command.secret_names()}
        assert argv == [secrets[t.env_var] if isinstance(t, SecretRef) else t for t in command.argv]
        assert env == {
            k: secrets[v.env_var] if isinstance(v, SecretRef) else v for k, v in command.env.items()
        }
        assert ("ports" in container) == (rank == 0)
        assert ("startupProbe" in container) == (rank == 0)


SECRET_DATA = {
    "HF_TOKEN": "hf_$(LWS_GROUP_SIZE)$$x",
    "API_KEY": "sk-$x",
}  # what `kubectl create secret` holds


def _kubelet_env(container: dict[str, Any], variables: dict[str, str]) -> dict[str, str]:
    """The container's environment as the kubelet builds it: values expanded (earlier entries
    visible to later ones), a secretKeyRef read from the Secret, never expanded."""
    env: dict[str, str] = {}
    entries = container.get("env", [])
    assert isinstance(entries, list)
    for entry in entries:
        if "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            env[entry["name"]] = SECRET_DATA[ref["key"]]
        else:
            env[entry["name"]] = kubernetes_expand(entry["value"], {**variables, **env})
    return env


def _container(document: Mapping[str, Any], rank: int) -> dict[str, Any]:
    spec = document["spec"]
    if document["kind"] == "Deployment":
        return spec["template"]["spec"]["containers"][0]  # type: ignore[no-any-return]
    template = spec["leaderWorkerTemplate"]
    pod = (
        template["leaderTemplate"]
        if rank == 0 and "leaderTemplate" in template
        else template["workerTemplate"]
    )
    return pod["spec"]["containers"][0]  # type: ignore[no-any-return]


# -- what an engine cannot run: refused, naming the key --------------------------------------------


def _store(tmp_path: Path, **documents: str) -> ProfileStore:
    root = copy_examples(tmp_path / "profiles")
    for name, text in documents.items():
        (root / f"{name}.yaml").write_text(text, encoding="utf-8")
    return ProfileStore(root)


def _refused(store: ProfileStore, name: str, engine: str) -> RenderError:
    loaded = store.load(name)
    with pytest.raises(RenderError) as caught:
        export(loaded.profile, loaded.table, engine, PROVENANCE)
    return caught.value


THREE_NODES = """\
extends: qwen35-397b-2x8-h200
group:
  nodes:
    - {host: h200-a}
    - {host: h200-b, env: {NCCL_SOCKET_IFNAME: ens2f0}}
    - {host: h200-1, env: {NCCL_SOCKET_IFNAME: ens3f0}}
args:
  tp_size: 24
"""


def test_a_leader_worker_set_refuses_workers_that_differ_naming_the_node(tmp_path: Path) -> None:
    store = _store(tmp_path, three=THREE_NODES)
    error = _refused(store, "three", "k8s-lws")
    assert "group.nodes[2].env.NCCL_SOCKET_IFNAME" in error.message
    assert "one" in error.message
    assert "template" in error.message
    # the shell engines give each rank its own env: they can run it
    loaded = store.load("three")
    result = export(loaded.profile, loaded.table, "skypilot", PROVENANCE)
    assert "ens3f0" in result.text


@pytest.mark.parametrize(
    ("document", "engine", "named"),
    [
        ("extends: demo\nenv: {CUDA_VISIBLE_DEVICES: '2'}\n", "k8s", "env.CUDA_VISIBLE_DEVICES"),
        ("extends: demo\nenv: {LWS_GROUP_SIZE: '9'}\n", "k8s-lws", "env.LWS_GROUP_SIZE"),
        ("extends: demo\nenv: {SKYPILOT_NODE_RANK: '0'}\n", "skypilot", "env.SKYPILOT_NODE_RANK"),
        ("extends: demo\nenv: {DSTACK_NODE_RANK: '0'}\n", "dstack", "env.DSTACK_NODE_RANK"),
        ("extends: qwen35-397b-2x8-h200\n", "k8s", "group"),
    ],
)
def test_what_an_engine_cannot_run_is_an_error_naming_the_key(
    tmp_path: Path, document: str, engine: str, named: str
) -> None:
    error = _refused(_store(tmp_path, p=document), "p", engine)
    assert f": {named}:" in error.message
    assert error.hint
    assert error.exit_code == ExitCode.RENDER


def test_no_image_without_a_pinned_version_or_export_image(tmp_path: Path) -> None:
    unpinned = "host: local\nmodel: {path: /m}\ngpu: {type: H200}\n"
    store = _store(
        tmp_path, p=unpinned, q=unpinned + "export: {image: my.registry/sglang:custom}\n"
    )
    assert "export.image" in (_refused(store, "p", "k8s").hint or "")
    loaded = store.load("q")
    assert (
        "image: my.registry/sglang:custom"
        in export(loaded.profile, loaded.table, "k8s", PROVENANCE).text
    )


def test_shell_engines_need_the_gpu_model(tmp_path: Path) -> None:
    store = _store(tmp_path, p='sglang: "0.5.23"\nhost: local\nmodel: {path: /m}\n')
    for engine in ("skypilot", "dstack"):
        assert ": gpu.type:" in _refused(store, "p", engine).message


def test_secrets_are_references_to_a_secret_never_values(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "hf_sentinel_value_123")
    monkeypatch.setenv("MY_KEY", "sk_sentinel_value_456")
    store = _store(
        tmp_path,
        p="extends: qwen36-mtp-rtxpro6000-tp4\nargs: {api_key: {from_env: MY_KEY}}\n"
        "export: {secret: team-tokens, secret_keys: {HF_TOKEN: hf}}\n",
    )
    loaded = store.load("p")
    for engine in EXPORT_ENGINES:
        text = export(loaded.profile, loaded.table, engine, PROVENANCE).text
        assert "sentinel" not in text
    lws = export(loaded.profile, loaded.table, "k8s-lws", PROVENANCE)
    container = _container(lws.documents[0], 0)
    refs = {e["name"]: e["valueFrom"]["secretKeyRef"] for e in container["env"] if "valueFrom" in e}
    assert refs == {
        "HF_TOKEN": {"name": "team-tokens", "key": "hf"},
        "MY_KEY": {"name": "team-tokens", "key": "MY_KEY"},
    }
    assert "$(MY_KEY)" in container["args"]
    sky = yaml.safe_load(export(loaded.profile, loaded.table, "skypilot", PROVENANCE).text)
    assert sky["secrets"] == {"HF_TOKEN": None, "MY_KEY": None}
    assert '"${MY_KEY}"' in sky["run"]


def test_orch_export_writes_the_file_or_stdout_and_says_what_it_translated(tmp_path: Path) -> None:
    root = copy_examples(tmp_path / "profiles")
    out, err = io.StringIO(), io.StringIO()
    target = tmp_path / "lws.yaml"
    code = cli.main(
        ["--profiles", str(root), "export", "k8s-lws", "qwen35-397b-2x8-h200", "-o", str(target)],
        out=out,
        err=err,
    )
    assert code == ExitCode.OK, err.getvalue()
    assert f"wrote {target}" in out.getvalue()
    assert "note: group.gated_launch: off" in out.getvalue()
    kinds = [d["kind"] for d in yaml.safe_load_all(target.read_text(encoding="utf-8"))]
    assert kinds == ["LeaderWorkerSet", "Service"]
    out = io.StringIO()
    assert (
        cli.main(["--profiles", str(root), "export", "dstack", "demo"], out=out, err=err)
        == ExitCode.OK
    )
    assert yaml.safe_load(out.getvalue())["type"] == "service"
    assert out.getvalue().startswith("# orch export dstack demo")
    err = io.StringIO()
    code = cli.main(
        ["--profiles", str(root), "export", "k8s", "qwen35-397b-2x8-h200"], out=out, err=err
    )
    assert code == ExitCode.RENDER
    assert "orch export k8s-lws" in err.getvalue()
