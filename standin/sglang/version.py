"""The SGLang release orch's stand-in (NOT SGLang) imitates: ``ORCH_STANDIN_VERSION``, 0.5.23."""

import os

__version__ = os.environ.get("ORCH_STANDIN_VERSION", "0.5.23")
