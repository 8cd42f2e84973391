"""``orch export prometheus-sd`` read by a real Prometheus (Debian's ``prometheus`` package, which
``.ci/run`` installs; skipped, saying so, where its binaries are absent): ``promtool check
config`` accepts a config whose ``file_sd_configs`` names the exported file; a Prometheus started
here on a free loopback port scrapes the stand-in (SGLang's format, ``metrics: true``) with orch's
labels beside SGLang's; after ``orch down`` and a re-export, the target is gone."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from orchestrator.errors import ExitCode
from tests.e2e.conftest import Workspace, free_port

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
pytestmark = pytest.mark.skipif(
    PROMETHEUS is None or PROMTOOL is None,
    reason="no prometheus/promtool binary (Debian package `prometheus`; .ci/run installs it)",
)

DEADLINE_S = 20.0


def _config(targets: Path) -> str:
    return (
        "global:\n"
        "  scrape_interval: 1s\n"
        "  scrape_timeout: 1s\n"
        "  evaluation_interval: 1s\n"
        "scrape_configs:\n"
        "  - job_name: orch-sglang\n"
        "    file_sd_configs:\n"
        f"      - files: [{json.dumps(str(targets))}]\n"
        "        refresh_interval: 1s\n"
    )


def _api(port: int, path: str, **query: str) -> Any:
    url = f"http://127.0.0.1:{port}/api/v1/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=5) as answer:  # noqa: S310 (loopback, built here)
        document = json.load(answer)
    assert document["status"] == "success", document
    return document["data"]


def _until(what: str, check: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + DEADLINE_S
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as exc:  # Prometheus not listening yet
            last = exc
        else:
            if last:
                return last
        time.sleep(0.25)
    raise AssertionError(f"{what}: not within {DEADLINE_S} s; last: {last!r}")


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A Prometheus on a free loopback port, its file_sd file (empty list for now)."""
    assert PROMETHEUS is not None
    targets = tmp_path / "targets.json"
    targets.write_text("[]\n")
    config = tmp_path / "prometheus.yml"
    config.write_text(_config(targets))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("w")
    process = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        _until("prometheus up", lambda: _api(port, "status/buildinfo"))
        yield port, targets
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


def test_promtool_accepts_a_config_reading_the_exported_file(
    local_workspace: Workspace, tmp_path: Path
) -> None:
    assert PROMTOOL is not None
    local_workspace.profile("idle", "metrics: true\n")  # not running: an empty list
    targets = tmp_path / "targets.json"
    exported = local_workspace.orch("export", "prometheus-sd", "-o", str(targets))
    assert exported.code == ExitCode.OK, exported.err
    assert json.loads(targets.read_text()) == []
    config = tmp_path / "prometheus.yml"
    config.write_text(_config(targets))
    checked = subprocess.run(
        [PROMTOOL, "check", "config", str(config)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("where", ["local_workspace", "ssh_workspace"])
def test_prometheus_scrapes_the_standin_through_the_export_and_drops_it_after_down(
    where: str, request: pytest.FixtureRequest, prometheus: tuple[int, Path]
) -> None:
    """On this machine (host ``local``) and over SSH (host ``box`` at 127.0.0.1: the target is
    the host's address as orch reaches it; bound to 127.0.0.1 there, which a note says)."""
    assert PROMTOOL is not None
    space: Workspace = request.getfixturevalue(where)
    port, targets = prometheus
    name = space.profile("svc", "metrics: true\n")
    up = space.orch("up", name)
    assert up.code == ExitCode.OK, up.err

    exported = space.orch("export", "prometheus-sd", name, "-o", str(targets))
    assert exported.code == ExitCode.OK, exported.err
    (group,) = json.loads(targets.read_text())
    checked = subprocess.run(
        [PROMTOOL, "check", "config", str(targets.parent / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr

    def active() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = _api(port, "targets", state="active")["activeTargets"]
        return found

    (target,) = _until("the target scraped", lambda: [t for t in active() if t["health"] == "up"])
    assert target["scrapeUrl"] == f"http://{group['targets'][0]}/metrics"
    labels = target["labels"]
    assert labels["orch_profile"] == "svc"
    assert labels["orch_deployment"] == "svc"
    assert labels["orch_rank"] == "0"
    assert labels["orch_host"] == space.host_name
    if where == "ssh_workspace":
        assert "bound to 127.0.0.1 on box: only box itself can scrape" in exported.out
    assert labels["orch_sglang_version"]  # the host's SGLang: the stand-in says 0.5.23

    def running() -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = _api(port, "query", query="sglang:num_running_reqs")["result"]
        return found

    (series,) = _until("sglang:num_running_reqs queryable", running)
    metric = series["metric"]
    # SGLang's own labels and orch's, side by side
    assert metric["model_name"] == "qwen-test"
    assert metric["engine_type"] == "unified"
    assert metric["tp_rank"] == "0"
    assert metric["orch_profile"] == "svc"
    assert metric["orch_deployment"] == "svc"
    assert series["value"][1] == "0"  # idle, as /v1/loads says

    down = space.orch("down", name)
    assert down.code == ExitCode.OK, down.err
    again = space.orch("export", "prometheus-sd", "--all", "-o", str(targets))
    assert again.code == ExitCode.OK, again.err
    assert json.loads(targets.read_text()) == []
    _until("the target gone", lambda: not active())
