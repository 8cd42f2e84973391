"""The bootstrap (fleet/bootstrap.py) running bundles as real processes on this machine: only the
bytes it checked, held in memory (a module imported after the file was replaced is still the
checked one), every module's code kept in one private cache, tracebacks with the bundle's source
lines, a clean sys.path, a bundle run by hand, a program started again through the bootstrap
(Python 3.9 included, the hosts' floor), exit codes 90-92."""

from __future__ import annotations

import hashlib
import json
import marshal
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator.errors import PreflightError
from orchestrator.fleet import bootstrap
from orchestrator.fleet.bundle import Bundle, build
from orchestrator.fleet.client import SOURCE_ROOT, agent_bundle

MAIN = """\
import sys

from orchestrator.remote.demo import early

print("ready", early.__file__, flush=True)
if sys.stdin.readline().strip() == "import":
    from orchestrator.remote.demo import late

    print(late.VALUE, late.__file__, flush=True)
"""


def _demo(root: Path, files: dict[str, str]) -> Bundle:
    """A bundle of a package ``demo`` under ``root`` (with orch's host package beside it)."""
    package = root / "orchestrator" / "remote" / "demo"
    package.mkdir(parents=True, exist_ok=True)
    for name, text in {"__init__.py": "", **files}.items():
        (package / name).write_text(textwrap.dedent(text))
    host = root / "orchestrator" / "remote" / "host"
    if not host.exists():
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(SOURCE_ROOT / "orchestrator" / "remote" / "host", host, ignore=ignore)
    return build(root, "demo", "orchestrator.remote.demo", ("orchestrator.remote.host",))


