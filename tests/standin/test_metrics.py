"""The stand-in's ``GET /metrics`` (NOT SGLang's, imitating 0.5.23): 404 without
``--enable-metrics`` as FastAPI answers an unmounted path; with it, SGLang's text exposition
(``sglang:`` names, the scheduler collector's labels, one series per reporting scheduler), values
agreeing with ``/v1/loads``; a group's rank >= 1 serves its schedulers' series on its dummy health
server only with ``--enable-metrics-for-all-schedulers``."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

from tests.standin.conftest import READY, Launcher, Running, free_port

SAMPLE = re.compile(r"^(sglang:[a-z_]+)\{([^}]*)\} (\S+)$")
DUMMY = "Dummy health check server started in background thread at 127.0.0.1:{port}"


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """name -> [(labels, value)] of a text exposition; every line is HELP, TYPE or a sample."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        if line.startswith(("# HELP sglang:", "# TYPE sglang:")):
            continue
        matched = SAMPLE.match(line)
        assert matched, line
        labels = dict(re.findall(r'(\w+)="([^"]*)"', matched[2]))
        out.setdefault(matched[1], []).append((labels, float(matched[3])))
    return out


def _start(launcher: Launcher, model_dir: Path, *extra: str) -> Running:
    running = launcher.start(
        "0.5.23",
        ["--model-path", str(model_dir), "--served-model-name", "qwen-test", *extra],
    )
    running.wait_for(READY)
    return running


def test_without_enable_metrics_metrics_is_fastapis_404(
    launcher: Launcher, model_dir: Path
) -> None:
    running = _start(launcher, model_dir)
    status, body = running.get("/metrics")
    assert (status, json.loads(body)) == (404, {"detail": "Not Found"})


def test_metrics_in_sglangs_format_agree_with_v1_loads(launcher: Launcher, model_dir: Path) -> None:
    running = _start(launcher, model_dir, "--enable-metrics", "--tp", "2")
    status, body = running.get("/metrics")
    assert status == 200
    samples = _samples(body.decode())
    (only,) = samples["sglang:num_running_reqs"]  # TP rank 1 is not a stats-logging rank
    labels, value = only
    assert labels == {
        "model_name": "qwen-test",
        "engine_type": "unified",
        "tp_rank": "0",
        "pp_rank": "0",
        "moe_ep_rank": "0",
    }
    (load,) = running.get_json("/v1/loads")["loads"]
    assert value == load["num_running_reqs"] == 0
    assert samples["sglang:num_queue_reqs"][0][1] == load["num_waiting_reqs"]
    assert samples["sglang:max_total_num_tokens"][0][1] == load["max_total_num_tokens"] > 0
    for name in ("token_usage", "gen_throughput", "cache_hit_rate", "num_used_tokens"):
        assert samples[f"sglang:{name}"][0][1] == load[name]
    assert "num_requests_running" not in body.decode()  # not SGLang's name (ROUND3 §1.2)


def test_all_schedulers_report_with_their_tp_rank(launcher: Launcher, model_dir: Path) -> None:
    running = _start(
        launcher,
        model_dir,
        "--enable-metrics",
        "--enable-metrics-for-all-schedulers",
        "--tp",
        "2",
    )
    samples = _samples(running.get("/metrics")[1].decode())
    ranks = [labels["tp_rank"] for labels, _ in samples["sglang:num_running_reqs"]]
    assert ranks == ["0", "1"]


def test_a_groups_rank_1_serves_its_schedulers_on_the_dummy_server(
    launcher: Launcher, model_dir: Path
) -> None:
    dist_port = free_port()

    def node(rank: int) -> Running:
        return launcher.start(
            "0.5.23",
            [
                "--model-path",
                str(model_dir),
                "--tp",
                "2",
                "--nnodes",
                "2",
                "--node-rank",
                str(rank),
                "--dist-init-addr",
                f"127.0.0.1:{dist_port}",
                "--enable-metrics",
                "--enable-metrics-for-all-schedulers",
            ],
        )

    worker = node(1)
    time.sleep(0.3)
    leader = node(0)
    leader.wait_for(READY)
    worker.wait_for(DUMMY.format(port=worker.port))
    leader_samples = _samples(leader.get("/metrics")[1].decode())
    worker_samples = _samples(worker.get("/metrics")[1].decode())
    assert [labels["tp_rank"] for labels, _ in leader_samples["sglang:num_running_reqs"]] == ["0"]
    assert [labels["tp_rank"] for labels, _ in worker_samples["sglang:num_running_reqs"]] == ["1"]
