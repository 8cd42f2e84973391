"""OpenSSH known_hosts files: read them, decide whether a host key is trusted, pin a new one.

Stdlib only (no paramiko), so that it can be tested and used without paying for the SSH import.
Keys are compared as their wire-format blobs, the base64 field of a known_hosts line, which is what
OpenSSH compares too. What is understood, as in ``sshd(8)``'s SSH_KNOWN_HOSTS FILE FORMAT:

- host patterns, comma-separated, with ``*`` and ``?`` wildcards and ``!`` negation;
- ``[host]:port`` names for servers not on port 22;
- hashed names (``|1|salt|hash``, HashKnownHosts yes);
- ``@revoked`` lines (such a key is refused for the names it lists).

``@cert-authority`` lines are skipped: orch does not verify host certificates, so a host known only
through a CA reads as unknown and is pinned by its own key instead. Lines that cannot be parsed are
skipped, as OpenSSH does.
"""

from __future__ import annotations

import base64
import binascii
import enum
import hashlib
import hmac
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import HostKeyError
from orchestrator.files import open_append, read_regular

SSH_PORT = 22


def known_hosts_name(hostname: str, port: int) -> str:
    """The name OpenSSH files a host key under: ``host`` on port 22, ``[host]:port`` otherwise."""
    return hostname if port == SSH_PORT else f"[{hostname}]:{port}"


def fingerprint(key_blob: bytes) -> str:
    """OpenSSH's SHA256 fingerprint: ``SHA256:`` + unpadded base64 of the blob's SHA-256."""
    digest = base64.b64encode(hashlib.sha256(key_blob).digest()).decode("ascii")
    return "SHA256:" + digest.rstrip("=")


@dataclass(frozen=True)
class KnownHostEntry:
    """One usable line of a known_hosts file."""

    source: str  # the file, for messages
    lineno: int
    patterns: tuple[str, ...]  # lower-cased names/globs, or a hashed ``|1|salt|hash``
    key_type: str
    key_blob: bytes
    revoked: bool = False

    @property
    def where(self) -> str:
        return f"{self.source}:{self.lineno}"

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key_blob)

    def matches(self, name: str) -> bool:
        """OpenSSH's match_hostname: a negated pattern that matches wins over everything."""
        name = name.lower()
        matched = False
        for pattern in self.patterns:
            negated = pattern.startswith("!")
            if negated:
                pattern = pattern[1:]
            if _pattern_matches(pattern, name):
                if negated:
                    return False
                matched = True
        return matched


def _pattern_matches(pattern: str, name: str) -> bool:
    if pattern.startswith("|1|"):
        return _hashed_matches(pattern, name)
    if "*" not in pattern and "?" not in pattern:
        return pattern == name
    # Only * and ? are special; brackets in ``[host]:port`` are literal (so no fnmatch).
    regex = "".join(
        ".*" if char == "*" else "." if char == "?" else re.escape(char) for char in pattern
    )
    return re.fullmatch(regex, name, flags=re.DOTALL) is not None


def _hashed_matches(pattern: str, name: str) -> bool:
    parts = pattern.split("|")  # ["", "1", salt, hash]
    if len(parts) != 4:
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        expected = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    actual = hmac.new(salt, name.encode("utf-8"), hashlib.sha1).digest()
    return hmac.compare_digest(actual, expected)


def parse_line(line: str, source: str, lineno: int) -> KnownHostEntry | None:
    """One known_hosts line, or None for a blank, comment, CA or unparsable line."""
    fields = line.split()
    if not fields or fields[0].startswith("#"):
        return None
    revoked = False
    if fields[0].startswith("@"):
        if fields[0] != "@revoked":  # @cert-authority: not supported (see module docstring)
            return None
        revoked = True
        fields = fields[1:]
    if len(fields) < 3:
        return None
    names, key_type, key_b64 = fields[0], fields[1], fields[2]
    try:
        blob = base64.b64decode(key_b64, validate=True)
    except (binascii.Error, ValueError):
        return None
    if _blob_key_type(blob) != key_type:
        return None  # a line whose type field and key disagree is corrupt; OpenSSH skips it too
    patterns = tuple(  # host names compare case-insensitively; hashes are base64, kept as is
        name if name.startswith("|1|") else name.lower() for name in names.split(",") if name
    )
    return KnownHostEntry(source, lineno, patterns, key_type, blob, revoked)


def _blob_key_type(blob: bytes) -> str | None:
    """The key type named inside an SSH public-key blob (a uint32-length-prefixed string)."""
    if len(blob) < 4:
        return None
    length = int.from_bytes(blob[:4], "big")
    if length > len(blob) - 4:
        return None
    try:
        return blob[4 : 4 + length].decode("ascii")
    except UnicodeDecodeError:
        return None


class KeyMatch(enum.Enum):
    TRUSTED = "trusted"
    UNKNOWN = "unknown"  # no line for this name
    CHANGED = "changed"  # lines for this name, none with this key
    REVOKED = "revoked"


@dataclass(frozen=True)
class Check:
    match: KeyMatch
    name: str
    key_type: str
    fingerprint: str
    known: tuple[KnownHostEntry, ...]  # the lines for this name (the revoking one for REVOKED)


