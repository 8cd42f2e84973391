"""The POSIX sh script the shell engines (SkyPilot, dstack) run: every literal quoted once, the
rank fields and the secrets the only expansions, the server ``exec``ed.  [pure]"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.errors import RenderError
from orchestrator.export.common import Plan, Word, secret_variable
from orchestrator.model import EnvValue, SecretRef


@dataclass(frozen=True)
class Shell:
    """How a shell engine names its rank variables, and the head's address."""

    rank: str
    nodes: str
    head_setup: str  # a shell line that sets MASTER_ADDR ("" when a variable has it already)
    head: str  # the variable holding the head's address


def _shell_word(word: Word, env: Mapping[str, EnvValue], shell: Shell) -> str:
    if word.literal is not None:
        return shlex.quote(word.literal)
    if word.secret is not None:
        return f'"${{{secret_variable(word.secret, env)}}}"'
    return {
        "dist_init_addr": f'"${{{shell.head}}}:{word.port}"',
        "nnodes": f'"${{{shell.nodes}}}"',
        "node_rank": f'"${{{shell.rank}}}"',
    }[word.rank_field or ""]


def _exports(env: Mapping[str, EnvValue]) -> list[str]:
    """``export NAME=value`` lines: literals quoted; a secret under another name than its
    from_env source copied from the source (which the engine passes in)."""
    lines = []
    for name, value in env.items():
        if isinstance(value, SecretRef):
            if value.env_var != name:
                lines.append(f'export {name}="${{{value.env_var}}}"')
        else:
            lines.append(f"export {name}={shlex.quote(value)}")
    return lines


def shell_script(plan: Plan, shell: Shell) -> str:
    """The POSIX sh script that execs each rank's server: ``set -eu``; shared env; per-rank env
    (and argv, where ranks differ) in a ``case`` on the rank variable; ``exec``."""
    lines = ["set -eu"]
    envs = [command.env for command in plan.commands]
    common = {k: v for k, v in envs[0].items() if all(e.get(k, None) == v for e in envs)}
    lines += _exports(common)
    argvs = [
        [_shell_word(word, command.env, shell) for word in words]
        for words, command in zip(plan.words, plan.commands, strict=True)
    ]
    exec_lines = [_exec(argv) for argv in argvs]
    if plan.nnodes > 1:
        if shell.head_setup:
            lines.append(shell.head_setup)
        lines.append(f'case "${{{shell.rank}}}" in')
        for rank, env in enumerate(envs):
            own = {k: v for k, v in env.items() if k not in common}
            body = _exports(own)
            if len(set(exec_lines)) > 1:
                body.append(exec_lines[rank])
            lines.append(f"  {rank})")
            # indent each entry's first line only: a quoted value's own newlines are its text
            lines += [f"    {entry}" for entry in body] or ["    :"]
            lines.append("    ;;")
        message = shlex.quote(
            f"orch export: {plan.profile.name} has ranks 0-{plan.nnodes - 1}, not "
        )
        lines.append(f'  *) echo {message}"${{{shell.rank}}}" >&2; exit 2 ;;')
        lines.append("esac")
    if len(set(exec_lines)) == 1:
        lines.append(exec_lines[0])
    return "\n".join(lines) + "\n"


def _exec(argv: Sequence[str]) -> str:
    """``exec program args``, one flag per line (continued with a backslash)."""
    parts: list[list[str]] = [["exec"]]
    for word in argv:
        if word.startswith("--"):
            parts.append([])
        parts[-1].append(word)
    return " \\\n    ".join(" ".join(part) for part in parts)


def accelerator(plan: Plan, engine: str) -> str:
    gpu = plan.profile.gpu.type
    if gpu is None:
        raise RenderError(
            f"{plan.profile.source}: gpu.type: {engine} needs the GPU model to ask for",
            "set gpu.type (H200, B200 ...)",
        )
    return f"{gpu.name.replace(' ', '')}:{plan.gpus_per_node}"
