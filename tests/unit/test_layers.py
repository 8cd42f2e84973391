"""The house's shape holds: orch's packages import only the layers below them (import-linter's
contracts in pyproject.toml), the pushed programs import nothing of orch's, and nothing in
orchestrator/ or bench/ imports itself round a circle, lazy imports counted (an import inside
a function is an import: hiding a circle behind one is still a circle). scripts/ are programs
that only import orch, never imported back (nor one another), checked here too."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import grimp
import pytest
from importlinter.cli import lint_imports

from tests.conftest import REPO


def test_every_layer_contract_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    assert lint_imports(config_filename=str(REPO / "pyproject.toml")) == 0


def _circles(*packages: str) -> list[list[str]]:
    graph = grimp.build_graph(*packages, include_external_packages=False)
    edges = {module: graph.find_modules_directly_imported_by(module) for module in graph.modules}
    # Tarjan's strongly connected components, iteratively (no recursion limit to meet)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, following = work[-1]
            step = next(following, None)
            if step is not None:
                if step not in index:
                    index[step] = low[step] = len(index)
                    stack.append(step)
                    on_stack.add(step)
                    work.append((step, iter(sorted(edges[step]))))
                elif step in on_stack:
                    low[module] = min(low[module], index[step])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[module])
            if low[module] == index[module]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == module:
                        break
                if len(component) > 1:
                    circles.append(sorted(component))
    return circles


def test_no_import_circle_in_orch_or_its_benchmarks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(REPO))
    assert _circles("orchestrator", "bench") == []


def test_the_circle_finder_finds_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "circular_pkg"
    root.mkdir()
    (root / "__init__.py").write_text("")
    (root / "a.py").write_text("def f():\n    from circular_pkg import b  # lazy, still a circle\n")
    (root / "b.py").write_text("from circular_pkg import a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert _circles("circular_pkg") == [["circular_pkg.a", "circular_pkg.b"]]
    sys.modules.pop("circular_pkg", None)


def _imported_names(path: Path) -> set[str]:
    """Every module ``path`` imports, lazily or not (absolute imports: scripts/ has no package)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def test_scripts_are_programs_nothing_imports_and_they_import_no_other_script() -> None:
    # programs without .py (scripts/calibrate-memory) are Python by their first line
    programs = [
        path
        for path in (REPO / "scripts").iterdir()
        if path.is_file()
        and not path.suffix
        and path.read_bytes().startswith(b"#!/usr/bin/env python")
    ]
    scripts = {path.stem for path in (REPO / "scripts").glob("*.py")}
    assert scripts  # the check sees them
    assert REPO / "scripts" / "calibrate-memory" in programs
    sources = [
        path
        for tree in ("orchestrator", "bench", "scripts", "tests")
        for path in (REPO / tree).rglob("*.py")
    ] + programs
    importing = {
        f"{path.relative_to(REPO)} imports {name}"
        for path in sources
        for name in _imported_names(path)
        if name.split(".")[0] == "scripts" or name.split(".")[0] in scripts
    }
    assert importing == set()


def test_the_script_import_finder_sees_a_lazy_one(tmp_path: Path) -> None:
    program = tmp_path / "x.py"
    program.write_text("def f():\n    import argtables\n    from scripts.argtables import g\n")
    assert _imported_names(program) == {"argtables", "scripts.argtables"}
