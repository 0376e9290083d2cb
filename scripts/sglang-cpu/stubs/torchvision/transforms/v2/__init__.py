"""Stub of ``torchvision.transforms.v2`` (see ``torchvision/__init__.py`` of this stub).

``transformers.image_processing_utils`` and ``transformers.image_processing_backends``
(5.19) run ``from torchvision.transforms.v2 import functional as tvF`` at import time
whenever a ``torchvision`` module can be found, which the stub makes true.
"""

from . import functional

__all__ = ["functional"]
