"""orch's command line: every subcommand, its options, its help and examples (argparse).

No behaviour here: ``main`` dispatches on ``args.command`` to the handler (``cmd_*``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from orchestrator import __version__
from orchestrator.cli.arguments_export import add_export
from orchestrator.cli.arguments_review import add_review
from orchestrator.cli.arguments_sync import add_sync
from orchestrator.cli.options import lock_wait_option
from orchestrator.errors import ExitCode
from orchestrator.profile.bundled import bundled_profiles

PROFILES_ENV = "ORCH_PROFILES"


ALL_NODES = -1  # `--node all`


def _rank_or_all(text: str) -> int:
    if text == "all":
        return ALL_NODES
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a rank (0, 1, ...) or all, got {text!r}")
    return int(text)


def find_profiles_dir(explicit: str | None, cwd: Path) -> Path:
    """``--profiles`` > ``$ORCH_PROFILES`` > the nearest ``profiles/`` above the working
    directory (a team's repo) > the profiles shipped with orch (the embedded default)."""
    if explicit:
        return Path(explicit).expanduser()
    if from_env := os.environ.get(PROFILES_ENV):
        return Path(from_env).expanduser()
    for directory in (cwd, *cwd.parents):
        candidate = directory / "profiles"
        if candidate.is_dir() and any(candidate.glob("*.yaml")):
            return candidate
    return bundled_profiles()


def parser() -> argparse.ArgumentParser:
    """The whole command line; each subcommand sets ``command`` for dispatch."""
    root = argparse.ArgumentParser(
        prog="orch",
        description="Launch SGLang servers from profiles in git, and verify what they received.",
        epilog="Exit codes: docs/exit-codes.md. Profile format: docs/profiles.md.",
    )
    root.add_argument("--version", action="version", version=f"orch {__version__}")
    root.add_argument(
        "--profiles",
        metavar="DIR",
        help=f"profile directory (default: ${PROFILES_ENV}, else the nearest profiles/ above "
        "the working directory, else orch's bundled profiles)",
    )
    root.add_argument("--debug", action="store_true", help="show tracebacks of errors")
    commands = root.add_subparsers(dest="command", metavar="COMMAND", required=True)

    render = commands.add_parser(
        "render",
        help="show exactly what a profile launches: argv and env, no shell involved",
        description="Render a profile into the argv and environment the server will receive.",
    )
    render.add_argument("profile", metavar="PROFILE")
    form = render.add_mutually_exclusive_group()
    form.add_argument(
        "--json", action="store_true", help='print {"argv": [...], "env": {...}} (secrets redacted)'
    )
    form.add_argument(
        "--script", action="store_true", help="print the bash launcher script for running by hand"
    )
    form.add_argument("--one-line", action="store_true", help="print the command on one line")
    render.add_argument(
        "--node",
        metavar="RANK",
        type=int,
        help="a launch group's rank only (default: every rank; --script needs one)",
    )
    _replica_option(render, "one replica's command only (default: every replica's)")
    render.set_defaults(command="render")

    add_export(commands)

    importing = commands.add_parser(
        "import",
        help="turn launch scripts into profiles (--check: find what is wrong in them)",
        description="Read launch scripts with a real shell parser (bash as it would run them: "
        "quoting, continuations, heredocs, ssh, docker run, variables) and write the profile of "
        "each SGLang server they start, to the profiles directory, never over an existing file. "
        "What orch does itself (nohup, &, > log, sleep; grep, pkill) is dropped and said; a value "
        "the script does not determine is a placeholder until --set gives it (docs/import.md).",
    )
    importing.add_argument(
        "scripts",
        metavar="SCRIPT",
        nargs="+",
        help="launch scripts (- for standard input); "
        "one per node of a multi-node server: they become one group",
    )
    importing.add_argument(
        "--check",
        action="store_true",
        help="report what is wrong in the scripts (file:line:col, the fix in orch's terms) and "
        "write nothing; exit 1 when anything is found",
    )
    importing.add_argument(
        "--name", metavar="NAME", help="the profile's name (default: the script's)"
    )
    importing.add_argument(
        "--host",
        metavar="HOST[,HOST...]",
        help="the host of hosts.yaml the server runs on "
        "(default: the script's ssh target, else local); a multi-node server's ranks in order",
    )
    importing.add_argument(
        "--sglang",
        metavar="VERSION",
        help="the SGLang version the script runs (default: an "
        "image tag the script names, else the newest whose flags accept the script)",
    )
    importing.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        dest="settings",
        help="a variable the script does not set (repeatable; NAME may be 1, 2 ... for $1, $2)",
    )
    importing.add_argument(
        "--extends", metavar="PROFILE", help="write only what differs from this profile"
    )
    importing.add_argument(
        "--launch", metavar="N", type=int, help="import only the Nth server the scripts start"
    )
    importing.add_argument(
        "-o", "--output", metavar="FILE", help="write here instead (- for standard output)"
    )
    importing.add_argument("--json", action="store_true", help="with --check: the findings as JSON")
    importing.set_defaults(command="import")

    validate = commands.add_parser(
        "validate",
        help="check profiles before anything runs (all of them when none is named)",
        description="Validate profiles against SGLang's argument table of their version.",
    )
    validate.add_argument("names", metavar="PROFILE", nargs="*")
    validate.add_argument("--strict", action="store_true", help="treat warnings as errors (for CI)")
    validate.set_defaults(command="validate")

    listing = commands.add_parser("profiles", help="list the profiles and the hosts they run on")
    listing.set_defaults(command="profiles")

    up = commands.add_parser(
        "up",
        help="preflight, push and start a profile's server under the remote agent; follow it",
        description="Start a profile's server supervised on its host and stream its startup. "
        "Idempotent: the same plan already running is followed, not started twice.",
    )
    up.add_argument("profile", metavar="PROFILE")
    up.add_argument("--replace", action="store_true", help="stop a different running launch first")
    _replica_option(up, "start this replica only (default: every replica, at once)")
    _launch_options(up)
    lock_wait_option(up)
    up.set_defaults(command="up")

    down = commands.add_parser(
        "down",
        help="stop a profile's server and sweep its processes",
        description="SIGTERM to the server's process group, up to the profile's stop_timeout_s "
        "seconds for it to drain, then SIGKILL, then a sweep of any process of the run that "
        "escaped the group. Says what it sent and how long it may wait before it waits.",
    )
    down.add_argument("profile", metavar="PROFILE")
    _take_over_option(down)
    down.add_argument(
        "--timeout",
        type=float,
        metavar="S",
        help="seconds to let the server drain before SIGKILL, for this stop "
        "(default: the profile's stop_timeout_s)",
    )
    _replica_option(down, "stop this replica only (default: every replica, at once)")
    lock_wait_option(down)
    down.set_defaults(command="down")

    restart = commands.add_parser(
        "restart",
        help="stop a profile's server, then up with up's checks",
        description="orch down, then orch up: the same preflight, plan gate and follow.",
    )
    restart.add_argument("profile", metavar="PROFILE")
    _replica_option(restart, "restart this replica only (default: every replica)")
    _launch_options(restart)
    restart.add_argument(
        "--rolling",
        action="store_true",
        help="replicas behind their gateway (router:), one at a time without dropping a "
        "request: each out of the gateway, idle, stopped, relaunched with the profile as it is "
        "now, checked, registered, soaked; a failure puts that replica back on its previous "
        f"launch and stops the roll (exit {ExitCode.ROLL})",
    )
    restart.add_argument(
        "--max-unavailable",
        type=int,
        default=1,
        metavar="N",
        help="replicas out at once after the first (default 1); the others must stay ready",
    )
    restart.add_argument(
        "--drain-timeout",
        type=float,
        metavar="S",
        help="how long a replica out of the gateway may take to go idle (default: "
        "router.drain_timeout_s); then it is stopped all the same, and that is said",
    )
    restart.add_argument(
        "--soak",
        type=float,
        default=30.0,
        metavar="S",
        help="how long each relaunched replica must serve healthy before the next goes "
        "(default 30)",
    )
    lock_wait_option(restart)
    restart.set_defaults(command="restart", replace=False)

    status = commands.add_parser("status", help="state of deployments: pid, uptime, restarts ...")
    status.add_argument("names", metavar="PROFILE", nargs="*")
    status.add_argument("--all", action="store_true", help="every launchable profile")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.add_argument(
        "--wide", action="store_true", help="the whole last failure, the origin of each launch"
    )
    status.add_argument(
        "--load",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="each READY server's load now (/v1/loads, read on its host, 1 s at most): "
        "RUN/WAIT, KV%%, TOK/S, HIT%%, ACCEPT, CAP; a stopped one's last figures and their age "
        "(default; --no-load: the table without them, no read of the servers)",
    )
    status.add_argument(
        "--watch",
        nargs="?",
        type=float,
        const=2.0,
        metavar="SECONDS",
        help="redraw the table (with --load) every SECONDS (default 2) until Ctrl-C; not on a "
        "terminal: each refresh printed after the previous one",
    )
    status.set_defaults(command="status")

    logs = commands.add_parser(
        "logs",
        help="a run's server log (reads only what it shows)",
        description="The tail of a run's server.log. With -f, what follows, across the "
        "deployment's restarts (a marker line between runs, each new run from its start) and "
        "log rotations, until the deployment ends: then the exit code is the last run's crash "
        "class (docs/exit-codes.md), 0 when it was stopped on request.",
    )
    logs.add_argument("profile", metavar="PROFILE")
    logs.add_argument(
        "-f", "--follow", action="store_true", help="keep printing new lines, and the next runs"
    )
    logs.add_argument(
        "--run",
        metavar="ID",
        help="a run id or a unique prefix of one (0003), or -1 for the last run, -2 for the one "
        "before (default: the current run); `orch runs PROFILE` lists them",
    )
    logs.add_argument("-n", "--lines", type=int, default=100, help="lines of the tail to show")
    logs.add_argument(
        "--node",
        metavar="RANK",
        type=_rank_or_all,
        default=0,
        help="a launch group's rank (default 0: the one that serves the API), or `all`: every "
        "rank's lines, each prefixed with its rank",
    )
    _replica_option(logs, "the replica whose log it is (a profile with `replicas:`)")
    logs.set_defaults(command="logs")

    runs = commands.add_parser(
        "runs",
        help="a deployment's runs (server starts): start, end, duration, verdict",
        description="Every run of a profile's deployment, from the agent's events: when it "
        "started and ended, how long it ran, how long it took to READY, and its verdict "
        "(crash class and exit status or signal). Run ids (or a prefix, -1, -2) go to "
        "`orch logs --run`.",
    )
    runs.add_argument("profile", metavar="PROFILE")
    runs.add_argument("--json", action="store_true", help="machine-readable output")
    runs.add_argument(
        "--node",
        metavar="RANK",
        type=int,
        default=0,
        help="a launch group's rank (default 0: the one that serves the API)",
    )
    _replica_option(runs, "the replica whose runs they are (a profile with `replicas:`)")
    runs.set_defaults(command="runs")

    plan = commands.add_parser(
        "plan",
        help="predict the effective configuration with the target's real SGLang, no server",
        description="Run the rendered command line through SGLang's own parsing and resolution "
        "(on the host with the profile's python, or with --local-sglang in a local venv of the "
        "same version, the GPU simulated from gpu.type): argparse and resolution errors with "
        "the function that raised, the predicted value of every field the profile sets, and "
        "the SGLang step behind each change.",
    )
    plan.add_argument("profile", metavar="PROFILE")
    plan.add_argument("--json", action="store_true", help="the stable machine-readable format")
    plan.add_argument("--all", action="store_true", help="also the defaults SGLang fills in")
    plan.add_argument("--wide", action="store_true", help="values whole, never cut")
    plan.add_argument(
        "--fit",
        action="store_true",
        help="suggest profile edits that make the launch fit, or leave more concurrency "
        "(tp_size with gpu.devices, mem_fraction_static, the mamba cache ...), each planned "
        f"through SGLang's own resolution; exit {ExitCode.NO_FIT} when none is found",
    )
    _local_sglang_arguments(plan)
    plan.set_defaults(command="plan")

    lock = commands.add_parser(
        "lock",
        help="write profiles/<name>.lock.json: the predicted effective values, for review in git",
    )
    lock.add_argument("profile", metavar="PROFILE")
    _local_sglang_arguments(lock)
    lock.set_defaults(command="lock")

    upgrade = commands.add_parser(
        "upgrade",
        help="what moving a profile to another SGLang release changes, before a GPU sees it",
        description="Read the profile against both releases: fields renamed or removed (the "
        "argument tables), every effective value that changes with SGLang's own provenance on "
        "each side and the memory budget of each (SGLang's real resolution in a local venv of "
        "each release, the GPU simulated from gpu.type). A pinned field that would move, or a "
        "field the release lacks, blocks the upgrade (exit 17). --write renames the keys in "
        "place, sets `sglang:` and refreshes the lock.",
    )
    upgrade.add_argument("profile", metavar="PROFILE")
    upgrade.add_argument("--to", required=True, metavar="VERSION", help="the SGLang release")
    upgrade.add_argument(
        "--from-sglang",
        metavar="PYTHON",
        help="a local python with the profile's current SGLang (default: the venv cache, "
        "~/.cache/orch/sglang-venvs/VERSION, where scripts/build-sglang-venv.sh builds it)",
    )
    upgrade.add_argument(
        "--to-sglang",
        metavar="PYTHON",
        help="a local python with the target release (same default)",
    )
    upgrade.add_argument(
        "--model-config",
        metavar="FILE",
        type=Path,
        help="the model's config.json, when model.path is not on this machine",
    )
    upgrade.add_argument(
        "--write", action="store_true", help="apply the edits and refresh the lock"
    )
    upgrade.add_argument("--json", action="store_true", help="the stable machine-readable format")
    upgrade.add_argument("--wide", action="store_true", help="values and provenance whole")
    upgrade.set_defaults(command="upgrade")

    diff = commands.add_parser(
        "diff-effective",
        help="compare the profile with what the server received and what SGLang resolved",
        description="Field by field: the profile, the server process's command line and "
        "environment (/proc on the host), and SGLang's resolved configuration (/server_info, "
        "else the server_args= log line). With --url, the server is asked over HTTP from this "
        "machine instead. Exit 0 when every field the profile sets matches, 1 on drift.",
    )
    diff.add_argument("profile", metavar="PROFILE")
    diff.add_argument("--json", action="store_true", help="the stable machine-readable format")
    diff.add_argument(
        "--all", action="store_true", help="also the fields left to SGLang that it filled in"
    )
    diff.add_argument("--wide", action="store_true", help="values whole, never cut")
    diff.add_argument("--pid", type=int, help="the server's pid (a server not started by orch)")
    diff.add_argument("--log", metavar="PATH", help="its log on the host, for the server_args line")
    diff.add_argument(
        "--url",
        metavar="URL",
        help="ask the server at URL from this machine, without SSH (a pod behind kubectl "
        "port-forward, a SkyPilot or dstack cluster, a server started by hand): what SGLang "
        "resolved (/server_info) and, from 0.5.20, its launch_command; the profile's api_key "
        "is sent as a Bearer token",
    )
    diff.add_argument(
        "--node",
        "--rank",
        dest="node",
        type=int,
        metavar="RANK",
        help="a launch group's node N only (default: every node, and the nodes compared with "
        "each other); with --url, the node whose profile the server is compared with",
    )
    diff.set_defaults(command="diff-effective")

    add_review(commands)
    add_sync(commands)

    init = commands.add_parser(
        "init",
        help="scaffold a team's profiles repository (profiles/, known_hosts, a pre-commit hook, "
        "a CI workflow)",
        description="Write profiles/hosts.yaml, an example profile, profiles/known_hosts, a "
        "pre-commit hook running `orch validate --strict` and a GitHub Actions workflow (the "
        "same, and `orch diff` posted on each pull request) into DIR. Never overwrites a file.",
    )
    init.add_argument("directory", metavar="DIR", nargs="?", default=".", type=Path)
    init.set_defaults(command="init")

    hosts = commands.add_parser(
        "hosts",
        help="host keys: orch hosts trust HOST",
        description="Host keys: `orch hosts trust HOST` shows a host's key and pins it.",
    )
    # not required of argparse, whose error would name this dest: `orch hosts` alone is a
    # usage error that says what to type (cmd_profiles.handle_hosts)
    host_commands = hosts.add_subparsers(dest="hosts_command", metavar="SUBCOMMAND")
    hosts.set_defaults(command="hosts")
    trust = host_commands.add_parser(
        "trust", help="show a host's key fingerprint and pin it in profiles/known_hosts"
    )
    trust.add_argument("host", metavar="HOST")
    trust.add_argument("--yes", action="store_true", help="pin without asking")
    trust.set_defaults(command="hosts-trust")
    _describe(commands)
    return root


