"""SGLang's plugins, as the planning probe runs them (0.5.11 and 0.5.23 both have them: their
entry points call ``sglang.srt.plugins.load_plugins()`` before parsing). The same test plugin
as the stand-in tier's (tests/standin/sglang_plugin.py), installed on the request's PYTHONPATH;
each probe imports SGLang (~5-15 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.standin.sglang_plugin import (
    PLUGIN_CHUNKED_PREFILL,
    PLUGIN_FLAG,
    PLUGIN_NAME,
    expected_hook,
    run_probe,
    write_plugin,
)

FIXTURE = {"0.5.11": "sglang_0511", "0.5.23": "sglang_0523"}
MODEL = "/models/Qwen3.6-27B"  # not on this machine: its config.json goes with the request
MODEL_CONFIG = REPO / "standin" / "models" / "Qwen3.6-27B" / "config.json"  # the real one's copy


@pytest.mark.parametrize("version", ["0.5.11", "0.5.23"])
def test_a_plugin_that_adds_an_argument_and_a_default_is_in_the_plan(
    version: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    python: Path = request.getfixturevalue(FIXTURE[version])
    plugins = write_plugin(tmp_path / "plugins")
    args = ["--model-path", MODEL, "--context-length", "8192", PLUGIN_FLAG]

    def probe(**env: str) -> dict[str, Any]:
        return run_probe(
            python,
            tmp_path,
            args,
            {"PYTHONPATH": str(plugins), **env},
            simulate_h200=True,
            model_config=(MODEL, MODEL_CONFIG),
        )

    answer = probe()
    assert answer["sglang_version"] == version
    assert answer["standin"] is False
    assert answer["ok"] is True, answer.get("error")
    assert answer["plugins"] == [PLUGIN_NAME]
    assert answer["plugin_hooks"] == [expected_hook()]
    raw, effective, defaults = answer["raw"], answer["effective"], answer["defaults"]
    assert defaults["chunked_prefill_size"] is None  # ServerArgs' own default ...
    assert raw["chunked_prefill_size"] == PLUGIN_CHUNKED_PREFILL  # ... the plugin's parser's
    assert effective["chunked_prefill_size"] == PLUGIN_CHUNKED_PREFILL  # and SGLang keeps it

    # SGLANG_PLUGINS (SGLang's own whitelist) without it: SGLang's parser lacks the flag
    skipped = probe(SGLANG_PLUGINS="someone_else")
    assert (skipped["plugins"], skipped["plugin_hooks"]) == ([], [])
    error = skipped["error"]
    assert (error["stage"], error["exit_code"]) == ("parse", 2)
    assert error["message"] == f"sglang serve: error: unrecognized arguments: {PLUGIN_FLAG}"
