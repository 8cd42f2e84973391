"""What orch pushes to a host and runs there with the host's SGLang python, importing nothing
of orch's (standard library, + psutil for the agent): the agent package (``agent/``: the
supervisor and its commands) and ``sglang_probe.py`` (SGLang's own parsing and resolution, no
server). orch imports only the agent's vocabulary (states, sglang_log, verdict, protocol), so
that both sides read a log and a state the same way without orch loading the supervisor.
"""
