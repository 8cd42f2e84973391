"""How a pushed bundle (fleet/bundle.py) is run on a host: never by its name, always through
``python -c BOOTSTRAP <file> <sha256> [--carried N] [--stdin-first] ARGS...``.

The bootstrap (Python 3.9+, standard library only) checks, on the host, that the file's directory
and the file belong to the SSH user and nobody else can write them (OpenSSH's StrictModes), opens
the file without following a link, reads it once and compares its sha256 with what this orch
built. It then runs the bundle from THOSE bytes, held in memory: its modules are imported by a
small finder/loader over them (the zip is opened on an ``io.BytesIO`` of the checked bytes, never
from the path again), so that a supervisor that imports a module days later gets the code that
was checked, whatever has become of the file since. As Ansible's wrapper does, it takes ``''``
(first, before it imports anything) and the bundle's directory off ``sys.path``: nothing in the
working directory or beside the file shadows the standard library. It runs the bundle's entry with
``runpy.run_module(ENTRY, run_name="__main__", alter_sys=True)``. A module's ``__file__`` names
the bundle, not a file of the host: ``<3f2a1b2c3d4e>/orchestrator/remote/probe/main.py`` (the
digest in angle brackets); the loader's ``get_source`` gives tracebacks their source lines (the
traceback module's: the bootstrap prints an uncaught exception with it, where Python before 3.13
reads lines only from files).
Exit codes 90 (missing), 91 (another content) and 92 (unsafe) say why it did not run.

``--carried N`` (first): the first N bytes of stdin are the bundle, zlib-compressed, sent with the
command instead of by a file transfer of its own. Written when the host lacks it (0600,
atomically; missing directories 0700), checked like any other, then run with the rest of stdin.

``--no-write`` (after ``--carried``): the bootstrap writes nothing on the host: a carried
bundle is run from the carried bytes (checked against the sha256) and never written, no
compiled code is cached, no bytecode is written (``sys.dont_write_bytecode``). What reads a
host without changing it (``survey``, orch sync's dry run) runs so.

``--stdin-first`` (after ``--carried`` and ``--no-write``): all of stdin is read before
anything else is looked at; empty, it ends there, having done nothing. A command can thus be
started before orch knows what it will send it (``Agent.open_start``), and called off.

The compiled code of every module is kept beside the file (``<file>.<cache tag>.code``: one
marshal of {path in the bundle: code}, 0600, written atomically): compiling costs tens of
milliseconds of every command on the host. It is used only when it is as safe as the file (ours,
not writable by others, no link) and its header names the sha256 of the checked bundle and of its
own content; anything else and the bundle is compiled again.

A bundle that runs itself again (the probe, under the server's environment) asks the loader for
``rerun_argv()``: the same bootstrap, file and sha256, so the new interpreter checks it again.
"""

from __future__ import annotations

import functools
import os
import subprocess
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

from orchestrator.errors import PreflightError
from orchestrator.fleet.bundle import Bundle

BOOT_MISSING, BOOT_CHANGED, BOOT_UNSAFE = 90, 91, 92