def _pushed(bundle: Bundle, home: Path) -> Path:
    """``bundle`` where orch would have pushed it: 0600 in a 0700 directory."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    path = home / bundle.file_name
    path.write_bytes(bundle.data)
    path.chmod(0o600)
    return path


def _run(
    bundle: Bundle, path: Path, *args: str, python: str = sys.executable, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    argv = bootstrap.bootstrap_argv(python, str(path), bundle.sha256, args)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=cwd)


def test_a_module_imported_after_the_file_was_replaced_is_the_checked_one(tmp_path: Path) -> None:
    """A detached supervisor may import a module days after it started: it gets the bytes the
    bootstrap checked, never what the file (or the code cache) holds by then."""
    files = {"__main__.py": MAIN, "early.py": "", "late.py": "VALUE = 'checked'\n"}
    checked = _demo(tmp_path / "src", files)
    path = _pushed(checked, tmp_path / "home")
    argv = bootstrap.bootstrap_argv(sys.executable, str(path), checked.sha256, ())
    with subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as process:
        assert process.stdout is not None
        assert process.stdin is not None
        ready = process.stdout.readline().split()
        assert ready == ["ready", f"<{checked.digest}>/orchestrator/remote/demo/early.py"]
        replaced = _demo(tmp_path / "src", {**files, "late.py": "VALUE = 'replaced'\n"})
        path.write_bytes(replaced.data)  # the file changes under the running program
        for cache in path.parent.glob("*.code"):
            cache.write_bytes(b"0" * 128)
        process.stdin.write("import\n")
        process.stdin.flush()
        late = process.stdout.readline().split()
        assert late == ["checked", f"<{checked.digest}>/orchestrator/remote/demo/late.py"]
        assert process.wait(timeout=30) == 0
    # and the next command refuses the replaced file (91): orch puts its own back, never runs it
    assert _run(checked, path).returncode == bootstrap.BOOT_CHANGED


def test_every_modules_code_is_kept_in_one_private_cache_naming_both_digests(
    tmp_path: Path,
) -> None:
    files = {"__main__.py": "import orchestrator.remote.demo.early\n", "early.py": "X = 1\n"}
    demo = _demo(tmp_path / "src", files)
    path = _pushed(demo, tmp_path / "home")
    assert _run(demo, path).returncode == 0
    (cache,) = path.parent.glob(f"{demo.file_name}.*.code")
    assert oct(cache.stat().st_mode & 0o777) == "0o600"
    kept = cache.read_bytes()
    body = kept[128:]
    assert kept[:128] == (demo.sha256 + hashlib.sha256(body).hexdigest()).encode()
    codes = marshal.loads(body)  # noqa: S302 - the cache orch's own bootstrap wrote
    assert sorted(codes) == list(demo.members)  # every module of the bundle, __main__.py too
    assert codes["orchestrator/remote/demo/early.py"].co_filename == (
        f"<{demo.digest}>/orchestrator/remote/demo/early.py"
    )
    assert _run(demo, path).returncode == 0  # from the cache now
    assert cache.read_bytes() == kept


def test_a_traceback_shows_the_bundles_source_lines(tmp_path: Path) -> None:
    files = {
        "__main__.py": "from orchestrator.remote.demo.boom import explode\n\nexplode()\n",
        "boom.py": """\
            def explode():
                raise RuntimeError("boom from the bundle")
            """,
    }
    demo = _demo(tmp_path / "src", files)
    path = _pushed(demo, tmp_path / "home")
    for _compiled_now_then_cached in (1, 2):
        done = _run(demo, path)
        assert done.returncode == 1
        where = f"<{demo.digest}>/orchestrator/remote/demo"
        assert f'File "{where}/__main__.py", line 3, in <module>\n    explode()' in done.stderr
        assert f'File "{where}/boom.py", line 2, in explode\n    raise RuntimeError(' in done.stderr
        assert "RuntimeError: boom from the bundle" in done.stderr


def test_nothing_in_the_working_directory_or_beside_the_bundle_shadows_the_standard_library(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "planted-module-ran"
    planted = f"open({str(marker)!r}, 'w').write('ran')\n"
    files = {"__main__.py": "import json, sys, zipfile\nprint(json.dumps(sys.path))\n"}
    demo = _demo(tmp_path / "src", files)
    path = _pushed(demo, tmp_path / "home")
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    for name in ("hashlib", "zipfile", "runpy", "json", "importlib"):
        (cwd / f"{name}.py").write_text(planted)
        (path.parent / f"{name}.py").write_text(planted)
    done = _run(demo, path, cwd=cwd)
    assert done.returncode == 0, done.stderr
    assert not marker.exists()
    seen = json.loads(done.stdout)
    assert [entry for entry in seen if entry in ("", ".", str(path.parent), str(cwd))] == []


def test_the_agent_bundle_runs_by_hand_as_a_zip_application(tmp_path: Path) -> None:
    """What docs/agent.md tells an operator: ``python agent-<digest>.pyz status --dir D``."""
    agent = agent_bundle()
    path = _pushed(agent, tmp_path / ".orch")
    deployment = tmp_path / "svc"
    argv = [sys.executable, str(path), "status", "--dir", str(deployment)]
    by_hand = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=True)
    through_bootstrap = _run(agent, path, "status", "--dir", str(deployment))
    assert json.loads(by_hand.stdout) == json.loads(through_bootstrap.stdout)
    assert json.loads(by_hand.stdout)["deployed"] is False


AGAIN = """\
import os
import sys

from orchestrator.remote.host import program

if sys.argv[1:] == ["first"]:
    again = program.rerun_argv("orchestrator.remote.demo")
    os.execv(again[0], [*again, "second"])
