"""Inert ``torchvision.transforms.functional`` (see ``torchvision/__init__.py``)."""

from torchvision._inert import module_getattr

__getattr__ = module_getattr(__name__)