BOOTSTRAP = """\
import sys
sys.path[:] = [p for p in sys.path if p not in ("", ".")]
import hashlib, marshal, os, zlib
path, want = sys.argv[1], sys.argv[2]
def stop(code, why):
    sys.stderr.write("orch-bootstrap: " + why + "\\n")
    raise SystemExit(code)
def unsafe(st):
    return st.st_uid != os.getuid() or st.st_mode & 0o022
directory = os.path.dirname(path)
rest = sys.argv[3:]
carried = None
if rest[:1] == ["--carried"]:
    carried, rest = sys.stdin.buffer.read(int(rest[1])), rest[2:]
writes = rest[:1] != ["--no-write"]
if not writes:
    rest = rest[1:]
    sys.dont_write_bytecode = True
if carried is not None and writes:
    if not os.path.exists(path):
        data = zlib.decompress(carried)
        if hashlib.sha256(data).hexdigest() != want:
            stop(91, path + ": the carried file is not the one orch sent")
        made = ""
        for part in directory.split("/")[1:]:
            made += "/" + part
            try:
                os.mkdir(made, 0o700)
            except FileExistsError:
                pass
        if unsafe(os.stat(directory)):
            stop(92, directory + " is not owned by you or is writable by others")
        temp = path + "." + str(os.getpid()) + ".tmp"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(temp, flags, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
            os.rename(temp, path)
        except BaseException:
            os.unlink(temp)
            raise
if rest[:1] == ["--stdin-first"]:
    import io
    rest, held = rest[1:], sys.stdin.buffer.read()
    if not held:
        raise SystemExit(0)
    sys.stdin = io.TextIOWrapper(io.BytesIO(held), encoding="utf-8")
if carried is not None and not writes:
    data = zlib.decompress(carried)
    if hashlib.sha256(data).hexdigest() != want:
        stop(91, path + ": the carried file is not the one orch sent")
else:
    try:
        if unsafe(os.stat(directory)):
            stop(92, directory + " is not owned by you or is writable by others")
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        stop(90, path + " is missing")
    except OSError as exc:
        stop(92, path + ": " + exc.strerror + " (a symlink?)")
    with os.fdopen(fd, "rb") as handle:
        if unsafe(os.fstat(handle.fileno())):
            stop(92, path + " is not owned by you or is writable by others")
        data = handle.read()
    if hashlib.sha256(data).hexdigest() != want:
        stop(91, path + " is not the file orch pushed")
origin = "<" + want[:12] + ">/"
def members():
    import io, zipfile
    with zipfile.ZipFile(io.BytesIO(data)) as bundle:
        return {name: bundle.read(name) for name in bundle.namelist()}
cache = path + "." + str(sys.implementation.cache_tag) + ".code"
codes = None
try:
    fd = os.open(cache, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    with os.fdopen(fd, "rb") as handle:
        if not unsafe(os.fstat(handle.fileno())):
            blob = handle.read()
            body = blob[128:]
            if blob[:128] == (want + hashlib.sha256(body).hexdigest()).encode():
                codes = marshal.loads(body)
except (OSError, ValueError, EOFError, TypeError):
    codes = None
compiled = not isinstance(codes, dict)
if compiled:
    codes = {}
    for name, source in members().items():
        codes[name] = compile(source, origin + name, "exec", dont_inherit=True)
if compiled and writes:
    temp = cache + "." + str(os.getpid()) + ".tmp"
    try:
        body = marshal.dumps(codes)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        with os.fdopen(os.open(temp, flags, 0o600), "wb") as handle:
            handle.write((want + hashlib.sha256(body).hexdigest()).encode() + body)
        os.rename(temp, cache)
    except (OSError, ValueError):
        try:
            os.unlink(temp)  # a full disk: never a cache cut short left behind
        except OSError:
            pass
import importlib.abc, importlib.machinery, importlib.util, runpy
class Bundle(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    bundle_path = path
    bundle_sha256 = want
    def __init__(self):
        self.names, self.sources, self.main = {}, None, None
        for name in codes:
            if name.endswith("/__init__.py"):
                self.names[name[:-12].replace("/", ".")] = name
            elif name != "__main__.py":
                self.names[name[:-3].replace("/", ".")] = name
    def find_spec(self, fullname, path=None, target=None):
        name = self.names.get(fullname)
        if name is None:
            return None
        spec = importlib.machinery.ModuleSpec(
            fullname, self, origin=origin + name, is_package=name.endswith("/__init__.py"))
        spec.has_location = True
        return spec
    def create_module(self, spec):
        return None
    def exec_module(self, module):
        exec(self.get_code(module.__name__), module.__dict__)
    def is_package(self, fullname):
        return self.names[fullname].endswith("/__init__.py")
    def get_code(self, fullname):
        if fullname not in self.names:
            raise ImportError("not in the bundle: " + fullname, name=fullname)
        return codes[self.names[fullname]]
    def get_source(self, fullname):
        if fullname == "__main__":
            fullname = self.main
        if self.sources is None:
            self.sources = members()
        return importlib.util.decode_source(self.sources[self.names[fullname]])
    def rerun_argv(self):
        argv = getattr(sys, "orig_argv", None)
        if argv is None:
            with open("/proc/self/cmdline", "rb") as handle:
                argv = [os.fsdecode(a) for a in handle.read().split(b"\\0")[:-1]]
        return [sys.executable, "-c", argv[argv.index("-c") + 1], path, want]
def excepthook(kind, value, tb):
    import traceback
    traceback.print_exception(kind, value, tb)
sys.excepthook = excepthook
named = {"__name__": "__orch_bundle__"}
exec(codes["__main__.py"], named)
importer = Bundle()
importer.main = named["ENTRY"] + (".__main__" if importer.is_package(named["ENTRY"]) else "")
sys.meta_path.insert(0, importer)
sys.path[:] = [p for p in sys.path if p not in (directory, os.path.realpath(directory))]
sys.argv = [path] + rest
runpy.run_module(named["ENTRY"], run_name="__main__", alter_sys=True)
"""


