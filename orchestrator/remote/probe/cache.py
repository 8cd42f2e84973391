"""The plan cache: an answer the probe gave before, handed back when nothing that decides it has
changed, without importing SGLang (5-14 s of a plan are SGLang's import).

The request names a directory (``"cache": {"dir": D, "read": true}``; orch's is the workdir's
``.orch/plan-cache/<deployment>`` on a host, ``$XDG_CACHE_HOME/orch/plan-cache/<profile>`` for a
local plan). The key is an HMAC-SHA256, under a random salt kept in that directory, of everything
that decides the answer (``key_facts``):

- the request itself (the SGLang arguments, the server's environment, the simulated GPU, a
  supplied config.json ...), less the cache's own settings; and the variables of the probe's own
  environment (the host's login shell's) that reach SGLang, torch, transformers, CUDA or the
  python (``ENV_PREFIXES``: not SSH's, which change with every connection);
- the python (its path and version) and the probe's own code (a new orch answers differently);
- the installed SGLang, read WITHOUT importing it: where ``sglang`` is and its files' sizes and
  times, the versions of the distributions its resolution reads through (sglang, transformers,
  torch), and the entry points of SGLang's plugin group with their distributions' versions;
- the model's files on this host (each model, draft and tokenizer path on the command line): the
  small ones (config.json, the safetensors index, the tokenizer's settings) by content, the
  others (the weights: their headers' sizes follow) by size and modification time;
- the GPUs SGLang's resolution asks about (NVML: names, UUIDs, totals, capabilities, driver), or
  the simulated one (in the request).

A GPU's FREE memory is not in the key: SGLang's resolution reads the totals only, and free memory
moves with whatever else runs. It decides orch's budget, which orch computes from the answer's
``memory.gpus``; so a hit answers with the GPUs read now (``fresh_gpus``), and the budget is
today's while SGLang's part is the cached one. The salt makes the key useless for guessing the
environment's values (tokens) from a file name. A plan whose model is a Hub id (its config is the
Hub's, which may change) is not cached.

The directory must be the user's and writable by no one else (else it is ignored, with a note),
each entry a 0600 file created without following links; the answer it holds may hold resolved
values. At most ``MAX_ENTRIES`` entries and ``MAX_BYTES`` bytes, the least recently used pruned.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import importlib.metadata
import importlib.util
import json
import os
import stat
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from orchestrator.remote.probe.memory import visible_gpus

FORMAT = 1
MAX_ENTRIES = 64
MAX_BYTES = 64 << 20
SMALL_FILE = 1 << 20  # read whole into the key; larger files by size and time
SALT_NAME = "salt"
ENTRY_SUFFIX = ".json"
# the flags whose value is a model directory SGLang's resolution or orch's budget reads
MODEL_FLAGS = (
    "--model-path",
    "--model",
    "--tokenizer-path",
    "--speculative-draft-model-path",
    "--speculative-draft-model",
)
# the distributions SGLang's resolution reads through (transformers parses config.json)
DISTRIBUTIONS = ("sglang", "transformers", "torch")
PLUGIN_GROUP = "sglang.srt.plugins"
# the probe's own environment's variables that may change an answer (the request's all do)
ENV_PREFIXES = (
    "SGLANG",
    "SGL_",
    "ORCH_STANDIN",
    "PYTHON",
    "CUDA",
    "NVIDIA",
    "HF_",
    "HUGGINGFACE",
    "TRANSFORMERS",
    "TORCH",
    "LD_LIBRARY_PATH",
    "PATH",
)
NOT_KEYED = ("cache", "remove_request")  # the cache's own settings, how the request travelled


class Uncacheable(Exception):
    """What makes a plan's answer not worth keeping (a Hub id's config may change)."""


@dataclass
class Outcome:
    """What the answer's ``cache`` section says."""

    hit: bool = False
    key: str | None = None
    age_s: float | None = None
    stored: bool = False
    note: str | None = None
    directory: str | None = None
    started: float = field(default_factory=time.monotonic)
    lookup_s: float | None = None  # the key and the look-up: what a hit costs

    def section(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hit": self.hit, "stored": self.stored}
        if self.key is not None:
            out["key"] = self.key[:16]
        if self.age_s is not None:
            out["age_s"] = round(self.age_s, 1)
        if self.note is not None:
            out["note"] = self.note
        if self.directory is not None:
            out["dir"] = self.directory
        if self.lookup_s is not None:
            out["lookup_s"] = round(self.lookup_s, 3)
        return out

    def looked_up(self) -> None:
        self.lookup_s = time.monotonic() - self.started


def through_cache(
    request: Mapping[str, Any],
    compute: Callable[[], dict[str, Any]],
    *,
    probe_digest: Callable[[], str],
    read_gpus: Callable[[], Any],
) -> dict[str, Any]:
    """The answer to ``request``: the cached one when its key matches (no SGLang import), else
    ``compute()``, stored for next time. Without a ``cache`` in the request, just ``compute()``.
    ``read_gpus``: the host's NVML reading (``host.gpus.read``'s), asked only when the request
    simulates no GPU."""
    spec = request.get("cache")
    if not isinstance(spec, Mapping) or not spec.get("dir"):
        return compute()
    outcome = Outcome(directory=str(spec["dir"]))
    cache: PlanCache | None = None
    key: str | None = None
    reading: Any = None
    try:
        cache = PlanCache.open(str(spec["dir"]))
        if not request.get("simulate_gpu"):
            reading = read_gpus()
        key = cache.key(key_facts(request, probe_digest(), reading))
        outcome.key = key
    except Exception as exc:  # noqa: BLE001 - the cache never costs the plan
        outcome.note = f"not cached: {exc}"
        cache = None
    if cache is not None and key is not None and spec.get("read", True):
        try:
            found = cache.load(key)
        except Exception:  # noqa: BLE001 - an entry that cannot be read is no entry
            found = None
        outcome.looked_up()
        if found is not None:
            answer, stored_at = found
            outcome.hit = True
            outcome.age_s = max(0.0, time.time() - stored_at)
            if reading is not None:
                fresh_gpus(answer, reading)
            answer["cache"] = outcome.section()
            return answer
    elif cache is not None and not spec.get("read", True):
        outcome.note = "--no-cache: planned afresh"
    answer = compute()
    if cache is not None and key is not None and _worth_keeping(answer):
        try:
            cache.store(key, answer)
            outcome.stored = True
        except Exception as exc:  # noqa: BLE001 - the answer stands without being kept
            outcome.note = f"not stored: {exc}"
    answer["cache"] = outcome.section()
    return answer


def _worth_keeping(answer: Mapping[str, Any]) -> bool:
    """SGLang's answer, accepted or refused; not a probe that could not import SGLang."""
    error = answer.get("error")
    return not (isinstance(error, Mapping) and error.get("stage") == "import")


# -- the key


def key_facts(request: Mapping[str, Any], probe_digest: str, gpus: Any) -> dict[str, Any]:
    """Everything that decides the probe's answer to ``request`` on this host (see the module's
    docstring); equal facts, equal answers. ``gpus``: NVML's reading (None: simulated)."""
    args = [str(a) for a in request.get("args") or ()]
    supplied = request.get("model_config") or {}
    supplied_path = str(supplied.get("path")) if isinstance(supplied, Mapping) else None
    return {
        "format": FORMAT,
        "request": {k: v for k, v in sorted(request.items()) if k not in NOT_KEYED},
        "environ": {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)},
        "python": [os.path.realpath(sys.executable), sys.version],
        "probe": probe_digest,
        "sglang": installed_sglang(),
        "models": {path: model_files(path, supplied_path) for path in model_paths(args)},
        "gpus": gpu_identity(gpus),
    }


