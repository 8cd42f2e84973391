"""One error tree for orch, and the exit codes the CLI maps it to.

Every failure orch reports is an ``OrchError``: a one-line ``message`` saying what was wrong
(file, key path, what was expected) and a ``hint`` saying what to do about it. Third-party
exceptions are translated at the edge (``raise ProfileError(...) from exc``) so that ``cli.main``
catches this root only. Messages never carry secret values: callers build them from names and
positions, never from the values of ``from_env`` entries.
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """Process exit codes, stable for scripts (documented in docs/exit-codes.md)."""

    OK = 0
    DRIFT = 1  # a result, like diff(1): the effective configuration differs from the profile
    USAGE = 2  # argparse's own code for a bad command line
    CONFIG = 3  # a profile, inventory or argument table is invalid; nothing ran
    RENDER = 4  # a valid profile that cannot become a launch plan (e.g. a secret is not set)
    INTERNAL = 70  # a bug in orch (EX_SOFTWARE)
    INTERRUPTED = 130  # Ctrl-C


class OrchError(Exception):
    """Root of every error orch reports to a user."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message


class ProfileError(OrchError):
    """A profile or the host inventory is wrong: syntax, unknown key, type, range, reference."""

    exit_code = ExitCode.CONFIG

    def __init__(
        self,
        message: str,
        hint: str | None = None,
        *,
        source: str | None = None,
        key_path: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.problem = message
        self.source = source
        self.key_path = key_path
        self.line = line
        self.column = column
        super().__init__(_locate(message, source, key_path, line, column), hint)


class ProfileNotFound(ProfileError):
    """A profile name that matches no file under the profiles directory."""


class ArgTableError(OrchError):
    """The shipped SGLang argument tables are missing or unreadable (a packaging fault)."""

    exit_code = ExitCode.CONFIG


class RenderError(OrchError):
    """A validated profile that cannot be turned into a launch plan here and now."""

    exit_code = ExitCode.RENDER


class ProfileErrors(OrchError):
    """Several profile errors found in one pass (``orch validate`` reports them all)."""

    exit_code = ExitCode.CONFIG

    def __init__(self, errors: list[ProfileError]) -> None:
        self.errors = errors
        first = errors[0]
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        super().__init__(first.message + more, first.hint)


def _locate(
    message: str,
    source: str | None,
    key_path: str | None,
    line: int | None,
    column: int | None,
) -> str:
    """``file:line:col: key.path: message``, leaving out the parts that are unknown."""
    where = ""
    if source is not None:
        where = source
        if line is not None:
            where += f":{line}"
            if column is not None:
                where += f":{column}"
        where += ": "
    if key_path:
        where += f"{key_path}: "
    return where + message
