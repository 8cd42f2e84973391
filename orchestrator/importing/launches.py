"""The SGLang launches in a script: where bash would start a server, behind what, with which
environment.

A launch is found where bash would run it: directly, behind wrappers (``nohup``, ``exec``,
``env``, ``numactl``, ``sudo -E`` ...), inside ``ssh HOST '...'`` and ``ssh HOST bash <<EOF``
(the remote command is itself parsed as a script: on the host, after this machine's expansion),
inside ``docker run ... IMAGE CMD`` (only ``-e`` variables reach the container),
``kubectl exec POD -- CMD`` (the pod's environment, not this side's) and ``bash -c``. A
program is known by its name even where its directory is not (``"$ROOT/.venv/bin/python"``),
and a host that is not known (``ssh "$host"`` in a loop over a file) is a placeholder.

How each of those programs reads its own arguments is in ``wrappers``; the server's own
arguments are read by ``server_arguments``.

Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_script import parse_nested
from orchestrator.importing.shell_words import Command, Position, Script, Variable, Word
from orchestrator.importing.wrappers import (
    SHELLS,
    Container,
    EnvEntry,
    Remote,
    program_name,
    read_docker,
    read_ssh,
    unwrap,
)
from orchestrator.model import Launcher

SERVER_MODULE = "sglang.launch_server"
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)*)?$")
_IMAGE_VERSION_RE = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)")


@dataclass(frozen=True)
class Launch:
    """One SGLang server start in a script."""

    program: Word  # the interpreter (or the sglang console script)
    launcher: Launcher
    arguments: tuple[Word, ...]  # after ``-m sglang.launch_server`` / ``serve``
    environment: Mapping[str, EnvEntry]
    command: Command  # the innermost command that starts it
    outer: tuple[
        Command, ...
    ]  # commands that lead to it (ssh, docker run, bash -c), outermost first
    remote: Remote | None
    container: Container | None
    wrappers: tuple[tuple[str, Position], ...]  # nohup, exec, sudo ... (dropped by import)
    env_cleared: bool = False  # `env -i`, sudo without -E: the environment is not inherited

    @property
    def position(self) -> Position:
        return self.command.position

    @property
    def sglang_from_image(self) -> str | None:
        if self.container is None:
            return None
        repository, _, tag = self.container.image.rpartition(":")
        if "sglang" not in repository:
            return None
        match = _IMAGE_VERSION_RE.match(tag)
        return match.group(1) if match else None


@dataclass(frozen=True)
class OtherLaunch:
    """A program import sees but does not import (the SGLang router, a Python script, vLLM)."""

    what: str
    position: Position
    arguments: tuple[Word, ...] = ()  # a vLLM server's (``--check`` reads them for SGLang's)


@dataclass(frozen=True)
class Found:
    launches: tuple[Launch, ...]
    others: tuple[OtherLaunch, ...]
    scripts: tuple[tuple[Script, tuple[Command, ...]], ...]  # every script walked (nested too)


def find_launches(script: Script) -> Found:
    finder = _Finder(script.budget)
    finder.script(script, (), None, None, 0)
    return Found(tuple(finder.launches), tuple(finder.others), tuple(finder.scripts))


class _Finder:
    """Every command of a script, and of the scripts it runs (``ssh``, ``bash -c``, ``docker
    run``), followed to the program it starts: SGLang's server, or another one."""

    def __init__(self, budget: WorkBudget) -> None:
        self.budget = budget
        self.pods: tuple[tuple[str, Position], ...] = ()  # the kubectl execs around this point
        self.launches: list[Launch] = []
        self.others: list[OtherLaunch] = []
        self.scripts: list[tuple[Script, tuple[Command, ...]]] = []

    def launch(self, launch: Launch) -> None:
        self.budget.spend("launches", 1, launch.position)
        self.launches.append(launch)

    def script(
        self,
        script: Script,
        outer: tuple[Command, ...],
        remote: Remote | None,
        container: Container | None,
        depth: int,
    ) -> None:
        self.scripts.append((script, outer))
        for command in script.commands:
            environment = {
                name: EnvEntry(
                    var.value,
                    var.position,
                    "prefix" if any(n == name for n, _ in command.prefix) else "export",
                )
                for name, var in command.environment.items()
            }
            self.command(command, command.words, environment, outer, remote, container, depth)

    def command(
        self,
        command: Command,
        words: Sequence[Word],
        environment: dict[str, EnvEntry],
        outer: tuple[Command, ...],
        remote: Remote | None,
        container: Container | None,
        depth: int,
        env_cleared: bool = False,
    ) -> None:
        """What ``words`` start behind their wrappers: a server, another program, or a
        script to follow."""
        unwrapped = unwrap(words, environment, env_cleared)
        if unwrapped is None or not unwrapped.words:
            return
        words = list(unwrapped.words)
        environment, wrappers = unwrapped.environment, unwrapped.wrappers
        env_cleared = unwrapped.env_cleared
        base = program_name(words[0]) or ""
        if _PYTHON_RE.match(base):
            self.python(
                command, words, environment, outer, remote, container, wrappers, env_cleared
            )
        elif base == "sglang" and len(words) > 1 and words[1].text == "serve":
            self.launch(
                Launch(
                    words[0],
                    Launcher.SERVE,
                    tuple(words[2:]),
                    environment,
                    command,
                    outer,
                    remote,
                    container,
                    (*self.pods, *wrappers),
                    env_cleared or bool(self.pods),
                )
            )
        elif base == "vllm" and len(words) > 1 and words[1].text == "serve":
            self.others.append(OtherLaunch("vllm serve", words[0].position, tuple(words[2:])))
        elif base in ("ssh",):
            self.ssh(command, words, outer, container, depth)
        elif base in ("docker", "podman", "nvidia-docker"):
            self.docker(command, words, environment, outer, remote, depth)
        elif base in SHELLS:
            saved = self.pods  # `kubectl exec POD -- bash -c '...'`: its launches run there too
            self.pods = (*saved, *(w for w in wrappers if w[0] == "kubectl exec"))
            try:
                self.shell(command, words, environment, outer, remote, container, depth)
            finally:
                self.pods = saved

    def python(
        self,
        command: Command,
        words: list[Word],
        environment: dict[str, EnvEntry],
        outer: tuple[Command, ...],
        remote: Remote | None,
        container: Container | None,
        wrappers: tuple[tuple[str, Position], ...],
        env_cleared: bool,
    ) -> None:
        index = 1
        while index < len(words):
            text = words[index].text or ""
            if text == "-m" and index + 1 < len(words):
                module = words[index + 1].text or ""
                if module == SERVER_MODULE:
                    self.launch(
                        Launch(
                            words[0],
                            Launcher.MODULE,
                            tuple(words[index + 2 :]),
                            environment,
                            command,
                            outer,
                            remote,
                            container,
                            (*self.pods, *wrappers),
                            env_cleared or bool(self.pods),
                        )
                    )
                elif module.startswith(("sglang", "sglang_router")):
                    self.others.append(OtherLaunch(f"python -m {module}", words[0].position))
                elif module.startswith("vllm"):
                    self.others.append(
                        OtherLaunch(
                            f"python -m {module}", words[0].position, tuple(words[index + 2 :])
                        )
                    )
                return
            if text in ("-X", "-W"):
                index += 2
                continue
            if not text.startswith("-"):
                if text.endswith("launch_server.py"):
                    self.others.append(OtherLaunch(f"python {text}", words[index].position))
                return
            index += 1

    def ssh(
        self,
        command: Command,
        words: list[Word],
        outer: tuple[Command, ...],
        container: Container | None,
        depth: int,
    ) -> None:
        ssh = read_ssh(command, words, self.budget)
        if ssh is None or ssh.script is None:
            return
        self.nested(ssh.script, ssh.origin, {}, (*outer, command), ssh.remote, container, depth)

    def nested(
        self,
        text: Word,
        origin: Position,
        variables: Mapping[str, Variable],
        outer: tuple[Command, ...],
        remote: Remote | None,
        container: Container | None,
        depth: int,
    ) -> None:
        """Parse ``text`` (which may hold parts this side could not resolve) as a script."""
        source, unresolved = _with_placeholders(text)
        script = parse_nested(source, origin, {**variables, **unresolved}, depth + 1, self.budget)
        self.script(script, outer, remote, container, depth + 1)

    def docker(
        self,
        command: Command,
        words: list[Word],
        environment: dict[str, EnvEntry],
        outer: tuple[Command, ...],
        remote: Remote | None,
        depth: int,
    ) -> None:
        run = read_docker(command, words, environment)
        if run is None:
            return
        self.command(
            command,
            run.words,
            dict(run.environment),
            (*outer, command),
            remote,
            run.container,
            depth + 1,
            env_cleared=True,
        )

    def shell(
        self,
        command: Command,
        words: list[Word],
        environment: dict[str, EnvEntry],
        outer: tuple[Command, ...],
        remote: Remote | None,
        container: Container | None,
        depth: int,
    ) -> None:
        """``bash -c 'TEXT'``, ``bash -lc``, ``bash <<EOF`` / ``bash -s``: TEXT is a script
        with this side's exported variables."""
        variables = {n: Variable(e.value, True, e.position) for n, e in environment.items()}
        for index, word in enumerate(words[1:], start=1):
            text = word.text or ""
            if text.startswith("-") and "c" in text[1:] and not text.startswith("--"):
                if index + 1 < len(words):
                    body = words[index + 1]
                    origin = (
                        body.position.shifted(0, 1)
                        if body.source[:1] in ("'", '"')
                        else body.position
                    )
                    self.nested(
                        body, origin, variables, (*outer, command), remote, container, depth
                    )
                return
            if not text.startswith("-"):
                self.others.append(OtherLaunch(f"{words[0].shown()} {word.shown()}", word.position))
                return  # bash script.sh: another file, not followed
        heredoc = next((r.heredoc for r in command.redirects if r.heredoc is not None), None)
        if heredoc is not None and remote is None:
            self.nested(
                heredoc.expanded,
                heredoc.position,
                variables,
                (*outer, command),
                remote,
                container,
                depth,
            )


_PLACEHOLDER = "__orch_unresolved_{}"


def _with_placeholders(text: Word) -> tuple[str, dict[str, Variable]]:
    """A word's text for re-parsing, each unresolved part as a variable that expands back to it."""
    out: list[str] = []
    variables: dict[str, Variable] = {}
    for part in text.parts:
        if isinstance(part, str):
            out.append(part)
        else:
            name = _PLACEHOLDER.format(len(variables))
            variables[name] = Variable(Word((part,), part.position, part.shown()), False, None)
            out.append("${" + name + "}")
    return "".join(out), variables
