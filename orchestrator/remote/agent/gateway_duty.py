"""What a supervisor does at its server's gateway on its own, without orch (issue 30, item 5):
out of the gateway as soon as the server failed (before the restart: the gateway stops routing
to a dead URL at once, not after its own health checks, 60 s apart by default), back in once a
run the supervisor restarted is READY (the first run of a ``start`` is orch's to register, after
its own checks).

Never a reason to keep a healthy server down, nor to hold the supervisor's loop for long: each
call to the gateway is bounded (gateway.CALL_TIMEOUT_S), the take-out is one or two calls, and
the registration is a small state machine advanced by ``tick`` from the loop, one look per
POLL_S: wait until smg let go of the old entry (it drains a removed worker for ~5 s and refuses
the same URL meanwhile), ``POST /workers``, wait until it lists the server ready and healthy, at
most ``ready_timeout_s``. What fails is a warning: the state's ``gateway.error`` and a
``gateway_error`` event; what is done is a ``gateway_deregistered`` / ``gateway_registered``
event, stamped like every event, so that the order with the run's exit, start and READY shows.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .gateway import Exchange, GatewaySpec, GatewayTrouble, SmgWorkers
from .smg import GatewayWorker

POLL_S = 0.5  # between two looks at the gateway while registering

# state.json's gateway.status
UNTOUCHED = "untouched"  # the agent has done nothing there (orch registers a start's first run)
DEREGISTERED = "deregistered"
REGISTERING = "registering"
REGISTERED = "registered"
FAILED = "failed"  # the last registration did not end ready: see gateway.error

_WAIT_GONE = "wait-gone"
_WAIT_READY = "wait-ready"


class GatewayDuty:
    """One supervisor's dealings with its server's gateway. ``event`` records an event,
    ``note`` writes the state's ``gateway`` view; ``monotonic`` and ``wall`` are the
    supervisor's clock."""

    @classmethod
    def of(cls, spec: GatewaySpec | None, supervisor: Any) -> GatewayDuty | None:
        """The duty of a supervisor whose spec names a gateway (None when it names none): its
        world's exchange, its clock, its events and state."""
        if spec is None:
            return None
        return cls(
            spec,
            supervisor.world.gateway_exchange,
            monotonic=supervisor.clock.monotonic,
            wall=supervisor.clock.wall,
            event=supervisor.event,
            note=lambda view: supervisor.update(gateway=view),
        )

    def __init__(
        self,
        spec: GatewaySpec,
        exchange: Exchange,
        *,
        monotonic: Callable[[], float],
        wall: Callable[[], float],
        event: Callable[..., None],
        note: Callable[[dict[str, Any]], None],
    ) -> None:
        self.spec = spec
        self._workers = SmgWorkers(spec, exchange)
        self._monotonic = monotonic
        self._wall = wall
        self._event = event
        self._note = note
        self._view: dict[str, Any] = {
            "url": spec.url,
            "worker_url": spec.worker_url,
            "status": UNTOUCHED,
            "since": None,
            "error": None,
            "error_at": None,
        }
        self._out_for: str | None = None  # the run already taken out
        # a registration in progress: its phase, run, deadline, next look, start
        self._phase: str | None = None
        self._run_id: str | None = None
        self._deadline = 0.0
        self._next_look = 0.0
        self._began = 0.0
        self._removed_stale = False
        self._last_trouble: str | None = None

    def view(self) -> dict[str, Any]:
        return dict(self._view)

    @property
    def registering(self) -> bool:
        return self._phase is not None

    # -- out -------------------------------------------------------------------------------

    def take_out(self, run_id: str) -> None:
        """The run ended by failure (or is being ended by the supervisor): out of the gateway
        now, once per run. A registration still in progress is dropped."""
        if self._out_for == run_id:
            return
        self._out_for = run_id
        self._phase = None
        began = self._monotonic()
        try:
            worker = self._workers.listed()
            removed = worker is not None and self._workers.remove(worker.id)
        except GatewayTrouble as trouble:
            self._trouble("deregister", run_id, str(trouble), final=True)
            return
        self._event(
            "gateway_deregistered",
            run_id=run_id,
            gateway=self.spec.url,
            worker_url=self.spec.worker_url,
            was_listed=worker is not None,
            status_was=None if worker is None else worker.status,
            removed=removed,
            took_s=round(self._monotonic() - began, 3),
        )
        self._set(DEREGISTERED, error=None)

    # -- back in ---------------------------------------------------------------------------

    def bring_back(self, run_id: str) -> None:
        """A run the supervisor restarted is READY: register it again (advanced by ``tick``)."""
        now = self._monotonic()
        self._phase = _WAIT_GONE
        self._run_id = run_id
        self._began = now
        self._deadline = now + self.spec.ready_timeout_s
        self._next_look = now
        self._removed_stale = False
        self._last_trouble = None
        self._set(REGISTERING)
        self.tick()

    def cancel(self) -> None:
        """The run ended: a registration in progress is dropped (said in the state)."""
        if self._phase is not None:
            self._phase = None
            self._set(FAILED, error=self._view.get("error") or "the server ended while registering")

    def tick(self) -> None:
        """One look at the gateway when one is due, while a registration is in progress."""
        if self._phase is None:
            return
        now = self._monotonic()
        if now < self._next_look:
            return
        self._next_look = now + POLL_S
        run_id = str(self._run_id)
        try:
            worker = self._workers.listed()
            if self._phase == _WAIT_GONE:
                self._wait_gone(worker)
            elif worker is not None and worker.ready and worker.healthy is not False:
                self._registered(run_id, worker, already=False)
                return
        except GatewayTrouble as trouble:
            if self._monotonic() >= self._deadline:
                self._trouble("register", run_id, str(trouble), final=True)
                self._phase = None
                return
            self._trouble("register", run_id, str(trouble), final=False)
            return
        if self._phase is not None and self._monotonic() >= self._deadline:
            said = "not listed" if worker is None else f"status {worker.status}"
            why = (
                f"gateway {self.spec.url}: {self.spec.worker_url} not ready there within "
                f"{self.spec.ready_timeout_s:g} s ({said})"
            )
            self._trouble("register", run_id, why, final=True)
            self._phase = None

    def _wait_gone(self, worker: GatewayWorker | None) -> None:
        """Before ``POST /workers``: smg refuses a URL it still lists (draining after the
        take-out). One listed ready and healthy is left as it is; one listed otherwise (a
        take-out that failed, a worker smg marked unhealthy) is removed first, once."""
        if worker is None:
            self._workers.add()
            self._phase = _WAIT_READY
            return
        if worker.ready and worker.healthy is not False:
            self._registered(str(self._run_id), worker, already=True)
        elif worker.status != "draining" and not self._removed_stale:
            self._workers.remove(worker.id)
            self._removed_stale = True

    def _registered(self, run_id: str, worker: GatewayWorker, *, already: bool) -> None:
        self._phase = None
        self._event(
            "gateway_registered",
            run_id=run_id,
            gateway=self.spec.url,
            worker_url=self.spec.worker_url,
            worker_id=worker.id,
            already_listed=already,
            waited_s=round(self._monotonic() - self._began, 3),
        )
        self._set(REGISTERED, error=None)

    # -- the record --------------------------------------------------------------------------

    def _trouble(self, action: str, run_id: str, message: str, *, final: bool) -> None:
        """A warning: in the state at once; an event when it is new or final."""
        if final or message != self._last_trouble:
            self._event("gateway_error", run_id=run_id, action=action, message=message, final=final)
        self._last_trouble = message
        if final:
            self._set(FAILED if action == "register" else self._view["status"], error=message)
        else:
            self._set(self._view["status"], error=message)

    def _set(self, status: str, **fields: Any) -> None:
        view = dict(self._view)
        if status != view["status"]:
            view.update(status=status, since=self._wall())
        if "error" in fields:
            view["error"] = fields["error"]
            view["error_at"] = None if fields["error"] is None else self._wall()
        self._view = view
        self._note(view)
