"""The programs orch pushes to a host and runs there with the host's SGLang python.

Each travels as ONE bundle (fleet/bundle.py: a deterministic zip, checked by sha256 and run from
the checked bytes by fleet/bootstrap.py), standard library (+ psutil for the agent), importing
nothing of orch's outside this package: ``agent`` (the supervisor and its commands), ``probe``
(SGLang's own parsing and resolution, no server) and ``host`` (what both read of the host: the
GPUs; running themselves again). orch imports only the agent's vocabulary (states, sglang_log,
verdict, protocol), so that both sides read a log and a state the same way without orch loading
the supervisor.
"""
