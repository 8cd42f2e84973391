"""The SGLang launches in a script, and their arguments as SGLang's parser would read them.

A launch is found where bash would run it: directly, behind wrappers (``nohup``, ``exec``,
``env``, ``numactl``, ``sudo -E`` ...), inside ``ssh HOST '...'`` and ``ssh HOST bash <<EOF``
(the remote command is itself parsed as a script: on the host, after this machine's expansion),
inside ``docker run ... IMAGE CMD`` (only ``-e`` variables reach the container),
``kubectl exec POD -- CMD`` (the pod's environment, not this side's) and ``bash -c``. A
program is known by its name even where its directory is not (``"$ROOT/.venv/bin/python"``),
and a host that is not known (``ssh "$host"`` in a loop over a file) is a placeholder.

Arguments are read with the target version's argument table by the rules of Python's argparse
(which SGLang's server uses, ``allow_abbrev`` on): exact flags and aliases, ``--flag=value``,
unique prefixes (``--tp`` -> ``--tp-size``) and ambiguous ones, values that look like options,
``nargs``, switches, repeated flags (the last wins). Every occurrence keeps its position.

Pure: no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_script import expand_keeping_lines, parse_nested
from orchestrator.importing.shell_words import (
    Command,
    Heredoc,
    Part,
    Position,
    Script,
    Variable,
    Word,
    literal,
)
from orchestrator.model import Launcher
from orchestrator.sglang import argtable
from orchestrator.sglang.argtable import ArgOption, ArgTable

SERVER_MODULE = "sglang.launch_server"
_PYTHON_RE = re.compile(r"^python(\d+(\.\d+)*)?$")
_IMAGE_VERSION_RE = re.compile(r"^v?(\d+\.\d+\.\d+(?:\.post\d+)?)")
_SHELLS = frozenset({"bash", "sh", "dash", "zsh"})

# Wrappers that run their arguments as the command: dropped, each said.
_PLAIN_WRAPPERS = frozenset({"nohup", "exec", "time", "setsid", "command", "unbuffer", "stdbuf"})
_WRAPPER_OPTIONS_WITH_VALUE = {
    "nice": {"-n", "--adjustment"},
    "ionice": {"-c", "-n", "-p", "--class", "--classdata"},
    "taskset": set(),  # taskset [-c] LIST cmd: handled below
    "numactl": {"-N", "-m", "-C", "-p", "-i", "-P"},
    "timeout": {"-s", "-k", "--signal", "--kill-after"},
    "sudo": {"-u", "-g", "-h", "-p", "-C", "-D", "-R", "-T", "--user", "--group"},
    "stdbuf": {"-i", "-o", "-e"},
}
_SSH_OPTIONS_WITH_VALUE = frozenset("BbcDEeFIiJLlmOoPpQRSWw")
# kubectl's options that take a value (global ones and `exec`'s), as kubectl(1) lists them
_KUBECTL_OPTIONS_WITH_VALUE = frozenset({
    "-n", "--namespace", "-c", "--container", "-f", "--filename", "--context", "--cluster",
    "--kubeconfig", "--user", "-s", "--server", "--token", "--as", "--as-group",
    "--pod-running-timeout", "--request-timeout", "--cache-dir", "--certificate-authority",
    "--client-certificate", "--client-key", "--tls-server-name", "-v", "--v",
})  # fmt: skip
_DOCKER_FLAGS = frozenset({
    "-d", "--detach", "-i", "--interactive", "-t", "--tty", "--rm", "--privileged", "--init",
    "--read-only", "-P", "--publish-all", "--no-healthcheck", "--oom-kill-disable", "-q", "--quiet",
    "--sig-proxy", "--help",
})  # fmt: skip


@dataclass(frozen=True)
class EnvEntry:
    """A variable the server's environment gets, and where the script set it."""

    value: Word | None  # None: passed through from an environment the script does not show
    position: Position | None
    how: str  # "export", "prefix", "docker -e", "env"


