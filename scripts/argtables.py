"""SGLang's argument tables for any list of releases, from the real packages: build, pack, report.

    python scripts/argtables.py build [VERSION...]  # default: every release orch covers
    python scripts/argtables.py report [--check]    # docs/sglang-versions.md; --check: no writing
    python scripts/argtables.py release-check       # the registry's releases orch lacks: build
                                                    # them, rewrite the report, check the renames
    python scripts/argtables.py releases            # the releases orch covers, from the registry

``make argtables VERSIONS="0.5.17 0.5.24"`` and ``make sglang-release-check`` call these.

How a table is built (``build``): one CPU venv of a base release (``scripts/build-sglang-venv.sh``,
0.5.23 by default: torch, triton and what ``sglang.srt.server_args`` imports; the same venv the
real-SGLang test tier uses) and, per release, an overlay directory put first on ``PYTHONPATH``:
``sglang==VERSION`` without its dependencies, the ``transformers`` its own metadata pins (with that
release's dependencies), and any further module its ``server_args`` imports that its metadata
requires (found by importing it). ``scripts/gen_sglang_argtable.py`` then runs SGLang's own
``ServerArgs.add_cli_args`` on an ``argparse`` parser under that overlay. Overlays cost ~10-40 s per
release the first time (pip's cache keeps the wheels) and are kept under
``${ORCH_SGLANG_VENV_CACHE:-~/.cache/orch/sglang-venvs}/argtable-overlays/``.

Where the tables live: ``orchestrator/sglang/argtables/`` as a pack
(``orchestrator/sglang/argtable_pack.py``):
every distinct option record once (``options.jsonl``), every distinct (field, default) pair once
(``fields.jsonl``), and per release the lines it is made of (``releases.json``). 45 releases take
~1/10 of their separate size, a new release adds only what changed, and ``git diff`` of a rebuild
shows only what SGLang (or this tooling) changed.

Only the standard library and orch's own pure modules are imported here.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from orchestrator.sglang import argtable, argtable_pack  # noqa: E402

CACHE_ROOT = Path(
    os.environ.get("ORCH_SGLANG_VENV_CACHE", str(Path.home() / ".cache/orch/sglang-venvs"))
)
BASE_VERSION = os.environ.get("ORCH_ARGTABLE_BASE", "0.5.23")
PACK_DIR = REPO / "orchestrator" / "sglang" / "argtables"
REPORT = REPO / "docs" / "sglang-versions.md"
# Every release from 0.4.9.post1 on (0.5.0 was never published on PyPI); older ones on request
# (0.4.5 ships: a script of the corpus runs its image).
OLDEST_COVERED = (0, 4, 9, 1)


def log(text: str) -> None:
    print(f"[argtables] {text}", file=sys.stderr, flush=True)


def registry_releases() -> list[str]:
    """The releases on the package index that orch covers, oldest first (pip's own view)."""
    result = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"],
        capture_output=True,
        text=True,
        check=False,
    )
    match = re.search(r"Available versions: (.+)", result.stdout)
    if result.returncode != 0 or match is None:
        raise SystemExit(f"cannot list sglang's releases: {result.stderr.strip()[-500:]}")
    found = []
    for text in match.group(1).split(", "):
        parsed = argtable.parse_version(text.strip())
        if parsed is not None and parsed >= OLDEST_COVERED:
            found.append((parsed, text.strip()))
    return [text for _, text in sorted(found)]


def base_python() -> Path:
    """The python of the base venv (built once, cached)."""
    build = subprocess.run(
        ["bash", str(REPO / "scripts" / "build-sglang-venv.sh"), BASE_VERSION],
        stdout=subprocess.PIPE,
        text=True,
        check=False,
    )
    if build.returncode != 0:
        raise SystemExit(f"cannot build the base venv (sglang {BASE_VERSION})")
    return Path(build.stdout.strip().splitlines()[-1]) / "bin" / "python"


_PROBE = r"""
import importlib.metadata as md, re, sys
try:
    import sglang.srt.server_args  # noqa: F401
except ModuleNotFoundError as exc:
    print("missing", (exc.name or "?").split(".")[0])
except ImportError as exc:
    print("import-error", exc)
else:
    print("ok", __import__("sglang").__version__)
"""

