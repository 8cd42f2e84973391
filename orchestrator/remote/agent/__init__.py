"""orch's remote agent, as a package: pushed to a host and run there with the host's SGLang
python (3.9+, standard library + psutil), importing nothing of orchestrator's.

Its modules import each other relatively (``from .states import READY``), never by the
absolute name ``orchestrator.remote.agent``: the same code runs here under that name (orch
imports its vocabulary: states, sglang_log, verdict, protocol) and on a host under whatever
top-level name the pushed bundle gives it. Run it as ``python -m orchestrator.remote.agent``
(its ``__main__``) or from the bundle; docs/architecture.md draws the modules.

Vocabulary (orch imports these, and only these): states, sglang_log, verdict, protocol.
The supervisor: supervisor (one server's state machine), journal and record (state.json and
events.jsonl), world (its clock and the OS), output, identity, trust, files, spec, policy,
classify (+ classify_rules); group/ (a launch group's ranks: coordinator, member, the control
channel, the gated launch). The commands: cmd_*.py, dispatched by __main__, detached by daemon.
"""
