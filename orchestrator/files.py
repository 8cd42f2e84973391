"""Writing a file a user named (``export -o``, a lock, ``upgrade --write``, ``init``, a pinned
host key) without being turned against another file.

The rules, as ``install(1)`` and OpenSSH's StrictModes would have them:

- the directory is opened once and every step is relative to it; one that every user may write
  without the sticky bit is refused (another user could swap the file between two steps);
- what is there already must be a regular file of the user's: a device, a FIFO, a socket or a
  directory is refused (as root, ``-o /dev/full`` replaced the device node with a file), and so
  is a file another user owns (a root orch never takes over a user's file);
- a symlink is followed only to a regular file the user owns, and the file it names is written
  (the link stays); one to anything else (``/proc/self/fd/1``, ``/dev/full``, another user's
  file, nothing) is refused, naming where it points;
- the text goes to a temporary file of a name no one can predict, created with
  ``O_EXCL|O_NOFOLLOW`` and its mode (a planted link at a fixed temporary name overwrote a
  root-owned file), then renamed over the target in one step: a reader sees the old file or
  the new one, never half of it; an existing file keeps its mode.

Every refusal is a :class:`~orchestrator.errors.WriteRefused` (exit 18) naming the path, what
it is, and what to do: nothing was written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from orchestrator.errors import WriteRefused

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
TEMPORARY_SUFFIX = ".orch-tmp"


def replace_file(path: Path, text: str, *, mode: int = 0o644, hint: str) -> Path:
    """Write ``text`` (UTF-8) as ``path``, replacing a regular file of the user's in one step;
    a new file gets ``mode`` (less the umask), a replaced one keeps its own. Returns the file
    written: ``path``, or the file a symlink at ``path`` names. ``hint``: what the user can do
    instead, shown with a refusal."""
    data = text.encode("utf-8")
    target = _through_link(path, hint)
    with _directory(target, hint) as directory:
        existing = _existing(directory, target, hint)
        if existing is not None and stat.S_ISLNK(existing.st_mode):  # a link since the look
            raise WriteRefused(f"{path}: became a symlink as orch wrote it; nothing written", hint)
        keep = stat.S_IMODE(existing.st_mode) if existing is not None else None
        name, descriptor = _write_temporary(
            directory, target, data, mode if keep is None else 0o600, hint
        )
        try:
            try:
                if keep is not None:
                    os.fchmod(descriptor, keep)
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
            os.replace(name, target.name, src_dir_fd=directory, dst_dir_fd=directory)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=directory)
            if isinstance(exc, OSError):
                raise _cannot(path, exc, hint) from exc
            raise
        with contextlib.suppress(OSError):  # the rename itself is durable once the directory is
            os.fsync(directory)
    return target


def create_file(path: Path, text: str, *, mode: int, hint: str) -> None:
    """Write ``text`` as a new file ``path`` with ``mode``; never replaces anything and never
    follows a link (``FileExistsError`` when the name is taken, for the caller to word)."""
    with _directory(path, hint) as directory:
        try:
            descriptor = os.open(
                path.name,
                os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC,
                mode,
                dir_fd=directory,
            )
        except FileExistsError:
            raise
        except OSError as exc:
            raise _cannot(path, exc, hint) from exc
        try:
            _write_all(descriptor, text.encode("utf-8"))
        except OSError as exc:
            os.close(descriptor)
            with contextlib.suppress(OSError):
                os.unlink(path.name, dir_fd=directory)
            raise _cannot(path, exc, hint) from exc
        os.close(descriptor)


@contextlib.contextmanager
def open_append(path: Path, *, mode: int = 0o644, hint: str) -> Iterator[BinaryIO]:
    """``path`` opened to append to (created with ``mode`` when missing): a regular file of
    the user's, or a symlink to one, else refused."""
    target = _through_link(path, hint)
    with _directory(target, hint) as directory:
        _existing(directory, target, hint)  # a device or a FIFO is never even opened
        # read-write: a caller may read what is there (the last byte: does it end a line?)
        flags = os.O_RDWR | os.O_CREAT | os.O_APPEND | _NOFOLLOW | _CLOEXEC
        try:
            descriptor = os.open(target.name, flags, mode, dir_fd=directory)
        except OSError as exc:
            raise _cannot(path, exc, hint) from exc
        try:
            problem = _problem(os.fstat(descriptor))  # what was opened, whatever was checked
            if problem is not None:
                raise WriteRefused(f"{path}: {problem}; nothing written", hint)
            handle = os.fdopen(descriptor, "ab")
        except BaseException:
            os.close(descriptor)
            raise
        with handle:
            try:
                yield handle
            except OSError as exc:
                raise _cannot(path, exc, hint) from exc


def read_regular(path: Path, *, limit: int = 16 << 20) -> bytes | None:
    """The bytes of ``path`` when it is a regular file (a symlink to one is followed), else None:
    missing, unreadable, or a FIFO, a device, a directory, which are never read (a planted FIFO
    would block the reader for ever, /dev/zero fill it). At most ``limit`` bytes are read."""
    try:
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | _CLOEXEC)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(descriptor).st_mode):
            return None
        with os.fdopen(os.dup(descriptor), "rb") as handle:
            return handle.read(limit)
    except OSError:
        return None
    finally:
        os.close(descriptor)


