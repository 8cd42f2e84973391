"""What orch knows of SGLang per release: argument tables, the config line, logs, memory. Pure."""
