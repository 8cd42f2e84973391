"""orch's remote agent: supervises one SGLang server on its host. Its commands, each answering
one JSON document on stdout (exit 0, or 3 when it says ``"ok": false``)::

    start  --dir DEPLOYMENT_DIR --spec SPEC.json|- | --previous  # detach a supervisor [--watch S]
    status --dir DEPLOYMENT_DIR                      # state as JSON
    stop   --dir DEPLOYMENT_DIR [--timeout S]        # stop, sweep, report
    runs   --dir DEPLOYMENT_DIR                      # the runs and their logs
    tail   --dir DEPLOYMENT_DIR [--run ID] [--lines N]
    watch  --dir DEPLOYMENT_DIR --run ID [--offset B] [--seconds S]  # a startup, streamed
    adopt  --dir DEPLOYMENT_DIR                      # supervise a server whose supervisor died
    probe  --port P [--model PATH] [--bind ADDR] [--env-file F|-] [--dir D]  # preflight facts
    inspect --dir DIR [--pid P] [--port N] [--env NAME ...]  # diff-effective's facts
    listen --bind ADDR --port P --token T --seconds S [--expect N]  # a probe listener, detached
    reach  --host H --port P --token T --timeout S   # reach one: JSON, exit 0
    survey --workdir W                               # every deployment's status; writes nothing
    reconfigure --dir D --spec - [--live JSON]       # a new spec, its server untouched
    hold   --workdir W --deployment NAME --holder JSON [--wait S]  # the operation lock, held
                                                     # until stdin ends (cmd_hold)

Each command's module is imported when it is asked for: a ``status`` compiles none of the
supervisor's code.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .files import env_file_argument, remove_env_file
from .protocol import PROTOCOL
from .trust import UnsafePath

if TYPE_CHECKING:
    from .cmd_watch import InspectAtReady

DESCRIPTION = "orch's remote agent: supervises one SGLang server on its host."


def main(argv: Sequence[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    env_file = env_file_argument(arguments)
    try:
        result = _dispatch(arguments)
    except UnsafePath as exc:
        result = {
            "protocol": PROTOCOL,
            "ok": False,
            "refused": "unsafe-path",
            "reason": exc.message,
            "hint": exc.hint,
        }
    finally:
        remove_env_file(env_file)
    try:
        sys.stdout.write(json.dumps(result, sort_keys=True) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        if arguments[:1] != ["hold"]:
            raise
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0  # orch went away, which is how a hold ends: released, nobody to tell
    if arguments[:1] == ["reach"]:
        return 0  # an unreachable port is an answer, not the agent's failure: the caller decides
    return 0 if result.get("ok", True) else 3


def _dispatch(argv: Sequence[str]) -> dict[str, Any]:
    parser = argparse.ArgumentParser(prog="orch-agent", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"orch-agent protocol {PROTOCOL}")
    commands = parser.add_subparsers(dest="command", required=True)
    start = commands.add_parser("start")
    start.add_argument("--dir", required=True)
    start_from = start.add_mutually_exclusive_group(required=True)
    start_from.add_argument("--spec")
    # the launch before the current one (spec.previous.json): a failed roll's way back
    start_from.add_argument("--previous", action="store_true")
    # then watch the new run on the same channel (its answer first, as {"start": ...})
    start.add_argument("--watch", type=float, metavar="SECONDS")
    for name in ("status", "runs", "adopt"):
        parsed = commands.add_parser(name)
        parsed.add_argument("--dir", required=True)
        if name == "status":  # a READY server's /v1/loads read now, not only the last kept
            parsed.add_argument("--load", action="store_true")
    watch = commands.add_parser("watch")
    watch.add_argument("--dir", required=True)
    watch.add_argument("--run", required=True)
    watch.add_argument("--offset", type=int, default=0)
    watch.add_argument("--seconds", type=float, default=3600.0)
    for watching in (start, watch):  # inspect once READY (see cmd_watch)
        watching.add_argument("--inspect-port", type=int)
        watching.add_argument("--inspect-host", default="127.0.0.1")
        watching.add_argument("--inspect-env", action="append", default=[])
    tail = commands.add_parser("tail")
    tail.add_argument("--dir", required=True)
    tail.add_argument("--run")
    tail.add_argument("--lines", type=int, default=100)
    tail.add_argument("--bytes-per-line", type=int, default=512)
    stop = commands.add_parser("stop")
    stop.add_argument("--dir", required=True)
    stop.add_argument("--timeout", type=float, default=30.0)
    probe = commands.add_parser("probe")
    probe.add_argument("--port", type=int, required=True)
    probe.add_argument("--model")
    probe.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - checking that nobody holds it
    probe.add_argument("--env-file")
    probe.add_argument("--dir")  # the deployment's status with the facts
    inspect = commands.add_parser("inspect")
    inspect.add_argument("--dir", required=True)
    inspect.add_argument("--pid", type=int)
    inspect.add_argument("--port", type=int)
    inspect.add_argument("--host", default="127.0.0.1")
    inspect.add_argument("--env", action="append", default=[])
    inspect.add_argument("--log")
    listen = commands.add_parser("listen")
    listen.add_argument("--bind", default="0.0.0.0")  # noqa: S104 - the other nodes connect
    listen.add_argument("--port", type=int, required=True)
    listen.add_argument("--token", required=True)
    listen.add_argument("--seconds", type=float, default=60.0)
    listen.add_argument("--expect", type=int, default=0)  # end after this many answers (0: none)
    reach = commands.add_parser("reach")
    reach.add_argument("--host", required=True)
    reach.add_argument("--port", type=int, required=True)
    reach.add_argument("--token", required=True)
    reach.add_argument("--timeout", type=float, default=5.0)
    commands.add_parser("survey").add_argument("--workdir", required=True)
    reconfigure = commands.add_parser("reconfigure")
    reconfigure.add_argument("--dir", required=True)
    reconfigure.add_argument("--spec", required=True)  # "-": {"spec", "launch_script", "live"}
    reconfigure.add_argument("--live")  # a JSON list of {"endpoint", "body"} (else stdin's)
    hold = commands.add_parser("hold")
    hold.add_argument("--workdir", required=True)
    hold.add_argument("--deployment", required=True)
    hold.add_argument("--holder", required=True)  # JSON: user, machine, pid, command, since
    hold.add_argument("--wait", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.command == "hold":
        from .cmd_hold import cmd_hold

        return cmd_hold(args.workdir, args.deployment, args.holder, args.wait)
    if args.command == "start":
        from .cmd_start import cmd_start

        result = cmd_start(args.dir, args.spec or "", previous=args.previous)
        run_id = (result.get("state") or {}).get("run_id") if result.get("ok") else None
        if args.watch is not None and isinstance(run_id, str):
            from .cmd_watch import cmd_watch

            sys.stdout.write(json.dumps({"start": result}, sort_keys=True) + "\n")
            sys.stdout.flush()
            result = cmd_watch(args.dir, run_id, 0, args.watch, _at_ready(args))
    elif args.command == "adopt":
        from .cmd_adopt import cmd_adopt

        result = cmd_adopt(args.dir)
    elif args.command == "status":
        from .cmd_status import cmd_status

        result = cmd_status(args.dir, load=args.load)
    elif args.command == "watch":
        from .cmd_watch import cmd_watch

        result = cmd_watch(args.dir, args.run, args.offset, args.seconds, _at_ready(args))
    elif args.command == "stop":
        from .cmd_stop import cmd_stop

        result = cmd_stop(args.dir, args.timeout)
    elif args.command == "runs":
        from .cmd_runs import cmd_runs

        result = cmd_runs(args.dir)
    elif args.command == "tail":
        from .cmd_tail import cmd_tail

        result = cmd_tail(args.dir, args.run, args.lines, args.bytes_per_line)
    elif args.command == "inspect":
        from .cmd_inspect import cmd_inspect

        result = cmd_inspect(args.dir, args.pid, args.port, args.host, args.env, args.log)
    elif args.command == "listen":
        from .cmd_listen import cmd_listen

        result = cmd_listen(args.bind, args.port, args.token, args.seconds, args.expect)
    elif args.command == "survey":
        from .cmd_survey import cmd_survey

        result = cmd_survey(args.workdir)
    elif args.command == "reconfigure":
        from .cmd_reconfigure import cmd_reconfigure

        result = cmd_reconfigure(args.dir, args.spec, args.live)
    elif args.command == "reach":
        from .cmd_reach import cmd_reach

        result = cmd_reach(args.host, args.port, args.token, args.timeout)
    else:
        from .cmd_probe import cmd_probe

        result = cmd_probe(args.port, args.model, args.bind, args.env_file, args.dir)
    return result


def _at_ready(args: argparse.Namespace) -> InspectAtReady | None:
    """``--inspect-port``: what cmd_watch asks cmd_inspect once the run is READY (None: nothing)."""
    if args.inspect_port is None:
        return None
    from .cmd_watch import InspectAtReady

    return InspectAtReady(args.inspect_port, args.inspect_host, tuple(args.inspect_env))


if __name__ == "__main__":
    raise SystemExit(main())
