"""``sglang.srt`` of orch's SGLang stand-in (NOT SGLang): only what SGLang's entry points use
before a server starts -- ``server_args`` (parsing and resolution) and ``plugins``."""
