"""``orch plan ... --json --local-sglang PY --model-config F`` through orch's real entry point, in
process: the one way this tier asks for a plan (plain, ``--fit``, ``--all``)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from orchestrator.cli.main import main
from tests.sglang_real.test_memory_real import MODEL_CONFIG


def local_plan(
    root: Path, python: Path, *argv: str, model_config: Path = MODEL_CONFIG
) -> tuple[int, dict[str, Any], str]:
    """(exit code, the --json document, stderr) of ``orch --profiles ROOT ARGV...``."""
    out, err = io.StringIO(), io.StringIO()
    code = main(
        [
            "--profiles",
            str(root),
            *argv,
            "--json",
            "--local-sglang",
            str(python),
            "--model-config",
            str(model_config),
        ],
        out=out,
        err=err,
    )
    assert out.getvalue(), err.getvalue()
    return code, json.loads(out.getvalue()), err.getvalue()
