"""Wait for a worker to go idle before it is stopped: its own ``/v1/loads``, from orch's machine.

SGLang's SIGTERM drain waits for in-flight requests without a time limit (0.5.23
``sigterm_watchdog``), so orch bounds the drain itself: after the gateway has let the worker go
it polls ``GET /v1/loads?include=core`` until ``num_running_reqs + num_waiting_reqs`` is 0 over
every DP rank, or the bound passes; the caller then stops the worker either way and says which
("drain cut at 30 s, 2 requests still running"). SGLang exports no ``num_requests_running``
metric (ROUND3-FACTS §1.2): the JSON endpoint is read, and it needs no ``--enable-metrics``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from orchestrator.fleet import http_json

LOADS_PATH = "/v1/loads?include=core"
LOADS_TIMEOUT_S = 5.0  # answered by the tokenizer manager, fast under load
IDLE_POLL_S = 0.5


@dataclass(frozen=True)
class IdleWait:
    """How a wait for idle ended."""

    idle: bool  # the worker answered running + waiting = 0 within the bound
    waited_s: float
    running: int | None  # the last answer's sums (None: no answer was read)
    waiting: int | None
    problem: str | None = None  # the last read that failed (unreachable, not SGLang's JSON)


def read_load(
    url: str, *, api_key: str | None, timeout_s: float = LOADS_TIMEOUT_S
) -> tuple[int, int]:
    """(running, waiting) summed over the worker's DP ranks from its ``/v1/loads``. Raises
    :class:`http_json.Unreachable` when it does not answer, ValueError when the answer is not
    SGLang's loads JSON (0.5.11's and 0.5.23's shapes both carry these two per load)."""
    base = http_json.base_url(url, "worker URL")
    reply = http_json.exchange("GET", base + LOADS_PATH, key=api_key, timeout_s=timeout_s)
    payload = reply.json()
    if reply.status != 200 or not isinstance(payload, dict):
        raise ValueError(f"/v1/loads answered HTTP {reply.status}: {reply.text(120)}")
    loads = payload.get("loads")
    if not isinstance(loads, list):
        raise ValueError("/v1/loads answered JSON without a loads list")
    running = waiting = 0
    for load in loads:
        if not isinstance(load, dict):
            raise ValueError("/v1/loads answered a load that is not an object")
        run, wait = load.get("num_running_reqs"), load.get("num_waiting_reqs")
        if not isinstance(run, int) or not isinstance(wait, int):
            raise ValueError("/v1/loads answered a load without num_running_reqs/num_waiting_reqs")
        running += run
        waiting += wait
    return running, waiting


def wait_idle(
    url: str,
    timeout_s: float,
    *,
    api_key: str | None = None,
    poll_s: float = IDLE_POLL_S,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> IdleWait:
    """Poll the worker at ``url`` until it has no request running or waiting, at most
    ``timeout_s``. Never raises for the worker's sake: a worker that stops answering is a wait
    that did not end idle (``problem`` says why), and the caller decides."""
    start = clock()
    running: int | None = None
    waiting: int | None = None
    problem: str | None = None
    while True:
        try:
            running, waiting = read_load(url, api_key=api_key)
            problem = None
        except http_json.Unreachable as exc:
            problem = f"{url} does not answer: {exc.reason}"
        except ValueError as exc:
            problem = f"{url}: {exc}"
        waited = clock() - start
        if problem is None and running == 0 and waiting == 0:
            return IdleWait(True, waited, running, waiting)
        if waited >= timeout_s:
            return IdleWait(False, waited, running, waiting, problem)
        sleep(min(poll_s, max(timeout_s - waited, 0.0)))
