"""``python -m orchestrator.remote.probe REQUEST.json|-``; in a bundle, what its ``__main__.py``
runs."""

from orchestrator.remote.probe.main import main

if __name__ == "__main__":
    raise SystemExit(main())