def model_paths(args: list[str]) -> list[str]:
    """The values of the model flags (``--model-path X`` or ``--model-path=X``), in order."""
    found: list[str] = []
    for index, token in enumerate(args):
        name, equals, value = token.partition("=")
        if name not in MODEL_FLAGS:
            continue
        if equals:
            found.append(value)
        elif index + 1 < len(args):
            found.append(args[index + 1])
    return found


def model_files(path: str, supplied_path: str | None) -> dict[str, Any]:
    """A model directory's top-level files: small ones by content, others by size and time.
    A path that is not here: its config.json was supplied in the request (keyed there), or it
    is a Hub id (Uncacheable), or it is missing (the answer says so; keyed as missing)."""
    if not os.path.isdir(path):
        hub_id = not path.startswith(("/", ".", "~")) and path.count("/") <= 1
        if hub_id and path != supplied_path and not os.path.exists(path):
            raise Uncacheable(f"the model {path} is a Hub id (its config is the Hub's)")
        return {"missing": True}
    out: dict[str, Any] = {}
    with os.scandir(path) as entries:
        for entry in sorted(entries, key=lambda e: e.name):
            try:
                info = entry.stat()  # follows links: a snapshot's files are links to blobs
            except OSError:
                out[entry.name] = "unreadable"
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            if info.st_size <= SMALL_FILE:
                with open(entry.path, "rb") as handle:
                    out[entry.name] = hashlib.sha256(handle.read()).hexdigest()
            else:
                out[entry.name] = [info.st_size, info.st_mtime_ns]
    return out


