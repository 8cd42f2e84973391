"""The agent protocol on orch's side, one module per agent command, each holding the command's
request (its argv after the bootstrap, what goes on its stdin, how long orch waits: a
``common.Request``) beside the decoder of its answer: ``status``, ``start`` (and ``adopt``, and
the run spec orch sends, read by the agent's ``Spec.from_json``), ``watch``, ``stop``, ``runs``,
``tail``, ``probe``, ``inspect``, ``plan`` (``sglang_probe``'s answer) and ``reach`` (``listen``
and ``reach``, a group's network). Every answer is decoded into a frozen value (no JSON dictionary
travels further up than this package); a wrong shape is a SupervisorError naming the answer and
the key (``common.Reader``).

``tests/unit/test_protocol.py`` checks both directions against the agent's own code, and the
decoders against answers of the previous agent version: a host may still run a supervisor
started by an older orch, and its ``state.json`` must decode.
"""