@dataclass(frozen=True)
class KnownHosts:
    entries: tuple[KnownHostEntry, ...]
    files: tuple[str, ...]  # every file that was looked at, present or not, for messages

    @classmethod
    def load(cls, files: Iterable[Path]) -> KnownHosts:
        """Read every file that exists; missing or unreadable files, and anything but a regular
        file, count as empty."""
        entries: list[KnownHostEntry] = []
        looked_at: list[str] = []
        for path in files:
            path = path.expanduser()
            if str(path) in looked_at:
                continue
            looked_at.append(str(path))
            data = read_regular(path)  # a FIFO or a device planted there is never read
            if data is None:
                continue
            text = data.decode("utf-8", "replace")
            for lineno, line in enumerate(text.splitlines(), 1):
                entry = parse_line(line, str(path), lineno)
                if entry is not None:
                    entries.append(entry)
        return cls(tuple(entries), tuple(looked_at))

    def for_name(self, name: str) -> tuple[KnownHostEntry, ...]:
        return tuple(entry for entry in self.entries if entry.matches(name))

    def key_types_for(self, name: str) -> tuple[str, ...]:
        """Key types on file for ``name`` (not revoked), in file order: to be asked for first."""
        seen: list[str] = []
        for entry in self.for_name(name):
            if not entry.revoked and entry.key_type not in seen:
                seen.append(entry.key_type)
        return tuple(seen)

    def check(self, name: str, key_type: str, key_blob: bytes) -> Check:
        """As OpenSSH: a revoked line for this key refuses it; any line with this exact key trusts
        it; lines for the name with other keys mean it changed; no line means unknown."""
        lines = self.for_name(name)
        fp = fingerprint(key_blob)
        for entry in lines:
            if entry.revoked and entry.key_blob == key_blob:
                return Check(KeyMatch.REVOKED, name, key_type, fp, (entry,))
        known = tuple(entry for entry in lines if not entry.revoked)
        if any(entry.key_blob == key_blob for entry in known):
            return Check(KeyMatch.TRUSTED, name, key_type, fp, known)
        if known:
            return Check(KeyMatch.CHANGED, name, key_type, fp, known)
        return Check(KeyMatch.UNKNOWN, name, key_type, fp, ())


def refusal(check: Check, label: str, host_name: str) -> HostKeyError:
    """The error for a host key that is not trusted. ``host_name``: the inventory name (for
    ``orch hosts trust``); ``label``: the server in words (``alias (addr:port)``, jump host ...)."""
    offered = f"{check.key_type} {check.fingerprint}"
    if check.match is KeyMatch.UNKNOWN:
        return HostKeyError(
            f"{host_name}: host key of {label} is unknown: {offered}; refused, nothing was sent",
            f"check that fingerprint with the host's admin, then run: orch hosts trust {host_name}",
        )
    if check.match is KeyMatch.REVOKED:
        return HostKeyError(
            f"{host_name}: host key of {label} is REVOKED ({check.known[0].where}): {offered}; "
            "refused",
            "ask the host's admin which key the host should have",
        )
    same_type = [entry for entry in check.known if entry.key_type == check.key_type]
    old = same_type or list(check.known)
    on_file = ", ".join(f"{entry.key_type} {entry.fingerprint} ({entry.where})" for entry in old)
    first = old[0]
    return HostKeyError(
        f"{host_name}: WARNING: HOST KEY CHANGED for {label} (possible man-in-the-middle attack): "
        f"known_hosts has {on_file}, the host now offers {offered}; refused, nothing was sent",
        "verify the new key out of band (ask the host's admin); only if the change is expected, "
        f"remove the old line ({first.where}, e.g. ssh-keygen -R '{check.name}' -f "
        f"{first.source}) and run: orch hosts trust {host_name}",
    )


def key_line(name: str, key_type: str, key_b64: str) -> str:
    """One known_hosts line, newline included."""
    return f"{name} {key_type} {key_b64}\n"


def pin(known_hosts_file: Path, name: str, key_type: str, key_b64: str) -> bool:
    """Append ``name key_type key`` to the file unless that key is already there for ``name``.

    Returns whether a line was added. Creates the file (0644, parents 0700) if missing and keeps
    every existing line. Refuses (HostKeyError) if the file holds a different key of the same type
    for that name: replacing a pinned key is a decision for a human, not for ``trust``.
    """
    path = known_hosts_file.expanduser()
    blob = base64.b64decode(key_b64, validate=True)
    existing = KnownHosts.load([path])
    check = existing.check(name, key_type, blob)
    if check.match is KeyMatch.TRUSTED:
        return False
    if check.match is KeyMatch.REVOKED:
        raise refusal(check, name, name)
    clashing = [entry for entry in check.known if entry.key_type == key_type]
    if clashing:
        old = clashing[0]
        raise HostKeyError(
            f"{path} already holds a different {key_type} key for {name} "
            f"({old.fingerprint} at {old.where}) than the host offers ({check.fingerprint}); "
            "not pinned",
            "verify the new key out of band; if the change is expected, remove the old line "
            f"(ssh-keygen -R '{name}' -f {path}) and trust the host again",
        )
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    hint = f"make {path} a regular file of yours (or remove it), then trust the host again"
    with open_append(path, hint=hint) as handle:  # never through a planted link, never a FIFO
        if handle.tell() > 0 and not _ends_with_newline(handle.fileno()):
            handle.write(b"\n")
        handle.write(key_line(name, key_type, key_b64).encode("ascii"))
    return True


def _ends_with_newline(descriptor: int) -> bool:
    return os.pread(descriptor, 1, os.fstat(descriptor).st_size - 1) == b"\n"
