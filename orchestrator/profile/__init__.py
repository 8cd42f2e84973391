"""YAML -> Profile: the store, its checks, the YAML document, GPU types. Pure."""
