"""``sglang <subcommand>`` for orch's SGLang stand-in (NOT SGLang); only ``serve`` exists here."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["serve"]:
        from sglang._standin.server import main as serve

        return serve(args[1:], entry="serve")
    parser = argparse.ArgumentParser(prog="sglang")
    subcommands = parser.add_subparsers(dest="subcommand", required=True)
    subcommands.add_parser(
        "serve", help="Launch the SGLang server (orch's stand-in).", add_help=False
    )
    parser.parse_args(args)  # prints usage and exits 2 for anything but serve
    return 2


if __name__ == "__main__":
    sys.exit(main())
