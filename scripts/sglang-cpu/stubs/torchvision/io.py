"""Stub of ``torchvision.io`` (see ``torchvision/__init__.py`` of this stub).

transformers 5.19 decides whether torchvision is usable with
``importlib.util.find_spec("torchvision")`` only, so once this stub exists
``transformers.image_utils`` (imported by ``transformers.LlamaConfig`` & co. through
sglang's HF patches) runs ``from torchvision.io import ImageReadMode, decode_image``
at import time.  ``ImageReadMode`` mirrors torchvision's enum; ``decode_image`` and
anything else raise when called.
"""

from enum import Enum
from typing import Any, NoReturn


class ImageReadMode(Enum):
    """Same members and values as ``torchvision.io.ImageReadMode``."""

    UNCHANGED = 0
    GRAY = 1
    GRAY_ALPHA = 2
    RGB = 3
    RGB_ALPHA = 4
    RGBA = 4


def decode_image(*args: Any, **kwargs: Any) -> NoReturn:
    raise RuntimeError(
        "torchvision.io.decode_image is a stub in the sglang CPU venv (scripts/sglang-cpu/stubs)"
    )


def __getattr__(name: str) -> Any:
    if name.startswith("__"):
        raise AttributeError(name)

    def _unavailable(*args: Any, **kwargs: Any) -> NoReturn:
        raise RuntimeError(
            f"torchvision.io.{name} is a stub in the sglang CPU venv (scripts/sglang-cpu/stubs)"
        )

    _unavailable.__name__ = name
    return _unavailable
