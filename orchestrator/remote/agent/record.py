"""state.json: what a supervisor records of its deployment (AgentState), replaced whole on every
change. Its JSON is the agent protocol's (orch decodes it: fleet/protocol.py): every key a
supervisor of this version writes is a field here, written whether set or not, but for the few
written only once they have a value (LATER_KEYS); keys of another agent version's state (one
this supervisor resumes) are kept as they were."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .files import NO_DISK_TROUBLE
from .protocol import PROTOCOL
from .states import INITIAL_STATE

# Written once set: a state.json without them is one of a single server (group), or of a server
# not spawned yet (its memory figures, or why there are none, asked once READY), or of a server
# behind no gateway (gateway: what the agent did there, gateway_duty.py).
# ``reconfigured``: the last new spec a running supervisor took (reload.py). ``load``: the last
# /v1/loads figures sampled while READY (load_watch.py), kept after the server ends.
LATER_KEYS = frozenset(
    {"group", "memory_loads", "memory_loads_error", "gateway", "reconfigured", "load"}
)


@dataclass
class AgentState:
    """One supervisor's record of its deployment, mutable under the journal's lock (journal.py)
    and changed only through ``update`` (the state itself through Supervisor.change_state)."""

    deployment: str
    port: int
    meta: dict[str, Any]  # plan hash, git commit ...: the spec's, echoed
    state: str = INITIAL_STATE
    protocol: int = PROTOCOL
    agent_pid: int | None = None
    agent: dict[str, Any] | None = None  # the supervisor's identity: checked before "alive"
    identity_recorded: bool = True  # "server": None then means no server, not an old agent
    pid: int | None = None
    pgid: int | None = None
    server: dict[str, Any] | None = None  # the server's identity (process_identity) while it runs
    run_id: str | None = None
    run_dir: str | None = None
    log: str | None = None
    received: str | None = None  # runs/<id>/received.json: what the server was exec'd with
    starts: int = 0
    restarts: int = 0
    ready: bool = False
    health_failures: int = 0  # consecutive /health failures after READY
    adopted: bool = False  # a server this supervisor took over from a dead one
    output_lost: bool = False  # its output went with the dead supervisor's pipe
    disk: dict[str, Any] = field(default_factory=lambda: dict(NO_DISK_TROUBLE))  # no room
    started_at: float | None = None
    started_mono: float | None = None
    ready_at: float | None = None
    ready_by: str | None = None  # "health": READY means /health answered 200
    state_since: float | None = None
    next_start_at: float | None = None
    last_exit: dict[str, Any] | None = None
    message: str = ""
    extra: dict[str, Any] = field(default_factory=dict)  # LATER_KEYS once set; others' keys

    def update(self, fields: Mapping[str, Any]) -> None:
        """Set these keys; KeyError for one state.json has no room for (a misspelt name)."""
        for name, value in fields.items():
            if name in _FIELDS:
                setattr(self, name, value)
            elif name in LATER_KEYS:
                self.extra[name] = value
            else:
                raise KeyError(f"state.json has no {name!r}")

    def to_json(self) -> dict[str, Any]:
        document = {name: getattr(self, name) for name in _FIELDS}
        document.update(self.extra)
        return document

    @staticmethod
    def from_json(document: Mapping[str, Any]) -> AgentState:
        """A state as a supervisor recorded it (this version's or another's: what it lacks is
        the fields' defaults, what this version does not know is kept in ``extra``)."""
        known = {name: document[name] for name in _FIELDS if name in document}
        record = AgentState(
            deployment=str(document.get("deployment") or ""),
            port=int(document.get("port") or 0),
            meta=dict(document.get("meta") or {}),
        )
        record.update(known)
        record.extra = {key: value for key, value in document.items() if key not in _FIELDS}
        return record


_FIELDS = tuple(f.name for f in dataclasses.fields(AgentState) if f.name != "extra")
