"""The profiles directory at a git revision, read without touching the checkout.

``orch diff BASE..HEAD`` compares two revisions of the team's profiles repository. Each is read
with git itself (``ls-tree`` for the names, one ``cat-file --batch`` for the blobs) into a fresh
private directory, never by checking anything out: the working tree, its index and its branch
stay as they are, uncommitted edits included. The working tree itself is the head when none is
named (``BASE`` alone), as ``git diff BASE`` does.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from orchestrator.errors import RevisionError

WORKING_TREE = "working tree"
_TIMEOUT_S = 60


@dataclass(frozen=True)
class Range:
    """What ``BASE..HEAD`` names: ``head`` None is the working tree; ``merge_base`` for
    ``BASE...HEAD`` (the change a pull request brings, as GitHub shows it)."""

    base: str
    head: str | None
    merge_base: bool = False


def parse_range(text: str | None) -> Range:
    if not text:
        return Range("HEAD", None)
    if "..." in text:
        base, head = text.split("...", 1)
        return Range(base or "HEAD", head or "HEAD", merge_base=True)
    if ".." in text:
        base, head = text.split("..", 1)
        return Range(base or "HEAD", head or "HEAD")
    return Range(text, None)


@dataclass(frozen=True)
class Repository:
    """The git repository that holds the profiles directory."""

    root: Path  # the work tree's top
    prefix: str  # the profiles directory inside it, posix, "" for the top itself

    def git(self, *argv: str, stdin: bytes | None = None) -> bytes:
        try:
            done = subprocess.run(
                ["git", "-C", str(self.root), *argv],
                input=stdin,
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
                env={**os.environ, "GIT_OPTIONAL_LOCKS": "0"},  # a read must not take the index
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise RevisionError(
                f"git {argv[0]} failed: {exc}", "orch diff needs git on PATH"
            ) from exc
        if done.returncode != 0:
            message = done.stderr.decode(errors="replace").strip().splitlines()
            raise RevisionError(
                f"git {' '.join(argv[:2])}: {message[-1] if message else 'failed'}",
                "name a commit, branch or tag of this repository (git log --oneline)",
            )
        return done.stdout

    def commit(self, revision: str) -> str:
        """The commit ``revision`` names, checked."""
        if revision.startswith("-"):
            raise RevisionError(
                f"{revision!r} is not a revision", "name a commit, branch or tag: BASE..HEAD"
            )
        try:
            return (
                self.git("rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
                .decode()
                .strip()
            )
        except RevisionError as exc:
            raise RevisionError(
                f"no commit {revision!r} in {self.root}",
                "name a commit, branch or tag of this repository; in CI, check out with "
                "fetch-depth: 0 so that the base is there",
            ) from exc

    def merge_base(self, a: str, b: str) -> str:
        return self.git("merge-base", a, b).decode().strip()

    def export(self, commit: str, into: Path) -> Path:
        """The profiles directory at ``commit`` written under ``into`` (as ``into/<prefix>``,
        so that messages name ``profiles/x.yaml`` as in the checkout); its path."""
        target = into / self.prefix if self.prefix else into
        target.mkdir(parents=True, exist_ok=True, mode=0o700)
        spec = self.prefix or "."
        listing = self.git("ls-tree", "-r", "-z", "--full-tree", commit, "--", spec)
        blobs: list[tuple[str, str]] = []  # (object, path inside the profiles directory)
        for entry in listing.split(b"\0"):
            if not entry:
                continue
            meta, _, raw_path = entry.partition(b"\t")
            mode, kind, obj = meta.decode().split()
            if kind != "blob" or mode == "120000":  # a link is not followed out of the tree
                continue
            inside = PurePosixPath(raw_path.decode(errors="surrogateescape"))
            if self.prefix:
                inside = inside.relative_to(self.prefix)
            blobs.append((obj, str(inside)))
        if blobs:
            data = self.git(
                "cat-file", "--batch", stdin="".join(f"{o}\n" for o, _ in blobs).encode()
            )
            at = 0
            for obj, name in blobs:
                header_end = data.index(b"\n", at)
                header = data[at:header_end].decode().split()
                if header[0] != obj or len(header) < 3:
                    raise RevisionError(f"git cat-file: unexpected answer for {name}")
                size = int(header[2])
                body = data[header_end + 1 : header_end + 1 + size]
                at = header_end + 1 + size + 1
                path = target / name
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
                with os.fdopen(fd, "wb") as handle:
                    handle.write(body)
        return target


def repository_of(profiles: Path) -> Repository:
    """The repository whose work tree holds ``profiles``."""
    directory = profiles.resolve()
    if not directory.is_dir():
        raise RevisionError(
            f"{profiles} is not a directory",
            "run orch diff in the profiles repository, or give --profiles DIR",
        )
    try:
        done = subprocess.run(
            ["git", "-C", str(directory), "rev-parse", "--show-toplevel", "--show-prefix"],
            capture_output=True,
            text=True,
            timeout=_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RevisionError(f"git failed: {exc}", "orch diff needs git on PATH") from exc
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        raise RevisionError(
            f"{profiles} is not in a git repository: orch diff compares revisions of it",
            "run orch diff in the team's profiles repository (orch init DIR makes one), or "
            "give --profiles DIR",
        )
    prefix = lines[1].strip().rstrip("/") if len(lines) > 1 else ""
    return Repository(Path(lines[0]), prefix)
