"""What ``orch import`` says about a profile it writes: a note for each default taken, each
value a condition leaves open, each line bash never passes, and everything orch does itself
and drops (``nohup``, ``&``, ``> log``, readiness polling, ``pkill``), located in the script.

``ImportContext`` collects them for one profile, with the names left unresolved (to give with
``--set``) and the ``from_env`` names given to its secrets. A note never holds a secret: each
message is masked as it is made, and a secret's value is never quoted.

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass, field

from orchestrator.importing import credentials
from orchestrator.importing.breaks import file_breaks, launch_breaks
from orchestrator.importing.launches import Launch
from orchestrator.importing.scripts import ScannedScript
from orchestrator.importing.shell_words import Command, Position
from orchestrator.render import Redactor

# What orch does itself: the commands a launch script runs around the server, and why they go.
_DROPPED_PROGRAMS: dict[str, str] = {
    "sleep": "orch waits for readiness itself: `orch up` follows the log and /health",
    "curl": "orch checks readiness itself (/health, then /server_info)",
    "wget": "orch checks readiness itself (/health, then /server_info)",
    "grep": "orch parses the log as it is written: readiness, weight loading, crash class",
    "tail": "`orch logs -f` follows the log; every run keeps its own",
    "pkill": "orch stops only its own server (`orch down`), verified by pid and start time",
    "kill": "orch stops only its own server (`orch down`), verified by pid and start time",
    "killall": "orch stops only its own server (`orch down`), verified by pid and start time",
    "wait": "orch's supervisor outlives the SSH session and restarts with backoff",
    "disown": "orch's supervisor outlives the SSH session",
    "nvidia-smi": "`orch plan` reads the GPUs; the agent reports them",
    "mkdir": "orch creates <workdir>/<profile>/ on the host",
    "cd": "orch runs the server in <workdir>/<profile>/ on the host",
    "echo": "orch prints what it does",
}


_WRAPPER_REASONS = {
    "nohup": "orch's supervisor outlives the SSH session (no nohup needed)",
    "exec": "the agent starts the server directly, without a shell",
    "setsid": "the agent starts the server in its own session",
    "sudo": "orch starts the server as the SSH user",
    "kubectl exec": "the server ran in a pod; the profile runs it on a host of hosts.yaml "
    "(`orch export kubernetes` writes a pod for it)",
}


@dataclass(frozen=True)
class Note:
    """One thing import says about a profile, located in the script when it is about a line."""

    # lost (flags bash never passes: a broken continuation), dropped, default, unresolved,
    # canonical, renamed, version, host, secret, skipped, warning
    kind: str
    message: str
    file: str | None = None
    position: Position | None = None

    def located(self) -> str:
        if self.file is None or self.position is None:
            return self.message
        return f"{self.file}:{self.position.line}:{self.position.column}: {self.message}"


@dataclass
class ImportContext:
    """What one profile's import collects as it goes: its notes, the names left unresolved, the
    ``from_env`` names given to its secrets."""

    file: str
    notes: list[Note] = field(default_factory=list)
    unresolved: dict[str, None] = field(default_factory=dict)
    redact: Redactor = field(default_factory=Redactor)  # masks the scripts' secrets
    references: dict[str, str] = field(default_factory=dict)  # from_env NAME -> what it holds

    def note(self, kind: str, message: str, position: Position | None = None) -> None:
        # a message may quote the script (a duplicate flag's value, a docker option): masked
        # here, as the caller masks what it shows, so that no note ever holds a secret
        entry = Note(kind, self.redact(message), self.file, position)
        if entry not in self.notes:
            self.notes.append(entry)


def shown(name: str, value: str, *, quote: bool = True) -> str:
    """A value for a note: quoted, or said to be a secret (never quoted)."""
    if credentials.why_secret(name, value) is not None:
        return "(a secret, not shown)"
    return repr(value) if quote else value


def note_defaults(item: ScannedScript, context: ImportContext) -> None:
    """The values the script's defaults and conditions give: taken and said, or not guessed."""
    for default in item.script.defaults:
        context.note(
            "default",
            f"${{{default.name}}} is not set by the script: its default "
            f"{shown(default.name, default.value)} was taken (--set {default.name}=VALUE for "
            "another)",
            default.position,
        )
    for script, _ in item.found.scripts:
        for choice in script.choices:
            if choice.taken is not None:
                context.note(
                    "default",
                    f"{choice.name} is set only when a condition holds: its value "
                    f"{shown(choice.name, choice.taken)} was taken (--set {choice.name}=VALUE "
                    "for another)",
                    choice.position,
                )
            else:
                arms = " or ".join(
                    v if v == "unset" else shown(choice.name, v, quote=False) for v in choice.values
                )
                context.note(
                    "unresolved",
                    f"{choice.name} depends on a condition orch does not evaluate "
                    f"({arms}): not guessed (--set {choice.name}=VALUE)",
                    choice.position,
                )


def note_lost_lines(item: ScannedScript, launch: Launch, context: ImportContext) -> None:
    """The flags of ``launch`` that a broken continuation keeps from bash (the loudest note)."""
    for lost in launch_breaks(launch, file_breaks(item.found)):
        context.note(
            "lost",
            f"{lost.said('the server')}; not imported: {lost.fix()}",
            lost.position,
        )


def note_dropped(item: ScannedScript, launch: Launch, context: ImportContext) -> None:
    for wrapper, position in launch.wrappers:
        reason = _WRAPPER_REASONS.get(wrapper)
        if reason is not None:
            context.note("dropped", f"{wrapper}: {reason}", position)
    for command in (*launch.outer, launch.command):
        if command.background:
            context.note(
                "dropped",
                "&: orch's agent runs the server in the background and supervises it",
                command.position,
            )
        for redirect in command.redirects:
            if redirect.heredoc is not None:
                continue
            target = redirect.target.shown() if redirect.target is not None else ""
            if redirect.operator in (">", ">>", "&>", ">|", "&>>") or (
                redirect.operator == ">&" and not target.isdigit()
            ):
                context.note(
                    "dropped",
                    f"{redirect.descriptor or ''}{redirect.operator} {target}:"
                    " orch keeps a log per "
                    "run under the run's directory and never overwrites an earlier one",
                    redirect.position,
                )
    container = launch.container
    if container is not None:
        kept = [f"--gpus {container.gpus}"] if container.gpus else []
        left = [
            *(f"-p {p}" for p in container.ports),
            *(f"-v {v}" for v in container.volumes),
            *([f"--shm-size {container.shm_size}"] if container.shm_size else []),
            *container.options,
        ]
        context.note(
            "dropped",
            f"docker run {container.image}: the profile runs the server on the host with "
            "hosts.yaml's python"
            + (f" ({', '.join(kept)} read as gpu.devices)" if kept else "")
            + (f"; not carried over: {' '.join(left)}" if left else "")
            + " (a container elsewhere: orch export)",
            container.command.position,
        )
    seen: set[str] = set()
    for script, _ in item.found.scripts:
        for command in script.commands:
            name = posixpath.basename(command.name or "")
            if (
                name in _DROPPED_PROGRAMS
                and name not in seen
                and not _is_launch_command(command, item)
            ):
                seen.add(name)
                context.note("dropped", f"{name}: {_DROPPED_PROGRAMS[name]}", command.position)


def _is_launch_command(command: Command, item: ScannedScript) -> bool:
    return any(command is launch.command for launch in item.found.launches)
