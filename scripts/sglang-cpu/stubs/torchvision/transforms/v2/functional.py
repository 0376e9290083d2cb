"""Stub of ``torchvision.transforms.v2.functional`` (see ``torchvision/__init__.py`` of this stub).

Imported as ``tvF`` by ``transformers.image_processing_utils`` /
``image_processing_backends`` at import time.  Re-exports the
``InterpolationMode`` enum of the stub; every other attribute raises when called.
"""

from typing import Any

from torchvision.transforms import functional as _functional
from torchvision.transforms.functional import InterpolationMode

__all__ = ["InterpolationMode"]


def __getattr__(name: str) -> Any:
    return getattr(_functional, name)