def installed_sglang() -> dict[str, Any]:
    """The SGLang this python would import, found without importing it: where its package is,
    its top files' sizes and times, the versions of the distributions resolution reads through,
    and the plugins SGLang's entry points would load (entry points and their versions)."""
    spec = importlib.util.find_spec("sglang")  # a top-level name: nothing is imported
    origin = getattr(spec, "origin", None)
    files: dict[str, Any] = {}
    if isinstance(origin, str):
        package = os.path.dirname(origin)
        for name in ("__init__.py", "version.py"):
            with contextlib.suppress(OSError):
                info = os.stat(os.path.join(package, name))
                files[name] = [info.st_size, info.st_mtime_ns]
    versions: dict[str, str | None] = {}
    for name in DISTRIBUTIONS:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = None
    return {"origin": origin, "files": files, "versions": versions, "plugins": _plugins()}


def _plugins() -> list[list[str | None]]:
    everything: Any = importlib.metadata.entry_points()
    if hasattr(everything, "select"):  # Python 3.10+
        found = list(everything.select(group=PLUGIN_GROUP))
    else:  # 3.9: a dict of groups
        found = list(everything.get(PLUGIN_GROUP, ()))
    out: list[list[str | None]] = []
    for entry in found:
        dist = getattr(entry, "dist", None)
        out.append(
            [
                entry.name,
                entry.value,
                getattr(dist, "name", None) if dist is not None else None,
                getattr(dist, "version", None) if dist is not None else None,
            ]
        )
    return sorted(out, key=repr)


def gpu_identity(reading: Any) -> Any:
    """What SGLang's resolution reads of the GPUs (every one: nvidia-smi's totals are over all
    of them), not their free memory."""
    if reading is None:
        return None
    return {
        "gpus": [
            [gpu.index, gpu.name, gpu.uuid, gpu.total_bytes, gpu.compute_capability]
            for gpu in reading.gpus
        ],
        "driver": reading.driver,
        "error": reading.error,
    }


def fresh_gpus(answer: dict[str, Any], reading: Any) -> None:
    """A cached answer's ``memory.gpus`` replaced by the GPUs read now (their free memory)."""
    memory = answer.get("memory")
    if not isinstance(memory, dict) or "gpus" not in memory:
        return
    shown = visible_gpus(reading, os.environ.get("CUDA_VISIBLE_DEVICES"))
    memory["gpus"] = shown["gpus"]
    memory["gpu_error"] = shown["gpu_error"]


# -- the directory


