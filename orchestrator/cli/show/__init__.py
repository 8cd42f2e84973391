"""Every text and --json shape orch prints."""
