"""What orch and the agent agree on besides the states, the log lines and the verdicts: the
protocol's version (every answer carries it; a spec of another is refused) and the files kept
beside each run's log that orch's diff-effective reads."""

from __future__ import annotations

PROTOCOL = 1

CONFIG_FILE = "server_args.json"  # its config line and what SGLang logged before, by the watcher
MEMORY_FILE = "memory_lines.json"  # SGLang's startup memory lines (the plan's check)
RECEIVED_FILE = "received.json"  # what the server was exec'd with
