"""The effective configuration: predicted (plan), compared (verify), across releases (upgrade)."""
