"""The ``sglang`` command of orch's SGLang stand-in (NOT SGLang)."""