def is_temporary(name: str) -> bool:
    """A file name :func:`replace_file` uses while it writes (listings skip them)."""
    return name.startswith(".") and name.endswith(TEMPORARY_SUFFIX)


# -- the steps ------------------------------------------------------------------------------------


def _through_link(path: Path, hint: str) -> Path:
    """``path``, or the file a symlink at ``path`` names: only a link of the user's own, to a
    regular file of the user's, by a path with no further link on it (a link another user
    planted, or a chain through someone else's directory, is never followed)."""
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return path
    except OSError as exc:
        raise _cannot(path, exc, hint) from exc
    if not stat.S_ISLNK(found.st_mode):
        return path
    # where the link points, from the directory it is in (the user's own path, resolved)
    named = Path(os.path.normpath(Path(os.path.realpath(path.parent)) / path.readlink()))
    if found.st_uid != os.geteuid():
        raise WriteRefused(
            f"{path} is a symlink (to {named}) owned by uid {found.st_uid}, not by you: not "
            "followed; nothing written",
            hint,
        )
    final = Path(os.path.realpath(path))  # where every link on the way leads
    leads = f"{path} is a symlink to {named}" + ("" if final == named else f", leading to {final}")
    try:
        target = final.lstat()
    except FileNotFoundError:
        raise WriteRefused(f"{leads}, which does not exist; nothing written", hint) from None
    except OSError as exc:
        raise _cannot(path, exc, hint) from exc
    problem = _problem(target)
    if problem is not None:
        raise WriteRefused(f"{leads}, which {problem.removeprefix('it ')}; nothing written", hint)
    if final != named:
        raise WriteRefused(
            f"{path} is a symlink to {named}, itself reached through another symlink: not "
            "followed; nothing written",
            f"name the file itself ({final}); {hint}",
        )
    return named


@contextlib.contextmanager
def _directory(path: Path, hint: str) -> Iterator[int]:
    """The directory ``path`` is written in, opened; refused when every user may write it
    without the sticky bit."""
    parent = path.parent
    try:
        descriptor = os.open(parent, os.O_RDONLY | _DIRECTORY | _CLOEXEC)
    except FileNotFoundError:
        raise WriteRefused(f"cannot write {path}: no directory {parent}", hint) from None
    except OSError as exc:
        raise _cannot(path, exc, hint) from exc
    try:
        found = os.fstat(descriptor)
        if found.st_mode & stat.S_IWOTH and not found.st_mode & stat.S_ISVTX:
            raise WriteRefused(
                f"cannot write {path}: its directory {parent} may be written by every user "
                f"(mode {stat.S_IMODE(found.st_mode):o}, no sticky bit), who could swap the file "
                "as orch writes it; nothing written",
                f"chmod o-w {parent} (or chmod +t), or write elsewhere",
            )
        yield descriptor
    finally:
        os.close(descriptor)


def _existing(directory: int, path: Path, hint: str) -> os.stat_result | None:
    """What ``path`` is now (not followed), None when nothing is there; refused unless a
    regular file of the user's (or a link, which the caller refuses in its own words)."""
    try:
        found = os.stat(path.name, dir_fd=directory, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _cannot(path, exc, hint) from exc
    if stat.S_ISLNK(found.st_mode):
        return found
    problem = _problem(found)
    if problem is not None:
        raise WriteRefused(f"{path}: {problem}; nothing written", hint)
    return found


def _problem(found: os.stat_result) -> str | None:
    """Why a file orch would write over is not one it may replace, None when it may."""
    kind = _kind(found.st_mode)
    if kind != "a regular file":
        return f"it is {kind}, not a regular file"
    if found.st_uid != os.geteuid():
        return f"it is owned by uid {found.st_uid}, not by you (uid {os.geteuid()})"
    return None


def _kind(mode: int) -> str:
    kinds = (
        (stat.S_ISREG, "a regular file"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
    )
    return next((name for test, name in kinds if test(mode)), "not a regular file")


def _write_temporary(
    directory: int, target: Path, data: bytes, mode: int, hint: str
) -> tuple[str, int]:
    """A new file beside ``target`` holding ``data``, of a name no one can predict, created
    with O_EXCL|O_NOFOLLOW (never a planted file or link): its name and open descriptor."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
    for _ in range(16):
        name = f".{target.name}.{secrets.token_hex(6)}{TEMPORARY_SUFFIX}"
        try:
            descriptor = os.open(name, flags, mode, dir_fd=directory)
        except FileExistsError:
            continue
        except OSError as exc:
            raise _cannot(target, exc, hint) from exc
        try:
            _write_all(descriptor, data)
        except OSError as exc:
            os.close(descriptor)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=directory)
            raise _cannot(target, exc, hint) from exc
        return name, descriptor
    raise WriteRefused(f"cannot write {target}: no free temporary name beside it", hint)


def _write_all(descriptor: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view) :]


def _cannot(path: Path, exc: OSError, hint: str) -> WriteRefused:
    return WriteRefused(f"cannot write {path}: {exc.strerror or exc}; nothing written", hint)
