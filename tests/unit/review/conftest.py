from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.review.repo import ProfilesRepo

BASE = """\
abstract: true
sglang: "0.5.23"
host: gpu-a
model:
  path: /models/Qwen3.6-27B
gpu:
  type: H200
  devices: [0]
args:
  context_length: 32768
"""


@pytest.fixture
def repo(tmp_path: Path) -> ProfilesRepo:
    """base (abstract) <- mid <- leaf; own overrides context_length; other is unrelated."""
    made = ProfilesRepo(tmp_path / "team")
    made.write("base.yaml", BASE)
    made.write("mid.yaml", "extends: base\nargs:\n  mem_fraction_static: 0.8\n")
    made.write("leaf.yaml", "extends: mid\nport: 30001\n")
    made.write("own.yaml", "extends: base\nport: 30002\nargs:\n  context_length: 8192\n")
    made.write(
        "other.yaml",
        'sglang: "0.5.23"\nhost: gpu-b\nmodel:\n  path: /models/x\n'
        "args:\n  context_length: 32768\n",
    )
    made.commit("profiles")
    return made
