"""The pushed programs as ONE deterministic bundle each (fleet/bundle.py): the same bytes from
any build of the same sources, wherever the tree lies and whatever its files' times and modes;
a zip of .py files only, every entry alike; every orch module a bundle imports inside it."""

from __future__ import annotations

import ast
import os
import shutil
import zipfile
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

import pytest

from orchestrator.errors import OrchError
from orchestrator.fleet import bundle
from orchestrator.fleet.client import SOURCE_ROOT, agent_bundle, probe_bundle

PROBE_PACKAGES = ("orchestrator/remote/probe", "orchestrator/remote/host")


def _probe(root: Path) -> bundle.Bundle:
    """The probe's bundle as orch builds it (client.probe_bundle), from the sources under root."""
    return bundle.build(root, "probe", "orchestrator.remote.probe", ("orchestrator.remote.host",))


def _copy_tree(target: Path) -> Path:
    """The pushed programs' sources copied under ``target``, then touched and chmod-ed: new
    times (far apart), other modes, a compiled file and an editor's file beside them."""
    for package in (*PROBE_PACKAGES, "orchestrator/remote/agent"):
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(SOURCE_ROOT / package, target / package, ignore=ignore)
    for index, path in enumerate(sorted(target.rglob("*.py"))):
        os.utime(path, (1_000_000_000 + index * 86_400, 2_000_000_000 - index * 3_600))
        path.chmod(0o755 if index % 2 else 0o600)
    (target / "orchestrator/remote/probe/__pycache__").mkdir()
    (target / "orchestrator/remote/probe/__pycache__/main.cpython-311.pyc").write_bytes(b"x")
    (target / "orchestrator/remote/probe/.#main.py").write_text("an editor's lock file\n")
    (target / "orchestrator/remote/probe/notes.txt").write_text("not Python\n")
    return target


def test_two_builds_give_the_same_bytes_also_from_a_touched_chmodded_copy_elsewhere(
    tmp_path: Path,
) -> None:
    probe = _probe(SOURCE_ROOT)
    assert _probe(SOURCE_ROOT) == probe
    assert probe == probe_bundle()  # what orch pushes

    elsewhere = _copy_tree(tmp_path / "somewhere" / "else")
    copied = _probe(elsewhere)
    assert copied.data == probe.data
    assert (copied.sha256, copied.file_name) == (probe.sha256, probe.file_name)
    agent = bundle.build(
        elsewhere, "agent", "orchestrator.remote.agent", ("orchestrator.remote.host",)
    )
    assert agent.data == agent_bundle().data

    (elsewhere / "orchestrator/remote/host/gpus.py").write_text("# another content\n")
    changed = _probe(elsewhere)
    assert changed.sha256 != probe.sha256  # the content, and only the content, names it


@pytest.mark.parametrize("made", [agent_bundle, probe_bundle], ids=["agent", "probe"])
def test_a_bundle_is_a_zip_of_python_files_every_entry_alike(
    made: Callable[[], bundle.Bundle],
) -> None:
    built = made()
    with zipfile.ZipFile(BytesIO(built.data)) as archive:
        infos = archive.infolist()
        assert archive.comment == b""
        assert archive.testzip() is None
    names = [info.filename for info in infos]
    assert names == sorted(names) == list(built.members)
    assert all(name.endswith(".py") for name in names)  # no directory entries, nothing else
    for info in infos:
        assert info.date_time == (1980, 1, 1, 0, 0, 0)
        assert info.compress_type == zipfile.ZIP_STORED
        assert (info.create_system, info.external_attr >> 16) == (3, 0o100644)
        assert (info.extra, info.comment) == (b"", b"")
    assert names[0] == "__main__.py"  # `python <name>-<digest>.pyz ...` runs it by hand
    main = zipfile.ZipFile(BytesIO(built.data)).read("__main__.py").decode()
    assert f"ENTRY = {built.entry!r}" in main
    assert 'runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)' in main
    # orch's own packages above the program: the bundle's empty ones, never orch's
    assert zipfile.ZipFile(BytesIO(built.data)).read("orchestrator/__init__.py") == b""
    assert built.file_name == f"{built.name}-{built.sha256[:12]}.pyz"


def _defined(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        else:
            for target in ast.walk(node):
                if isinstance(target, ast.Name) and isinstance(target.ctx, ast.Store):
                    names.add(target.id)
    return names


def _missing(modules: dict[str, tuple[ast.Module, bool]]) -> list[str]:
    """``module imports name`` for each orch module or name a module imports that the bundle
    lacks (relative imports resolved)."""
    missing = []
    wanted: list[tuple[str, str | None]]
    for module, (tree, package) in modules.items():
        here = module if package else module.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                wanted = [(alias.name, None) for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = here.split(".")
                    anchor = ".".join(parts[: len(parts) - node.level + 1])
                    base = f"{anchor}.{base}" if base else anchor
                wanted = [(base, alias.name) for alias in node.names]
            else:
                continue
            for source, name in wanted:
                if source.split(".")[0] != "orchestrator":
                    continue
                if source not in modules:
                    missing.append(f"{module} imports {source}")
                elif (
                    name is not None
                    and f"{source}.{name}" not in modules
                    and name not in _defined(modules[source][0])
                ):
                    missing.append(f"{module} imports {name} from {source}")
    return missing


@pytest.mark.parametrize("made", [agent_bundle, probe_bundle], ids=["agent", "probe"])
def test_every_orch_module_a_bundle_imports_is_in_it(made: Callable[[], bundle.Bundle]) -> None:
    """A module left out would be found missing on the host only when imported, maybe days
    later (a supervisor's rare path)."""
    built = made()
    archive = zipfile.ZipFile(BytesIO(built.data))
    modules = {}
    for name in built.members:
        dotted = name.removesuffix(".py").removesuffix("/__init__").replace("/", ".")
        modules[dotted] = (ast.parse(archive.read(name)), name.endswith("/__init__.py"))
    assert _missing(modules) == []
    if built.name == "probe":  # the check finds one left out
        del modules["orchestrator.remote.host.gpus"]
        assert _missing(modules) == [
            "orchestrator.remote.probe.main imports gpus from orchestrator.remote.host",
            "orchestrator.remote.probe.memory imports gpus from orchestrator.remote.host",
        ]


def test_a_package_without_a_main_is_not_a_program(tmp_path: Path) -> None:
    (tmp_path / "orchestrator/remote/tool").mkdir(parents=True)
    (tmp_path / "orchestrator/remote/tool/__init__.py").write_text("")
    with pytest.raises(OrchError, match=r"needs a __main__\.py"):
        bundle.build(tmp_path, "tool", "orchestrator.remote.tool")
    (tmp_path / "orchestrator/remote/tool/sub").mkdir()
    (tmp_path / "orchestrator/remote/tool/sub/x.py").write_text("")
    (tmp_path / "orchestrator/remote/tool/__main__.py").write_text("")
    with pytest.raises(OrchError, match=r"without __init__\.py"):
        bundle.build(tmp_path, "tool", "orchestrator.remote.tool")
    with pytest.raises(OrchError, match="neither a package nor a module"):
        bundle.build(tmp_path, "tool", "orchestrator.remote.missing")
