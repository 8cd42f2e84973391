"""The probe's plan cache (remote/probe/cache.py): its key changes with each thing that decides
the answer and with nothing else; its files are private; a hit answers without computing."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from orchestrator.remote.host.gpus import Gpu, GpuReading
from orchestrator.remote.probe import cache

SECRET = "hf_secret-token-value-1234"  # noqa: S105 - a made-up token the files must not hold
DIGEST = "a" * 64


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., None]:
    """An installed 'sglang' (package and dist-info, maybe a plugin) on a fresh sys.path entry,
    the only one the key sees: each call installs another, in a directory of its own."""
    monkeypatch.delitem(sys.modules, "sglang", raising=False)
    for name in list(os.environ):
        if name.startswith(cache.ENV_PREFIXES):
            monkeypatch.delenv(name)
    made = iter(range(100))

    def install(version: str = "0.5.11", plugin: str | None = None) -> None:
        site = tmp_path / f"site-{next(made)}"
        (site / "sglang").mkdir(parents=True)
        (site / "sglang" / "__init__.py").write_text("raise ImportError('never imported')\n")
        info = site / f"sglang-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {version}\n")
        if plugin is not None:
            (info / "entry_points.txt").write_text(f"[{cache.PLUGIN_GROUP}]\n{plugin}\n")
        monkeypatch.setattr(sys, "path", [str(site)])

    install()
    return install


@pytest.fixture
def model(tmp_path: Path) -> Path:
    directory = tmp_path / "Qwen3.6-27B"
    directory.mkdir()
    (directory / "config.json").write_text(json.dumps({"model_type": "qwen3_5"}))
    index = {"metadata": {"total_size": 54_870_000_000}, "weight_map": {}}
    (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    return directory


def request_for(model: Path, **changes: Any) -> dict[str, Any]:
    request: dict[str, Any] = {
        "args": ["--model-path", str(model), "--tp-size", "1"],
        "env": {"HF_TOKEN": SECRET},
        "simulate_gpu": None,
        "model_config": None,
        "remove_request": True,
        "cache": {"dir": "/somewhere", "read": True},
    }
    request.update(changes)
    return request


def reading(total: int = 97_887_000_000, free: int = 90_000_000_000) -> GpuReading:
    gpu = Gpu(0, "NVIDIA RTX PRO 6000", "GPU-1234", total, free, (12, 0))
    return GpuReading((gpu,), None, "580.95.05")


def key(request: dict[str, Any], gpus: GpuReading | None = None, digest: str = DIGEST) -> str:
    return cache.cache_key(cache.key_facts(request, digest, gpus or reading()), b"salt")


def test_equal_inputs_give_equal_keys(installed: Callable[..., None], model: Path) -> None:
    assert key(request_for(model)) == key(request_for(model))
    # how the request travelled, and the cache's own settings, decide nothing
    moved = request_for(model, remove_request=False, cache={"dir": "/elsewhere", "read": False})
    assert key(moved) == key(request_for(model))
    # a GPU's free memory is read afresh on a hit, never keyed
    assert key(request_for(model), reading(free=1)) == key(request_for(model))


def test_each_part_of_the_request_changes_the_key(
    installed: Callable[..., None], model: Path
) -> None:
    first = key(request_for(model))
    changed = [
        request_for(model, args=["--model-path", str(model), "--tp-size", "2"]),
        request_for(model, env={"HF_TOKEN": SECRET + "x"}),
        request_for(model, env={"HF_TOKEN": SECRET, "SGLANG_ENABLE_SPEC_V2": "1"}),
        request_for(model, simulate_gpu={"name": "H200", "capability": [9, 0], "memory_mib": 1}),
        request_for(model, model_config={"path": "/m", "config": {"model_type": "x"}}),
        request_for(model, candidates=[{"tp_size": 4}]),  # whatever a newer orch asks
    ]
    keys = {key(request) for request in changed}
    assert first not in keys
    assert len(keys) == len(changed)


def test_the_probe_the_python_environment_and_the_gpus_change_the_key(
    installed: Callable[..., None], model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    request = request_for(model)
    first = key(request)
    assert key(request, digest="b" * 64) != first  # a new orch
    assert key(request, reading(total=1 << 30)) != first  # another GPU size
    other = GpuReading((Gpu(0, "NVIDIA H200", "GPU-1234", 97_887_000_000, 1, (9, 0)),), None, "x")
    assert key(request, other) != first
    monkeypatch.setenv("SGLANG_DISABLE_CUDNN_CHECK", "1")  # the host's login environment
    assert key(request) != first
    monkeypatch.delenv("SGLANG_DISABLE_CUDNN_CHECK")
    monkeypatch.setenv("SSH_CLIENT", "10.0.0.1 51234 22")  # changes with every connection
    assert key(request) == first


def test_sglang_its_version_and_its_plugins_change_the_key(
    installed: Callable[..., None], model: Path
) -> None:
    request = request_for(model)
    first = key(request)
    installed("0.5.11")  # the same release installed elsewhere: its files' times differ
    elsewhere = key(request)
    installed("0.5.23")
    newer = key(request)
    installed("0.5.23", plugin="tuner = tuner_plugin:register")
    plugged = key(request)
    assert len({first, elsewhere, newer, plugged}) == 4
    facts = cache.installed_sglang()
    assert facts["versions"]["sglang"] == "0.5.23"
    assert facts["plugins"] == [["tuner", "tuner_plugin:register", "sglang", "0.5.23"]]
    assert "sglang" not in sys.modules  # read without importing it


def test_the_models_files_change_the_key(installed: Callable[..., None], model: Path) -> None:
    request = request_for(model)
    first = key(request)
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3_5", "x": 1}))
    second = key(request)
    index = {"metadata": {"total_size": 1}, "weight_map": {}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    third = key(request)
    (model / "model.safetensors.index.json").unlink()
    weights = model / "model.safetensors"
    with weights.open("wb") as handle:  # a large file: its size and time, not its content
        handle.truncate(cache.SMALL_FILE + 1)
    fourth = key(request)
    os.utime(weights, ns=(1, 1))
    fifth = key(request)
    assert len({first, second, third, fourth, fifth}) == 5


def test_a_hub_id_is_not_cached_a_missing_path_is_keyed_as_missing(
    installed: Callable[..., None], tmp_path: Path
) -> None:
    with pytest.raises(cache.Uncacheable, match="Hub id"):
        cache.key_facts(request_for(Path("Qwen/Qwen3.6-27B")), DIGEST, None)
    facts = cache.key_facts(request_for(tmp_path / "absent"), DIGEST, None)
    assert facts["models"] == {str(tmp_path / "absent"): {"missing": True}}


def test_model_paths_are_read_in_both_spellings() -> None:
    args = ["--model-path=/a", "--speculative-draft-model-path", "/b", "--tokenizer-path", "/c"]
    assert cache.model_paths(args) == ["/a", "/b", "/c"]


# -- the directory, the files, through_cache


@pytest.fixture
def home(tmp_path: Path) -> Path:
    root = tmp_path / "orch"
    root.mkdir(mode=0o700)
    return root


@pytest.fixture
def planned(
    installed: Callable[..., None], model: Path, home: Path
) -> Callable[..., dict[str, Any]]:
    """The cache's answer to a request, counting how often the plan itself ran."""
    runs: list[int] = []

    def ask(read: bool = True, directory: Path | None = None, **changes: Any) -> dict[str, Any]:
        where = directory or home / "plan-cache" / "demo"
        request = request_for(model, cache={"dir": str(where), "read": read}, **changes)

        def compute() -> dict[str, Any]:
            runs.append(1)
            gpus = [{"index": 0, "free_bytes": 5, "name": "old"}]
            return {"ok": True, "run": len(runs), "memory": {"gpus": gpus, "gpu_error": None}}

        return cache.through_cache(
            request, compute, probe_digest=lambda: DIGEST, read_gpus=lambda: reading(free=7)
        )

    return ask