home = program.home("orchestrator.remote.demo")
print("%d.%d" % sys.version_info[:2], sys.argv[1:], home)
"""


def _python39() -> str | None:
    """A Python 3.9 of this machine (the hosts' floor), if there is one."""
    pyenv = Path.home().glob(".pyenv/versions/3.9*/bin/python3.9")
    for candidate in filter(None, [shutil.which("python3.9"), *map(str, pyenv)]):
        asked = [candidate, "-c", "import sys; print(sys.version_info[:2])"]
        done = subprocess.run(asked, capture_output=True, text=True, check=False)
        if done.returncode == 0 and done.stdout.strip() == "(3, 9)":
            return candidate
    return None


@pytest.mark.parametrize("floor", [False, True], ids=["this-python", "python3.9"])
def test_a_program_started_again_goes_through_the_bootstrap_again(
    tmp_path: Path, floor: bool
) -> None:
    """The probe starts itself again under the server's environment: the same bundle, checked
    again (on 3.9, which lacks sys.orig_argv, the bootstrap is read back from /proc)."""
    python = _python39() if floor else sys.executable
    if python is None:
        pytest.skip("no Python 3.9 on this machine (the hosts' floor)")
    demo = _demo(tmp_path / "src", {"__main__.py": AGAIN})
    path = _pushed(demo, tmp_path / "home")
    done = _run(demo, path, "first", python=python)
    assert done.returncode == 0, done.stderr
    version, argv, home = done.stdout.split()
    assert version == ("3.9" if floor else "{}.{}".format(*sys.version_info[:2]))
    assert (argv, home) == ("['second']", str(path.parent))


def test_exit_codes_say_why_a_bundle_did_not_run(tmp_path: Path) -> None:
    demo = _demo(tmp_path / "src", {"__main__.py": "print('ran')\n"})
    home = tmp_path / "home"
    path = home / demo.file_name
    assert _run(demo, path).returncode == bootstrap.BOOT_MISSING
    argv, stdin = bootstrap.carrying(
        bootstrap.bootstrap_argv(sys.executable, str(path), demo.sha256, ()), demo.data, None
    )
    carried = subprocess.run(argv, input=stdin, capture_output=True, timeout=60, check=False)
    assert (carried.returncode, carried.stdout) == (0, b"ran\n")
    assert oct(home.stat().st_mode & 0o777) == "0o700"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert path.read_bytes() == demo.data
    path.write_bytes(demo.data + b"\n")
    assert _run(demo, path).returncode == bootstrap.BOOT_CHANGED
    path.write_bytes(demo.data)
    home.chmod(0o770)
    assert _run(demo, path).returncode == bootstrap.BOOT_UNSAFE
    home.chmod(0o700)
    path.chmod(0o620)
    assert _run(demo, path).returncode == bootstrap.BOOT_UNSAFE
    path.unlink()
    path.symlink_to(tmp_path / "src" / "elsewhere.pyz")
    (tmp_path / "src" / "elsewhere.pyz").write_bytes(demo.data)
    refused = _run(demo, path)
    assert refused.returncode == bootstrap.BOOT_UNSAFE
    assert "(a symlink?)" in refused.stderr


def test_a_bundle_run_on_this_machine_is_kept_checked_and_replaced_like_a_pushed_one(
    tmp_path: Path,
) -> None:
    """``orch plan --local-sglang``: the probe's bundle in a private directory of this machine,
    through the same bootstrap; another content under its name is replaced, never run."""
    marker = tmp_path / "planted-ran"
    demo = _demo(tmp_path / "src", {"__main__.py": "import sys\nprint(sys.stdin.read())\n"})
    home = tmp_path / "cache" / "orch" / "bundles"
    done = bootstrap.run_here(sys.executable, demo, (), home=home, stdin=b"asked", timeout=60)
    assert (done.returncode, done.stdout) == (0, b"asked\n")
    assert oct(home.stat().st_mode & 0o777) == "0o700"
    planted = f"import os\nopen({str(marker)!r}, 'w').write('ran')\n"
    (home / demo.file_name).write_bytes(_demo(tmp_path / "other", {"__main__.py": planted}).data)
    done = bootstrap.run_here(sys.executable, demo, (), home=home, stdin=b"again", timeout=60)
    assert (done.returncode, done.stdout) == (0, b"again\n")
    assert not marker.exists()
    assert (home / demo.file_name).read_bytes() == demo.data
    home.chmod(0o777)
    with pytest.raises(PreflightError, match="is not owned by you or is writable by others"):
        bootstrap.run_here(sys.executable, demo, (), home=home, timeout=60)
