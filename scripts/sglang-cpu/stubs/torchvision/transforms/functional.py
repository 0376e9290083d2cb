"""Stub of ``torchvision.transforms.functional`` (see ``torchvision/__init__.py`` of this stub).

``sglang.srt.multimodal.internvl_utils`` does
``from torchvision.transforms.functional import InterpolationMode`` at import time
and ``sglang.srt.configs.deepseek_ocr`` imports this module as ``TF``.  Only the
``InterpolationMode`` enum (same members and values as torchvision's) is provided;
every other attribute is a function that raises when called.
"""

from enum import Enum
from typing import Any, NoReturn


class InterpolationMode(Enum):
    """Same members and values as ``torchvision.transforms.InterpolationMode``."""

    NEAREST = "nearest"
    NEAREST_EXACT = "nearest-exact"
    BILINEAR = "bilinear"
    BICUBIC = "bicubic"
    BOX = "box"
    HAMMING = "hamming"
    LANCZOS = "lanczos"


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def _unavailable(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(
            f"torchvision.transforms.functional.{name} is a stub in the sglang CPU venv "
            "(scripts/sglang-cpu/stubs); image preprocessing is not available"
        )

    _unavailable.__name__ = name
    return _unavailable
