"""Launch scripts -> profiles, and --check. Pure."""