def _safe_directory(path: str) -> None:
    """Refuse (ValueError) a directory that is a link, not the user's, or writable by others."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise ValueError(f"{path} is not a directory (a symlink?)")
    if info.st_uid != os.getuid():
        raise ValueError(f"{path} belongs to uid {info.st_uid}, not to this user")
    if info.st_mode & 0o022:
        raise ValueError(
            f"{path} is writable by group or others (mode {info.st_mode & 0o7777:04o}; chmod go-w)"
        )


@dataclass(frozen=True)
class PlanCache:
    directory: str
    salt: bytes

    @classmethod
    def open(cls, directory: str) -> PlanCache:
        """The cache in ``directory`` (and its parent, orch's ``plan-cache``), made 0700 when
        missing; ValueError when either is not the user's alone."""
        directory = os.path.abspath(directory)
        parent = os.path.dirname(directory)
        for path in (parent, directory):
            with contextlib.suppress(FileExistsError):
                os.mkdir(path, 0o700)
            _safe_directory(path)
        return cls(directory, _salt(directory))

    def key(self, facts: Mapping[str, Any]) -> str:
        return cache_key(facts, self.salt)

    def path(self, key: str) -> str:
        return os.path.join(self.directory, key + ENTRY_SUFFIX)

    def load(self, key: str) -> tuple[dict[str, Any], float] | None:
        """The answer kept under ``key`` and when it was stored; None when there is none or it
        is not a private file of the user's (then it is not trusted)."""
        path = self.path(key)
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if info.st_uid != os.getuid() or info.st_mode & 0o077:
                return None
            try:
                entry = json.loads(handle.read())
            except ValueError:
                return None
        if not isinstance(entry, dict) or entry.get("format") != FORMAT:
            return None
        answer, stored_at = entry.get("answer"), entry.get("stored_at")
        if not isinstance(answer, dict) or not isinstance(stored_at, (int, float)):
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # recently used: pruned last
        return answer, float(stored_at)

    def store(self, key: str, answer: Mapping[str, Any]) -> None:
        entry = {"format": FORMAT, "stored_at": time.time(), "answer": answer}
        _write_private(self.path(key), json.dumps(entry, sort_keys=True).encode())
        self.prune()

    def prune(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        """Remove the least recently used entries beyond ``max_entries`` or ``max_bytes``."""
        entries: list[tuple[int, int, str]] = []
        with os.scandir(self.directory) as found:
            for entry in found:
                if entry.name.endswith(ENTRY_SUFFIX) and entry.is_file(follow_symlinks=False):
                    info = entry.stat(follow_symlinks=False)
                    entries.append((info.st_mtime_ns, info.st_size, entry.path))
        entries.sort(reverse=True)  # newest first
        kept_bytes = 0
        for index, (_, size, path) in enumerate(entries):
            kept_bytes += size
            if index >= max_entries or (index > 0 and kept_bytes > max_bytes):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def cache_key(facts: Mapping[str, Any], salt: bytes) -> str:
    """HMAC-SHA256 of the facts' canonical JSON under the cache's salt."""
    canonical = json.dumps(facts, sort_keys=True, separators=(",", ":"), default=repr)
    return hmac.new(salt, canonical.encode(), hashlib.sha256).hexdigest()


def _salt(directory: str) -> bytes:
    path = os.path.join(directory, SALT_NAME)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        salt = os.urandom(32)
        try:
            _write_private(path, salt.hex().encode(), exclusive=True)
        except FileExistsError:  # another probe made it first: read theirs
            return _salt(directory)
        return salt
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise ValueError(f"{path} is not a private file of this user's")
        return bytes.fromhex(handle.read().decode("ascii").strip())


def _write_private(path: str, data: bytes, *, exclusive: bool = False) -> None:
    """``data`` in a 0600 file at ``path``: written beside it and renamed into place (or, with
    ``exclusive``, created only where nothing stands), never through a link."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    temp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(temp, flags, 0o600)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        if exclusive:
            os.link(temp, path)  # FileExistsError where another stands
            os.unlink(temp)
        else:
            os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