_PINS = r"""
import importlib.metadata as md, json, re, sys
pins = {}
# unconditional requirements first, then those of sglang's extras (0.4.x lists its server's
# dependencies under the "srt" extras)
for line in sorted(md.requires("sglang") or [], key=lambda line: ";" in line):
    head, _, marker = line.partition(";")
    if marker and "extra" not in marker:
        continue
    m = re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(\[[^\]]*\])?\s*(.*)$", head)
    if m:
        pins.setdefault(re.sub(r"[-_.]+", "-", m.group(1)).lower(), m.group(1) + m.group(3).strip())
print(json.dumps(pins))
"""


def _pip(python: Path, *args: str, log_file: Path) -> None:
    with log_file.open("a") as out:
        out.write(f"\n$ pip install {' '.join(args)}\n")
        out.flush()
        done = subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--disable-pip-version-check",
                "--no-input",
                "--quiet",
                *args,
            ],
            stdout=out,
            stderr=out,
            check=False,
        )
    if done.returncode != 0:
        tail = log_file.read_text(errors="replace").splitlines()[-30:]
        raise SystemExit("pip install failed:\n" + "\n".join(tail))


def _run(python: Path, overlay: Path, code: str, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
    env["PYTHONPATH"] = str(overlay)
    done = subprocess.run(
        [str(python), "-W", "ignore", "-c", code, *args],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise SystemExit(f"{python} failed: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""


# the base venv's CPU build of these stays: sglang's own pins name CUDA builds
_GPU_STACK = ("torch", "triton", "sgl", "flashinfer", "nvidia", "cuda", "xformers")
# the triton each torch release was built with (PyTorch's pins), for releases older than the base
_TRITON_FOR_TORCH = {"2.5": "3.1.0", "2.6": "3.2.0", "2.7": "3.3.1", "2.8": "3.4.0", "2.9": "3.5.0"}
# import name -> distribution name, where they differ
_DISTRIBUTIONS = {
    "zmq": "pyzmq",
    "PIL": "pillow",
    "yaml": "pyyaml",
    "google": "protobuf",
    "opentelemetry": "opentelemetry-api",
    "sklearn": "scikit-learn",
    "cv2": "opencv-python",
}


def overlay_for(python: Path, version: str) -> Path:
    """A directory that, first on PYTHONPATH of the base venv, makes ``import sglang`` this
    release with the dependencies its server_args needs at the versions it pins."""
    root = CACHE_ROOT / "argtable-overlays"
    overlay = root / version
    marker = overlay / ".orch-overlay-ok"
    if marker.is_file():
        return overlay
    root.mkdir(parents=True, exist_ok=True)
    building = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=root))
    try:
        return _build_overlay(python, version, building, overlay)
    except BaseException:
        shutil.rmtree(building, ignore_errors=True)
        raise


def _build_overlay(python: Path, version: str, building: Path, overlay: Path) -> Path:
    log_file = building / ".orch-build.log"
    torch_pin = subprocess.run(
        [str(python), "-c", "import torch; print(torch.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    constraints = building / ".constraints.txt"
    constraints.write_text(f"torch=={torch_pin}\n")
    common = ("--target", str(building), "-c", str(constraints), "--prefer-binary")
    _pip(python, *common, "--no-deps", f"sglang=={version}", log_file=log_file)
    pins: dict[str, str] = json.loads(_run(python, building, _PINS))
    # what sglang pins exactly holds for everything installed next (xgrammar, with its own
    # dependencies, would otherwise bring today's transformers over the pinned one)
    exact = sorted(
        spec
        for name, spec in pins.items()
        if "==" in spec and "," not in spec and not name.startswith(_GPU_STACK)
    )
    constraints.write_text("".join(f"{line}\n" for line in [f"torch=={torch_pin}", *exact]))
    if "transformers" in pins:
        # with its own dependencies: an older transformers checks tokenizers/hub versions on import
        _pip(python, *common, pins["transformers"], log_file=log_file)
    installed: set[str] = set()
    for _ in range(16):
        answer = _run(python, building, _PROBE)
        kind, _, detail = answer.partition(" ")
        if kind == "ok":
            if detail != version:
                raise SystemExit(f"overlay for {version} imports sglang {detail}")
            break
        if kind == "import-error" and "triton" in detail and "triton" not in installed:
            # an old release reads triton internals that moved (0.4.5: triton.runtime.cache's
            # default_cache_dir): the triton of the torch it pins, beside the base's torch
            triton = _TRITON_FOR_TORCH.get(
                re.sub(r"^torch==(\d+\.\d+).*", r"\1", pins.get("torch", ""))
            )
            if triton is None:
                raise SystemExit(f"sglang {version}: {answer} (no triton known for its torch)")
            log(f"  {version}: server_args needs an older triton: installing triton=={triton}")
            _pip(
                python,
                "--target",
                str(building),
                "--no-deps",
                f"triton=={triton}",
                log_file=log_file,
            )
            installed.add("triton")
            continue
        if kind != "missing" or detail == "?":
            raise SystemExit(f"sglang {version}: import sglang.srt.server_args: {answer}")
        # Without dependencies (with them, xgrammar brings torch and triton again, ~1 GB): a
        # module sglang pins at its pin, one a dependency of those needs at today's release.
        distribution = _DISTRIBUTIONS.get(detail, re.sub(r"[-_.]+", "-", detail).lower())
        requirement = pins.get(distribution, distribution)
        log(f"  {version}: server_args imports {detail}: installing {requirement}")
        _pip(python, *common, "--no-deps", requirement, log_file=log_file)
    else:
        raise SystemExit(f"sglang {version}: import sglang.srt.server_args keeps failing")
    (building / ".orch-overlay-ok").write_text(version + "\n")
    if overlay.exists():
        shutil.rmtree(overlay)
    building.rename(overlay)
    return overlay


def generate(python: Path, version: str) -> dict[str, Any]:
    overlay = overlay_for(python, version)
    with tempfile.TemporaryDirectory() as out:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SGL_"))}
        env["PYTHONPATH"] = str(overlay)
        done = subprocess.run(
            [
                str(python),
                "-W",
                "ignore",
                str(REPO / "scripts" / "gen_sglang_argtable.py"),
                "--out",
                out,
            ],
            capture_output=True,
            text=True,
            env=env,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"sglang {version}: table generation failed: {done.stderr[-2000:]}")
        for line in done.stderr.splitlines():
            if line.startswith("warning:"):
                log(f"  {version}: {line}")
        document: dict[str, Any] = json.loads(Path(out, f"sglang-{version}.json").read_text())
    return document


def build(versions: list[str]) -> int:
    python = base_python()
    tables = argtable_pack.read_documents(PACK_DIR)
    failed: list[str] = []
    for version in versions:
        log(f"sglang {version}")
        try:
            tables[version] = generate(python, version)
        except SystemExit as exc:  # one release that cannot be read does not stop the others
            log(f"  FAILED: {exc}")
            failed.append(version)
            continue
        document = tables[version]
        log(f"  {len(document['options'])} options, {len(document['fields'])} fields")
        argtable_pack.write(PACK_DIR, tables)  # after each release: a long run keeps what it did
    log(f"{PACK_DIR.relative_to(REPO)}: {len(tables)} releases")
    if failed:
        log(f"no table built for {', '.join(failed)} (reasons above)")
    return 1 if failed else 0


def report(check: bool) -> int:
    from orchestrator.sglang import argtable_changes

    text, problems = argtable_changes.release_report(argtable.available_versions())
    if check:
        stale = not REPORT.is_file() or REPORT.read_text(encoding="utf-8") != text
        if stale:
            problems.append(
                f"{REPORT.relative_to(REPO)} is not the report of the shipped tables: "
                "run `python scripts/argtables.py report`"
            )
    else:
        REPORT.write_text(text, encoding="utf-8")
        log(f"wrote {REPORT.relative_to(REPO)}")
    for problem in problems:
        print(f"argtables: {problem}", file=sys.stderr)
    return 1 if problems else 0


def release_check() -> int:
    known = set(argtable.available_versions())
    missing = [v for v in registry_releases() if v not in known]
    if missing:
        log(f"releases without a table: {', '.join(missing)}")
        build(missing)
        argtable.available_versions.cache_clear()
        argtable_pack.clear_cache()
    else:
        log("every release on the registry has a table")
    return report(check=False)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    build_cmd = commands.add_parser("build", help="build the tables of these releases")
    build_cmd.add_argument("versions", nargs="*", help="default: every release orch covers")
    report_cmd = commands.add_parser("report", help="write docs/sglang-versions.md")
    report_cmd.add_argument("--check", action="store_true", help="fail on drift, write nothing")
    commands.add_parser("release-check", help="build new releases, report, check renames")
    commands.add_parser("releases", help="list the releases orch covers on the registry")
    args = parser.parse_args(argv)
    if args.command == "build":
        versions = args.versions or registry_releases()
        for version in versions:
            if argtable.parse_version(version) is None:
                parser.error(f"not a release: {version!r} (e.g. 0.5.17 or 0.5.10.post1)")
        return build(versions)
    if args.command == "report":
        return report(args.check)
    if args.command == "release-check":
        return release_check()
    print("\n".join(registry_releases()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