@dataclass(frozen=True)
class Remote:
    """``ssh [user@]host``: where a launch runs."""

    host: str  # as shown: ``${host}`` where the script does not determine it
    user: str | None
    port: str | None
    identity_file: str | None
    heredoc: Heredoc | None  # ``ssh host bash <<EOF``: the body, and whether it was quoted
    command: Command  # the ssh command itself
    destination: Word | None = None  # as expanded (``host`` is its text when known)

    @property
    def known(self) -> bool:
        return self.destination is None or self.destination.text is not None


@dataclass(frozen=True)
class Container:
    image: str
    gpus: str | None
    shm_size: str | None
    ports: tuple[str, ...]
    volumes: tuple[str, ...]
    options: tuple[str, ...]  # everything else, as written
    command: Command


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
            self.command(command, command.words, environment, outer, remote, container, [], depth)

    def command(
        self,
        command: Command,
        words: Sequence[Word],
        environment: dict[str, EnvEntry],
        outer: tuple[Command, ...],
        remote: Remote | None,
        container: Container | None,
        wrappers: list[tuple[str, Position]],
        depth: int,
        env_cleared: bool = False,
    ) -> None:
        words = list(words)
        while words:
            base = program_name(words[0])
            if base is None:
                return
            if base in _PLAIN_WRAPPERS:
                wrappers.append((base, words[0].position))
                words = _skip_options(words[1:], _WRAPPER_OPTIONS_WITH_VALUE.get(base, set()))
                continue
            if base in ("nice", "ionice", "numactl", "timeout", "taskset", "sudo", "chrt"):
                wrappers.append((base, words[0].position))
                options = _WRAPPER_OPTIONS_WITH_VALUE.get(base, set())
                rest = words[1:]
                if base == "sudo":
                    flags = {w.text for w in rest if (w.text or "").startswith("-")}
                    if not flags & {"-E", "--preserve-env"}:
                        env_cleared = True  # sudo resets the environment without -E
                rest = _skip_options(rest, options)
                if base in ("timeout", "taskset", "chrt") and rest:
                    rest = rest[1:]  # the duration, CPU list or priority
                words = rest
                continue
            if base == "env":
                wrappers.append(("env", words[0].position))
                index = 1
                while index < len(words):
                    text = words[index].text or ""
                    if text in ("-i", "--ignore-environment", "-"):
                        env_cleared = True
                        environment = {}
                    elif text.startswith("-"):
                        index += 1 if text in ("-u", "--unset", "-C", "--chdir") else 0
                        if text in ("-u", "--unset") and index < len(words):
                            environment.pop(words[index].text or "", None)
                    elif "=" in text or (
                        words[index].parts
                        and isinstance(words[index].parts[0], str)
                        and "=" in str(words[index].parts[0])
                    ):
                        variable, value = _split_assignment(words[index])
                        environment[variable] = EnvEntry(value, words[index].position, "env")
                    else:
                        break
                    index += 1
                words = words[index:]
                continue
            if base == "kubectl":
                command_words = _kubectl_exec(words)
                if command_words is None:
                    return
                wrappers.append(("kubectl exec", words[0].position))
                env_cleared, environment, words = True, {}, command_words
                continue
            if (
                base in ("uv", "conda", "mamba", "micromamba", "poetry", "pipenv")
                and len(words) > 1
                and words[1].text == "run"
            ):
                wrappers.append((f"{base} run", words[0].position))
                words = _skip_options(
                    words[2:], {"-n", "--name", "-p", "--prefix", "--with", "--python", "--project"}
                )
                continue
            break
        if not words:
            return
        base = program_name(words[0]) or ""
        if _PYTHON_RE.match(base):
            self.python(
                command, words, environment, outer, remote, container, wrappers, env_cleared
            )
        elif base == "sglang" and len(words) > 1 and words[1].text == "serve":
            self.launch(
                Launch(words[0], Launcher.SERVE, tuple(words[2:]), environment, command, outer,
                       remote, container, (*self.pods, *wrappers), env_cleared or bool(self.pods))
            )  # fmt: skip
        elif base == "vllm" and len(words) > 1 and words[1].text == "serve":
            self.others.append(OtherLaunch("vllm serve", words[0].position, tuple(words[2:])))
        elif base in ("ssh",):
            self.ssh(command, words, outer, container, depth)
        elif base in ("docker", "podman", "nvidia-docker"):
            self.docker(command, words, environment, outer, remote, depth)
        elif base in _SHELLS:
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
        wrappers: list[tuple[str, Position]],
        env_cleared: bool,
    ) -> None:
        index = 1
        while index < len(words):
            text = words[index].text or ""
            if text == "-m" and index + 1 < len(words):
                module = words[index + 1].text or ""
                if module == SERVER_MODULE:
                    self.launch(
                        Launch(words[0], Launcher.MODULE, tuple(words[index + 2 :]), environment,
                               command, outer, remote, container, (*self.pods, *wrappers),
                               env_cleared or bool(self.pods))
                    )  # fmt: skip
                elif module.startswith(("sglang", "sglang_router")):
                    self.others.append(OtherLaunch(f"python -m {module}", words[0].position))
                elif module.startswith("vllm"):
                    self.others.append(
                        OtherLaunch(f"python -m {module}", words[0].position,
                                    tuple(words[index + 2 :]))
                    )  # fmt: skip
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
        user = port = identity = None
        index = 1
        while index < len(words):
            option = words[index].text or ""
            if not option.startswith("-") or option == "-":
                break
            letter = option[1:2]
            if letter in _SSH_OPTIONS_WITH_VALUE:
                value = option[2:] or (
                    # ~/.ssh/key stays as written: ssh expands it where it runs
                    (words[index + 1].text or words[index + 1].source)
                    if index + 1 < len(words)
                    else None
                )
                if letter == "l":
                    user = value
                elif letter == "p":
                    port = value
                elif letter == "i":
                    identity = value
                index += 1 if option[2:] else 2
            else:
                index += 1
        if index >= len(words):
            return
        target = words[index]
        destination = target.text if target.text is not None else target.shown()
        if destination.startswith("ssh://"):
            destination = destination[len("ssh://") :]
        if "@" in destination:
            user, destination = destination.rsplit("@", 1)
        remote_words = words[index + 1 :]
        heredoc = next((r.heredoc for r in command.redirects if r.heredoc is not None), None)
        text: Word | None = None
        origin = command.position
        if remote_words and not (
            heredoc is not None and _is_plain_shell(remote_words)
        ):  # ssh joins its words with spaces: the host's shell reads the result
            text = _joined(remote_words)
            origin = remote_words[0].position
            if len(remote_words) == 1 and remote_words[0].source[:1] in ("'", '"'):
                origin = origin.shifted(0, 1)
                if remote_words[0].source.startswith('"') and "\\\n" in remote_words[0].source:
                    text = (
                        expand_keeping_lines(
                            remote_words[0].source,
                            command.variables,
                            remote_words[0].position,
                            self.budget,
                        )
                        or text
                    )
        elif heredoc is not None:
            text = heredoc.expanded
            origin = heredoc.position
        remote = Remote(destination, user, port, identity, heredoc, command, target)
        if text is None:
            return
        self.nested(text, origin, {}, (*outer, command), remote, container, depth)

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
        if len(words) < 2 or words[1].text not in ("run", "create"):
            return
        index = 2
        env: dict[str, EnvEntry] = {}
        gpus = shm = None
        ports: list[str] = []
        volumes: list[str] = []
        options: list[str] = []
        while index < len(words):
            text = words[index].text
            if text is None:
                following = words[index + 1].text if index + 1 < len(words) else None
                if (following or "").startswith("-"):  # "${extra_options[@]}": options, unknown
                    options.append(words[index].shown())
                    index += 1
                    continue
                break
            if not text.startswith("-"):
                break
            flag, has_inline, _ = text.partition("=")
            takes_value = not (
                flag in _DOCKER_FLAGS
                or (
                    flag.startswith("-")
                    and not flag.startswith("--")
                    and len(flag) > 2
                    and set(flag[1:]) <= set("dit")
                )
            )
            value_word: Word | None = None
            if takes_value and not has_inline:
                value_word = words[index + 1] if index + 1 < len(words) else None
                index += 2
            else:
                index += 1
                if has_inline:
                    value_word = _suffix(words[index - 1], len(flag) + 1)
            value = value_word.text if value_word is not None else None
            if flag in ("-e", "--env") and value_word is not None:
                if "=" in (value_word.shown()):
                    name, entry = _split_assignment(value_word)
                    env[name] = EnvEntry(entry, value_word.position, "docker -e")
                else:  # -e NAME: passed from this side's environment
                    name = value or value_word.shown()
                    passed = environment.get(name)
                    env[name] = EnvEntry(
                        passed.value if passed else None, value_word.position, "docker -e"
                    )
            elif flag == "--gpus":
                gpus = value
            elif flag == "--shm-size":
                shm = value
            elif flag in ("-p", "--publish"):
                ports.append(value or "")
            elif flag in ("-v", "--volume", "--mount"):
                volumes.append(value or "")
            else:
                options.append(text if value is None else f"{flag}={value}")
        if index >= len(words):
            return
        image = words[index].text or words[index].shown()  # "${IMAGE}": unknown, still an image
        inner = words[index + 1 :]
        container = Container(
            image, gpus, shm, tuple(ports), tuple(volumes), tuple(options), command
        )
        if not inner:
            return
        self.command(
            command,
            inner,
            dict(env),
            (*outer, command),
            remote,
            container,
            [],
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


def program_name(word: Word) -> str | None:
    """The program a word runs, by name: ``python3`` for ``/opt/venv/bin/python3`` and for
    ``"$ROOT/.venv/bin/python"`` too (its directory is not known, its name is); None when
    the name itself is not known."""
    if word.text is not None:
        return posixpath.basename(word.text)
    last = word.parts[-1] if word.parts else None
    if isinstance(last, str) and "/" in last:
        return posixpath.basename(last) or None
    return None


def _kubectl_exec(words: Sequence[Word]) -> list[Word] | None:
    """``kubectl [global options] exec [options] POD [-c C] -- CMD...``: CMD, run in the pod
    (``kubectl exec POD CMD``, without ``--``, is the older form). None for other kubectl
    commands."""
    index = 1
    seen_exec = False
    pod: Word | None = None
    while index < len(words):
        text = words[index].text
        if text is None:
            if seen_exec and pod is None:
                pod = words[index]  # "$POD": a pod the script does not name here
                index += 1
                continue
            return None
        if text == "--":
            return list(words[index + 1 :]) if seen_exec else None
        if text.startswith("-"):
            flag = text.split("=", 1)[0]
            index += 2 if flag in _KUBECTL_OPTIONS_WITH_VALUE and "=" not in text else 1
            continue
        if not seen_exec:
            if text != "exec":
                return None
            seen_exec = True
        elif pod is None:
            pod = words[index]
        else:
            return list(words[index:])  # the older form, without `--`
        index += 1
    return None


def _is_plain_shell(words: Sequence[Word]) -> bool:
    """``ssh host bash``, ``ssh host 'bash -s'``, ``ssh host sh -l``: the heredoc is the script."""
    joined = " ".join(w.text or "" for w in words).split()
    return (
        bool(joined)
        and posixpath.basename(joined[0]) in _SHELLS
        and all(part.startswith("-") and "c" not in part for part in joined[1:])
    )


def _joined(words: Sequence[Word]) -> Word:
    parts: list[Part] = []
    for index, word in enumerate(words):
        if index:
            parts.append(" ")
        parts.extend(word.parts)
    return Word(tuple(parts), words[0].position, " ".join(w.source for w in words))


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


def _suffix(word: Word, skip: int) -> Word:
    """The word without its first ``skip`` characters (``--env=A=b`` -> ``A=b``)."""
    parts: list[Part] = []
    for part in word.parts:
        if skip and isinstance(part, str):
            taken = min(skip, len(part))
            part, skip = part[taken:], skip - taken
            if not part:
                continue
        parts.append(part)
    return Word(tuple(parts), word.position, word.source)


def _split_assignment(word: Word) -> tuple[str, Word]:
    first = word.parts[0] if word.parts else ""
    if isinstance(first, str) and "=" in first:
        name, _, rest = first.partition("=")
        return name, Word(
            ((rest,) if rest else ()) + word.parts[1:] or ("",), word.position, word.source
        )
    return word.shown(), literal("", word.position)


def _skip_options(words: list[Word], with_value: set[str]) -> list[Word]:
    index = 0
    while index < len(words):
        text = words[index].text or ""
        if text == "--":
            return words[index + 1 :]
        if not text.startswith("-"):
            break
        index += 2 if text in with_value else 1
    return words[index:]


# -- SGLang's arguments ------------------------------------------------------------------------


@dataclass(frozen=True)
class Occurrence:
    """One option as written, with the values argparse gave it."""

    option: ArgOption
    written: str  # the flag as written (``--tp``)
    values: tuple[Word, ...]
    position: Position
    explicit: bool  # --flag=value
    abbreviated: bool = False  # a unique prefix of the option's flag (argparse allow_abbrev)


@dataclass(frozen=True)
class ArgProblem:
    code: str  # unknown-flag, ambiguous-abbreviation, missing-value, bad-choice, bad-value,
    # invalid-json, duplicate-flag, unexpected-value, unresolved-arguments
    message: str
    position: Position
    fix: str | None = None
    flag: str | None = None
    unresolved: tuple[str, ...] = ()  # what hides the arguments (unresolved-arguments)


@dataclass(frozen=True)
class ParsedArguments:
    occurrences: tuple[Occurrence, ...]
    problems: tuple[ArgProblem, ...]
    table: ArgTable

    def last(self) -> dict[str, Occurrence]:
        """dest -> the occurrence argparse keeps (the last; ``append`` options: every one)."""
        out: dict[str, Occurrence] = {}
        for occurrence in self.occurrences:
            out[occurrence.option.dest] = occurrence
        return out

    def appended(self, dest: str) -> tuple[Occurrence, ...]:
        return tuple(o for o in self.occurrences if o.option.dest == dest)


_SECRET_DEST_RE = re.compile(r"key|token|secret|password|credential", re.I)
_NEGATIVE_NUMBER_RE = re.compile(r"^-\d+$|^-\d*\.\d+$")
_JSON_TYPES = ("callable:loads", "callable:json_list_type")


def _looks_like_option(text: str, longs: Sequence[str]) -> bool:
    """argparse's ``_parse_optional``: does this argument start an option?"""
    if not text or text[0] != "-" or text == "-":
        return False
    if _NEGATIVE_NUMBER_RE.match(text):
        return False
    return not (" " in text and not any(text.split("=", 1)[0] == flag for flag in longs))


def match_flag(table: ArgTable, written: str) -> tuple[list[ArgOption], bool]:
    """The options ``written`` names (one, or several for an ambiguous prefix), and whether
    it was an abbreviation."""
    if written in table.by_flag:
        return [table.by_flag[written]], False
    if not written.startswith("--"):
        return [], False
    candidates = sorted({f for f in table.by_flag if f.startswith(written)})
    options: list[ArgOption] = []
    for flag in candidates:
        option = table.by_flag[flag]
        if option not in options:
            options.append(option)
    # argparse reports ambiguity per option string, even when two strings are one option
    if len(candidates) > 1 and len(options) == 1:
        return [options[0]] * len(candidates), True
    return options, True


def parse_arguments(table: ArgTable, words: Sequence[Word]) -> ParsedArguments:
    longs = tuple(table.by_flag)
    occurrences: list[Occurrence] = []
    problems: list[ArgProblem] = []
    index = 0
    while index < len(words):
        word = words[index]
        head = word.parts[0] if word.parts else ""
        text = word.text
        if text is None:
            if isinstance(head, str) and head.startswith("-"):
                text = word.shown()  # --port=$PORT: the option is known, its value is not
            else:
                problems.append(ArgProblem(
                    "unresolved-arguments",
                    f"{word.shown()} is not known here and may hold any arguments",
                    word.position,
                    "give its value with --set NAME=VALUE",
                    unresolved=tuple(part.name for part in word.unresolved),
                ))  # fmt: skip
                index += 1
                continue
        if text == "--":
            problems.append(
                ArgProblem(
                    "unexpected-value",
                    "'--' ends the options: SGLang takes no positional arguments",
                    word.position,
                )
            )
            break
        if not _looks_like_option(text, longs):
            problems.append(ArgProblem(
                "unexpected-value",
                f"{text!r} is not an option and follows no option that takes it",
                word.position, "a value missing its flag, or a flag that takes no value before it",
            ))  # fmt: skip
            index += 1
            continue
        written, has_equals, _ = text.partition("=")
        options, abbreviated = match_flag(table, written)
        if not options and has_equals and text in table.by_flag:
            options, abbreviated, written = [table.by_flag[text]], False, text
        renamed = (
            argtable.spell(table, written.lstrip("-").replace("-", "_"))
            if abbreviated or not options
            else None
        )
        if renamed is not None and renamed.rename is not None and written.startswith("--"):
            # a removed name (that may also prefix newer flags): its intent is known
            problem = _unknown(table, written, word.position)
            if len(options) > 1:
                problem = dataclasses.replace(
                    problem,
                    message=f"{problem.message} (argparse reads it as an ambiguous abbreviation)",
                )
            problems.append(problem)
            options, abbreviated = [renamed.option], False
        if not options:
            problem = _unknown(table, written, word.position)
            problems.append(problem)
            if problem.code != "removed-flag" or renamed is None:
                index += 1
                while index < len(words) and not _looks_like_option(
                    words[index].text or words[index].shown(), longs
                ):
                    index += 1  # its values
                continue
            options = [renamed.option]  # the intent is known: read it as the new name
        if len(options) > 1:
            flags = sorted({f for f in table.by_flag if f.startswith(written)})
            problems.append(ArgProblem(
                "ambiguous-abbreviation",
                f"{written} is ambiguous for SGLang {table.version}:"
                f" it could be {', '.join(flags[:6])}"
                + (" ..." if len(flags) > 6 else ""),
                word.position, "write the whole flag", written,
            ))  # fmt: skip
            index += 1
            continue
        option = options[0]
        explicit: Word | None = _suffix(word, len(written) + 1) if has_equals else None
        values: list[Word] = []
        index += 1
        arity = _arity(option)
        if explicit is not None:
            if arity == (0, 0):
                problems.append(ArgProblem(
                    "unexpected-value", f"{written} takes no value, got {explicit.shown()!r}",
                    word.position, f"write {written} alone", option.flags[0],
                ))  # fmt: skip
            values = [explicit]
        else:
            low, high = arity
            while index < len(words) and (high is None or len(values) < high):
                following = words[index].text
                shown = following if following is not None else words[index].shown()
                if following is not None and _looks_like_option(shown, longs):
                    break
                if following is None and shown.startswith("-"):
                    break
                values.append(words[index])
                index += 1
            if len(values) < low:
                problems.append(ArgProblem(
                    "missing-value", f"{written} expects a value and got none",
                    word.position, "argparse would stop here: give the value", option.flags[0],
                ))  # fmt: skip
                continue
        occurrence = Occurrence(
            option, written, tuple(values), word.position, explicit is not None, abbreviated
        )
        problems.extend(_check_values(table, occurrence))
        earlier = [o for o in occurrences if o.option.dest == option.dest]
        if earlier and option.action not in ("append", "count"):
            before = earlier[-1]
            same = [v.shown() for v in before.values] == [v.shown() for v in values]
            if _SECRET_DEST_RE.search(option.dest):  # a credential's values are never shown
                said = (
                    f"argparse keeps the last (line {occurrence.position.line}), not the one "
                    f"at line {before.position.line}; their values are not shown"
                )
            elif same:
                said = f"{_shown_values(occurrence)} here and at line {before.position.line}"
            else:
                said = (
                    f"argparse keeps the last, so SGLang gets {_shown_values(occurrence)}, "
                    f"not {_shown_values(before)} (line {before.position.line})"
                )
            problems.append(ArgProblem(
                "duplicate-flag",
                f"{option.flag} is given twice: {said}",
                word.position, "remove one of them", option.flags[0],
            ))  # fmt: skip
        occurrences.append(occurrence)
    return ParsedArguments(tuple(occurrences), tuple(problems), table)


def _arity(option: ArgOption) -> tuple[int, int | None]:
    if option.action in ("store_true", "store_false", "store_const", "count", "help", "version"):
        return 0, 0
    if option.action == "custom:BooleanOptionalAction":
        return 0, 0
    if option.nargs == 0:
        return 0, 0
    if option.nargs in (None, "store"):
        return 1, 1
    if option.nargs == "?":
        return 0, 1
    if option.nargs == "*":
        return 0, None
    if option.nargs == "+":
        return 1, None
    if isinstance(option.nargs, int):
        return option.nargs, option.nargs
    return 1, 1


def _shown_values(occurrence: Occurrence) -> str:
    if not occurrence.values:
        return occurrence.written
    return occurrence.written + " " + " ".join(v.shown() for v in occurrence.values)


def _unknown(table: ArgTable, written: str, position: Position) -> ArgProblem:
    name = written.lstrip("-").replace("-", "_")
    spelling = argtable.spell(table, name)
    if spelling is not None and spelling.rename is not None:
        rename = spelling.rename
        return ArgProblem(
            "removed-flag",
            f"{written} was {rename.describe()}: SGLang {table.version} rejects it",
            position, f"write {spelling.flag} (in a profile: args.{rename.new})", written,
        )  # fmt: skip
    import difflib

    close = difflib.get_close_matches(written, list(table.by_flag), n=1, cutoff=0.75)
    return ArgProblem(
        "unknown-flag", f"{written} is not an option of SGLang {table.version}", position,
        f"did you mean {close[0]}?" if close else "check `python -m sglang.launch_server --help` "
        "for that version", written,
    )  # fmt: skip


def _check_values(table: ArgTable, occurrence: Occurrence) -> list[ArgProblem]:
    option = occurrence.option
    problems: list[ArgProblem] = []
    for value in occurrence.values:
        text = value.text
        if text is None:
            continue
        if option.type == "int" and not re.fullmatch(r"\s*[-+]?\d+\s*", text):
            problems.append(
                ArgProblem(
                    "bad-value",
                    f"{occurrence.written} expects an integer, got {text!r}",
                    value.position,
                    flag=option.flags[0],
                )
            )
        elif option.type == "float":
            try:
                float(text)
            except ValueError:
                problems.append(
                    ArgProblem(
                        "bad-value",
                        f"{occurrence.written} expects a number, got {text!r}",
                        value.position,
                        flag=option.flags[0],
                    )
                )
        if option.choices is not None and text not in {str(c) for c in option.choices}:
            choices = ", ".join(str(c) for c in option.choices)
            problems.append(ArgProblem(
                "bad-choice",
                f"{occurrence.written} {text!r} is not one of SGLang {table.version}'s"
                f" choices: {choices}",
                value.position, None, option.flags[0],
            ))  # fmt: skip
        if is_json_option(option):
            try:
                json.loads(text)
            except ValueError as exc:
                problems.append(ArgProblem(
                    "invalid-json",
                    f"{occurrence.written} receives {text!r}, which is not valid JSON after"
                    f" the shell's quoting ({getattr(exc, 'msg', exc)})",
                    value.position,
                    "quote the whole JSON in single quotes: '--flag' '{\"key\": 1}'",
                    option.flags[0],
                ))  # fmt: skip
    return problems


def is_json_option(option: ArgOption) -> bool:
    if option.type in _JSON_TYPES:
        return True
    return "json" in option.dest or (
        isinstance(option.default, str) and option.default.strip() in ("{}", "[]")
    )


def first_version_accepting(
    words: Sequence[Word], versions: Sequence[str]
) -> tuple[str, ParsedArguments]:
    """The newest table under which the arguments have no unknown or removed flag (else the
    one with the fewest problems); of those, one that has each flag as written rather than
    as the abbreviation of another (``--nsa-decode`` is 0.5.3's flag, 0.5.4+ abbreviate
    ``--nsa-decode-backend`` with it)."""
    best: tuple[tuple[int, int], str, ParsedArguments] | None = None
    for version in reversed(versions):
        parsed = parse_arguments(argtable.load_table(version), words)
        # a renamed flag is not a reason to go back: a profile names the field, and orch
        # spells it for each version
        bad = sum(p.code in ("unknown-flag", "ambiguous-abbreviation") for p in parsed.problems)
        score = (bad, sum(o.abbreviated for o in parsed.occurrences))
        if score == (0, 0):
            return version, parsed
        if best is None or score < best[0]:
            best = (score, version, parsed)
    if best is None:  # no versions: the caller passes at least one
        raise ValueError("no SGLang version to try")
    return best[1], best[2]
