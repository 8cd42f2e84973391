"""The supervisor's states and their allowed transitions: one table (TRANSITIONS), and every
state change goes through Supervisor.change_state, which refuses a pair the table does not hold
(supervisor's change_state/_assertInState). orch imports these names: both sides mean the same
by a state."""

from __future__ import annotations

STARTING = "STARTING"  # spawned (or about to be); SGLang has not accepted its configuration yet
RUNNING = "RUNNING"  # the config line (server_args=) was logged: loading, capturing graphs
READY = "READY"  # /health answered 200 after SGLang accepted its configuration
UNHEALTHY = "UNHEALTHY"  # after READY, /health failed health.failures times in a row: stopping it
BACKOFF = "BACKOFF"  # exited; waiting to start again
STOPPING = "STOPPING"  # stop requested: SIGTERM to the group, grace, SIGKILL
EXITED = "EXITED"  # stopped on request, or exited and not to be restarted
FATAL = "FATAL"  # will not be restarted: deterministic error, start limit hit, or agent error
STATES = (STARTING, RUNNING, READY, UNHEALTHY, BACKOFF, STOPPING, EXITED, FATAL)
INITIAL_STATE = STARTING
# Not a state of a supervisor but what ``status`` reports when there is none: the supervisor died
# (OOM killer, crash, reboot of the agent alone) and its server, verified by identity, still runs.
UNSUPERVISED = "UNSUPERVISED"

# Every state but the terminal ones can also go to FATAL: the agent's own error (cmd_start).
TRANSITIONS: dict[str, frozenset[str]] = {
    # config line seen; the ready line alone (after its grace) even without one; stop; exit
    STARTING: frozenset({RUNNING, STOPPING, BACKOFF, EXITED, FATAL}),
    RUNNING: frozenset({READY, STOPPING, BACKOFF, EXITED, FATAL}),
    # liveness: /health failed health.failures times in a row after READY
    READY: frozenset({UNHEALTHY, STOPPING, BACKOFF, EXITED, FATAL}),
    # the hung server is being stopped; then the restart policy applies as after any exit
    UNHEALTHY: frozenset({STOPPING, BACKOFF, EXITED, FATAL}),
    # the next server spawned; stopped while waiting; a restart that could not spawn (FATAL)
    BACKOFF: frozenset({STARTING, EXITED, FATAL}),
    STOPPING: frozenset({EXITED, FATAL}),
    EXITED: frozenset(),
    FATAL: frozenset(),
}
TERMINAL_STATES = tuple(state for state in STATES if not TRANSITIONS[state])  # EXITED, FATAL


class IllegalTransition(RuntimeError):
    """A state change the table does not allow: a bug in the agent, never a server's doing."""


def check_transition(current: str, new: str) -> None:
    if new not in TRANSITIONS.get(current, frozenset()):
        allowed = ", ".join(sorted(TRANSITIONS.get(current, ()))) or "nothing (terminal)"
        raise IllegalTransition(f"{current} -> {new}: {current} may go to {allowed}")
