"""Inert stand-in for ``torchvision`` in orch's CPU-only SGLang venvs.

Installed by ``scripts/build-sglang-venv.sh`` into the venv's site-packages.
SGLang imports ``torchvision.io.decode_jpeg`` (at import time in 0.5.11,
lazily later) and transformers imports parts of ``torchvision.io`` and
``torchvision.transforms`` at import time once the package is importable, but
PyPI's torchvision wheels fail to import next to the CPU build of torch
(``operator torchvision::nms does not exist``).  Parsing and resolving
SGLang's server arguments never touches an image, so this package only has to
make those imports succeed: every public name in these modules is a
placeholder (see ``_inert.py``) that raises ``RuntimeError`` when called.
"""

from torchvision._inert import module_getattr

__version__ = "0.0.0+orch.stub"
ORCH_STUB = True

__getattr__ = module_getattr(__name__)
