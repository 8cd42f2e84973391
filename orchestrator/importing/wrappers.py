"""The programs that run a server's command for it, and how each reads its own arguments.

A launch hides behind wrappers that run their arguments as the command (``nohup``, ``exec``,
``env``, ``numactl``, ``sudo -E``, ``uv run`` ..., ``kubectl exec POD --``): ``unwrap`` takes
them off, each said, with what they do to the environment (``env -i``, ``sudo`` without
``-E``, a pod's own). ``ssh [options] [user@]host CMD`` runs CMD on a host (``read_ssh``: the
destination and the text the host's shell reads, a heredoc's body for ``ssh host bash <<EOF``),
``docker run [options] IMAGE CMD`` runs CMD in a container that sees only its ``-e`` variables
(``read_docker``). A program is known by its name even where its directory is not
(``program_name``). The launch finder (``launches``) follows what they run.

Pure: no I/O.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.importing.budget import WorkBudget
from orchestrator.importing.shell_script import expand_keeping_lines
from orchestrator.importing.shell_words import Command, Heredoc, Part, Position, Word, literal

# The shells whose `-c TEXT`, `-s` or heredoc is a script of its own (followed as one)
SHELLS = frozenset({"bash", "sh", "dash", "zsh"})

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
_KUBECTL_OPTIONS_WITH_VALUE = frozenset(
    {
        "-n",
        "--namespace",
        "-c",
        "--container",
        "-f",
        "--filename",
        "--context",
        "--cluster",
        "--kubeconfig",
        "--user",
        "-s",
        "--server",
        "--token",
        "--as",
        "--as-group",
        "--pod-running-timeout",
        "--request-timeout",
        "--cache-dir",
        "--certificate-authority",
        "--client-certificate",
        "--client-key",
        "--tls-server-name",
        "-v",
        "--v",
    }
)
_DOCKER_FLAGS = frozenset(
    {
        "-d",
        "--detach",
        "-i",
        "--interactive",
        "-t",
        "--tty",
        "--rm",
        "--privileged",
        "--init",
        "--read-only",
        "-P",
        "--publish-all",
        "--no-healthcheck",
        "--oom-kill-disable",
        "-q",
        "--quiet",
        "--sig-proxy",
        "--help",
    }
)


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
    """``docker run``'s container: its image, what import reads of its options, the rest."""

    image: str
    gpus: str | None
    shm_size: str | None
    ports: tuple[str, ...]
    volumes: tuple[str, ...]
    options: tuple[str, ...]  # everything else, as written
    command: Command


@dataclass(frozen=True)
class Unwrapped:
    """A command without the wrappers in front of it."""

    words: tuple[Word, ...]  # the command the wrappers run
    environment: dict[str, EnvEntry]  # what it gets (``env NAME=value``, ``env -u NAME``)
    wrappers: tuple[tuple[str, Position], ...]  # each taken off, where it is written
    env_cleared: bool  # `env -i`, sudo without -E, kubectl exec: the environment is not passed


def unwrap(
    words: Sequence[Word], environment: dict[str, EnvEntry], env_cleared: bool
) -> Unwrapped | None:
    """``words`` with the wrappers that run their arguments taken off; None when a program's
    name is not known, or kubectl runs something other than ``exec``."""
    wrappers: list[tuple[str, Position]] = []
    words = list(words)
    while words:
        base = program_name(words[0])
        if base is None:
            return None
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
                return None
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
    return Unwrapped(tuple(words), environment, tuple(wrappers), env_cleared)


@dataclass(frozen=True)
class SshCommand:
    """``ssh [options] [user@]host [CMD]``: the host, and the script it runs there."""

    remote: Remote
    script: Word | None  # the text the host's shell reads (None: an interactive session)
    origin: Position  # where that text starts in the file


def read_ssh(command: Command, words: Sequence[Word], budget: WorkBudget) -> SshCommand | None:
    """What ``ssh`` runs where (``words``: the command, ssh first); None without a host."""
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
        return None
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
                        budget,
                    )
                    or text
                )
    elif heredoc is not None:
        text = heredoc.expanded
        origin = heredoc.position
    remote = Remote(destination, user, port, identity, heredoc, command, target)
    return SshCommand(remote, text, origin)


@dataclass(frozen=True)
class DockerRun:
    """``docker run [options] IMAGE CMD``: the container, and what runs in it."""

    container: Container
    environment: dict[str, EnvEntry]  # only the ``-e`` variables reach the container
    words: tuple[Word, ...]  # CMD


def read_docker(
    command: Command, words: Sequence[Word], environment: dict[str, EnvEntry]
) -> DockerRun | None:
    """What ``docker run`` (or ``create``) runs in which container; None when it runs nothing
    this reader can follow (another docker command, no image, the image's own command)."""
    if len(words) < 2 or words[1].text not in ("run", "create"):
        return None
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
                value_word = words[index - 1].without_first(len(flag) + 1)
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
        return None
    image = words[index].text or words[index].shown()  # "${IMAGE}": unknown, still an image
    inner = words[index + 1 :]
    container = Container(image, gpus, shm, tuple(ports), tuple(volumes), tuple(options), command)
    if not inner:
        return None
    return DockerRun(container, env, tuple(inner))


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
        and posixpath.basename(joined[0]) in SHELLS
        and all(part.startswith("-") and "c" not in part for part in joined[1:])
    )


def _joined(words: Sequence[Word]) -> Word:
    parts: list[Part] = []
    for index, word in enumerate(words):
        if index:
            parts.append(" ")
        parts.extend(word.parts)
    return Word(tuple(parts), words[0].position, " ".join(w.source for w in words))


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
