"""``orch diff``: a change to the profiles repository, reviewed before it ships."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from orchestrator.cli.arguments import find_profiles_dir
from orchestrator.cli.output import Output
from orchestrator.errors import ExitCode, UsageError


def handle_diff(args: argparse.Namespace, output: Output) -> int:
    from orchestrator.cli.show import review as show_review
    from orchestrator.commands import review

    if args.model_config is not None and args.local_sglang is None:
        raise UsageError("--model-config goes with --local-sglang", "add --local-sglang")
    if args.remote and args.local_sglang is not None:
        raise UsageError("--remote plans on the hosts, --local-sglang here: give one or the other")
    profiles = find_profiles_dir(args.profiles, Path.cwd())
    request = review.Request(
        words=tuple(args.words),
        local_sglang=args.local_sglang,
        remote=args.remote,
        model_config=args.model_config,
        status=args.status,
    )
    result = review.run(profiles, request, local_python=sys.executable, redactor=output.redact)
    if args.json:
        output.print(json.dumps(show_review.as_json(result), indent=2, default=str))
    elif args.format == "markdown":
        from orchestrator.cli.show import review_markdown

        output.print(review_markdown.document(result, args.comment_limit).rstrip("\n"))
    else:
        output.print(show_review.text(result, wide=args.wide).rstrip("\n"))
    return ExitCode.CHANGES if result.changed else ExitCode.OK