# What each subcommand's --help ends with: examples a user can paste.
EXAMPLES: dict[str, str] = {
    "export": "orch export k8s-lws qwen35-397b-2x8-h200 -o lws.yaml && kubectl apply -f lws.yaml\n"
    "  orch export skypilot qwen36-mtp-b200 -o task.yaml && sky launch task.yaml\n"
    "  orch diff-effective qwen36-mtp-b200 --url http://127.0.0.1:30000  # after port-forward\n"
    "  orch export prometheus-sd --all -o /etc/prometheus/orch.json  # READY servers' targets",
    "import": "orch import launch.sh --host b200-1\n"
    "  orch import node0.sh node1.sh --name qwen35-2x8 --set MODEL=/models/Qwen3.5-397B-A17B\n"
    "  orch import --check launch.sh --sglang 0.5.23   # a linter, in CI",
    "render": "orch render qwen36-mtp-b200\n  orch render qwen36-mtp-b200 --script > launch.sh",
    "validate": "orch validate\n  orch validate --strict qwen36-mtp-b200   # in CI",
    "profiles": "orch profiles",
    "up": "orch up qwen36-mtp-b200\n  orch up qwen36-mtp-b200 --replace      # a changed profile",
    "down": "orch down qwen36-mtp-b200\n  orch down qwen36-mtp-b200 --timeout 60",
    "restart": "orch restart qwen36-mtp-b200",
    "status": "orch status\n  orch status qwen36-mtp-b200 --json",
    "logs": "orch logs qwen36-mtp-b200 -f\n  orch logs qwen36-mtp-b200 --run -2 -n 500",
    "runs": "orch runs qwen36-mtp-b200",
    "plan": "orch plan qwen36-mtp-b200\n  orch plan qwen36-mtp-b200 --fit\n"
    "  orch plan qwen36-mtp-b200 --local-sglang "
    "~/.cache/orch/sglang-venvs/0.5.11/bin/python --model-config config.json",
    "lock": "orch lock qwen36-mtp-b200 && git diff profiles/qwen36-mtp-b200.lock.json",
    "upgrade": "orch upgrade qwen36-mtp-b200 --to 0.5.23 --model-config config.json\n"
    "  orch upgrade qwen36-mtp-b200 --to 0.5.23 --model-config config.json --write",
    "diff-effective": "orch diff-effective qwen36-mtp-b200\n"
    "  orch diff-effective qwen36-mtp-b200 --json --all\n"
    "  orch diff-effective qwen36-mtp-b200 --url http://127.0.0.1:30000  # kubectl port-forward",
    "diff": "orch diff                                # HEAD against your edits\n"
    "  orch diff main..HEAD qwen36-mtp-b200\n"
    "  orch diff origin/main...HEAD --format markdown  # a pull request's comment\n"
    "  orch diff main --local-sglang --model-config config.json  # SGLang's own resolution",
    "sync": "orch sync --dry-run                       # what differs from HEAD\n"
    "  orch sync --on team-a --yes\n"
    "  orch sync --rev v12 --max-unavailable 2 --max-failures 3",
    "hosts": "orch hosts trust b200-1",
    "init": "orch init ~/src/team-profiles",
}


