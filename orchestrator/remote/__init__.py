"""The two files orch pushes to a host and runs there with the host's SGLang python.

Each is ONE file, standard library (+ psutil for the agent), importing nothing from orch:
``agent.py`` (the supervisor and its commands) and ``sglang_probe.py`` (SGLang's own parsing and
resolution, no server). orch imports the agent's pure parts (states, log vocabulary, exit
classes) so that both sides read a log and a state the same way.
"""