def bootstrap_argv(
    python: str,
    path: str,
    sha256: str,
    args: Sequence[str],
    *,
    stdin_first: bool = False,
    no_write: bool = False,
) -> tuple[str, ...]:
    """The command that runs the bundle at ``path`` on the host, checked against ``sha256``;
    ``no_write``: the bootstrap's ``--no-write`` (nothing written on the host)."""
    first = ("--no-write",) * no_write + ("--stdin-first",) * stdin_first
    return (python, "-c", BOOTSTRAP, path, sha256, *first, *args)


@functools.cache
def _compressed(data: bytes) -> bytes:
    return zlib.compress(data, 6)


def carrying(
    argv: tuple[str, ...], data: bytes, stdin: bytes | None
) -> tuple[tuple[str, ...], bytes]:
    """``argv`` (a ``bootstrap_argv``) and its stdin, now carrying the bundle ``data`` (the
    bootstrap's ``--carried``)."""
    blob = _compressed(data)
    return (*argv[:5], "--carried", str(len(blob)), *argv[5:]), blob + (stdin or b"")


def local_home() -> Path:
    """Where bundles run on this machine (``orch plan --local-sglang``) are kept, as a host keeps
    them in its workdir's ``.orch``: ``$XDG_CACHE_HOME/orch/bundles`` (``~/.cache``)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "orch" / "bundles"


def run_here(
    python: str,
    bundle: Bundle,
    args: Sequence[str],
    *,
    home: Path,
    stdin: bytes | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``bundle`` with a python of this machine, through the bootstrap as on a host: its
    file in ``home`` (a directory only the user may write, created 0700 when missing), carried
    on every run (a local pipe costs nothing; the bootstrap writes it only when it is missing)
    and replaced when another content stands under its name. Raises what ``subprocess.run``
    raises (no such interpreter, the timeout); PreflightError when ``home`` is unsafe."""
    path = home / bundle.file_name
    argv, given = carrying(
        bootstrap_argv(python, str(path), bundle.sha256, args), bundle.data, stdin
    )
    done = subprocess.run(
        argv, input=given, capture_output=True, timeout=timeout, check=False, env=env
    )
    if done.returncode == BOOT_CHANGED:  # not what this orch built under its digest: replace
        temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(temp, flags, 0o600), "wb") as handle:
            handle.write(bundle.data)
        temp.replace(path)  # a rename: never through a link planted under the name
        done = subprocess.run(
            argv, input=given, capture_output=True, timeout=timeout, check=False, env=env
        )
    if done.returncode == BOOT_UNSAFE:
        why = (done.stderr.decode("utf-8", "replace").strip().splitlines() or [""])[-1]
        raise PreflightError(
            f"refusing to run orch's {bundle.name}: " + why.removeprefix("orch-bootstrap: "),
            f"{home} must be a directory only you can write (chmod go-w; chown to yourself)",
        )
    return done