def test_a_second_plan_answers_from_the_cache_with_the_gpus_read_now(
    planned: Callable[..., dict[str, Any]],
) -> None:
    first = planned()
    assert (first["run"], first["cache"]["hit"], first["cache"]["stored"]) == (1, False, True)
    second = planned()
    assert second["run"] == 1  # the plan did not run again
    assert second["cache"]["hit"] is True
    assert second["cache"]["key"] == first["cache"]["key"]
    assert second["cache"]["age_s"] >= 0
    (gpu,) = second["memory"]["gpus"]
    assert (gpu["name"], gpu["free_bytes"]) == ("NVIDIA RTX PRO 6000", 7)
    assert planned(args=["--model-path", "/other"])["run"] == 2  # another request misses


def test_no_cache_plans_afresh_and_keeps_the_new_answer(
    planned: Callable[..., dict[str, Any]],
) -> None:
    planned()
    fresh = planned(read=False)
    assert (fresh["run"], fresh["cache"]["hit"], fresh["cache"]["stored"]) == (2, False, True)
    assert "--no-cache" in fresh["cache"]["note"]
    assert planned()["run"] == 2  # the kept answer is the fresh one


def test_the_files_are_private_and_hold_no_secret_in_their_names(
    planned: Callable[..., dict[str, Any]], home: Path
) -> None:
    planned()
    directory = home / "plan-cache" / "demo"
    for path in (home / "plan-cache", directory):
        assert stat.S_IMODE(path.stat().st_mode) == 0o700
    files = list(directory.iterdir())
    assert {p.name for p in files} >= {cache.SALT_NAME}
    for path in files:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert SECRET not in path.name
        assert SECRET not in path.read_text()  # the answer here holds none; the key is an HMAC


