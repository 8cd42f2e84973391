"""``router:`` in a profile: the gateway's URL, its key from the environment only, labels, the
drain and readiness bounds; each mistake one located error with a hint."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import InvalidProfile
from orchestrator.model import SecretRef
from orchestrator.profile.store import ProfileStore

BASE = """\
sglang: "0.5.23"
host: local
model:
  path: /models/x
"""


def _store(tmp_path: Path, body: str) -> ProfileStore:
    (tmp_path / "p.yaml").write_text(BASE + body)
    return ProfileStore(tmp_path)


def test_a_router_with_its_key_from_the_environment(tmp_path: Path) -> None:
    store = _store(
        tmp_path,
        "router:\n  url: http://10.0.0.5:30000/\n  api_key: {from_env: SMG_KEY}\n"
        "  labels: {team: serving, tier: 1}\n  drain_timeout_s: 60\n"
        "  metrics_url: http://10.0.0.5:29000/\n",
    )
    router = store.load("p").profile.router
    assert router is not None
    assert router.url == "http://10.0.0.5:30000"
    assert router.api_key == SecretRef("SMG_KEY")
    assert dict(router.labels) == {"team": "serving", "tier": "1"}
    assert router.drain_timeout_s == 60
    assert router.ready_timeout_s == 120
    assert router.metrics_url == "http://10.0.0.5:29000"


def test_no_router_is_none(tmp_path: Path) -> None:
    assert _store(tmp_path, "").load("p").profile.router is None


def test_a_router_is_inherited_like_any_section(tmp_path: Path) -> None:
    (tmp_path / "base.yaml").write_text(
        "abstract: true\nrouter:\n  url: https://gw.example.net:8443\n"
    )
    (tmp_path / "p.yaml").write_text("extends: base\n" + BASE)
    router = ProfileStore(tmp_path).load("p").profile.router
    assert router is not None
    assert router.url == "https://gw.example.net:8443"


@pytest.mark.parametrize(
    ("body", "where", "said"),
    [
        ("router:\n  url: gateway:30000\n", "router.url", "expected http://HOST:PORT"),
        ("router:\n  url: http://gateway\n", "router.url", "expected http://HOST:PORT"),
        (
            "router:\n  url: http://gw:30000\n  metrics_url: gw:29000\n",
            "router.metrics_url",
            "expected http://HOST:PORT[/PATH]",
        ),
        ("router:\n  labels: {a: b}\n", "router", "missing `url`"),
        (
            "router:\n  url: http://g:1\n  api_key: hunter2-literal\n",
            "router.api_key",
            "expected {from_env: NAME}",
        ),
        ("router:\n  url: http://g:1\n  drain_timeout_s: -1\n", "router.drain_timeout_s", ""),
        ("router:\n  url: http://g:1\n  colour: red\n", "router.colour", "unknown key"),
        ("router: http://g:1\n", "router", "expected a mapping"),
    ],
)
def test_each_mistake_is_one_located_error(
    tmp_path: Path, body: str, where: str, said: str
) -> None:
    with pytest.raises(InvalidProfile) as raised:
        _store(tmp_path, body).load("p")
    messages = [error.message for error in raised.value.errors]
    assert any(f": {where}: " in m and said in m for m in messages), messages
    assert all("hunter2" not in m for m in messages)  # a literal key is never echoed