def _describe(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Every subcommand: a description (its one-line help when it has no longer one), its
    examples, and its defaults shown in --help."""
    helps = {action.dest: action.help for action in commands._choices_actions}
    for name, sub in commands.choices.items():
        sub.formatter_class = _HelpFormatter
        if not sub.description:
            sub.description = (helps.get(name) or "").capitalize()
        if name in EXAMPLES:
            sub.epilog = "example:\n  " + EXAMPLES[name]


class _HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Examples kept as written; an option's default shown where it says something (not
    None, not a switch's False) and the help does not already."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        shown = action.default not in (None, False, argparse.SUPPRESS)
        if shown and action.option_strings and "default" not in text:
            text += " (default: %(default)s)"
        return text


def _launch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-plan", action="store_true", help="skip SGLang's own parse-and-resolve preflight"
    )
    parser.add_argument(
        "--force", action="store_true", help="launch even when the plan fails or moves a pin"
    )
    _no_cache_option(parser)
    _take_over_option(parser)


def _replica_option(parser: argparse.ArgumentParser, help_text: str) -> None:
    parser.add_argument("--replica", metavar="I", type=_replica_index, help=help_text)


def _replica_index(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a replica's index (0, 1, ...), got {text!r}")
    return int(text)


def _take_over_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--take-over",
        action="store_true",
        help="act on a deployment of this name launched from another profiles repository",
    )


def _no_cache_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--no-cache",
        action="store_true",
        help="plan afresh, not from the plan cache (the new answer replaces the kept one)",
    )


def _local_sglang_arguments(parser: argparse.ArgumentParser) -> None:
    _no_cache_option(parser)
    parser.add_argument(
        "--local-sglang",
        metavar="PYTHON",
        help="plan with this local python (a venv of the profile's SGLang version; "
        "scripts/build-sglang-venv.sh builds one), the GPU simulated from gpu.type",
    )
    parser.add_argument(
        "--model-config",
        metavar="FILE",
        type=Path,
        help="the model's config.json, when model.path is not on this machine",
    )