def test_a_directory_others_can_write_is_ignored_with_a_note(
    planned: Callable[..., dict[str, Any]], home: Path
) -> None:
    planned()
    directory = home / "plan-cache" / "demo"
    directory.chmod(0o770)
    answer = planned()
    assert answer["run"] == 2
    assert answer["cache"]["hit"] is False
    assert "writable by group or others" in answer["cache"]["note"]
    assert planned()["run"] == 3  # nothing was read from it or written to it


def test_an_entry_others_can_read_is_not_trusted(
    planned: Callable[..., dict[str, Any]], home: Path
) -> None:
    first = planned()
    (entry,) = (home / "plan-cache" / "demo").glob("*.json")
    entry.chmod(0o644)
    assert planned()["run"] == 2
    assert first["cache"]["key"] == entry.name[:16]


def test_an_import_failure_is_not_kept(
    installed: Callable[..., None], model: Path, home: Path
) -> None:
    request = request_for(model, cache={"dir": str(home / "plan-cache" / "x"), "read": True})
    broken = {"ok": False, "error": {"stage": "import", "message": "No module named sglang"}}
    answer = cache.through_cache(
        request, lambda: dict(broken), probe_digest=lambda: DIGEST, read_gpus=reading
    )
    assert answer["cache"]["stored"] is False
    assert list((home / "plan-cache" / "x").glob("*.json")) == []


def test_the_cache_is_pruned_to_its_bound(home: Path) -> None:
    kept = cache.PlanCache.open(str(home / "plan-cache" / "demo"))
    for index in range(5):
        kept.store(f"{index:064x}", {"ok": True})
        path = Path(kept.path(f"{index:064x}"))
        os.utime(path, ns=(index * 10**9, index * 10**9))
    kept.prune(max_entries=3)
    left = {int(p.name.removesuffix(".json"), 16) for p in Path(kept.directory).glob("*.json")}
    assert left == {2, 3, 4}  # the least recently used went


def test_without_a_cache_in_the_request_the_plan_just_runs(model: Path) -> None:
    request = request_for(model)
    del request["cache"]
    answer = cache.through_cache(
        request, lambda: {"ok": True}, probe_digest=lambda: DIGEST, read_gpus=reading
    )
    assert answer == {"ok": True}
