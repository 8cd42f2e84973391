"""``python -m orchestrator.transport.mux``: the kept connection's server (``server.main``)."""

from orchestrator.transport.mux.server import main

raise SystemExit(main())
