"""Profile -> Kubernetes, SkyPilot, dstack. Pure."""
