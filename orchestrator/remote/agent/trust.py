"""StrictModes: the directories and files the agent trusts. Like OpenSSH's StrictModes: the
agent keeps the run spec (secrets included), state it acts on (pids it signals) and logs in
these directories, and runs code from the workdir. A directory another user owns, or that group
or others may write, is refused: anyone who can write there can plant a symlink that makes the
agent write into a victim file, or a state that names a pid."""

from __future__ import annotations

import os

from .files import Paths


class UnsafePath(Exception):
    def __init__(self, message: str, hint: str) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint


def check_directory(path: str, what: str) -> bool:
    """Refuse (UnsafePath) a ``path`` that is a symlink, not a directory, not the user's, or
    writable by group or others; False when it does not exist."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a directory"
        raise UnsafePath(
            f"the {what} {path} is {kind}",
            "remove it; orch creates the directory itself, owned by you and private (0700)",
        )
    if info.st_uid != os.getuid():
        raise UnsafePath(
            f"the {what} {path} belongs to uid {info.st_uid}, not to this user (uid {os.getuid()})",
            "use a workdir of your own (hosts.<host>.workdir): orch keeps the server's "
            "environment and its state there",
        )
    if info.st_mode & 0o022:
        raise UnsafePath(
            f"the {what} {path} is writable by group or others (mode {info.st_mode & 0o7777:04o})",
            f"chmod go-w {path} (orch makes its own directories 0700): anyone who can write "
            "there can plant files the supervisor would write into or act on",
        )
    return True


def check_workdir(path: str) -> bool:
    """check_directory's workdir, or a symlink to one (``/data`` -> a mount: common): accepted
    when nobody else could have planted or can change it: the link is the user's or root's, in
    a directory only they can write; every directory on the way to its target is the user's or
    root's and not writable by group or others (a sticky one, like /tmp, excepted: others cannot
    replace what is in it); the target is the user's own and private. False when it does not
    exist."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISLNK(info.st_mode):
        return check_directory(path, "workdir")
    uid = os.getuid()
    target = os.path.realpath(path)
    if info.st_uid not in (uid, 0):
        raise UnsafePath(
            f"the workdir {path} is a symlink that belongs to uid {info.st_uid}, not to this "
            f"user (uid {uid}) or root",
            f"remove it, or set the workdir to a directory of your own (its target {target}, "
            "if it is yours)",
        )
    holder = os.path.dirname(os.path.abspath(path))
    held = os.stat(holder)
    if held.st_uid not in (uid, 0) or held.st_mode & 0o022:
        raise UnsafePath(
            f"the workdir {path} is a symlink in {holder}, which "
            + (
                f"belongs to uid {held.st_uid}"
                if held.st_uid not in (uid, 0)
                else f"is writable by group or others (mode {held.st_mode & 0o7777:04o})"
            ),
            f"anyone who can write in {holder} can replace the link: set the workdir to its "
            f"target ({target}), or chmod go-w {holder}",
        )
    ancestor = os.path.dirname(target)
    ancestors = []
    while True:
        ancestors.append(ancestor)
        if ancestor == os.path.dirname(ancestor):
            break
        ancestor = os.path.dirname(ancestor)
    for directory in reversed(ancestors):  # from the root down
        seen = os.lstat(directory)
        sticky = seen.st_mode & stat.S_ISVTX
        if seen.st_uid not in (uid, 0) or (seen.st_mode & 0o022 and not sticky):
            why = (
                f"belongs to uid {seen.st_uid}"
                if seen.st_uid not in (uid, 0)
                else f"is writable by group or others (mode {seen.st_mode & 0o7777:04o})"
            )
            raise UnsafePath(
                f"the workdir {path} leads to {target} through {directory}, which {why}",
                f"whoever can write in {directory} can replace what the link leads to: use a "
                "workdir whose every directory only you (or root) can write",
            )
    return check_directory(target, "workdir")


def check_file(path: str, what: str) -> None:
    """Refuse a file the agent writes or acts on that is a symlink or someone else's."""
    import stat

    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISREG(info.st_mode):
        kind = "a symlink" if stat.S_ISLNK(info.st_mode) else "not a regular file"
        raise UnsafePath(
            f"{what} {path} is {kind}: refusing to follow it",
            f"remove it (rm {path}); nobody but you should write in {os.path.dirname(path)}",
        )
    if info.st_uid != os.getuid():
        raise UnsafePath(
            f"{what} {path} belongs to uid {info.st_uid}, not to this user",
            f"remove it; nobody but you should be able to write in {os.path.dirname(path)}",
        )


def secure_deployment(paths: Paths, *, create: bool = False) -> bool:
    """StrictModes for a deployment: its workdir, the workdir's ``.orch``, the deployment and its
    runs directory, and the files the supervisor writes there. With ``create``, make what is
    missing (0700) and tighten the deployment's own directories to 0700. False when the
    deployment directory does not exist (and ``create`` is not set)."""
    workdir = os.path.dirname(paths.root)
    check_workdir(workdir)
    check_directory(os.path.join(workdir, ".orch"), "agent directory")
    if create:
        os.makedirs(paths.root, mode=0o700, exist_ok=True)
    if not check_directory(paths.root, "deployment directory"):
        return False
    for name, path in paths.files():
        check_file(path, name)
    if create:
        os.makedirs(paths.runs, mode=0o700, exist_ok=True)
    check_directory(paths.runs, "runs directory")
    if create:
        for directory in (paths.root, paths.runs):
            os.chmod(directory, 0o700)
    return True
